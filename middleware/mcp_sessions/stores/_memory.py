"""The embedded default store: one process, bounded, with expiry-ordered eviction."""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ._base import (
    SessionStatus,
    SessionStore,
    SessionStoreUnavailable,
    adding,
    encode_value,
    touch_verdict,
)

_T = TypeVar("_T")

logger = logging.getLogger("mcp_sessions")

# Expired entries removed on each insertion, so that memory follows the live set before the cap is reached.
_EVICT_PER_INSERT = 2
_worker_warning_given = False


class SessionStoreFull(SessionStoreUnavailable):
    """The store holds ``max_sessions`` live sessions; new ones wait until some end."""


@dataclass(eq=False)
class _Entry:
    session_id: str
    expires_at: float
    last_seen: float | None = None  # None: not seen since the token was issued
    revoked: bool = False
    data: dict[str, str] = field(default_factory=dict)


def _warn_in_a_worker_process() -> None:
    """Warn once per process when it serves as one of several workers.

    ``uvicorn --workers N`` (and ``--reload``) start workers with ``multiprocessing``; gunicorn forks
    them from its arbiter, which sets ``SERVER_SOFTWARE=gunicorn/<version>`` for every process.
    """
    global _worker_warning_given
    in_a_worker = multiprocessing.parent_process() is not None or os.environ.get("SERVER_SOFTWARE", "").startswith(
        "gunicorn/"
    )
    if _worker_warning_given or not in_a_worker:
        return
    _worker_warning_given = True
    logger.warning(
        "MemoryStore in a worker process: if several processes serve this app, each keeps its own sessions, "
        "so a session deleted in one stays valid in the others and session.data is not shared. "
        "On one machine use SQLiteStore (MCP_SESSIONS_STORE=sqlite:///path/to/sessions.db); "
        "on several, RedisStore (MCP_SESSIONS_STORE=redis://host:6379/0)"
    )


class MemoryStore(SessionStore):
    """Sessions of one process, in a dict.

    Bounded by ``max_sessions`` records (live and revoked-but-unexpired). A
    session gets a record only when it must (see :class:`SessionStore`):
    ``sessions/create`` stores nothing, a touch without idle timeout only
    reads. Expired records leave in expiry order (a heap, so each request does
    O(log n) work at most, amortised, at the cap or not). At the cap, a write
    that needs a new record raises :class:`SessionStoreFull` (retryable)
    instead of forgetting a revocation: revocations are always recorded, even
    past the cap, and a revoked session is never accepted again.

    All methods run without awaiting, so each is atomic on its event loop.
    It serves one process: with several worker processes or replicas, a
    deletion in one is not seen by the others, and a restart forgets
    revocations and data. Created in a worker process, it logs a warning once.
    """

    def __init__(self, *, max_sessions: int = 100_000) -> None:
        if type(max_sessions) is not int or max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.max_sessions = max_sessions
        self._entries: dict[str, _Entry] = {}
        self._by_expiry: list[tuple[float, int, _Entry]] = []
        self._order = itertools.count()
        self._examined = 0  # heap items looked at by eviction: the tests' proof of bounded work
        _warn_in_a_worker_process()

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"MemoryStore(max_sessions={self.max_sessions})"

    def _evict_expired(self, now: float, budget: int) -> None:
        """Drop up to ``budget`` records whose expiry has passed, soonest first."""
        heap = self._by_expiry
        while budget > 0 and heap and heap[0][0] <= now:
            _, _, entry = heapq.heappop(heap)
            self._examined += 1
            if self._entries.get(entry.session_id) is entry and entry.expires_at <= now:
                del self._entries[entry.session_id]
                budget -= 1

    def _current(self, session_id: str, now: float) -> _Entry | None:
        entry = self._entries.get(session_id)
        return None if entry is None or entry.expires_at <= now else entry

    def _insert(self, session_id: str, expires_at: float, now: float, *, past_the_cap: bool = False) -> _Entry:
        """A new record, replacing an expired one; :class:`SessionStoreFull` at the cap unless ``past_the_cap``."""
        self._evict_expired(now, _EVICT_PER_INSERT)
        if len(self._entries) >= self.max_sessions and not past_the_cap:
            self._evict_expired(now, len(self._entries) - self.max_sessions + 1)
            if len(self._entries) >= self.max_sessions:
                raise SessionStoreFull(f"the memory store holds its maximum of {self.max_sessions} sessions")
        entry = self._entries[session_id] = _Entry(session_id, expires_at)
        heapq.heappush(self._by_expiry, (expires_at, next(self._order), entry))
        return entry

    def _live(self, session_id: str, expires_at: float, now: float) -> _Entry | None:
        """The session's record, made if missing; ``None`` once it is revoked (a write then goes nowhere)."""
        entry = self._current(session_id, now)
        if entry is None:
            return self._insert(session_id, expires_at, now)
        return None if entry.revoked else entry

    def _end(self, entry: _Entry, expires_at: float) -> None:
        entry.revoked = True
        entry.data.clear()
        if expires_at > entry.expires_at:  # the tombstone lives as long as the token
            entry.expires_at = expires_at
            heapq.heappush(self._by_expiry, (expires_at, next(self._order), entry))

    async def touch(
        self,
        session_id: str,
        *,
        expires_at: float,
        now: float,
        idle_ttl: float | None,
        issued_at: float | None = None,
    ) -> SessionStatus:
        entry = self._current(session_id, now)
        start = now if issued_at is None else issued_at
        found = None if entry is None else (entry.revoked, entry.last_seen)
        status, _ = touch_verdict(found, start, now, idle_ttl, 0.0)
        if status is SessionStatus.IDLE_EXPIRED and entry is not None:
            self._end(entry, expires_at)
        elif status is SessionStatus.ACTIVE and idle_ttl is not None:
            if entry is None:
                entry = self._insert(session_id, expires_at, now)
            entry.last_seen = max(now, start if entry.last_seen is None else entry.last_seen)
        return status

    async def revoke(self, session_id: str, *, expires_at: float) -> bool:
        now = time.time()
        entry = self._current(session_id, now)
        if entry is None:
            entry = self._insert(session_id, expires_at, now, past_the_cap=True)
        elif entry.revoked:
            return False
        self._end(entry, expires_at)
        return True

    async def get(self, session_id: str, key: str, default: object = None) -> Any:
        entry = self._entries.get(session_id)
        if entry is None or key not in entry.data:
            return default
        return json.loads(entry.data[key])

    async def set(self, session_id: str, key: str, value: object, *, expires_at: float) -> None:
        encoded = encode_value(value)
        entry = self._live(session_id, expires_at, time.time())
        if entry is not None:
            entry.data[key] = encoded

    async def delete(self, session_id: str, key: str) -> None:
        entry = self._entries.get(session_id)
        if entry is not None:
            entry.data.pop(key, None)

    async def incr(self, session_id: str, key: str, amount: int = 1, *, expires_at: float) -> int:
        return await self.update(session_id, key, adding(key, amount), expires_at=expires_at, default=0)

    async def update(
        self, session_id: str, key: str, fn: Callable[[Any], _T], *, expires_at: float, default: object = None
    ) -> _T:
        """Replace a value with ``fn(old)``; atomic on the event loop (``fn`` must not await)."""
        entry = self._live(session_id, expires_at, time.time())
        raw = None if entry is None else entry.data.get(key)
        new = fn(default if raw is None else json.loads(raw))
        encoded = encode_value(new)
        if entry is not None:
            entry.data[key] = encoded
        return new

    async def items(self, session_id: str) -> dict[str, Any]:
        entry = self._entries.get(session_id)
        return {} if entry is None else {key: json.loads(raw) for key, raw in entry.data.items()}
