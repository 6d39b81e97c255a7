"""A store for one machine with several worker processes: one SQLite file in WAL mode, standard library only.

Every process opens the same file, so sessions, data and revocations are shared and survive a restart.
No call touches the file on the event loop: reads run on one thread of the store's own, writes on
another, each with its own connection. In WAL mode a reader never waits for a writer, so a write
waiting (up to the busy timeout) for another process's lock holds up neither the loop nor the reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import stat
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar

from .._wire import ThrottledWarning
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

SCHEMA_VERSION: Final = 1
SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS sessions (
    sid TEXT PRIMARY KEY,
    expires_at REAL NOT NULL,
    last_seen REAL,
    revoked INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sessions_by_expiry ON sessions (expires_at);
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

FILE_MODE: Final = 0o600
"""The mode a new database file is created with, whatever the umask: it holds session data.
SQLite gives the ``-wal`` and ``-shm`` files the database file's mode."""

ROW: Final = "SELECT revoked, last_seen FROM sessions WHERE sid = ? AND expires_at > ?"
# REPLACE drops an expired row first, and the trigger its data.
INSERT: Final = "INSERT OR REPLACE INTO sessions (sid, expires_at, last_seen) VALUES (?, ?, ?)"
END: Final = (
    "INSERT INTO sessions (sid, expires_at, revoked) VALUES (?, ?, 1) ON CONFLICT (sid) DO UPDATE SET "
    "revoked = 1, expires_at = max(expires_at, excluded.expires_at)"
)
SEEN: Final = "UPDATE sessions SET last_seen = ? WHERE sid = ?"
VALUE: Final = "SELECT value FROM data WHERE sid = ? AND key = ?"
ITEMS: Final = "SELECT key, value FROM data WHERE sid = ?"
STORE: Final = (
    "INSERT INTO data (sid, key, value) VALUES (?, ?, ?) ON CONFLICT (sid, key) DO UPDATE SET value = excluded.value"
)
DELETE: Final = "DELETE FROM data WHERE sid = ? AND key = ?"


def wider_than_private(path: Path) -> list[str]:
    """The database's files (the file, ``-wal``, ``-shm``, ``-journal``) that others may read or write."""
    found = []
    for suffix in ("", "-wal", "-shm", "-journal"):
        companion = path.with_name(path.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            mode = stat.S_IMODE(companion.stat().st_mode)
            if mode & 0o077:
                found.append(f"{companion} ({mode:o})")
    return found


def open_connection(path: Path, timeout: float) -> sqlite3.Connection:
    """A connection in WAL mode with ``timeout`` as its busy timeout, the file and its tables created if missing.

    A new file is created with :data:`FILE_MODE` (a umask only takes bits away); an existing one is left as
    it is (:func:`wider_than_private` reports one that others may read).
    """
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE))
    connection = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")  # WAL: durable at checkpoints, never corrupt
        if connection.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            # One script, one transaction: processes starting together create the tables once.
            connection.executescript(f"BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
    except BaseException:
        connection.close()  # a file that is not a database, say; closing rolls back what was begun
        raise
    return connection


def delete_expired(connection: sqlite3.Connection, batch: int, now: float) -> None:
    """Delete at most ``batch`` sessions expired at ``now``, the earliest first (the trigger drops their data)."""
    connection.execute(
        "DELETE FROM sessions WHERE sid IN "
        "(SELECT sid FROM sessions WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
        (now, batch),
    )


def _found(connection: sqlite3.Connection, session_id: str, now: float) -> tuple[bool, float | None] | None:
    """A live session's row as :func:`touch_verdict` reads it: revoked, last seen (``None`` until it moves)."""
    row = connection.execute(ROW, (session_id, now)).fetchone()
    return None if row is None else (bool(row[0]), row[1])


def _end(connection: sqlite3.Connection, session_id: str, expires_at: float) -> None:
    """Mark the session revoked until at least ``expires_at``, unlisted, its data dropped."""
    connection.execute(END, (session_id, expires_at))
    connection.execute("DELETE FROM data WHERE sid = ?", (session_id,))


def _live(connection: sqlite3.Connection, session_id: str, expires_at: float, now: float) -> bool:
    """Make sure the session has a row; ``False`` if it is revoked (a write then goes nowhere)."""
    found = _found(connection, session_id, now)
    if found is None:
        connection.execute(INSERT, (session_id, expires_at, None))
    return found is None or not found[0]


class _Thread:
    """One thread of the store's own, and the connection to the file that only it uses."""

    def __init__(self, path: Path, timeout: float, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"mcp-sessions-sqlite-{name}")
        try:
            self.connection = self._executor.submit(open_connection, path, timeout).result()
        except BaseException:
            self._executor.shutdown(wait=False)
            raise

    async def run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, work, self.connection)

    async def aclose(self) -> None:
        """Let the queued calls finish, then close the connection on its thread."""
        await self.run(sqlite3.Connection.close)
        await asyncio.to_thread(self._executor.shutdown)


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
                "the SQLite store's files can be read by others (session data): %s; chmod 600 them",
                ", ".join(exposed),
            )
        self.timeout = float(timeout)
        self.touch_interval = float(touch_interval)
        self.cleanup_batch = cleanup_batch
        self.cleanup_interval = float(cleanup_interval)
        self._next_cleanup = 0.0
        self._unavailable_warning = ThrottledWarning(logging.getLogger("mcp_sessions.sqlite"))
        self._closed = False
        try:
            self._writes = _Thread(self.path, self.timeout, "write")
            self._reads = _Thread(self.path, self.timeout, "read")
        except sqlite3.Error as exc:
            raise ValueError(f"cannot open the SQLite store at {self.path}: {exc}") from None

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, timeout={self.timeout})"

    async def _run(self, thread: _Thread, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``work`` on ``thread``; a SQLite failure becomes :class:`SessionStoreUnavailable`."""
        if self._closed:
            raise SessionStoreUnavailable("the sqlite store is closed")
        try:
            return await thread.run(work)
        except sqlite3.Error as exc:
            self._unavailable_warning.warn("sqlite store unavailable (%s): %s", self.path, exc)
            raise SessionStoreUnavailable(f"sqlite failed: {type(exc).__name__}") from None

    async def _read(self, sql: str, parameters: tuple[object, ...]) -> list[Any]:
        """Every row ``sql`` returns, on the reading thread (autocommit: WAL readers never wait for writers)."""
        return await self._run(self._reads, lambda connection: connection.execute(sql, parameters).fetchall())

    async def _write(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``work`` in one ``BEGIN IMMEDIATE`` transaction (atomic across processes), cleaning up on the way.

        The clean-up shares the transaction, so a write either happened with it or not at all: a caller
        that sees :class:`SessionStoreUnavailable` knows nothing was applied (a retried ``incr`` never
        counts twice).
        """

        def transaction(connection: sqlite3.Connection) -> _T:
            connection.execute("BEGIN IMMEDIATE")
            try:
                result = work(connection)
                now = time.monotonic()
                if now >= self._next_cleanup:
                    self._next_cleanup = now + self.cleanup_interval
                    delete_expired(connection, self.cleanup_batch, time.time())
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
            return result

        return await self._run(self._writes, transaction)

    async def ping(self) -> None:
        await self._read("SELECT 1", ())

    async def aclose(self) -> None:
        """Let queued calls finish, then stop the threads and close their connections."""
        if self._closed:
            return
        self._closed = True
        await self._writes.aclose()
        await self._reads.aclose()

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
        found = await self._run(self._reads, lambda connection: _found(connection, session_id, now))
        status, must_write = touch_verdict(found, start, now, idle_ttl, interval)
        if not must_write:
            return status

        def write(connection: sqlite3.Connection) -> SessionStatus:
            found = _found(connection, session_id, now)
            status, must_write = touch_verdict(found, start, now, idle_ttl, interval)
            if must_write and status is SessionStatus.IDLE_EXPIRED:
                _end(connection, session_id, expires_at)
            elif must_write and found is None:
                connection.execute(INSERT, (session_id, expires_at, now))
            elif must_write:
                connection.execute(SEEN, (now, session_id))
            return status

        return await self._write(write)

    async def revoke(self, session_id: str, *, expires_at: float) -> bool:

        def revoke(connection: sqlite3.Connection) -> bool:
            live = _live(connection, session_id, expires_at, time.time())  # replaces an expired row
            if live:
                _end(connection, session_id, expires_at)
            return live

        return await self._write(revoke)

    async def get(self, session_id: str, key: str, default: object = None) -> Any:
        rows = await self._read(VALUE, (session_id, key))
        return json.loads(rows[0][0]) if rows else default

    async def set(self, session_id: str, key: str, value: object, *, expires_at: float) -> None:
        encoded = encode_value(value)

        def store(connection: sqlite3.Connection) -> None:
            if _live(connection, session_id, expires_at, time.time()):
                connection.execute(STORE, (session_id, key, encoded))

        await self._write(store)

    async def delete(self, session_id: str, key: str) -> None:

        def delete(connection: sqlite3.Connection) -> None:
            connection.execute(DELETE, (session_id, key))

        await self._write(delete)

    async def incr(self, session_id: str, key: str, amount: int = 1, *, expires_at: float) -> int:
        return await self.update(session_id, key, adding(key, amount), expires_at=expires_at, default=0)

    async def update(
        self, session_id: str, key: str, fn: Callable[[Any], _T], *, expires_at: float, default: object = None
    ) -> _T:
        """Replace a value with ``fn(old)`` under the write lock, atomically across processes.

        ``fn`` runs on the store's writing thread while the lock is held: keep it short and pure.
        """

        def replace(connection: sqlite3.Connection) -> _T:
            live = _live(connection, session_id, expires_at, time.time())
            row = connection.execute(VALUE, (session_id, key)).fetchone() if live else None
            new = fn(default if row is None else json.loads(row[0]))
            encoded = encode_value(new)
            if live:
                connection.execute(STORE, (session_id, key, encoded))
            return new

        return await self._write(replace)

    async def items(self, session_id: str) -> dict[str, Any]:
        return {key: json.loads(value) for key, value in await self._read(ITEMS, (session_id,))}
