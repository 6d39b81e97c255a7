"""The SQLite store's file: its tables, how a connection is opened, and the statements that write rows.

Everything here is about the database's shape: a change of tables or SQL lands here, and
nowhere else. :mod:`._sqlite_writer` decides which thread runs a statement, and
:class:`~mcp_sessions.stores.SQLiteStore` what a store call means.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final, TypeAlias

__all__ = [
    "DELETE_VALUE",
    "GET_VALUE",
    "ITEMS",
    "PAGE",
    "ROW",
    "Row",
    "SQLValue",
    "delete_expired",
    "end_session",
    "insert_session",
    "open_connection",
    "read_items",
    "read_page",
    "read_row",
    "read_value",
    "rows",
    "set_label",
    "set_last_seen",
    "store_value",
]

SQLValue: TypeAlias = str | int | float | bytes | None
"""A value SQLite takes as a parameter or returns in a row."""

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

ROW: Final = "SELECT revoked, last_seen FROM sessions WHERE sid = ? AND expires_at > ?"
GET_VALUE: Final = "SELECT value FROM data WHERE sid = ? AND key = ?"
DELETE_VALUE: Final = "DELETE FROM data WHERE sid = ? AND key = ?"
ITEMS: Final = "SELECT key, value FROM data WHERE sid = ?"
PAGE: Final = (
    "SELECT sid, expires_at, label FROM sessions WHERE principal = ? AND sid > ? AND revoked = 0 "
    "AND expires_at > ? ORDER BY sid LIMIT ?"
)


FILE_MODE: Final = 0o600
"""The mode a new database file is created with, whatever the umask: it holds session data, principal
digests and listing labels. SQLite gives the ``-wal`` and ``-shm`` files the database file's mode."""
COMPANIONS: Final = ("", "-wal", "-shm", "-journal")


def create_private(path: Path) -> None:
    """Create the database file readable by its owner only, if it does not exist yet (an existing file is
    left as it is: :func:`wider_than_private` reports one that others may read). A umask only takes bits
    away from ``FILE_MODE``."""
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    except FileExistsError:
        return
    os.close(descriptor)


def wider_than_private(path: Path) -> list[str]:
    """The database's files (the file, ``-wal``, ``-shm``, ``-journal``) that others may read or write."""
    found = []
    for suffix in COMPANIONS:
        companion = path.with_name(path.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            mode = stat.S_IMODE(companion.stat().st_mode)
            if mode & 0o077:
                found.append(f"{companion} ({mode:o})")
    return found


def open_connection(path: Path, timeout: float) -> sqlite3.Connection:
    """A connection in WAL mode with ``timeout`` as its busy timeout, the tables created if missing."""
    create_private(path)
    # Used by one thread only; check_same_thread=False lets aclose() close it from another.
    connection = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = NORMAL")  # WAL: durable at checkpoints, never corrupt
    if connection.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
        # One script, one transaction: processes starting together create the tables once.
        try:
            connection.executescript(f"BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            connection.close()
            raise
    return connection


class Row:
    """A live session's row as one read found it (``last_seen`` is ``None`` until its idle clock moves)."""

    __slots__ = ("last_seen", "revoked")

    def __init__(self, revoked: bool, last_seen: float | None) -> None:
        self.revoked = revoked
        self.last_seen = last_seen


def read_row(connection: sqlite3.Connection, session_id: str, now: float) -> Row | None:
    """The session's row if it is live at ``now``."""
    row = connection.execute(ROW, (session_id, now)).fetchone()
    return None if row is None else Row(bool(row[0]), row[1])


def insert_session(connection: sqlite3.Connection, session_id: str, expires_at: float, last_seen: float | None) -> None:
    """A fresh row for the session."""
    # REPLACE drops an expired row first, and the trigger its data.
    connection.execute(
        "INSERT OR REPLACE INTO sessions (sid, expires_at, last_seen) VALUES (?, ?, ?)",
        (session_id, expires_at, last_seen),
    )


def end_session(connection: sqlite3.Connection, session_id: str, expires_at: float) -> None:
    """Mark the session revoked until at least ``expires_at``, unlisted, its data dropped."""
    connection.execute(
        "INSERT INTO sessions (sid, expires_at, revoked) VALUES (?, ?, 1) ON CONFLICT (sid) DO UPDATE SET "
        "revoked = 1, expires_at = max(expires_at, excluded.expires_at), principal = NULL, label = NULL",
        (session_id, expires_at),
    )
    connection.execute("DELETE FROM data WHERE sid = ?", (session_id,))


def set_last_seen(connection: sqlite3.Connection, session_id: str, now: float) -> None:
    """Move the session's idle clock to ``now``."""
    connection.execute("UPDATE sessions SET last_seen = ? WHERE sid = ?", (now, session_id))


def set_label(connection: sqlite3.Connection, session_id: str, principal: str, label: str | None) -> None:
    """List the session under ``principal`` with ``label`` (its data as JSON)."""
    connection.execute("UPDATE sessions SET principal = ?, label = ? WHERE sid = ?", (principal, label, session_id))


def store_value(connection: sqlite3.Connection, session_id: str, key: str, encoded: str) -> None:
    """Store the JSON text ``encoded`` under ``key``."""
    connection.execute(
        "INSERT INTO data (sid, key, value) VALUES (?, ?, ?) "
        "ON CONFLICT (sid, key) DO UPDATE SET value = excluded.value",
        (session_id, key, encoded),
    )


def read_value(connection: sqlite3.Connection, session_id: str, key: str) -> str | None:
    """The JSON text stored under ``key``, or ``None``."""
    row = connection.execute(GET_VALUE, (session_id, key)).fetchone()
    return None if row is None else str(row[0])


def read_items(connection: sqlite3.Connection, session_id: str) -> list[tuple[str, str]]:
    """Every key of the session's data with its JSON text."""
    return connection.execute(ITEMS, (session_id,)).fetchall()


def read_page(
    connection: sqlite3.Connection, principal: str, after: str, now: float, limit: int
) -> list[tuple[str, float, str | None]]:
    """Up to ``limit`` live listed sessions of ``principal`` after the id ``after``: id, expiry, label (JSON)."""
    return connection.execute(PAGE, (principal, after, now, limit)).fetchall()


def rows(connection: sqlite3.Connection, sql: str, parameters: Sequence[SQLValue]) -> list[tuple[SQLValue, ...]]:
    """Every row any ``sql`` returns (outside a transaction: autocommit)."""
    return connection.execute(sql, parameters).fetchall()


def delete_expired(connection: sqlite3.Connection, batch: int) -> None:
    """Delete at most ``batch`` expired sessions, the earliest first (the trigger drops their data)."""
    connection.execute(
        "DELETE FROM sessions WHERE sid IN "
        "(SELECT sid FROM sessions WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
        (time.time(), batch),
    )
