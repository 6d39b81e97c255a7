"""The store contract, run against every store (see ``backend`` in conftest.py).

Times are passed in (``now``), except where a store must see time pass (tombstone lifetime).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from _waits import until_awaited
from mcp_sessions.stores import SessionStatus, SessionStore

from .conftest import ACTIVE, EXP, IDLE_EXPIRED, NOW, REVOKED, Backend

pytestmark = pytest.mark.anyio


async def test_touches_without_idle_timeout_store_nothing(backend: Backend) -> None:
    store = backend.store
    for offset in (0, 1, 3000):
        assert await store.touch("s1", expires_at=EXP, now=NOW + offset, idle_ttl=None, issued_at=NOW) is ACTIVE
    assert await backend.footprint() == 0


async def test_a_touch_with_an_idle_timeout_records_the_idle_clock(backend: Backend) -> None:
    store = backend.store
    assert await store.touch("s1", expires_at=EXP, now=NOW + 30, idle_ttl=60, issued_at=NOW) is ACTIVE
    assert await backend.footprint() >= 1
    # The clock moved to +30: at +89 the session has been idle 59 s, though issued 89 s ago.
    assert await store.touch("s1", expires_at=EXP, now=NOW + 89, idle_ttl=60, issued_at=NOW) is ACTIVE


async def test_a_data_write_creates_the_record(backend: Backend) -> None:
    await backend.store.set("s1", "k", 1, expires_at=EXP)
    assert await backend.footprint() >= 1
    assert await backend.store.get("s1", "k") == 1


@pytest.mark.parametrize(
    ("issued_at", "offset", "expected"),
    [(NOW, 59, ACTIVE), (NOW, 60, ACTIVE), (NOW, 60.5, IDLE_EXPIRED), (NOW, 3000, IDLE_EXPIRED), (None, 3000, ACTIVE)],
)
async def test_the_idle_clock_of_a_session_without_a_record_starts_at_issued_at(
    store: SessionStore, issued_at: float | None, offset: float, expected: SessionStatus
) -> None:
    assert await store.touch("s1", expires_at=EXP, now=NOW + offset, idle_ttl=60, issued_at=issued_at) is expected


async def test_an_idle_expired_session_without_a_record_stays_expired(store: SessionStore) -> None:
    assert await store.touch("s1", expires_at=EXP, now=NOW + 61, idle_ttl=60, issued_at=NOW) is IDLE_EXPIRED
    assert await store.touch("s1", expires_at=EXP, now=NOW + 62, idle_ttl=60, issued_at=NOW) is IDLE_EXPIRED


async def test_touch_then_revoke(store: SessionStore) -> None:
    assert await store.touch("s1", expires_at=EXP, now=NOW + 1, idle_ttl=None, issued_at=NOW) is ACTIVE
    assert await store.revoke("s1", expires_at=EXP) is True
    assert await store.revoke("s1", expires_at=EXP) is False
    assert await store.touch("s1", expires_at=EXP, now=NOW + 2, idle_ttl=None, issued_at=NOW) is REVOKED
    assert await store.touch("s1", expires_at=EXP, now=NOW + 2, idle_ttl=60, issued_at=NOW) is REVOKED


async def test_revoke_of_a_never_touched_session_is_true_once(store: SessionStore) -> None:
    assert await store.revoke("minted-elsewhere", expires_at=EXP) is True
    assert await store.touch("minted-elsewhere", expires_at=EXP, now=NOW, idle_ttl=None) is REVOKED
    assert await store.revoke("minted-elsewhere", expires_at=EXP) is False


async def test_idle_expiry_then_revoked_and_data_dropped(store: SessionStore) -> None:
    assert await store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=60, issued_at=NOW) is ACTIVE
    await store.set("s1", "cart", ["apple"], expires_at=EXP)
    for offset in (50, 110, 170):
        assert await store.touch("s1", expires_at=EXP, now=NOW + offset, idle_ttl=60, issued_at=NOW) is ACTIVE
    assert await store.touch("s1", expires_at=EXP, now=NOW + 230.5, idle_ttl=60, issued_at=NOW) is IDLE_EXPIRED
    assert await store.items("s1") == {}
    assert await store.get("s1", "cart", "gone") == "gone"
    for later in (NOW + 231, NOW + 3000):
        assert await store.touch("s1", expires_at=EXP, now=later, idle_ttl=60, issued_at=NOW) is REVOKED
    assert await store.touch("s1", expires_at=EXP, now=NOW + 231, idle_ttl=None, issued_at=NOW) is REVOKED
    assert await store.revoke("s1", expires_at=EXP) is False


async def test_revoke_drops_data(store: SessionStore) -> None:
    await store.set("s1", "a", 1, expires_at=EXP)
    await store.incr("s1", "n", expires_at=EXP)
    assert await store.items("s1") == {"a": 1, "n": 1}
    assert await store.revoke("s1", expires_at=EXP) is True
    assert await store.items("s1") == {}
    assert await store.get("s1", "a") is None


async def test_writes_after_revoke_go_nowhere_and_raise_nothing(backend: Backend) -> None:
    store = backend.store
    await store.revoke("s1", expires_at=EXP)
    held = await backend.footprint()
    await store.set("s1", "a", 1, expires_at=EXP)
    assert await store.incr("s1", "n", 5, expires_at=EXP) == 5
    assert await store.update("s1", "u", lambda old: [*old, 1], expires_at=EXP, default=[]) == [1]
    assert await store.items("s1") == {}
    assert await store.get("s1", "a") is None
    assert await backend.footprint() == held
    assert await store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=None) is REVOKED


async def test_a_tombstone_lives_until_the_token_expires_and_no_longer(store: SessionStore) -> None:
    expires_at = time.time() + 0.5
    assert await store.revoke("s1", expires_at=expires_at) is True
    assert await store.touch("s1", expires_at=expires_at, now=time.time(), idle_ttl=None) is REVOKED

    async def forgotten() -> bool:  # past the expiry (Redis: by its own clock, no margin in this fixture)
        return await store.touch("s1", expires_at=expires_at, now=time.time(), idle_ttl=None) is ACTIVE

    await until_awaited(forgotten, "the tombstone forgotten after the token's expiry")
    assert await store.revoke("s1", expires_at=time.time() + 60) is True  # nothing was left of the old one


async def test_get_set_delete_items(store: SessionStore) -> None:
    assert await store.get("s1", "missing") is None
    assert await store.get("s1", "missing", 7) == 7
    await store.set("s1", "a", {"x": [1, "two", None, True, 1.5]}, expires_at=EXP)
    await store.set("s1", "b", "é", expires_at=EXP)
    assert await store.get("s1", "a") == {"x": [1, "two", None, True, 1.5]}
    assert await store.items("s1") == {"a": {"x": [1, "two", None, True, 1.5]}, "b": "é"}
    await store.delete("s1", "a")
    await store.delete("s1", "never-set")
    await store.delete("unknown-session", "a")
    assert await store.items("s1") == {"b": "é"}
    assert await store.items("unknown-session") == {}


async def test_values_are_copies(store: SessionStore) -> None:
    value: dict[str, Any] = {"items": [1]}
    await store.set("s1", "cart", value, expires_at=EXP)
    value["items"].append(2)
    assert await store.get("s1", "cart") == {"items": [1]}
    read = await store.get("s1", "cart")
    read["items"].append(3)
    assert await store.get("s1", "cart") == {"items": [1]}
    everything = await store.items("s1")
    everything["cart"]["items"].append(4)
    assert await store.get("s1", "cart") == {"items": [1]}
    updated = await store.update("s1", "cart", lambda old: {"items": [*old["items"], 9]}, expires_at=EXP)
    assert isinstance(updated, dict)
    updated["items"].append(10)
    assert await store.get("s1", "cart") == {"items": [1, 9]}


@pytest.mark.parametrize("value", [object(), float("nan"), {1, 2}, b"bytes"], ids=["object", "nan", "set", "bytes"])
async def test_set_refuses_values_that_are_not_json(store: SessionStore, value: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        await store.set("s1", "k", value, expires_at=EXP)
    assert await store.items("s1") == {}


@pytest.mark.parametrize("existing", ["text", 1.5, True, None, [1], {"n": 1}, "12"], ids=repr)
async def test_incr_on_a_non_int_is_a_type_error(store: SessionStore, existing: Any) -> None:
    await store.set("s1", "n", existing, expires_at=EXP)
    with pytest.raises(TypeError, match="'n' is not an integer"):
        await store.incr("s1", "n", expires_at=EXP)
    assert await store.get("s1", "n") == existing


async def test_incr_counts_from_zero_and_by_amount(store: SessionStore) -> None:
    assert await store.incr("s1", "n", expires_at=EXP) == 1
    assert await store.incr("s1", "n", 10, expires_at=EXP) == 11
    assert await store.incr("s1", "n", -12, expires_at=EXP) == -1
    assert await store.get("s1", "n") == -1
    big = 2**62
    assert await store.incr("s1", "big", big, expires_at=EXP) == big
    assert await store.incr("s1", "big", 1, expires_at=EXP) == big + 1  # exact: no float on the way
    assert await store.get("s1", "big") == big + 1
    with pytest.raises(TypeError, match="integer amount"):
        await store.incr("s1", "n", 1.5, expires_at=EXP)  # type: ignore[arg-type]


async def test_update_passes_the_default_and_returns_the_new_value(store: SessionStore) -> None:
    assert await store.update("s1", "u", lambda old: [*old, "a"], expires_at=EXP, default=[]) == ["a"]
    assert await store.update("s1", "u", lambda old: [*old, "b"], expires_at=EXP, default=[]) == ["a", "b"]


async def test_a_failing_update_changes_nothing(store: SessionStore) -> None:
    await store.set("s1", "u", 1, expires_at=EXP)

    def fail(old: int) -> int:
        raise LookupError("no")

    with pytest.raises(LookupError):
        await store.update("s1", "u", fail, expires_at=EXP)
    assert await store.get("s1", "u") == 1


async def test_sessions_do_not_share_data(store: SessionStore) -> None:
    await store.set("s1", "k", 1, expires_at=EXP)
    await store.set("s2", "k", 2, expires_at=EXP)
    await store.revoke("s1", expires_at=EXP)
    assert await store.get("s2", "k") == 2


async def test_incr_and_update_are_atomic_under_concurrent_tasks(store: SessionStore) -> None:
    start = asyncio.Event()

    async def bump(i: int) -> None:
        def append(old: list[int]) -> list[int]:
            return [*old, i]

        await start.wait()
        for _ in range(4):
            await store.incr("s1", "n", expires_at=EXP)
            await store.update("s1", "seen", append, expires_at=EXP, default=[])

    async with asyncio.TaskGroup() as tg:
        for i in range(25):
            tg.create_task(bump(i))
        start.set()
    assert await store.get("s1", "n") == 100
    seen = await store.get("s1", "seen")
    assert len(seen) == 100
    assert sorted(set(seen)) == list(range(25))


# A MemoryStore is one process's own.
@pytest.mark.parametrize("backend", ["redis", "sqlite", "valkey", "redis-cluster", "redis-sentinel"], indirect=True)
async def test_two_stores_on_one_backend_count_and_revoke_together(backend: Backend) -> None:
    assert backend.another is not None
    replicas = [backend.store, backend.another()]

    async def work(i: int) -> None:
        store = replicas[i % 2]
        await store.incr("s1", "n", expires_at=EXP)
        await store.update("s1", "seen", lambda old: [*old, i], expires_at=EXP, default=[])

    await asyncio.gather(*(work(i) for i in range(50)))
    assert await replicas[0].get("s1", "n") == 50
    assert sorted(await replicas[1].get("s1", "seen")) == list(range(50))
    assert await replicas[1].revoke("s1", expires_at=EXP) is True
    assert await replicas[0].touch("s1", expires_at=EXP, now=NOW, idle_ttl=None) is REVOKED
    assert await replicas[0].revoke("s1", expires_at=EXP) is False


async def test_ping_answers(store: SessionStore) -> None:
    ping: Callable[[], Awaitable[object]] = store.ping  # typed as returning None: the test checks that it does
    assert await ping() is None


async def test_is_a_session_store(store: SessionStore) -> None:
    assert isinstance(store, SessionStore)
