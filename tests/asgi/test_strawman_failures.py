"""The strawman's session methods answer a store failure and a malformed parameter as documented, never 500.

A full, unreachable or read-only store gets the retryable -32010 (HTTP 503, with
``Retry-After``); a ``cursor`` the server never returned gets
-32602. Property: whatever the cursor text, ``session/list`` answers a result or
-32602.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.types import Scope

from _mcp import AnswersProbes
from asgi._fuzz import FUZZ
from conftest import SECRET
from mcp_sessions import MCPSessionMiddleware
from mcp_sessions.stores import MemoryStore, SessionStoreUnavailable

from ._direct import Downstream, Receiver, Sender, dumps, http_scope

pytestmark = pytest.mark.anyio


def as_alice(scope: Scope) -> str:
    return "alice"  # an authenticated principal: creates are recorded for session/list


class UnreachableStore(MemoryStore):
    """A store whose backend is gone, as Redis down or a read-only SQLite file leave it."""

    async def record(self, *args: Any, **kwargs: Any) -> None:
        raise SessionStoreUnavailable("the backend is gone")

    async def list_sessions(self, *args: Any, **kwargs: Any) -> Any:
        raise SessionStoreUnavailable("the backend is gone")


def middleware(store: MemoryStore) -> MCPSessionMiddleware:
    return MCPSessionMiddleware(
        AnswersProbes(Downstream()), secret=SECRET, store=store, profiles="strawman", principal=as_alice
    )


async def post(mw: MCPSessionMiddleware, method: str, params: dict[str, Any] | None = None) -> Sender:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        body["params"] = params
    sender = Sender()
    await mw(http_scope(), Receiver(dumps(body)), sender)
    return sender


@pytest.mark.parametrize(
    "store",
    [MemoryStore(max_sessions=1), UnreachableStore()],
    ids=["full", "unreachable"],
)
async def test_create_answers_a_store_failure_with_the_retryable_error(store: MemoryStore) -> None:
    mw = middleware(store)
    first = await post(mw, "session/create")
    if isinstance(store, UnreachableStore):
        created = first
    else:  # the one entry the store holds is taken by the first session's record
        assert first.status == 200 and "result" in first.json()
        created = await post(mw, "session/create")
    assert created.status == 503  # retryable, in every era
    assert created.json()["error"]["code"] == -32010
    assert created.header(b"retry-after") == b"1"


async def test_list_answers_a_store_failure_with_the_retryable_error() -> None:
    listed = await post(middleware(UnreachableStore()), "session/list")
    assert listed.json()["error"]["code"] == -32010


@pytest.mark.parametrize("cursor", ["_w", "x", "é", "a.b.c", "////"])
async def test_a_malformed_cursor_is_invalid_params(cursor: str) -> None:
    listed = await post(middleware(MemoryStore()), "session/list", {"cursor": cursor})
    assert listed.status == 200
    assert listed.json()["error"]["code"] == -32602


@FUZZ
@given(cursor=st.text(max_size=12))
def test_any_cursor_gets_a_result_or_invalid_params(cursor: str) -> None:
    async def list_once() -> dict[str, Any]:
        sender = await post(middleware(MemoryStore()), "session/list", {"cursor": cursor})
        assert sender.status == 200
        answer: dict[str, Any] = json.loads(sender.body)
        return answer

    answer = anyio.run(list_once)
    assert "result" in answer or answer["error"]["code"] == -32602
