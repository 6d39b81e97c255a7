"""The client shim re-encodes a stamped body with the server's encoder: what the middleware reads, the shim sends.

A lone surrogate is legal in JSON text as an escape (``"\\ud800"``); the
middleware answers such a request, so the shim must carry it too. The quickstart
app answers in process: what is tested is the bytes, not the socket.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
from examples.quickstart import build_app

from _lifespan import running
from _mcp import MCP_PATH, modern_headers, modern_request
from conftest import SECRET
from mcp_sessions.client import HttpxSessionTransport, SessionTransport

pytestmark = pytest.mark.anyio

LONE_SURROGATE = "\\ud800"  # the six characters of the JSON escape, as a client writes them


URL = "http://127.0.0.1:8000" + MCP_PATH


@pytest.fixture
async def app() -> AsyncIterator[Any]:
    app = build_app(json_response=True, environ={"MCP_SESSIONS_SECRET": SECRET})
    async with running(app):
        yield app


def with_lone_surrogate(tool: str) -> tuple[bytes, dict[str, str]]:
    """A tools/call whose ``_meta`` carries a lone surrogate: the body bytes and the headers."""
    body = modern_request("tools/call", {"name": tool, "arguments": {}}, meta={"note": "MARK"})
    return json.dumps(body).replace("MARK", LONE_SURROGATE).encode(), modern_headers(body)


async def test_the_middleware_alone_answers_a_lone_surrogate(app: Any) -> None:
    content, headers = with_lone_surrogate("whoami")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app)) as http:
        response = await http.post(URL, content=content, headers=headers)

    assert response.status_code == 200
    assert response.json()["result"]["structuredContent"] == {"result": "none"}


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
async def test_a_stamped_lone_surrogate_reaches_the_server(app: Any, library: str) -> None:
    client: Any
    if library == "httpx":
        shim: Any = HttpxSessionTransport(httpx.ASGITransport(app))
        client = httpx.AsyncClient(transport=shim)
    else:
        shim = SessionTransport(httpx2.ASGITransport(app))
        client = httpx2.AsyncClient(transport=shim)
    content, headers = with_lone_surrogate("count")
    async with client:
        first = await client.post(URL, content=content, headers=headers)
        second = await client.post(URL, content=content, headers=headers)

    assert (first.status_code, second.status_code) == (200, 200)
    assert [r.json()["result"]["structuredContent"]["result"] for r in (first, second)] == [1, 2]
    assert shim.session.token is not None
