"""A store for one machine with several worker processes: one SQLite file in WAL mode.

Standard library only (``sqlite3``). Every worker process (``uvicorn --workers N``,
gunicorn) opens the same file: sessions, data and revocations are shared, and they
survive a restart. Writes that must see the current value (``incr``, ``update``, the
idle clock, revocation) run in a ``BEGIN IMMEDIATE`` transaction, so they are atomic
across processes; readers never wait for writers (WAL).

Reads run in the event loop; writes run on one thread of the store's own. Measured
(``benchmarks/bench_stores.py``): an indexed read costs about 5 µs, the hop to a thread
50 to 100 µs on a busy machine, so the hot path (a touch without idle timeout is one
read) stays in the loop. In WAL mode a reader never waits for a writer. A write may
wait up to ``timeout`` seconds for another process's lock, so writes never run in the
loop: it serves other requests meanwhile. Each thread has its own connection, so a
read never sees another call's unfinished transaction.

This module says what each store call means; the tables and statements are in
:mod:`._sqlite_schema`, the thread and connections in :mod:`._sqlite_writer`.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ._base import (
    SessionRecord,
    SessionStatus,
    SessionStore,
    check_page_size,
    decode_cursor,
    encode_cursor,
    idle_expired,
)
from ._memory import _encode
from ._sqlite_schema import (
    DELETE_VALUE,
    Row,
    end_session,
    insert_session,
    read_items,
    read_page,
    read_row,
    read_value,
    set_label,
    set_last_seen,
    store_value,
    wider_than_private,
)
from ._sqlite_writer import SQLiteWriter

logger = logging.getLogger("mcp_sessions")

__all__ = ["SQLiteStore"]


class SQLiteStore(SessionStore):
    """Revocations, idle expiry and ``session.data`` in one SQLite file, shared by the processes of one machine.

    ``path`` is the database file (created with its tables if missing; its directory
    must exist). ``timeout`` bounds the wait for another process's write lock
    (SQLite's busy timeout); past it the call raises :class:`SessionStoreUnavailable`.
    The last-seen time is written at most once per ``touch_interval`` seconds (or a
    tenth of ``idle_ttl`` if shorter): a session ends between ``idle_ttl`` and
    ``idle_ttl`` + that interval after its last use, never earlier. Expired rows are
    deleted ``cleanup_batch`` at a time, at most once per ``cleanup_interval`` seconds,
    by whichever write comes along: no request ever scans the table.

    Do not put the file on a network file system: SQLite's locking, and so WAL, needs
    one machine. For several machines use :class:`~mcp_sessions.stores.RedisStore`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 2.0,
        touch_interval: float = 1.0,
        cleanup_batch: int = 100,
        cleanup_interval: float = 1.0,
    ) -> None:
        if not 0 < timeout <= 60:
            raise ValueError("timeout must be a number of seconds above 0 and at most 60")
        if not 0 <= touch_interval <= 3600:
            raise ValueError("touch_interval must be a number of seconds from 0 to 3600")
        if type(cleanup_batch) is not int or not 1 <= cleanup_batch <= 10_000:
            raise ValueError("cleanup_batch must be an integer from 1 to 10000")
        if not 0 <= cleanup_interval <= 3600:
            raise ValueError("cleanup_interval must be a number of seconds from 0 to 3600")
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise ValueError(f"the SQLite store's directory does not exist: {self.path.parent}")
        if exposed := wider_than_private(self.path):
            logger.warning(
                "the SQLite store's files can be read by others (session data, principal digests): %s; chmod 600 them",
                ", ".join(exposed),
            )
        self.timeout = float(timeout)
        self.touch_interval = float(touch_interval)
        self.cleanup_batch = cleanup_batch
        self.cleanup_interval = float(cleanup_interval)
        self._writer = SQLiteWriter(
            self.path, timeout=self.timeout, cleanup_batch=cleanup_batch, cleanup_interval=self.cleanup_interval
        )

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, timeout={self.timeout})"

    async def ping(self) -> None:
        """Raise :class:`SessionStoreUnavailable` unless the database answers a trivial query now."""
        self._writer.read_here("SELECT 1", ())

    async def aclose(self) -> None:
        """Close the connection and stop the store's thread."""
        await self._writer.aclose()

    # -- sessions --------------------------------------------------------------

    async def touch(
        self,
        session_id: str,
        *,
        expires_at: float,
        now: float,
        idle_ttl: float | None,
        issued_at: float | None = None,
    ) -> SessionStatus:
        """One indexed read; a write transaction only when the idle clock must move or just ran out."""
        start = now if issued_at is None else issued_at
        interval = 0.0 if idle_ttl is None else min(self.touch_interval, idle_ttl / 10)

        def verdict(row: Row | None) -> tuple[SessionStatus, bool]:
            """The status, and whether the row must be written."""
            if row is not None and row.revoked:
                return SessionStatus.REVOKED, False
            seen = start if row is None or row.last_seen is None else row.last_seen
            if idle_expired(seen, now, idle_ttl, interval):
                return SessionStatus.IDLE_EXPIRED, row is not None
            moves = idle_ttl is not None and now > seen and now - seen >= interval
            return SessionStatus.ACTIVE, moves

        status, must_write = verdict(self._writer.query_here(read_row, session_id, now))
        if not must_write:
            return status

        def write(connection: sqlite3.Connection) -> SessionStatus:
            row = read_row(connection, session_id, now)
            status, must_write = verdict(row)
            if not must_write:
                return status
            if status is SessionStatus.IDLE_EXPIRED:
                end_session(connection, session_id, expires_at)
            elif row is None:
                insert_session(connection, session_id, expires_at, now)
            else:
                set_last_seen(connection, session_id, now)
            return status

        return await self._writer.run(self._writer.write, write)

    async def revoke(self, session_id: str, *, expires_at: float) -> bool:
        """Leave a tombstone until ``expires_at`` and drop the data; ``False`` if already revoked."""

        def revoke(connection: sqlite3.Connection) -> bool:
            now = time.time()
            row = read_row(connection, session_id, now)
            if row is not None and row.revoked:
                return False
            if row is None:
                insert_session(connection, session_id, expires_at, None)  # replaces an expired row
            end_session(connection, session_id, expires_at)
            return True

        return await self._writer.run(self._writer.write, revoke)

    # -- data ------------------------------------------------------------------

    @staticmethod
    def _writable(connection: sqlite3.Connection, session_id: str, expires_at: float) -> bool:
        """Make sure the session has a row; ``False`` if it is revoked (the write goes nowhere)."""
        row = read_row(connection, session_id, time.time())
        if row is None:
            insert_session(connection, session_id, expires_at, None)
            return True
        return not row.revoked

    async def get(self, session_id: str, key: str, default: object = None) -> Any:
        """The value stored under ``key``, or ``default``."""
        raw = self._writer.query_here(read_value, session_id, key)
        return default if raw is None else json.loads(raw)

    async def set(self, session_id: str, key: str, value: object, *, expires_at: float) -> None:
        """Store a copy of ``value``; a no-op once the session is revoked."""
        encoded = _encode(value)

        def store(connection: sqlite3.Connection) -> None:
            if self._writable(connection, session_id, expires_at):
                store_value(connection, session_id, key, encoded)

        await self._writer.run(self._writer.write, store)

    async def delete(self, session_id: str, key: str) -> None:
        """Remove ``key`` if present."""
        await self._writer.run(self._writer.read, DELETE_VALUE, (session_id, key))  # a write

    async def incr(self, session_id: str, key: str, amount: int = 1, *, expires_at: float) -> int:
        """Add ``amount`` to an integer value (missing counts as 0), atomically across processes."""
        if type(amount) is not int:
            raise TypeError("incr takes an integer amount")

        def count(connection: sqlite3.Connection) -> int:
            writable = self._writable(connection, session_id, expires_at)
            raw = read_value(connection, session_id, key) if writable else None
            current = 0 if raw is None else json.loads(raw)
            if type(current) is not int:
                raise TypeError(f"session data {key!r} is not an integer")
            if writable:
                store_value(connection, session_id, key, str(current + amount))
            return int(current + amount)

        return await self._writer.run(self._writer.write, count)

    async def update(
        self, session_id: str, key: str, fn: Callable[[Any], object], *, expires_at: float, default: object = None
    ) -> object:
        """Replace a value with ``fn(old)`` under the write lock, atomically across processes.

        ``fn`` runs on the store's thread while the lock is held: keep it short and pure.
        """

        def replace(connection: sqlite3.Connection) -> object:
            writable = self._writable(connection, session_id, expires_at)
            raw = read_value(connection, session_id, key) if writable else None
            new = fn(default if raw is None else json.loads(raw))
            encoded = _encode(new)
            if writable:
                store_value(connection, session_id, key, encoded)
            return new

        return await self._writer.run(self._writer.write, replace)

    async def items(self, session_id: str) -> dict[str, Any]:
        """Every key and value of the session's data (a copy)."""
        rows = self._writer.query_here(read_items, session_id)
        return {key: json.loads(value) for key, value in rows}

    # -- listing ---------------------------------------------------------------

    async def record(
        self,
        session_id: str,
        *,
        principal: str,
        expires_at: float,
        now: float,
        data: Mapping[str, str] | None = None,
    ) -> None:
        """List the session under ``principal`` (a no-op once it is revoked)."""
        label = None if data is None else json.dumps(dict(data), separators=(",", ":"), ensure_ascii=False)

        def record(connection: sqlite3.Connection) -> None:
            row = read_row(connection, session_id, now)
            if row is None:
                insert_session(connection, session_id, expires_at, None)
            elif row.revoked:
                return
            set_label(connection, session_id, principal, label)

        await self._writer.run(self._writer.write, record)

    async def list_sessions(
        self, principal: str, *, now: float, cursor: str | None = None, limit: int = 100
    ) -> tuple[list[SessionRecord], str | None]:
        """The principal's live sessions by session id: one indexed query a page."""
        check_page_size(limit)
        after = "" if cursor is None else decode_cursor(cursor)
        rows = self._writer.query_here(read_page, principal, after, now, limit + 1)
        page = [
            SessionRecord(sid, expires, None if label is None else json.loads(label)) for sid, expires, label in rows
        ]
        if len(page) > limit:
            return page[:limit], encode_cursor(page[limit - 1].session_id)
        return page, None
