"""All four wires at once: none disturbs another, and a sessionless client sees what it saw before.

Responses to a sessionless client are compared byte for byte with the same
quickstart serving only the draft (the default).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from examples.quickstart import build_app

from _mcp import (
    SESSION_KEY,
    LegacyClient,
    ModernClient,
    RecordingApp,
    legacy_request,
    modern_headers,
    modern_request,
    tool_text,
)
from conftest import SECRET, serve
from e2e._wires import Sep1364Client, StrawmanClient

ALL = "draft,strawman,sep1364-alt1,sep1364-alt2"


@pytest.fixture(scope="module", params=["json", "sse"])
def urls(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, RecordingApp]]:
    json_response = request.param == "json"
    every = build_app(
        json_response=json_response,
        stateless=True,
        environ={"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_PROFILES": ALL},
    )
    recording = every.app = RecordingApp(every.app)
    draft_only = build_app(json_response=json_response, stateless=True, environ={"MCP_SESSIONS_SECRET": SECRET})
    with serve(every) as every_url, serve(draft_only) as draft_url:
        yield every_url, draft_url, recording


def test_sessionless_requests_are_answered_as_with_the_draft_alone(
    urls: tuple[str, str, RecordingApp], http: httpx.Client
) -> None:
    every_url, draft_url, _ = urls
    for body in (
        modern_request("tools/list", {}),
        modern_request("tools/call", {"name": "whoami", "arguments": {}}),
        modern_request("tools/call", {"name": "count", "arguments": {}}),
        modern_request("ping", {}),
    ):
        every = http.post(every_url + "/mcp", json=body, headers=modern_headers(body))
        draft = http.post(draft_url + "/mcp", json=body, headers=modern_headers(body))
        assert (every.status_code, every.content) == (draft.status_code, draft.content), body["method"]
    body = legacy_request("tools/call", {"name": "whoami", "arguments": {}})
    legacy = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    every = http.post(every_url + "/mcp", json=body, headers=legacy)
    draft = http.post(draft_url + "/mcp", json=body, headers=legacy)
    assert (every.status_code, every.content) == (draft.status_code, draft.content)


def test_interleaved_sessions_of_every_wire_keep_their_own_counters(
    urls: tuple[str, str, RecordingApp], http: httpx.Client
) -> None:
    url, _, recording = urls
    draft = ModernClient(http, url)
    draft_session = {"sessionId": draft.create_session()["sessionId"]}
    strawman = StrawmanClient(http, url)
    strawman.request("session/create")
    alt1 = Sep1364Client(http, url)
    alt1.session_id = alt1.request("session/create", {"capabilities": {}}, session=None)["result"]["sessionId"]
    alt2 = Sep1364Client(http, url, era="2025-11-25")
    alt2.initialize(session=None)
    recording.clear()

    for expected in ("1", "2", "3"):
        _, message = draft.call_tool("count", session=draft_session)
        assert tool_text(message) == expected
        assert set(message["result"]["_meta"]) >= {SESSION_KEY} and "mcp/session" not in message["result"]["_meta"]
        assert "sessionId" not in message
        message = strawman.call_tool("count")
        assert tool_text(message) == expected
        assert SESSION_KEY not in message["result"]["_meta"] and "sessionId" not in message
        for client in (alt1, alt2):
            message = client.call_tool("count")
            assert tool_text(message) == expected
            meta = message["result"].get("_meta") or {}
            assert SESSION_KEY not in meta and "mcp/session" not in meta

    # Deleting on one wire ends only that session.
    strawman.request("session/delete", {"id": strawman.cookie["id"] if strawman.cookie else ""})
    _, message = draft.call_tool("count", session=draft_session)
    assert tool_text(message) == "4"
    assert tool_text(alt1.call_tool("count")) == "4"
    for body in recording.seen:
        assert "sessionId" not in body


def test_a_legacy_client_of_the_draft_still_works(urls: tuple[str, str, RecordingApp], http: httpx.Client) -> None:
    url, _, _ = urls
    client = LegacyClient(http, url)
    result = client.initialize()
    assert result["capabilities"]["sessions"] == {"required": False}
    assert result["capabilities"]["experimental"]["sessions"] == {}
    session = client.create_session()
    _, message = client.call_tool("count", session={"sessionId": session["sessionId"]})
    assert tool_text(message) == "1"
    assert message["result"]["_meta"][SESSION_KEY]["sessionId"] == session["sessionId"]
