"""MemoryStore: revocation, idle expiry, the cap, and atomic data under concurrency.

The store contract every store keeps (data round trips, copies, JSON-only values, incr and
update) is tested once for MemoryStore and RedisStore alike in tests/stores/test_redis_store.py.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from mcp_sessions import MemoryStore, SessionStatus, SessionStore, SessionStoreFull, SessionStoreUnavailable

pytestmark = pytest.mark.anyio

NOW = 1_900_000_000.0
EXP = NOW + 3600


async def test_create_touch_revoke() -> None:
    store = MemoryStore()
    await store.create("s1", expires_at=EXP, now=NOW)
    assert len(store) == 1
    assert await store.touch("s1", expires_at=EXP, now=NOW + 1, idle_ttl=None) is SessionStatus.ACTIVE
    assert await store.revoke("s1", expires_at=EXP) is True
    assert await store.revoke("s1", expires_at=EXP) is False
    assert await store.touch("s1", expires_at=EXP, now=NOW + 2, idle_ttl=None) is SessionStatus.REVOKED


async def test_revoke_of_an_unknown_session_is_recorded() -> None:
    store = MemoryStore()
    assert await store.revoke("minted-elsewhere", expires_at=EXP) is True
    assert await store.touch("minted-elsewhere", expires_at=EXP, now=NOW, idle_ttl=None) is SessionStatus.REVOKED
    assert await store.revoke("minted-elsewhere", expires_at=EXP) is False


async def test_unknown_session_is_accepted_and_tracked_from_first_use() -> None:
    store = MemoryStore()
    assert await store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=60) is SessionStatus.ACTIVE
    assert len(store) == 1
    assert await store.touch("s1", expires_at=EXP, now=NOW + 61, idle_ttl=60) is SessionStatus.IDLE_EXPIRED


async def test_idle_expiry_then_revoked_and_data_dropped() -> None:
    store = MemoryStore()
    await store.create("s1", expires_at=EXP, now=NOW)
    await store.set("s1", "cart", ["apple"], expires_at=EXP)
    # Each touch within the idle window moves the clock.
    assert await store.touch("s1", expires_at=EXP, now=NOW + 50, idle_ttl=60) is SessionStatus.ACTIVE
    assert await store.touch("s1", expires_at=EXP, now=NOW + 110, idle_ttl=60) is SessionStatus.ACTIVE
    assert await store.touch("s1", expires_at=EXP, now=NOW + 170, idle_ttl=60) is SessionStatus.ACTIVE
    assert await store.touch("s1", expires_at=EXP, now=NOW + 230.5, idle_ttl=60) is SessionStatus.IDLE_EXPIRED
    assert await store.items("s1") == {}
    assert await store.get("s1", "cart", "gone") == "gone"
    for later in (NOW + 231, NOW + 10_000):
        assert await store.touch("s1", expires_at=EXP, now=later, idle_ttl=60) is SessionStatus.REVOKED
    assert await store.touch("s1", expires_at=EXP, now=NOW + 231, idle_ttl=None) is SessionStatus.REVOKED
    assert await store.revoke("s1", expires_at=EXP) is False


async def test_idle_boundary_is_inclusive() -> None:
    store = MemoryStore()
    await store.create("s1", expires_at=EXP, now=NOW)
    assert await store.touch("s1", expires_at=EXP, now=NOW + 60, idle_ttl=60) is SessionStatus.ACTIVE


async def test_writes_after_revoke_do_not_resurrect_data() -> None:
    store = MemoryStore()
    await store.create("s1", expires_at=EXP, now=NOW)
    await store.revoke("s1", expires_at=EXP)
    await store.set("s1", "a", 1, expires_at=EXP)
    assert await store.incr("s1", "n", 5, expires_at=EXP) == 5
    assert await store.update("s1", "u", lambda old: [*old, 1], expires_at=EXP, default=[]) == [1]
    assert await store.items("s1") == {}
    assert await store.get("s1", "a") is None
    assert await store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=None) is SessionStatus.REVOKED


async def test_create_at_the_cap_raises_store_full() -> None:
    store = MemoryStore(max_sessions=3)
    for sid in ("a", "b", "c"):
        await store.create(sid, expires_at=EXP, now=NOW)
    with pytest.raises(SessionStoreFull) as info:
        await store.create("d", expires_at=EXP, now=NOW)
    assert isinstance(info.value, SessionStoreUnavailable)
    assert "maximum of 3 sessions" in str(info.value)
    assert len(store) == 3


async def test_expired_entries_are_pruned_to_make_room() -> None:
    store = MemoryStore(max_sessions=3)
    await store.create("short-1", expires_at=NOW + 10, now=NOW)
    await store.create("short-2", expires_at=NOW + 10, now=NOW)
    await store.create("long", expires_at=EXP, now=NOW)
    await store.create("new", expires_at=EXP, now=NOW + 10)  # the two short ones are past expiry
    assert len(store) == 2
    assert await store.touch("long", expires_at=EXP, now=NOW + 11, idle_ttl=None) is SessionStatus.ACTIVE
    await store.create("newer", expires_at=EXP, now=NOW + 11)
    with pytest.raises(SessionStoreFull):
        await store.create("newest", expires_at=EXP, now=NOW + 11)


async def test_revocation_is_never_forgotten_at_the_cap() -> None:
    store = MemoryStore(max_sessions=2)
    await store.create("a", expires_at=EXP, now=NOW)
    await store.create("b", expires_at=EXP, now=NOW)
    assert await store.revoke("minted-elsewhere", expires_at=EXP) is True
    assert len(store) == 3
    assert await store.touch("minted-elsewhere", expires_at=EXP, now=NOW, idle_ttl=None) is SessionStatus.REVOKED
    await store.revoke("a", expires_at=EXP)
    # Creating more sessions never evicts a live revocation.
    with pytest.raises(SessionStoreFull):
        await store.create("c", expires_at=EXP, now=NOW + 1)
    assert await store.touch("a", expires_at=EXP, now=NOW + 1, idle_ttl=None) is SessionStatus.REVOKED
    assert await store.touch("minted-elsewhere", expires_at=EXP, now=NOW + 1, idle_ttl=None) is SessionStatus.REVOKED


async def test_unknown_session_at_the_cap_is_accepted_untracked() -> None:
    store = MemoryStore(max_sessions=1)
    await store.create("a", expires_at=EXP, now=NOW)
    assert await store.touch("other", expires_at=EXP, now=NOW, idle_ttl=60) is SessionStatus.ACTIVE
    assert len(store) == 1
    assert await store.touch("other", expires_at=EXP, now=NOW + 1000, idle_ttl=60) is SessionStatus.ACTIVE


@pytest.mark.parametrize("cap", [0, -1])
async def test_max_sessions_must_be_positive(cap: int) -> None:
    with pytest.raises(ValueError, match="max_sessions must be at least 1"):
        MemoryStore(max_sessions=cap)


async def test_incr_counts_from_zero_and_by_amount() -> None:
    store = MemoryStore()
    assert await store.incr("s1", "n", expires_at=EXP) == 1
    assert await store.incr("s1", "n", 10, expires_at=EXP) == 11
    assert await store.incr("s1", "n", -12, expires_at=EXP) == -1
    assert await store.get("s1", "n") == -1


async def test_incr_and_update_are_atomic_under_concurrent_tasks() -> None:
    store = MemoryStore()
    await store.create("s1", expires_at=EXP, now=NOW)
    start = anyio.Event()

    async def bump(i: int) -> None:
        def append(old: list[int]) -> list[int]:
            return [*old, i]

        await start.wait()
        for _ in range(20):
            await store.incr("s1", "n", expires_at=EXP)
            await store.update("s1", "seen", append, expires_at=EXP, default=[])
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        for i in range(100):
            tg.start_soon(bump, i)
        start.set()
    assert await store.get("s1", "n") == 2000
    seen = await store.get("s1", "seen")
    assert len(seen) == 2000
    assert sorted(set(seen)) == list(range(100))


async def test_is_a_session_store() -> None:
    assert isinstance(MemoryStore(), SessionStore)
    await MemoryStore().aclose()
