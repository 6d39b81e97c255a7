"""The three stores the budget tests run a real server on, each with a way to count what it holds, and callers
that each come from a loopback address of their own (so that every hypothesis example starts with empty counts)."""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from _redis import redis_server
from mcp_sessions.stores import MemoryStore, RedisStore, SessionStore, SQLiteStore

STORES = ["memory", "sqlite", "redis"]
_addresses = itertools.count(1 << 16)  # 127.1.0.0 and up: never 127.0.0.1, where the other tests call from


@dataclass
class Backend:
    """A store's backend for servers under test, and how many records (keys, rows, entries) it holds now."""

    name: str
    open: Callable[[], SessionStore]
    """A store on this backend, for one server (its event loop); :func:`closing_store` closes it."""
    footprint: Callable[[], int]


def sqlite_records(path: Path) -> int:
    """The rows in a SQLite store's file: its sessions' and their data's."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        query = "SELECT (SELECT count(*) FROM sessions) + (SELECT count(*) FROM data)"
        return int(connection.execute(query).fetchone()[0])


@contextlib.contextmanager
def open_backend(name: str, directory: Path) -> Iterator[Backend]:
    """``name``'s backend: one ``MemoryStore``, a real SQLite file, or a real redis-server of its own."""
    if name == "memory":
        memory = MemoryStore()
        yield Backend(name, lambda: memory, lambda: len(memory))
    elif name == "sqlite":
        path = directory / "sessions.db"
        yield Backend(name, lambda: SQLiteStore(path, touch_interval=0), lambda: sqlite_records(path))
    else:
        with redis_server() as server:
            prefix = f"budget-{uuid.uuid4().hex[:8]}:"
            client = redis.Redis.from_url(server.url)

            def open_redis() -> SessionStore:
                return RedisStore(server.url, prefix=prefix, touch_interval=0, timeout=5, connect_timeout=5)

            try:
                yield Backend(name, open_redis, lambda: len(client.keys(prefix + "*")))
            finally:
                client.close()


def closing_store(app: ASGIApp, store: SessionStore) -> ASGIApp:
    """``app``, closing ``store`` when its lifespan shuts down (in the server's own event loop)."""

    async def closing(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            return await app(scope, receive, send)

        async def sending(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await store.aclose()
            await send(message)

        await app(scope, receive, sending)

    return closing


def new_address() -> str:
    """A loopback address no caller has used yet in this process."""
    number = next(_addresses)
    if number >= 1 << 24:
        pytest.fail("out of loopback addresses")
    return f"127.{number >> 16}.{(number >> 8) & 255}.{number & 255}"


def client_from(address: str) -> httpx.Client:
    """An HTTP client whose connections come from ``address`` (any 127.x.y.z is this machine's)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=10)
