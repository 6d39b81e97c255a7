"""Stores for revocation, idle expiry and server-side session data.

``RedisStore`` and ``SQLiteStore`` are imported on first use, so that ``import mcp_sessions``
works without the optional ``redis`` package and loads no more than it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import REDIS_SCHEMES as REDIS_SCHEMES  # internal, for the config and the subscription bus
from ._base import (
    SessionStatus,
    SessionStore,
    SessionStoreUnavailable,
    StoreFactory,
    register_store,
    store_from_url,
)
from ._memory import MemoryStore, SessionStoreFull

if TYPE_CHECKING:
    from ._redis import RedisStore
    from ._redis_client import client_from_url
    from ._sqlite import SQLiteStore

    redis_client_from_url = client_from_url  # internal, for the subscription bus: see __getattr__

__all__ = [
    "MemoryStore",
    "RedisStore",
    "SQLiteStore",
    "SessionStatus",
    "SessionStore",
    "SessionStoreFull",
    "SessionStoreUnavailable",
    "StoreFactory",
    "register_store",
    "store_from_url",
]


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        from ._redis import RedisStore

        return RedisStore
    if name == "SQLiteStore":
        from ._sqlite import SQLiteStore

        return SQLiteStore
    if name == "redis_client_from_url":  # internal: the client a redis:// URL names, for the subscription bus too
        from ._redis_client import client_from_url

        return client_from_url
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
