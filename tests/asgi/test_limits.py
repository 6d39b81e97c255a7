"""What a flood of sessions/create costs, the optional create limit, the per-caller maximums, and the store check
at startup."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from starlette.applications import Starlette

from _lifespan import running
from _mcp import jwt_claims
from _redis import free_port
from conftest import SECRET
from mcp_sessions import KeySet, Refusal, SessionClaims
from mcp_sessions._session import Quota
from mcp_sessions.handles import Handles
from mcp_sessions.stores import MemoryStore, RedisStore

from ._direct import CountingStore, Downstream, call, dumps, http_scope, middleware, request

pytestmark = pytest.mark.anyio

CREATE = dumps({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"})


def from_address(address: str) -> dict[str, Any]:
    return {**http_scope(), "client": (address, 40000)}


async def test_a_flood_of_anonymous_creates_leaves_the_store_and_legitimate_sessions_alone() -> None:
    store = MemoryStore(max_sessions=100)  # a small cap: a store entry per create would fill it at once
    app = Downstream()
    mw = middleware(app, store=store)
    for _ in range(1_000):  # ten times the cap: a create that stored anything would have filled it
        sender = await call(mw, CREATE)
        assert sender.status == 200
    assert len(store) == 0  # creating a session stores nothing
    token = (await call(mw, CREATE)).json()["result"]["session"]["sessionId"]
    used = await call(mw, dumps(request(1, token)))  # Downstream answers id 1
    assert used.status == 200
    assert app.calls == 1
    assert used.json()["result"]["_meta"]["io.modelcontextprotocol/session"]["sessionId"] == token


async def test_the_create_limit_refuses_a_caller_over_it_and_only_that_caller() -> None:
    mw = middleware(Downstream(), create_limit=(5, 60))
    for _ in range(5):
        assert (await call(mw, CREATE, from_address("10.1.1.1"))).status == 200
    refused = await call(mw, CREATE, from_address("10.1.1.1"))
    assert refused.status == 429
    assert refused.json()["error"]["code"] == -32011
    assert refused.header(b"retry-after") == b"12"  # one create every 12 s refills the bucket
    assert (await call(mw, CREATE, from_address("10.2.2.2"))).status == 200  # another caller is not touched


async def test_deletes_count_against_the_same_limit() -> None:
    mw = middleware(Downstream(), create_limit=(2, 60))
    token = (await call(mw, CREATE)).json()["result"]["session"]["sessionId"]
    delete = {"jsonrpc": "2.0", "id": 2, "method": "sessions/delete"}
    delete["params"] = {"_meta": {"io.modelcontextprotocol/session": {"sessionId": token}}}
    assert (await call(mw, dumps(delete))).status == 200
    other = (await call(mw, CREATE)).json()
    assert other["error"]["code"] == -32011  # two operations spent: the create and the delete


async def test_the_on_create_hook_sees_each_new_session_and_may_refuse_it() -> None:
    created: list[SessionClaims] = []

    async def on_create(claims: SessionClaims) -> None:
        if len(created) == 1:
            raise Refusal(-32011, "Only one session here", retry_after=5)
        if len(created) == 2:
            raise RuntimeError("a bug of the hook")
        created.append(claims)

    mw = middleware(Downstream(), on_create=on_create)
    token = (await call(mw, CREATE)).json()["result"]["session"]["sessionId"]
    refused = await call(mw, CREATE)
    created.append(created[0])
    failed = await call(mw, CREATE)

    assert jwt_claims(token)["sid"] == created[0].session_id  # asked before the session was handed out
    assert refused.status == 429
    assert refused.header(b"retry-after") == b"5"
    assert refused.json()["error"] == {"code": -32011, "message": "Only one session here"}
    assert failed.json()["error"] == {"code": -32603, "message": "Internal error"}  # a hook that fails: refused


async def test_an_on_create_hook_that_takes_the_scope_is_given_the_creates_request() -> None:
    """A hook with a ``scope`` keyword is given the create's ASGI scope (who asks, through what: the stdio gateway
    starts the conversation's process for that caller); a hook of one argument, as before, is called as it was."""
    given: list[tuple[str, Any]] = []

    async def scoped(claims: SessionClaims, *, scope: Any) -> None:
        given.append((claims.session_id, scope["client"]))

    async def plain(claims: SessionClaims) -> None:
        given.append((claims.session_id, None))

    scoped_token = (await call(middleware(Downstream(), on_create=scoped), CREATE, from_address("10.3.3.3"))).json()
    plain_token = (await call(middleware(Downstream(), on_create=plain), CREATE, from_address("10.3.3.3"))).json()

    assert given == [
        (jwt_claims(scoped_token["result"]["session"]["sessionId"])["sid"], ("10.3.3.3", 40000)),
        (jwt_claims(plain_token["result"]["session"]["sessionId"])["sid"], None),
    ]


async def test_an_unreachable_store_is_reported_at_startup(caplog: pytest.LogCaptureFixture) -> None:
    store = RedisStore(f"redis://:hunter2@127.0.0.1:{free_port()}/0", timeout=0.5)  # a port nothing listens on
    mw = middleware(Starlette(), store=store)
    with caplog.at_level(logging.WARNING, logger="mcp_sessions"):
        async with running(mw):  # the app starts all the same (and shuts down)
            pass
    await store.aclose()
    (record,) = [r for r in caplog.records if "does not answer at startup" in r.getMessage()]
    assert "hunter2" not in record.getMessage()


async def test_a_reachable_store_says_nothing_at_startup(caplog: pytest.LogCaptureFixture) -> None:
    mw = middleware(Starlette())
    with caplog.at_level(logging.WARNING, logger="mcp_sessions"):
        async with running(mw):
            pass
    assert not [r for r in caplog.records if "startup" in r.getMessage()]


# -- what one caller can make the store keep (issue 22) -------------------------------------------------


def test_the_handles_maximum_is_checked() -> None:
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


async def test_a_batch_of_made_up_conversations_stores_at_most_eight() -> None:
    store = CountingStore()
    mw = middleware(Downstream(), batches=True, store=store, idle_ttl=3600, conversation_data="anonymous")
    batch = [
        {
            "jsonrpc": "2.0",
            "id": i,
            "method": "tools/call",
            "params": {"name": "t", "_meta": {"openai/session": f"c{i % 20}"}},
        }
        for i in range(200)
    ]
    assert (await call(mw, dumps(batch))).status == 200  # forwarded: the ninth conversation on gets no data
    assert store.touches == len(store) == 8  # one touch, one record, per distinct conversation named
