"""The express lane answers exactly as the pipeline would, and takes the usual request.

The lane (``_express.py``) is a short path for the usual request; everything
else, and anything unusual about a usual-looking request, goes to the whole
pipeline. These tests run each request through two middlewares that differ
only in that one has the lane switched off, and compare everything that leaves
them: the answer byte for byte, what the app received, and what the store
saw. Other tests pin that the lane is really taken where it should be, and
that the fast parser it reads with reads as the standard one does.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import re
from typing import Any

import anyio
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from opentelemetry import baggage, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from asgi.test_fuzz import (
    CLIENT_HEADERS,
    ENVELOPE,
    FUZZ,
    KEY,
    KEYS,
    LEGACY,
    MODERN,
    NOW,
    REVOKED,
    SIDS,
    STATES,
    TOKENS,
    VALID,
    Downstream,
    Outcome,
    bodies_json,
    encoded,
    json_values,
    mostly,
    pair_messages,
    requests,
    run,
    store,
    texts,
)
from mcp_sessions import MCPSessionMiddleware, SessionStoreUnavailable, get_session
from mcp_sessions import _jsonrpc as jsonrpc
from mcp_sessions._express import Declined, Exchange, Take
from mcp_sessions.stores import MemoryStore, SessionStatus

# Issued two hours ago and never used: with a one-hour idle timeout, the store ends it on its first use.
IDLE = KEYS.mint_session_token(ttl=86400, now=NOW - 7200)[0]


class App(Downstream):
    """Records what reaches it and answers one JSON-RPC result (or error): JSON (compact or not), SSE, or
    gzip'd JSON, in one body message or two."""

    def __init__(self, result: Any = None, *, shape: str = "compact", pieces: int = 2, status: int = 200) -> None:
        super().__init__(result)
        self.shape = shape
        self.pieces = pieces
        self.status = status
        self.calls: list[Any] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = await self.read(receive)
        session = get_session()
        state = scope.get("state", {}).get("mcp_session")
        # What the app sees: its body, its session, and the span and baggage it runs in.
        current = trace.get_current_span().get_span_context().is_valid
        self.calls.append(
            (
                body,
                None if session is None else session.id,
                None if state is None else state.id,
                current,
                baggage.get_baggage("session.id"),
            )
        )
        if self.shape == "raise":
            raise RuntimeError("the app failed")
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        request_id = parsed.get("id") if isinstance(parsed, dict) else None
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "result": self.result}
        if self.shape == "error":
            answer = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": "no"}}
        if self.shape == "sse":
            payload = b"event: message\ndata: " + json.dumps(answer).encode() + b"\n\n"
            content_type = b"text/event-stream"
        else:
            compact = self.shape != "pretty"
            payload = json.dumps(answer, separators=(",", ":") if compact else None, indent=None if compact else 1)
            payload = payload.encode("utf-8", "surrogatepass")
            content_type = b"application/json"
        headers = [(b"content-type", content_type)]
        if self.shape == "gzip":
            payload = gzip.compress(payload, mtime=0)
            headers.append((b"content-encoding", b"gzip"))
        headers.append((b"content-length", str(len(payload)).encode()))
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        if self.pieces == 1:
            await send({"type": "http.response.body", "body": payload})
            return
        half = len(payload) // 2  # in two pieces: the rewriter must gather them
        await send({"type": "http.response.body", "body": payload[:half], "more_body": True})
        await send({"type": "http.response.body", "body": payload[half:]})


class CountingStore(MemoryStore):
    """A MemoryStore that counts its touches, and can be down."""

    def __init__(self, *, down: bool = False) -> None:
        super().__init__()
        self.touches = 0
        self.down = down

    async def touch(self, session_id: str, **kwargs: Any) -> SessionStatus:
        self.touches += 1
        if self.down:
            raise SessionStoreUnavailable("down for the test")
        return await super().touch(session_id, **kwargs)


class Spy:
    """Stands in for the middleware's lane and records what it decided."""

    def __init__(self, lane: Take) -> None:
        self.lane = lane
        self.taken: list[bool] = []

    async def __call__(self, *args: Any) -> Exchange | Declined:
        outcome = await self.lane(*args)
        self.taken.append(type(outcome) is tuple)
        return outcome


def pair(app_of: Any, **options: Any) -> tuple[MCPSessionMiddleware, MCPSessionMiddleware]:
    """Two middlewares alike but for the lane, each with its own app and a store where REVOKED was deleted."""
    with_lane = MCPSessionMiddleware(app_of(), keys=KEYS, store=store(), **options)
    without = MCPSessionMiddleware(app_of(), keys=KEYS, store=store(), **options)
    without._express = None
    return with_lane, without


KNOWN = {token.encode() for token in [*TOKENS, IDLE]}
MINTED = re.compile(rb"eyJ[\w-]*\.[\w-]*\.[\w-]*")
TIMES = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def seen(outcome: Outcome, middleware: MCPSessionMiddleware) -> tuple[Any, ...]:
    """All that left the middleware; a session it minted, and any time, as a placeholder (they differ by run)."""
    app = middleware.app
    assert isinstance(app, App)
    body = MINTED.sub(lambda match: match[0] if match[0] in KNOWN else b"<minted>", outcome.body)
    body = TIMES.sub(b"<time>", body)
    headers = sorted((name, value) for name, value in outcome.headers.items() if name != b"content-length")
    return (outcome.status, headers, body, app.calls)


# -- the fast parser ----------------------------------------------------------------------------


def ordered(value: Any) -> Any:
    """A parsed value with objects as member lists and typed leaves: two parsers must agree on all of it."""
    if isinstance(value, dict):
        return [(name, ordered(member)) for name, member in value.items()]
    if isinstance(value, list):
        return [ordered(element) for element in value]
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


def standard(body: bytes) -> Any:
    """What the standard library reads; raises when it reads nothing."""
    return json.loads(body)


EDGE_BODIES = [
    b'{"a":1,"a":2,"b":3}',
    b'{"b":1,"a":2,"b":3}',
    b'{"a":NaN,"b":Infinity,"c":-Infinity}',
    b'{"a":1e400,"b":-0,"c":-0.0,"d":1E2,"e":0.1}',
    b'{"a":' + b"9" * 4300 + b"}",
    b'{"a":' + b"9" * 4301 + b"}",
    b'{"a":' + b"[" * 100 + b"]" * 100 + b"}",
    b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"a":"\xed\xa0\x80"}',  # a lone surrogate, UTF-8 encoded: the standard parser (surrogatepass) reads it
    b'{"a":"\xff"}',
    b'{"a":1} ',
    b'{"a":1}x',
    b'{"a":1}\x00',
    b'{"\xc3\xa9":"\xf0\x9f\x98\x80"}',
    b"{}",
    b"{",
]


@pytest.mark.parametrize("body", EDGE_BODIES, ids=range(len(EDGE_BODIES)))
def test_the_fast_parser_reads_the_edge_cases_as_the_standard_one_or_not_at_all(body: bytes) -> None:
    try:
        fast = jsonrpc.fast_loads(body)
    except ValueError:
        return  # the lane declines, and the pipeline reads it with the standard parser
    assert ordered(fast) == ordered(standard(body))


@FUZZ
@given(
    body=st.binary(max_size=300)
    | encoded(bodies_json)
    | pair_messages().map(lambda case: case[1].encode("utf-8", "surrogatepass"))
)
def test_what_the_fast_parser_reads_the_standard_one_reads_the_same_way(body: bytes) -> None:
    """The lane reads requests and responses with the fast parser: never a value the standard one would not give."""
    try:
        fast = jsonrpc.fast_loads(body)
    except ValueError:
        event("the fast parser refuses")
        return
    event("both read it")
    assert ordered(fast) == ordered(standard(body))


def test_the_fast_parser_is_the_one_the_sdk_reads_requests_with() -> None:
    """pydantic-core is installed wherever the mcp SDK is: the lane then reads as the server does."""
    from pydantic_core import from_json

    assert jsonrpc.fast_loads is from_json


# -- the lane against the pipeline --------------------------------------------------------------


@st.composite
def usual_requests(draw: st.DrawFn) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """Mostly the usual request, with every variation the lane must check, and its headers."""
    token = draw(mostly(st.sampled_from([*VALID, VALID[0], IDLE, REVOKED, None]), st.sampled_from(TOKENS) | texts))
    meta: dict[str, Any] = dict(ENVELOPE)
    if token is not None:
        named: dict[str, Any] = {"sessionId": token}
        if draw(st.integers(min_value=0, max_value=3)) == 0:
            named["state"] = draw(st.sampled_from([*STATES.values(), "x.y.z"]) | json_values)
        meta[KEY] = draw(mostly(st.just(named), st.just(None) | json_values))
    if draw(st.integers(min_value=0, max_value=5)) == 0:
        meta[draw(st.sampled_from(["openai/session", "vscode.conversationId", "sessionID"]))] = "conv-1"
    method = draw(
        st.sampled_from(["tools/call"] * 6 + ["sessions/create", "sessions/delete", "server/discover", "ping"])
    )
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": {"name": "t", "_meta": meta}}
    if draw(st.integers(min_value=0, max_value=7)) != 0:
        message["id"] = draw(
            mostly(st.integers(min_value=-(2**40), max_value=2**40), texts | st.sampled_from([1.5, True]))
        )
    body = json.dumps(message, ensure_ascii=draw(mostly(st.just(False), st.just(True))))
    body = body.encode("utf-8", "surrogatepass")
    headers = [(b"content-type", b"application/json"), *CLIENT_HEADERS]
    version = draw(st.sampled_from([MODERN, MODERN, LEGACY, None]))
    if version is not None:
        headers.append((b"mcp-protocol-version", version.encode()))
        headers += [(b"mcp-method", method.encode())] if version == MODERN else []
        headers += [(b"mcp-name", b"t")] if version == MODERN and method == "tools/call" else []
    header = draw(st.sampled_from(["none", "none", "same", "other", "transport"]))
    if header != "none":  # without a session in the body too: a header alone names none
        same = token if isinstance(token, str) else VALID[0]
        value = {"same": same, "other": VALID[1], "transport": "4f1c0c2d5b5e4b2f"}[header]
        headers.append((b"mcp-session-id", value.encode("utf-8", "surrogatepass")))
    if draw(st.integers(min_value=0, max_value=7)) == 0:
        headers.append((b"agent-session-id", b"goose-1"))
    return body, headers


results = st.sampled_from(
    [
        {"content": [{"type": "text", "text": "hi"}]},
        {"content": [], "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s"}}},
        {"_meta": {}},
        {"_meta": {KEY: {"sessionId": "theirs"}}},
        {"_meta": "not an object"},
        {"_meta": {"a": 1}, "isError": False},
        {},
    ]
) | st.dictionaries(texts, json_values, max_size=3)


@settings(FUZZ, max_examples=500)
@given(
    request=usual_requests(),
    result=results,
    shape=st.sampled_from(["compact"] * 4 + ["pretty", "sse", "gzip", "error"]),
    pieces=st.sampled_from([1, 1, 2]),
    require_session=st.booleans(),
    idle=st.booleans(),
    conversation_data=st.sampled_from(["off", "off", "anonymous"]),
)
def test_the_lane_answers_every_usual_request_as_the_pipeline_does(
    request: tuple[bytes, list[tuple[bytes, bytes]]],
    result: Any,
    shape: str,
    pieces: int,
    require_session: bool,
    idle: bool,
    conversation_data: Any,
) -> None:
    body, headers = request
    with_lane, without = pair(
        lambda: App(result, shape=shape, pieces=pieces),
        require_session=require_session,
        idle_ttl=3600 if idle else None,
        conversation_data=conversation_data,
    )
    assert with_lane._express is not None
    spy = Spy(with_lane._express)
    with_lane._express = spy  # type: ignore[assignment]
    taken = seen(run(with_lane, body, headers), with_lane)
    event(f"taken={spy.taken}")
    assert taken == seen(run(without, body, headers), without)


@settings(FUZZ, max_examples=200)
@given(request=requests(), require_session=st.booleans(), result=json_values)
def test_the_lane_answers_every_request_of_the_fuzzer_as_the_pipeline_does(
    request: tuple[bytes, list[tuple[bytes, bytes]], list[int], str], require_session: bool, result: Any
) -> None:
    """Anything at all, in any pieces, any method and encoding: the same answers, the same app calls."""
    body, headers, chunks, method = request
    with_lane, without = pair(lambda: App(result), require_session=require_session)
    one = seen(run(with_lane, body, headers, chunks=chunks, method=method), with_lane)
    assert one == seen(run(without, body, headers, chunks=chunks, method=method), without)


# -- the lane is taken, and hands back what the store refused -----------------------------------


def usual(token: str | None, *, request_id: Any = 7, header: str | None = None) -> tuple[bytes, list[Any]]:
    meta: dict[str, Any] = dict(ENVELOPE)
    if token is not None:
        meta[KEY] = {"sessionId": token}
    params = {"name": "t", "_meta": meta}
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
    headers = [(b"content-type", b"application/json"), *CLIENT_HEADERS, (b"mcp-protocol-version", MODERN.encode())]
    headers += [(b"mcp-method", b"tools/call"), (b"mcp-name", b"t")]
    if header is not None:
        headers.append((b"mcp-session-id", header.encode()))
    return body.encode(), headers


def lane_of(middleware: MCPSessionMiddleware) -> Spy:
    lane = middleware._express
    assert lane is not None
    spy = Spy(lane)
    middleware._express = spy  # type: ignore[assignment]
    return spy


@pytest.mark.parametrize(
    ("token", "header"),
    [(VALID[0], None), (VALID[0], VALID[0]), (None, None)],
    ids=["session", "session-and-its-header", "no-session"],
)
def test_the_usual_request_takes_the_lane(token: str | None, header: str | None) -> None:
    middleware = MCPSessionMiddleware(App({"content": []}), keys=KEYS)
    spy = lane_of(middleware)
    outcome = run(middleware, *usual(token, header=header))
    assert spy.taken == [True]
    assert outcome.forwarded and outcome.status == 200
    answer = json.loads(outcome.body)
    if token is None:
        assert "_meta" not in answer["result"]
    else:
        assert answer["result"]["_meta"][KEY]["sessionId"] == token
        assert answer["result"] == json.loads(outcome.body)["result"]
        app = middleware.app
        assert isinstance(app, App)
        assert app.calls[0][1:3] == (SIDS[token], SIDS[token])  # get_session() and request.state


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (usual(VALID[0], header=VALID[1])[0], "the header names another session"),
        (b' {"jsonrpc":"2.0","id":1,"method":"tools/call"}', "not an object from its first byte"),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools\\/call"}', "an escape"),
        (b'[{"jsonrpc":"2.0","id":1,"method":"tools/call"}]', "a batch"),
        (b'{"jsonrpc":"2.0","method":"notifications/progress"}', "a notification"),
        (b'{"jsonrpc":"2.0","id":1,"method":"sessions/create"}', "a local method"),
        (b'{"jsonrpc":"2.0","id":1,"method":"server/discover"}', "a result that advertises the wire"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_anything_unusual_goes_to_the_pipeline(body: bytes, why: str) -> None:
    middleware = MCPSessionMiddleware(App(), keys=KEYS)
    spy = lane_of(middleware)
    headers = usual(None)[1]
    if why == "the header names another session":
        headers = usual(VALID[0], header=VALID[1])[1]
    run(middleware, body, headers)
    assert spy.taken in ([False], [])  # [] when the lane raised for the pipeline, never here


@pytest.mark.parametrize("data", ["off", "anonymous"])
def test_a_host_conversation_takes_the_lane_unless_it_keeps_data(data: Any) -> None:
    """Without telemetry, a host's id changes nothing unless conversation_data keeps data for it."""
    middleware = MCPSessionMiddleware(App(), keys=KEYS, conversation_data=data)
    spy = lane_of(middleware)
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"openai/session":"c1"}}}'
    outcome = run(middleware, body, usual(None)[1])
    assert outcome.forwarded
    assert spy.taken == [data == "off"]
    app = middleware.app
    assert isinstance(app, App)
    assert (app.calls[0][1] is None) == (data == "off")  # with data: the conversation's session


@pytest.mark.parametrize(
    ("token", "down", "code"),
    [(REVOKED, False, -32043), (IDLE, False, -32043), (VALID[0], True, -32010)],
    ids=["revoked", "idle-expired", "store-down"],
)
def test_a_session_the_store_refuses_is_touched_once_and_answered_by_the_pipeline(
    token: str, down: bool, code: int
) -> None:
    """The lane verified the token and touched the store: the pipeline answers without touching it again."""
    answers = []
    for lane in (True, False):
        counting = CountingStore(down=down)
        anyio.run(functools.partial(counting.revoke, SIDS[REVOKED], expires_at=NOW + 3600))
        middleware = MCPSessionMiddleware(App(), keys=KEYS, store=counting, idle_ttl=3600)
        if not lane:
            middleware._express = None
        outcome = run(middleware, *usual(token))
        assert not outcome.forwarded
        assert counting.touches == 1
        answers.append((outcome.status, outcome.body))
        assert json.loads(outcome.body)["error"]["code"] == code
    assert answers[0] == answers[1]


def test_the_lane_is_not_built_where_the_pipeline_does_more() -> None:
    from mcp_sessions.profiles import DRAFT, STRAWMAN

    assert MCPSessionMiddleware(App(), keys=KEYS, profiles=[DRAFT, STRAWMAN])._express is None
    assert MCPSessionMiddleware(App(), keys=KEYS, profiles=[STRAWMAN])._express is None  # revocation is "no session"
    assert MCPSessionMiddleware(App(), keys=KEYS, adopt_transport_sessions=True)._express is None
    assert MCPSessionMiddleware(App(), keys=KEYS)._express is not None


# -- with an OpenTelemetry SDK recording ---------------------------------------------------------


TRACEPARENT = re.compile(rb"00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]")


class Traced:
    """A middleware with an OpenTelemetry SDK of its own: spans to memory, metrics to a reader."""

    def __init__(self, app: App, *, lane: bool, **options: Any) -> None:
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.middleware = MCPSessionMiddleware(
            app,
            keys=KEYS,
            store=store(),
            tracer_provider=tracer_provider,
            meter_provider=MeterProvider(metric_readers=[self.metrics]),
            **options,
        )
        if not lane:
            self.middleware._express = None

    def run(self, body: bytes, headers: list[tuple[bytes, bytes]]) -> tuple[Any, ...]:
        """The answer, what the app saw, and what the SDK recorded, without ids, times and durations."""
        app = self.middleware.app
        assert isinstance(app, App)
        try:
            answer: Any = seen(run(self.middleware, body, headers), self.middleware)[:3]
        except RuntimeError as exc:  # the app raised: it reaches the server as it was raised
            answer = repr(exc)
        # The trace context the app's _meta names is the middleware's span, whose ids differ by run.
        calls = [(TRACEPARENT.sub(b"<traceparent>", call[0]), *call[1:]) for call in app.calls]
        known = set(SIDS.values())
        spans = [
            (
                span.name,
                span.kind,
                sorted(  # a session sessions/create minted has a new id each run
                    (
                        name,
                        "<minted>"
                        if name.endswith(("session.id", "conversation.id")) and value not in known
                        else value,
                    )
                    for name, value in (span.attributes or {}).items()
                ),
                [sorted((link.attributes or {}).items()) for link in span.links],
                span.status.status_code,
                span.status.description,
                [event.name for event in span.events],
                span.parent is not None,
            )
            for span in self.spans.get_finished_spans()
        ]
        points = []
        data = self.metrics.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        counted = getattr(point, "count", None)
                        value = counted if counted is not None else getattr(point, "value", None)
                        points.append((metric.name, sorted(point.attributes.items()), value))
        return answer, calls, spans, sorted(points, key=repr)


@settings(FUZZ, max_examples=200)
@given(
    request=usual_requests(),
    result=results,
    shape=st.sampled_from(["compact"] * 4 + ["sse", "gzip", "error", "raise"]),
    pieces=st.sampled_from([1, 1, 2]),
    status=st.sampled_from([200, 200, 200, 500]),
    trace_context=st.sampled_from([None, None, "meta", "header"]),
    idle=st.booleans(),
    require_session=st.booleans(),
    conversation_data=st.sampled_from(["off", "off", "anonymous"]),
)
def test_with_an_sdk_the_lane_records_what_the_pipeline_records(
    request: tuple[bytes, list[tuple[bytes, bytes]]],
    result: Any,
    shape: str,
    pieces: int,
    status: int,
    trace_context: str | None,
    idle: bool,
    require_session: bool,
    conversation_data: Any,
) -> None:
    """The same answers, the same context for the app, the same spans and the same metrics."""
    body, headers = request
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    if trace_context == "header":
        headers = [*headers, (b"traceparent", parent.encode())]
    elif trace_context == "meta":
        message = json.loads(body)
        meta = message.get("params", {}).get("_meta")
        if isinstance(meta, dict):
            meta["traceparent"] = parent
        body = json.dumps(message).encode("utf-8", "surrogatepass")
    outcomes = []
    for lane in (True, False):
        traced = Traced(
            App(result, shape=shape, pieces=pieces, status=status),
            lane=lane,
            idle_ttl=3600 if idle else None,
            require_session=require_session,
            conversation_data=conversation_data,
        )
        if lane:
            assert traced.middleware._express is not None
            spy = Spy(traced.middleware._express)
            traced.middleware._express = spy  # type: ignore[assignment]
        outcomes.append(traced.run(body, headers))
    event(f"taken={spy.taken}")
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize(
    ("token", "extra", "options", "taken", "named"),
    [
        (VALID[0], {}, {}, True, SIDS[VALID[0]]),
        (VALID[0], {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}, {}, True, SIDS[VALID[0]]),
        (None, {}, {}, True, None),
        (None, {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}, {}, True, None),
        (None, {"vscode.conversationId": "chat-1"}, {}, True, "chat-1"),
        (None, {"openai/session": "conv-2", "openai/subject": "user-9"}, {}, True, "conv-2"),
        (None, {"vscode.conversationId": "chat-1"}, {"conversation_data": "anonymous"}, False, "chat-1"),
        (None, {}, {"require_session": True}, False, None),
    ],
)
def test_with_an_sdk_the_usual_request_takes_the_lane_with_or_without_a_session(
    token: str | None, extra: dict[str, str], options: dict[str, Any], taken: bool, named: str | None
) -> None:
    """Traced, the usual request takes the lane: in a session, named by its host's conversation, or
    neither, with or without a trace context in its _meta (rewritten for the app to name the
    middleware's span). A host's conversation whose data is kept, and a request refused for want of
    a session, take the pipeline. Either way the span and the baggage name the conversation."""
    traced = Traced(App({"content": []}), lane=True, **options)
    spy = lane_of(traced.middleware)
    body, headers = usual(token)
    message = json.loads(body)
    message["params"]["_meta"].update(extra)
    answer, calls, spans, points = traced.run(json.dumps(message).encode(), headers)
    assert spy.taken == [taken]
    if options.get("require_session"):
        assert answer[0] == 200 and not calls  # -32044, answered without the app
        return
    assert answer[0] == 200 and spans and points
    assert calls[0][3:] == (True, named)  # the app runs in its span, the conversation in baggage
    attributes = dict(spans[-1][2])
    shown = named if named is None or named in SIDS.values() else "<minted>"  # as Traced.run shows other ids
    assert attributes.get("session.id") == shown and attributes.get("gen_ai.conversation.id") == shown
    if "openai/subject" in extra:
        assert attributes.get("user.id") == "user-9"
    if "traceparent" in extra:  # the span continues the client's trace; the app's _meta names it
        assert spans[-1][-1] is True and b"<traceparent>" in calls[0][0]


@pytest.mark.parametrize("token", [VALID[0], None], ids=["session", "no session"])
@pytest.mark.parametrize("pieces", [1, 2])
@pytest.mark.parametrize(
    ("shape", "status"),
    [("compact", 200), ("compact", 500), ("error", 200), ("error", 400), ("sse", 200), ("gzip", 200), ("raise", 200)],
)
def test_with_an_sdk_every_ending_of_the_usual_request_is_recorded_alike(
    shape: str, status: int, pieces: int, token: str | None
) -> None:
    """A result, an HTTP error, a JSON-RPC error, a stream, an encoded body, an exception: as the pipeline,
    in a session or not."""
    outcomes = []
    for lane in (True, False):
        traced = Traced(App({"content": []}, shape=shape, status=status, pieces=pieces), lane=lane)
        spy = lane_of(traced.middleware) if lane else None
        outcomes.append(traced.run(*usual(token)))
        assert spy is None or spy.taken == [True]
    assert outcomes[0] == outcomes[1]
    spans = outcomes[0][2]
    (span,) = spans
    errors = dict(span[2]).get("error.type")
    expected = {"raise": "RuntimeError", "error": "-32602"}.get(shape, "500" if status == 500 else None)
    assert errors == expected
