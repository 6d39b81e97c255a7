"""MemoryStore alone; the contract it shares with every store is in test_contract.py."""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from typing import Any

import pytest

from _waits import WITHIN, until, until_awaited
from conftest import SECRET
from mcp_sessions.stores import MemoryStore, SessionStoreFull, SessionStoreUnavailable

from ._spawned import make_a_store_in_a_worker
from ._workers import Workers
from .conftest import ACTIVE, EXP, NOW, REVOKED

pytestmark = pytest.mark.anyio


async def fill(store: MemoryStore, count: int, *, expires_at: float = EXP, prefix: str = "s") -> None:
    for i in range(count):
        assert await store.touch(f"{prefix}{i}", expires_at=expires_at, now=NOW, idle_ttl=60) is ACTIVE


async def test_a_touch_that_needs_a_record_at_the_cap_raises_store_full() -> None:
    store = MemoryStore(max_sessions=3)
    await fill(store, 3)
    with pytest.raises(SessionStoreFull) as info:
        await store.touch("new", expires_at=EXP, now=NOW, idle_ttl=60)
    assert isinstance(info.value, SessionStoreUnavailable)
    assert "maximum of 3 sessions" in str(info.value)
    with pytest.raises(SessionStoreFull):
        await store.set("new", "k", 1, expires_at=EXP)
    # Sessions that need no record still work: no idle timeout, or already recorded.
    assert await store.touch("new", expires_at=EXP, now=NOW, idle_ttl=None) is ACTIVE
    assert await store.touch("s0", expires_at=EXP, now=NOW + 1, idle_ttl=60) is ACTIVE
    assert len(store) == 3


async def test_expired_records_make_room_soonest_first() -> None:
    store = MemoryStore(max_sessions=3)
    now = time.time()
    await store.set("short-1", "k", 1, expires_at=now + 0.2)
    await store.set("short-2", "k", 1, expires_at=now + 0.3)
    await store.set("long", "k", 1, expires_at=now + 3600)
    with pytest.raises(SessionStoreFull):
        await store.set("new", "k", 1, expires_at=now + 3600)

    for session_id in ("new", "newer"):  # each takes the place of an expired record, once it has expired

        async def room(session_id: str = session_id) -> bool:
            try:
                await store.set(session_id, "k", 1, expires_at=now + 3600)
            except SessionStoreFull:
                return False
            return True

        await until_awaited(room, f"room for {session_id!r} made by an expired record")
    assert len(store) == 3
    assert await store.get("long", "k") == 1
    assert await store.get("short-1", "k") is None
    with pytest.raises(SessionStoreFull):
        await store.set("newest", "k", 1, expires_at=now + 3600)


async def test_revocation_is_never_forgotten_at_the_cap() -> None:
    store = MemoryStore(max_sessions=2)
    await fill(store, 2)
    assert await store.revoke("minted-elsewhere", expires_at=EXP) is True
    assert len(store) == 3
    assert await store.touch("minted-elsewhere", expires_at=EXP, now=NOW, idle_ttl=None) is REVOKED
    await store.revoke("s0", expires_at=EXP)
    with pytest.raises(SessionStoreFull):
        await store.touch("c", expires_at=EXP, now=NOW + 1, idle_ttl=60)
    assert await store.touch("s0", expires_at=EXP, now=NOW + 1, idle_ttl=None) is REVOKED
    assert await store.touch("minted-elsewhere", expires_at=EXP, now=NOW + 1, idle_ttl=None) is REVOKED


@pytest.mark.parametrize("cap", [0, -1, 1.5])
def test_max_sessions_must_be_a_positive_integer(cap: Any) -> None:
    with pytest.raises(ValueError, match="max_sessions must be at least 1"):
        MemoryStore(max_sessions=cap)


class NoScan(dict[str, Any]):
    """The store's record dict, refusing to be walked: a scan per request would raise here."""

    def walked(self) -> Any:
        raise AssertionError("the store walked its records")

    __iter__ = items = values = keys = walked


async def test_a_refused_write_at_the_cap_looks_at_no_record() -> None:
    store = MemoryStore(max_sessions=1_000)
    await fill(store, 1_000)
    store._entries = NoScan(store._entries)
    before = store._examined
    for i in range(100):
        with pytest.raises(SessionStoreFull):
            await store.touch(f"new{i}", expires_at=EXP, now=NOW, idle_ttl=60)
    assert store._examined == before  # nothing expired: the heap's top says so, no record is visited


async def test_eviction_visits_each_expired_record_once() -> None:
    store = MemoryStore(max_sessions=10_000)
    now = time.time()
    for i in range(10_000):
        await store.set(f"old{i}", "k", 1, expires_at=now - 1 if i % 2 else now + 3600)
    # Inserting evicted along the way (two a write); what is left goes as writes need room.
    store._entries = NoScan(store._entries)
    before = store._examined
    for i in range(5_000):
        await store.set(f"new{i}", "k", 1, expires_at=now + 3600)
    assert len(store) == 10_000
    assert store._examined - before <= 5_000  # each expired record is looked at once, in total


def test_a_memory_store_in_a_worker_process_warns_once(tmp_path: Any) -> None:
    context = multiprocessing.get_context("spawn")  # as uvicorn --workers starts its workers
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    workers = [context.Process(target=make_a_store_in_a_worker, args=(str(log),)) for log in logs]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(WITHIN)
        assert worker.exitcode == 0
    for log in logs:
        [line] = log.read_text().splitlines()
        assert line.startswith("mcp_sessions WARNING MemoryStore in a worker process")
        assert "MCP_SESSIONS_STORE=sqlite:///" in line
        assert "RedisStore" in line


def test_no_warning_in_the_main_process(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="mcp_sessions"):
        MemoryStore()
    assert caplog.records == []


def test_a_memory_store_in_gunicorn_workers_warns_in_each() -> None:
    """gunicorn forks its workers (no multiprocessing): its SERVER_SOFTWARE variable gives them away."""
    with contextlib.closing(Workers(2, {"MCP_SESSIONS_SECRET": SECRET}, gunicorn=True)) as server:

        def warned_twice() -> bool:
            assert server.process is not None, server.output()
            assert server.process.poll() is None, server.output()
            return server.output().count("MemoryStore in a worker process") >= 2

        until(warned_twice, lambda: f"the two workers did not warn:\n{server.output()}")
        server.stop()
        assert server.output().count("MemoryStore in a worker process") == 2
