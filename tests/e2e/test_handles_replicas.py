"""Two uvicorn processes serving examples/basket.py, sharing one key and one real redis-server.

A basket created on one replica works on the other (its items live in Redis);
a checkout on one is refused at once on the other; A answers JSON, B SSE.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from mcp import Client

from _redis import RedisServer, free_port, redis_server
from conftest import SECRET

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0


class Replica:
    """``python -m uvicorn examples.basket:app`` in its own process, configured by its environment."""

    def __init__(self, environ: dict[str, str]) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_SESSIONS_", "QUICKSTART_"))}
        env.update(environ)
        self.log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        command = [sys.executable, "-m", "uvicorn", "examples.basket:app", "--host", "127.0.0.1"]
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port), "--log-level", "warning"],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"replica exited at start:\n{self.log.read().decode(errors='replace')[-3000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica did not listen within {START_TIMEOUT} s")
            time.sleep(0.02)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.log.close()


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture(scope="module")
def pair(redis: RedisServer) -> Iterator[tuple[str, str]]:
    common = {
        "MCP_SESSIONS_SECRET": SECRET,
        "MCP_SESSIONS_REDIS_URL": redis.url,
        "MCP_SESSIONS_REDIS_PREFIX": f"handles-{uuid.uuid4().hex[:6]}:",
    }
    started = [Replica({**common, "QUICKSTART_JSON": "1"}), Replica(common)]
    try:
        for replica in started:
            replica.wait_ready()
        yield started[0].url, started[1].url
    finally:
        for replica in started:
            replica.stop()


async def text(client: Client, tool: str, **arguments: Any) -> tuple[bool, str]:
    result = await client.call_tool(tool, arguments)
    [content] = result.content
    assert content.type == "text"
    return result.is_error, content.text


@pytest.mark.anyio
async def test_a_basket_lives_on_both_replicas_and_a_checkout_on_one_ends_it_on_the_other(
    pair: tuple[str, str], redis: RedisServer
) -> None:
    async with Client(pair[0]) as a, Client(pair[1]) as b:
        _, basket = await text(a, "create_basket")
        counts = [await text((a, b)[i % 2], "add_item", basket=basket, item=f"i{i}") for i in range(6)]
        assert counts == [(False, str(n)) for n in range(1, 7)]
        assert redis.command("DBSIZE") != b":0\r\n"  # the items are in Redis, keyed by the stable id
        assert basket.encode() not in redis.command("KEYS", "*")
        assert await text(b, "checkout", basket=basket) == (False, "i0,i1,i2,i3,i4,i5")
        for client in (a, b):
            is_error, message = await text(client, "add_item", basket=basket, item="late")
            assert is_error and "has ended" in message
        _, other = await text(b, "create_basket")
        assert await text(a, "checkout", basket=other) == (False, "")
        is_error, message = await text(b, "checkout", basket=other)
        assert is_error and "has ended" in message
