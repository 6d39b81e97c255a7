"""Two uvicorn processes serving examples/basket.py, sharing one key and one real redis-server.

A basket created on one replica works on the other (its items live in Redis);
a checkout on one is refused at once on the other; A answers JSON, B SSE.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client

from _mcp import MCP_PATH
from _redis import RedisServer
from conftest import SECRET
from e2e._replicas import json_and_sse


@pytest.fixture(scope="module")
def pair(redis: RedisServer) -> Iterator[tuple[str, str]]:
    common = {
        "MCP_SESSIONS_SECRET": SECRET,
        "MCP_SESSIONS_REDIS_URL": redis.url,
        "MCP_SESSIONS_REDIS_PREFIX": f"handles-{uuid.uuid4().hex[:6]}:",
    }
    with json_and_sse(common, app="examples.basket:app") as started:
        yield started[0].url + MCP_PATH, started[1].url + MCP_PATH


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
            assert is_error
            assert "has ended" in message
        _, other = await text(b, "create_basket")
        assert await text(a, "checkout", basket=other) == (False, "")
        is_error, message = await text(b, "checkout", basket=other)
        assert is_error
        assert "has ended" in message
