"""The middleware's ``subscriptions=`` option: checked at construction, and what a tool sees without it.

In process where no socket matters; a listen stream, read while it stays open, through a real server."""

from __future__ import annotations

import gc

import httpx
import pytest
from mcp.server.mcpserver import MCPServer

from _mcp import MCP_PATH, ModernClient, modern_headers, modern_request, session_meta, tool_text
from conftest import SECRET, in_process, serve
from mcp_sessions import MCPSessionMiddleware, SessionsConfig, get_session
from mcp_sessions.subscriptions import SessionSubscriptionBus


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
    with in_process(app) as http:
        client = ModernClient(http, "")
        session = client.create_session()
        _, message = client.call_tool("notify", session=session_meta(session))
    assert tool_text(message) == (
        "no subscription bus is known: pass the SessionSubscriptionBus given to MCPServer(subscriptions=bus) "
        "to the middleware too, MCPSessionMiddleware(app, subscriptions=bus)"
    )


# The SDK's ListenHandler opens a memory stream pair before it subscribes, and leaves it unclosed when
# subscribe() refuses (as at the bus's per-session limit): collected below, within this test.
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_bus_given_to_the_server_only_refuses_a_sessions_stream_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Given once, to MCPServer: a session's listen would open on a stream nothing ends or publishes to."""
    bus = SessionSubscriptionBus()
    mcp = MCPServer("bus-to-the-server-only", subscriptions=bus)
    app = MCPSessionMiddleware(mcp.streamable_http_app(json_response=True), secret=SECRET)
    listen = {"notifications": {"resourceSubscriptions": ["note://x"]}}
    with in_process(app) as http, caplog.at_level("WARNING", "mcp_sessions"):
        client = ModernClient(http, "")
        _, refused = client.request("subscriptions/listen", listen, session=session_meta(client.create_session()))
    assert refused["error"] == {
        "code": -32603,
        "message": "Listen streams in a session are not served here: see the server's log",
    }
    assert "pass the same object to both, MCPServer(subscriptions=bus) and MCPSessionMiddleware" in caplog.text
    gc.collect()


@pytest.mark.parametrize("to_the_server", [False, True])
def test_a_bus_given_to_the_middleware_only_is_named_in_the_log(
    caplog: pytest.LogCaptureFixture, to_the_server: bool
) -> None:
    """Given once, to the middleware: the server streams from its own bus, which a session's events never reach."""
    bus = SessionSubscriptionBus()
    mcp = MCPServer("listen", subscriptions=bus if to_the_server else None)
    app = MCPSessionMiddleware(mcp.streamable_http_app(), secret=SECRET, subscriptions=bus)
    with serve(app) as url, httpx.Client(timeout=10) as http, caplog.at_level("WARNING", "mcp_sessions"):
        session = ModernClient(http, url).create_session()
        body = modern_request("subscriptions/listen", {"notifications": {}}, session=session_meta(session))
        with http.stream("POST", url + MCP_PATH, json=body, headers=modern_headers(body)) as stream:
            first = next(line for line in stream.iter_lines() if line.startswith("data:"))
    assert "notifications/subscriptions/acknowledged" in first  # the stream opened, as the server decided
    named = "build the server with the same bus, MCPServer(subscriptions=bus)" in caplog.text
    assert named is not to_the_server
