"""The middleware's ``subscriptions=`` option: checked at construction, and what a tool sees without it."""

from __future__ import annotations

import httpx
import pytest
from mcp.server.mcpserver import MCPServer

from _mcp import ModernClient, session_meta, tool_text
from conftest import SECRET, serve
from mcp_sessions import MCPSessionMiddleware, SessionsConfig, get_session


def test_a_bus_is_checked_at_construction() -> None:
    with pytest.raises(TypeError, match="SessionSubscriptionBus, the one given to MCPServer"):
        SessionsConfig(secret=SECRET, subscriptions=object())  # type: ignore[arg-type]


def test_notify_without_a_bus_says_what_to_do() -> None:
    mcp = MCPServer("no-bus")

    @mcp.tool()
    async def notify() -> str:
        session = get_session()
        assert session is not None
        try:
            await session.notify_resource_updated("note://x")
        except RuntimeError as exc:
            return str(exc)
        return "published"

    app = MCPSessionMiddleware(mcp.streamable_http_app(json_response=True), secret=SECRET)
    with serve(app) as url, httpx.Client(timeout=10) as http:
        client = ModernClient(http, url)
        session = client.create_session()
        _, message = client.call_tool("notify", session=session_meta(session))
    assert tool_text(message) == (
        "no subscription bus is known: pass the SessionSubscriptionBus given to MCPServer(subscriptions=bus) "
        "to the middleware too, MCPSessionMiddleware(app, subscriptions=bus)"
    )
