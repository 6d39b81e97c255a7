"""The Redis backend: one pub/sub connection per replica, whatever the number of listen streams.

A background task, started on the running loop when the first channel is joined,
holds the connection: it subscribes to the joined channels (the bus's one global
channel, and a channel per session with a stream open here), reads messages and
hands each to the bus. Joining or leaving wakes a second task of the same
connection, which sends ``SUBSCRIBE`` or ``UNSUBSCRIBE`` for the difference; the
reader sees the confirmations, and :meth:`RedisBackend.ready` waits for them.

When Redis goes away (a restart, a failover, a network cut that closes the
socket) the connection is dropped and opened again after a backoff from
``min_backoff`` doubling to ``max_backoff`` seconds, every joined channel
subscribed again; streams stay open. Messages published meanwhile are lost: Redis
pub/sub keeps nothing, and a listen stream has no replay (clients refetch).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from ._backend import Backend, Receive

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.asyncio.client import PubSub

__all__ = ["RedisBackend"]

logger = logging.getLogger("mcp_sessions")


class RedisBackend(Backend):
    """Channels of one Redis (``redis://``, ``rediss://``, ``unix://``): see the module's docstring."""

    __slots__ = (
        "_changed",
        "_client",
        "_closed",
        "_confirmed",
        "_joined",
        "_max_backoff",
        "_min_backoff",
        "_progress",
        "_ready_timeout",
        "_receive",
        "_task",
    )

    def __init__(
        self, client: aioredis.Redis, *, ready_timeout: float = 5.0, min_backoff: float = 0.05, max_backoff: float = 5.0
    ) -> None:
        if not 0 < min_backoff <= max_backoff <= 60:
            raise ValueError("the bus's backoff is 0 < min_backoff <= max_backoff <= 60 seconds")
        self._client = client
        self._ready_timeout = ready_timeout
        self._min_backoff, self._max_backoff = min_backoff, max_backoff
        self._joined: set[str] = set()
        self._confirmed: set[str] = set()  # subscribed on the current connection, as Redis confirmed
        self._changed = asyncio.Event()
        self._progress = asyncio.Event()  # set, and replaced, whenever a subscription is confirmed
        self._receive: Receive | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def bind(self, receive: Receive) -> None:
        self._receive = receive

    def join(self, channel: str) -> None:
        self._joined.add(channel)
        self._changed.set()
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="mcp-sessions subscription bus")

    def leave(self, channel: str) -> None:
        self._joined.discard(channel)
        self._changed.set()

    async def ready(self, channel: str) -> None:
        """Wait (at most ``ready_timeout`` seconds) until Redis confirms ``channel`` is subscribed."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._ready_timeout):
                while channel in self._joined and channel not in self._confirmed:
                    await self._progress.wait()

    async def publish(self, channel: str, message: bytes) -> None:
        await self._client.publish(channel, message)

    async def aclose(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._client.aclose()

    # -- the connection ----------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self._min_backoff
        while not self._closed:
            try:
                await self._connection()
            except Exception as exc:  # whatever ended the connection, it is opened again
                failure = exc.exceptions[0] if isinstance(exc, ExceptionGroup) else exc
                logger.warning(
                    "the subscription bus lost its Redis connection (%s); subscribing again in %.2f s, "
                    "events published meanwhile are lost",
                    type(failure).__name__,
                    backoff,
                )
            backoff = self._min_backoff if self._confirmed else min(backoff * 2, self._max_backoff)
            self._confirmed.clear()
            await asyncio.sleep(backoff)

    async def _connection(self) -> None:
        """One pub/sub connection, until it fails: the joined channels subscribed, then kept in step."""
        while not self._joined:  # SUBSCRIBE needs a channel
            await self._changed.wait()
            self._changed.clear()
        pubsub = self._client.pubsub()
        try:
            subscribed = set(self._joined)
            self._changed.clear()
            await pubsub.subscribe(*subscribed)
            async with asyncio.TaskGroup() as group:
                group.create_task(self._read(pubsub))
                group.create_task(self._follow(pubsub, subscribed))
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _follow(self, pubsub: PubSub, subscribed: set[str]) -> None:
        """Send ``SUBSCRIBE`` and ``UNSUBSCRIBE`` for what was joined or left since the last time."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            joined = set(self._joined)
            if added := joined - subscribed:
                await pubsub.subscribe(*added)
            if removed := subscribed - joined:
                self._confirmed.difference_update(removed)
                await pubsub.unsubscribe(*removed)
            subscribed.clear()
            subscribed.update(joined)

    async def _read(self, pubsub: PubSub) -> None:
        while True:
            message = await pubsub.get_message(timeout=None)
            if message is None:
                continue
            kind, channel = message["type"], message["channel"]
            if kind == "message" and self._receive is not None:
                self._receive(channel, message["data"])
            elif kind == "subscribe":
                self._confirmed.add(channel)
                self._progress.set()
                self._progress = asyncio.Event()
