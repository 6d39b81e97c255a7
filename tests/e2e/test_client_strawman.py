"""The client shim speaking the strawman (``profile="strawman"``): the real ``mcp`` SDK client, unchanged, in process.

It behaves as the working group's reference client: ``session/create``, the
cookie from ``_meta["mcp/session"]`` of every result, ``{"id"}`` sent back,
and a ``null`` cookie (revocation) drops the session.
"""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from examples.quickstart import build_app
from mcp import Client as SDKClient
from mcp.client.streamable_http import streamable_http_client

from _lifespan import running
from _mcp import LOCAL, MCP_PATH
from conftest import SECRET
from mcp_sessions.client import SessionTransport

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_PROFILES": "draft,strawman"}


@pytest.fixture(params=["json", "sse"])
def app(request: pytest.FixtureRequest) -> Any:
    return build_app(json_response=request.param == "json", stateless=True, environ=ENVIRON)


class Recording(httpx2.AsyncBaseTransport):
    """Records the bodies of the POSTs the shim sends to ``app``."""

    def __init__(self, app: Any) -> None:
        self.inner = httpx2.ASGITransport(app)
        self.bodies: list[bytes] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST":
            self.bodies.append(await request.aread())
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def count(client: Any) -> int:
    result = await client.call_tool("count", {})
    value: int = (result.structured_content or {})["result"]
    return value


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_sdk_client_runs_a_strawman_session(app: Any, mode: str) -> None:
    recording, url = Recording(app), LOCAL + MCP_PATH
    shim = SessionTransport(recording, profile="strawman")
    async with (
        running(app),
        httpx2.AsyncClient(transport=shim) as http,
        SDKClient(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        assert [await count(client) for _ in range(3)] == [1, 2, 3]
        token = shim.session.token
        assert token is not None and shim.session.expires_at is not None
        assert any(b'"method":"session/create"' in body for body in recording.bodies)
        assert not any(b"sessions/create" in body for body in recording.bodies)
        assert any(b'"mcp/session":{"id":"' + token.encode() + b'"}' in body for body in recording.bodies)

        # Revoked elsewhere: the next result carries a null cookie, and the shim drops the session.
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app)) as other:
            body = {"jsonrpc": "2.0", "id": 9, "method": "session/delete", "params": {"id": token}}
            headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
            assert b'"deleted":true' in (await other.post(url, json=body, headers=headers)).content
        await client.call_tool("whoami", {})
        assert shim.session.token is None

        # The next conversation request opens a new session.
        assert await count(client) == 1
        assert shim.session.token not in (None, token)
        assert await shim.delete() is True
        assert shim.session.token is None


def test_the_shim_refuses_a_wire_it_does_not_speak() -> None:
    with pytest.raises(ValueError, match="draft, strawman"):
        SessionTransport(profile="sep1364-alt1")
