"""What a flood of sessions/create costs, the optional create limit, the per-caller maximums, and the store check
at startup."""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest
from starlette.types import Message

from _mcp import AnswersProbes
from conftest import SECRET
from mcp_sessions import KeySet, MCPSessionMiddleware, MemoryStore, SessionsConfig, SessionStatus
from mcp_sessions._session import Quota
from mcp_sessions.handles import Handles
from mcp_sessions.stores import RedisStore

from .test_middleware import Downstream, Receiver, Sender, dumps, http_scope, request

pytestmark = pytest.mark.anyio

CREATE = dumps({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"})


def from_address(address: str) -> dict[str, Any]:
    scope = http_scope()
    scope["client"] = (address, 40000)
    return scope


async def post(mw: MCPSessionMiddleware, body: bytes, scope: dict[str, Any] | None = None) -> Sender:
    sender = Sender()
    await mw(http_scope() if scope is None else scope, Receiver(body), sender)
    return sender


async def test_a_flood_of_anonymous_creates_leaves_the_store_and_legitimate_sessions_alone() -> None:
    store = MemoryStore(max_sessions=100)  # a small cap: a store entry per create would fill it at once
    app = Downstream()
    mw = MCPSessionMiddleware(AnswersProbes(app), secret=SECRET, store=store)
    for _ in range(1_000):  # ten times the cap: a create that stored anything would have filled it
        sender = await post(mw, CREATE)
        assert sender.status == 200
    assert len(store) == 0  # creating a session stores nothing
    token = (await post(mw, CREATE)).json()["result"]["session"]["sessionId"]
    used = await post(mw, dumps(request(1, token)))  # Downstream answers id 1
    assert used.status == 200 and app.calls == 1
    assert used.json()["result"]["_meta"]["io.modelcontextprotocol/session"]["sessionId"] == token


async def test_the_create_limit_refuses_a_caller_over_it_and_only_that_caller() -> None:
    mw = MCPSessionMiddleware(AnswersProbes(Downstream()), secret=SECRET, create_limit=(5, 60))
    for _ in range(5):
        assert (await post(mw, CREATE, from_address("10.1.1.1"))).status == 200
    refused = await post(mw, CREATE, from_address("10.1.1.1"))
    assert refused.status == 429
    assert refused.json()["error"]["code"] == -32011
    assert refused.header(b"retry-after") == b"12"  # one create every 12 s refills the bucket
    assert (await post(mw, CREATE, from_address("10.2.2.2"))).status == 200  # another caller is not touched


async def test_deletes_count_against_the_same_limit() -> None:
    mw = MCPSessionMiddleware(AnswersProbes(Downstream()), secret=SECRET, create_limit=(2, 60))
    token = (await post(mw, CREATE)).json()["result"]["session"]["sessionId"]
    delete = {"jsonrpc": "2.0", "id": 2, "method": "sessions/delete"}
    delete["params"] = {"_meta": {"io.modelcontextprotocol/session": {"sessionId": token}}}
    assert (await post(mw, dumps(delete))).status == 200
    other = (await post(mw, CREATE)).json()
    assert other["error"]["code"] == -32011  # two operations spent: the create and the delete


def test_the_create_limit_from_the_environment() -> None:
    config = SessionsConfig.from_env(environ={"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_CREATE_LIMIT": "100/60"})
    assert config.create_limit is not None and (config.create_limit.count, config.create_limit.seconds) == (100, 60)
    for bad in ("100", "x/60", "0/60", "10/0"):
        with pytest.raises(ValueError, match="MCP_SESSIONS_CREATE_LIMIT must look like COUNT/SECONDS"):
            SessionsConfig.from_env(environ={"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_CREATE_LIMIT": bad})


async def lifespan(mw: MCPSessionMiddleware) -> list[str]:
    """Run the lifespan startup and shutdown through the middleware; the messages the server got."""
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[str] = []

    async def receive() -> Message:
        return incoming.pop(0)

    async def send(message: Message) -> None:
        sent.append(message["type"])

    await mw({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
    return sent


async def app_with_lifespan(scope: Any, receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def test_an_unreachable_store_is_reported_at_startup(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = RedisStore(f"redis://:hunter2@127.0.0.1:{port}/0", timeout=0.5)
    mw = MCPSessionMiddleware(AnswersProbes(app_with_lifespan), secret=SECRET, store=store)
    with caplog.at_level(logging.WARNING, logger="mcp_sessions"):
        sent = await lifespan(mw)
    await store.aclose()
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]  # the app starts all the same
    (record,) = [r for r in caplog.records if "does not answer at startup" in r.getMessage()]
    assert "hunter2" not in record.getMessage()


async def test_a_reachable_store_says_nothing_at_startup(caplog: pytest.LogCaptureFixture) -> None:
    mw = MCPSessionMiddleware(AnswersProbes(app_with_lifespan), secret=SECRET)
    with caplog.at_level(logging.WARNING, logger="mcp_sessions"):
        assert await lifespan(mw) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert not [r for r in caplog.records if "startup" in r.getMessage()]


# -- what one caller can make the store keep (issue 22) -------------------------------------------------


def test_the_conversation_maximum_from_the_environment_and_its_checks() -> None:
    name = "MCP_SESSIONS_MAX_CONVERSATIONS_PER_CALLER"
    assert SessionsConfig(secret=SECRET).max_conversations_per_caller == 1000
    assert (
        SessionsConfig.from_env(environ={"MCP_SESSIONS_SECRET": SECRET, name: "25"}).max_conversations_per_caller == 25
    )
    assert (
        SessionsConfig.from_env(environ={"MCP_SESSIONS_SECRET": SECRET, name: "none"}).max_conversations_per_caller
        is None
    )
    for bad in ("0", "-3", "1.5", "many"):
        with pytest.raises(ValueError, match=name):
            SessionsConfig.from_env(environ={"MCP_SESSIONS_SECRET": SECRET, name: bad})
    for value in (0, -1, 2.5, True, "10"):
        with pytest.raises(ValueError, match="max_conversations_per_caller"):
            SessionsConfig(secret=SECRET, max_conversations_per_caller=value)  # type: ignore[arg-type]
    for value in (0, 1.5, False):
        with pytest.raises(ValueError, match="max_handles_per_caller"):
            Handles(KeySet.from_secret(SECRET), MemoryStore(), max_handles_per_caller=value)  # type: ignore[arg-type]


def test_a_quota_counts_each_record_until_it_ends() -> None:
    quota = Quota(2)
    assert quota.wait("a", now=0) == 0
    quota.add("a", expires_at=100)
    quota.add("a", expires_at=50)
    assert quota.wait("a", now=10) == 40  # full: the first slot comes back when its record ends
    assert quota.wait("b", now=10) == 0  # another caller is not touched
    assert quota.wait("a", now=50) == 0


class TouchCounting(MemoryStore):
    touches = 0

    async def touch(self, session_id: str, **kwargs: Any) -> SessionStatus:
        self.touches += 1
        return await super().touch(session_id, **kwargs)


async def test_a_batch_of_made_up_conversations_stores_at_most_eight() -> None:
    store = TouchCounting()
    mw = MCPSessionMiddleware(
        AnswersProbes(Downstream()), secret=SECRET, store=store, idle_ttl=3600, conversation_data="anonymous"
    )
    batch = [
        {
            "jsonrpc": "2.0",
            "id": i,
            "method": "tools/call",
            "params": {"name": "t", "_meta": {"openai/session": f"c{i % 20}"}},
        }
        for i in range(200)
    ]
    assert (await post(mw, dumps(batch))).status == 200  # forwarded: the ninth conversation on gets no data
    assert store.touches == len(store) == 8  # one touch, one record, per distinct conversation named
