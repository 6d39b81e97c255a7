"""An MCPServer with data-layer sessions, added by one middleware.

Serve it:  MCP_SESSIONS_SECRET=... uvicorn examples.quickstart:app --port 8000
or:        MCP_SESSIONS_SECRET=... python examples/quickstart.py --port 8000
(MCP_SESSIONS_DEV=1 instead of a secret uses a throwaway key.)

SSE responses by default; QUICKSTART_JSON=1 answers with plain JSON.
QUICKSTART_STATELESS=1 makes the 2025-era (handshake) path stateless.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Mapping
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_sessions import MCPSessionMiddleware, get_session

app: MCPSessionMiddleware  # built on first access, see __getattr__

SESSION_TOOLS = frozenset({"count", "set_mode", "get_mode", "countdown"})


def build_server() -> MCPServer:
    """A fresh MCPServer with the quickstart's tools (an instance serves one lifespan)."""
    mcp = MCPServer("quickstart")

    @mcp.tool()
    async def count() -> int:
        """Add one to this conversation's counter and return it."""
        session = get_session()
        assert session is not None  # the middleware requires a session for this tool
        return await session.data.incr("count")

    @mcp.tool()
    async def whoami() -> str:
        """The stable id of this conversation's session, or 'none'."""
        session = get_session()
        return session.id if session is not None else "none"

    @mcp.tool()
    async def set_mode(mode: str) -> str:
        """Remember a short mode string in the client-held session state."""
        session = get_session()
        assert session is not None
        session.state = {**session.state, "mode": mode}
        return mode

    @mcp.tool()
    async def get_mode() -> str:
        """The mode stored in the client-held session state, or 'unset'."""
        session = get_session()
        assert session is not None
        return str(session.state.get("mode", "unset"))

    @mcp.tool()
    async def countdown(n: int, ctx: Context) -> str:
        """Send n progress notifications about 0.2 s apart, then return 'done'."""
        for i in range(n):
            await ctx.report_progress(i + 1, n, f"{n - i - 1} to go")
            await asyncio.sleep(0.2)
        return "done"

    return mcp


def build_app(
    *,
    json_response: bool | None = None,
    stateless: bool | None = None,
    environ: Mapping[str, str] | None = None,
    **options: Any,
) -> MCPSessionMiddleware:
    """The quickstart ASGI app: the MCP endpoint at /mcp behind the session middleware.

    Unset arguments come from the environment (QUICKSTART_JSON, QUICKSTART_STATELESS,
    MCP_SESSIONS_*); ``options`` go to :meth:`MCPSessionMiddleware.from_env`.
    """
    env = os.environ if environ is None else environ
    if json_response is None:
        json_response = env.get("QUICKSTART_JSON") == "1"
    if stateless is None:
        stateless = env.get("QUICKSTART_STATELESS") == "1"
    mcp_app = build_server().streamable_http_app(
        streamable_http_path="/mcp", json_response=json_response, stateless_http=stateless
    )
    options.setdefault("require_session_tools", SESSION_TOOLS)
    return MCPSessionMiddleware.from_env(mcp_app, environ=env, **options)


def __getattr__(name: str) -> Any:
    # `uvicorn examples.quickstart:app` builds the app on first access, so that
    # importing build_app (tests, other examples) needs no configuration.
    if name == "app":
        global app
        app = build_app()
        return app
    raise AttributeError(name)


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(build_app(), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
