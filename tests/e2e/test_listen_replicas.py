"""Listen streams scoped to a session, across two real replicas on one real Redis (examples/notifications.py).

Two uvicorn processes (A answers JSON, B SSE) share one Redis, one key set and one
prefix; listen streams are raw streaming HTTP (2026-07-28 ``subscriptions/listen``
carrying the session in ``params._meta``). Every absence is proven after a positive
control: a global marker published afterwards arrives on the stream first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

from _mcp import MCP_PATH, answer, jwt_claims, modern_headers, modern_request, session_meta
from _redis import RedisServer
from e2e._listen import APP, NOTE, WAIT, client, graceful_end
from e2e._replicas import Replica, base_environ, json_and_sse, replicas

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def pair(redis: RedisServer) -> Iterator[list[Replica]]:
    with json_and_sse(base_environ(redis), APP) as started:
        yield started


async def test_a_session_event_from_a_reaches_only_that_sessions_streams_on_b_and_global_ones_everywhere(
    pair: list[Replica],
) -> None:
    a, b = (replica.url for replica in pair)
    async with client() as c:
        mine, other = await c.create(a), await c.create(b)
        mine_b, mine_a = await c.listen(b, "mine-b", mine), await c.listen(a, "mine-a", mine)
        others = [
            await c.listen(a, "other-a", other),
            await c.listen(b, "other-b", other),
            await c.listen(a, "global-a"),
            await c.listen(b, "global-b"),
        ]
        start = time.monotonic()
        assert await c.tool(a, "edit_note", {"name": "plan", "text": "v2"}, mine) == "saved"
        await mine_b.wait(f"notifications/resources/updated {NOTE}")
        latency = time.monotonic() - start
        assert await c.tool(b, "add_tool", {}) == "announced"  # the marker: global, from the other replica
        for stream in [mine_a, mine_b, *others]:
            await stream.wait("notifications/tools/list_changed")
        scoped = [f"notifications/resources/updated {NOTE}", "notifications/tools/list_changed"]
        assert mine_a.events == mine_b.events == scoped
        assert all(s.events == ["notifications/tools/list_changed"] for s in others), [s.events for s in others]
        # The SDK's own resource notification (ctx.notify_resource_updated) is global: every stream.
        assert await c.tool(b, "publish_note", {"name": "plan"}) == "published"
        for stream in [mine_a, mine_b, *others]:
            await stream.wait(f"notifications/resources/updated {NOTE}")
        assert not any(s.ended.is_set() for s in [mine_a, mine_b, *others])
    print(f"session event A -> stream on B: {latency * 1000:.1f} ms")
    assert latency < 1.0, f"the session's event took {latency:.3f} s to reach the other replica"


async def test_a_delete_on_a_ends_the_sessions_stream_on_b_gracefully_and_no_other(pair: list[Replica]) -> None:
    a, b = (replica.url for replica in pair)
    async with client() as c:
        doomed, kept = await c.create(a), await c.create(a)
        gone = [await c.listen(b, "doomed-b", doomed), await c.listen(a, "doomed-a", doomed)]
        staying = [await c.listen(b, "kept-b", kept), await c.listen(b, "global-b"), await c.listen(a, "global-a")]
        assert (await c.request(a, "sessions/delete", session=doomed))["result"] == {"resultType": "complete"}
        async with asyncio.timeout(WAIT):
            for stream in gone:
                await stream.ended.wait()
                graceful_end(stream)
        assert await c.tool(a, "add_tool", {}) == "announced"
        for stream in staying:
            await stream.wait("notifications/tools/list_changed")
            assert not stream.ended.is_set()
        # The ended session's streams cannot come back: a listen in it is refused like any request.
        refused = await c.request(
            b, "tools/call", {"name": "edit_note", "arguments": {"name": "x", "text": ""}}, doomed
        )
        assert refused["error"]["code"] == -32043


async def test_a_sessions_stream_ends_at_its_expiry(redis: RedisServer) -> None:
    environ = {**base_environ(redis), "MCP_SESSIONS_TTL": "3"}
    with replicas(environ, app=APP) as [replica]:
        async with client() as c:
            session = await c.create(replica.url)
            stream = await c.listen(replica.url, "short", session)
            forever = await c.listen(replica.url, "global")
            start = time.monotonic()
            async with asyncio.timeout(WAIT + 3):
                await stream.ended.wait()
            graceful_end(stream)
            assert not forever.ended.is_set()
            lasted = time.monotonic() - start
    assert lasted < 3.5, f"the stream outlived its session's 3 s by {lasted - 3:.1f} s"


async def test_too_many_streams_in_one_session_are_refused_before_they_open(pair: list[Replica]) -> None:
    a = pair[0].url
    async with client() as c:
        session = await c.create(a)
        for index in range(8):  # the bus's default max_streams_per_session
            await c.listen(a, f"s{index}", session)
        body = modern_request(
            "subscriptions/listen",
            {"notifications": {"toolsListChanged": True}},
            id="ninth",
            session=session_meta(session),
        )
        refused = answer(await c.http.post(a + MCP_PATH, json=body, headers=modern_headers(body)))
        assert refused["error"]["code"] == -32603
        assert "Too many listen streams in this session" in refused["error"]["message"]


async def touched_after(redis: RedisServer, key: str, after: float) -> None:
    """Return once the store has written a last-seen time later than ``after`` (Unix seconds) at ``key`` (a session's
    status key, docs: stores/_redis.py): Redis's keyspace notifications say when it is written, bounded by WAIT."""
    client = aioredis.from_url(redis.url)
    await client.config_set("notify-keyspace-events", "K$")  # keyspace events of string commands: SET
    try:
        async with client.pubsub() as pubsub, asyncio.timeout(WAIT):
            await pubsub.subscribe(f"__keyspace@0__:{key}")
            while float(await client.get(key) or 0) <= after:
                await pubsub.get_message(ignore_subscribe_messages=True, timeout=WAIT)
    finally:
        await client.config_set("notify-keyspace-events", "")
        await client.aclose()


async def test_an_open_stream_keeps_its_session_from_idling_out(redis: RedisServer) -> None:
    """idle_ttl 2 s: the stream checks (touches) its session every second, so once the store has seen it in use
    past the other session's idle end, that one has idled out and this one is still alive."""
    environ = {**base_environ(redis), "MCP_SESSIONS_IDLE_TTL": "2"}
    with replicas(environ, app=APP) as [replica]:
        async with client() as c:
            listened, idle = await c.create(replica.url), await c.create(replica.url)
            stream = await c.listen(replica.url, "keeps", listened)
            await c.tool(replica.url, "edit_note", {"name": "a", "text": "x"}, idle)  # its last use
            idle_end = time.time() + 2 + 0.2  # idle_ttl plus the store's write interval (a tenth of it)
            key = f"{environ['MCP_SESSIONS_REDIS_PREFIX']}{{{jwt_claims(listened['sessionId'])['sid']}}}:s"
            await touched_after(redis, key, idle_end)
            assert not stream.ended.is_set()
            assert await c.tool(replica.url, "edit_note", {"name": "a", "text": "y"}, listened) == "saved"
            edit = {"name": "edit_note", "arguments": {"name": "a", "text": "z"}}
            gone = await c.request(replica.url, "tools/call", edit, idle)
            assert gone["error"]["code"] == -32043  # the control: unused past its idle end, it idled out
