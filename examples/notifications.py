"""Listen streams scoped to a session, on every replica: a notes server.

Serve it:  MCP_SESSIONS_SECRET=... uvicorn examples.notifications:app --port 8000
With a Redis store URL in MCP_SESSIONS_STORE (or MCP_SESSIONS_REDIS_URL): one
Redis, a Cluster or Sentinels, the same Redis keeps the sessions and carries the
events between replicas (channels named with MCP_SESSIONS_REDIS_PREFIX); without
one, one process and memory:// do both.

- ``edit_note`` saves a note in this session's data and tells this session's listen
  streams (``notifications/resources/updated`` for ``note://NAME``), on every replica;
- ``publish_note`` tells every listen stream (the SDK's own, global, notification);
- ``add_tool`` announces a changed tool list to every listen stream.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_sessions import MCPSessionMiddleware, get_session
from mcp_sessions.subscriptions import SessionSubscriptionBus

app: MCPSessionMiddleware  # built on first access, see __getattr__


def build_app(environ: Mapping[str, str] | None = None, **options: Any) -> MCPSessionMiddleware:
    """The notes server behind the session middleware, both given the same bus."""
    env = os.environ if environ is None else environ
    store = env.get("MCP_SESSIONS_STORE") or env.get("MCP_SESSIONS_REDIS_URL") or "memory://"
    bus = SessionSubscriptionBus.from_url(store, prefix=env.get("MCP_SESSIONS_REDIS_PREFIX", "mcp-sessions:"))
    mcp = MCPServer("notes", subscriptions=bus)

    @mcp.tool()
    async def edit_note(name: str, text: str) -> str:
        """Save a note of this conversation, and tell this conversation's listen streams."""
        session = get_session()
        assert session is not None  # the middleware requires a session for this tool
        await session.data.set(f"note:{name}", text)
        await session.notify_resource_updated(f"note://{name}")
        return "saved"

    @mcp.tool()
    async def publish_note(name: str, ctx: Context) -> str:
        """Tell every listen stream, of every conversation, that note://NAME changed."""
        await ctx.notify_resource_updated(f"note://{name}")
        return "published"

    @mcp.tool()
    async def add_tool(ctx: Context) -> str:
        """Announce a changed tool list to every listen stream."""
        await ctx.notify_tools_changed()
        return "announced"

    json_response = env.get("QUICKSTART_JSON") == "1"
    options.setdefault("require_session_tools", {"edit_note"})
    return MCPSessionMiddleware.from_env(
        mcp.streamable_http_app(json_response=json_response), environ=env, subscriptions=bus, **options
    )


def __getattr__(name: str) -> Any:
    # `uvicorn examples.notifications:app` builds the app on first access (importing build_app needs no setup).
    if name == "app":
        global app
        app = build_app()
        return app
    raise AttributeError(name)
