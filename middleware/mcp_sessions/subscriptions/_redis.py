"""The Redis backends: :class:`RedisBackend` (one Redis, or the master Sentinels name, over one :class:`Link`)
and :class:`ClusterBackend` (a Redis Cluster's sharded pub/sub, one link per node).

A :class:`Link` opens its connection in a background task when its first channel is
joined, subscribes the joined channels (``SUBSCRIBE``, or ``SSUBSCRIBE`` for a Cluster's
sharded channels), reads the messages and hands each to the bus. Joining or leaving wakes
a second task of the same connection, which sends the subscriptions for the difference;
the reader sees the confirmations, and the backend's ``ready`` waits for them.

A connection can also go silent: no FIN, no RST, the bytes just stop (a NAT's or a load
balancer's idle timeout, a lost host), and no read ever fails. So the reader sends a ``PING``
when the connection brought nothing for ``health_check_interval`` seconds, and drops the
connection when nothing comes back within as long again: a silent connection is noticed
within twice the interval.

When the server goes away (a restart, a failover, a network cut, a silent connection) the
connection is dropped and opened again after a backoff from ``min_backoff`` doubling to
``max_backoff`` seconds, every joined channel subscribed again; streams stay open. The loss
is logged once (a warning), and the return once (an info line). Messages published meanwhile
are lost: pub/sub keeps nothing, and a listen stream has no replay (clients refetch).

A master behind Sentinels (``redis+sentinel://``) needs nothing more: the Sentinel client's pool
asks the Sentinels for the master each time a connection opens, so after a failover the
connection that replaces the one the old master dropped is the new master's.

On a Redis Cluster, :class:`ClusterBackend` uses sharded pub/sub, each channel on the node that owns its
slot. ``SPUBLISH`` sends a message to the node that owns the channel's slot, which delivers it to
its own ``SSUBSCRIBE`` subscribers; classic ``PUBLISH`` is copied to every node over the
cluster bus. A session's channel, ``<prefix>session:{<sid>}``, hashes by its ``{sid}`` tag to
the slot of the session's keys, so its events travel to that one node and to the replicas
listening to that session there, and no further. The global channel is one channel too, on
the node of its slot.

A replica holds one pub/sub connection per node that owns one of its joined channels (at
most one per master), each a :class:`Link` whose reader waits on its own socket (and
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

Not redis-py's ``ClusterPubSub`` (8.1): its ``get_sharded_message`` polls the nodes' connections in
turn, each for up to its timeout; it cannot tell which node went silent (redis-py's health check
sends a ``PING`` but never fails for want of a reply); and a node's connection it closed while
reconciling a moved slot may still be read, raising ``RuntimeError("pubsub connection not set")``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Final

from ._backend import Backend

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.asyncio.client import PubSub
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    from ._backend import Receive

logger = logging.getLogger("mcp_sessions")

HEALTH_CHECK_INTERVAL: Final = 10.0
_REDIS_DEFAULTS: Final = {"timeout": 2.0, "connect_timeout": 2.0, "max_connections": 8}
_HEALTH_CHECK: Final = "health_check_interval"  # the bus's own option: the rest are the client's


async def stopped(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` (if any) until it has ended: redis-py's pub/sub code can swallow a cancellation."""
    while task is not None and not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    if task is not None and not task.cancelled():
        task.exception()  # retrieved: an error is not reported again at exit


class SilentConnection(Exception):
    """Nothing came back on the connection, not even the reply to a ``PING``: it is dropped and opened again."""


class LinkedBackend:
    """What a backend over :class:`Link` objects shares: the bus's ``receive``, backoff, health check, ``ready``."""

    def __init__(
        self,
        *,
        ready_timeout: float = 5.0,
        min_backoff: float = 0.05,
        max_backoff: float = 5.0,
        health_check_interval: float = HEALTH_CHECK_INTERVAL,
    ) -> None:
        if not 0 < min_backoff <= max_backoff <= 60:
            raise ValueError("the bus's backoff is 0 < min_backoff <= max_backoff <= 60 seconds")
        if not 0 < health_check_interval <= 300:
            raise ValueError("health_check_interval must be a number of seconds above 0 and at most 300")
        self._ready_timeout = ready_timeout
        self._health_check_interval = health_check_interval
        self._min_backoff, self._max_backoff = min_backoff, max_backoff
        self._joined: set[str] = set()
        self._progress = asyncio.Event()  # set, and replaced, whenever a subscription is confirmed
        self._receive: Receive | None = None

    def bind(self, receive: Receive) -> None:
        self._receive = receive

    async def ready(self, channel: str) -> None:
        """Wait (at most ``ready_timeout`` seconds) until Redis confirms ``channel`` is subscribed."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._ready_timeout):
                while channel in self._joined and not self._confirmed(channel):
                    await self._progress.wait()

    def _confirmed(self, channel: str) -> bool:
        raise NotImplementedError

    def _deliver(self, channel: str, message: bytes | str) -> None:
        if self._receive is not None:
            self._receive(channel, message)

    def _progressed(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()

    async def _retry(
        self,
        attempt: Callable[[], Awaitable[None]],
        closed: Callable[[], bool],
        failed: Callable[[Exception], bool],
    ) -> None:
        """The one retry loop: ``attempt()`` until ``closed()``, each one ``min_backoff`` seconds after the last
        success, or after a failure that ``failed(exc)`` says got somewhere first; else after a backoff doubling
        from ``min_backoff`` to ``max_backoff``."""
        backoff = self._min_backoff
        while not closed():
            try:
                await attempt()
                backoff = self._min_backoff
            except Exception as exc:  # whatever ended the attempt, it is made again
                if failed(exc):
                    backoff = self._min_backoff
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff)


class RedisBackend(LinkedBackend, Backend):
    """Channels of one Redis (``redis://``, ``rediss://``, ``unix://``, ``redis+sentinel://``), over one pub/sub
    connection per replica whatever the number of listen streams: see the module."""

    def __init__(self, client: aioredis.Redis, **options: float) -> None:
        super().__init__(**options)
        self._client = client
        # A plain Redis never lets a channel go by itself; if one did, it is subscribed again.
        self._link = Link(self, client, sharded=False, what="Redis", on_failure=lambda: None, on_let_go=self.join)
        self._joined = self._link.joined

    def join(self, channel: str) -> None:
        self._link.join(channel)

    def leave(self, channel: str) -> None:
        self._link.leave(channel)

    async def publish(self, channel: str, message: bytes) -> None:
        await self._client.publish(channel, message)

    async def aclose(self) -> None:
        await self._link.aclose()  # and the client

    def _confirmed(self, channel: str) -> bool:
        return channel in self._link.confirmed


class Link:
    """One pub/sub connection to ``client``'s server, subscribed to :attr:`joined`: see the module's docstring."""

    def __init__(
        self,
        backend: LinkedBackend,
        client: aioredis.Redis,
        *,
        sharded: bool,
        what: str,
        on_failure: Callable[[], None],
        on_let_go: Callable[[str], None],
    ) -> None:
        self._backend, self._client, self._sharded, self._what = backend, client, sharded, what
        self._on_failure, self._on_let_go = on_failure, on_let_go
        self.joined: set[str] = set()
        self._subscribed: set[str] = set()  # sent to the current connection
        self.confirmed: set[str] = set()  # subscribed on the current connection, as Redis confirmed
        self._leaving: Counter[str] = Counter()  # unsubscribed by us, the confirmations not read yet
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._lost = False  # the connection failed, and no channel has been confirmed since: said once

    def join(self, channel: str) -> None:
        self.joined.add(channel)
        self._changed.set()
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="mcp-sessions subscription bus")

    def leave(self, channel: str) -> None:
        self.joined.discard(channel)
        self._changed.set()

    async def aclose(self) -> None:
        """Stop the connection's tasks, close it and the client: nothing arrives afterwards."""
        self._closed = True
        await stopped(self._task)
        self._task = None
        await self._client.aclose()

    async def _run(self) -> None:
        await self._backend._retry(self._connection, lambda: self._closed, self._failed)

    def _failed(self, exc: Exception) -> bool:
        """Say the first failure of an outage; whether the connection had subscribed anything before it failed."""
        if not self._lost:  # once an outage: every attempt of a long one fails the same way
            self._lost = True
            logger.warning(
                "the subscription bus lost its connection to %s (%s); subscribing again, with a backoff "
                "from %.2f s to %.2f s; events published meanwhile are lost",
                self._what,
                type(exc).__name__,
                self._backend._min_backoff,
                self._backend._max_backoff,
            )
        self._on_failure()
        subscribed = bool(self.confirmed)
        self.confirmed.clear()
        return subscribed

    async def _connection(self) -> None:
        """One pub/sub connection, until it fails: the joined channels subscribed, then kept in step."""
        while not self.joined:  # SUBSCRIBE needs a channel
            await self._changed.wait()
            self._changed.clear()
        pubsub = self._client.pubsub()
        tasks: list[asyncio.Task[None]] = []
        self._leaving.clear()
        try:
            self._subscribed = set(self.joined)
            self._changed.clear()
            await self._send(pubsub, self._subscribed, subscribe=True)
            loop = asyncio.get_running_loop()
            tasks = [loop.create_task(self._read(pubsub)), loop.create_task(self._follow(pubsub))]
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # the failure that ended the connection
        finally:
            # Not a TaskGroup: it cancels its tasks once, and redis-py's pub/sub code can swallow a
            # cancellation (a bus's aclose hung so, now and then); stopped() cancels until they end.
            for task in tasks:
                await stopped(task)
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _follow(self, pubsub: PubSub) -> None:
        """Subscribe and unsubscribe what was joined or left since the last time."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            joined, subscribed = set(self.joined), self._subscribed
            self._subscribed = joined
            if added := joined - subscribed:
                await self._send(pubsub, added, subscribe=True)
            if removed := subscribed - joined:
                self.confirmed.difference_update(removed)
                self._leaving.update(removed)  # Counter.update counts
                await self._send(pubsub, removed, subscribe=False)

    async def _send(self, pubsub: PubSub, channels: Iterable[str], *, subscribe: bool) -> None:
        if not self._sharded:
            await (pubsub.subscribe if subscribe else pubsub.unsubscribe)(*channels)
            return
        for channel in channels:  # a node refuses the channels of two slots in one command (CROSSSLOT)
            await (pubsub.ssubscribe if subscribe else pubsub.sunsubscribe)(channel)

    async def _read(self, pubsub: PubSub) -> None:
        from redis.crc import key_slot  # the redis extra's: the module loads without it
        from redis.exceptions import MovedError

        interval = self._backend._health_check_interval
        pinged = False
        while True:
            try:
                message = await pubsub.get_message(timeout=interval)
            except MovedError as exc:  # an SSUBSCRIBE sent by a slot map already out of date: not subscribed
                self._let_go([c for c in self._subscribed - self.confirmed if key_slot(c.encode()) == exc.slot_id])
                continue
            if message is None:  # nothing for a whole interval: the connection may be silent
                if pinged:
                    raise SilentConnection(f"no reply to a PING within {interval} s")
                await pubsub.ping()  # its reply (a "pong" message) is read as any other
                pinged = True
                continue
            pinged = False
            kind, channel = message["type"], message["channel"]
            if kind in ("message", "smessage"):
                self._backend._deliver(channel, message["data"])
            elif kind in ("subscribe", "ssubscribe"):
                self.confirmed.add(channel)
                if self._lost:
                    self._lost = False
                    logger.info("the subscription bus is subscribed again on %s", self._what)
                self._backend._progressed()
            elif kind in ("unsubscribe", "sunsubscribe"):
                if self._leaving[channel] < 1:  # let go by the server itself: a Cluster slot moved
                    self._let_go([channel])
                    continue
                self._leaving[channel] -= 1
                if not self._leaving[channel]:
                    del self._leaving[channel]

    def _let_go(self, channels: list[str]) -> None:
        """The server holds ``channels`` no more (a Cluster slot moved): forgotten here, placed again by the backend;
        the connection's other channels stay as they are."""
        for channel in channels:
            for held in (self.joined, self._subscribed, self.confirmed):
                held.discard(channel)
            self._on_let_go(channel)


class ClusterBackend(LinkedBackend, Backend):
    """Sharded channels of a Redis Cluster (``redis+cluster://``, ``rediss+cluster://``): see the module."""

    def __init__(self, client: RedisCluster, **options: float) -> None:
        super().__init__(**options)
        self._client = client
        self._links: dict[str, Link] = {}  # by node name (host:port)
        self._owner: dict[str, str] = {}  # channel -> the name of the node whose link subscribes it
        self._remap = asyncio.Event()  # the slot map is to be read (again), and every channel placed
        self._mapped = False
        self._failing = False  # the slot map could not be read, and has not been since
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
        from redis.exceptions import ConnectionError, MovedError, TimeoutError

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
        from redis.exceptions import SlotNotCoveredError

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
        """Read the slot map whenever asked to (a failure, a moved slot), and place every channel by it. A
        successful read is followed by a pause of ``min_backoff``: while a moved slot's news spreads, a map from
        a node that has not heard it places the channel on its old owner, whose MOVED asks for a read again."""
        await self._retry(self._remap_once, lambda: self._closed, self._failed)

    async def _remap_once(self) -> None:
        await self._remap.wait()
        self._remap.clear()
        await self._read_map()
        self._failing = False
        for channel in list(self._joined):
            self._place(channel)

    def _failed(self, exc: Exception) -> bool:
        if not self._failing:  # said once: every attempt of a long outage fails the same way
            logger.warning(
                "the subscription bus could not read the Redis Cluster's slot map (%s); reading it again, "
                "with a backoff from %.2f s to %.2f s",
                type(exc).__name__,
                self._min_backoff,
                self._max_backoff,
            )
        self._failing = True
        self._remap.set()
        return False


def _node_client(node: ClusterNode) -> aioredis.Redis:
    """A client of one node with the cluster client's connection settings (password, TLS, deadlines, RESP2)."""
    import redis.asyncio as aioredis

    pool = aioredis.ConnectionPool(connection_class=node.connection_class, max_connections=1, **node.connection_kwargs)
    return aioredis.Redis.from_pool(pool)


def redis_backend(url: str, **options: object) -> Backend:
    """Redis, through the store's own client from the URL (checked part by part, the password never shown):
    one server or a master behind Sentinels (:class:`RedisBackend`), or a Cluster (:class:`ClusterBackend`)."""
    from redis.asyncio.cluster import RedisCluster

    from ..stores import redis_client_from_url

    unknown = sorted(set(options) - {*_REDIS_DEFAULTS, _HEALTH_CHECK})
    if unknown:
        accepted = ", ".join([*_REDIS_DEFAULTS, _HEALTH_CHECK])
        raise TypeError(f"unknown option {unknown[0]!r} of a Redis bus (accepted: {accepted})")
    interval = options.pop(_HEALTH_CHECK, HEALTH_CHECK_INTERVAL)
    settings = {**_REDIS_DEFAULTS, **options}
    client = redis_client_from_url(url, **settings)  # type: ignore[arg-type]
    ready_timeout = float(settings["timeout"]) * 2  # type: ignore[arg-type]
    backend = ClusterBackend if isinstance(client, RedisCluster) else RedisBackend
    return backend(client, ready_timeout=ready_timeout, health_check_interval=interval)  # type: ignore[arg-type]
