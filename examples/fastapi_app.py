"""The quickstart MCP server inside a FastAPI app, beside an endpoint that reads the same session.

Serve it:  MCP_SESSIONS_SECRET=... uvicorn examples.fastapi_app:app --port 8000

- POST /mcp          the MCP endpoint (tools count, whoami, set_mode, get_mode, countdown)
- GET  /session      a FastAPI endpoint: send ``Mcp-Session-Id: <sessionId>`` and it answers with the
                     session's stable id and the counter the ``count`` tool keeps in ``session.data``
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request

from examples.quickstart import SESSION_TOOLS, build_server
from mcp_sessions import MCPSessionMiddleware, Session, SessionsConfig, get_session


def current_session(request: Request) -> Session | None:
    """A FastAPI dependency: the data-layer session named by the ``Mcp-Session-Id`` header, if valid."""
    return get_session(request)


CurrentSession = Annotated[Session | None, Depends(current_session)]


def build_app(*, environ: Mapping[str, str] | None = None, **options: Any) -> FastAPI:
    """A FastAPI app with the MCP endpoint at /mcp and GET /session, behind the session middleware.

    ``environ`` (default ``os.environ``) supplies ``MCP_SESSIONS_*``; ``options`` go to
    :meth:`SessionsConfig.from_env`, which runs here, so a missing secret fails now, at startup.
    """
    options.setdefault("require_session_tools", SESSION_TOOLS)
    # Only POST /mcp is JSON-RPC: other endpoints' bodies are not read, and their Mcp-Session-Id header is honoured.
    options.setdefault("path", "/mcp")
    config = SessionsConfig.from_env(environ=environ, **options)
    mcp = build_server()
    # The MCP app keeps its own route at /mcp and is mounted at "/" (mounting it at "/mcp" with
    # streamable_http_path="/" would make POST /mcp answer 307).
    mcp_app = mcp.streamable_http_app(streamable_http_path="/mcp")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # A mounted app's lifespan never runs: the parent starts the MCP session manager itself.
        async with mcp.session_manager.run():
            yield

    app = FastAPI(title="mcp-sessions FastAPI example", lifespan=lifespan)

    @app.get("/session")
    async def session_info(session: CurrentSession) -> dict[str, Any]:
        if session is None:
            return {"session": None}
        return {
            "session": session.id,  # the stable id, never session.token (a bearer secret)
            "count": await session.data.get("count", 0),
            "expires_at": session.expires_at.isoformat(),
        }

    app.mount("/", mcp_app)  # after the endpoints: the mount matches every path

    app.add_middleware(MCPSessionMiddleware, config=config)
    return app


app: FastAPI  # built on first access, see __getattr__


def __getattr__(name: str) -> Any:
    # `uvicorn examples.fastapi_app:app` builds the app on first access (reading MCP_SESSIONS_* then).
    if name == "app":
        global app
        app = build_app(environ=os.environ)
        return app
    raise AttributeError(name)
