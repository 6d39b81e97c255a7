"""The store interface: revocation, idle expiry and server-side session data."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

__all__ = ["SessionRecord", "SessionStatus", "SessionStore", "SessionStoreUnavailable"]


class SessionRecord(NamedTuple):
    """A session as a listing shows it: its stable id, absolute expiry and what the wire recorded with it."""

    session_id: str
    """The session's stable id (the ``sid`` claim)."""
    expires_at: float
    """The session's absolute expiry, Unix seconds."""
    data: Mapping[str, Any]
    """What the wire recorded with the session when it was created."""


class SessionStatus(enum.Enum):
    """What :meth:`SessionStore.touch` found: whether the session may be used."""

    ACTIVE = "active"
    """The session may be used (a store that does not know it yet starts tracking it)."""
    REVOKED = "revoked"
    """The session was deleted: the middleware answers ``-32043``."""
    IDLE_EXPIRED = "idle_expired"
    """The session went unused for longer than ``idle_ttl`` and has ended: ``-32043``."""


class SessionStoreUnavailable(Exception):
    """The store cannot answer now; the client should retry (never -32043)."""


class SessionStore(ABC):
    """Where a deployment keeps what a stateless token cannot carry.

    Every method takes the session's stable id (the ``sid`` claim), never the
    token. ``expires_at`` is the session's absolute expiry (Unix seconds):
    a store keeps nothing about a session past it. Values are JSON-serializable;
    every store stores a copy, so mutating a value after ``set`` changes nothing.
    Stores raise :class:`SessionStoreUnavailable` when their backend fails.
    """

    @abstractmethod
    async def create(self, session_id: str, *, expires_at: float, now: float) -> None:
        """Record a new session (its idle clock starts now)."""

    @abstractmethod
    async def touch(self, session_id: str, *, expires_at: float, now: float, idle_ttl: float | None) -> SessionStatus:
        """Check a session on use and refresh its idle clock: the hot path, one round trip."""

    @abstractmethod
    async def revoke(self, session_id: str, *, expires_at: float) -> bool:
        """End a session and drop its data; ``False`` if it was already ended."""

    @abstractmethod
    async def get(self, session_id: str, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default`` if there is none."""

    @abstractmethod
    async def set(self, session_id: str, key: str, value: Any, *, expires_at: float) -> None:
        """Store a copy of ``value`` under ``key``; a write to a revoked session is dropped."""

    @abstractmethod
    async def delete(self, session_id: str, key: str) -> None:
        """Remove ``key``; nothing happens if it is not there."""

    @abstractmethod
    async def incr(self, session_id: str, key: str, amount: int = 1, *, expires_at: float) -> int:
        """Atomically add ``amount`` to an integer value (missing counts as 0)."""

    @abstractmethod
    async def update(
        self, session_id: str, key: str, fn: Callable[[Any], Any], *, expires_at: float, default: Any = None
    ) -> Any:
        """Atomically replace a value with ``fn(old)``; returns the new value."""

    @abstractmethod
    async def items(self, session_id: str) -> dict[str, Any]:
        """Every key of the session's data with its value (``{}`` for none)."""

    async def record(
        self, session_id: str, *, principal: str, expires_at: float, now: float, data: Mapping[str, Any] | None = None
    ) -> None:
        """Remember a session for listing to ``principal`` (optional: stores that cannot list raise)."""
        raise NotImplementedError("listing not supported by this store")

    async def list_sessions(
        self, principal: str, *, now: float, cursor: str | None = None, limit: int = 100
    ) -> tuple[list[SessionRecord], str | None]:
        """The live recorded sessions of ``principal``, a page at a time, and the next page's cursor."""
        raise NotImplementedError("listing not supported by this store")

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the middleware never calls it, the application does."""
