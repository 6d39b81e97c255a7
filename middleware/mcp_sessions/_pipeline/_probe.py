"""The probe, the pipeline's stage before an answer of its own: it asks the app it wraps whether it takes the request.

The middleware answers some requests without forwarding them (``sessions/create``, a ``-32043``…). Each of
them is first put to the wrapped app in the same process, so that the server's own checks judge it: its
allowed hosts and origins, its ``Accept`` and content-type rules, its body limit, its protocol versions, its
transport session, its auth where the app holds it. It goes as a probe: the request's own headers, id and
params, with a method no server has, ``mcp-sessions/probe``, so that the probe has no effect. A server that
answers "method not found" has accepted everything before its dispatch, and only then does the middleware
answer. Any other answer (a 421 for a host it does not serve, a 406, a 400 for a protocol version it does
not speak, a 404 for a transport session it lost) is the client's answer, as the server sent it.

The probe carries no trace context (``traceparent``, ``tracestate`` and ``baggage`` are left out of its
``_meta``) and runs under an unsampled parent with instrumentation suppressed, so a parent-based sampler
(OpenTelemetry's default) records none of the server's spans for it, and no instrumented HTTP client sends a
trace context on with it: traces show the request the middleware answered, not the question.

A gateway asks the same way: the app it wraps is the proxy, so the question goes to the upstream server.
Its upstream never sees a session (the gateway answers for sessions): the probe's params are then the
request's ``_meta`` alone, without any wire's session member, so that no token, state or id in params
(``sessions/delete``'s, ``session/resume``'s) reaches it.

The probe is bounded: its answer is read up to 256 KiB, for ``probe_timeout`` seconds at most (then the
client gets ``-32014`` with HTTP 504 and ``Retry-After``, as from a gateway whose upstream did not answer in
time: nothing the server did not accept is answered), and, given the client's ``receive`` (the gateway's
way, where a probe holds an upstream connection), while its client is there: a client that disconnects ends
it, and nothing is answered. Either way the app's call is cancelled and nothing of the probe stays behind: no
task, and in a gateway no upstream connection.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

import anyio
import anyio.lowlevel
from opentelemetry import context, trace
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._asgi import header
from .._wire import jsonrpc, store_unavailable
from .._wire.protocol import (
    INVALID_PARAMS,
    MCP_METHOD_HEADER,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UPSTREAM_UNAVAILABLE,
)
from .._wire.sse import SSERewriter
from ._response import uncoded

DEFAULT_PROBE_TIMEOUT: Final = 30.0
"""How long the middleware waits for the server's verdict by default (``probe_timeout``): a server answers
an unknown method at its dispatch, at once; this leaves room for a slow auth check, not for a hang."""
CLIENT_CLOSED: Final = 499
"""The status (nginx's) of an answer to a client that left while the server was asked: never sent."""
PROBE_METHOD: Final = "mcp-sessions/probe"
_PROBE_ID: Final = "mcp-sessions-probe"
_MAX_ANSWER: Final = 256 * 1024
_MEMBERS: Final = frozenset({"jsonrpc", "id", "params"})
_TRACE_KEYS: Final = frozenset({"traceparent", "tracestate", "baggage"})
_LEFT_OUT: Final = frozenset({b"mcp-name", b"content-length", *(key.encode() for key in _TRACE_KEYS)})
# A valid parent that is not sampled: under it, a parent-based sampler records nothing. Instrumentations
# (httpx's, in a gateway) are suppressed as well, by the key OpenTelemetry's own exporters set around their
# requests: none makes a span of the probe, nor sends this made-up parent on as a traceparent.
_PROBE_CONTEXT: Final = context.set_value(
    _SUPPRESS_INSTRUMENTATION_KEY,
    True,
    trace.set_span_in_context(
        trace.NonRecordingSpan(
            trace.SpanContext(trace_id=1, span_id=1, is_remote=False, trace_flags=trace.TraceFlags(0))
        )
    ),
)


@dataclass(frozen=True)
class Rejection:
    """The answer the wrapped server gave instead of the middleware's.

    ``status``, ``headers`` and ``body`` are the server's bytes; ``code`` and
    ``message`` are the JSON-RPC error in the body, if it has one, and
    ``reason`` a low-cardinality name for logs and telemetry.
    """

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    reason: str
    code: int | None = None
    message: str | None = None

    async def send(self, send: Send) -> None:
        """Send this answer as a complete HTTP response (none to a client that is gone)."""
        if self.status == CLIENT_CLOSED:
            return
        await send({"type": "http.response.start", "status": self.status, "headers": list(self.headers)})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


def error_answer(
    status: int,
    code: int,
    message: str,
    reason: str,
    request_id: object = None,
    *extra: tuple[bytes, bytes],
    data: object = None,
) -> Rejection:
    """A JSON-RPC error (with ``data``, if any) answered with HTTP ``status``, its id the request's if one can repeat
    it; ``extra`` headers after the body's own."""
    body = jsonrpc.dumps(jsonrpc.error(jsonrpc.echoable_id(request_id), code, message, data))
    headers = ((b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra)
    return Rejection(status, headers, body, reason, code, message)


MAX_NESTING: Final = 512
"""The deepest body (arrays and objects inside each other) the middleware answers itself."""
_TOO_DEEP: Final = error_answer(400, PARSE_ERROR, "Parse error: nested too deep", "too_deep")
_CLIENT_GONE: Final = Rejection(CLIENT_CLOSED, (), b"", "client_gone")


async def ask_server(
    app: ASGIApp,
    scope: Scope,
    message: object,
    body: bytes,
    *,
    hidden: frozenset[str] | None = None,
    client: Receive | None = None,
    seconds: float = DEFAULT_PROBE_TIMEOUT,
    retry_after: bytes = b"1",
) -> Rejection | None:
    """``None`` when ``app`` takes the request up to its dispatch, else its answer (see the module).

    ``client`` is the request's own ``receive``, its body read: a disconnect there ends the probe. Past
    ``seconds`` the answer is a 504 (``Retry-After``: ``retry_after``).

    ``message`` is the request's parsed body, one message or a batch (then the probe is a batch of one, in
    place of the first message), and ``body`` its bytes, whose encoding the probe keeps (a byte-order mark,
    UTF-16 or UTF-32 are the server's parser's to refuse). A body nested deeper than :data:`MAX_NESTING` is
    refused without asking (-32700, HTTP 400): no MCP message comes near it, and how deep a server's parser
    reads depends on its stack. ``hidden`` (a gateway's): the ``_meta`` keys of the session wires; the probe's
    params are then the request's ``_meta`` alone, without them.
    """
    if _nesting(message) > MAX_NESTING:
        return _TOO_DEEP
    first = message[0] if isinstance(message, list) and message else message
    first = first if isinstance(first, dict) else {}
    # The first message's JSON-RPC members as sent (any other, such as a wire's session member, is the
    # middleware's to strip before forwarding), with the probe's method.
    probe: dict[str, object] = {"id": _PROBE_ID, **{k: v for k, v in first.items() if k in _MEMBERS}}
    probe["method"] = PROBE_METHOD
    if isinstance(params := probe.get("params"), dict):
        probe["params"] = _probe_params(params, hidden)
    # ASCII: a lone surrogate the client sent reaches the server's parser as an escape of it
    text = json.dumps([probe] if isinstance(message, list) else probe, separators=(",", ":"))
    body = text.encode(json.detect_encoding(body))
    method = first.get("method")  # an Mcp-Method that names another method is the server's to refuse
    named = method.encode("utf-8", "surrogatepass") if isinstance(method, str) else None
    headers = uncoded(
        (name, PROBE_METHOD.encode() if name == MCP_METHOD_HEADER and value == named else value)
        for name, value in scope["headers"]
        if name not in _LEFT_OUT
    )
    headers.append((b"content-length", str(len(body)).encode()))
    answer = _Answer(probe["id"])
    attached = context.attach(_PROBE_CONTEXT)
    try:
        await answer.read(app, {**scope, "headers": headers}, body, client, seconds)
    finally:
        context.detach(attached)
    if answer.gone:
        return _CLIENT_GONE
    if answer.late:
        return unavailable(504, "The server did not answer in time", retry_after, first.get("id"), "probe_timeout")
    return answer.verdict()


def store_refused(error: BaseException, retry_after: bytes, request_id: object = None) -> Rejection:
    """The retryable -32010 with HTTP 503 and ``Retry-After`` for a store that failed or stalled (``error``), as the
    sessions answer it (:func:`~mcp_sessions._wire.jsonrpc.store_unavailable`, which logs it once an interval)."""
    refusal = store_unavailable(error)
    return error_answer(503, refusal.code, refusal.message, refusal.reason, request_id, (b"retry-after", retry_after))


def unavailable(status: int, message: str, retry_after: bytes, request_id: object, reason: str) -> Rejection:
    """``-32014``, retryable, with ``Retry-After``: a server (a gateway's upstream) that did not answer in time."""
    return error_answer(status, UPSTREAM_UNAVAILABLE, message, reason, request_id, (b"retry-after", retry_after))


def _probe_params(params: dict[str, object], hidden: frozenset[str] | None) -> dict[str, object]:
    """The request's params for the probe: without trace context in ``_meta``; with ``hidden``, ``_meta`` alone,
    without those keys either."""
    left_out = _TRACE_KEYS if hidden is None else _TRACE_KEYS | hidden
    kept = dict(params) if hidden is None else {key: value for key, value in params.items() if key == "_meta"}
    meta = jsonrpc.meta(kept)
    if meta is not None:
        kept["_meta"] = {key: value for key, value in meta.items() if key not in left_out}
    return kept


def _nesting(message: object) -> int:
    """How deep arrays and objects nest in ``message``, without recursion."""
    deepest, level = 0, [(message, 1)]
    while level:
        value, depth = level.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            level.extend((child, depth + 1) for child in children)
    return deepest


class _Answer:
    """The app's answer to the probe, read until the probe's own response arrives or the response ends."""

    def __init__(self, probe_id: object) -> None:
        self._probe_id = probe_id
        self._found: list[object] = []
        self._received = bytearray()
        self._events: SSERewriter | None = None
        self._scope = anyio.CancelScope()
        self._answered = anyio.Event()
        self.status = 500
        self.headers: list[tuple[bytes, bytes]] = []
        self.gone = False
        """The client disconnected before the answer was in."""
        self.late = False
        """The deadline passed before the answer was in."""

    async def read(self, app: ASGIApp, scope: Scope, body: bytes, client: Receive | None, seconds: float) -> None:
        """Call ``app`` with the probe until its answer is in, the client leaves or ``seconds`` pass."""
        sent = False
        failed: list[Exception] = []

        async def receive() -> Message:  # the body, then a disconnect once the answer is in, as a client does
            nonlocal sent
            if sent:
                await self._answered.wait()
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        with anyio.move_on_after(seconds) as deadline:
            async with anyio.create_task_group() as group:
                if client is not None:
                    group.start_soon(self._watch, client)
                try:
                    with self._scope:
                        await app(scope, receive, self._send)
                except Exception as exc:  # raised as it came, not in the task group's ExceptionGroup
                    failed.append(exc)
                group.cancel_scope.cancel()  # the watcher: the answer is in
        if failed:
            raise failed[0]
        self.late = deadline.cancelled_caught and not (self._found or self._answered.is_set())

    async def _watch(self, client: Receive) -> None:
        """End the probe when the client disconnects (its body read, ``receive`` says nothing else)."""
        while (await client())["type"] != "http.disconnect":
            pass
        self.gone = True
        self._scope.cancel()

    async def _send(self, message: Message) -> None:
        if message["type"] == "http.response.start":  # names lower-cased, should the app send them otherwise
            self.status = message["status"]
            self.headers = [(bytes(name).lower(), value) for name, value in message.get("headers", ())]
            if (header(self.headers, b"content-type") or b"").startswith(b"text/event-stream"):
                self._events = SSERewriter(self._collect)
            return
        chunk = message.get("body", b"")
        self._received += chunk
        if self._events is not None:
            self._events.feed(chunk)
        if self._found or len(self._received) > _MAX_ANSWER:
            self._scope.cancel()  # answered: an event stream the app keeps open is not waited for
            await anyio.lowlevel.checkpoint()  # delivered here, in the app's send, should it never wait itself
        elif not message.get("more_body", False):
            self._answered.set()

    def _collect(self, data: str) -> None:  # keeps the event that answers the probe
        if isinstance(message := _parsed(data), dict) and message.get("id") == self._probe_id:
            self._found.append(message)

    def verdict(self) -> Rejection | None:
        found = self._found
        if self._events is None:
            parsed = _parsed(self._received)
            found = parsed if isinstance(parsed, list) else [parsed]
        errors = [m for m in found if isinstance(m, dict) and isinstance(m.get("error"), dict)]
        # the probe's own error; else the one a refusal of the whole body has (``id: null``)
        error: dict[str, object] = next(
            (m["error"] for m in errors if m.get("id") == self._probe_id), errors[0]["error"] if errors else {}
        )
        code = error.get("code")
        if code == METHOD_NOT_FOUND or (code == INVALID_PARAMS and self.status == 200):
            return None  # dispatched: the mcp SDK 1.x answers an unknown method -32602, in a 200 of the 2025 wire
        headers = [(n, v) for n, v in self.headers if n != b"content-length"]
        headers.append((b"content-length", str(len(self._received)).encode()))
        message = error.get("message")
        return Rejection(
            self.status,
            tuple(headers),
            bytes(self._received),
            "server_refused",
            code if type(code) is int else None,
            message if isinstance(message, str) else None,
        )


def _parsed(data: str | bytes | bytearray) -> object:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None
