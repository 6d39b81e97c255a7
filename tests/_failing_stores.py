"""Real stores that fail as deployments see them fail, for the tests of what the middleware answers then.

No mocks: each fails inside the real client library, as it would in production.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import anyio

from _redis import RedisServer, missing, redis_server
from _waits import WITHIN
from mcp_sessions.stores import MemoryStore, RedisStore, SessionStore, SessionStoreUnavailable, SQLiteStore

HOUR: Final = 3600.0
KINDS: Final = ["memory-full", "sqlite-full", "sqlite-read-only", "sqlite-locked", "redis-stopped"]
LOCK_WAIT: Final = 0.05
"""The SQLite stores' busy timeout: a locked file refuses a write after this long."""


async def filled_memory(max_sessions: int = 4) -> MemoryStore:
    """A ``MemoryStore`` whose every record is taken, by sessions that live an hour."""
    store = MemoryStore(max_sessions=max_sessions)
    for _ in range(max_sessions):  # each session's first data write takes one record
        await store.set(uuid.uuid4().hex, "k", 1, expires_at=time.time() + HOUR)
    return store


async def filled_sqlite(path: Path) -> SQLiteStore:
    """A file that cannot grow: the store's writing connection capped at the file's size, then written until full.

    Like a full disk, a write that needs a new page fails (``SQLITE_FULL``); a small row may still
    fit in a page that has room.
    """
    store = SQLiteStore(path, timeout=LOCK_WAIT)

    def cap(connection: sqlite3.Connection) -> None:
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count = {pages}")

    await store._writes.run(cap)  # the connection every write of the store goes through, on its thread
    with contextlib.suppress(SessionStoreUnavailable):
        for _ in range(1000):
            await store.set(uuid.uuid4().hex, "pad", "p" * 500, expires_at=time.time() + HOUR)
        raise AssertionError("the capped SQLite file never filled")
    return store


@contextlib.contextmanager
def read_only_sqlite(path: Path) -> Iterator[SQLiteStore]:
    """A store opened on a database file this process cannot write: reads work, every write fails.

    Root ignores file modes, so for root the file is made immutable (``chattr +i``) and made
    writable again when the block ends; anyone else gets mode 0400.
    """
    anyio.run(SQLiteStore(path, timeout=LOCK_WAIT).aclose)  # the file and its tables, then no writer open on it
    if os.geteuid() != 0:
        path.chmod(0o400)
        yield SQLiteStore(path, timeout=LOCK_WAIT)
        return
    if shutil.which("chattr") is None:
        missing("running as root without chattr: nothing here makes a file read-only for root")
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield SQLiteStore(path, timeout=LOCK_WAIT)
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@contextlib.contextmanager
def locked_sqlite(path: Path) -> Iterator[SQLiteStore]:
    """A store whose file another connection holds in a write transaction (``BEGIN EXCLUSIVE``) for the block.

    In WAL mode reads go on; every write waits ``LOCK_WAIT`` for the lock, then fails (``SQLITE_BUSY``).
    """
    store = SQLiteStore(path, timeout=LOCK_WAIT)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        yield store
    finally:
        holder.close()


async def answers(store: SessionStore) -> None:
    """The store's backend answers now; the store is closed after, in the event loop its connections are of."""
    try:
        await store.ping()
    finally:
        await store.aclose()


@contextlib.contextmanager
def stopped_redis() -> Iterator[RedisStore]:
    """A store on a real redis-server that answered, then stopped: every call is refused at once."""
    with redis_server() as server:
        anyio.run(answers, RedisStore(server.url, timeout=WITHIN, connect_timeout=WITHIN))  # a guard, not its time
        server.stop()
        yield RedisStore(server.url)


@contextlib.contextmanager
def writes_paused(server: RedisServer) -> Iterator[None]:
    """``server`` answers reads and holds every write (``CLIENT PAUSE WRITE``: scripts too) for the block, as a Redis
    does under a write it cannot keep up with: a read passes, a write's call outlives any store's timeout."""
    assert server.command("CLIENT", "PAUSE", str(int(HOUR * 1000)), "WRITE") == b"+OK\r\n"
    try:
        yield
    finally:
        server.command("CLIENT", "UNPAUSE")


@contextlib.contextmanager
def failing_store(kind: str, directory: Path) -> Iterator[SessionStore]:
    """A store of ``kind`` (one of :data:`KINDS`) in ``directory``, closed when the block ends."""
    with contextlib.ExitStack() as stack:
        if kind == "memory-full":
            store: SessionStore = anyio.run(filled_memory)
        elif kind == "sqlite-full":
            store = anyio.run(filled_sqlite, directory / "full.db")
        elif kind == "sqlite-read-only":
            store = stack.enter_context(read_only_sqlite(directory / "read-only.db"))
        elif kind == "sqlite-locked":
            store = stack.enter_context(locked_sqlite(directory / "locked.db"))
        else:
            store = stack.enter_context(stopped_redis())
        try:
            yield store
        finally:
            anyio.run(store.aclose)


@contextlib.contextmanager
def failing_stores(directory: Path) -> Iterator[dict[str, SessionStore]]:
    """One store of each failing kind, by name, in ``directory``; each closed when the block ends."""
    with contextlib.ExitStack() as stack:
        yield {kind: stack.enter_context(failing_store(kind, directory)) for kind in KINDS}
