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
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar

from ._base import (
    SessionRecord,
    SessionStatus,
    SessionStore,
    SessionStoreUnavailable,
    check_page_size,
    decode_cursor,
    encode_cursor,
    idle_expired,
)
from .memory import _encode

__all__ = ["SQLiteStore"]

_T = TypeVar("_T")

logger = logging.getLogger("mcp_sessions.sqlite")

_SCHEMA_VERSION: Final = 1
_LOG_INTERVAL: Final = 10.0
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS sessions (
    sid TEXT PRIMARY KEY,
    expires_at REAL NOT NULL,
    last_seen REAL,
    revoked INTEGER NOT NULL DEFAULT 0,
    principal TEXT,
    label TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sessions_by_expiry ON sessions (expires_at);
CREATE INDEX IF NOT EXISTS sessions_by_principal ON sessions (principal, sid) WHERE principal IS NOT NULL;
CREATE TABLE IF NOT EXISTS data (
    sid TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (sid, key)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS sessions_drop_data AFTER DELETE ON sessions
BEGIN
    DELETE FROM data WHERE sid = old.sid;
END;
"""


_ROW: Final = "SELECT revoked, last_seen FROM sessions WHERE sid = ? AND expires_at > ?"


class _Row:
    """A live session's row as one read found it (``last_seen`` is ``None`` until its idle clock moves)."""

    __slots__ = ("last_seen", "revoked")

    def __init__(self, revoked: bool, last_seen: float | None) -> None:
        self.revoked = revoked
        self.last_seen = last_seen


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
        self.timeout = float(timeout)
        self.touch_interval = float(touch_interval)
        self.cleanup_batch = cleanup_batch
        self.cleanup_interval = float(cleanup_interval)
        self._next_cleanup = 0.0
        self._last_logged = -_LOG_INTERVAL
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-sessions-sqlite")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._closed = False
        try:
            self._executor.submit(self._connection).result()
        except sqlite3.Error as exc:
            self._executor.shutdown(wait=False)
            raise ValueError(f"cannot open the SQLite store at {self.path}: {exc}") from None

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, timeout={self.timeout})"

    # -- plumbing: writes run on the store's thread, reads on the caller's ------

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            # Used by one thread only; check_same_thread=False lets aclose() close it from another.
            connection = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = NORMAL")  # WAL: durable at checkpoints, never corrupt
            if connection.execute("PRAGMA user_version").fetchone()[0] != _SCHEMA_VERSION:
                # One script, one transaction: processes starting together create the tables once.
                try:
                    connection.executescript(
                        f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA user_version = {_SCHEMA_VERSION}; COMMIT;"
                    )
                except BaseException:
                    if connection.in_transaction:
                        connection.execute("ROLLBACK")
                    connection.close()
                    raise
            self._local.connection = connection
            with self._connections_lock:
                self._connections.append(connection)
        return connection

    def _write(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``work`` in one ``BEGIN IMMEDIATE`` transaction (atomic across processes), cleaning up on the way.

        The clean-up shares the transaction, so a write either happened with it or not at all: a caller
        that sees :class:`SessionStoreUnavailable` knows nothing was applied (a retried ``incr`` never
        counts twice).
        """
        connection = self._connection()
        connection.execute("BEGIN IMMEDIATE")
        try:
            result = work(connection)
            now = time.monotonic()
            if now >= self._next_cleanup:
                self._next_cleanup = now + self.cleanup_interval
                connection.execute(
                    "DELETE FROM sessions WHERE sid IN "
                    "(SELECT sid FROM sessions WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
                    (time.time(), self.cleanup_batch),
                )
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        return result

    def _read(self, sql: str, parameters: tuple[Any, ...]) -> list[Any]:
        return self._connection().execute(sql, parameters).fetchall()

    async def _run(self, call: Callable[..., _T], *args: Any) -> _T:
        """Run ``call`` on the store's thread; SQLite failures become :class:`SessionStoreUnavailable`."""
        if self._closed:
            raise SessionStoreUnavailable("the sqlite store is closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call, *args)
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from None

    def _read_here(self, sql: str, parameters: tuple[Any, ...]) -> list[Any]:
        """One read on the calling thread (the event loop's): WAL readers never wait for writers."""
        if self._closed:
            raise SessionStoreUnavailable("the sqlite store is closed")
        try:
            return self._read(sql, parameters)
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from None

    def _unavailable(self, exc: sqlite3.Error) -> SessionStoreUnavailable:
        now = time.monotonic()
        if now - self._last_logged >= _LOG_INTERVAL:
            self._last_logged = now
            logger.warning("sqlite store unavailable (%s): %s", self.path, exc)
        return SessionStoreUnavailable(f"sqlite failed: {type(exc).__name__}")

    @staticmethod
    def _row(connection: sqlite3.Connection, session_id: str, now: float) -> _Row | None:
        row = connection.execute(_ROW, (session_id, now)).fetchone()
        return None if row is None else _Row(bool(row[0]), row[1])

    @staticmethod
    def _insert(connection: sqlite3.Connection, session_id: str, expires_at: float, last_seen: float | None) -> None:
        # REPLACE drops an expired row first, and the trigger its data.
        connection.execute(
            "INSERT OR REPLACE INTO sessions (sid, expires_at, last_seen) VALUES (?, ?, ?)",
            (session_id, expires_at, last_seen),
        )

    async def ping(self) -> None:
        """Raise :class:`SessionStoreUnavailable` unless the database answers a trivial query now."""
        self._read_here("SELECT 1", ())

    async def aclose(self) -> None:
        """Close the connection and stop the store's thread."""
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)  # lets writes finish
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()

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

        def verdict(row: _Row | None) -> tuple[SessionStatus, bool]:
            """The status, and whether the row must be written."""
            if row is not None and row.revoked:
                return SessionStatus.REVOKED, False
            seen = start if row is None or row.last_seen is None else row.last_seen
            if idle_expired(seen, now, idle_ttl, interval):
                return SessionStatus.IDLE_EXPIRED, row is not None
            moves = idle_ttl is not None and now > seen and now - seen >= interval
            return SessionStatus.ACTIVE, moves

        found = self._read_here(_ROW, (session_id, now))
        status, must_write = verdict(_Row(bool(found[0][0]), found[0][1]) if found else None)
        if not must_write:
            return status

        def write(connection: sqlite3.Connection) -> SessionStatus:
            row = self._row(connection, session_id, now)
            status, must_write = verdict(row)
            if not must_write:
                return status
            if status is SessionStatus.IDLE_EXPIRED:
                self._end(connection, session_id, expires_at)
            elif row is None:
                self._insert(connection, session_id, expires_at, now)
            else:
                connection.execute("UPDATE sessions SET last_seen = ? WHERE sid = ?", (now, session_id))
            return status

        return await self._run(self._write, write)

    @staticmethod
    def _end(connection: sqlite3.Connection, session_id: str, expires_at: float) -> None:
        connection.execute(
            "INSERT INTO sessions (sid, expires_at, revoked) VALUES (?, ?, 1) ON CONFLICT (sid) DO UPDATE SET "
            "revoked = 1, expires_at = max(expires_at, excluded.expires_at), principal = NULL, label = NULL",
            (session_id, expires_at),
        )
        connection.execute("DELETE FROM data WHERE sid = ?", (session_id,))

    async def revoke(self, session_id: str, *, expires_at: float) -> bool:
        """Leave a tombstone until ``expires_at`` and drop the data; ``False`` if already revoked."""

        def revoke(connection: sqlite3.Connection) -> bool:
            now = time.time()
            row = self._row(connection, session_id, now)
            if row is not None and row.revoked:
                return False
            if row is None:
                self._insert(connection, session_id, expires_at, None)  # replaces an expired row
            self._end(connection, session_id, expires_at)
            return True

        return await self._run(self._write, revoke)

    # -- data ------------------------------------------------------------------

    def _writable(self, connection: sqlite3.Connection, session_id: str, expires_at: float) -> bool:
        """Make sure the session has a row; ``False`` if it is revoked (the write goes nowhere)."""
        row = self._row(connection, session_id, time.time())
        if row is None:
            self._insert(connection, session_id, expires_at, None)
            return True
        return not row.revoked

    @staticmethod
    def _store_value(connection: sqlite3.Connection, session_id: str, key: str, encoded: str) -> None:
        connection.execute(
            "INSERT INTO data (sid, key, value) VALUES (?, ?, ?) "
            "ON CONFLICT (sid, key) DO UPDATE SET value = excluded.value",
            (session_id, key, encoded),
        )

    @staticmethod
    def _value(connection: sqlite3.Connection, session_id: str, key: str) -> str | None:
        row = connection.execute("SELECT value FROM data WHERE sid = ? AND key = ?", (session_id, key)).fetchone()
        return None if row is None else str(row[0])

    async def get(self, session_id: str, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default``."""
        rows = self._read_here("SELECT value FROM data WHERE sid = ? AND key = ?", (session_id, key))
        return default if not rows else json.loads(rows[0][0])

    async def set(self, session_id: str, key: str, value: Any, *, expires_at: float) -> None:
        """Store a copy of ``value``; a no-op once the session is revoked."""
        encoded = _encode(value)

        def store(connection: sqlite3.Connection) -> None:
            if self._writable(connection, session_id, expires_at):
                self._store_value(connection, session_id, key, encoded)

        await self._run(self._write, store)

    async def delete(self, session_id: str, key: str) -> None:
        """Remove ``key`` if present."""
        await self._run(self._read, "DELETE FROM data WHERE sid = ? AND key = ?", (session_id, key))  # a write

    async def incr(self, session_id: str, key: str, amount: int = 1, *, expires_at: float) -> int:
        """Add ``amount`` to an integer value (missing counts as 0), atomically across processes."""
        if type(amount) is not int:
            raise TypeError("incr takes an integer amount")

        def count(connection: sqlite3.Connection) -> int:
            writable = self._writable(connection, session_id, expires_at)
            raw = self._value(connection, session_id, key) if writable else None
            current = 0 if raw is None else json.loads(raw)
            if type(current) is not int:
                raise TypeError(f"session data {key!r} is not an integer")
            if writable:
                self._store_value(connection, session_id, key, str(current + amount))
            return int(current + amount)

        return await self._run(self._write, count)

    async def update(
        self, session_id: str, key: str, fn: Callable[[Any], Any], *, expires_at: float, default: Any = None
    ) -> Any:
        """Replace a value with ``fn(old)`` under the write lock, atomically across processes.

        ``fn`` runs on the store's thread while the lock is held: keep it short and pure.
        """

        def replace(connection: sqlite3.Connection) -> Any:
            writable = self._writable(connection, session_id, expires_at)
            raw = self._value(connection, session_id, key) if writable else None
            new = fn(default if raw is None else json.loads(raw))
            encoded = _encode(new)
            if writable:
                self._store_value(connection, session_id, key, encoded)
            return new

        return await self._run(self._write, replace)

    async def items(self, session_id: str) -> dict[str, Any]:
        """Every key and value of the session's data (a copy)."""
        rows = self._read_here("SELECT key, value FROM data WHERE sid = ?", (session_id,))
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
            row = self._row(connection, session_id, now)
            if row is None:
                self._insert(connection, session_id, expires_at, None)
            elif row.revoked:
                return
            connection.execute(
                "UPDATE sessions SET principal = ?, label = ? WHERE sid = ?", (principal, label, session_id)
            )

        await self._run(self._write, record)

    async def list_sessions(
        self, principal: str, *, now: float, cursor: str | None = None, limit: int = 100
    ) -> tuple[list[SessionRecord], str | None]:
        """The principal's live sessions by session id: one indexed query a page."""
        check_page_size(limit)
        after = "" if cursor is None else decode_cursor(cursor)
        rows = self._read_here(
            "SELECT sid, expires_at, label FROM sessions WHERE principal = ? AND sid > ? AND revoked = 0 "
            "AND expires_at > ? ORDER BY sid LIMIT ?",
            (principal, after, now, limit + 1),
        )
        page = [
            SessionRecord(sid, expires, None if label is None else json.loads(label)) for sid, expires, label in rows
        ]
        if len(page) > limit:
            return page[:limit], encode_cursor(page[limit - 1].session_id)
        return page, None
