"""The SQLite store's own thread, which runs every write, and each thread's connection.

Reads run on the calling thread (the event loop's): in WAL mode a reader never waits for
a writer, and an indexed read costs less than the hop to a thread. A write may wait up to
the busy timeout for another process's lock, so writes run on one thread of the store's
own while the loop serves other requests. Each thread has its own connection, so a read
never sees another call's unfinished transaction.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar, TypeVarTuple

from .._wire import ThrottledWarning
from ._base import SessionStoreUnavailable
from ._sqlite_schema import SQLValue, delete_expired, open_connection, rows

__all__ = ["SQLiteWriter"]

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

logger = logging.getLogger("mcp_sessions.sqlite")


class SQLiteWriter:
    """One SQLite file's connections, and the thread that runs its writes.

    Opens the file (creating its tables) on construction; a file that cannot be opened
    raises :class:`ValueError`. Every write runs in one ``BEGIN IMMEDIATE`` transaction,
    together with a bounded clean-up of expired rows at most once per ``cleanup_interval``.
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
                delete_expired(connection, self.cleanup_batch)
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        return result

    def read(self, sql: str, parameters: Sequence[SQLValue]) -> list[tuple[SQLValue, ...]]:
        """Every row ``sql`` returns, on the calling thread's connection (outside a transaction: autocommit)."""
        return rows(self.connection(), sql, parameters)

    async def run(self, call: Callable[[*_Ts], _T], *args: *_Ts) -> _T:
        """Run ``call`` on the store's thread; SQLite failures become :class:`SessionStoreUnavailable`."""
        if self._closed:
            raise SessionStoreUnavailable("the sqlite store is closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call, *args)
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from None

    def read_here(self, sql: str, parameters: Sequence[SQLValue]) -> list[tuple[SQLValue, ...]]:
        """One read on the calling thread (the event loop's): WAL readers never wait for writers."""
        return self.query_here(rows, sql, parameters)

    def query_here(self, query: Callable[[sqlite3.Connection, *_Ts], _T], *args: *_Ts) -> _T:
        """``query(connection, *args)`` on the calling thread's connection, as :meth:`read_here` reads.

        ``query`` is one of the schema's typed reads (``read_row``, ``read_value``, …).
        """
        if self._closed:
            raise SessionStoreUnavailable("the sqlite store is closed")
        try:
            return query(self.connection(), *args)
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
