"""The 2025-11-25 (handshake) wire, end to end, stateful and stateless, JSON and SSE.

In this era the middleware answers every error in HTTP 200, as the SDK does,
and ``Mcp-Session-Id`` is the SDK's own transport session: never compared with
the data-layer session in ``_meta``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from examples.quickstart import build_app, build_server

from _mcp import (
    INVALID_REQUEST,
    LEGACY,
    MCP_PATH,
    REQUIRED_MESSAGE,
    RFC3339_UTC,
    SESSION_KEY,
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    LegacyClient,
    RecordingApp,
    answer,
    jwt_claims,
    legacy_request,
    messages,
    session_meta,
    tool_text,
    with_claims,
)
from conftest import SECRET, serve
from mcp_sessions import MCPSessionMiddleware

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}
QUICKSTART_INFO = {"name": "quickstart", "version": ""}
MODES = ["stateful-json", "stateful-sse", "stateless-json", "stateless-sse"]


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    """The quickstart in every legacy transport mode, one uvicorn each for the whole module."""
    with (
        serve(build_app(json_response=True, stateless=False, environ=ENVIRON)) as stateful_json,
        serve(build_app(json_response=False, stateless=False, environ=ENVIRON)) as stateful_sse,
        serve(build_app(json_response=True, stateless=True, environ=ENVIRON)) as stateless_json,
        serve(build_app(json_response=False, stateless=True, environ=ENVIRON)) as stateless_sse,
    ):
        yield {
            "stateful-json": stateful_json,
            "stateful-sse": stateful_sse,
            "stateless-json": stateless_json,
            "stateless-sse": stateless_sse,
        }


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    mode: str = request.param
    return mode


@pytest.fixture
def client(mode: str, servers: dict[str, str]) -> Iterator[LegacyClient]:
    """A client that has done the handshake."""
    with httpx.Client(timeout=10) as http:
        client = LegacyClient(http, servers[mode])
        client.initialize()
        yield client


def echo_of(message: dict[str, Any]) -> dict[str, Any]:
    echo: dict[str, Any] = message["result"]["_meta"][SESSION_KEY]
    return echo


def assert_error_in_200(response: httpx.Response, message: dict[str, Any], code: int) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    assert "result" not in message
    assert message["error"]["code"] == code, message
    error: dict[str, Any] = message["error"]
    return error


# -- the handshake ----------------------------------------------------------------------


def test_initialize_advertises_sessions_and_keeps_the_servers_capabilities(mode: str, servers: dict[str, str]) -> None:
    with httpx.Client(timeout=10) as http:
        client = LegacyClient(http, servers[mode])
        result = client.initialize()

    assert result["protocolVersion"] == LEGACY
    assert result["serverInfo"] == QUICKSTART_INFO
    capabilities = result["capabilities"]
    assert capabilities["sessions"] == {}
    assert capabilities["experimental"] == {"sessions": {}}
    assert "extensions" not in capabilities
    assert capabilities["tools"] == {"listChanged": False}
    assert capabilities["prompts"] == {"listChanged": False}
    assert capabilities["resources"] == {"listChanged": False, "subscribe": False}


@pytest.mark.parametrize(
    ("mode", "content_type", "has_transport_session"),
    [
        ("stateful-json", "application/json", True),
        ("stateful-sse", "text/event-stream", True),
        ("stateless-json", "application/json", False),
        ("stateless-sse", "text/event-stream", False),
    ],
)
def test_initialize_is_rewritten_in_the_servers_own_framing(
    servers: dict[str, str], mode: str, content_type: str, has_transport_session: bool
) -> None:
    body = legacy_request(
        "initialize", {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}
    )
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    with httpx.Client(timeout=10) as http:
        response = http.post(servers[mode] + MCP_PATH, json=body, headers=headers)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith(content_type)
    assert ("mcp-session-id" in response.headers) is has_transport_session
    if content_type == "application/json":
        assert int(response.headers["content-length"]) == len(response.content)
    [message] = messages(response)
    assert message["result"]["capabilities"]["experimental"] == {"sessions": {}}


def test_initialize_with_an_older_version_also_advertises(servers: dict[str, str]) -> None:
    with httpx.Client(timeout=10) as http:
        client = LegacyClient(http, servers["stateless-json"], version="2025-03-26")
        result = client.initialize()

    assert result["protocolVersion"] == "2025-03-26"
    assert result["capabilities"]["sessions"] == {}
    assert result["capabilities"]["experimental"] == {"sessions": {}}


# -- sessions/create ----------------------------------------------------------------------


def test_create_returns_a_session(client: LegacyClient) -> None:
    response, message = client.request("sessions/create", id=31)

    assert response.status_code == 200
    assert message["id"] == 31
    assert set(message["result"]) == {"session"}
    session = message["result"]["session"]
    assert set(session) == {"sessionId", "expiresAt"}
    assert RFC3339_UTC.fullmatch(session["expiresAt"])
    assert jwt_claims(session["sessionId"])["exp"] - jwt_claims(session["sessionId"])["iat"] == 24 * 3600


def test_create_carrying_session_metadata_is_invalid_request_in_200(client: LegacyClient) -> None:
    session = client.create_session()

    response, message = client.request("sessions/create", session=session_meta(session))

    assert_error_in_200(response, message, INVALID_REQUEST)


def test_create_with_null_session_metadata_creates_a_session(client: LegacyClient) -> None:
    body = legacy_request("sessions/create", meta={SESSION_KEY: None})

    response = client.post(body)

    assert response.status_code == 200
    assert jwt_claims(answer(response)["result"]["session"]["sessionId"])["sid"]


# -- using a session ------------------------------------------------------------------------


def test_count_with_a_session_increments_and_echoes(client: LegacyClient) -> None:
    first, second = client.create_session(), client.create_session()

    counts = []
    for session in (first, first, second, first):
        response, message = client.call_tool("count", session=session_meta(session))
        assert response.status_code == 200
        assert message["result"]["_meta"] == {
            SESSION_KEY: {"sessionId": session["sessionId"], "expiresAt": session["expiresAt"]}
        }
        counts.append(int(tool_text(message)))

    assert counts == [1, 2, 1, 3]


def test_whoami_with_and_without_a_session(client: LegacyClient) -> None:
    session = client.create_session()

    _, with_session = client.call_tool("whoami", session=session_meta(session))
    _, without = client.call_tool("whoami")

    assert tool_text(with_session) == jwt_claims(session["sessionId"])["sid"]
    assert tool_text(without) == "none"
    assert "_meta" not in without["result"]


def test_required_tool_without_session_is_session_required_in_200(client: LegacyClient) -> None:
    response, message = client.call_tool("count", id=4)

    error = assert_error_in_200(response, message, SESSION_REQUIRED)
    assert message["id"] == 4
    assert error["message"].startswith("Session required")  # the draft's test vector, then what to do
    assert error["message"] == REQUIRED_MESSAGE


@pytest.mark.parametrize("session_id", ["sess-invalid", "", "x" * 300])
def test_unknown_session_is_session_not_found_in_200(client: LegacyClient, session_id: str) -> None:
    response, message = client.call_tool("whoami", session={"sessionId": session_id}, id=3)

    error = assert_error_in_200(response, message, SESSION_NOT_FOUND)
    assert message["id"] == 3
    assert error["data"] == {"sessionId": session_id[:256]}


def test_edited_session_id_is_session_not_found_in_200(client: LegacyClient) -> None:
    forged = with_claims(client.create_session()["sessionId"], sid="B" * 24)

    response, message = client.call_tool("whoami", session={"sessionId": forged})

    assert_error_in_200(response, message, SESSION_NOT_FOUND)


@pytest.mark.parametrize(
    "session", [pytest.param("sess", id="string"), pytest.param({"sessionId": 1}, id="numeric-sessionId")]
)
def test_malformed_session_metadata_is_invalid_request_in_200(client: LegacyClient, session: Any) -> None:
    response, message = client.call_tool("whoami", session=session)

    assert_error_in_200(response, message, INVALID_REQUEST)


def test_state_round_trips_and_is_bound_to_its_session(client: LegacyClient) -> None:
    session, other = client.create_session(), client.create_session()

    _, set_mode = client.call_tool("set_mode", {"mode": "dark"}, session=session_meta(session))
    state = echo_of(set_mode)["state"]
    _, get_mode = client.call_tool("get_mode", session=session_meta(session, state=state))
    stolen_response, stolen = client.call_tool("get_mode", session=session_meta(other, state=state))

    assert tool_text(get_mode) == "dark"
    assert echo_of(get_mode) == {"sessionId": session["sessionId"], "state": state, "expiresAt": session["expiresAt"]}
    assert_error_in_200(stolen_response, stolen, SESSION_NOT_FOUND)


def test_delete_then_every_use_is_session_not_found(client: LegacyClient) -> None:
    session = client.create_session()
    assert tool_text(client.call_tool("count", session=session_meta(session))[1]) == "1"

    response, message = client.request("sessions/delete", session=session_meta(session))

    assert response.status_code == 200
    assert message["result"] == {}
    for use_response, use_message in [
        client.call_tool("count", session=session_meta(session)),
        client.request("tools/list", session=session_meta(session)),
        client.request("sessions/delete", session=session_meta(session)),
    ]:
        assert_error_in_200(use_response, use_message, SESSION_NOT_FOUND)


def test_delete_without_session_is_session_required_in_200(client: LegacyClient) -> None:
    response, message = client.request("sessions/delete")

    assert_error_in_200(response, message, SESSION_REQUIRED)


def test_progress_notifications_never_carry_the_session(servers: dict[str, str]) -> None:
    with httpx.Client(timeout=10) as http:
        client = LegacyClient(http, servers["stateful-sse"])
        client.initialize()
        session = client.create_session()
        body = legacy_request(
            "tools/call",
            {"name": "countdown", "arguments": {"n": 2}},
            id=5,
            session=session_meta(session),
            meta={"progressToken": "p"},
        )
        response = client.post(body)

    assert response.headers["content-type"].startswith("text/event-stream")
    received = messages(response)
    assert [m.get("method", "result") for m in received] == ["notifications/progress"] * 2 + ["result"]
    assert all(session["sessionId"] not in json.dumps(m) for m in received[:2])
    assert tool_text(received[-1]) == "done"
    assert echo_of(received[-1])["sessionId"] == session["sessionId"]


# -- Mcp-Session-Id is the transport's, never compared ----------------------------------------------


@pytest.mark.parametrize("mode", ["stateful-json", "stateful-sse"])
def test_transport_session_header_is_never_compared_with_the_data_layer_session(
    servers: dict[str, str], mode: str
) -> None:
    with httpx.Client(timeout=10) as http:
        client = LegacyClient(http, servers[mode])
        client.initialize()
        session = client.create_session()
        response, message = client.call_tool("whoami", session=session_meta(session))

    assert client.transport_session_id is not None
    assert re.fullmatch(r"[0-9a-f]{32}", client.transport_session_id)
    assert response.status_code == 200
    assert tool_text(message) == jwt_claims(session["sessionId"])["sid"]


@pytest.mark.parametrize("mode", ["stateless-json", "stateless-sse"])
def test_a_different_session_in_the_header_changes_nothing_in_this_era(servers: dict[str, str], mode: str) -> None:
    with httpx.Client(timeout=10) as http:
        client = LegacyClient(http, servers[mode])
        mine, theirs = client.create_session(), client.create_session()
        response, message = client.call_tool("whoami", session=session_meta(mine), Mcp_Session_Id=theirs["sessionId"])

    assert response.status_code == 200
    assert tool_text(message) == jwt_claims(mine["sessionId"])["sid"]
    assert echo_of(message)["sessionId"] == mine["sessionId"]


@pytest.mark.parametrize("version", [None, "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_every_handshake_version_header_takes_the_legacy_rules(servers: dict[str, str], version: str | None) -> None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    url = servers["stateless-json"] + MCP_PATH
    with httpx.Client(timeout=10) as http:
        created = answer(http.post(url, json=legacy_request("sessions/create"), headers=headers))
        session = session_meta(created["result"]["session"])
        ok = http.post(
            url, json=legacy_request("tools/call", {"name": "count", "arguments": {}}, session=session), headers=headers
        )
        mismatch = http.post(
            url,
            json=legacy_request("tools/call", {"name": "count", "arguments": {}}, session=session),
            headers={**headers, "Mcp-Session-Id": "not-the-session"},
        )
        bad = http.post(
            url,
            json=legacy_request("tools/call", {"name": "count", "arguments": {}}, session={"sessionId": 7}),
            headers=headers,
        )

    assert "resultType" not in created["result"]
    assert tool_text(answer(ok)) == "1"
    assert mismatch.status_code == 200
    assert tool_text(answer(mismatch)) == "2"
    assert_error_in_200(bad, answer(bad), INVALID_REQUEST)


# -- concurrency over one transport session ----------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["stateful-json", "stateful-sse"])
async def test_parallel_requests_of_two_sessions_in_one_transport_session_stay_apart(
    servers: dict[str, str], mode: str
) -> None:
    with httpx.Client(timeout=10) as sync_http:
        client = LegacyClient(sync_http, servers[mode])
        client.initialize()
        tokens = [client.create_session()["sessionId"] for _ in range(2)]
        headers = client.headers()
    mismatches: list[tuple[str, str]] = []

    async with httpx.AsyncClient(timeout=10) as http:

        async def whoami(token: str, request_id: int) -> None:
            body = legacy_request(
                "tools/call", {"name": "whoami", "arguments": {}}, id=request_id, session={"sessionId": token}
            )
            message = answer(await http.post(client.url, json=body, headers=headers))
            if tool_text(message) != jwt_claims(token)["sid"] or echo_of(message)["sessionId"] != token:
                mismatches.append((token, tool_text(message)))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for request_id in range(20):
                    tg.start_soon(whoami, tokens[request_id % 2], request_id)

    assert mismatches == []


@pytest.mark.parametrize("mode", ["stateful-json", "stateful-sse"])
def test_a_session_on_initialize_never_sticks_to_the_transport_session(servers: dict[str, str], mode: str) -> None:
    with httpx.Client(timeout=10) as http:
        session = LegacyClient(http, servers["stateless-json"]).create_session()
        client = LegacyClient(http, servers[mode])
        body = legacy_request(
            "initialize",
            {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}},
            id=0,
            session=session_meta(session),
        )
        response = http.post(client.url, json=body, headers=client.headers())
        initialized = answer(response)
        client.transport_session_id = response.headers["mcp-session-id"]
        assert client.post(legacy_request("notifications/initialized", id=None)).status_code == 202
        _, later = client.call_tool("whoami")

    assert initialized["result"]["capabilities"]["experimental"] == {"sessions": {}}
    assert echo_of(initialized)["sessionId"] == session["sessionId"]
    assert tool_text(later) == "none"
    assert "_meta" not in later["result"]


@pytest.fixture(scope="module")
def recorded() -> Iterator[tuple[str, RecordingApp]]:
    app = build_server().streamable_http_app(streamable_http_path=MCP_PATH, json_response=True, stateless_http=True)
    inner = RecordingApp(app)
    with serve(MCPSessionMiddleware(inner, secret=SECRET)) as url:
        yield url, inner


@pytest.mark.parametrize(
    "session", [pytest.param({"sessionId": "sess-invalid"}, id="unknown"), pytest.param([], id="malformed")]
)
@pytest.mark.parametrize("method", ["notifications/progress", "tools/call", "sessions/delete"])
def test_notifications_with_an_invalid_session_are_accepted_and_dropped(
    recorded: tuple[str, RecordingApp], session: Any, method: str
) -> None:
    url, inner = recorded
    body = legacy_request(method, {"progressToken": 1, "progress": 1, "name": "whoami"}, id=None, session=session)
    with httpx.Client(timeout=10) as http:
        inner.clear()
        response = LegacyClient(http, url).post(body)

    assert response.status_code == 202
    assert response.content == b""
    assert inner.seen == []
