"""The Redis backend: one pub/sub connection per replica, whatever the number of listen streams.

One :class:`~._link.Link` (a background task holding the connection, see ``_link``) is
subscribed to the joined channels: the bus's one global channel, and a channel per
session with a stream open here. ``redis://``, ``rediss://``, ``unix://``, and a master
behind Sentinels (``redis+sentinel://``): the Sentinel client's pool asks the Sentinels
for the master each time a connection opens, so after a failover the connection that
replaces the one the old master dropped is the new master's, with the same backoff.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._backend import Backend
from ._link import HEALTH_CHECK_INTERVAL, Link, LinkedBackend

if TYPE_CHECKING:
    import redis.asyncio as aioredis

__all__ = ["RedisBackend"]


class RedisBackend(LinkedBackend, Backend):
    """Channels of one Redis (``redis://``, ``rediss://``, ``unix://``, ``redis+sentinel://``): see the module."""

    __slots__ = ("_client", "_link")

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
        self._link = Link(self, client, sharded=False, what="Redis", on_failure=lambda: None)
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
