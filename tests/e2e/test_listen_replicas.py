"""Listen streams scoped to a session, across two real replicas on one real Redis (examples/notifications.py).

Two uvicorn processes (A answers JSON, B SSE) share one Redis, one key set and one
prefix; listen streams are raw streaming HTTP (2026-07-28 ``subscriptions/listen``
carrying the session in ``params._meta``). A session-scoped event published by a
tool on A reaches that session's streams on B (and A), and no other stream; a
global event reaches every stream; a delete on A ends the session's stream on B
gracefully, and the others stay open; a session's expiry ends its stream. Every
absence is proven after a positive control: a global marker published afterwards
arrives on the stream first.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx
import pytest

from _mcp import MCP_PATH, aiter_messages, answer, modern_headers, modern_request, session_meta, tool_text
from _redis import RedisServer
from e2e._replicas import Replica, json_and_sse, replicas
from e2e.test_replicas import base_environ

APP = "examples.notifications:app"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
NOTE = "note://plan"
WAIT = 5.0


@pytest.fixture(scope="module")
def pair(redis: RedisServer) -> Iterator[list[Replica]]:
    environ = base_environ(redis)
    with json_and_sse(environ, APP) as started:
        yield started


class Stream:
    """One open ``subscriptions/listen`` response: its messages as they arrive, and whether it has ended."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.messages: list[dict[str, Any]] = []
        self.ended = asyncio.Event()
        self.acknowledged = asyncio.Event()
        self.status = 0

    @property
    def events(self) -> list[str]:
        """The notifications after the acknowledgement: ``method`` or ``method uri``."""
        return [
            f"{m['method']} {m['params']['uri']}" if "uri" in m.get("params", {}) else m["method"]
            for m in self.messages[1:]
            if "method" in m
        ]

    async def wait(self, event: str) -> float:
        """Seconds until ``event`` is on the stream (bounded)."""
        start = time.monotonic()
        while event not in self.events:
            assert time.monotonic() - start < WAIT, f"{self.name}: no {event!r} within {WAIT} s, got {self.events}"
            await asyncio.sleep(0.005)
        return time.monotonic() - start


class Client:
    """Raw 2026-07-28 requests to the replicas, and listen streams opened in the background."""

    def __init__(self, http: httpx.AsyncClient, group: asyncio.TaskGroup) -> None:
        self.http, self.group = http, group
        self.reading: list[asyncio.Task[None]] = []

    async def request(
        self, base: str, method: str, params: Mapping[str, Any] | None = None, session: Any = None
    ) -> Any:
        body = modern_request(method, params, session=None if session is None else session_meta(session))
        response = await self.http.post(base + MCP_PATH, json=body, headers=modern_headers(body))
        assert response.status_code == 200, response.text
        return answer(response)

    async def create(self, base: str) -> dict[str, Any]:
        created: dict[str, Any] = (await self.request(base, "sessions/create"))["result"]["session"]
        return created

    async def tool(self, base: str, name: str, arguments: Mapping[str, Any], session: Any = None) -> str:
        return tool_text(await self.request(base, "tools/call", {"name": name, "arguments": dict(arguments)}, session))

    async def listen(self, base: str, name: str, session: Any = None) -> Stream:
        """A stream of tool-list changes and of NOTE's updates, acknowledged (so subscribed) when returned."""
        stream = Stream(name)
        notifications = {"toolsListChanged": True, "resourceSubscriptions": [NOTE]}
        body = modern_request(
            "subscriptions/listen",
            {"notifications": notifications},
            id=f"listen-{name}",
            session=None if session is None else session_meta(session),
        )

        async def read() -> None:
            try:
                async with self.http.stream("POST", base + MCP_PATH, json=body, headers=modern_headers(body)) as r:
                    stream.status = r.status_code
                    async for message in aiter_messages(r.aiter_lines()):
                        stream.messages.append(message)
                        stream.acknowledged.set()
            finally:
                stream.ended.set()
                stream.acknowledged.set()

        self.reading.append(self.group.create_task(read()))
        async with asyncio.timeout(WAIT):
            await stream.acknowledged.wait()
        assert stream.messages[0]["method"] == "notifications/subscriptions/acknowledged", stream.messages
        return stream


@contextlib.asynccontextmanager
async def client() -> AsyncIterator[Client]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=30)) as http, asyncio.TaskGroup() as group:
        wire = Client(http, group)
        yield wire
        for task in wire.reading:  # the streams still open: the test is over
            task.cancel()


def graceful_end(stream: Stream) -> None:
    """The stream's last frame is its listen request's result, the subscription id in ``_meta``."""
    assert stream.ended.is_set(), f"{stream.name} is still open"
    last = stream.messages[-1]
    request_id = f"listen-{stream.name}"
    assert last["id"] == request_id and last["result"]["_meta"] == {SUBSCRIPTION_ID: request_id}, last


def test_a_session_event_from_a_reaches_only_that_sessions_streams_on_b_and_global_ones_everywhere(
    pair: list[Replica],
) -> None:
    a, b = (replica.url for replica in pair)

    async def scenario() -> float:
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
            return latency

    latency = asyncio.run(scenario())
    print(f"session event A -> stream on B: {latency * 1000:.1f} ms")
    assert latency < 1.0, f"the session's event took {latency:.3f} s to reach the other replica"


def test_a_delete_on_a_ends_the_sessions_stream_on_b_gracefully_and_no_other(pair: list[Replica]) -> None:
    a, b = (replica.url for replica in pair)

    async def scenario() -> None:
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

    asyncio.run(scenario())


def test_a_sessions_stream_ends_at_its_expiry(redis: RedisServer) -> None:
    environ = {**base_environ(redis), "MCP_SESSIONS_TTL": "3"}
    with replicas(environ, app=APP) as [replica]:

        async def scenario() -> float:
            async with client() as c:
                session = await c.create(replica.url)
                stream = await c.listen(replica.url, "short", session)
                forever = await c.listen(replica.url, "global")
                start = time.monotonic()
                async with asyncio.timeout(WAIT + 3):
                    await stream.ended.wait()
                graceful_end(stream)
                assert not forever.ended.is_set()
                return time.monotonic() - start

        lasted = asyncio.run(scenario())
    assert lasted < 3.5, f"the stream outlived its session's 3 s by {lasted - 3:.1f} s"


def test_too_many_streams_in_one_session_are_refused_before_they_open(pair: list[Replica]) -> None:
    a = pair[0].url

    async def scenario() -> None:
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
            response = await c.http.post(a + MCP_PATH, json=body, headers=modern_headers(body))
            refused = answer(response)
            assert refused["error"]["code"] == -32603
            assert "Too many listen streams in this session" in refused["error"]["message"]

    asyncio.run(scenario())


def test_an_open_stream_keeps_its_session_from_idling_out(redis: RedisServer) -> None:
    """idle_ttl 2 s: the stream checks (touches) its session every second, so 3.5 s later it is still alive."""
    environ = {**base_environ(redis), "MCP_SESSIONS_IDLE_TTL": "2"}
    with replicas(environ, app=APP) as [replica]:

        async def scenario() -> None:
            async with client() as c:
                listened, idle = await c.create(replica.url), await c.create(replica.url)
                stream = await c.listen(replica.url, "keeps", listened)
                await c.tool(replica.url, "edit_note", {"name": "a", "text": "x"}, idle)  # its last use
                await asyncio.sleep(3.5)
                assert not stream.ended.is_set()
                assert await c.tool(replica.url, "edit_note", {"name": "a", "text": "y"}, listened) == "saved"
                edit = {"name": "edit_note", "arguments": {"name": "a", "text": "z"}}
                gone = await c.request(replica.url, "tools/call", edit, idle)
                assert gone["error"]["code"] == -32043  # the control: unused for 3.5 s, it idled out

        asyncio.run(scenario())
