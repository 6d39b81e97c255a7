"""A store for one machine with several worker processes: one SQLite file in WAL mode, standard library only.

Every process opens the same file, so sessions, data and revocations are shared and survive a restart.
This module says what each store call means; the file, its tables and the writing thread are in
:mod:`._sqlite_writer`.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from ._base import (
    SessionRecord,
    SessionStatus,
    SessionStore,
    adding,
    encode_cursor,
    encode_label,
    encode_value,
    start_after,
    touch_verdict,
)
from ._sqlite_writer import SQLiteWriter, wider_than_private

_T = TypeVar("_T")

logger = logging.getLogger("mcp_sessions")

ROW: Final = "SELECT revoked, last_seen FROM sessions WHERE sid = ? AND expires_at > ?"
# REPLACE drops an expired row first, and the trigger its data.
INSERT: Final = "INSERT OR REPLACE INTO sessions (sid, expires_at, last_seen) VALUES (?, ?, ?)"
END: Final = (
    "INSERT INTO sessions (sid, expires_at, revoked) VALUES (?, ?, 1) ON CONFLICT (sid) DO UPDATE SET "
    "revoked = 1, expires_at = max(expires_at, excluded.expires_at), principal = NULL, label = NULL"
)
SEEN: Final = "UPDATE sessions SET last_seen = ? WHERE sid = ?"
LIST: Final = "UPDATE sessions SET principal = ?, label = ? WHERE sid = ?"
PAGE: Final = (
    "SELECT sid, expires_at, label FROM sessions WHERE principal = ? AND sid > ? AND revoked = 0 "
    "AND expires_at > ? ORDER BY sid LIMIT ?"
)
VALUE: Final = "SELECT value FROM data WHERE sid = ? AND key = ?"
ITEMS: Final = "SELECT key, value FROM data WHERE sid = ?"
STORE: Final = (
    "INSERT INTO data (sid, key, value) VALUES (?, ?, ?) ON CONFLICT (sid, key) DO UPDATE SET value = excluded.value"
)
DELETE: Final = "DELETE FROM data WHERE sid = ? AND key = ?"


def _found(rows: list[Any]) -> tuple[bool, float | None] | None:
    """A live session's row as :func:`touch_verdict` reads it: revoked, last seen (``None`` until it moves)."""
    return (bool(rows[0][0]), rows[0][1]) if rows else None


def _end(connection: sqlite3.Connection, session_id: str, expires_at: float) -> None:
    """Mark the session revoked until at least ``expires_at``, unlisted, its data dropped."""
    connection.execute(END, (session_id, expires_at))
    connection.execute("DELETE FROM data WHERE sid = ?", (session_id,))


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
        self._writer.read_here("SELECT 1", ())

    async def aclose(self) -> None:
        await self._writer.aclose()

    async def _write(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        return await self._writer.run(self._writer.write, work)

    def _live(self, connection: sqlite3.Connection, session_id: str, expires_at: float, now: float) -> bool:
        """Make sure the session has a row; ``False`` if it is revoked (a write then goes nowhere)."""
        found = _found(self._writer.read(ROW, (session_id, now)))
        if found is None:
            connection.execute(INSERT, (session_id, expires_at, None))
        return found is None or not found[0]

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
        found = _found(self._writer.read_here(ROW, (session_id, now)))
        status, must_write = touch_verdict(found, start, now, idle_ttl, interval)
        if not must_write:
            return status

        def write(connection: sqlite3.Connection) -> SessionStatus:
            found = _found(self._writer.read(ROW, (session_id, now)))
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
            live = self._live(connection, session_id, expires_at, time.time())  # replaces an expired row
            if live:
                _end(connection, session_id, expires_at)
            return live

        return await self._write(revoke)

    async def get(self, session_id: str, key: str, default: object = None) -> Any:
        rows = self._writer.read_here(VALUE, (session_id, key))
        return json.loads(rows[0][0]) if rows else default

    async def set(self, session_id: str, key: str, value: object, *, expires_at: float) -> None:
        encoded = encode_value(value)

        def store(connection: sqlite3.Connection) -> None:
            if self._live(connection, session_id, expires_at, time.time()):
                connection.execute(STORE, (session_id, key, encoded))

        await self._write(store)

    async def delete(self, session_id: str, key: str) -> None:
        await self._writer.run(self._writer.read, DELETE, (session_id, key))  # a write, in autocommit

    async def incr(self, session_id: str, key: str, amount: int = 1, *, expires_at: float) -> int:
        return await self.update(session_id, key, adding(key, amount), expires_at=expires_at, default=0)

    async def update(
        self, session_id: str, key: str, fn: Callable[[Any], _T], *, expires_at: float, default: object = None
    ) -> _T:
        """Replace a value with ``fn(old)`` under the write lock, atomically across processes.

        ``fn`` runs on the store's thread while the lock is held: keep it short and pure.
        """

        def replace(connection: sqlite3.Connection) -> _T:
            live = self._live(connection, session_id, expires_at, time.time())
            rows = self._writer.read(VALUE, (session_id, key)) if live else []
            new = fn(json.loads(rows[0][0]) if rows else default)
            encoded = encode_value(new)
            if live:
                connection.execute(STORE, (session_id, key, encoded))
            return new

        return await self._write(replace)

    async def items(self, session_id: str) -> dict[str, Any]:
        return {key: json.loads(value) for key, value in self._writer.read_here(ITEMS, (session_id,))}

    async def record(
        self, session_id: str, *, principal: str, expires_at: float, now: float, data: Mapping[str, str] | None = None
    ) -> None:
        label = encode_label(data)

        def record(connection: sqlite3.Connection) -> None:
            if self._live(connection, session_id, expires_at, now):
                connection.execute(LIST, (principal, label, session_id))

        await self._write(record)

    async def list_sessions(
        self, principal: str, *, now: float, cursor: str | None = None, limit: int = 100
    ) -> tuple[list[SessionRecord], str | None]:
        """The principal's live sessions by session id: one indexed query a page."""
        rows = self._writer.read_here(PAGE, (principal, start_after(cursor, limit), now, limit + 1))
        page = [
            SessionRecord(sid, expires, None if label is None else json.loads(label)) for sid, expires, label in rows
        ]
        if len(page) > limit:
            return page[:limit], encode_cursor(page[limit - 1].session_id)
        return page, None
