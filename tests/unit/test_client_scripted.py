"""The client transport against a scripted server: what a real one does not do on demand.

A tiny MCP server with sessions behind ``httpx2.MockTransport`` (SSE errors, hanging deletes,
refused creates, oversized answers), with ``anyio.Event`` gates where timing matters, and the held
session and retry policy as plain data. No assertion depends on how long anything takes. The
unmodified SDK client against the real quickstart is ``tests/e2e/test_client_transport.py``.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from functools import partial
from typing import Any

import anyio
import httpx2
import pytest

from _client import FAST, STORE_UNAVAILABLE, sent_session
from _mcp import LEGACY, SESSION_KEY, SESSION_NOT_FOUND, SESSION_REQUIRED, b64, modern_headers, modern_request
from _waits import WITHIN
from mcp_sessions.client import HeldSession, RetryPolicy, SessionError, SessionTransport
from mcp_sessions.client._messages import retry_after as _retry_after
from mcp_sessions.profiles._base import SPEC_SAFE_NOT_FOUND, SPEC_SAFE_REQUIRED

pytestmark = pytest.mark.anyio


Handler = Callable[[Any], Any]


class ScriptedServer:
    """A tiny MCP server with sessions behind httpx2.MockTransport; ``script(body)`` may override any answer
    (to ``on``, the one method it answers, when given) by returning one, or a coroutine that gives one."""

    def __init__(self, script: Handler | None = None, *, on: str | None = None, advertise: bool = True) -> None:
        self.script = script
        self.on = on
        self.advertise = advertise
        self.created = 0
        self.deleted: list[str] = []
        self.requests: list[tuple[httpx2.Headers, Any]] = []

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.requests.append((request.headers, body))
        if self.script is not None and (self.on is None or (isinstance(body, dict) and body["method"] == self.on)):
            answer = self.script(body)
            if answer is not None:
                return await answer if not isinstance(answer, httpx2.Response) else answer
        if isinstance(body, list):
            return httpx2.Response(200, json=[self.result(m) for m in body if "id" in m])
        if "id" not in body:
            return httpx2.Response(202)
        return httpx2.Response(200, json=self.result(body))

    def result(self, message: dict[str, Any]) -> dict[str, Any]:
        method = message["method"]
        if method == "sessions/create":
            self.created += 1
            return rpc_result(message, {"session": {"sessionId": f"tok-{self.created}", "expiresAt": FUTURE}})
        if method == "sessions/delete":
            self.deleted.append(sent_session(message)["sessionId"])
            return rpc_result(message, {})
        if method in ("server/discover", "initialize"):
            capabilities: dict[str, Any] = {"tools": {}}
            if self.advertise:
                capabilities["sessions"] = {}
            return rpc_result(message, {"capabilities": capabilities})
        session = sent_session(message)
        result: dict[str, Any] = {"content": []}
        if isinstance(session, dict):
            result["_meta"] = {SESSION_KEY: {**session, "state": f"state-{len(self.requests)}", "expiresAt": FUTURE}}
        return rpc_result(message, result)


FUTURE = "2099-01-01T00:00:00Z"


def rpc_result(message: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def rpc_error(message: dict[str, Any], code: int, text: str = "error", data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": text}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": message["id"], "error": error}


def sse(*messages: Any) -> bytes:
    return b"".join(b"event: message\ndata: " + json.dumps(m).encode() + b"\n\n" for m in messages)


def call(name: str = "count", /, id: Any = 1, **meta: Any) -> dict[str, Any]:
    return modern_request("tools/call", {"name": name, "arguments": {}}, id=id, meta=meta or None)


async def post(
    shim: SessionTransport, body: Any, *, modern: bool = True, headers: dict[str, str] | None = None
) -> httpx2.Response:
    sent = modern_headers(body) if modern and isinstance(body, dict) else {"Content-Type": "application/json"}
    sent.update(headers or {})
    async with httpx2.AsyncClient(transport=shim) as http:
        return await http.post("http://mcp.test/mcp", json=body, headers=sent)


def scripted(server: ScriptedServer, **options: Any) -> SessionTransport:
    options.setdefault("retry", FAST)
    return SessionTransport(httpx2.MockTransport(server), **options)


STAMPING = [
    pytest.param(call(), {"sessionId": "tok-1", "state": "st"}, id="request"),
    pytest.param(
        modern_request("notifications/progress", {"progressToken": 1, "progress": 1}, id=None),
        {"sessionId": "tok-1", "state": "st"},
        id="notification",
    ),
    pytest.param({"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"sessionId": "tok-1", "state": "st"}, id="no params"),
    pytest.param(modern_request("sessions/create"), "absent", id="sessions/create"),
    pytest.param(modern_request("server/discover"), "absent", id="discover"),
    pytest.param({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, "absent", id="initialize"),
    pytest.param(call(**{SESSION_KEY: {"sessionId": "mine"}}), {"sessionId": "mine"}, id="own session"),
    pytest.param(call(**{SESSION_KEY: None}), None, id="explicit null opts out"),
    pytest.param({"jsonrpc": "2.0", "id": 1, "method": "x/y", "params": [1]}, "absent", id="positional params"),
]


@pytest.mark.parametrize(("body", "expected"), STAMPING)
async def test_what_gets_stamped(body: dict[str, Any], expected: Any) -> None:
    server = ScriptedServer()
    shim = scripted(server, session=HeldSession("tok-1", state="st"))
    await post(shim, body)

    [(headers, seen)] = server.requests
    assert sent_session(seen) == expected
    assert headers["content-length"] == str(len(json.dumps(seen, separators=(",", ":"), ensure_ascii=False)))
    if expected != {"sessionId": "tok-1", "state": "st"}:
        assert seen == body  # not stamped: the caller's bytes, exactly
    else:  # everything else in _meta (the 2026-07-28 envelope) is kept
        other_meta = {k: v for k, v in seen["params"]["_meta"].items() if k != SESSION_KEY}
        assert other_meta == (body.get("params") or {}).get("_meta", {})


async def test_a_batch_gets_the_session_on_every_element_and_echoes_are_read() -> None:
    server = ScriptedServer()
    shim = scripted(server, session=HeldSession("tok-1"))
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "count"}},
    ]
    response = await post(shim, batch, modern=False, headers={"Mcp-Session-Id": "transport-1"})

    [(headers, seen)] = server.requests
    assert [sent_session(m) for m in seen] == [{"sessionId": "tok-1"}] * 3
    assert headers["mcp-session-id"] == "transport-1"  # 2025-era: the server's transport session, untouched
    assert len(response.json()) == 2
    assert shim.session.state == "state-1"
    assert shim.session.expires_at == datetime(2099, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("modern", "own", "expected"),
    [
        (True, None, "tok-1"),
        (True, "mine", "mine"),
        (False, None, "transport-1"),
        (False, "mine", "transport-1"),
    ],
)
async def test_mcp_session_id_header(modern: bool, own: str | None, expected: str) -> None:
    server = ScriptedServer()
    shim = scripted(server, session=HeldSession("tok-1"))
    body = call(**({SESSION_KEY: {"sessionId": own}} if own else {}))
    headers = {} if modern else {"Mcp-Session-Id": "transport-1", "Mcp-Protocol-Version": LEGACY}
    if modern:
        headers["Mcp-Session-Id"] = "stale"  # whatever was there, the header mirrors the session on 2026-07-28
    await post(shim, body, modern=modern, headers=headers)

    [(sent_headers, _)] = server.requests
    assert sent_headers.get_list("mcp-session-id") == [expected]


async def test_non_json_rpc_posts_pass_through_untouched() -> None:
    server = ScriptedServer(lambda body: httpx2.Response(200, json={"ok": True}))
    shim = scripted(server, session=HeldSession("tok-1"))
    response = await post(shim, {"method": "card", "value": 1}, modern=False)

    assert response.json() == {"ok": True}
    assert server.requests[0][1] == {"method": "card", "value": 1}


async def test_accept_encoding_is_cut_to_what_the_shim_can_read() -> None:
    server = ScriptedServer()
    shim = scripted(server, session=HeldSession("tok-1"))
    await post(shim, call(), headers={"Accept-Encoding": "br, gzip;q=0.9, zstd, deflate"})

    assert server.requests[0][0]["accept-encoding"] == "gzip;q=0.9, deflate"


async def test_a_gzip_json_echo_is_read_and_the_caller_gets_the_bytes_as_sent() -> None:
    def script(body: Any) -> httpx2.Response | None:
        message = ScriptedServer().result(body)
        message["result"]["_meta"] = {SESSION_KEY: {"sessionId": "tok-1", "state": "zipped"}}
        compressed = gzip.compress(json.dumps(message).encode())
        return httpx2.Response(
            200, headers={"content-type": "application/json", "content-encoding": "gzip"}, content=compressed
        )

    shim = scripted(ScriptedServer(script, on="tools/call"), session=HeldSession("tok-1"))
    response = await post(shim, call())

    assert response.json()["result"]["_meta"][SESSION_KEY]["state"] == "zipped"
    assert shim.session.state == "zipped"


async def test_sse_is_relayed_as_it_arrives_and_the_echo_read() -> None:
    release = anyio.Event()

    def script(body: Any) -> httpx2.Response | None:

        async def stream() -> AsyncIterator[bytes]:
            yield sse({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})
            await release.wait()
            yield sse(ScriptedServer().result(body) | {"id": body["id"]})

        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

    shim = scripted(ScriptedServer(script, on="tools/call"), session=HeldSession("tok-1"))
    body = call()
    lines: list[str] = []
    with anyio.fail_after(WITHIN):  # a deadlock guard, not a timing assertion
        async with (
            httpx2.AsyncClient(transport=shim) as http,
            http.stream("POST", "http://mcp.test/mcp", json=body, headers=modern_headers(body)) as response,
        ):
            stream_lines = response.aiter_lines()
            while (line := await anext(stream_lines)) != "":
                lines.append(line)
            assert "progress" in lines[-1]  # the first event arrived while the server still holds the rest
            assert shim.session.state is None
            release.set()
            lines += [line async for line in stream_lines]

    assert shim.session.state == "state-0"
    assert any("state-0" in line for line in lines)


async def test_a_caller_that_stops_reading_closes_the_servers_stream() -> None:
    closed = anyio.Event()

    def script(body: Any) -> httpx2.Response | None:

        async def stream() -> AsyncIterator[bytes]:
            try:
                yield sse({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})
                await anyio.sleep_forever()
                yield b""
            finally:
                closed.set()

        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

    shim = scripted(ScriptedServer(script, on="tools/call"), session=HeldSession("tok-1"))
    body = call()
    with anyio.fail_after(WITHIN):  # a deadlock guard
        async with (
            httpx2.AsyncClient(transport=shim) as http,
            http.stream("POST", "http://mcp.test/mcp", json=body, headers=modern_headers(body)) as response,
        ):
            lines = response.aiter_lines()
            assert [await anext(lines), await anext(lines)][1].startswith('data: {"jsonrpc"')
        await closed.wait()  # leaving the block closed the stream, through the shim, down to the server's side


@pytest.mark.parametrize("code", [STORE_UNAVAILABLE, SESSION_NOT_FOUND, SPEC_SAFE_NOT_FOUND])
async def test_an_error_as_the_first_sse_event_is_retried(code: int) -> None:
    attempts = []

    def script(body: Any) -> httpx2.Response | None:
        attempts.append(sent_session(body)["sessionId"])
        if len(attempts) == 1:
            return httpx2.Response(
                200, headers={"content-type": "text/event-stream"}, content=sse(rpc_error(body, code))
            )
        return None

    server = ScriptedServer(script, on="tools/call")
    shim = scripted(server, session=HeldSession("tok-0"), recreate=True)
    response = await post(shim, call())

    assert "result" in json.loads(response.text)
    expected = ["tok-0", "tok-0"] if code == STORE_UNAVAILABLE else ["tok-0", "tok-1"]
    assert attempts == expected


async def test_an_sse_error_after_other_events_reaches_the_caller() -> None:
    def script(body: Any) -> httpx2.Response | None:
        progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
        content = sse(progress, rpc_error(body, SESSION_NOT_FOUND, "Session not found"))
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=content)

    server = ScriptedServer(script, on="tools/call")
    shim = scripted(server, session=HeldSession("tok-0"), recreate=True)
    response = await post(shim, call())

    assert "Session not found" in response.text  # already streaming: not retried
    assert shim.session.token is None  # but the session is dropped
    assert server.created == 0


async def test_retry_after_is_honoured_and_the_deadline_bounds_the_retries() -> None:
    attempts = []
    past = format_datetime(datetime.now(UTC) - timedelta(minutes=1), usegmt=True)

    def script(body: Any) -> httpx2.Response | None:
        attempts.append(1)
        return httpx2.Response(503, headers={"retry-after": past}, json=rpc_error(body, STORE_UNAVAILABLE))

    shim = scripted(ScriptedServer(script), session=HeldSession("tok-1"), retry=RetryPolicy(attempts=2))
    response = await post(shim, call())
    assert response.status_code == 503
    assert len(attempts) == 3

    attempts.clear()
    never = scripted(ScriptedServer(script), session=HeldSession("tok-1"), retry=RetryPolicy(deadline=0.0))
    response = await post(never, call())
    assert response.status_code == 503
    assert response.json()["error"]["code"] == STORE_UNAVAILABLE
    assert len(attempts) == 1


def test_retry_after_parsing() -> None:
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert _retry_after("3") == 3.0
    assert _retry_after(None) is None
    assert _retry_after("soon") is None
    assert 0 < (_retry_after(soon) or 0) <= 30


def test_retry_policy() -> None:
    policy = RetryPolicy(backoff=1.0, max_backoff=3.0, jitter=False)
    assert [policy.delay(n) for n in range(4)] == [1.0, 2.0, 3.0, 3.0]
    assert policy.delay(5, retry_after=7.0) == 7.0
    jittered = RetryPolicy(backoff=2.0, max_backoff=2.0)
    assert all(1.0 <= jittered.delay(0) <= 2.0 for _ in range(50))
    for bad in ({"attempts": -1}, {"backoff": 5.0, "max_backoff": 1.0}, {"deadline": -1.0}):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)


OVER_1_MIB = "sessions/create: the server's answer is over 1048576 bytes"


@pytest.mark.parametrize(
    ("answer", "status", "error"),
    [
        pytest.param(
            lambda body: httpx2.Response(400, json=rpc_error(body, -32602, "label too long")),
            400,
            {"code": -32602, "message": "label too long"},
            id="refused",
        ),
        pytest.param(
            lambda body: httpx2.Response(200, content=b"[" + b" " * (1 << 20) + b"]"),
            200,
            {"code": -32603, "message": OVER_1_MIB},
            id="an answer over 1 MiB, never read on",
        ),
    ],
)
async def test_a_failed_create_answers_the_callers_request_and_the_explicit_api_raises(
    answer: Callable[[Any], httpx2.Response], status: int, error: dict[str, Any]
) -> None:
    server = ScriptedServer(answer, on="sessions/create")
    shim = scripted(server)
    with pytest.raises(SessionError) as raised:
        await shim.create("http://mcp.test/mcp")
    assert (raised.value.code, raised.value.message) == (error["code"], error["message"])
    server.requests.clear()
    response = await post(shim, call(id="abc"))

    assert response.status_code == status
    assert response.json() == {"jsonrpc": "2.0", "id": "abc", "error": error}
    assert [body["method"] for _, body in server.requests] == ["sessions/create"]


async def test_a_server_that_does_not_know_sessions_create_gets_the_request_sessionless() -> None:
    server = ScriptedServer(
        lambda body: httpx2.Response(404, json=rpc_error(body, -32601, "Method not found")), on="sessions/create"
    )
    shim = scripted(server)
    first = await post(shim, call())
    second = await post(shim, call())

    assert "result" in first.json()
    assert "result" in second.json()
    assert [body["method"] for _, body in server.requests] == ["sessions/create", "tools/call", "tools/call"]
    assert shim.supports_sessions is False


@pytest.mark.parametrize("code", [SESSION_REQUIRED, SPEC_SAFE_REQUIRED], ids=["seeds", "spec-safe"])
@pytest.mark.parametrize("auto_create", [True, False])
async def test_session_required_creates_one_and_retries_once(auto_create: bool, code: int) -> None:
    def script(body: Any) -> httpx2.Response | None:
        if sent_session(body) == "absent":
            return httpx2.Response(200, json=rpc_error(body, code, "Session required"))
        return None

    server = ScriptedServer(script, on="tools/call", advertise=False)  # the server did not advertise: no lazy create
    shim = scripted(server, auto_create=auto_create)
    await post(shim, modern_request("server/discover"))
    response = await post(shim, call())

    methods = [body["method"] for _, body in server.requests]
    if auto_create:
        assert "result" in response.json()
        assert methods == ["server/discover", "tools/call", "sessions/create", "tools/call"]
    else:
        assert response.json()["error"]["code"] == code
        assert methods == ["server/discover", "tools/call"]


async def test_concurrent_first_requests_wait_for_one_create() -> None:
    release = anyio.Event()

    async def slow_create(body: Any) -> httpx2.Response:
        await release.wait()
        return httpx2.Response(200, json=ScriptedServer().result(body))

    server = ScriptedServer(slow_create, on="sessions/create")
    shim = scripted(server)
    async with httpx2.AsyncClient(transport=shim) as http, anyio.create_task_group() as tg:
        for n in range(4):
            body = call(id=n)
            tg.start_soon(partial(http.post, "http://mcp.test/mcp", json=body, headers=modern_headers(body)))
        while len(server.requests) < 1:
            await anyio.lowlevel.checkpoint()
        for _ in range(20):
            await anyio.lowlevel.checkpoint()  # let the other three reach the lock
        release.set()

    creates = [body for _, body in server.requests if body["method"] == "sessions/create"]
    assert len(creates) == 1
    assert {sent_session(body)["sessionId"] for _, body in server.requests if body["method"] == "tools/call"} == {
        "tok-1"
    }


async def test_delete_on_close_is_bounded_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    never = anyio.Event()

    async def hang(body: Any) -> httpx2.Response:
        await never.wait()
        raise AssertionError("unreachable")

    caplog.set_level(logging.WARNING, "mcp_sessions.client")
    shim = scripted(ScriptedServer(hang, on="sessions/delete"), delete_on_close=True, close_timeout=0.05)
    await post(shim, call())  # creates the session, and teaches the shim the endpoint
    assert shim.session.token == "tok-1"

    broken = scripted(
        ScriptedServer(lambda body: httpx2.Response(500), on="sessions/delete"),
        delete_on_close=True,
    )
    await post(broken, call())

    assert "no answer in 0.05 s" in caplog.text
    assert "could not delete session" in caplog.text
    assert "tok-1" not in caplog.text


async def test_an_on_change_hook_that_fails_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def boom(session: HeldSession) -> None:
        raise RuntimeError("disk full")

    shim = scripted(ScriptedServer(), on_change=boom)
    response = await post(shim, call())

    assert "result" in response.json()
    assert "the on_change hook failed" in caplog.text


async def test_explicit_create_needs_an_endpoint() -> None:
    shim = scripted(ScriptedServer())
    with pytest.raises(ValueError, match="pass url="):
        await shim.create()
    created = await shim.create("http://mcp.test/mcp", protocol_version=LEGACY)
    assert created.token == "tok-1"
    assert await shim.delete() is True


# -- the held session ------------------------------------------------------------------------------------------


def test_session_handle_round_trip_and_inspection() -> None:
    claims = {"sid": "abcdefghijklmnopqrstuvwx", "exp": 4_000_000_000}
    token = "eyJhbGciOiJIUzI1NiJ9." + b64(json.dumps(claims).encode()) + ".sig"
    handle = HeldSession(token, state="s", expires_at="2030-01-02T03:04:05Z", label="L")

    assert handle.id == "abcdefghijklmnopqrstuvwx"
    assert handle.claims == claims
    assert handle.active
    assert not handle.expired()
    assert handle.meta() == {"sessionId": token, "state": "s"}
    assert token not in repr(handle)
    assert "abcdefghijklmnopqrstuvwx" in repr(handle)
    assert handle.to_dict() == {"sessionId": token, "state": "s", "expiresAt": "2030-01-02T03:04:05Z", "label": "L"}
    again = HeldSession.from_dict(handle.to_dict())
    assert again.to_dict() == handle.to_dict()
    assert HeldSession.from_dict({"sessionId": "opaque", "expiresAt": "2030-01-02T03:04:05.250Z"}).id is None
    assert HeldSession("t", expires_at=datetime(2000, 1, 1)).expired()

    handle.clear()
    assert handle.to_dict() == {"label": "L"}
    assert not handle.active
    with pytest.raises(ValueError):
        handle.meta()
    for bad in ({"sessionId": 5}, {"expiresAt": "tomorrow"}, {"expiresAt": "2030-01-02T03:04:05"}):
        with pytest.raises((ValueError, TypeError)):
            HeldSession.from_dict(bad)


def test_session_error_never_shows_the_token() -> None:
    error = SessionError(SESSION_NOT_FOUND, "Session not found", {"sessionId": "secret-token"})
    assert "secret-token" not in str(error)
    assert "secret-token" not in repr(error)
    assert error.code == SESSION_NOT_FOUND
