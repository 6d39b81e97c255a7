"""Every store the contract runs against, behind one fixture; add a param to run it on another store."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from _redis import RedisServer, redis_server
from mcp_sessions.stores import MemoryStore, RedisStore, SessionStore, SQLiteStore


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    """One real redis-server for the module."""
    with redis_server() as server:
        yield server


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


@pytest.fixture(params=["memory", "redis", "sqlite"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Each store, tuned to write its idle clock on every touch and to keep nothing past a session's expiry."""
    opened: list[SessionStore] = []
    if request.param == "memory":
        memory = MemoryStore()

        async def memory_footprint() -> int:
            return len(memory)

        yield Backend("memory", memory, memory_footprint, None)
        return
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis")
        prefix = unique_prefix()

        def open_redis() -> SessionStore:
            # Generous deadlines: the contract is about what the store does, and 50 concurrent calls open
            # a pool's connections at once, which on a loaded machine can take longer than the default
            # 0.25 s connect timeout. The default deadlines have tests of their own (test_redis.py).
            store = RedisStore(
                server.url, prefix=prefix, touch_interval=0, expiry_margin=0, timeout=5, connect_timeout=5
            )
            opened.append(store)
            return store

        raw = aioredis.Redis.from_url(server.url)

        async def redis_footprint() -> int:
            return len(await raw.keys(prefix + "*"))

        yield Backend("redis", open_redis(), redis_footprint, open_redis)
        await raw.aclose()
    else:
        path = tmp_path / "sessions.db"

        def open_sqlite() -> SessionStore:
            store = SQLiteStore(path, touch_interval=0)
            opened.append(store)
            return store

        first = open_sqlite()

        async def sqlite_footprint() -> int:
            with contextlib.closing(sqlite3.connect(path)) as connection:
                query = "SELECT (SELECT count(*) FROM sessions) + (SELECT count(*) FROM data)"
                return int(connection.execute(query).fetchone()[0])

        yield Backend("sqlite", first, sqlite_footprint, open_sqlite)
    for store in opened:
        await store.aclose()
