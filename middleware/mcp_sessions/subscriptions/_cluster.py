"""The Redis Cluster backend: sharded pub/sub, each channel on the node that owns its slot.

``SPUBLISH`` sends a message to the node that owns the channel's slot, which delivers it to
its own ``SSUBSCRIBE`` subscribers; classic ``PUBLISH`` is copied to every node over the
cluster bus. A session's channel, ``<prefix>session:{<sid>}``, hashes by its ``{sid}`` tag to
the slot of the session's keys, so its events travel to that one node and to the replicas
listening to that session there, and no further. The global channel is one channel too, on
the node of its slot.

A replica holds one pub/sub connection per node that owns one of its joined channels (at
most one per master), each a :class:`~._link.Link` whose reader waits on its own socket (and
checks it with a ``PING`` when it stays quiet): no polling, no node starving another. The slot
map is the cluster client's, read when the first channel is joined. When a slot moves, its
node sends a ``SUNSUBSCRIBE`` for each of the slot's channels by itself: the map is read
again and those channels are subscribed on their new owner's connection, while the old
owner's connection keeps its other channels. So is a channel whose ``SSUBSCRIBE`` was sent by
a map already out of date (a slot that moved while no channel of it was joined here), which
the old owner answers with ``MOVED``. The map is read at most once per ``min_backoff``. When
a node's connection fails (a silent one included), the map is read again and each channel
placed by it; the connection is opened again with the Redis backend's backoff, and events
published meanwhile are lost. A node that is down costs only the channels of its slots: the
other nodes' connections stay subscribed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING

from redis.exceptions import ConnectionError, MovedError, SlotNotCoveredError, TimeoutError

from ._backend import Backend
from ._link import Link, LinkedBackend, stopped

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import ClusterNode, RedisCluster

logger = logging.getLogger("mcp_sessions")


class ClusterBackend(LinkedBackend, Backend):
    """Sharded channels of a Redis Cluster (``redis+cluster://``, ``rediss+cluster://``): see the module."""

    def __init__(self, client: RedisCluster, **options: float) -> None:
        super().__init__(**options)
        self._client = client
        self._links: dict[str, Link] = {}  # by node name (host:port)
        self._owner: dict[str, str] = {}  # channel -> the name of the node whose link subscribes it
        self._remap = asyncio.Event()  # the slot map is to be read (again), and every channel placed
        self._mapped = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def join(self, channel: str) -> None:
        self._joined.add(channel)
        if self._mapped:
            self._place(channel)
        else:
            self._remap_soon()  # every joined channel is placed once the map is read

    def leave(self, channel: str) -> None:
        self._joined.discard(channel)
        name = self._owner.pop(channel, None)
        if name is not None:
            self._links[name].leave(channel)

    async def publish(self, channel: str, message: bytes) -> None:
        """``SPUBLISH`` on the node that owns the channel's slot, sent by this backend rather than by
        ``RedisCluster.execute_command``: after one node's connection error, that path reads the map again
        and asks the map's first node for ``COMMAND``, and while that node is the lost one every command
        fails, to every node. A ``MOVED`` (the slot moved, the command was not run) reads the map again and
        sends the message once more, to the new owner; a connection error reads it again for the next one."""
        try:
            try:
                await (await self._node(channel)).execute_command("SPUBLISH", channel, message)
            except MovedError:
                await self._read_map()
                await (await self._node(channel)).execute_command("SPUBLISH", channel, message)
        except (ConnectionError, TimeoutError):
            self._remap_soon()  # a replica promoted in its place is found
            raise

    async def aclose(self) -> None:
        self._closed = True
        await stopped(self._task)
        self._task = None
        for link in self._links.values():
            await link.aclose()
        await self._client.nodes_manager.aclose()  # the client was never initialized: its nodes are closed here
        await self._client.nodes_manager.aclose("startup_nodes")

    def _confirmed(self, channel: str) -> bool:
        name = self._owner.get(channel)
        return name is not None and channel in self._links[name].confirmed

    def _place(self, channel: str) -> None:
        """Subscribe ``channel`` on the connection to the node that owns its slot, as the map says."""
        try:
            node = self._client.nodes_manager.get_node_from_slot(self._client.keyslot(channel))
        except SlotNotCoveredError:  # its node was lost from the map: read it again
            self._remap_soon()
            return
        current = self._owner.get(channel)
        if current == node.name:
            return
        if current is not None:
            self._links[current].leave(channel)
        self._owner[channel] = node.name
        link = self._links.get(node.name)
        if link is None:
            what = f"Redis Cluster node {node.name}"
            link = Link(
                self,
                _node_client(node),
                sharded=True,
                what=what,
                on_failure=self._remap_soon,
                on_let_go=functools.partial(self._let_go, node.name),
            )
            self._links[node.name] = link
        link.join(channel)

    def _let_go(self, name: str, channel: str) -> None:
        """Node ``name`` let ``channel`` go (its slot moved): the channel is placed again by a map read again."""
        if self._owner.get(channel) == name:
            del self._owner[channel]
        self._remap_soon()

    async def _node(self, channel: str) -> ClusterNode:
        if not self._mapped:
            await self._read_map()
        return self._client.nodes_manager.get_node_from_slot(self._client.keyslot(channel))

    async def _read_map(self) -> None:
        """The slot map, from the first node that answers (one that failed last is asked last)."""
        await self._client.nodes_manager.initialize()
        self._mapped = True

    def _remap_soon(self) -> None:
        self._remap.set()
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="mcp-sessions cluster slot map")

    async def _run(self) -> None:
        """Read the slot map whenever asked to (a failure, a moved slot), and place every channel by it."""
        backoff = self._min_backoff
        failing = False  # said once: every attempt of a long outage fails the same way
        while not self._closed:
            await self._remap.wait()
            self._remap.clear()
            try:
                await self._read_map()
            except Exception as exc:
                if not failing:
                    logger.warning(
                        "the subscription bus could not read the Redis Cluster's slot map (%s); reading it again, "
                        "with a backoff from %.2f s to %.2f s",
                        type(exc).__name__,
                        self._min_backoff,
                        self._max_backoff,
                    )
                failing = True
                self._remap.set()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff)
                continue
            backoff, failing = self._min_backoff, False
            for channel in list(self._joined):
                self._place(channel)
            # Read again at most this often: while a moved slot's news spreads, a map from a node that has not
            # heard it places the channel on its old owner, whose MOVED would otherwise ask for a read at once.
            await asyncio.sleep(self._min_backoff)


def _node_client(node: ClusterNode) -> aioredis.Redis:
    """A client of one node with the cluster client's connection settings (password, TLS, deadlines, RESP2)."""
    import redis.asyncio as aioredis

    pool = aioredis.ConnectionPool(connection_class=node.connection_class, max_connections=1, **node.connection_kwargs)
    return aioredis.Redis.from_pool(pool)
