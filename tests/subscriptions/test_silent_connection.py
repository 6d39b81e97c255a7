"""A subscription connection that goes silent, through a real redis-server behind a forwarder of the test's own.

Silent: no FIN, no RST, the bytes just stop (a NAT's or a load balancer's idle timeout, a lost
host), so no read fails and TCP keepalive notices nothing for hours. The bus sends a ``PING`` on
a connection that brought nothing for ``health_check_interval`` seconds and drops it when nothing
comes back within as long again: noticed within twice the interval, opened again, every channel
subscribed again, said once in the logs (a warning when lost, an info line when back). The same
on a Cluster, each node's connection on its own; a Sentinel-named master's connection is the one
Redis backend's, tested here on one server.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import pytest
from mcp.shared.subscriptions import ResourceUpdated

from _redis import Forwarder, RedisServer
from _redis_topologies import REDIS_DOWN, ClusterServers, client
from _waits import until, until_awaited
from mcp_sessions.subscriptions import SessionSubscriptionBus
from subscriptions._streams import Stream, channel, one_per_node, opened

pytestmark = pytest.mark.anyio

INTERVAL = 0.2
EVENT = ResourceUpdated(uri="note://after")


async def delivered_again(
    bus: SessionSubscriptionBus,
    streams: dict[str, Stream],
    publish: Callable[[], Awaitable[None]],
    caplog: pytest.LogCaptureFixture,
    since: float,
) -> None:
    """Once the bus has said it lost the connection and is subscribed again, and confirms every stream's channel,
    :data:`EVENT` published once reaches every stream. How long that took is printed: the bound the docs give
    (twice the interval, plus a backoff) is a figure to read, not a check a busy machine may fail."""
    await until_awaited(
        lambda: len(said(caplog)) >= 2, lambda: f"the bus to say it is subscribed again: {said(caplog)}"
    )
    await opened(bus, *streams)
    await publish()
    await until_awaited(lambda: all(EVENT in s.events for s in streams.values()), "the event on every stream")
    print(f"delivered again {time.monotonic() - since:.2f} s after the connection went silent")


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if "subscription bus" in r.getMessage()]


async def test_a_silent_connection_is_noticed_and_every_stream_gets_events_again(
    redis: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with Forwarder(redis.port) as forwarder:
        listening = SessionSubscriptionBus.from_url(
            f"redis://127.0.0.1:{forwarder.port}/0", prefix=prefix, timeout=1.0, health_check_interval=INTERVAL
        )
        publishing = SessionSubscriptionBus.from_url(redis.url, prefix=prefix)
        try:
            open_before = Stream(listening, "s1")
            await opened(listening, "s1")
            await publishing.publish_to_session("s1", ResourceUpdated(uri="note://before"))
            await until_awaited(lambda: bool(open_before.events), "the event before the silence")

            caplog.set_level(logging.INFO, logger="mcp_sessions")
            forwarder.silence()
            silenced = time.monotonic()
            opened_meanwhile = Stream(listening, "s2")  # its listen is acknowledged: its events must arrive too

            async def publish() -> None:
                await publishing.publish_to_session("s1", EVENT)
                await publishing.publish_to_session("s2", EVENT)

            await delivered_again(listening, {"s1": open_before, "s2": opened_meanwhile}, publish, caplog, silenced)
        finally:
            await listening.aclose()
            await publishing.aclose()
    assert [level for level, _ in said(caplog)] == ["WARNING", "INFO"], said(caplog)
    assert "(SilentConnection)" in said(caplog)[0][1]


def announce(cluster: ClusterServers, ports: list[int]) -> None:
    """Each node tells clients to reach it on ``ports[i]`` (0: its own port), and every node's map says so."""
    for node, port in zip(cluster.nodes, ports, strict=True):
        with client(node.port) as c:
            c.config_set("cluster-announce-port", port)
    expected = {port or node.port for node, port in zip(cluster.nodes, ports, strict=True)}

    def known() -> bool:
        for node in cluster.nodes:
            with client(node.port) as c:
                if {int(entry[2][1]) for entry in c.execute_command("CLUSTER", "SLOTS")} != expected:
                    return False
        return True

    until(known, "every node's map to name the announced ports", ignoring=REDIS_DOWN)


async def test_on_a_cluster_a_silent_node_connection_is_noticed_and_subscribed_again(
    cluster: ClusterServers, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    everywhere = cluster.nodes.index(cluster.node_for(prefix + "events"))
    quiet = (everywhere + 1) % 3  # not the global channel's node: one connection goes silent, not two
    sid = one_per_node(cluster, prefix)[quiet]
    async with contextlib.AsyncExitStack() as stack:
        forwarders = [await stack.enter_async_context(Forwarder(node.port)) for node in cluster.nodes]
        announce(cluster, [forwarder.port for forwarder in forwarders])
        stack.callback(announce, cluster, [0] * len(cluster.nodes))
        listening = SessionSubscriptionBus.from_url(
            cluster.url, prefix=prefix, timeout=1.0, health_check_interval=INTERVAL
        )
        stack.push_async_callback(listening.aclose)
        stream = Stream(listening, sid)
        await opened(listening, sid)

        caplog.set_level(logging.INFO, logger="mcp_sessions")
        forwarders[quiet].silence()
        silenced = time.monotonic()
        # Created now, its connections are new ones, which the forwarders pass on.
        publishing = SessionSubscriptionBus.from_url(cluster.url, prefix=prefix, timeout=1.0)
        stack.push_async_callback(publishing.aclose)
        await delivered_again(
            listening, {sid: stream}, lambda: publishing.publish_to_session(sid, EVENT), caplog, silenced
        )
        with client(cluster.nodes[quiet].port) as node:
            assert channel(prefix, sid) in node.pubsub_shardchannels(prefix + "*")
    assert [level for level, _ in said(caplog)] == ["WARNING", "INFO"], said(caplog)
    assert f"node 127.0.0.1:{forwarders[quiet].port} (SilentConnection)" in said(caplog)[0][1]
