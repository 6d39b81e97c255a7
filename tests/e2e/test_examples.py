"""The examples and the demo work as their docs say: real uvicorn, real HTTP, real MCP servers.

The SDK and fastmcp clients against examples/starlette_app.py, fastapi_app.py and fastmcp_app.py's server
(wrapped as its build_app wraps it), both eras, are cells of tests/e2e/test_interop.py; the ordinary route
reading the session, and a missing secret failing where the config is built, are the docs' snippets of these
apps (docs/application-code.md: "this app, complete"; tests/e2e/test_docs.py).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import httpx
import pytest
from examples import demo, starlette_app
from examples.quickstart import build_app as build_quickstart
from examples.quickstart import build_server as build_quickstart_server

from _mcp import MODERN, SESSION_KEY, answer, era_session, modern_headers, modern_request, session_meta
from conftest import SECRET, in_process, serve

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}
# A whole compact JWS: three non-empty base64url segments. A shortened token ("eyJhbGciOi...S04l8") is not one.
WHOLE_TOKEN = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def call_tool(client: httpx.Client, name: str, token: str | None = None) -> Any:
    """A 2026-07-28 tools/call to /mcp, naming the session ``token`` if given: the result, or the error."""
    session = None if token is None else session_meta(token)
    body = modern_request("tools/call", {"name": name, "arguments": {}}, session=session)
    headers = modern_headers(body) if token is None else modern_headers(body, Mcp_Session_Id=token)
    response = client.post("/mcp", json=body, headers=headers)
    assert response.status_code == 200, response.text
    message = answer(response)
    if "error" in message:
        return message["error"]
    result = message["result"]
    assert not result.get("isError"), result
    echo = result.get("_meta", {}).get(SESSION_KEY)
    assert (echo and echo["sessionId"]) == token  # echoed when the request named a session, absent otherwise
    return result["structuredContent"]["result"]


# -- the demo -------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [[], ["--json"]], ids=["sse", "json"])
def test_demo_runs_the_whole_conversation(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(argv) == 0
    out = capsys.readouterr().out
    assert "throwaway MCP_SESSIONS_SECRET" in out
    assert "capabilities.sessions = {}" in out
    assert "count returned 1" in out
    assert "count returned 2" in out
    assert "get_mode returned 'focus'" in out
    assert '"code": -32044' in out
    assert '"code": -32043' in out
    assert out.rstrip().endswith("All 11 steps gave the expected answers.")
    assert not WHOLE_TOKEN.search(out), "the demo printed a whole session token"
    if argv:
        assert "JSON response mode" in out
        assert "notifications/progress" not in out
    else:
        assert re.search(r"\+\d\.\d\ds  event notifications/progress: 3/3 0 to go", out)
        assert "<- HTTP 200 text/event-stream" in out


def test_demo_against_a_running_server(capsys: pytest.CaptureFixture[str]) -> None:
    with serve(build_quickstart(environ=ENVIRON)) as base:
        assert demo.main(["--url", f"{base}/mcp"]) == 0
    out = capsys.readouterr().out
    assert "already running" in out
    assert "All 11 steps" in out


def test_demo_fails_clearly_without_the_middleware(capsys: pytest.CaptureFixture[str]) -> None:
    bare = build_quickstart_server().streamable_http_app(streamable_http_path="/mcp")
    with serve(bare) as base:
        assert demo.main(["--url", f"{base}/mcp"]) == 1
    captured = capsys.readouterr()
    assert "FAILED at step 1" in captured.out
    assert "does not advertise capabilities.sessions" in captured.err


def test_demo_reports_an_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    with serve(build_quickstart(environ=ENVIRON)) as base:
        pass  # the port is free again
    assert demo.main(["--url", f"{base}/mcp"]) == 2
    assert "server/discover" in capsys.readouterr().err


# -- routing --------------------------------------------------------------------------------------


def test_the_path_matches_under_a_proxy_root_path() -> None:
    """``uvicorn --root-path /api``: the path still matches as Starlette routes it, without the prefix."""
    app = starlette_app.build_app(environ={"MCP_SESSIONS_SECRET": SECRET})
    with in_process(app, root_path="/api") as client:
        assert call_tool(client, "count")["code"] == -32044  # the middleware saw it: no session, no count
        token = era_session(client, "/mcp", MODERN)
        assert call_tool(client, "count", token) == 1


def test_the_path_matches_in_a_mounted_sub_app() -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    inner = starlette_app.build_app(environ={"MCP_SESSIONS_SECRET": SECRET})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        async with inner.router.lifespan_context(inner):
            yield

    outer = Starlette(routes=[Mount("/tenant", app=inner)], lifespan=lifespan)
    with in_process(outer, base_url="http://127.0.0.1:8000/tenant") as client:
        assert call_tool(client, "count")["code"] == -32044
        token = era_session(client, "/mcp", MODERN)
        assert call_tool(client, "count", token) == 1
