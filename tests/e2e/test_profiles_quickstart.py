"""Issue 12's bar: the quickstart with every wire enabled answers each wire's whole cycle, JSON and SSE.

``MCP_SESSIONS_PROFILES=draft,strawman,sep1364-alt1,sep1364-alt2``; each cycle
is create, the counter surviving across requests, resume or refresh where the
wire has one, delete, and the refusal or revocation after it. The draft cycle
and a sessionless client still behave as they do with the draft alone.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from examples.demo import ENVELOPE
from examples.quickstart import build_app

from _mcp import (
    LEGACY,
    SESSION_KEY,
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    ModernClient,
    tool_text,
)
from conftest import SECRET, serve
from e2e._wires import STRAWMAN_REQUIRED, STRAWMAN_REQUIRED_MESSAGE, Sep1364Client, StrawmanClient

ALL = "draft,strawman,sep1364-alt1,sep1364-alt2"
ENVIRON = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_PROFILES": ALL}


@pytest.fixture(scope="module", params=["json", "sse"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    with serve(build_app(json_response=request.param == "json", environ=ENVIRON)) as base:
        yield base


def test_discover_advertises_every_wire_that_has_a_capability(url: str, http: httpx.Client) -> None:
    _, message = ModernClient(http, url).request("server/discover")
    capabilities = message["result"]["capabilities"]
    assert capabilities["sessions"] == {"required": False}  # the draft's, merged with SEP-1364 alt. 1's
    assert capabilities["extensions"]["io.modelcontextprotocol/sessions"] == {}
    assert capabilities["experimental"]["session"] == {"version": 1, "features": ["create", "resume", "list", "delete"]}


def test_draft_cycle(url: str, http: httpx.Client) -> None:
    client = ModernClient(http, url)
    session = client.create_session()
    for expected in ("1", "2"):
        _, message = client.call_tool("count", session={"sessionId": session["sessionId"]})
        assert tool_text(message) == expected
        assert message["result"]["_meta"][SESSION_KEY]["sessionId"] == session["sessionId"]
    _, deleted = client.request("sessions/delete", session={"sessionId": session["sessionId"]})
    assert deleted["result"] == {"resultType": "complete"}
    _, gone = client.call_tool("count", session={"sessionId": session["sessionId"]})
    assert gone["error"]["code"] == SESSION_NOT_FOUND


def test_sessionless_client(url: str, http: httpx.Client) -> None:
    client = ModernClient(http, url)
    _, who = client.call_tool("whoami")
    assert tool_text(who) == "none"
    assert "_meta" not in who["result"] or SESSION_KEY not in who["result"]["_meta"]
    _, required = client.call_tool("count")
    assert required["error"]["code"] == SESSION_REQUIRED


def test_strawman_cycle(url: str, http: httpx.Client) -> None:
    client = StrawmanClient(http, url)
    created = client.request("session/create", {"hints": {"label": "my-agent-workspace"}})["result"]
    assert created["data"] == {"label": "my-agent-workspace"}
    assert created["_meta"]["mcp/session"] == {"id": created["id"], "expiry": created["expiry"]}
    assert client.cookie is not None
    for expected in ("1", "2"):
        message = client.call_tool("count")
        assert tool_text(message) == expected
        assert message["result"]["_meta"]["mcp/session"]["id"] == created["id"]
    resumed = client.request("session/resume", {"id": created["id"]})["result"]
    assert resumed["id"] == created["id"]
    assert tool_text(client.call_tool("count")) == "3"
    deleted = client.request("session/delete", {"id": created["id"]})["result"]
    assert deleted["deleted"] is True
    assert client.cookie is None and client.revocations == 1  # the null cookie dropped it

    # A stale cookie: the request is sessionless and says so; a tool that needs a session is refused.
    client.cookie = {"id": created["id"]}
    who = client.call_tool("whoami")
    assert tool_text(who) == "none"
    assert client.cookie is None and client.revocations == 2
    client.cookie = {"id": created["id"]}
    refused = client.call_tool("count")
    assert refused["error"] == {"code": STRAWMAN_REQUIRED, "message": STRAWMAN_REQUIRED_MESSAGE}
    again = client.request("session/delete", {"id": created["id"]})["result"]
    assert again["deleted"] is False


def test_strawman_client_without_a_cookie_gets_its_wires_required_error(url: str, http: httpx.Client) -> None:
    assert StrawmanClient(http, url).call_tool("count")["error"]["code"] == STRAWMAN_REQUIRED
    assert StrawmanClient(http, url, declare=False).call_tool("count")["error"]["code"] == SESSION_REQUIRED


def test_sep1364_alt1_cycle(url: str, http: httpx.Client) -> None:
    client = Sep1364Client(http, url)
    created = client.request("session/create", {"capabilities": {}}, session=None)
    session_id = created["result"]["sessionId"]
    assert created["sessionId"] == session_id
    client.session_id = session_id
    for expected in ("1", "2"):
        message = client.call_tool("count")
        assert tool_text(message) == expected
        assert message["sessionId"] == session_id
        assert SESSION_KEY not in (message["result"].get("_meta") or {})
    refreshed = client.request("session/create", {"sessionId": session_id, "capabilities": {}})
    assert refreshed["result"] == {"sessionId": session_id, "resultType": "complete"}
    assert client.request("session/delete", {"sessionId": session_id})["result"] == {"resultType": "complete"}
    gone = client.call_tool("count")
    assert gone["error"]["code"] == SESSION_NOT_FOUND
    assert "sessionId" not in gone  # error responses carry no session
    invalid = client.request("session/create", {"sessionId": session_id, "capabilities": {}}, session=None)
    assert invalid["error"]["code"] == SESSION_NOT_FOUND


def test_sep1364_alt1_required_and_mismatch(url: str, http: httpx.Client) -> None:
    client = Sep1364Client(http, url)
    assert client.call_tool("count")["error"]["code"] == SESSION_REQUIRED
    client.session_id = client.request("session/create", {"capabilities": {}}, session=None)["result"]["sessionId"]
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "count", "arguments": {}, "_meta": dict(ENVELOPE)},  # a request the server would take
        "sessionId": client.session_id,
    }
    headers = {**client.headers(body), "Mcp-Session-Id": "another"}
    response = http.post(client.url, json=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32020


@pytest.fixture(scope="module", params=["json-stateless", "sse-stateless", "json-stateful", "sse-stateful"])
def legacy_url(request: pytest.FixtureRequest) -> Iterator[str]:
    mode, state = request.param.split("-")
    app = build_app(json_response=mode == "json", stateless=state == "stateless", environ=ENVIRON)
    with serve(app) as base:
        yield base


def test_sep1364_alt2_cycle(legacy_url: str, http: httpx.Client) -> None:
    client = Sep1364Client(http, legacy_url, era=LEGACY)
    opened = client.initialize(session=None)
    session_id = opened["sessionId"]
    assert isinstance(session_id, str) and client.session_id == session_id
    assert opened["result"]["serverInfo"]["name"] == "quickstart"  # the server's own initialize result
    for expected in ("1", "2"):
        message = client.call_tool("count")
        assert tool_text(message) == expected
        assert message["sessionId"] == session_id
    resumed = client.initialize(session=session_id)
    assert resumed["sessionId"] == session_id
    assert tool_text(client.call_tool("count")) == "3"
    assert client.request("terminate", {"sessionId": session_id})["result"] == {}
    gone = client.call_tool("count")
    assert gone["error"]["code"] == SESSION_NOT_FOUND
    invalid = client.initialize(session=session_id)
    assert invalid["error"]["code"] == SESSION_NOT_FOUND


def test_ordinary_initialize_is_left_alone(legacy_url: str, http: httpx.Client) -> None:
    client = Sep1364Client(http, legacy_url, era=LEGACY)
    result = client.handshake()
    assert result["capabilities"]["sessions"] == {"required": False}
    assert result["capabilities"]["experimental"]["session"]["version"] == 1
    assert client.session_id is None
    assert tool_text(client.call_tool("whoami")) == "none"


def test_sep1364_alt1_on_the_handshake_wire(legacy_url: str, http: httpx.Client) -> None:
    client = Sep1364Client(http, legacy_url, era=LEGACY)
    client.handshake()
    created = client.request("session/create", {"capabilities": {}}, session=None)
    client.session_id = created["result"]["sessionId"]
    for expected in ("1", "2"):
        message = client.call_tool("count")
        assert tool_text(message) == expected
        assert message["sessionId"] == client.session_id
    assert client.request("session/delete", {"sessionId": client.session_id})["result"] == {}
    assert client.call_tool("count")["error"]["code"] == SESSION_NOT_FOUND
