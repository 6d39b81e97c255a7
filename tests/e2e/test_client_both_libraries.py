"""One adapter, two HTTP libraries: httpx and httpx2 behave the same through the session transport.

A hand-written JSON-RPC client on each library talks to the real quickstart,
called in process through each library's ``ASGITransport``, in JSON and in SSE
response mode; the SSE answer is read as a stream, so the relayed body is the
library's own stream type.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import httpx
import httpx2
import pytest
from examples.quickstart import build_app

from _lifespan import running
from _mcp import MCP_PATH, SESSION_KEY, aiter_messages, modern_headers, modern_request
from conftest import SECRET
from mcp_sessions.client import HttpxSessionTransport, SessionTransport

pytestmark = pytest.mark.anyio

LIBRARIES = {"httpx": (httpx, HttpxSessionTransport), "httpx2": (httpx2, SessionTransport)}


URL = "http://127.0.0.1:8000" + MCP_PATH


async def call(http: Any, library: ModuleType, url: str, tool: str, **arguments: Any) -> tuple[list[Any], Any]:
    """Call a tool, reading the answer as a stream; every message received, and the body's stream object."""
    body = modern_request("tools/call", {"name": tool, "arguments": arguments}, id=tool, meta={"progressToken": tool})
    async with http.stream("POST", url, json=body, headers=modern_headers(body)) as response:
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
    url = URL
    async with running(app), library.AsyncClient(transport=shim) as http:
        counts = [(await call(http, library, url, "count"))[0][-1] for _ in range(2)]
        await call(http, library, url, "set_mode", mode=name)
        messages, stream = await call(http, library, url, "countdown", n=2)
        mode_seen = (await call(http, library, url, "get_mode"))[0][-1]

    assert [c["result"]["structuredContent"]["result"] for c in counts] == [1, 2]
    assert mode_seen["result"]["structuredContent"]["result"] == name
    assert mode_seen["result"]["_meta"][SESSION_KEY]["state"] == shim.session.state
    assert isinstance(stream, library.AsyncByteStream)
    if mode == "sse":
        assert [m["method"] for m in messages[:-1]] == ["notifications/progress"] * 2
    assert messages[-1]["result"]["structuredContent"]["result"] == "done"
