"""SEP-1364's two alternatives, from the SEP's own sequence diagrams and table, through a real server.

Alternative 1: ``initialize`` once, ``session/create`` with the client's
capabilities, a top-level ``sessionId`` on requests and responses,
``session/delete``. Alternative 2: ``initialize`` carries the ``sessionId``
(the SEP's table), ``terminate`` ends it. The server never sees ``sessionId``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from examples.quickstart import build_app

from _mcp import INVALID_REQUEST, LEGACY, MCP_PATH, SESSION_NOT_FOUND, RecordingApp, answer, legacy_request, tool_text
from conftest import SECRET, serve
from e2e._wires import Sep1364Client

BASE = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def served(profile: str, *, mode: str, stateless: bool, **options: Any) -> Iterator[tuple[str, RecordingApp]]:
    environ = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_PROFILES": profile}
    app = build_app(json_response=mode == "json", stateless=stateless, environ=environ, **options)
    recording = app.app = RecordingApp(app.app)
    with serve(app) as url:
        yield url, recording


@pytest.fixture(scope="module", params=["json", "sse"])
def alt1(request: pytest.FixtureRequest) -> Iterator[tuple[str, RecordingApp]]:
    yield from served("sep1364-alt1", mode=request.param, stateless=True)


@pytest.fixture(scope="module", params=["json-stateless", "sse-stateless", "json-stateful", "sse-stateful"])
def alt2(request: pytest.FixtureRequest) -> Iterator[tuple[str, RecordingApp]]:
    mode, state = request.param.split("-")
    yield from served("sep1364-alt2", mode=mode, stateless=state == "stateless")


def never_saw_session_ids(recording: RecordingApp) -> None:
    for body in recording.seen:
        for message in body if isinstance(body, list) else [body]:
            assert "sessionId" not in message, message


def test_alt1_sequence_diagram(alt1: tuple[str, RecordingApp], http: httpx.Client) -> None:
    url, recording = alt1
    client = Sep1364Client(http, url, era=LEGACY)
    result = client.handshake()  # InitializeRequest → InitializeResult { capabilities: { sessions: { required } } }
    assert result["capabilities"]["sessions"] == {"required": False}
    created = client.request("session/create", {"capabilities": {}}, session=None)  # { sessionId: null, params }
    session_id = created["result"]["sessionId"]
    assert created == {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": session_id}, "sessionId": session_id}
    client.session_id = session_id
    listed = client.request("tools/list")  # ListToolsRequest { sessionId } → { sessionId, result }
    assert listed["sessionId"] == session_id and "tools" in listed["result"]
    assert client.request("session/delete", {"sessionId": session_id}) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert client.request("tools/list")["error"]["code"] == SESSION_NOT_FOUND
    never_saw_session_ids(recording)


def test_alt1_notification_and_bad_member(alt1: tuple[str, RecordingApp], http: httpx.Client) -> None:
    url, recording = alt1
    client = Sep1364Client(http, url, era=LEGACY)
    client.handshake()
    client.session_id = client.request("session/create", {"capabilities": {}}, session=None)["result"]["sessionId"]
    note = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed", "sessionId": client.session_id}
    assert client.post(note).status_code == 202
    bad = answer(client.post({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "sessionId": 42}))
    assert bad["error"]["code"] == INVALID_REQUEST
    never_saw_session_ids(recording)


def test_alt1_capability_says_required_when_the_policy_does(http: httpx.Client) -> None:
    for url, _ in served("sep1364-alt1", mode="json", stateless=True, require_session=True):
        client = Sep1364Client(http, url, era=LEGACY)
        assert client.handshake()["capabilities"]["sessions"] == {"required": True}
        assert client.request("tools/list")["error"]["code"] == -32044


def test_alt2_table(alt2: tuple[str, RecordingApp], http: httpx.Client, request: pytest.FixtureRequest) -> None:
    url, recording = alt2
    ordinary = Sep1364Client(http, url, era=LEGACY)
    assert "sessionId" not in ordinary.initialize(session=...)  # no member: an ordinary initialize

    client = Sep1364Client(http, url, era=LEGACY)
    opened = client.initialize(session=None)  # null → new sessionId
    session_id = opened["sessionId"]
    assert opened["result"]["protocolVersion"] == LEGACY
    assert tool_text(client.call_tool("count")) == "1"
    assert client.initialize(session=session_id)["sessionId"] == session_id  # valid → same sessionId
    assert tool_text(client.call_tool("count")) == "2"
    forged = session_id[:-4] + ("AAAA" if not session_id.endswith("AAAA") else "BBBB")
    assert client.initialize(session=forged)["error"]["code"] == SESSION_NOT_FOUND  # invalid → error
    # A call in a session that is gone (forged, expired): a stateful server has no transport session for it and
    # answers 404, the 2025 wire's "initialize again"; the middleware answers on a stateless one.
    body = {**legacy_request("tools/call", {"name": "count", "arguments": {}}), "sessionId": forged}
    gone = http.post(
        url + MCP_PATH, json=body, headers={**BASE, "MCP-Protocol-Version": LEGACY, "Mcp-Session-Id": forged}
    )
    if request.node.callspec.params["alt2"].endswith("stateful"):
        assert gone.status_code == 404, gone.text
    else:
        assert answer(gone)["error"]["code"] == SESSION_NOT_FOUND
    assert client.request("terminate", {"sessionId": session_id}) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert client.call_tool("count")["error"]["code"] == SESSION_NOT_FOUND
    never_saw_session_ids(recording)


def test_alt2_on_a_stateful_server_keeps_the_transport_session_inside(
    alt2: tuple[str, RecordingApp], http: httpx.Client
) -> None:
    url, _ = alt2
    params = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params, "sessionId": None}
    response = http.post(url + "/mcp", json=body, headers=BASE)
    session_id = answer(response)["sessionId"]
    header = response.headers.get("mcp-session-id")
    assert header in (None, session_id)  # the client never sees the server's transport session id
    assert json.dumps(answer(response)).count(session_id) == 1


def test_alt2_initialize_on_the_2026_wire_opens_nothing_and_spends_no_create(http: httpx.Client) -> None:
    """The 2026-07-28 server refuses ``initialize`` (-32601): no session for it, and no create-limit slot."""
    for url, recording in served("sep1364-alt2", mode="json", stateless=True, create_limit=(3, 3600)):
        modern = Sep1364Client(http, url)
        for _ in range(5):  # more than the create limit allows
            refused = modern.request("initialize", session=None)  # a top-level null sessionId: "open one"
            assert refused["error"]["code"] == -32601  # the server's own answer
            assert "sessionId" not in refused
        never_saw_session_ids(recording)
        opened = Sep1364Client(http, url, era=LEGACY).initialize(session=None)  # the budget is intact
        assert opened["sessionId"]
