"""SQLiteStore alone; the contract it shares with every store is in test_contract.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from _mcp import SESSION_NOT_FOUND, ModernClient, session_meta, tool_text
from mcp_sessions.stores import SessionStatus, SessionStoreUnavailable, SQLiteStore

from ._spawned import count_in_a_process
from ._workers import workers
from .conftest import EXP, NOW, Closing

pytestmark = pytest.mark.anyio


def rows(path: Path, query: str) -> list[Any]:
    """What a plain connection reads from the file: no store code involved."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return connection.execute(query).fetchall()


async def test_everything_survives_a_restart(tmp_path: Path, closing: Closing) -> None:
    path = tmp_path / "s.db"
    first = SQLiteStore(path, touch_interval=0)
    await first.set("s1", "cart", ["apple"], expires_at=EXP)
    await first.revoke("s2", expires_at=EXP)
    await first.touch("s3", expires_at=EXP, now=NOW + 30, idle_ttl=60, issued_at=NOW)
    await first.aclose()
    second = closing(SQLiteStore(path, touch_interval=0))
    assert await second.get("s1", "cart") == ["apple"]
    assert await second.touch("s2", expires_at=EXP, now=NOW, idle_ttl=None) is SessionStatus.REVOKED
    assert await second.touch("s3", expires_at=EXP, now=NOW + 89, idle_ttl=60, issued_at=NOW) is SessionStatus.ACTIVE


def test_incr_and_update_are_atomic_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    asyncio.run(SQLiteStore(path).aclose())  # creates the tables; processes starting together would each try
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=count_in_a_process, args=(str(path), 40, w, EXP)) for w in range(3)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    [(raw,)] = rows(path, "SELECT value FROM data WHERE sid = 's1' AND key = 'n'")
    assert raw == "120"
    [(seen,)] = rows(path, "SELECT value FROM data WHERE sid = 's1' AND key = 'seen'")
    assert sorted(json.loads(seen)) == sorted(w * 1000 + i for w in range(3) for i in range(40))


async def test_expired_rows_are_deleted_in_small_batches_through_the_index(tmp_path: Path, closing: Closing) -> None:
    path = tmp_path / "s.db"
    store = closing(SQLiteStore(path, cleanup_batch=100, cleanup_interval=0))
    past = time.time() - 10
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.executemany(
            "INSERT INTO sessions (sid, expires_at) VALUES (?, ?)", [(f"old{i}", past) for i in range(1000)]
        )
        connection.executemany(
            "INSERT INTO data (sid, key, value) VALUES (?, 'k', '1')", [(f"old{i}",) for i in range(1000)]
        )
    await store.set("live", "k", 1, expires_at=time.time() + 3600)
    assert rows(path, "SELECT count(*) FROM sessions WHERE expires_at <= strftime('%s', 'now')") == [(900,)]
    assert rows(path, "SELECT count(*) FROM data WHERE sid LIKE 'old%'") == [(900,)]  # the trigger took their data
    for _ in range(9):
        await store.incr("live", "n", expires_at=time.time() + 3600)
    assert rows(path, "SELECT count(*) FROM sessions") == [(1,)]
    plan = rows(path, "EXPLAIN QUERY PLAN SELECT sid FROM sessions WHERE expires_at <= 0 ORDER BY expires_at LIMIT 100")
    assert any("sessions_by_expiry" in str(step) for step in plan)  # a range of the index, never a scan


async def test_cleanup_runs_at_most_once_per_interval(tmp_path: Path, closing: Closing) -> None:
    path = tmp_path / "s.db"
    store = closing(SQLiteStore(path, cleanup_batch=10, cleanup_interval=3600))
    await store.set("live", "k", 1, expires_at=time.time() + 3600)  # the first write cleans up, then not for an hour
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.executemany(
            "INSERT INTO sessions (sid, expires_at) VALUES (?, 0)", [(f"old{i}",) for i in range(50)]
        )
    for _ in range(20):
        await store.incr("live", "n", expires_at=time.time() + 3600)
    assert rows(path, "SELECT count(*) FROM sessions") == [(51,)]


async def test_a_held_write_lock_fails_writes_within_the_timeout_and_never_blocks_the_loop(
    tmp_path: Path, closing: Closing
) -> None:
    path = tmp_path / "s.db"
    patient, hasty = closing(SQLiteStore(path, timeout=60)), closing(SQLiteStore(path, timeout=0.3))
    await patient.set("s1", "k", 1, expires_at=EXP)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another process's writer, holding the lock
        with pytest.raises(SessionStoreUnavailable, match=r"^sqlite failed: OperationalError$"):
            await hasty.incr("s1", "n", expires_at=EXP)  # past its busy timeout
        waiting = asyncio.create_task(patient.incr("s1", "n", expires_at=EXP))
        await asyncio.sleep(0)  # the write is on the store's thread, waiting for the lock
        # The loop runs on, and readers do not wait for writers (WAL).
        assert await patient.get("s1", "k") == 1
        assert await patient.touch("s1", expires_at=EXP, now=NOW, idle_ttl=None) is SessionStatus.ACTIVE
        assert not waiting.done()
        other.execute("ROLLBACK")
    assert await waiting == 1  # the lock released, the waiting write goes through


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, "timeout must be a number of seconds above 0"),
        ({"touch_interval": -1}, "touch_interval must be"),
        ({"cleanup_batch": 0}, "cleanup_batch must be an integer from 1 to 10000"),
        ({"cleanup_interval": -1}, "cleanup_interval must be"),
    ],
)
def test_bad_construction(tmp_path: Path, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SQLiteStore(tmp_path / "s.db", **options)


def test_a_file_that_is_not_a_database_is_refused_at_construction(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ValueError, match=r"cannot open the SQLite store at .*s\.db: file is not a database") as refused:
        SQLiteStore(path)
    # Closed at once, not when the refusal's traceback (which still holds the connection) is collected.
    assert refused.value.__context__ is not None
    assert str(path) not in open_files()


def open_files() -> set[str]:
    """The paths this process holds open (the links in ``/proc/self/fd``)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
    return found


async def test_a_closed_store_is_unavailable(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    await store.ping()
    await store.aclose()
    await store.aclose()
    with pytest.raises(SessionStoreUnavailable, match="closed"):
        await store.ping()


@contextlib.contextmanager
def fresh(url: str) -> Iterator[ModernClient]:
    """A client on a new connection: the kernel hands it to any of the workers."""
    with httpx.Client(timeout=10) as http:
        yield ModernClient(http, url)


def test_three_uvicorn_workers_share_sessions_data_and_deletion(tmp_path: Path) -> None:
    with workers(3, {"WORKERS_APP_SQLITE": str(tmp_path / "sessions.db")}) as server:
        with fresh(server.url) as client:
            meta = session_meta(client.create_session())
        counts = []
        for _ in range(10):
            with fresh(server.url) as client:
                counts.append(tool_text(client.call_tool("count", session=meta)[1]))
        assert counts == [str(n) for n in range(1, 11)]

        with fresh(server.url) as client:
            response, deleted = client.request("sessions/delete", session=meta)
        assert response.status_code == 200, deleted
        assert "result" in deleted, deleted

        refused_by: set[int] = set()
        for _ in range(60):  # bounded: until every worker has refused it
            with httpx.Client(timeout=10) as http:  # one connection: the same worker answers both
                pid = server.pid_of(http)
                _, answer = ModernClient(http, server.url).call_tool("count", session=meta)
            assert answer["error"]["code"] == SESSION_NOT_FOUND, answer
            refused_by.add(pid)
            if len(refused_by) == 3:
                break
        assert len(refused_by) == 3, f"only {len(refused_by)} workers were reached"
