"""The quickstart MCP server inside a Starlette app, beside an ordinary route that reads the same session.

Serve it:  MCP_SESSIONS_SECRET=... uvicorn examples.starlette_app:app --port 8000

- POST /mcp          the MCP endpoint (tools count, whoami, set_mode, get_mode, countdown)
- GET  /session      an ordinary route: send ``Mcp-Session-Id: <sessionId>`` and it answers with the
                     session's stable id and the counter the ``count`` tool keeps in ``session.data``
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from examples.quickstart import SESSION_TOOLS, build_server
from mcp_sessions import MCPSessionMiddleware, SessionsConfig, get_session


async def session_info(request: Request) -> JSONResponse:
    """The session named by the request's ``Mcp-Session-Id`` header, as an ordinary route sees it."""
    session = get_session(request)
    if session is None:
        return JSONResponse({"session": None})
    return JSONResponse(
        {
            "session": session.id,  # the stable id, never session.token (a bearer secret)
            "count": await session.data.get("count", 0),
            "expires_at": session.expires_at.isoformat(),
        }
    )


def build_app(*, environ: Mapping[str, str] | None = None, **options: Any) -> Starlette:
    """A Starlette app with the MCP endpoint at /mcp and GET /session, behind the session middleware.

    ``environ`` (default ``os.environ``) supplies ``MCP_SESSIONS_*``; ``options`` go to
    :meth:`SessionsConfig.from_env`, which runs here, so a missing secret fails now, at startup.
    """
    options.setdefault("require_session_tools", SESSION_TOOLS)
    # Only POST /mcp is JSON-RPC: other routes' bodies are not read, and their Mcp-Session-Id header is honoured.
    options.setdefault("path", "/mcp")
    config = SessionsConfig.from_env(environ=environ, **options)
    mcp = build_server()
    # The MCP app keeps its own route at /mcp and is mounted at "/": mounting it at "/mcp" with
    # streamable_http_path="/" would make POST /mcp answer 307 (a redirect to /mcp/).
    mcp_app = mcp.streamable_http_app(streamable_http_path="/mcp")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # A mounted app's lifespan never runs: the parent starts the MCP session manager itself.
        async with mcp.session_manager.run():
            yield

    return Starlette(
        routes=[
            Route("/session", session_info),
            Mount("/", app=mcp_app),  # last: it matches every path
        ],
        middleware=[Middleware(MCPSessionMiddleware, config=config)],
        lifespan=lifespan,
    )


app: Starlette  # built on first access, see __getattr__


def __getattr__(name: str) -> Any:
    # `uvicorn examples.starlette_app:app` builds the app on first access (reading MCP_SESSIONS_* then).
    if name == "app":
        global app
        app = build_app(environ=os.environ)
        return app
    raise AttributeError(name)
