"""fastmcp 4.2 behind the middleware: a tool reads our session, and a per-session counter survives requests.

fastmcp's own ``ctx.set_state`` is keyed by the transport session, which is new
on every 2026-07-28 request, so a counter built on it stays at 1; the same
counter in ``session.data`` counts. The SDK and fastmcp clients against examples/fastmcp_app.py's server
(sessionless, count, state, progress, delete and refused after it) are cells of tests/e2e/test_interop.py; the
2025 era's counting is the session carried across eras below, its initialize and echo the quickstart's
(tests/e2e/test_wire_modern.py: the same rewrite whatever the server).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastmcp import Context, FastMCP
from fastmcp.server.dependencies import get_http_request

from _mcp import (
    MCP_PATH,
    SERVER_INFO_KEY,
    SESSION_KEY,
    SESSIONS_EXTENSION,
    LegacyClient,
    ModernClient,
    jwt_claims,
    session_meta,
)
from conftest import SECRET, serve
from mcp_sessions import MCPSessionMiddleware, get_session
from mcp_sessions._session import SCOPE_KEY

FASTMCP_UI_EXTENSION = "io.modelcontextprotocol/ui"


def build_fastmcp() -> FastMCP:
    mcp = FastMCP("fastmcp-sessions")

    @mcp.tool
    async def bump(ctx: Context) -> dict[str, Any]:
        """Count per data-layer session, and per fastmcp state, side by side."""
        session = get_session()
        request = get_http_request()
        ours = None if session is None else await session.data.incr("bumps")
        fastmcp_state = (await ctx.get_state("bumps") or 0) + 1
        await ctx.set_state("bumps", fastmcp_state)
        return {
            "sid": None if session is None else session.id,
            "scope_is_contextvar": request.scope.get(SCOPE_KEY) is session,
            "accessor_agrees": get_session(request) is session,
            "ours": ours,
            "fastmcp_state": fastmcp_state,
        }

    return mcp


def wrapped(**http_app_options: Any) -> MCPSessionMiddleware:
    return MCPSessionMiddleware(build_fastmcp().http_app(path=MCP_PATH, **http_app_options), secret=SECRET)


@pytest.fixture(scope="module", params=["default", "stateless-json"])
def base_url(request: pytest.FixtureRequest) -> Iterator[str]:
    options = {"stateless_http": True, "json_response": True} if request.param == "stateless-json" else {}
    with serve(wrapped(**options)) as url:
        yield url


def bumped(message: dict[str, Any]) -> dict[str, Any]:
    result = message["result"]
    assert result["isError"] is False, message
    structured: dict[str, Any] = result["structuredContent"]
    return structured


def test_discover_keeps_fastmcps_extensions_and_adds_sessions(base_url: str, http: httpx.Client) -> None:
    response, message = ModernClient(http, base_url).request("server/discover")

    assert response.status_code == 200
    capabilities = message["result"]["capabilities"]
    assert capabilities["sessions"] == {}
    assert capabilities["extensions"] == {FASTMCP_UI_EXTENSION: {}, SESSIONS_EXTENSION: {}}
    assert capabilities["tools"] == {"listChanged": False}
    assert message["result"]["_meta"][SERVER_INFO_KEY]["name"] == "fastmcp-sessions"


def test_modern_requests_count_per_session_where_fastmcp_state_cannot(base_url: str, http: httpx.Client) -> None:
    """A session counts where fastmcp's state cannot, and carries across eras: a 2025 client counts on in it."""
    client, legacy = ModernClient(http, base_url), LegacyClient(http, base_url)
    legacy.initialize()
    session, other = client.create_session(), client.create_session()
    sid = jwt_claims(session["sessionId"])["sid"]

    results = [client.call_tool("bump", session=session_meta(session))[1] for _ in range(3)]
    other_result = client.call_tool("bump", session=session_meta(other))[1]
    across = [c.call_tool("bump", session=session_meta(session))[1] for c in (legacy, client)]

    assert [bumped(m) for m in results] == [
        {"sid": sid, "scope_is_contextvar": True, "accessor_agrees": True, "ours": n, "fastmcp_state": 1}
        for n in (1, 2, 3)
    ]
    assert bumped(other_result)["ours"] == 1
    meta = results[-1]["result"]["_meta"]
    assert meta[SERVER_INFO_KEY]["name"] == "fastmcp-sessions"
    assert meta[SESSION_KEY] == {"sessionId": session["sessionId"], "expiresAt": session["expiresAt"]}
    assert [bumped(m)["ours"] for m in across] == [4, 5]


def test_sessionless_raw_requests_still_work(base_url: str, http: httpx.Client) -> None:
    response, message = ModernClient(http, base_url).call_tool("bump")

    assert response.status_code == 200
    assert bumped(message) == {
        "sid": None,
        "scope_is_contextvar": True,
        "accessor_agrees": True,
        "ours": None,
        "fastmcp_state": 1,
    }
    assert SESSION_KEY not in message["result"]["_meta"]
