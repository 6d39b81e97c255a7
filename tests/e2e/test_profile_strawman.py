"""The strawman wire, from the working group's api-shapes file, through a real server in both modes and eras."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from examples.quickstart import build_app
from starlette.types import Scope

from _mcp import (
    INVALID_PARAMS,
    RFC3339_UTC,
    SESSION_KEY,
    LegacyClient,
    ModernClient,
    answer,
    modern_headers,
    modern_request,
    tool_text,
)
from conftest import SECRET, serve
from e2e._wires import STRAWMAN_REQUIRED, STRAWMAN_REQUIRED_MESSAGE, StrawmanClient

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_PROFILES": "strawman"}
FEATURES = ["create", "resume", "list", "delete"]


def user_of(scope: Scope) -> str | None:
    """The tests' principal: an ``X-User`` header (a stand-in for real authentication)."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    for name, value in headers:
        if name == b"x-user":
            return value.decode()
    return None


@pytest.fixture(scope="module", params=["json", "sse"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    app = build_app(json_response=request.param == "json", stateless=True, environ=ENVIRON, principal=user_of)
    with serve(app) as base:
        yield base


def call(http: httpx.Client, url: str, method: str, params: dict[str, Any] | None = None, **headers: str) -> Any:
    body = modern_request(method, params)
    return answer(http.post(url + "/mcp", json=body, headers=modern_headers(body, **headers)))


def test_create_as_in_the_shape_file(url: str, http: httpx.Client) -> None:
    hints = {"label": "my-agent-workspace", "data": {"title": "Code Review Session"}}
    result = call(http, url, "session/create", {"hints": hints})["result"]
    assert RFC3339_UTC.fullmatch(result["expiry"])
    assert result["data"] == {"title": "Code Review Session", "label": "my-agent-workspace"}
    assert result["_meta"]["mcp/session"] == {"id": result["id"], "expiry": result["expiry"]}
    data_label = call(http, url, "session/create", {"hints": {"label": "x", "data": {"label": "kept"}}})["result"]
    assert data_label["data"] == {"label": "kept"}
    assert "data" not in call(http, url, "session/create")["result"]


def test_cookie_echo_as_in_the_shape_file(url: str, http: httpx.Client) -> None:
    created = call(http, url, "session/create")["result"]
    body = modern_request("tools/call", {"name": "count", "arguments": {}}, meta={"mcp/session": {"id": created["id"]}})
    message = answer(http.post(url + "/mcp", json=body, headers=modern_headers(body)))
    assert tool_text(message) == "1"
    assert message["result"]["_meta"]["mcp/session"] == {"id": created["id"], "expiry": created["expiry"]}
    assert SESSION_KEY not in message["result"]["_meta"]  # the draft is not enabled


def test_session_required_as_in_the_shape_file(url: str, http: httpx.Client) -> None:
    message = StrawmanClient(http, url).call_tool("count")
    assert message["error"] == {"code": STRAWMAN_REQUIRED, "message": STRAWMAN_REQUIRED_MESSAGE}


def test_delete_as_in_the_shape_file(url: str, http: httpx.Client) -> None:
    created = call(http, url, "session/create")["result"]
    deleted = call(http, url, "session/delete", {"id": created["id"]})["result"]
    assert deleted == {"deleted": True, "_meta": {"mcp/session": None}, "resultType": "complete"}
    assert call(http, url, "session/delete", {"id": created["id"]})["result"]["deleted"] is False
    resumed = call(http, url, "session/resume", {"id": created["id"]})
    assert resumed["error"]["code"] == -32043
    assert resumed["error"]["data"] == {"id": created["id"][:256]}


def test_list_shows_only_the_callers_own_sessions(url: str, http: httpx.Client) -> None:
    mine = [
        call(http, url, "session/create", {"hints": {"label": f"a{i}"}}, X_User="alice")["result"] for i in range(2)
    ]
    theirs = call(http, url, "session/create", {"hints": {"label": "b"}}, X_User="bob")["result"]
    listed = call(http, url, "session/list", X_User="alice")["result"]
    assert {s["id"] for s in listed["sessions"]} >= {s["id"] for s in mine}
    assert theirs["id"] not in {s["id"] for s in listed["sessions"]}
    entry = next(s for s in listed["sessions"] if s["id"] == mine[0]["id"])
    assert entry == {"id": mine[0]["id"], "expiry": mine[0]["expiry"], "data": {"label": "a0"}}
    assert "nextCursor" not in listed
    assert call(http, url, "session/list")["result"]["sessions"] == []  # anonymous: no principal, no list
    call(http, url, "session/delete", {"id": mine[0]["id"]}, X_User="alice")
    after = call(http, url, "session/list", {"cursor": None}, X_User="alice")["result"]
    assert mine[0]["id"] not in {s["id"] for s in after["sessions"]}


def test_bad_params_are_invalid_params(url: str, http: httpx.Client) -> None:
    assert call(http, url, "session/create", {"hints": "x"})["error"]["code"] == INVALID_PARAMS
    assert call(http, url, "session/create", {"hints": {"data": {"n": 1}}})["error"]["code"] == INVALID_PARAMS
    assert call(http, url, "session/resume", {"id": 5})["error"]["code"] == INVALID_PARAMS
    assert call(http, url, "session/list", {"cursor": 5})["error"]["code"] == INVALID_PARAMS


def test_discover_and_initialize_advertise_the_capability(url: str, http: httpx.Client) -> None:
    _, discover = ModernClient(http, url).request("server/discover")
    assert discover["result"]["capabilities"]["experimental"]["session"] == {"version": 1, "features": FEATURES}
    legacy = LegacyClient(http, url)
    initialized = legacy.initialize()
    assert initialized["capabilities"]["experimental"]["session"] == {"version": 1, "features": FEATURES}
    created = legacy.request("session/create")[1]["result"]
    _, message = legacy.call_tool("count", meta={"mcp/session": {"id": created["id"]}})
    assert tool_text(message) == "1"
    assert message["result"]["_meta"]["mcp/session"]["id"] == created["id"]
