"""SessionSubscriptionBus over memory:// (one process) and a real redis-server (two buses: two replicas).

A listener registered within a session gets that session's events and every
global one; a global listener gets only global ones. Absence is proven after a
positive control: a marker published after the event must arrive first.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged

from _redis import RedisServer, redis_server
from _waits import until_awaited
from mcp_sessions.subscriptions import SessionSubscriptionBus
from subscriptions._streams import MARKER, WAIT, Stream, buses, opened

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "redis"])
async def replicas(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[SessionSubscriptionBus, SessionSubscriptionBus]]:
    """Two replicas' buses: one bus for memory:// (one process), two on one Redis and one prefix for redis://."""
    if request.param == "memory":
        bus = SessionSubscriptionBus.from_url("memory://")
        yield bus, bus
        await bus.aclose()
        return
    server: RedisServer = request.getfixturevalue("redis")
    prefix: str = request.getfixturevalue("prefix")
    async with buses(server.url, prefix) as pair:
        yield pair


async def test_a_global_event_reaches_every_stream_on_every_replica(
    replicas: tuple[SessionSubscriptionBus, SessionSubscriptionBus],
) -> None:
    a, b = replicas
    streams = [Stream(a, None), Stream(a, "s1"), Stream(b, None), Stream(b, "s1"), Stream(b, "s2")]
    await opened(a, "s1")
    await opened(b, "s1", "s2")
    await a.publish(ToolsListChanged())
    await until_awaited(lambda: all(s.events == [ToolsListChanged()] for s in streams), "the event on every stream")


async def test_a_session_event_reaches_only_that_sessions_streams(
    replicas: tuple[SessionSubscriptionBus, SessionSubscriptionBus],
) -> None:
    a, b = replicas
    mine_a, mine_b = Stream(a, "s1"), Stream(b, "s1")
    others = [Stream(a, None), Stream(b, None), Stream(a, "s2"), Stream(b, "s2")]
    await opened(a, "s1", "s2")
    await opened(b, "s1", "s2")
    await a.publish_to_session("s1", ResourceUpdated(uri="note://a"))
    await b.publish(MARKER)
    await until_awaited(lambda: all(MARKER in s.events for s in [mine_a, mine_b, *others]), "the marker everywhere")
    assert mine_a.events == mine_b.events == [ResourceUpdated(uri="note://a"), MARKER]
    assert all(s.events == [MARKER] for s in others)  # the scoped event came before the marker, or never


async def test_ending_a_session_tells_its_watchers_on_every_replica_and_no_other(
    replicas: tuple[SessionSubscriptionBus, SessionSubscriptionBus],
) -> None:
    a, b = replicas
    ended: list[str] = []
    unwatch = [
        a.watch("s1", lambda: ended.append("a/s1")),
        b.watch("s1", lambda: ended.append("b/s1")),
        b.watch("s2", lambda: ended.append("b/s2")),
    ]
    marker = Stream(b, "s2")
    await opened(a, "s1")
    await opened(b, "s1", "s2")
    await a.end_session("s1")
    await a.publish(MARKER)
    await until_awaited(lambda: marker.events == [MARKER] and len(ended) >= 2, "the end and the marker")
    assert sorted(ended) == ["a/s1", "b/s1"]
    for stop in unwatch:
        assert stop is not None
        stop()


async def test_limits_refuse_before_the_stream_opens() -> None:
    bus = SessionSubscriptionBus.from_url("memory://", max_streams_per_session=2, max_sessions=2)
    first, _second = Stream(bus, "s1"), Stream(bus, "s1")
    with pytest.raises(MCPError) as refused:
        Stream(bus, "s1")
    assert refused.value.error.code == -32603
    assert "at most 2" in refused.value.error.message
    first.unsubscribe()
    first.unsubscribe()  # idempotent
    Stream(bus, "s1")  # room again
    Stream(bus, "s2")
    with pytest.raises(MCPError, match="Too many sessions are listening"):
        Stream(bus, "s3")
    assert bus.watch("s3", lambda: None) is None  # the middleware then forwards, and subscribe refuses
    Stream(bus, None)  # a global stream needs no session slot


async def test_one_pubsub_connection_per_replica_and_channels_follow_streams(redis: RedisServer, prefix: str) -> None:
    bus = SessionSubscriptionBus.from_url(redis.url, prefix=prefix)
    async with aioredis.Redis.from_url(redis.url, decode_responses=True) as probe:
        try:
            streams = [Stream(bus, f"s{i % 5}") for i in range(10)] + [Stream(bus, None)]
            await opened(bus, *(f"s{i}" for i in range(5)))
            channels = sorted(await probe.pubsub_channels(prefix + "*"))
            assert channels == sorted([prefix + "events", *(f"{prefix}session:{{s{i}}}" for i in range(5))])
            subscribers = [c for c in await probe.client_list() if c.get("name") == "mcp-sessions" and c["sub"] != "0"]
            assert len(subscribers) == 1, subscribers
            for stream in streams:
                stream.unsubscribe()

            async def only_global() -> bool:
                return await probe.pubsub_channels(prefix + "*") == [prefix + "events"]

            await until_awaited(only_global, "the session channels left")
        finally:
            await bus.aclose()

        async def none_left() -> bool:  # the server sees a closed connection go a moment later
            return not [c for c in await probe.client_list() if c.get("name") == "mcp-sessions"]

        await until_awaited(none_left, "aclose left no connection")


async def test_messages_are_small_json_naming_the_session_by_id(redis: RedisServer, prefix: str) -> None:
    bus = SessionSubscriptionBus.from_url(redis.url, prefix=prefix)
    async with aioredis.Redis.from_url(redis.url, decode_responses=True) as probe, probe.pubsub() as pubsub:
        try:
            await pubsub.psubscribe(prefix + "*")
            await pubsub.get_message(timeout=1)  # the psubscribe confirmation
            await bus.publish(ToolsListChanged())
            await bus.publish_to_session("sid-1", ResourceUpdated(uri="note://a"))
            await bus.end_session("sid-1")
            seen: list[tuple[str, str]] = []
            while len(seen) < 3:
                message = await pubsub.get_message(timeout=WAIT)
                assert message is not None, seen
                if message["type"] == "pmessage":
                    seen.append((message["channel"], message["data"]))
            assert seen == [
                (prefix + "events", '{"event":"tools"}'),
                (prefix + "session:{sid-1}", '{"resource":"note://a"}'),
                (prefix + "session:{sid-1}", '{"end":"session"}'),
            ]
        finally:
            await bus.aclose()


async def test_streams_survive_a_redis_restart_and_a_publish_meanwhile_is_dropped(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    with redis_server() as server:
        async with buses(server.url, prefix, timeout=0.5) as (a, b):
            stream = Stream(b, "s1")
            await opened(b, "s1")
            server.stop()
            with caplog.at_level(logging.WARNING, logger="mcp_sessions"):
                await a.publish_to_session("s1", ResourceUpdated(uri="note://lost"))  # logged and dropped
            assert "could not be published" in caplog.text
            server.start()  # the same port: the reader subscribes again, with backoff

            async def heard() -> bool:
                if not stream.events:
                    await a.publish_to_session("s1", ResourceUpdated(uri="note://after"))
                return bool(stream.events)

            await until_awaited(heard, "no event after the restart")
            assert set(stream.events) == {ResourceUpdated(uri="note://after")}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite:///tmp/x.db", "sqlite:// store cannot carry listen events between processes"),
        ("postgres://u:hunter2@h/db", "unknown bus URL scheme 'postgres'"),
        ("nothing", "a bus URL looks like scheme://"),
        ("memory://host", "the memory:// bus takes no host"),
        ("redis://u:hunter2@h:99999/0", "port"),  # the store's parser: the rest of its table is test_urls'
    ],
)
async def test_bad_urls_are_refused_clearly_never_repeating_a_password(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")) as refused:
        SessionSubscriptionBus.from_url(url)
    assert "hunter2" not in str(refused.value)


async def test_bad_options_and_events_are_refused() -> None:
    with pytest.raises(TypeError, match="unknown option 'tiemout'"):
        SessionSubscriptionBus.from_url("redis://127.0.0.1:1/0", tiemout=1)
    with pytest.raises(ValueError, match="max_sessions"):
        SessionSubscriptionBus(max_sessions=0)
    with pytest.raises(ValueError, match="braces"):
        SessionSubscriptionBus(prefix="{x}")
    bus = SessionSubscriptionBus()
    with pytest.raises(ValueError, match="too long"):
        await bus.publish_to_session("s1", ResourceUpdated(uri="x" * 20_000))
    with pytest.raises(ValueError, match="session id"):
        await bus.publish_to_session("a}b", ToolsListChanged())
