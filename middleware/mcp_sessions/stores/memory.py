"""The embedded default store: one process, bounded, self-pruning."""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from ._base import SessionRecord, SessionStatus, SessionStore, SessionStoreUnavailable

__all__ = ["MemoryStore", "SessionStoreFull"]


class SessionStoreFull(SessionStoreUnavailable):
    """The store holds ``max_sessions`` live sessions; new ones wait until some end."""


class _Entry:
    __slots__ = ("data", "expires_at", "last_seen", "revoked")

    def __init__(self, expires_at: float, now: float) -> None:
        self.expires_at = expires_at
        self.last_seen = now
        self.revoked = False
        self.data: dict[str, str] = {}


def _encode(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class MemoryStore(SessionStore):
    """Sessions of one process, in a dict.

    Bounded by ``max_sessions`` entries (live and revoked-but-unexpired).
    Expired entries are pruned as the store fills. At the cap,
    ``sessions/create`` answers the retryable "store unavailable" error
    instead of forgetting a revocation: a revoked session is never accepted
    again. Sessions unknown to this store (minted before a restart, or by
    another process) are accepted and tracked from their first use when there
    is room; at the cap they are accepted without idle tracking.

    All methods run without awaiting, so each is atomic on its event loop.
    It serves one process: with several replicas, a deletion on one is not
    seen by the others, and a restart forgets revocations and data.
    """

    def __init__(self, *, max_sessions: int = 100_000) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.max_sessions = max_sessions
        self._entries: dict[str, _Entry] = {}
        self._records: dict[str, tuple[str, SessionRecord]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def _prune(self, now: float) -> None:
        expired = [sid for sid, entry in self._entries.items() if entry.expires_at <= now]
        for sid in expired:
            del self._entries[sid]

    def _has_room(self, now: float) -> bool:
        if len(self._entries) < self.max_sessions:
            return True
        self._prune(now)
        return len(self._entries) < self.max_sessions

    async def create(self, session_id: str, *, expires_at: float, now: float) -> None:
        if not self._has_room(now):
            raise SessionStoreFull(f"the memory store holds its maximum of {self.max_sessions} sessions")
        self._entries[session_id] = _Entry(expires_at, now)

    async def touch(self, session_id: str, *, expires_at: float, now: float, idle_ttl: float | None) -> SessionStatus:
        entry = self._entries.get(session_id)
        if entry is None:
            if self._has_room(now):
                self._entries[session_id] = _Entry(expires_at, now)
            return SessionStatus.ACTIVE
        if entry.revoked:
            return SessionStatus.REVOKED
        if idle_ttl is not None and now - entry.last_seen > idle_ttl:
            entry.revoked = True
            entry.data.clear()
            return SessionStatus.IDLE_EXPIRED
        entry.last_seen = now
        return SessionStatus.ACTIVE

    async def revoke(self, session_id: str, *, expires_at: float) -> bool:
        entry = self._entries.get(session_id)
        if entry is None:
            # Always recorded, even past the cap: forgetting a revocation is never an option.
            entry = self._entries[session_id] = _Entry(expires_at, time.time())
        elif entry.revoked:
            return False
        self._records.pop(session_id, None)
        entry.revoked = True
        entry.data.clear()
        return True

    async def record(
        self, session_id: str, *, principal: str, expires_at: float, now: float, data: Mapping[str, Any] | None = None
    ) -> None:
        self._records[session_id] = (principal, SessionRecord(session_id, expires_at, dict(data or {})))

    async def list_sessions(
        self, principal: str, *, now: float, cursor: str | None = None, limit: int = 100
    ) -> tuple[list[SessionRecord], str | None]:
        for sid in [sid for sid, (_, record) in self._records.items() if record.expires_at <= now]:
            del self._records[sid]
        live = sorted(
            sid
            for sid, (owner, _) in self._records.items()
            if owner == principal and not ((entry := self._entries.get(sid)) is not None and entry.revoked)
        )
        start = 0 if cursor is None else bisect.bisect_right(live, cursor)
        page = live[start : start + limit]
        more = start + limit < len(live)
        return [self._records[sid][1] for sid in page], (page[-1] if more and page else None)

    def _live(self, session_id: str, expires_at: float) -> _Entry:
        entry = self._entries.get(session_id)
        if entry is None:
            now = time.time()
            if not self._has_room(now):
                raise SessionStoreFull(f"the memory store holds its maximum of {self.max_sessions} sessions")
            entry = self._entries[session_id] = _Entry(expires_at, now)
        elif entry.revoked:
            # A request that outlives its session's deletion writes into the void.
            return _Entry(expires_at, 0.0)
        return entry

    async def get(self, session_id: str, key: str, default: Any = None) -> Any:
        entry = self._entries.get(session_id)
        if entry is None or key not in entry.data:
            return default
        return json.loads(entry.data[key])

    async def set(self, session_id: str, key: str, value: Any, *, expires_at: float) -> None:
        encoded = _encode(value)
        self._live(session_id, expires_at).data[key] = encoded

    async def delete(self, session_id: str, key: str) -> None:
        entry = self._entries.get(session_id)
        if entry is not None:
            entry.data.pop(key, None)

    async def incr(self, session_id: str, key: str, amount: int = 1, *, expires_at: float) -> int:
        entry = self._live(session_id, expires_at)
        raw = entry.data.get(key)
        current = 0 if raw is None else json.loads(raw)
        if type(current) is not int:
            raise TypeError(f"session data {key!r} is not an integer")
        entry.data[key] = str(current + amount)
        return current + amount

    async def update(
        self, session_id: str, key: str, fn: Callable[[Any], Any], *, expires_at: float, default: Any = None
    ) -> Any:
        entry = self._live(session_id, expires_at)
        raw = entry.data.get(key)
        new = fn(default if raw is None else json.loads(raw))
        entry.data[key] = _encode(new)
        return new

    async def items(self, session_id: str) -> dict[str, Any]:
        entry = self._entries.get(session_id)
        if entry is None:
            return {}
        return {key: json.loads(raw) for key, raw in entry.data.items()}
