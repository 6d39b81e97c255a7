"""A store the middleware built itself is closed when the app's lifespan shuts down; one passed in is not.

A real redis-server, which counts the connections; the app in process, its lifespan run as a server runs it.
"""

from __future__ import annotations

import httpx
from examples.quickstart import build_app
from starlette.types import Message, Receive, Scope, Send

from _mcp import ModernClient, session_meta, tool_text
from _redis import RedisServer
from conftest import SECRET, in_process
from mcp_sessions.stores import RedisStore


def connected_clients(redis: RedisServer) -> int:
    """Clients connected to the server, not counting the connection that asks."""
    return redis.command("CLIENT", "LIST").count(b"id=") - 1


def use_a_session(http: httpx.Client) -> None:
    client = ModernClient(http, "")
    session = client.create_session()
    assert tool_text(client.call_tool("count", session=session_meta(session))[1]) == "1"


def test_a_store_from_the_environment_is_closed_at_shutdown(redis: RedisServer) -> None:
    app = build_app(environ={"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_REDIS_URL": redis.url})
    assert isinstance(app.store, RedisStore)
    with in_process(app) as http:
        use_a_session(http)
        assert connected_clients(redis) >= 1
    assert connected_clients(redis) == 0


def test_a_store_passed_in_stays_open_for_its_owner(redis: RedisServer) -> None:
    store = RedisStore(redis.url)
    app = build_app(environ={"MCP_SESSIONS_SECRET": SECRET}, store=store)
    seen_at_shutdown: list[int] = []

    async def owner(scope: Scope, receive: Receive, send: Send) -> None:
        """The application that made the store closes it in its own lifespan, after the middleware's."""

        async def send_closing(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                seen_at_shutdown.append(connected_clients(redis))
                await store.aclose()
            await send(message)

        await app(scope, receive, send_closing if scope["type"] == "lifespan" else send)

    with in_process(owner) as http:
        use_a_session(http)
    assert seen_at_shutdown[0] >= 1  # the middleware left the owner's store open
    assert connected_clients(redis) == 0
