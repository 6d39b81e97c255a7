"""A fastmcp server whose tool keeps a per-conversation counter in a data-layer session.

Serve it:  MCP_SESSIONS_SECRET=... uvicorn examples.fastmcp_app:app --port 8000

On the 2026-07-28 wire every request is a fresh transport session, so fastmcp's own ``ctx.set_state``
forgets everything between calls. The data-layer session survives: the client opens it with
``sessions/create`` and names it in each request's ``_meta``; the tool finds it with ``get_session()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from fastmcp import FastMCP

# Not fastmcp.server.dependencies.get_session (that one returns the transport session, new on every
# 2026-07-28 request): this is the data-layer session the middleware verified.
from mcp_sessions import MCPSessionMiddleware, get_session

SESSION_TOOLS = frozenset({"count"})


def build_server() -> FastMCP:
    mcp = FastMCP("fastmcp-sessions")

    @mcp.tool
    async def count() -> int:
        """Add one to this conversation's counter and return it."""
        session = get_session()
        assert session is not None  # the middleware answers -32044 before this tool runs without one
        return await session.data.incr("count")

    @mcp.tool
    async def whoami() -> str:
        """The stable id of this conversation's session, or 'none'."""
        session = get_session()
        return session.id if session is not None else "none"

    return mcp


def build_app(*, environ: Mapping[str, str] | None = None, **options: Any) -> MCPSessionMiddleware:
    """The fastmcp app (MCP endpoint at /mcp) wrapped by the session middleware.

    The middleware passes the lifespan through, so fastmcp's own lifespan runs as usual.
    ``environ`` (default ``os.environ``) supplies ``MCP_SESSIONS_*``; ``options`` go to
    :meth:`MCPSessionMiddleware.from_env`.
    """
    options.setdefault("require_session_tools", SESSION_TOOLS)
    return MCPSessionMiddleware.from_env(build_server().http_app(path="/mcp"), environ=environ, **options)


app: MCPSessionMiddleware  # built on first access, see __getattr__


def __getattr__(name: str) -> Any:
    # `uvicorn examples.fastmcp_app:app` builds the app on first access (reading MCP_SESSIONS_* then).
    if name == "app":
        global app
        app = build_app(environ=os.environ)
        return app
    raise AttributeError(name)
