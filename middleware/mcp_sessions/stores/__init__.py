"""Stores for revocation, idle expiry and server-side session data.

``RedisStore`` and ``SQLiteStore`` are imported on first use, so that ``import mcp_sessions``
works without the optional ``redis`` package and loads no more than it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._base import InvalidCursor, SessionRecord, SessionStatus, SessionStore, SessionStoreUnavailable
from ._memory import MemoryStore, SessionStoreFull
from ._urls import REDIS_SCHEMES, StoreFactory, register_store, store_from_url

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster

    from ._redis import RedisStore
    from ._sqlite import SQLiteStore

__all__ = [
    "REDIS_SCHEMES",
    "InvalidCursor",
    "MemoryStore",
    "RedisStore",
    "SQLiteStore",
    "SessionRecord",
    "SessionStatus",
    "SessionStore",
    "SessionStoreFull",
    "SessionStoreUnavailable",
    "StoreFactory",
    "redis_client",
    "register_store",
    "store_from_url",
]


def redis_client(
    url: str, *, timeout: float, connect_timeout: float, max_connections: int
) -> aioredis.Redis | RedisCluster:
    """The client ``RedisStore`` builds from a store URL (checked part by part, bounded, no retries), for the
    other parts that speak to the same Redis: the subscription bus. A ``RedisCluster`` for ``redis+cluster://``
    and ``rediss+cluster://``, a ``Redis`` otherwise. Needs the ``redis`` extra."""
    from ._redis_client import check_client_options, client_from_url

    check_client_options(timeout=timeout, connect_timeout=connect_timeout, max_connections=max_connections)
    return client_from_url(url, timeout=timeout, connect_timeout=connect_timeout, max_connections=max_connections)


def __getattr__(name: str) -> type[SessionStore]:
    if name == "RedisStore":
        from ._redis import RedisStore

        return RedisStore
    if name == "SQLiteStore":
        from ._sqlite import SQLiteStore

        return SQLiteStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
