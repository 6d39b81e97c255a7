"""A table of bad requests to the quickstart app, in process: exact status, code, and whether a tool ran.

Each row is one raw HTTP request (headers and body). The quickstart's ``build_app``
serves an ``MCPServer`` that gets two recording tools (``record``, and
``record_required`` which the middleware requires a session for), so each row
can assert that a refused request never reached a tool. No row may ever be a 500.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, NoReturn
from urllib.parse import urlsplit

import httpx
import pytest
from examples import quickstart
from mcp.server.mcpserver import MCPServer

from _mcp import NOT_FOUND_MESSAGE
from conftest import SECRET, in_process, serve
from mcp_sessions import KeySet, get_session
from mcp_sessions.stores import SessionStore, SessionStoreUnavailable

KEY = "io.modelcontextprotocol/session"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}

_runs_lock = threading.Lock()
RUNS: list[tuple[str, str | None]] = []


def recorded_runs() -> list[tuple[str, str | None]]:
    with _runs_lock:
        return list(RUNS)


def build_recording_server() -> MCPServer:
    """The quickstart's server plus two tools that record each run (and the session they saw)."""
    mcp = ORIGINAL_BUILD_SERVER()

    def record_run(name: str) -> str:
        session = get_session()
        with _runs_lock:
            RUNS.append((name, session.id if session is not None else None))
        return "recorded"

    @mcp.tool()
    async def record() -> str:
        """Record that this tool ran."""
        return record_run("record")

    @mcp.tool()
    async def record_required() -> str:
        """Record that this tool ran (the middleware requires a session for it)."""
        return record_run("record_required")

    return mcp


ORIGINAL_BUILD_SERVER = quickstart.build_server


def build_app(json_response: bool, **options: Any) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(quickstart, "build_server", build_recording_server)
        return quickstart.build_app(
            json_response=json_response,
            stateless=True,
            environ=ENVIRON,
            require_session_tools=quickstart.SESSION_TOOLS | {"record_required"},
            **options,
        )


@pytest.fixture(scope="module", params=["sse", "json"])
def server(request: pytest.FixtureRequest) -> Iterator[httpx.Client]:
    with in_process(build_app(json_response=request.param == "json")) as http:
        yield http


class UnavailableStore(SessionStore):
    """A store whose backend is down: every call raises the interface's own retryable error."""

    def __init__(self) -> None:
        self.calls = 0

    async def _fail(self, *args: Any, **kwargs: Any) -> NoReturn:
        self.calls += 1
        raise SessionStoreUnavailable("backend unreachable")

    create = touch = revoke = get = set = delete = incr = update = items = _fail


@pytest.fixture(scope="module", params=["sse", "json"])
def unavailable(request: pytest.FixtureRequest) -> Iterator[tuple[httpx.Client, UnavailableStore]]:
    store = UnavailableStore()
    with in_process(build_app(json_response=request.param == "json", store=store, retry_after=7)) as http:
        yield http, store


# -- raw requests ------------------------------------------------------------------


@dataclass
class Raw:
    """One HTTP request as sent on the wire."""

    headers: dict[str, str]
    body: bytes


def tool_call(name: str = "record", *, request_id: Any = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": name, "arguments": {}}}
    if request_id is not None:
        message["id"] = request_id
    return message


def with_session(message: dict[str, Any], session: Any, *, modern: bool = True) -> dict[str, Any]:
    params = message.setdefault("params", {})
    meta = params.setdefault("_meta", dict(ENVELOPE) if modern else {})
    meta[KEY] = session
    return message


def modern(message: dict[str, Any] | list[Any] | bytes, *, session_header: str | None = None, **headers: str) -> Raw:
    """A 2026-07-28 request: the envelope in ``_meta`` and the headers the SDK checks."""
    sent = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    sent["mcp-protocol-version"] = MODERN
    if isinstance(message, dict):
        sent["mcp-method"] = message["method"]
        params = message.setdefault("params", {})
        meta = params.setdefault("_meta", {}) if type(params) is dict else {}
        for name, value in ENVELOPE.items():
            meta.setdefault(name, value)
        if message["method"] == "tools/call":
            sent["mcp-name"] = params["name"]
        session = meta.get(KEY)
        # Clients mirror the id in the header; one that cannot be a header value is simply not mirrored.
        if session_header is None and type(session) is dict and _visible_ascii(session.get("sessionId")):
            session_header = session["sessionId"]
    if session_header is not None:
        sent["mcp-session-id"] = session_header
    sent.update({name.replace("_", "-"): value for name, value in headers.items()})
    return Raw(sent, message if isinstance(message, bytes) else json.dumps(message).encode())


def _visible_ascii(value: Any) -> bool:
    return type(value) is str and value != "" and all(0x21 <= ord(c) <= 0x7E for c in value)


def legacy(message: dict[str, Any] | list[Any] | bytes, **headers: str) -> Raw:
    """A 2025-11-25 request to the stateless quickstart (no handshake needed)."""
    sent = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    sent["mcp-protocol-version"] = LEGACY
    sent.update({name.replace("_", "-"): value for name, value in headers.items()})
    return Raw(sent, message if isinstance(message, bytes) else json.dumps(message).encode())


@dataclass
class Context:
    """What a row needs to build its request: fresh sessions from the server under test."""

    client: httpx.Client
    base_url: str
    keys: KeySet = field(default_factory=lambda: KeySet.from_secret(SECRET))

    def post(self, raw: Raw) -> httpx.Response:
        return self.client.post(self.base_url + "/mcp", content=raw.body, headers=raw.headers)

    def session(self) -> dict[str, Any]:
        response = self.post(modern({"jsonrpc": "2.0", "id": "c", "method": "sessions/create"}))
        assert response.status_code == 200, response.text
        session: dict[str, Any] = response.json()["result"]["session"]
        return {"sessionId": session["sessionId"]}

    def session_with_state(self) -> dict[str, Any]:
        session = self.session()
        set_mode = with_session(tool_call("set_mode"), session)
        set_mode["params"]["arguments"] = {"mode": "fast"}
        message = reply(self.post(modern(set_mode)))
        echo: dict[str, Any] = message["result"]["_meta"][KEY]
        assert echo["state"]
        return {"sessionId": session["sessionId"], "state": echo["state"]}

    def deleted_session(self) -> dict[str, Any]:
        session = self.session()
        response = self.post(modern(with_session({"jsonrpc": "2.0", "id": "d", "method": "sessions/delete"}, session)))
        assert response.json()["result"] == {"resultType": "complete"}
        return session


def reply(response: httpx.Response) -> Any:
    """The JSON-RPC answer of a response (JSON body, or the last SSE event that carries data)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        blocks = [b for b in response.text.replace("\r\n", "\n").split("\n\n") if "data:" in b]
        data = "\n".join(line[5:].lstrip(" ") for line in blocks[-1].split("\n") if line.startswith("data:"))
        return json.loads(data)
    return response.json() if response.content else None


def codes(answer: Any) -> Any:
    if answer is None:
        return None
    if isinstance(answer, list):
        return [codes(element) for element in answer]
    error = answer.get("error")
    return None if error is None else error["code"]


# -- the table ---------------------------------------------------------------------

NO_SESSION: Any = object()
OTHER_SECRET = "another-deployment-secret-0123456789abcdef"
FIVE_MB = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"record","pad":"'
    + b"x" * (5 * 1024 * 1024)
    + b'"}}'
)


def call(session: Any = NO_SESSION, name: str = "record", *, request_id: Any = 1, **headers: str) -> Raw:
    """A 2026-07-28 ``tools/call``, with ``session`` (raw) as the session metadata unless it is NO_SESSION."""
    message = tool_call(name, request_id=request_id)
    return modern(message if session is NO_SESSION else with_session(message, session), **headers)


def old_call(session: Any = NO_SESSION, name: str = "record", *, request_id: Any = 1, **headers: str) -> Raw:
    """The same on the 2025-11-25 path."""
    message = tool_call(name, request_id=request_id)
    return legacy(message if session is NO_SESSION else with_session(message, session, modern=False), **headers)


def create(params: Any = None, session: Any = NO_SESSION, *, era: str = "modern", **headers: str) -> Raw:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}
    if params is not None:
        message["params"] = params
    if era == "legacy":
        return legacy(message if session is NO_SESSION else with_session(message, session, modern=False))
    return modern(message if session is NO_SESSION else with_session(message, session), **headers)


def delete(session: Any = NO_SESSION) -> Raw:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 2, "method": "sessions/delete"}
    return modern(message if session is NO_SESSION else with_session(message, session))


def _forged(ctx: Context) -> str:
    return KeySet.from_secret(OTHER_SECRET).mint_session_token(ttl=600)[0]


def bad_id(make: Callable[[Context], str]) -> Callable[[Context], Raw]:
    return lambda ctx: call({"sessionId": make(ctx)})


def _batch_with_session_method(ctx: Context) -> Raw:
    return legacy([{"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}, tool_call(request_id=2)])


def _batch_with_delete(ctx: Context) -> Raw:
    delete = with_session({"jsonrpc": "2.0", "id": "d", "method": "sessions/delete"}, ctx.session(), modern=False)
    return legacy([with_session(tool_call(request_id="t"), ctx.session(), modern=False), delete])


def _batch_with_invalid_session(ctx: Context) -> Raw:
    good = with_session(tool_call(request_id=1), ctx.session(), modern=False)
    bad = with_session(tool_call(request_id=2), {"sessionId": "sess-invalid"}, modern=False)
    return legacy([good, bad, tool_call(request_id=3)])


def _modern_batch_with_session_method(ctx: Context) -> Raw:
    return modern([{"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}, tool_call(request_id=2)])


Row = tuple[str, Callable[[Context], Raw], int, Any, int]
ROWS: list[Row] = [
    # Baselines: the same requests done right run the tool.
    ("ok-modern-with-session", lambda c: call(c.session()), 200, None, 1),
    ("ok-legacy-with-session", lambda c: old_call(c.session()), 200, None, 1),
    ("ok-modern-sessionless", lambda c: call(), 200, None, 1),
    ("ok-required-tool-with-session", lambda c: call(c.session(), "record_required"), 200, None, 1),
    ("ok-with-valid-state", lambda c: call(c.session_with_state()), 200, None, 1),
    ("ok-unknown-fields-in-session-meta", lambda c: call({**c.session(), "x": 1}), 200, None, 1),
    ("ok-header-without-meta-is-ignored", lambda c: call(session_header=c.session()["sessionId"]), 200, None, 1),
    # A sessionId that is not a live session of this server.
    ("forged-sessionId", bad_id(_forged), 200, -32043, 0),
    ("garbage-sessionId", bad_id(lambda c: "sess-abc123"), 200, -32043, 0),
    ("jws-shaped-garbage-sessionId", bad_id(lambda c: "a.b.c"), 200, -32043, 0),
    ("empty-sessionId", bad_id(lambda c: ""), 200, -32043, 0),
    ("oversized-sessionId", bad_id(lambda c: "eyJ" + "A" * 10_000 + ".e30.AAAA"), 200, -32043, 0),
    ("control-chars-sessionId", bad_id(lambda c: "\x00\x1b[31m\n"), 200, -32043, 0),
    ("legacy-forged-sessionId", lambda c: old_call({"sessionId": _forged(c)}), 200, -32043, 0),
    # State that is not this session's.
    ("garbage-state", lambda c: call({**c.session(), "state": "eyJrIjoidiJ9"}), 200, -32043, 0),
    ("empty-state", lambda c: call({**c.session(), "state": ""}), 200, -32043, 0),
    # A session the operation requires is missing.
    ("missing-session-required-tool", lambda c: call(name="record_required"), 200, -32044, 0),
    ("null-session-required-tool", lambda c: call(None, "record_required"), 200, -32044, 0),
    ("legacy-missing-session-required-tool", lambda c: old_call(name="record_required"), 200, -32044, 0),
    ("delete-without-session", lambda c: delete(), 200, -32044, 0),
    # Mcp-Session-Id: compared on 2026-07-28 only.
    ("header-garbage-modern", lambda c: call(c.session(), session_header="x"), 400, -32020, 0),
    ("header-differs-legacy-ignored", lambda c: old_call(c.session(), mcp_session_id="transport-1"), 200, None, 1),
    # Session metadata of the wrong shape.
    ("sessionId-is-an-int", lambda c: call({"sessionId": 12345}), 400, -32600, 0),
    ("sessionId-is-null", lambda c: call({"sessionId": None}), 400, -32600, 0),
    ("sessionId-missing", lambda c: call({"state": "s"}), 400, -32600, 0),
    ("state-is-an-object", lambda c: call({**c.session(), "state": {"mode": "x"}}), 400, -32600, 0),
    ("legacy-meta-is-a-string", lambda c: old_call("token"), 200, -32600, 0),
    # sessions/create and sessions/delete misuse.
    ("create-with-session-meta", lambda c: create(session=c.session()), 400, -32600, 0),
    ("create-with-null-session-meta-is-fine", lambda c: create(session=None), 200, None, 0),
    ("legacy-create-with-session-meta", lambda c: create(session={"sessionId": "x"}, era="legacy"), 200, -32600, 0),
    ("create-params-not-object", lambda c: create([1]), 400, -32600, 0),  # the SDK's answer: not a request
    ("create-label-too-long", lambda c: create({"label": "x" * 257}), 400, -32602, 0),
    ("create-label-not-string", lambda c: create({"label": 7}), 400, -32602, 0),
    ("create-method-header-mismatch", lambda c: create(mcp_method="tools/list"), 400, -32020, 0),
    ("delete-unknown-session", lambda c: delete({"sessionId": "sess-unknown"}), 200, -32043, 0),
    ("delete-forged-session", lambda c: delete({"sessionId": _forged(c)}), 200, -32043, 0),
    ("delete-twice", lambda c: delete(c.deleted_session()), 200, -32043, 0),
    # Batches: mcp 2.3 refuses every batch, so the middleware answers as the SDK does.
    ("batch-with-sessions-create", _batch_with_session_method, 400, -32602, 0),
    ("batch-with-sessions-delete", _batch_with_delete, 400, -32602, 0),
    ("batch-with-an-invalid-session", _batch_with_invalid_session, 400, -32602, 0),
    ("modern-batch-with-sessions-create", _modern_batch_with_session_method, 400, -32600, 0),
    # Notifications get no JSON-RPC answer.
    ("notification-invalid-session", lambda c: call({"sessionId": "sess-x"}, request_id=None), 202, None, 0),
    ("notification-sessions-create", lambda c: modern({"jsonrpc": "2.0", "method": "sessions/create"}), 202, None, 0),
    # Bodies.
    ("body-5MB", lambda c: modern(FIVE_MB, mcp_method="tools/call", mcp_name="record"), 413, -32600, 0),
    ("legacy-body-5MB", lambda c: legacy(FIVE_MB), 413, -32600, 0),
    ("invalid-json", lambda c: modern(b'{"jsonrpc":"2.0","id":1,"method":', mcp_method="tools/call"), 400, -32700, 0),
    ("legacy-invalid-json", lambda c: legacy(b'{"jsonrpc": "2.0", "id": 1, "method"'), 400, -32700, 0),
]


@pytest.mark.parametrize(("build", "status", "code", "runs"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_bad_input(server: httpx.Client, build: Callable[[Context], Raw], status: int, code: Any, runs: int) -> None:
    ctx = Context(server, "")
    raw = build(ctx)
    before = len(recorded_runs())
    response = ctx.post(raw)
    assert response.status_code == status, response.text[:500]
    assert codes(reply(response)) == code, response.text[:500]
    assert len(recorded_runs()) - before == runs


def test_session_not_found_repeats_what_was_sent_cut_to_256(server: httpx.Client) -> None:
    sent = "eyJ" + "A" * 10_000 + ".e30.AAAA"
    response = Context(server, "").post(call({"sessionId": sent}, request_id=42))
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 42,
        "error": {"code": -32043, "message": NOT_FOUND_MESSAGE, "data": {"sessionId": sent[:256]}},
    }


def test_the_tool_sees_the_session_it_was_called_with(server: httpx.Client) -> None:
    ctx = Context(server, "")
    session = ctx.session()
    before = len(recorded_runs())
    response = ctx.post(call(session))
    assert response.status_code == 200
    sid = KeySet.from_secret(SECRET).verify_session_token(session["sessionId"]).session_id
    assert recorded_runs()[before:] == [("record", sid)]


@pytest.mark.parametrize("mode", ["sse", "json"])
def test_content_length_over_the_limit_is_answered_before_the_body_is_sent(mode: str) -> None:
    """A raw socket declares 5 MB and sends none of it: the 413 comes back anyway."""
    with (
        serve(build_app(json_response=mode == "json")) as base_url,
        socket.create_connection((urlsplit(base_url).hostname, urlsplit(base_url).port), timeout=10) as sock,
    ):
        sock.sendall(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\nContent-Length: 5242880\r\n\r\n"
        )
        received = b""
        while b"\r\n\r\n" not in received or not received.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    # uvicorn writes the phrase Python names: "Request Entity Too Large" before 3.13, "Content Too Large" since.
    assert head.split(b"\r\n")[0] == f"HTTP/1.1 413 {HTTPStatus(413).phrase}".encode()
    assert json.loads(body) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Request body too large (limit 4194304 bytes)"},
    }


# -- the store is unavailable ----------------------------------------------------------


def _valid() -> dict[str, str]:
    """A genuine session of this deployment (minted with its secret: create itself fails while the store is down)."""
    return {"sessionId": KeySet.from_secret(SECRET).mint_session_token(ttl=600)[0]}


def _legacy_batch(ctx: Context) -> Raw:
    return legacy([with_session(tool_call(request_id=1), _valid(), modern=False), tool_call(request_id=2)])


STORE_ROWS: list[Row] = [
    ("tool-call-with-session", lambda c: call(_valid()), 503, -32010, 0),
    ("legacy-tool-call-with-session", lambda c: old_call(_valid()), 503, -32010, 0),
    ("delete", lambda c: delete(_valid()), 503, -32010, 0),
    ("notification-with-session", lambda c: call(_valid(), request_id=None), 503, None, 0),
    # Sessionless traffic never needs the store, and neither does creating a session (it stores nothing).
    ("create", lambda c: create(), 200, None, 0),
    ("legacy-create", lambda c: create(era="legacy"), 200, None, 0),
    ("sessionless-tool-call", lambda c: call(), 200, None, 1),
    ("legacy-sessionless-tool-call", lambda c: old_call(), 200, None, 1),
    ("required-tool-without-session", lambda c: call(name="record_required"), 200, -32044, 0),
]


@pytest.mark.parametrize(
    ("build", "status", "code", "runs"), [row[1:] for row in STORE_ROWS], ids=[row[0] for row in STORE_ROWS]
)
def test_store_unavailable(
    unavailable: tuple[httpx.Client, UnavailableStore],
    build: Callable[[Context], Raw],
    status: int,
    code: Any,
    runs: int,
) -> None:
    http, store = unavailable
    ctx = Context(http, "")
    raw = build(ctx)
    before_runs, before_calls = len(recorded_runs()), store.calls
    response = ctx.post(raw)
    assert response.status_code == status, response.text[:500]
    assert codes(reply(response)) == code, response.text[:500]
    assert len(recorded_runs()) - before_runs == runs
    if status == 503:
        assert response.headers["retry-after"] == "7"
        assert store.calls - before_calls == 1
        assert "-32043" not in response.text  # a temporary failure is never SESSION_NOT_FOUND
    else:
        assert "retry-after" not in response.headers
        assert store.calls == before_calls


def test_a_batch_gets_the_servers_refusal_whatever_the_store(
    unavailable: tuple[httpx.Client, UnavailableStore],
) -> None:
    http, _ = unavailable
    ctx = Context(http, "")
    before = len(recorded_runs())
    response = ctx.post(_legacy_batch(ctx))
    # mcp 2.3 refuses every batch: its refusal, not a retryable -32010, since a retry cannot succeed.
    assert response.status_code == 400
    assert codes(reply(response)) == -32602
    assert "retry-after" not in response.headers
    assert len(recorded_runs()) == before


def test_store_unavailable_answer_is_retryable_and_exact(unavailable: tuple[httpx.Client, UnavailableStore]) -> None:
    http, _ = unavailable
    response = Context(http, "").post(call(_valid(), request_id=9))
    assert response.status_code == 503
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 9,
        "error": {"code": -32010, "message": "Session store unavailable, retry later"},
    }
