"""SessionSubscriptionBus past one Redis node: a real 3-master Cluster (sharded pub/sub) and a real
master, replica and three Sentinels.

On the Cluster each bus holds one connection per node that owns one of its channels, ``SSUBSCRIBE``s
there, and publishes with ``SPUBLISH``: a session's event travels to the node of the session's slot
only. Sessions are picked on each of the three nodes. Absence is proven after a positive control, as
in ``test_bus.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged
from redis.crc import key_slot

from _redis_topologies import REDIS_DOWN, ClusterServers, SentinelGroup, client, redis_cluster
from _waits import until, until_awaited
from mcp_sessions.subscriptions import SessionSubscriptionBus
from subscriptions._streams import MARKER, Stream, buses, channel, one_per_node, opened

pytestmark = pytest.mark.anyio

RECOVERY = 10.0  # seconds: a restarted node, or a promoted replica, delivers again within this


@pytest.fixture
async def pair(cluster: ClusterServers, prefix: str) -> AsyncIterator[tuple[SessionSubscriptionBus, ...]]:
    """Two replicas' buses on the one Cluster, one prefix."""
    async with buses(cluster.url, prefix, timeout=1.0) as pair:
        yield pair


async def test_session_events_on_every_node_reach_only_their_session_on_both_replicas(
    pair: tuple[SessionSubscriptionBus, SessionSubscriptionBus], cluster: ClusterServers, prefix: str
) -> None:
    a, b = pair
    sids = one_per_node(cluster, prefix)
    mine = {sid: [Stream(a, sid), Stream(b, sid)] for sid in sids}
    globals_ = [Stream(a, None), Stream(b, None)]
    await opened(a, *sids)
    await opened(b, *sids)
    for publisher, sid in zip((a, b, a), sids, strict=True):  # each replica publishes to the other's streams too
        await publisher.publish_to_session(sid, ResourceUpdated(uri=f"note://{sid}"))
    await b.publish(MARKER)
    everyone = [*globals_, *itertools.chain(*mine.values())]
    await until_awaited(lambda: all(MARKER in s.events for s in everyone), "the marker on every stream")
    for sid, streams in mine.items():
        assert [s.events for s in streams] == [[ResourceUpdated(uri=f"note://{sid}"), MARKER]] * 2, sid
    assert all(s.events == [MARKER] for s in globals_)
    await a.publish(ToolsListChanged())
    await until_awaited(lambda: all(ToolsListChanged() in s.events for s in everyone), "a global event on every stream")


async def test_channels_are_sharded_on_their_slots_node_and_left_with_their_last_stream(
    pair: tuple[SessionSubscriptionBus, SessionSubscriptionBus], cluster: ClusterServers, prefix: str
) -> None:
    a, _ = pair
    sids = one_per_node(cluster, prefix)
    async with contextlib.AsyncExitStack() as stack:
        nodes = [aioredis.Redis(port=server.port, decode_responses=True) for server in cluster.nodes]
        nodes = [await stack.enter_async_context(node) for node in nodes]
        classic = [await stack.enter_async_context(node.pubsub()) for node in nodes]
        for probe, sid in zip(classic, sids, strict=True):  # a classic SUBSCRIBE never sees an SPUBLISH
            await probe.subscribe(channel(prefix, sid))
        streams = [Stream(a, sid) for sid in sids]
        await opened(a, *sids)
        everywhere = cluster.nodes.index(cluster.node_for(prefix + "events"))
        for index, sid in enumerate(sids):
            # Each channel on its slot's node only, the global one too.
            shard = await nodes[index].pubsub_shardchannels(prefix + "*")
            assert sorted(shard) == sorted([channel(prefix, sid)] + [prefix + "events"] * (index == everywhere))
            assert await nodes[index].pubsub_channels(prefix + "*") == [channel(prefix, sid)]  # the probe's own
            await a.publish_to_session(sid, ResourceUpdated(uri="note://x"))
        await until_awaited(lambda: all(s.events for s in streams), "each session's event")
        for probe in classic:
            while (message := await probe.get_message(timeout=0.05)) is not None:
                assert message["type"] == "subscribe", message  # no classic message: SPUBLISH carried them
        for stream in streams:
            stream.unsubscribe()

        async def left() -> bool:
            for index, sid in enumerate(sids):
                if channel(prefix, sid) in await nodes[index].pubsub_shardchannels(prefix + "*"):
                    return False
            return True

        await until_awaited(left, "the session channels left")


def move_slot(cluster: ClusterServers, slot: int, target: int) -> None:
    """Give ``slot`` (holding no key) to node ``target``: the other nodes told first, the old owner among them, then
    the new owner's config epoch made the cluster's greatest, then the new owner told; until every node names it.
    So no claim the old owner gossiped before it was told can take the slot back: one with the old owner's greater
    epoch did, on a busy machine, and each of the two then answered ``MOVED`` to the other for good."""
    ids = []
    for server in cluster.nodes:
        with client(server.port) as c:
            ids.append(c.execute_command("CLUSTER", "MYID"))
    for index in [*(i for i in range(len(cluster.nodes)) if i != target), target]:
        with client(cluster.nodes[index].port) as c:
            if index == target:
                c.execute_command("CLUSTER", "BUMPEPOCH")
            c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target])

    def owner(port: int) -> int:
        with client(port) as c:
            return next(int(o[1]) for low, high, o, *_ in c.execute_command("CLUSTER", "SLOTS") if low <= slot <= high)

    new = {cluster.nodes[target].port}
    until(
        lambda: {owner(node.port) for node in cluster.nodes} == new,
        "every node naming the new owner",
        ignoring=REDIS_DOWN,
    )


async def published_until_heard(bus: SessionSubscriptionBus, sid: str, stream: Stream, uri: str, what: str) -> float:
    """Publish ``uri``'s update to session ``sid`` until ``stream`` has it, at most :data:`RECOVERY` s; how long."""
    event, started = ResourceUpdated(uri=uri), time.monotonic()
    while event not in stream.events:
        assert time.monotonic() - started < RECOVERY, f"nothing delivered {RECOVERY} s {what}"
        await bus.publish_to_session(sid, event)
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_a_moved_slot_moves_its_subscription_alone_and_the_publish_follows_moved(
    pair: tuple[SessionSubscriptionBus, SessionSubscriptionBus],
    cluster: ClusterServers,
    prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The owner unsubscribes the channel itself (Redis 7) when its slot moves; the slot is given back after.

    Only that channel moves: the old owner's connection stays up, with the other session of its node."""
    a, b = pair
    sid = one_per_node(cluster, prefix)[0]
    slot = key_slot(channel(prefix, sid).encode())
    neighbour = next(  # another session on the same node, in another slot
        other
        for other in (f"sid-{i}" for i in itertools.count())
        if cluster.node_for(channel(prefix, other)) == cluster.nodes[0]
        and key_slot(channel(prefix, other).encode()) != slot
    )
    stream, beside = Stream(b, sid), Stream(b, neighbour)
    await opened(b, sid, neighbour)
    await a.publish_to_session(sid, ResourceUpdated(uri="note://before"))  # a reads the map now
    await until_awaited(lambda: bool(stream.events), "the event before the move")
    move_slot(cluster, slot, 1)
    try:
        with caplog.at_level(logging.WARNING, logger="mcp_sessions"):
            await published_until_heard(a, sid, stream, "note://after", "after the slot moved")
            await a.publish_to_session(neighbour, ResourceUpdated(uri="note://beside"))
            await until_awaited(lambda: ResourceUpdated(uri="note://beside") in beside.events, "the neighbour's event")
        assert "could not be published" not in caplog.text  # a's MOVED was followed, not dropped
        assert "lost its connection" not in caplog.text  # b's link to the old owner stayed up
        with client(cluster.nodes[1].port) as owner, client(cluster.nodes[0].port) as first:
            assert channel(prefix, sid) in owner.pubsub_shardchannels(prefix + "*")
            assert channel(prefix, sid) not in first.pubsub_shardchannels(prefix + "*")
            assert channel(prefix, neighbour) in first.pubsub_shardchannels(prefix + "*")
    finally:
        move_slot(cluster, slot, 0)
    # Given back, it is heard from its first owner again (and the tests after this one start from a settled map).
    await published_until_heard(a, sid, stream, "note://home", "after the slot came back")
    assert "lost its connection" not in caplog.text


async def test_a_stream_opened_by_a_stale_slot_map_moves_alone(
    pair: tuple[SessionSubscriptionBus, SessionSubscriptionBus],
    cluster: ClusterServers,
    prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A slot moves while the bus holds none of its channels, so no node tells it: its map is out of date.

    The next stream there is subscribed on the old owner, which answers ``MOVED``; only that channel moves,
    and the old owner's connection stays up, with the other session of its node."""
    a, b = pair
    neighbour, *_ = one_per_node(cluster, prefix)
    beside = Stream(b, neighbour)
    await opened(b, neighbour)  # b has read the map and holds a connection to node 0
    late = next(  # a session of node 0 in another slot, opened once that slot has moved
        other
        for other in (f"late-{i}" for i in itertools.count())
        if cluster.node_for(channel(prefix, other)) == cluster.nodes[0]
        and key_slot(channel(prefix, other).encode()) != key_slot(channel(prefix, neighbour).encode())
    )
    slot = key_slot(channel(prefix, late).encode())
    move_slot(cluster, slot, 1)
    try:
        with caplog.at_level(logging.WARNING, logger="mcp_sessions"):
            stream = Stream(b, late)
            await opened(b, late)
            await published_until_heard(a, late, stream, "note://late", "to a stream opened after its slot moved")
            await a.publish_to_session(neighbour, ResourceUpdated(uri="note://beside"))
            await until_awaited(lambda: ResourceUpdated(uri="note://beside") in beside.events, "the neighbour's event")
        assert "lost its connection" not in caplog.text  # b's link to the old owner stayed up
        with client(cluster.nodes[1].port) as owner:
            assert channel(prefix, late) in owner.pubsub_shardchannels(prefix + "*")
    finally:
        move_slot(cluster, slot, 0)
    await published_until_heard(a, late, stream, "note://home", "after the slot came back")


async def test_a_killed_node_costs_only_its_sessions_and_they_flow_again_after_its_restart(
    pair: tuple[SessionSubscriptionBus, SessionSubscriptionBus], cluster: ClusterServers, prefix: str
) -> None:
    """Last of the Cluster tests: the node comes back empty (no persistence), as after a crash without a disk."""
    a, b = pair
    everywhere = cluster.nodes.index(cluster.node_for(prefix + "events"))
    lost = (everywhere + 1) % 3  # not the global channel's node: the marker must keep flowing
    sids = one_per_node(cluster, prefix)
    streams = {sid: Stream(b, sid) for sid in sids}
    await opened(b, *sids)
    await opened(a)
    # Every stream hears its session's event and the marker first: the earlier test's slot moves have settled
    # (a channel subscribed by a map read while they spread has met MOVED and been placed again).
    ready = ResourceUpdated(uri="note://ready")

    async def all_heard() -> bool:
        if all(ready in s.events and MARKER in s.events for s in streams.values()):
            return True
        for sid, stream in streams.items():
            if ready not in stream.events:
                await a.publish_to_session(sid, ready)
        await a.publish(MARKER)
        return False

    await until_awaited(all_heard, "the streams did not all hear from a")
    heard = {sid: s.events.count(MARKER) for sid, s in streams.items()}
    cluster.nodes[lost].kill()
    try:
        for round_ in range(3):
            for sid in sids:
                await a.publish_to_session(sid, ResourceUpdated(uri=f"note://{round_}"))  # the lost one's is dropped
            await a.publish(MARKER)
            markers = round_ + 1
            await until_awaited(
                lambda: all(s.events.count(MARKER) >= heard[sid] + markers for sid, s in streams.items()),  # noqa: B023
                "the marker",
            )
        for index, sid in enumerate(sids):
            expected = [] if index == lost else [ResourceUpdated(uri=f"note://{r}") for r in range(3)]
            assert [e for e in streams[sid].events if e not in (MARKER, ready)] == expected, (index, lost)
    finally:
        cluster.nodes[lost].start()  # the same port and node identity (nodes.conf)
    cluster.wait_ok()
    took = await published_until_heard(a, sids[lost], streams[sids[lost]], "note://back", "to the restarted node")
    print(f"the restarted node delivered again {took:.1f} s after it was up")


@pytest.fixture(scope="module")
def replicated() -> Iterator[ClusterServers]:
    """A Cluster whose masters each have a replica: a killed master's replica is promoted in its place."""
    with redis_cluster(replicas=1) as servers:
        yield servers


@pytest.mark.timeout(120)
async def test_after_a_cluster_failover_the_same_buses_deliver_from_the_promoted_replica(
    replicated: ClusterServers, prefix: str
) -> None:
    async with buses(replicated.url, prefix, timeout=1.0) as (a, b):
        lost = (replicated.nodes.index(replicated.node_for(prefix + "events")) + 1) % 3  # the marker keeps flowing
        sids = one_per_node(replicated, prefix)
        streams = {sid: Stream(b, sid) for sid in sids}
        await opened(b, *sids)
        await opened(a)
        for sid in sids:
            await a.publish_to_session(sid, ResourceUpdated(uri="note://before"))
        await a.publish(MARKER)
        before = ResourceUpdated(uri="note://before")
        await until_awaited(
            lambda: all(before in s.events and MARKER in s.events for s in streams.values()), "the marker"
        )
        assert all(len(s.events) == 2 for s in streams.values())  # the other sessions' events are not theirs

        replicated.nodes[lost].kill()  # its replica takes its slots over
        promoted = await asyncio.to_thread(replicated.wait_for_promotion, lost)
        took = await published_until_heard(a, sids[lost], streams[sids[lost]], "note://after", "after the failover")
        print(f"delivered again {took:.1f} s after the Cluster promoted the replica")
        for sid in sids:  # every session's events, on the promoted replica and the masters that stayed
            await a.publish_to_session(sid, ResourceUpdated(uri="note://again"))
        await until_awaited(
            lambda: all(ResourceUpdated(uri="note://again") in s.events for s in streams.values()), "again"
        )
        lost_channel = channel(prefix, sids[lost])
        with client(promoted.port) as node:  # the lost session's channel is subscribed there now, by b alone
            assert node.execute_command("PUBSUB", "SHARDNUMSUB", lost_channel) == [lost_channel, 1]
        others = [stream for sid, stream in streams.items() if sid != sids[lost]]
        assert all(ResourceUpdated(uri="note://after") not in stream.events for stream in others)


@pytest.mark.timeout(120)
async def test_after_a_sentinel_failover_the_same_buses_deliver_again(sentinels: SentinelGroup, prefix: str) -> None:
    async with buses(sentinels.url, prefix, timeout=1.0) as (a, b):
        mine, other, everyone = Stream(b, "s1"), Stream(b, "s2"), Stream(a, None)
        await opened(b, "s1", "s2")
        await opened(a)
        await a.publish_to_session("s1", ResourceUpdated(uri="note://before"))
        await b.publish(MARKER)
        await until_awaited(
            lambda: MARKER in other.events and MARKER in everyone.events and MARKER in mine.events, "marker"
        )
        assert mine.events == [ResourceUpdated(uri="note://before"), MARKER]
        assert other.events == [MARKER]

        old = sentinels.master_port()
        sentinels.master.kill()
        await asyncio.to_thread(sentinels.wait_for_failover, old)
        took = await published_until_heard(a, "s1", mine, "note://after", "after the failover")
        print(f"delivered again {took:.1f} s after the Sentinels promoted the replica")
        await a.publish(ToolsListChanged())
        await until_awaited(
            lambda: all(ToolsListChanged() in s.events for s in (mine, other, everyone)), "a global event"
        )
        assert ResourceUpdated(uri="note://after") not in other.events
