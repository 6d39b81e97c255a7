"""Stores for revocation, idle expiry and server-side session data.

``RedisStore`` and ``SQLiteStore`` are imported on first use, so that ``import mcp_sessions``
works without the optional ``redis`` package and loads no more than it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._base import InvalidCursor, SessionRecord, SessionStatus, SessionStore, SessionStoreUnavailable
from ._urls import REDIS_SCHEMES, StoreFactory, register_store, store_from_url
from .memory import MemoryStore, SessionStoreFull

if TYPE_CHECKING:
    from .redis import RedisStore
    from .sqlite import SQLiteStore

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
    "register_store",
    "store_from_url",
]


def __getattr__(name: str) -> type[SessionStore]:
    if name == "RedisStore":
        from .redis import RedisStore

        return RedisStore
    if name == "SQLiteStore":
        from .sqlite import SQLiteStore

        return SQLiteStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
