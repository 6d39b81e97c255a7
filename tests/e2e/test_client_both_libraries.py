"""One adapter, two HTTP libraries: httpx and httpx2 behave the same through the session transport.

A hand-written JSON-RPC client on each library talks to the real quickstart,
called in process through each library's ``ASGITransport``, in JSON and in SSE
response mode; the SSE answer is read as a stream, so the relayed body is the
library's own stream type. Both re-encode a stamped body as the server reads it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import httpx
import httpx2
import pytest
from examples.quickstart import build_app

from _lifespan import running
from _mcp import LOCAL, MCP_PATH, SESSION_KEY, aiter_messages, modern_headers, modern_request
from conftest import SECRET
from mcp_sessions.client import HttpxSessionTransport, SessionTransport

pytestmark = pytest.mark.anyio

LIBRARIES = {"httpx": (httpx, HttpxSessionTransport), "httpx2": (httpx2, SessionTransport)}
URL = LOCAL + MCP_PATH


async def call(http: Any, library: ModuleType, tool: str, **arguments: Any) -> tuple[list[Any], Any]:
    """Call a tool, reading the answer as a stream; every message received, and the body's stream object."""
    body = modern_request("tools/call", {"name": tool, "arguments": arguments}, id=tool, meta={"progressToken": tool})
    async with http.stream("POST", URL, json=body, headers=modern_headers(body)) as response:
        assert response.status_code == 200
        if response.headers["content-type"].startswith("text/event-stream"):
            messages = [m async for m in aiter_messages(response.aiter_lines())]
        else:
            messages = [library.Response(200, content=await response.aread()).json()]
        return messages, response.stream


@pytest.mark.parametrize("mode", ["json", "sse"])
@pytest.mark.parametrize("name", list(LIBRARIES))
async def test_each_library_holds_a_session(name: str, mode: str) -> None:
    library, transport_type = LIBRARIES[name]
    app = build_app(json_response=mode == "json", environ={"MCP_SESSIONS_SECRET": SECRET})
    shim = transport_type(library.ASGITransport(app))
    async with running(app), library.AsyncClient(transport=shim) as http:
        counts = [(await call(http, library, "count"))[0][-1] for _ in range(2)]
        await call(http, library, "set_mode", mode=name)
        messages, stream = await call(http, library, "countdown", n=2)
        mode_seen = (await call(http, library, "get_mode"))[0][-1]

    assert [c["result"]["structuredContent"]["result"] for c in counts] == [1, 2]
    assert mode_seen["result"]["structuredContent"]["result"] == name
    assert mode_seen["result"]["_meta"][SESSION_KEY]["state"] == shim.session.state
    assert isinstance(stream, library.AsyncByteStream)
    if mode == "sse":
        assert [m["method"] for m in messages[:-1]] == ["notifications/progress"] * 2
    assert messages[-1]["result"]["structuredContent"]["result"] == "done"


# -- the shim re-encodes a stamped body with the server's encoder: what the middleware reads, the shim sends. A lone
# surrogate is legal in JSON text as an escape (``"\\ud800"``); the middleware answers such a request, so the shim must
# carry it too (what is tested is the bytes, not the socket).

LONE_SURROGATE = "\\ud800"  # the six characters of the JSON escape, as a client writes them


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


@pytest.mark.parametrize("library", list(LIBRARIES))
async def test_a_stamped_lone_surrogate_reaches_the_server(app: Any, library: str) -> None:
    module, transport_type = LIBRARIES[library]
    shim = transport_type(module.ASGITransport(app))
    content, headers = with_lone_surrogate("count")
    async with module.AsyncClient(transport=shim) as client:
        first = await client.post(URL, content=content, headers=headers)
        second = await client.post(URL, content=content, headers=headers)

    assert (first.status_code, second.status_code) == (200, 200)
    assert [r.json()["result"]["structuredContent"]["result"] for r in (first, second)] == [1, 2]
    assert shim.session.token is not None
