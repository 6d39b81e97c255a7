"""RedisStore against a real redis-server: the store contract (shared with MemoryStore), key layout, throttled
idle tracking, atomicity across store instances (replicas), and failure: every Redis failure is
SessionStoreUnavailable, quickly, and the store recovers by itself.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis as sync_redis
import redis.asyncio as aioredis
from redis.crc import key_slot

from _redis import RedisServer, free_port, redis_server
from mcp_sessions import MemoryStore, SessionStatus, SessionStore, SessionStoreUnavailable
from mcp_sessions.stores import RedisStore

pytestmark = pytest.mark.anyio

NOW = 1_900_000_000.0
EXP = NOW + 3600
ACTIVE, REVOKED, IDLE_EXPIRED = SessionStatus.ACTIVE, SessionStatus.REVOKED, SessionStatus.IDLE_EXPIRED


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


def unique_prefix() -> str:
    return f"test-{uuid.uuid4().hex[:8]}:"


@pytest.fixture
async def redis_store(redis: RedisServer) -> AsyncIterator[RedisStore]:
    """A RedisStore that writes the last-seen time on every touch, as MemoryStore does."""
    store = RedisStore(redis.url, prefix=unique_prefix(), touch_interval=0)
    yield store
    await store.aclose()


@pytest.fixture
async def raw(redis: RedisServer) -> AsyncIterator[aioredis.Redis]:
    """A plain client, to look at what the store wrote."""
    client = aioredis.Redis.from_url(redis.url, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[SessionStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    server: RedisServer = request.getfixturevalue("redis")
    redis_store = RedisStore(server.url, prefix=unique_prefix(), touch_interval=0)
    yield redis_store
    await redis_store.aclose()


# -- the contract, for every store ------------------------------------------------------------------


async def test_create_touch_revoke(store: SessionStore) -> None:
    await store.create("s1", expires_at=EXP, now=NOW)
    assert await store.touch("s1", expires_at=EXP, now=NOW + 1, idle_ttl=None) is ACTIVE
    assert await store.revoke("s1", expires_at=EXP) is True
    assert await store.revoke("s1", expires_at=EXP) is False
    assert await store.touch("s1", expires_at=EXP, now=NOW + 2, idle_ttl=None) is REVOKED


async def test_revoke_of_an_unknown_session_is_recorded(store: SessionStore) -> None:
    assert await store.revoke("minted-elsewhere", expires_at=EXP) is True
    assert await store.touch("minted-elsewhere", expires_at=EXP, now=NOW, idle_ttl=None) is REVOKED
    assert await store.revoke("minted-elsewhere", expires_at=EXP) is False


async def test_unknown_session_is_accepted_and_tracked_from_first_use(store: SessionStore) -> None:
    assert await store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=60) is ACTIVE
    assert await store.touch("s1", expires_at=EXP, now=NOW + 61, idle_ttl=60) is IDLE_EXPIRED


async def test_idle_expiry_then_revoked_and_data_dropped(store: SessionStore) -> None:
    await store.create("s1", expires_at=EXP, now=NOW)
    await store.set("s1", "cart", ["apple"], expires_at=EXP)
    assert await store.touch("s1", expires_at=EXP, now=NOW + 50, idle_ttl=60) is ACTIVE
    assert await store.touch("s1", expires_at=EXP, now=NOW + 110, idle_ttl=60) is ACTIVE
    assert await store.touch("s1", expires_at=EXP, now=NOW + 170, idle_ttl=60) is ACTIVE
    assert await store.touch("s1", expires_at=EXP, now=NOW + 230.5, idle_ttl=60) is IDLE_EXPIRED
    assert await store.items("s1") == {}
    assert await store.get("s1", "cart", "gone") == "gone"
    for later in (NOW + 231, NOW + 10_000):
        assert await store.touch("s1", expires_at=EXP, now=later, idle_ttl=60) is REVOKED
    assert await store.touch("s1", expires_at=EXP, now=NOW + 231, idle_ttl=None) is REVOKED
    assert await store.revoke("s1", expires_at=EXP) is False


async def test_idle_boundary_is_inclusive(store: SessionStore) -> None:
    await store.create("s1", expires_at=EXP, now=NOW)
    assert await store.touch("s1", expires_at=EXP, now=NOW + 60, idle_ttl=60) is ACTIVE


async def test_revoke_drops_data(store: SessionStore) -> None:
    await store.create("s1", expires_at=EXP, now=NOW)
    await store.set("s1", "a", 1, expires_at=EXP)
    await store.incr("s1", "n", expires_at=EXP)
    assert await store.items("s1") == {"a": 1, "n": 1}
    await store.revoke("s1", expires_at=EXP)
    assert await store.items("s1") == {}
    assert await store.get("s1", "a") is None


async def test_writes_after_revoke_do_not_resurrect_data(store: SessionStore) -> None:
    await store.create("s1", expires_at=EXP, now=NOW)
    await store.revoke("s1", expires_at=EXP)
    await store.set("s1", "a", 1, expires_at=EXP)
    assert await store.incr("s1", "n", 5, expires_at=EXP) == 5
    assert await store.update("s1", "u", lambda old: [*old, 1], expires_at=EXP, default=[]) == [1]
    assert await store.items("s1") == {}
    assert await store.get("s1", "a") is None
    assert await store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=None) is REVOKED


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


async def test_update_passes_the_default_and_returns_the_new_value(store: SessionStore) -> None:
    assert await store.update("s1", "u", lambda old: [*old, "a"], expires_at=EXP, default=[]) == ["a"]
    assert await store.update("s1", "u", lambda old: [*old, "b"], expires_at=EXP, default=[]) == ["a", "b"]


async def test_sessions_do_not_share_data(store: SessionStore) -> None:
    await store.set("s1", "k", 1, expires_at=EXP)
    await store.set("s2", "k", 2, expires_at=EXP)
    await store.revoke("s1", expires_at=EXP)
    assert await store.get("s2", "k") == 2


async def test_incr_and_update_are_atomic_under_concurrent_tasks(store: SessionStore) -> None:
    await store.create("s1", expires_at=EXP, now=NOW)
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


async def test_is_a_session_store(store: SessionStore) -> None:
    assert isinstance(store, SessionStore)


# -- Redis: layout and expiry -------------------------------------------------------------------------


async def test_key_layout_hash_tags_and_ttls(redis_store: RedisStore, raw: aioredis.Redis) -> None:
    await redis_store.create("sid-1", expires_at=EXP, now=NOW)
    await redis_store.set("sid-1", "k", {"v": 1}, expires_at=EXP)
    status, data = f"{redis_store.prefix}{{sid-1}}:s", f"{redis_store.prefix}{{sid-1}}:d"
    assert sorted(await raw.keys(redis_store.prefix + "*")) == sorted([status, data])
    assert key_slot(status.encode()) == key_slot(data.encode())  # one Cluster slot: scripts run on one node
    assert await raw.get(status) == repr(NOW)
    assert await raw.hgetall(data) == {"k": '{"v":1}'}
    # The status key lives for the session's remaining lifetime plus the margin.
    assert 3600_000 < await raw.pttl(status) <= (3600 + 300) * 1000
    assert await raw.pttl(data) > 0


async def test_revocation_keeps_a_marker_for_the_remaining_lifetime_and_deletes_data(
    redis_store: RedisStore, raw: aioredis.Redis
) -> None:
    await redis_store.create("sid-2", expires_at=EXP, now=NOW)
    await redis_store.set("sid-2", "k", 1, expires_at=EXP)
    assert await redis_store.revoke("sid-2", expires_at=EXP) is True
    keys = await raw.keys(redis_store.prefix + "*")
    assert keys == [f"{redis_store.prefix}{{sid-2}}:s"]
    assert await raw.get(keys[0]) == "r"
    assert await raw.pttl(keys[0]) > 0
    await redis_store.set("sid-2", "k", 2, expires_at=EXP)
    await redis_store.incr("sid-2", "n", expires_at=EXP)
    await redis_store.update("sid-2", "u", lambda old: 1, expires_at=EXP)
    assert len(await raw.keys(redis_store.prefix + "*")) == 1  # nothing written after the revocation


async def test_nothing_outlives_the_session(redis: RedisServer, raw: aioredis.Redis) -> None:
    store = RedisStore(redis.url, prefix=unique_prefix(), expiry_margin=0)
    try:
        now = time.time()
        await store.create("short", expires_at=now + 0.3, now=now)
        await store.set("short", "k", 1, expires_at=now + 0.3)
        await store.revoke("revoked", expires_at=now + 0.3)
        await asyncio.sleep(0.5)  # TTL expiry, not a timing assertion
        assert await raw.keys(store.prefix + "*") == []
    finally:
        await store.aclose()


async def test_last_seen_is_written_at_most_once_per_interval(redis: RedisServer, raw: aioredis.Redis) -> None:
    store = RedisStore(redis.url, prefix=unique_prefix(), touch_interval=10)
    status = f"{store.prefix}{{s1}}:s"
    try:
        await store.create("s1", expires_at=EXP, now=NOW)
        for offset in (1, 5, 9.9):
            assert await store.touch("s1", expires_at=EXP, now=NOW + offset, idle_ttl=None) is ACTIVE
            assert await raw.get(status) == repr(NOW)
        assert await store.touch("s1", expires_at=EXP, now=NOW + 10, idle_ttl=None) is ACTIVE
        assert await raw.get(status) == repr(NOW + 10)
        # A replica whose clock is behind never moves last-seen back.
        assert await store.touch("s1", expires_at=EXP, now=NOW - 100, idle_ttl=None) is ACTIVE
        assert await raw.get(status) == repr(NOW + 10)
    finally:
        await store.aclose()


async def test_a_throttled_session_ends_idle_late_never_early(redis: RedisServer) -> None:
    # idle_ttl 60: the interval is min(10, 60 / 10) = 6 s; a session ends 60 to 66 s after its last use.
    store = RedisStore(redis.url, prefix=unique_prefix(), touch_interval=10)
    try:
        await store.create("s1", expires_at=EXP, now=NOW)
        assert await store.touch("s1", expires_at=EXP, now=NOW + 5, idle_ttl=60) is ACTIVE  # not written
        # The last use was at +5: at +64 the session has been idle 59 s and must live.
        assert await store.touch("s1", expires_at=EXP, now=NOW + 64, idle_ttl=60) is ACTIVE  # written
        assert await store.touch("s1", expires_at=EXP, now=NOW + 64 + 66, idle_ttl=60) is ACTIVE
        await store.create("s2", expires_at=EXP, now=NOW)
        assert await store.touch("s2", expires_at=EXP, now=NOW + 66.5, idle_ttl=60) is IDLE_EXPIRED
    finally:
        await store.aclose()


async def test_the_hot_path_is_one_command(redis_store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    await redis_store.create("s1", expires_at=EXP, now=NOW)
    # The first use of each script loads it (NOSCRIPT, SCRIPT LOAD, EVALSHA); after that, one command.
    await redis_store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=60)
    await redis_store.incr("s1", "n", expires_at=EXP)
    await redis_store.set("s1", "k", 0, expires_at=EXP)
    sent: list[str] = []
    execute = redis_store._redis.execute_command

    async def counting(*args: Any, **options: Any) -> Any:
        sent.append(str(args[0]))
        return await execute(*args, **options)

    monkeypatch.setattr(redis_store._redis, "execute_command", counting)
    for offset in (1, 2, 3):
        assert await redis_store.touch("s1", expires_at=EXP, now=NOW + offset, idle_ttl=60) is ACTIVE
    assert await redis_store.incr("s1", "n", expires_at=EXP) == 2
    await redis_store.set("s1", "k", 1, expires_at=EXP)
    assert sent == ["EVALSHA"] * 5


# -- Redis: atomicity across replicas -------------------------------------------------------------------


async def test_counting_and_updating_across_two_store_instances(redis: RedisServer) -> None:
    prefix = unique_prefix()
    replicas = [RedisStore(redis.url, prefix=prefix), RedisStore(redis.url, prefix=prefix)]
    try:

        async def work(i: int) -> None:
            store = replicas[i % 2]
            await store.incr("s1", "n", expires_at=EXP)
            await store.update("s1", "seen", lambda old: [*old, i], expires_at=EXP, default=[])

        await asyncio.gather(*(work(i) for i in range(50)))
        assert await replicas[0].get("s1", "n") == 50
        assert sorted(await replicas[1].get("s1", "seen")) == list(range(50))
    finally:
        for store in replicas:
            await store.aclose()


async def test_update_gives_up_after_bounded_attempts_under_constant_contention(redis: RedisServer) -> None:
    store = RedisStore(redis.url, prefix=unique_prefix(), max_update_attempts=3)
    meddler = sync_redis.Redis.from_url(redis.url)
    calls = 0

    def contended(old: int) -> int:
        nonlocal calls
        calls += 1
        meddler.hset(f"{store.prefix}{{s1}}:d", "n", str(1000 + calls))  # another writer gets in first
        return old + 1

    try:
        await store.set("s1", "n", 0, expires_at=EXP)
        with pytest.raises(SessionStoreUnavailable, match="'n' changed under 3 attempts"):
            await store.update("s1", "n", contended, expires_at=EXP)
        assert calls == 3
        assert await store.get("s1", "n") == 1003
    finally:
        meddler.close()
        await store.aclose()


async def test_incr_refuses_what_redis_cannot_count(redis_store: RedisStore) -> None:
    await redis_store.set("s1", "n", 2**63 - 1, expires_at=EXP)
    with pytest.raises(OverflowError, match="64-bit"):
        await redis_store.incr("s1", "n", expires_at=EXP)
    assert await redis_store.get("s1", "n") == 2**63 - 1
    with pytest.raises(OverflowError, match="64-bit"):
        await redis_store.incr("s1", "m", 2**64, expires_at=EXP)
    with pytest.raises(TypeError, match="integer amount"):
        await redis_store.incr("s1", "m", 1.5, expires_at=EXP)  # type: ignore[arg-type]


# -- Redis: failure --------------------------------------------------------------------------------------


def all_operations(store: RedisStore) -> dict[str, Any]:
    return {
        "create": lambda: store.create("s1", expires_at=EXP, now=NOW),
        "touch": lambda: store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=60),
        "revoke": lambda: store.revoke("s1", expires_at=EXP),
        "get": lambda: store.get("s1", "k"),
        "set": lambda: store.set("s1", "k", 1, expires_at=EXP),
        "delete": lambda: store.delete("s1", "k"),
        "incr": lambda: store.incr("s1", "k", expires_at=EXP),
        "update": lambda: store.update("s1", "k", lambda old: 1, expires_at=EXP),
        "items": lambda: store.items("s1"),
        "ping": store.ping,
    }


OPERATIONS = ["create", "touch", "revoke", "get", "set", "delete", "incr", "update", "items", "ping"]


@pytest.mark.parametrize("operation", OPERATIONS)
async def test_nothing_listening_is_unavailable(operation: str) -> None:
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0")
    try:
        with pytest.raises(SessionStoreUnavailable, match="redis failed: ConnectionError"):
            await all_operations(store)[operation]()
    finally:
        await store.aclose()


@pytest.fixture(scope="module")
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never answers: a hung Redis or a black-holed network."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(512)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(5)
    for sock in accepted:
        sock.close()
    listener.close()


@pytest.mark.parametrize("operation", OPERATIONS)
async def test_a_silent_server_is_unavailable_within_the_timeout(silent_server: int, operation: str) -> None:
    store = RedisStore(f"redis://127.0.0.1:{silent_server}/0", timeout=0.1)
    try:
        with pytest.raises(SessionStoreUnavailable):
            await all_operations(store)[operation]()
    finally:
        await store.aclose()


async def test_a_user_supplied_client_is_bounded_by_the_store_timeout(silent_server: int) -> None:
    # This client would wait forever; the store's own deadline still ends the call.
    client = aioredis.Redis(host="127.0.0.1", port=silent_server, socket_timeout=None, socket_connect_timeout=None)
    store = RedisStore(client=client, timeout=0.1)
    try:
        with pytest.raises(SessionStoreUnavailable, match=r"did not answer within 0.1 s"):
            await store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=None)
    finally:
        await store.aclose()
        await client.aclose()


async def test_a_user_supplied_client_works_without_decoding_and_stays_open(redis: RedisServer) -> None:
    client = aioredis.Redis.from_url(redis.url)  # decode_responses=False: replies are bytes
    store = RedisStore(client=client, prefix=unique_prefix())
    await store.create("s1", expires_at=EXP, now=NOW)
    assert await store.touch("s1", expires_at=EXP, now=NOW + 1, idle_ttl=None) is ACTIVE
    await store.set("s1", "é", {"v": [1]}, expires_at=EXP)
    assert await store.incr("s1", "n", 2, expires_at=EXP) == 2
    assert await store.update("s1", "é", lambda old: {"v": [*old["v"], 2]}, expires_at=EXP) == {"v": [1, 2]}
    assert await store.items("s1") == {"é": {"v": [1, 2]}, "n": 2}
    assert await store.get("s1", "n") == 2
    assert await store.revoke("s1", expires_at=EXP) is True
    assert await store.incr("s1", "n", 2, expires_at=EXP) == 2
    await store.aclose()
    assert await client.ping() is True  # the caller owns it
    await client.aclose()


async def test_a_slow_redis_times_out_and_later_replies_are_not_mixed_up(redis: RedisServer) -> None:
    store = RedisStore(redis.url, prefix=unique_prefix(), timeout=0.2)
    try:
        await store.set("s1", "a", "A", expires_at=EXP)
        await store.set("s1", "b", "B", expires_at=EXP)
        sleeper = asyncio.get_running_loop().run_in_executor(None, redis.command, "DEBUG", "SLEEP", "0.6")
        await asyncio.sleep(0.1)  # let DEBUG SLEEP reach the server first
        with pytest.raises(SessionStoreUnavailable, match=r"did not answer within 0\.2 s"):
            await store.get("s1", "a")
        assert await sleeper == b"+OK\r\n"
        # The abandoned reply ("A") must not answer the next command on a reused connection.
        assert await store.get("s1", "b") == "B"
        assert await store.get("s1", "a") == "A"
    finally:
        await store.aclose()


async def test_a_redis_error_reply_is_unavailable_not_another_exception(
    redis_store: RedisStore, raw: aioredis.Redis
) -> None:
    await raw.set(f"{redis_store.prefix}{{s1}}:d", "not a hash")
    for operation in ("get", "set", "items", "incr", "update", "delete"):
        with pytest.raises(SessionStoreUnavailable, match=r"^redis failed: ResponseError WRONGTYPE$"):
            await all_operations(redis_store)[operation]()


async def test_failures_say_nothing_of_the_host_to_clients_and_everything_to_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    store = RedisStore(f"redis://:hunter2@127.0.0.1:{port}/0")
    try:
        with caplog.at_level("WARNING", logger="mcp_sessions.redis"):
            for _ in range(3):
                with pytest.raises(SessionStoreUnavailable) as info:
                    await store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=None)
                assert str(info.value) == "redis failed: ConnectionError"
    finally:
        await store.aclose()
    # One log line for the burst (not one per request), with the detail an operator needs.
    [record] = [r for r in caplog.records if r.name == "mcp_sessions.redis"]
    assert f"127.0.0.1:{port}" in record.getMessage()
    assert "hunter2" not in record.getMessage()


async def test_the_store_recovers_when_redis_comes_back() -> None:
    with redis_server() as server:
        store = RedisStore(server.url, touch_interval=0)
        try:
            await store.create("s1", expires_at=EXP, now=NOW)
            assert await store.incr("s1", "n", expires_at=EXP) == 1
            server.stop()
            with pytest.raises(SessionStoreUnavailable):
                await store.touch("s1", expires_at=EXP, now=NOW + 1, idle_ttl=None)
            with pytest.raises(SessionStoreUnavailable):
                await store.revoke("s1", expires_at=EXP)
            server.start()
            # The same store object, no restart: a Redis that restarted empty knows nothing of s1,
            # and (like MemoryStore after a restart) accepts it and tracks it again.
            assert await store.touch("s1", expires_at=EXP, now=NOW + 2, idle_ttl=None) is ACTIVE
            assert await store.incr("s1", "n", expires_at=EXP) == 1
        finally:
            await store.aclose()


# -- construction ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "options", "message"),
    [
        ((), {}, "exactly one of url="),
        (("redis://h",), {"client": aioredis.Redis()}, "exactly one of url="),
        (("http://user:hunter2@h/0",), {}, r"the Redis URL is not valid"),
        (("redis://h",), {"timeout": 0}, "timeout must be a number of seconds above 0"),
        (("redis://h",), {"connect_timeout": 61}, "connect_timeout must be"),
        (("redis://h",), {"max_connections": 0}, "max_connections must be a positive integer"),
        (("redis://h",), {"touch_interval": -1}, "touch_interval must be"),
        (("redis://h",), {"expiry_margin": -1}, "expiry_margin must be"),
        (("redis://h",), {"max_update_attempts": 0}, "max_update_attempts must be"),
        (("redis://h",), {"prefix": "a{b}:"}, "without braces"),
    ],
)
def test_bad_construction(args: tuple[str, ...], options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        RedisStore(*args, **options)
    assert "hunter2" not in str(info.value)


async def test_defaults_are_short_and_bounded(redis: RedisServer) -> None:
    store = RedisStore(redis.url)
    try:
        pool = store._redis.connection_pool
        assert isinstance(pool, aioredis.BlockingConnectionPool)
        assert pool.max_connections == 50
        assert pool.timeout == 0.5
        kwargs = pool.connection_kwargs
        assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.5, 0.25)
        assert kwargs["retry"]._retries == 0  # the store never retries a command itself
        assert (store.timeout, store.touch_interval, store.expiry_margin) == (0.5, 10.0, 300.0)
        await store.ping()
        assert "RedisStore(prefix='mcp-sessions:'" in repr(store)
    finally:
        await store.aclose()


@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_store_moved_to_another_event_loop_fails_as_unavailable_then_works(redis: RedisServer) -> None:
    """redis-py raises RuntimeError when its pooled connection belongs to a closed loop: never let it escape.

    (The abandoned loop's socket is reported unclosed: that is the point of the test, hence the filters.)
    """
    store = RedisStore(redis.url, prefix=unique_prefix())
    outcomes: list[object] = []

    async def use(close: bool = False) -> None:
        try:
            outcomes.append(await store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=None))
        except SessionStoreUnavailable as exc:
            outcomes.append(str(exc))
        if close:
            await store.aclose()

    asyncio.run(use())
    asyncio.run(use())
    asyncio.run(use(close=True))
    gc.collect()  # report the abandoned socket here, under this test's filters, not in a later test
    assert outcomes[0] is ACTIVE
    assert outcomes[1] in (ACTIVE, "redis failed: RuntimeError")
    assert outcomes[2] is ACTIVE
