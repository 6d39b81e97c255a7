"""Stores for revocation, idle expiry and server-side session data."""

from ._base import SessionStatus, SessionStore, SessionStoreUnavailable
from .memory import MemoryStore, SessionStoreFull

__all__ = ["MemoryStore", "SessionStatus", "SessionStore", "SessionStoreFull", "SessionStoreUnavailable"]
