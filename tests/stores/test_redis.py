"""RedisStore against a real redis-server: key layout, throttled idle tracking, one command per touch,
and failure: every Redis failure is SessionStoreUnavailable, quickly, and a restart costs nothing once
Redis answers again. The contract it shares with every store is in test_contract.py.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis as sync_redis
import redis.asyncio as aioredis
from redis.crc import key_slot

from _redis import Forwarder, RedisServer, free_port, redis_server
from _waits import WITHIN, until_awaited
from mcp_sessions.stores import RedisStore, SessionStoreUnavailable

from .conftest import ACTIVE, EXP, NOW, Closing, unique_prefix

pytestmark = pytest.mark.anyio


@pytest.fixture
async def redis_store(redis: RedisServer, closing: Closing) -> RedisStore:
    """A RedisStore that writes the last-seen time on every touch, as MemoryStore does."""
    return closing(RedisStore(redis.url, prefix=unique_prefix(), touch_interval=0))


@pytest.fixture
async def raw(redis: RedisServer) -> AsyncIterator[aioredis.Redis]:
    """A plain client, to look at what the store wrote."""
    async with aioredis.Redis.from_url(redis.url, decode_responses=True) as client:
        yield client


async def test_key_layout_hash_tags_and_ttls(redis_store: RedisStore, raw: aioredis.Redis) -> None:
    await redis_store.touch("sid-1", expires_at=EXP, now=NOW + 1, idle_ttl=60, issued_at=NOW)
    await redis_store.set("sid-1", "k", {"v": 1}, expires_at=EXP)
    tagged = f"{redis_store.prefix}{{sid-1}}"
    status, data = tagged + ":s", tagged + ":d"
    assert sorted(await raw.keys(redis_store.prefix + "*")) == sorted([status, data])
    assert len({key_slot(k.encode()) for k in (status, data)}) == 1  # one Cluster slot a session
    assert await raw.get(status) == repr(NOW + 1)
    assert await raw.hgetall(data) == {"k": '{"v":1}'}
    # Keys live for the session's remaining lifetime plus the margin (data writes count from the real clock).
    assert 3600_000 < await raw.pttl(status) <= (3600 + 300) * 1000
    assert await raw.pttl(data) > 3600_000


async def test_revocation_keeps_a_marker_for_the_remaining_lifetime_and_deletes_the_rest(
    redis_store: RedisStore, raw: aioredis.Redis
) -> None:
    await redis_store.set("sid-2", "k", 1, expires_at=EXP)
    assert await redis_store.revoke("sid-2", expires_at=EXP) is True
    keys = await raw.keys(redis_store.prefix + "{*")
    assert keys == [f"{redis_store.prefix}{{sid-2}}:s"]
    assert await raw.get(keys[0]) == "r"
    assert await raw.pttl(keys[0]) > 0
    await redis_store.set("sid-2", "k", 2, expires_at=EXP)
    await redis_store.incr("sid-2", "n", expires_at=EXP)
    await redis_store.update("sid-2", "u", lambda old: 1, expires_at=EXP)
    assert len(await raw.keys(redis_store.prefix + "{*")) == 1  # nothing written after the revocation


async def test_nothing_outlives_the_session(redis: RedisServer, raw: aioredis.Redis, closing: Closing) -> None:
    store = closing(RedisStore(redis.url, prefix=unique_prefix(), expiry_margin=0, touch_interval=0))
    now = time.time()
    await store.touch("short", expires_at=now + 0.3, now=now, idle_ttl=60, issued_at=now - 1)
    await store.set("short", "k", 1, expires_at=now + 0.3)
    await store.revoke("revoked", expires_at=now + 0.3)
    assert len(await raw.keys(store.prefix + "*")) == 3

    async def nothing_left() -> bool:
        return await raw.keys(store.prefix + "*") == []

    await until_awaited(nothing_left, "every key expired with the session")


async def test_last_seen_is_written_at_most_once_per_interval(
    redis: RedisServer, raw: aioredis.Redis, closing: Closing
) -> None:
    store = closing(RedisStore(redis.url, prefix=unique_prefix(), touch_interval=10))
    status = f"{store.prefix}{{s1}}:s"
    # Within one interval of issued_at the clock needs no write: it started there.
    for offset in (1, 5, 9.9):
        assert await store.touch("s1", expires_at=EXP, now=NOW + offset, idle_ttl=600, issued_at=NOW) is ACTIVE
        assert await raw.get(status) is None
    assert await store.touch("s1", expires_at=EXP, now=NOW + 10, idle_ttl=600, issued_at=NOW) is ACTIVE
    assert await raw.get(status) == repr(NOW + 10)
    assert await store.touch("s1", expires_at=EXP, now=NOW + 19, idle_ttl=600, issued_at=NOW) is ACTIVE
    assert await raw.get(status) == repr(NOW + 10)
    # A replica whose clock is behind never moves last-seen back.
    assert await store.touch("s1", expires_at=EXP, now=NOW - 100, idle_ttl=600, issued_at=NOW) is ACTIVE
    assert await raw.get(status) == repr(NOW + 10)


async def test_the_hot_path_is_one_command(redis_store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first use of each script loads it (NOSCRIPT, SCRIPT LOAD, EVALSHA); after that, one command.
    await redis_store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=60)
    await redis_store.incr("s1", "n", expires_at=EXP)
    await redis_store.set("s1", "k", 0, expires_at=EXP)
    sent: list[str] = []
    execute: Callable[..., Awaitable[Any]] = redis_store._redis.execute_command  # untyped in redis-py

    async def counting(*args: Any, **options: Any) -> Any:
        sent.append(str(args[0]))
        return await execute(*args, **options)

    monkeypatch.setattr(redis_store._redis, "execute_command", counting)
    for offset in (1, 2, 3):
        assert await redis_store.touch("s1", expires_at=EXP, now=NOW + offset, idle_ttl=60) is ACTIVE
    assert await redis_store.incr("s1", "n", expires_at=EXP) == 2
    await redis_store.set("s1", "k", 1, expires_at=EXP)
    assert await redis_store.touch("s1", expires_at=EXP, now=NOW + 4, idle_ttl=None) is ACTIVE
    assert sent == ["EVALSHA"] * 5 + ["GET"]


async def test_update_gives_up_after_its_time_under_constant_contention(redis: RedisServer, closing: Closing) -> None:
    """Another writer gets in before every compare-and-set: the update retries for update_timeout, then the
    retryable error; the value is the other writer's."""
    store = closing(RedisStore(redis.url, prefix=unique_prefix(), update_timeout=0.2))
    calls = 0

    def contended(old: int) -> int:
        nonlocal calls
        calls += 1
        meddler.hset(f"{store.prefix}{{s1}}:d", "n", str(1000 + calls))  # another writer gets in first
        return old + 1

    with sync_redis.Redis.from_url(redis.url) as meddler:
        await store.set("s1", "n", 0, expires_at=EXP)
        with pytest.raises(SessionStoreUnavailable, match=r"'n' changed under every attempt to update it for 0\.2 s"):
            await store.update("s1", "n", contended, expires_at=EXP)
    assert calls >= 2
    assert await store.get("s1", "n") == 1000 + calls


async def test_writers_to_one_key_all_land_however_slow_each_round_trip_is(
    redis: RedisServer, closing: Closing
) -> None:
    """25 writers update one value twice each over a link that holds every chunk 60 ms (a loaded machine, a far
    Redis): the back-off counts in round trips, so none runs out of attempts (capped at 50 ms, as it was, some did)."""
    async with Forwarder(redis.port, delay=0.06) as link:
        url = f"redis://127.0.0.1:{link.port}/0"  # a busy machine's connects and answers take their time
        store = closing(RedisStore(url, prefix=unique_prefix(), timeout=WITHIN, connect_timeout=WITHIN))

        async def writer(n: int) -> None:
            for _ in range(2):
                await store.update("s1", "seen", lambda seen: [*seen, n], expires_at=EXP, default=[])

        async with asyncio.TaskGroup() as writers:
            for n in range(25):
                writers.create_task(writer(n))
        assert sorted(await store.get("s1", "seen")) == sorted([*range(25)] * 2)


async def test_incr_refuses_what_redis_cannot_count(redis_store: RedisStore) -> None:
    await redis_store.set("s1", "n", 2**63 - 1, expires_at=EXP)
    with pytest.raises(OverflowError, match="64-bit"):
        await redis_store.incr("s1", "n", expires_at=EXP)
    assert await redis_store.get("s1", "n") == 2**63 - 1
    with pytest.raises(OverflowError, match="64-bit"):
        await redis_store.incr("s1", "m", 2**64, expires_at=EXP)


OPERATIONS: dict[str, Callable[[RedisStore], Awaitable[Any]]] = {
    "touch": lambda store: store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=60),
    "touch-read": lambda store: store.touch("s1", expires_at=EXP, now=NOW, idle_ttl=None),
    "revoke": lambda store: store.revoke("s1", expires_at=EXP),
    "get": lambda store: store.get("s1", "k"),
    "set": lambda store: store.set("s1", "k", 1, expires_at=EXP),
    "delete": lambda store: store.delete("s1", "k"),
    "incr": lambda store: store.incr("s1", "k", expires_at=EXP),
    "update": lambda store: store.update("s1", "k", lambda old: 1, expires_at=EXP),
    "items": lambda store: store.items("s1"),
    "ping": lambda store: store.ping(),
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
async def test_nothing_listening_is_unavailable(operation: str, closing: Closing) -> None:
    store = closing(RedisStore(f"redis://127.0.0.1:{free_port()}/0"))
    with pytest.raises(SessionStoreUnavailable, match="redis failed: ConnectionError"):
        await OPERATIONS[operation](store)


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


@pytest.mark.parametrize("operation", list(OPERATIONS))
async def test_a_silent_server_is_unavailable_within_the_timeout(
    silent_server: int, operation: str, closing: Closing
) -> None:
    store = closing(RedisStore(f"redis://127.0.0.1:{silent_server}/0", timeout=0.1))
    with pytest.raises(SessionStoreUnavailable):
        await OPERATIONS[operation](store)


async def test_a_user_supplied_client_is_bounded_by_the_store_timeout(silent_server: int) -> None:
    # This client would wait forever; the store's own deadline still ends the call.
    client = aioredis.Redis(host="127.0.0.1", port=silent_server, socket_timeout=None, socket_connect_timeout=None)
    async with client:
        with pytest.raises(SessionStoreUnavailable, match=r"did not answer within 0.1 s"):
            await RedisStore(client=client, timeout=0.1).touch("s1", expires_at=EXP, now=NOW, idle_ttl=None)


async def test_a_user_supplied_client_works_without_decoding_and_stays_open(redis: RedisServer) -> None:
    client = aioredis.Redis.from_url(redis.url)  # decode_responses=False: replies are bytes
    store = RedisStore(client=client, prefix=unique_prefix())
    assert await store.touch("s1", expires_at=EXP, now=NOW + 1, idle_ttl=60) is ACTIVE
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
    async with aioredis.Redis.from_url(redis.url) as client:  # no socket timeout of its own: the store's alone
        store = RedisStore(client=client, prefix=unique_prefix(), timeout=0.2)
        await store.set("s1", "a", "A", expires_at=EXP)
        await store.set("s1", "b", "B", expires_at=EXP)
        # Every client's commands wait from the moment this answers, for 600 ms: a server slower than the store's
        # timeout, with no clock of the test's deciding when the wait began.
        assert redis.command("CLIENT", "PAUSE", "600", "ALL") == b"+OK\r\n"
        with pytest.raises(SessionStoreUnavailable, match=r"did not answer within 0\.2 s"):
            await store.get("s1", "a")
        store.timeout = WITHIN  # it timed out above; here a busy machine's slow answer is no failure
        # The abandoned reply ("A") must not answer the next command on a reused connection.
        assert await store.get("s1", "b") == "B"
        assert await store.get("s1", "a") == "A"


async def test_a_redis_error_reply_is_unavailable_not_another_exception(
    redis_store: RedisStore, raw: aioredis.Redis
) -> None:
    await raw.set(f"{redis_store.prefix}{{s1}}:d", "not a hash")
    for operation in ("get", "set", "items", "incr", "update", "delete"):
        with pytest.raises(SessionStoreUnavailable, match=r"^redis failed: ResponseError WRONGTYPE$"):
            await OPERATIONS[operation](redis_store)


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
        (("redis://h",), {"update_timeout": 0}, "update_timeout must be"),
        (("redis://h",), {"prefix": "a{b}:"}, "without braces"),
    ],
)
def test_bad_construction(args: tuple[str, ...], options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        RedisStore(*args, **options)
    assert "hunter2" not in str(info.value)


async def test_defaults_are_short_and_bounded(redis: RedisServer, closing: Closing) -> None:
    store = closing(RedisStore(redis.url))
    assert isinstance(store._redis, aioredis.Redis)
    pool = store._redis.connection_pool
    assert isinstance(pool, aioredis.BlockingConnectionPool)
    assert pool.max_connections == 50
    assert pool.timeout == 2.0
    kwargs = pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (2.0, 2.0)
    assert kwargs["retry"]._retries == 0  # the store never retries a command itself
    assert kwargs["protocol"] == 2  # RESP2: the pool replaces connections a restarted Redis closed
    assert (store.timeout, store.touch_interval, store.expiry_margin) == (2.0, 10.0, 300.0)
    await store.ping()
    assert "RedisStore(prefix='mcp-sessions:'" in repr(store)


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


CLIENTS = 20


async def one_round(store: RedisStore) -> list[BaseException | int]:
    """Each of 20 concurrent clients touches its session and counts once; the counts or the errors."""

    async def client(i: int) -> int:
        now = time.time()
        assert await store.touch(f"s{i}", expires_at=now + 3600, now=now, idle_ttl=60) is ACTIVE
        return await store.incr(f"s{i}", "n", expires_at=now + 3600)

    return await asyncio.gather(*(client(i) for i in range(CLIENTS)), return_exceptions=True)


@pytest.mark.parametrize("during_the_outage", ["idle", "requests"])
@pytest.mark.parametrize("built_by", ["url", "client"])
async def test_a_redis_restart_costs_nothing_once_redis_answers(during_the_outage: str, built_by: str) -> None:
    with redis_server() as server:
        client = None
        if built_by == "url":
            # Generous timeouts: a loaded machine connects slowly, and this test is about restarts.
            store = RedisStore(server.url, touch_interval=0, timeout=5, connect_timeout=5)
        else:  # a client of the user's own making, as the docs advise: RESP2
            client = aioredis.Redis.from_url(server.url, protocol=2, socket_timeout=5, socket_connect_timeout=5)
            store = RedisStore(client=client, touch_interval=0, timeout=5)  # the store's own bound: 0.5 s
        try:
            for round_ in range(3):  # every client holds a pooled connection now
                assert await one_round(store) == [round_ + 1] * CLIENTS
            # In threads: the event loop runs on meanwhile, as a server's does (it sees the old connections close).
            await asyncio.to_thread(server.stop)
            if during_the_outage == "requests":
                outcomes = await one_round(store)
                assert all(isinstance(o, SessionStoreUnavailable) for o in outcomes)
            await asyncio.to_thread(server.start)  # returns once the new server answers PING; it is empty
            for round_ in range(5):
                # Not one failure, and never a double count: a command is sent once or not at all.
                assert await one_round(store) == [round_ + 1] * CLIENTS
        finally:
            await store.aclose()
            if client is not None:
                await client.aclose()
