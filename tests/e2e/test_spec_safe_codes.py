"""``error_codes="spec-safe"`` through the real SDK server: the draft answers no code MCP 2026-07-28
reserves for itself (-32020..-32099 beyond the ones it defines) or retired (-32002), and the project's client
still recovers from a session that is gone."""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
import pytest
from examples.quickstart import build_app
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from _mcp import MCP_PATH, answer, modern_headers, modern_request, session_meta
from _waits import WITHIN
from conftest import SECRET, in_process, serve
from mcp_sessions.client import HeldSession, SessionTransport
from mcp_sessions.profiles._base import SPEC_SAFE_NOT_FOUND, SPEC_SAFE_REQUIRED, spec_allows

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_ERROR_CODES": "spec-safe"}
HEADER_MISMATCH = -32020  # defined by MCP 2026-07-28: kept


def code(message: dict[str, Any]) -> int:
    error = message["error"]
    assert isinstance(error["message"], str), message
    assert error["message"], message
    value: int = error["code"]
    return value


def draft_errors(http: httpx.Client) -> list[int]:
    def post(body: dict[str, Any], **headers: str) -> dict[str, Any]:
        return answer(http.post(MCP_PATH, json=body, headers=modern_headers(body, **headers)))

    count = {"name": "count", "arguments": {}}
    created = post(modern_request("sessions/create"))["result"]["session"]
    return [
        code(post(modern_request("tools/call", count))),  # required
        code(post(modern_request("tools/call", count, session={"sessionId": "sess-invalid"}))),  # not found
        code(post(modern_request("sessions/delete", session={"sessionId": "sess-invalid"}))),  # not found
        code(post(modern_request("tools/call", count, session=session_meta(created)), Mcp_Session_Id="other")),
    ]


def test_the_draft_answers_no_code_the_spec_reserves_or_retired() -> None:
    with in_process(build_app(json_response=True, environ=ENVIRON)) as http:
        every = draft_errors(http)

    assert every == [SPEC_SAFE_REQUIRED, SPEC_SAFE_NOT_FOUND, SPEC_SAFE_NOT_FOUND, HEADER_MISMATCH]
    assert all(spec_allows(c) for c in every), every
    assert not any(-32099 <= c <= -32020 and c != HEADER_MISMATCH for c in every)


async def count(client: Client) -> Any:
    return (await client.call_tool("count", {})).structured_content["result"]


async def delete_behind_its_back(url: str, token: str) -> None:
    other = SessionTransport(session=HeldSession(token))
    assert await other.delete(url) is True
    await other.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("recreate", [True, False])
async def test_the_client_shim_understands_the_spec_safe_not_found(recreate: bool) -> None:
    """Our client transport, over a real connection (what it is made for)."""
    with serve(build_app(json_response=True, environ=ENVIRON)) as base:
        await shim_understands_the_spec_safe_not_found(base + MCP_PATH, recreate)


async def shim_understands_the_spec_safe_not_found(url: str, recreate: bool) -> None:
    shim = SessionTransport(recreate=recreate)
    async with (
        httpx2.AsyncClient(transport=shim, timeout=WITHIN) as http,
        Client(streamable_http_client(url, http_client=http)) as c,
    ):
        assert await count(c) == 1
        old = shim.session.token
        assert old is not None
        await delete_behind_its_back(url, old)
        if recreate:  # a new session, the call retried in it: the counter starts again
            assert await count(c) == 1
        else:  # the caller is told, and the gone session is dropped
            with pytest.raises(MCPError) as raised:
                await count(c)
            assert raised.value.code == SPEC_SAFE_NOT_FOUND
            assert shim.session.token is None
            assert await count(c) == 1  # the next call opens a new one
        assert shim.session.token not in (None, old)
