"""The SQLite store's file: its tables, its mode, each thread's connection, and the thread that runs writes.

Reads run on the calling thread (the event loop's): in WAL mode a reader never waits for a writer,
and an indexed read (about 5 µs) costs less than the hop to a thread (50 to 100 µs on a busy
machine; ``benchmarks/bench_stores.py``). A write may wait up to the busy timeout for another
process's lock, so writes run on one thread of the store's own while the loop serves other
requests. Each thread has its own connection, so a read never sees another call's unfinished
transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar, TypeVarTuple

from .._wire import ThrottledWarning
from ._base import SessionStoreUnavailable

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

logger = logging.getLogger("mcp_sessions.sqlite")

SCHEMA_VERSION: Final = 1
SCHEMA: Final = """
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

FILE_MODE: Final = 0o600
"""The mode a new database file is created with, whatever the umask: it holds session data, principal
digests and listing labels. SQLite gives the ``-wal`` and ``-shm`` files the database file's mode."""


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
    # Used by one thread only; check_same_thread=False lets aclose() close it from another.
    connection = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
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


class SQLiteWriter:
    """One SQLite file's connections, and the thread that runs its writes.

    Opens the file (creating its tables) on construction; a file that cannot be opened
    raises :class:`ValueError`. Every write runs in one ``BEGIN IMMEDIATE`` transaction,
    together with a bounded clean-up of expired rows at most once per ``cleanup_interval``.
    SQLite failures become :class:`SessionStoreUnavailable`, with a throttled warning.
    """

    def __init__(self, path: Path, *, timeout: float, cleanup_batch: int, cleanup_interval: float) -> None:
        self.path = path
        self.timeout = timeout
        self.cleanup_batch = cleanup_batch
        self.cleanup_interval = cleanup_interval
        self._next_cleanup = 0.0
        self._unavailable_warning = ThrottledWarning(logger)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-sessions-sqlite")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._closed = False
        try:
            self._executor.submit(self.connection).result()
        except sqlite3.Error as exc:
            self._executor.shutdown(wait=False)
            raise ValueError(f"cannot open the SQLite store at {self.path}: {exc}") from None

    def connection(self) -> sqlite3.Connection:
        """The calling thread's connection, opened on first use."""
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = open_connection(self.path, self.timeout)
            self._local.connection = connection
            with self._connections_lock:
                self._connections.append(connection)
        return connection

    def write(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``work`` in one ``BEGIN IMMEDIATE`` transaction (atomic across processes), cleaning up on the way.

        The clean-up shares the transaction, so a write either happened with it or not at all: a caller
        that sees :class:`SessionStoreUnavailable` knows nothing was applied (a retried ``incr`` never
        counts twice).
        """
        connection = self.connection()
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

    def read(self, sql: str, parameters: Sequence[object]) -> list[Any]:
        """Every row ``sql`` returns, on the calling thread's connection (outside a transaction: autocommit)."""
        return self.connection().execute(sql, parameters).fetchall()

    async def run(self, call: Callable[[*_Ts], _T], *args: *_Ts) -> _T:
        """Run ``call`` on the store's thread."""
        if self._closed:
            raise SessionStoreUnavailable("the sqlite store is closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call, *args)
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from None

    def read_here(self, sql: str, parameters: Sequence[object]) -> list[Any]:
        """One read on the calling thread (the event loop's): WAL readers never wait for writers."""
        if self._closed:
            raise SessionStoreUnavailable("the sqlite store is closed")
        try:
            return self.read(sql, parameters)
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from None

    def _unavailable(self, exc: sqlite3.Error) -> SessionStoreUnavailable:
        self._unavailable_warning.warn("sqlite store unavailable (%s): %s", self.path, exc)
        return SessionStoreUnavailable(f"sqlite failed: {type(exc).__name__}")

    async def aclose(self) -> None:
        """Let queued writes finish, stop the thread, and close every connection."""
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)  # lets writes finish
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()
