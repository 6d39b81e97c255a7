"""The strawman's ``session/list`` answers a ``cursor`` the server never returned with -32602, never 500.

Property: whatever the cursor text, ``session/list`` answers a result or -32602. How its session methods
answer a full, unreachable, read-only or locked store (the retryable -32010, HTTP 503, ``Retry-After``) is
tested with every wire's in test_store_failures.py.
"""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.types import Scope

from _mcp import AnswersProbes
from asgi._fuzz import FUZZ
from conftest import SECRET
from mcp_sessions import MCPSessionMiddleware

from ._direct import Downstream, Sender, call, dumps

pytestmark = pytest.mark.anyio


def as_alice(scope: Scope) -> str:
    return "alice"  # an authenticated principal: its sessions are listed


async def list_sessions(cursor: str) -> Sender:
    """``session/list`` with ``cursor``, asked of a fresh middleware on the strawman's wire."""
    mw = MCPSessionMiddleware(AnswersProbes(Downstream()), secret=SECRET, profiles="strawman", principal=as_alice)
    return await call(mw, dumps({"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {"cursor": cursor}}))


@pytest.mark.parametrize("cursor", ["_w", "x", "é", "a.b.c", "////"])
async def test_a_malformed_cursor_is_invalid_params(cursor: str) -> None:
    listed = await list_sessions(cursor)
    assert listed.status == 200
    assert listed.json()["error"]["code"] == -32602


@FUZZ
@given(cursor=st.text(max_size=12))
def test_any_cursor_gets_a_result_or_invalid_params(cursor: str) -> None:
    listed = anyio.run(list_sessions, cursor)
    assert listed.status == 200
    answer = listed.json()
    assert "result" in answer or answer["error"]["code"] == -32602
