"""The store interface: revocation, idle expiry and server-side session data."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

__all__ = ["SessionStatus", "SessionStore", "SessionStoreUnavailable"]


class SessionStatus(enum.Enum):
    ACTIVE = "active"
    REVOKED = "revoked"
    IDLE_EXPIRED = "idle_expired"


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
    async def get(self, session_id: str, key: str, default: Any = None) -> Any: ...

    @abstractmethod
    async def set(self, session_id: str, key: str, value: Any, *, expires_at: float) -> None: ...

    @abstractmethod
    async def delete(self, session_id: str, key: str) -> None: ...

    @abstractmethod
    async def incr(self, session_id: str, key: str, amount: int = 1, *, expires_at: float) -> int:
        """Atomically add ``amount`` to an integer value (missing counts as 0)."""

    @abstractmethod
    async def update(
        self, session_id: str, key: str, fn: Callable[[Any], Any], *, expires_at: float, default: Any = None
    ) -> Any:
        """Atomically replace a value with ``fn(old)``; returns the new value."""

    @abstractmethod
    async def items(self, session_id: str) -> dict[str, Any]: ...

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the middleware never calls it, the application does."""
