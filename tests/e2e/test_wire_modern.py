"""Both wires end to end, on the real mcp 2.3 MCPServer in process (and one real server for a stream).

The 2026-07-28 wire in both response modes; the 2025-11-25 (handshake) wire stateful and stateless, JSON and
SSE. In the handshake era the middleware answers every error in HTTP 200, as the SDK does, and
``Mcp-Session-Id`` is the SDK's own transport session: never compared with the data-layer session in ``_meta``.
One-request refusals (forged, expired or unknown session ids, edited or foreign state, malformed session
metadata, sessions/create or sessions/delete misused, a bad label, a wrong Mcp-Method) are rows of
tests/e2e/test_attacks.py, in both eras; many sessions' requests at once, each answered as its own, are
tests/e2e/test_load.py's.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import pytest
from examples.quickstart import build_app, build_server
from mcp.server.mcpserver import Context, MCPServer

from _mcp import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LEGACY,
    MCP_PATH,
    METHOD_NOT_FOUND,
    MODERN,
    RFC3339_UTC,
    SERVER_INFO_KEY,
    SESSION_KEY,
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    SESSIONS_EXTENSION,
    LegacyClient,
    ModernClient,
    RecordingApp,
    aiter_messages,
    answer,
    jwt_claims,
    legacy_request,
    messages,
    modern_headers,
    modern_request,
    session_meta,
    tool_text,
)
from _waits import WITHIN
from conftest import SECRET, asgi_client, in_process, serve
from mcp_sessions import MCPSessionMiddleware

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}
QUICKSTART_INFO = {"name": "quickstart", "version": ""}
LEGACY_MODES = ["stateful-json", "stateful-sse", "stateless-json", "stateless-sse"]
Client = ModernClient | LegacyClient
BASE_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, httpx.Client]]:
    """The quickstart in every mode of both wires, in process, for the whole module."""
    stateless = {"json": None, "sse": None, **{mode: mode.startswith("stateless") for mode in LEGACY_MODES}}
    with ExitStack() as stack:
        yield {
            mode: stack.enter_context(
                in_process(build_app(json_response=mode.endswith("json"), stateless=stateless[mode], environ=ENVIRON))
            )
            for mode in stateless
        }


@pytest.fixture(params=["json", "sse"])
def client(request: pytest.FixtureRequest, servers: dict[str, httpx.Client]) -> ModernClient:
    return ModernClient(servers[request.param], "")


def connected(servers: dict[str, httpx.Client], mode: str) -> Client:
    """A 2026 client for ``json``/``sse``, else a 2025 client that has done the handshake."""
    if mode in ("json", "sse"):
        return ModernClient(servers[mode], "")
    legacy = LegacyClient(servers[mode], "")
    legacy.initialize()
    return legacy


@pytest.fixture(params=["json", "sse", *LEGACY_MODES])
def any_client(request: pytest.FixtureRequest, servers: dict[str, httpx.Client]) -> Client:
    return connected(servers, request.param)


@pytest.fixture(params=["sse", "stateful-sse"])
def sse_client(request: pytest.FixtureRequest, servers: dict[str, httpx.Client]) -> Client:
    return connected(servers, request.param)


def echo_of(message: dict[str, Any]) -> dict[str, Any]:
    echo: dict[str, Any] = message["result"]["_meta"][SESSION_KEY]
    return echo


def assert_error(response: httpx.Response, message: dict[str, Any], status: int, code: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert "result" not in message
    assert message["error"]["code"] == code, message
    error: dict[str, Any] = message["error"]
    return error


# -- sessions/create -------------------------------------------------------------


def test_create_returns_a_jwt_session_id_and_its_expiry(any_client: Client) -> None:
    before = int(time.time())
    response, message = any_client.request("sessions/create", id=41)
    after = int(time.time())

    assert response.status_code == 200
    if isinstance(any_client, ModernClient):
        assert response.headers["content-type"].startswith("application/json")
    else:
        assert set(message["result"]) == {"session"}
    assert message["jsonrpc"] == "2.0"
    assert message["id"] == 41
    session = message["result"]["session"]
    assert set(session) == {"sessionId", "expiresAt"}
    token = session["sessionId"]
    assert all(0x21 <= ord(char) <= 0x7E for char in token)
    assert token.count(".") == 2
    claims = jwt_claims(token)
    assert before <= claims["iat"] <= after
    assert claims["exp"] - claims["iat"] == 24 * 3600
    assert RFC3339_UTC.fullmatch(session["expiresAt"])
    assert session["expiresAt"] == datetime.fromtimestamp(claims["exp"], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_spec_vector_needs_the_2026_envelope_as_every_2026_request_does(client: ModernClient) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}
    refused = client.post(body)
    # On the 2025-era path, in the transport session the handshake opened, the draft's vector works verbatim.
    legacy = LegacyClient(client.http, client.url.removesuffix(MCP_PATH))
    legacy.initialize()
    created = client.http.post(client.url, json=body, headers=legacy.headers())
    # Outside one, the stateful server refuses it as it refuses any request there (400), and so does the middleware.
    outside = client.http.post(client.url, json=body, headers={"Accept": "application/json, text/event-stream"})

    # The SDK refuses any 2026-07-28 request without its envelope: so does the middleware, in the SDK's words.
    assert refused.status_code == 400
    assert refused.json() == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {
            "code": INVALID_PARAMS,
            "message": "params._meta must be an object carrying the required "
            "'io.modelcontextprotocol/protocolVersion' and 'io.modelcontextprotocol/clientCapabilities' envelope keys",
        },
    }
    assert created.status_code == 200
    message = answer(created)
    assert message["id"] == 1
    assert set(message["result"]["session"]) == {"sessionId", "expiresAt"}
    assert outside.status_code == 400
    assert "result" not in outside.text


# -- using a session ---------------------------------------------------------------


def test_tool_result_carries_content_and_the_echo_merged_with_server_info(client: ModernClient) -> None:
    session = client.create_session()

    response, message = client.call_tool("count", session=session_meta(session), id=2)

    assert response.status_code == 200
    assert message["id"] == 2
    assert message["result"]["content"] == [{"type": "text", "text": "1"}]
    assert message["result"]["structuredContent"] == {"result": 1}
    meta = message["result"]["_meta"]
    assert set(meta) == {SERVER_INFO_KEY, SESSION_KEY}
    assert meta[SERVER_INFO_KEY] == QUICKSTART_INFO
    assert meta[SESSION_KEY] == {"sessionId": session["sessionId"], "expiresAt": session["expiresAt"]}
    assert RFC3339_UTC.fullmatch(meta[SESSION_KEY]["expiresAt"])


@pytest.mark.parametrize("request_id", [0, "req-7", 2**53 + 1, -3])
def test_echo_finds_its_response_whatever_the_id(client: ModernClient, request_id: Any) -> None:
    session = client.create_session()

    response, message = client.call_tool("whoami", session=session_meta(session), id=request_id)

    assert message["id"] == request_id
    assert echo_of(message)["sessionId"] == session["sessionId"]
    if response.headers["content-type"].startswith("application/json"):
        assert int(response.headers["content-length"]) == len(response.content)


def test_count_increments_per_session_and_sessions_are_independent(any_client: Client) -> None:
    first, second = any_client.create_session(), any_client.create_session()

    def count(session: dict[str, Any]) -> int:
        response, message = any_client.call_tool("count", session=session_meta(session))
        assert response.status_code == 200
        assert echo_of(message) == {"sessionId": session["sessionId"], "expiresAt": session["expiresAt"]}
        return int(tool_text(message))

    assert [count(first), count(first), count(second), count(first), count(second)] == [1, 2, 1, 3, 2]


@pytest.mark.anyio
async def test_concurrent_requests_of_one_session_all_count() -> None:
    async with asgi_client(build_app(json_response=True, environ=ENVIRON)) as http:
        create = modern_request("sessions/create")
        created = await http.post(MCP_PATH, json=create, headers=modern_headers(create))
        session = session_meta(answer(created)["result"]["session"])
        seen: list[int] = []

        async def count(request_id: int) -> None:
            body = modern_request("tools/call", {"name": "count", "arguments": {}}, id=request_id, session=session)
            response = await http.post(MCP_PATH, json=body, headers=modern_headers(body))
            seen.append(int(tool_text(answer(response))))

        with anyio.fail_after(WITHIN):
            async with anyio.create_task_group() as tg:
                for request_id in range(10):
                    tg.start_soon(count, request_id)

    assert sorted(seen) == list(range(1, 11))


def test_unknown_meta_keys_beside_the_session_still_reach_the_server(any_client: Client) -> None:
    session = any_client.create_session()

    _, message = any_client.call_tool("whoami", session=session_meta(session), meta={"example.com/trace": "abc"})

    assert tool_text(message) == jwt_claims(session["sessionId"])["sid"]
    assert echo_of(message)["sessionId"] == session["sessionId"]


# -- client-held state ---------------------------------------------------------------


def test_state_round_trips_through_the_client(any_client: Client) -> None:
    session = any_client.create_session()

    _, unset = any_client.call_tool("get_mode", session=session_meta(session))
    assert tool_text(unset) == "unset"
    assert "state" not in echo_of(unset)

    _, dark = any_client.call_tool("set_mode", {"mode": "dark"}, session=session_meta(session))
    assert tool_text(dark) == "dark"
    dark_state = echo_of(dark)["state"]
    assert isinstance(dark_state, str)
    assert echo_of(dark)["sessionId"] == session["sessionId"]

    _, read = any_client.call_tool("get_mode", session=session_meta(session, state=dark_state))
    assert tool_text(read) == "dark"
    assert echo_of(read)["state"] == dark_state

    _, light = any_client.call_tool("set_mode", {"mode": "light"}, session=session_meta(session, state=dark_state))
    light_state = echo_of(light)["state"]
    assert light_state != dark_state
    assert tool_text(any_client.call_tool("get_mode", session=session_meta(session, state=light_state))[1]) == "light"
    # Client-held and last-write-wins: an older state the client chooses to send is what the server sees.
    assert tool_text(any_client.call_tool("get_mode", session=session_meta(session, state=dark_state))[1]) == "dark"


# -- sessions/delete -------------------------------------------------------------------


def test_delete_ends_the_session_everywhere(any_client: Client) -> None:
    session, other = any_client.create_session(), any_client.create_session()
    _, set_mode = any_client.call_tool("set_mode", {"mode": "dark"}, session=session_meta(session))
    state = echo_of(set_mode)["state"]
    assert tool_text(any_client.call_tool("count", session=session_meta(other))[1]) == "1"

    response, message = any_client.request("sessions/delete", session=session_meta(session), id=9)

    assert response.status_code == 200
    assert message["id"] == 9
    assert {key: value for key, value in message["result"].items() if key != "resultType"} == {}
    uses = [
        any_client.call_tool("count", session=session_meta(session)),
        any_client.call_tool("whoami", session=session_meta(session)),
        any_client.call_tool("get_mode", session=session_meta(session, state=state)),
        any_client.request("tools/list", session=session_meta(session)),
        any_client.request("sessions/delete", session=session_meta(session)),
    ]
    for use_response, use_message in uses:
        error = assert_error(use_response, use_message, 200, SESSION_NOT_FOUND)
        assert error["data"] == {"sessionId": session["sessionId"][:256]}
    # Another session is untouched.
    assert tool_text(any_client.call_tool("count", session=session_meta(other))[1]) == "2"


# -- the Mcp-Session-Id header ------------------------------------------------------------


@pytest.mark.parametrize("method", ["tools/call", "sessions/delete"])
def test_mcp_session_id_header_differing_from_meta_is_header_mismatch_and_nothing_runs(
    client: ModernClient, method: str
) -> None:
    session, other = client.create_session(), client.create_session()
    params = {"name": "count", "arguments": {}} if method == "tools/call" else None

    response, message = client.request(
        method, params, session=session_meta(session), Mcp_Session_Id=other["sessionId"], id=8
    )

    assert_error(response, message, 400, HEADER_MISMATCH)
    assert message["id"] == 8
    # Nothing ran: the session lives on, its counter still untouched.
    assert tool_text(client.call_tool("count", session=session_meta(session))[1]) == "1"


def test_mcp_session_id_header_alone_does_not_make_a_session(client: ModernClient) -> None:
    session = client.create_session()

    response, message = client.call_tool("whoami", Mcp_Session_Id=session["sessionId"])

    assert response.status_code == 200
    assert tool_text(message) == "none"
    assert SESSION_KEY not in message["result"]["_meta"]


# -- capabilities -------------------------------------------------------------------------------


def test_discover_advertises_sessions_and_keeps_the_servers_capabilities(client: ModernClient) -> None:
    response, message = client.request("server/discover")

    assert response.status_code == 200
    result = message["result"]
    capabilities = result["capabilities"]
    assert capabilities["sessions"] == {}
    assert capabilities["extensions"] == {SESSIONS_EXTENSION: {}}
    assert capabilities["tools"] == {"listChanged": True}
    assert capabilities["prompts"] == {"listChanged": True}
    assert capabilities["resources"] == {"listChanged": True, "subscribe": True}
    assert result["supportedVersions"] == [MODERN]
    assert result["_meta"] == {SERVER_INFO_KEY: QUICKSTART_INFO}


def test_discover_advertises_required_when_every_operation_needs_a_session() -> None:
    with in_process(build_app(json_response=True, environ=ENVIRON, require_session=True)) as http:
        client = ModernClient(http, "")
        _, discover = client.request("server/discover")
        whoami_response, whoami = client.call_tool("whoami")

    assert discover["result"]["capabilities"]["sessions"] == {"required": True}
    assert discover["result"]["capabilities"]["extensions"] == {SESSIONS_EXTENSION: {"required": True}}
    assert_error(whoami_response, whoami, 200, SESSION_REQUIRED)


# -- errors and notifications -------------------------------------------------------------------


def test_error_responses_to_a_valid_session_carry_no_session_metadata(client: ModernClient) -> None:
    session = client.create_session()
    token = session["sessionId"]

    unknown_response, unknown = client.request("example/unknown", session=session_meta(session))
    body = modern_request("tools/call", {"name": "count", "arguments": {}}, session=session_meta(session))
    mismatch_response = client.post(body, {**modern_headers(body), "Mcp-Name": "whoami"})

    assert_error(unknown_response, unknown, 404, METHOD_NOT_FOUND)
    assert token not in unknown_response.text
    assert_error(mismatch_response, answer(mismatch_response), 400, HEADER_MISMATCH)
    assert token not in mismatch_response.text
    # Neither reached the counter.
    assert tool_text(client.call_tool("count", session=session_meta(session))[1]) == "1"


@pytest.mark.parametrize(
    ("case", "status", "code"),
    [
        ("no-session", 200, SESSION_REQUIRED),
        ("unknown-session", 200, SESSION_NOT_FOUND),
        ("header-mismatch", 400, HEADER_MISMATCH),
        ("malformed-state", 400, INVALID_REQUEST),
    ],
)
def test_middleware_errors_carry_no_session_metadata(client: ModernClient, case: str, status: int, code: int) -> None:
    session = client.create_session()
    cases: dict[str, dict[str, Any]] = {
        "no-session": {},
        "unknown-session": {"session": {"sessionId": "sess-invalid"}},
        "header-mismatch": {"session": session_meta(session), "Mcp_Session_Id": "other"},
        "malformed-state": {"session": {"sessionId": session["sessionId"], "state": 1}},
    }
    kwargs = cases[case]

    response, message = client.call_tool("count", **kwargs)

    assert_error(response, message, status, code)
    assert set(message) == {"jsonrpc", "id", "error"}
    assert session["sessionId"] not in response.text


@pytest.fixture(scope="module")
def recorded() -> Iterator[tuple[httpx.Client, RecordingApp]]:
    inner = RecordingApp(build_server().streamable_http_app(streamable_http_path=MCP_PATH, json_response=True))
    with in_process(MCPSessionMiddleware(inner, secret=SECRET, require_session_tools={"count"})) as http:
        yield http, inner


@pytest.mark.parametrize(
    "session",
    [{"sessionId": "sess-invalid"}, "not-an-object", "mismatched-header"],
    ids=["unknown", "malformed", "header-mismatch"],
)
@pytest.mark.parametrize("method", ["tools/call", "notifications/cancelled", "sessions/create", "sessions/delete"])
def test_notifications_with_an_invalid_session_are_accepted_and_dropped(
    recorded: tuple[httpx.Client, RecordingApp], session: Any, method: str
) -> None:
    http, inner = recorded
    client = ModernClient(http, "")
    extra = {}
    if session == "mismatched-header":
        session = session_meta(client.create_session())
        extra["Mcp-Session-Id"] = "something-else"
    body = modern_request(method, {"name": "count", "arguments": {}, "requestId": 1}, id=None, session=session)
    inner.clear()

    response = client.post(body, {**modern_headers(body), **extra})

    assert response.status_code == 202
    assert response.content == b""
    assert inner.seen == []


def test_notification_with_a_valid_session_is_forwarded(recorded: tuple[httpx.Client, RecordingApp]) -> None:
    http, inner = recorded
    client = ModernClient(http, "")
    session = session_meta(client.create_session())
    body = modern_request("notifications/cancelled", {"requestId": 1}, id=None, session=session)
    inner.clear()

    response = client.post(body)

    assert response.status_code == 202
    assert inner.seen == [body]


def test_sessionless_requests_reach_the_server_byte_for_byte_unchanged(
    recorded: tuple[httpx.Client, RecordingApp],
) -> None:
    http, inner = recorded
    body = modern_request("tools/call", {"name": "whoami", "arguments": {}}, meta={"example.com/x": [1, 2]})
    raw = json.dumps(body, indent=1).encode() + b"\n"
    inner.clear()
    response = http.post(MCP_PATH, content=raw, headers=modern_headers(body))

    assert response.status_code == 200
    assert tool_text(answer(response)) == "none"
    assert inner.raw == [raw]


# -- SSE ------------------------------------------------------------------------------------------


def test_progress_notifications_come_first_and_never_carry_the_session(sse_client: Client) -> None:
    session = sse_client.create_session()
    token = session["sessionId"]
    response, _ = sse_client.call_tool(
        "countdown", {"n": 2}, id=12, session=session_meta(session), meta={"progressToken": "p-12"}
    )

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "content-length" not in response.headers
    received = messages(response)
    assert [m.get("method", "result") for m in received] == ["notifications/progress"] * 2 + ["result"]
    for index, notification in enumerate(received[:2], start=1):
        assert notification["params"]["progressToken"] == "p-12"
        assert notification["params"]["progress"] == index
        assert SESSION_KEY not in (notification["params"].get("_meta") or {})
        assert token not in json.dumps(notification)
    final = received[-1]
    assert final["id"] == 12
    assert tool_text(final) == "done"
    assert echo_of(final) == {"sessionId": token, "expiresAt": session["expiresAt"]}


# -- streaming: the middleware must never hold back an event ---------------------------------------


def gated_app(release: threading.Event) -> MCPSessionMiddleware:
    """An MCPServer whose tool reports progress, then waits until the test releases it.

    Stateless, so that a 2025-era request needs no handshake; the 2026 path ignores the setting.
    """
    mcp = MCPServer("gated")

    @mcp.tool()
    async def gated(ctx: Context) -> str:
        await ctx.report_progress(1, 2, "waiting for the test")
        released = await anyio.to_thread.run_sync(release.wait, 15)
        return "released" if released else "timed out"

    app = mcp.streamable_http_app(streamable_http_path=MCP_PATH, json_response=False, stateless_http=True)
    return MCPSessionMiddleware(app, secret=SECRET)


@pytest.mark.anyio
@pytest.mark.parametrize("era", ["modern", "legacy-stateless"])
async def test_progress_event_reaches_the_client_while_the_tool_still_waits(era: str) -> None:
    release = threading.Event()
    with serve(gated_app(release)) as base:
        url = base + MCP_PATH
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                create = modern_request("sessions/create")
                created = await http.post(url, json=create, headers=modern_headers(create))
                session = answer(created)["result"]["session"]
                params = {"name": "gated", "arguments": {}}
                meta = {"progressToken": "gate"}
                build = modern_request if era == "modern" else legacy_request
                body = build("tools/call", params, id=7, session=session_meta(session), meta=meta)
                headers = modern_headers(body) if era == "modern" else {**BASE_HEADERS, "MCP-Protocol-Version": LEGACY}
                async with http.stream("POST", url, json=body, headers=headers) as response:
                    assert response.status_code == 200
                    assert response.headers["content-type"].startswith("text/event-stream")
                    stream = aiter_messages(response.aiter_lines())
                    with anyio.fail_after(WITHIN):  # a held-back progress event fails here instead of hanging
                        first = await anext(stream)
                    assert first["method"] == "notifications/progress"
                    assert first["params"]["progressToken"] == "gate"
                    assert not release.is_set()
                    release.set()
                    with anyio.fail_after(WITHIN):
                        final = await anext(stream)
        finally:
            release.set()

    assert final["id"] == 7
    assert tool_text(final) == "released"
    assert final["result"]["_meta"][SESSION_KEY]["sessionId"] == session["sessionId"]


# -- the handshake era only: initialize, and Mcp-Session-Id is the transport's, never compared ----------


@pytest.mark.parametrize(
    ("mode", "version"), [*((mode, LEGACY) for mode in LEGACY_MODES), ("stateless-json", "2025-03-26")]
)
def test_initialize_advertises_sessions_and_keeps_the_servers_capabilities(
    mode: str, version: str, servers: dict[str, httpx.Client]
) -> None:
    """In the server's own framing: JSON with its length, or SSE; a transport session when stateful."""
    client = LegacyClient(servers[mode], "", version=version)
    info = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}
    response = client.http.post(client.url, json=legacy_request("initialize", info, id=0), headers=BASE_HEADERS)
    client.transport_session_id = response.headers.get("mcp-session-id")
    assert client.post(legacy_request("notifications/initialized", id=None)).status_code == 202

    assert response.status_code == 200
    json_response = mode.endswith("json")
    assert response.headers["content-type"].startswith("application/json" if json_response else "text/event-stream")
    assert (client.transport_session_id is not None) is mode.startswith("stateful")
    if json_response:
        assert int(response.headers["content-length"]) == len(response.content)
    [message] = messages(response)
    result = message["result"]
    assert result["protocolVersion"] == version
    assert result["serverInfo"] == QUICKSTART_INFO
    capabilities = result["capabilities"]
    assert capabilities["sessions"] == {}
    assert capabilities["experimental"] == {"sessions": {}}
    assert "extensions" not in capabilities
    assert capabilities["tools"] == {"listChanged": False}
    assert capabilities["prompts"] == {"listChanged": False}
    assert capabilities["resources"] == {"listChanged": False, "subscribe": False}


@pytest.mark.parametrize("mode", LEGACY_MODES)
def test_transport_session_header_is_never_compared_with_the_data_layer_session(
    servers: dict[str, httpx.Client], mode: str
) -> None:
    client = LegacyClient(servers[mode], "")
    client.initialize()
    mine, theirs = client.create_session(), client.create_session()
    stateful = mode.startswith("stateful")
    # Stateful, the header carries the SDK's transport session; stateless, another session's id there changes nothing.
    header = {} if stateful else {"Mcp_Session_Id": theirs["sessionId"]}
    response, message = client.call_tool("whoami", session=session_meta(mine), **header)

    if stateful:
        assert client.transport_session_id is not None
        assert re.fullmatch(r"[0-9a-f]{32}", client.transport_session_id)
    assert response.status_code == 200
    assert tool_text(message) == jwt_claims(mine["sessionId"])["sid"]
    assert echo_of(message)["sessionId"] == mine["sessionId"]


@pytest.mark.parametrize("version", [None, "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_every_handshake_version_header_takes_the_legacy_rules(
    servers: dict[str, httpx.Client], version: str | None
) -> None:
    headers = dict(BASE_HEADERS)
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    http, url = servers["stateless-json"], MCP_PATH
    created = answer(http.post(url, json=legacy_request("sessions/create"), headers=headers))
    session = session_meta(created["result"]["session"])
    params = {"name": "count", "arguments": {}}
    count = legacy_request("tools/call", params, session=session)
    ok = http.post(url, json=count, headers=headers)
    mismatch = http.post(url, json=count, headers={**headers, "Mcp-Session-Id": "not-the-session"})
    bad = http.post(url, json=legacy_request("tools/call", params, session={"sessionId": 7}), headers=headers)

    assert "resultType" not in created["result"]
    assert tool_text(answer(ok)) == "1"
    assert mismatch.status_code == 200
    assert tool_text(answer(mismatch)) == "2"
    assert_error(bad, answer(bad), 200, INVALID_REQUEST)


@pytest.mark.parametrize("mode", ["stateful-json", "stateful-sse"])
def test_parallel_requests_of_two_sessions_in_one_transport_session_stay_apart(
    servers: dict[str, httpx.Client], mode: str
) -> None:
    client = LegacyClient(servers[mode], "")
    client.initialize()
    tokens = [client.create_session()["sessionId"] for _ in range(2)]
    headers = client.headers()

    def whoami(request_id: int) -> tuple[str, str] | None:
        token = tokens[request_id % 2]
        body = legacy_request(
            "tools/call", {"name": "whoami", "arguments": {}}, id=request_id, session={"sessionId": token}
        )
        message = answer(client.http.post(client.url, json=body, headers=headers))
        if tool_text(message) != jwt_claims(token)["sid"] or echo_of(message)["sessionId"] != token:
            return token, tool_text(message)
        return None

    # Twenty requests at once: the app runs them concurrently on its event loop, one thread each sending.
    with ThreadPoolExecutor(20) as pool:
        mismatches = [found for found in pool.map(whoami, range(20), timeout=20) if found is not None]

    assert mismatches == []


@pytest.mark.parametrize("mode", ["stateful-json", "stateful-sse"])
def test_a_session_on_initialize_never_sticks_to_the_transport_session(
    servers: dict[str, httpx.Client], mode: str
) -> None:
    session = LegacyClient(servers["stateless-json"], "").create_session()
    client = LegacyClient(servers[mode], "")
    body = legacy_request(
        "initialize",
        {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}},
        id=0,
        session=session_meta(session),
    )
    response = client.http.post(client.url, json=body, headers=client.headers())
    initialized = answer(response)
    client.transport_session_id = response.headers["mcp-session-id"]
    assert client.post(legacy_request("notifications/initialized", id=None)).status_code == 202
    _, later = client.call_tool("whoami")

    assert initialized["result"]["capabilities"]["experimental"] == {"sessions": {}}
    assert echo_of(initialized)["sessionId"] == session["sessionId"]
    assert tool_text(later) == "none"
    assert "_meta" not in later["result"]


@pytest.fixture(scope="module")
def legacy_recorded() -> Iterator[tuple[httpx.Client, RecordingApp]]:
    app = build_server().streamable_http_app(streamable_http_path=MCP_PATH, json_response=True, stateless_http=True)
    inner = RecordingApp(app)
    with in_process(MCPSessionMiddleware(inner, secret=SECRET)) as http:
        yield http, inner


@pytest.mark.parametrize(
    "session", [pytest.param({"sessionId": "sess-invalid"}, id="unknown"), pytest.param([], id="malformed")]
)
@pytest.mark.parametrize("method", ["notifications/progress", "tools/call", "sessions/delete"])
def test_handshake_era_notifications_with_an_invalid_session_are_dropped(
    legacy_recorded: tuple[httpx.Client, RecordingApp], session: Any, method: str
) -> None:
    http, inner = legacy_recorded
    body = legacy_request(method, {"progressToken": 1, "progress": 1, "name": "whoami"}, id=None, session=session)
    inner.clear()
    response = LegacyClient(http, "").post(body)

    assert response.status_code == 202
    assert response.content == b""
    assert inner.seen == []
