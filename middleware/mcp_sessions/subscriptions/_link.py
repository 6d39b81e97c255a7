"""Pub/sub connections to Redis, kept subscribed: :class:`Link`, and the backend of one Redis over one link.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final

from ._backend import Backend

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.asyncio.client import PubSub

    from ._backend import Receive

logger = logging.getLogger("mcp_sessions")

HEALTH_CHECK_INTERVAL: Final = 10.0


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


class RedisBackend(LinkedBackend, Backend):
    """Channels of one Redis (``redis://``, ``rediss://``, ``unix://``, ``redis+sentinel://``), over one pub/sub
    connection per replica whatever the number of listen streams: see the module."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        ready_timeout: float = 5.0,
        min_backoff: float = 0.05,
        max_backoff: float = 5.0,
        health_check_interval: float = HEALTH_CHECK_INTERVAL,
    ) -> None:
        super().__init__(
            ready_timeout=ready_timeout,
            min_backoff=min_backoff,
            max_backoff=max_backoff,
            health_check_interval=health_check_interval,
        )
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
        backend = self._backend
        backoff = backend._min_backoff
        while not self._closed:
            try:
                await self._connection()
            except Exception as exc:  # whatever ended the connection, it is opened again
                if not self._lost:  # once an outage: every attempt of a long one fails the same way
                    self._lost = True
                    logger.warning(
                        "the subscription bus lost its connection to %s (%s); subscribing again, with a backoff "
                        "from %.2f s to %.2f s; events published meanwhile are lost",
                        self._what,
                        type(exc).__name__,
                        backend._min_backoff,
                        backend._max_backoff,
                    )
                self._on_failure()
            backoff = backend._min_backoff if self.confirmed else min(backoff * 2, backend._max_backoff)
            self.confirmed.clear()
            await asyncio.sleep(backoff)

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
