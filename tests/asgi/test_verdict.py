"""The probe the middleware puts to the app it wraps before an answer of its own (``mcp_sessions._pipeline._probe``).

What the app sees of it, and how its answer is read: through fake apps that record the probe or answer in
ways a real server may (an event stream that stays open, an answer without end, mcp 1.x's ``-32602``).
The real SDK's verdicts, in both eras, are in tests/e2e/test_guard_differential.py.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from opentelemetry import trace
from starlette.types import Message, Receive, Scope, Send

from _waits import WITHIN
from conftest import SECRET
from mcp_sessions import MCPSessionMiddleware
from mcp_sessions._pipeline._probe import PROBE_METHOD, ask_server
from mcp_sessions._wire.jsonrpc import MAX_DEPTH

from ._direct import Receiver, Sender

pytestmark = pytest.mark.anyio

TOOLS_CALL = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "count", "_meta": {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "k": 1}},
    "sessionId": "a wire's own member",
}
HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", b"999"),
    (b"mcp-method", b"tools/call"),
    (b"mcp-name", b"count"),
    (b"traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01"),
    (b"authorization", b"Bearer kept"),
]


def scope(headers: list[tuple[bytes, bytes]] = HEADERS) -> Scope:
    return {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}


def not_found(request_id: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "nope"}}).encode()


class Recorder:
    """Records the probe and answers it as configured (default: "method not found", as JSON)."""

    def __init__(self, status: int = 200, body: bytes | None = None) -> None:
        self.status, self.body = status, body
        self.scope: Scope = {}
        self.probe: Any = None
        self.sampled: bool | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self.probe = json.loads((await receive())["body"])
        self.sampled = trace.get_current_span().get_span_context().trace_flags.sampled
        first = self.probe[0] if isinstance(self.probe, list) else self.probe
        body = not_found(first["id"]) if self.body is None else self.body
        await send({"type": "http.response.start", "status": self.status, "headers": [(b"content-type", b"x")]})
        await send({"type": "http.response.body", "body": body})


async def test_the_probe_is_the_request_with_the_probes_method_and_nothing_the_middleware_would_not_forward() -> None:
    app = Recorder()
    assert await ask_server(app, scope(), TOOLS_CALL, json.dumps(TOOLS_CALL).encode()) is None
    assert app.probe == {
        "jsonrpc": "2.0",
        "id": 7,
        "method": PROBE_METHOD,
        "params": {"name": "count", "_meta": {"k": 1}},  # no trace context; the wire's member is not forwarded
    }
    headers = dict(app.scope["headers"])
    assert headers[b"mcp-method"] == PROBE_METHOD.encode()
    assert b"mcp-name" not in headers
    assert b"traceparent" not in headers
    assert headers[b"authorization"] == b"Bearer kept"
    assert int(headers[b"content-length"]) == len(json.dumps(app.probe, separators=(",", ":")))
    assert app.sampled is False  # under an unsampled parent: a parent-based sampler records none of it


async def test_an_mcp_method_naming_another_method_stays_for_the_server_to_refuse() -> None:
    app = Recorder()
    other = [(name, b"prompts/list" if name == b"mcp-method" else value) for name, value in HEADERS]
    await ask_server(app, scope(other), TOOLS_CALL, json.dumps(TOOLS_CALL).encode())
    assert dict(app.scope["headers"])[b"mcp-method"] == b"prompts/list"


async def test_a_batch_is_asked_with_a_batch_of_one_and_a_notification_with_an_id() -> None:
    app = Recorder()
    notification = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    assert await ask_server(app, scope(), [notification, TOOLS_CALL], b"[]") is None
    [probe] = app.probe
    assert probe == {"jsonrpc": "2.0", "id": "mcp-sessions-probe", "method": PROBE_METHOD, "params": {"requestId": 1}}


async def test_the_probe_keeps_the_bodys_encoding() -> None:
    app = Recorder()
    seen: list[bytes] = []

    async def raw(scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        seen.append(message["body"])
        await app(scope, Receiver(message["body"].decode("utf-16").encode()), send)

    body = json.dumps(TOOLS_CALL).encode("utf-16")
    assert await ask_server(raw, scope(), TOOLS_CALL, body) is None
    assert seen[0].startswith(b"\xff\xfe")
    assert seen[0].decode("utf-16").startswith('{"id":7')


@pytest.mark.parametrize(
    ("status", "body", "accepted"),
    [
        (200, not_found(7), True),
        (200, json.dumps({"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "x"}}).encode(), True),
        (400, json.dumps({"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "x"}}).encode(), False),
        (421, b"Invalid Host header", False),
        (200, json.dumps({"jsonrpc": "2.0", "id": 7, "result": {}}).encode(), False),
    ],
    ids=["method-not-found", "mcp-1x-invalid-params-in-200", "invalid-params-in-400", "host", "a-result"],
)
async def test_only_method_not_found_lets_the_middleware_answer(status: int, body: bytes, accepted: bool) -> None:
    rejection = await ask_server(Recorder(status, body), scope(), TOOLS_CALL, b"{}")
    if accepted:
        assert rejection is None
        return
    assert rejection is not None
    assert (rejection.status, rejection.body) == (status, body)
    assert dict(rejection.headers)[b"content-length"] == str(len(body)).encode()


async def test_an_event_stream_that_stays_open_is_read_until_the_probes_answer() -> None:
    async def stream(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b": hello\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"data: " + not_found(7) + b"\n\n", "more_body": True})
        await anyio.sleep_forever()  # a server that keeps the stream open

    with anyio.fail_after(WITHIN):
        assert await ask_server(stream, scope(), TOOLS_CALL, b"{}") is None


async def test_an_answer_without_end_is_read_to_a_bound() -> None:
    async def endless(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        while True:
            await send({"type": "http.response.body", "body": b": " + b"x" * 4096 + b"\n\n", "more_body": True})

    with anyio.fail_after(WITHIN):
        rejection = await ask_server(endless, scope(), TOOLS_CALL, b"{}")
    assert rejection is not None
    assert 256 * 1024 < len(rejection.body) < 300 * 1024


async def test_a_body_nested_past_the_limit_is_refused_without_asking() -> None:
    """Whatever its method: what the middleware cannot read, it cannot check, and it forwards nothing of it."""
    app = Recorder()

    def nested(depth: int) -> str:  # the message and its params are two levels
        return json.dumps({**TOOLS_CALL, "params": {"x": "@"}}).replace('"@"', "[" * (depth - 2) + "]" * (depth - 2))

    headers = {"content-type": "application/json"}
    transport = httpx.ASGITransport(MCPSessionMiddleware(app, secret=SECRET))  # no lifespan: the Recorder has none
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        refused = await http.post("/mcp", content=nested(MAX_DEPTH + 1), headers=headers)
        asked = app.probe
        await http.post("/mcp", content=nested(MAX_DEPTH), headers=headers)
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, -32700)
    assert asked is None
    assert app.probe is not None  # at the limit: read, and forwarded


class Unanswered:
    """An app that opens an event stream and never answers the probe; says whether its call ended."""

    def __init__(self) -> None:
        self.ended = anyio.Event()
        self.asked = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await receive()
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            await send({"type": "http.response.body", "body": b": waiting\n\n", "more_body": True})
            self.asked.set()
            await anyio.sleep_forever()
        finally:
            self.ended.set()


async def test_a_probe_never_answered_ends_at_its_deadline_retryable() -> None:
    app = Unanswered()
    with anyio.fail_after(5):  # well before the default 30 s: what is checked is that the 0.2 s holds
        rejection = await ask_server(app, scope(), TOOLS_CALL, b"{}", seconds=0.2, retry_after=b"3")
    assert rejection is not None
    assert (rejection.status, rejection.code) == (504, -32014)
    assert json.loads(rejection.body)["id"] == 7
    assert dict(rejection.headers)[b"retry-after"] == b"3"
    assert app.ended.is_set()  # the app's call is over: nothing of the probe is left running


async def test_a_client_that_leaves_ends_the_probe_and_nothing_is_answered() -> None:
    app = Unanswered()

    async def client() -> Message:
        await app.asked.wait()  # the client leaves once the app has the probe
        return {"type": "http.disconnect"}

    with anyio.fail_after(WITHIN):
        rejection = await ask_server(app, scope(), TOOLS_CALL, b"{}", client=client)
    assert rejection is not None
    assert (rejection.status, rejection.reason) == (499, "client_gone")
    assert app.ended.is_set()
    sender = Sender()
    await rejection.send(sender)
    assert sender.messages == []  # nobody to answer
