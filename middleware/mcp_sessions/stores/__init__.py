"""Stores for revocation, idle expiry and server-side session data.

``RedisStore`` is imported on first use, so that ``import mcp_sessions`` works
without the optional ``redis`` package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import SessionRecord, SessionStatus, SessionStore, SessionStoreUnavailable
from .memory import MemoryStore, SessionStoreFull

if TYPE_CHECKING:
    from .redis import RedisStore

__all__ = [
    "MemoryStore",
    "RedisStore",
    "SessionRecord",
    "SessionStatus",
    "SessionStore",
    "SessionStoreFull",
    "SessionStoreUnavailable",
]


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        from .redis import RedisStore

        return RedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
