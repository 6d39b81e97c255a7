"""OpenTelemetry: spans, parenting, session links, baggage, metrics and a conversation as the viewers read it, end to
end (secrecy: test_telemetry_secrecy.py; a host's conversation on every span, both eras: test_host_conversations.py).

Through a real MCPServer over real HTTP in both eras (raw 2026-07-28 envelopes
and the 2025-11-25 stateful handshake) and through the real mcp SDK client,
with the OpenTelemetry SDK's in-memory exporter (one global TracerProvider,
as the SDK's own span needs) and an InMemoryMetricReader per app. The path
without any SDK runs in a subprocess, where no provider is ever set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from examples.quickstart import SESSION_TOOLS, build_app, build_server
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.types import Scope

from _mcp import (
    HEADER_MISMATCH,
    INVALID_REQUEST,
    LEGACY,
    MCP_PATH,
    METHOD_NOT_FOUND,
    MODERN,
    SESSION_KEY,
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    LegacyClient,
    ModernClient,
    answer,
    create_session,
    jwt_claims,
    legacy_request,
    messages,
    modern_request,
    session_meta,
    tool_text,
    with_claims,
)
from _otel import (
    MIDDLEWARE_SCOPE,
    SDK_SCOPE,
    ExchangeRecorder,
    SpanLog,
    attrs,
    by_request_id,
    connect,
    links_of,
    metric_attribute_values,
    named,
    of_scope,
    one,
    parent_of,
    points,
    recording_provider,
    sdk_child,
    self_of,
    span_strings,
    traceparent,
    traceparent_of,
    wait_metric_count,
)
from _users import HeaderUser
from conftest import SECRET, in_process, serve
from mcp_sessions import MCPSessionMiddleware, SessionsConfig, __version__, get_session
from mcp_sessions._tokens import IdDigests
from mcp_sessions._tokens._tokens import KeySet

ROOT = Path(__file__).resolve().parents[2]
ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}
USER_SCOPE = "tests.user_code"
INVALID_PARAMS = -32602
REFUSED = -32000
DURATION_BUCKETS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300]
CREATION_LINK = {"mcp_sessions.link": "session.created"}
META_LINK = {"mcp_sessions.link": "mcp.meta"}

# Two foreign trace contexts: one a client puts in _meta, one an HTTP-instrumented client puts in headers.
META_TRACE = (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)
HEADER_TRACE = (0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7)
META_STATE = "meta=1"
HEADER_STATE = "header=1"

Era = Literal["modern", "legacy"]
ERAS: list[Era] = ["modern", "legacy"]
RawClient = ModernClient | LegacyClient

user_tracer = trace.get_tracer(USER_SCOPE)


# -- the servers ------------------------------------------------------------------------------


def build_traced_server() -> MCPServer:
    """The quickstart's tools, plus tools that start a user span, fail, or answer a JSON-RPC error."""
    server = build_server()

    @server.tool()
    async def lookup(q: str) -> str:
        """Run a pretend database query under the user's own span; the session's stable id, or 'none'."""
        with user_tracer.start_as_current_span("db.query") as span:
            span.set_attribute("db.query.text", q)
        session = get_session()
        return session.id if session is not None else "none"

    @server.tool()
    async def broken() -> str:
        """Always fails: the client gets a result with isError."""
        raise ValueError("the tool broke")

    @server.tool()
    async def refuse(ctx: Context) -> str:
        """Report progress (so the answer streams as SSE when the client asked for progress), then refuse."""
        await ctx.report_progress(1, 1, "checking")
        raise MCPError(code=REFUSED, message="refused")

    return server


def traced_app(
    *,
    json_response: bool,
    trace_mode: Literal["link", "session"] = "link",
    meter_provider: MeterProvider | None = None,
) -> MCPSessionMiddleware:
    inner = build_traced_server().streamable_http_app(streamable_http_path=MCP_PATH, json_response=json_response)
    return MCPSessionMiddleware(
        inner,
        secret=SECRET,
        require_session_tools=SESSION_TOOLS,
        trace_mode=trace_mode,
        meter_provider=meter_provider,
    )


@pytest.fixture(scope="module")
def servers(span_log: SpanLog) -> Iterator[dict[str, str]]:
    with (
        serve(traced_app(json_response=True)) as json_url,
        serve(traced_app(json_response=False)) as sse_url,
        serve(traced_app(json_response=True, trace_mode="session")) as session_url,
        httpx.Client(timeout=10) as http,
    ):
        for url in (json_url, sse_url, session_url):
            # As a client would, list the tools first: spans and metrics name only tools the server listed.
            ModernClient(http, url).request("tools/list")
        yield {"json": json_url, "sse": sse_url, "session": session_url}


def create(client: RawClient, spans: SpanLog) -> tuple[str, str, ReadableSpan]:
    """A new session: its token, its stable id, and the middleware's sessions/create span."""
    before = len(named(spans.finished(), MIDDLEWARE_SCOPE, "sessions/create"))
    token = client.create_session()["sessionId"]
    finished = spans.wait(
        lambda s: len(named(s, MIDDLEWARE_SCOPE, "sessions/create")) > before, "the sessions/create span"
    )
    creation = named(finished, MIDDLEWARE_SCOPE, "sessions/create")[-1]
    return token, jwt_claims(token)["sid"], creation


def client_port(response: httpx.Response) -> int:
    port: int = response.extensions["network_stream"].get_extra_info("client_addr")[1]
    return port


def assert_nested(middleware: ReadableSpan, sdk: ReadableSpan, user: ReadableSpan | None = None) -> None:
    """The SDK's span is a child of the middleware's, the user's a child of the SDK's, all in one trace."""
    assert sdk.kind is SpanKind.SERVER
    assert parent_of(sdk) == self_of(middleware)
    assert middleware.start_time is not None
    assert sdk.start_time is not None
    assert middleware.end_time is not None
    assert sdk.end_time is not None
    assert middleware.start_time <= sdk.start_time <= sdk.end_time <= middleware.end_time
    if user is not None:
        assert parent_of(user) == self_of(sdk)


def trace_state_of(span: ReadableSpan) -> str | None:
    """The span's W3C tracestate as a header value (``None`` when empty)."""
    context = span.get_span_context()
    assert context is not None
    return context.trace_state.to_header() or None


def user_child(spans: list[ReadableSpan], sdk: ReadableSpan) -> ReadableSpan:
    [child] = [span for span in of_scope(spans, USER_SCOPE) if parent_of(span) == self_of(sdk)]
    return child


# -- span names, kinds and attributes ---------------------------------------------------------


def new_trace(name: str, kind: str) -> dict[str, Any]:
    """What the middleware's span adds when it starts a trace: the trace's name and kind, for each viewer."""
    return {
        "mcp_sessions.call.kind": kind,
        "mlflow.traceTag.mlflow.traceName": name,
        "mlflow.traceTag.mcp_sessions.call.kind": kind,
        "langfuse.trace.name": name,
        "langfuse.trace.tags": (kind,),
    }


@pytest.mark.parametrize("mode", ["json", "sse"])
def test_modern_spans_have_the_conventions_names_and_attributes(
    servers: dict[str, str], http: httpx.Client, spans: SpanLog, mode: str
) -> None:
    client = ModernClient(http, servers[mode])
    discover, _ = client.request("server/discover", id="d-1")
    created, created_message = client.request("sessions/create", id="c-1")
    token = created_message["result"]["session"]["sessionId"]
    # The Mcp-Session-Id header of a 2026-07-28 request is the session token: never mcp.session.id.
    counted, counted_message = client.call_tool("count", session=session_meta(token), id=7, Mcp_Session_Id=token)
    assert tool_text(counted_message) == "1"
    finished = spans.wait_middleware(3)

    sid = jwt_claims(token)["sid"]
    common = {
        "mcp.protocol.version": MODERN,
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "network.protocol.version": "1.1",
        "client.address": "127.0.0.1",
    }
    in_session = {"session.id": sid, "gen_ai.conversation.id": sid, "mcp_sessions.session.source": "data-layer"}
    expected = {
        "server/discover": {
            **common,
            **new_trace("server/discover", "housekeeping"),
            "client.port": client_port(discover),
            "mcp.method.name": "server/discover",
            "jsonrpc.request.id": "d-1",
        },
        "sessions/create": {
            **common,
            **new_trace("sessions/create", "session"),
            "client.port": client_port(created),
            "mcp.method.name": "sessions/create",
            "jsonrpc.request.id": "c-1",
            **in_session,
        },
        "tools/call count": {
            **common,
            **new_trace("tools/call count", "turn"),
            "client.port": client_port(counted),
            "mcp.method.name": "tools/call",
            "jsonrpc.request.id": "7",
            "gen_ai.tool.name": "count",
            "gen_ai.operation.name": "execute_tool",
            **in_session,
        },
    }
    middleware_spans = of_scope(finished, MIDDLEWARE_SCOPE)
    assert {span.name: attrs(span) for span in middleware_spans} == expected
    for span in middleware_spans:
        assert span.kind is SpanKind.SERVER
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.version == __version__
        assert span.status.status_code is StatusCode.UNSET
    sdk = one(finished, SDK_SCOPE, "tools/call count")
    assert attrs(sdk)["gen_ai.tool.name"] == "count"
    assert attrs(sdk)["session.id"] == sid


@pytest.mark.parametrize("mode", ["json", "sse"])
def test_legacy_stateful_spans_carry_the_transport_session(
    servers: dict[str, str], http: httpx.Client, spans: SpanLog, mode: str
) -> None:
    client = LegacyClient(http, servers[mode])
    client.initialize()
    handshake = spans.wait_middleware(2)
    transport_id = client.transport_session_id
    assert transport_id is not None
    assert re.fullmatch("[0-9a-f]{32}", transport_id)
    initialize = one(handshake, MIDDLEWARE_SCOPE, "initialize")
    initialized = one(handshake, MIDDLEWARE_SCOPE, "notifications/initialized")
    assert "mcp.session.id" not in attrs(initialize)  # the transport session does not exist yet
    # The transport session id is a bearer value: only its keyed digest is recorded.
    transport_digest = attrs(initialized)["mcp.session.id"]
    assert re.fullmatch(r"ts-[A-Za-z0-9_-]{24}", transport_digest)
    assert "jsonrpc.request.id" not in attrs(initialized)
    spans.clear()

    token, sid, creation = create(client, spans)
    _, message = client.call_tool("count", session=session_meta(token), id=5)
    assert tool_text(message) == "1"
    finished = spans.wait_middleware(2)

    count = one(finished, MIDDLEWARE_SCOPE, "tools/call count")
    for span in (creation, count):
        assert span.kind is SpanKind.SERVER
        assert attrs(span)["mcp.session.id"] == transport_digest
        assert attrs(span)["mcp.protocol.version"] == LEGACY
        assert attrs(span)["session.id"] == attrs(span)["gen_ai.conversation.id"] == sid
    assert attrs(count)["jsonrpc.request.id"] == "5"
    assert attrs(count)["gen_ai.operation.name"] == "execute_tool"


def test_a_streamed_answer_is_observed_to_its_end(servers: dict[str, str], http: httpx.Client, spans: SpanLog) -> None:
    client = ModernClient(http, servers["sse"])
    token, sid, creation = create(client, spans)
    spans.clear()
    body = modern_request(
        "tools/call",
        {"name": "countdown", "arguments": {"n": 1}},
        id="s-1",
        session=session_meta(token),
        meta={"progressToken": "p-1"},
    )

    response = client.post(body)
    finished = spans.wait_middleware(1)

    assert response.headers["content-type"].startswith("text/event-stream")
    assert [message.get("method") for message in messages(response)] == ["notifications/progress", None]
    span = one(finished, MIDDLEWARE_SCOPE, "tools/call countdown")
    assert span.status.status_code is StatusCode.UNSET
    assert "error.type" not in attrs(span)
    assert attrs(span)["session.id"] == sid
    assert links_of(span) == [(self_of(creation), CREATION_LINK)]
    assert_nested(span, sdk_child(finished, span))


# -- failures ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rejection:
    """A request the middleware answers itself with a JSON-RPC error: ``sent(token)`` gives its keywords."""

    name: str
    span: str  # "tools/call TOOL" calls TOOL; any other name is the method sent
    code: int
    sent: Callable[[str], dict[str, Any]]
    eras: tuple[Era, ...] = ("modern", "legacy")

    def send(self, client: RawClient, token: str) -> tuple[httpx.Response, dict[str, Any]]:
        method, _, tool = self.span.partition(" ")
        return client.call_tool(tool, **self.sent(token)) if tool else client.request(method, **self.sent(token))


def _forged(token: str) -> str:
    return with_claims(token, sid="A" * 24)


REJECTIONS = [
    Rejection(
        "unknown-token", "tools/call count", SESSION_NOT_FOUND, lambda t: {"session": {"sessionId": "not-a-token"}}
    ),
    Rejection("forged-token", "tools/call count", SESSION_NOT_FOUND, lambda t: {"session": session_meta(_forged(t))}),
    Rejection(
        "bad-state",
        "tools/call get_mode",
        SESSION_NOT_FOUND,
        lambda t: {"session": session_meta(t, state="not-a-state")},
    ),
    Rejection("required", "tools/call count", SESSION_REQUIRED, lambda t: {}),
    Rejection("delete-without-session", "sessions/delete", SESSION_REQUIRED, lambda t: {}),
    Rejection(
        "header-mismatch",
        "tools/call count",
        HEADER_MISMATCH,
        lambda t: {"session": session_meta(t), "Mcp_Session_Id": "another-session"},
        eras=("modern",),
    ),
    Rejection(
        "malformed-session-metadata", "tools/call whoami", INVALID_REQUEST, lambda t: {"session": {"sessionId": 42}}
    ),
    Rejection("create-inside-a-session", "sessions/create", INVALID_REQUEST, lambda t: {"session": session_meta(t)}),
]


@pytest.mark.parametrize(
    ("era", "case"),
    [pytest.param(era, case, id=f"{era}-{case.name}") for case in REJECTIONS for era in case.eras],
)
def test_rejections_are_error_spans_with_the_json_rpc_code(
    servers: dict[str, str], http: httpx.Client, spans: SpanLog, era: Era, case: Rejection
) -> None:
    client = connect(era, http, servers["json"], spans)
    token, _, _ = create(client, spans)
    spans.clear()

    _, message = case.send(client, token)
    finished = spans.wait_middleware(1)

    assert message["error"]["code"] == case.code
    [span] = of_scope(finished, MIDDLEWARE_SCOPE)
    assert span.name == case.span
    assert span.kind is SpanKind.SERVER
    assert attrs(span)["error.type"] == attrs(span)["rpc.response.status_code"] == str(case.code)
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == message["error"]["message"]
    assert of_scope(finished, SDK_SCOPE) == []  # never dispatched
    if era == "modern":  # whatever its Mcp-Session-Id header holds (here, once, a stale one)
        assert "mcp.session.id" not in attrs(span)


@dataclass(frozen=True)
class Failure:
    """A request the server answers with a failure: an isError result or a JSON-RPC error."""

    name: str
    span: str
    error_type: str
    status_code: str | None
    method: str
    params: dict[str, Any]
    meta: dict[str, Any] | None = None
    streams_on_modern: bool = False
    attributes: dict[str, str] = field(default_factory=dict)


def _request(
    era: Era, method: str, params: dict[str, Any], token: str, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    build = modern_request if era == "modern" else legacy_request
    return build(method, params, id=9, session=session_meta(token), meta=meta)


TOOL_ERROR = "tool_error"
FAILURES = [
    Failure("tool-raises", "tools/call broken", TOOL_ERROR, None, "tools/call", {"name": "broken", "arguments": {}}),
    Failure(  # a name the server never listed: not in the span's name, kept as the original
        "unknown-tool",
        "tools/call",
        TOOL_ERROR,
        None,
        "tools/call",
        {"name": "nope", "arguments": {}},
        attributes={"gen_ai.tool.name": "_OTHER", "mcp_sessions.target_original": "nope"},
    ),
    Failure(
        "unknown-method",
        "_OTHER",
        str(METHOD_NOT_FOUND),
        str(METHOD_NOT_FOUND),
        "tasks/frobnicate",
        {},
        attributes={"mcp.method.name": "_OTHER", "mcp_sessions.method_original": "tasks/frobnicate"},
    ),
    Failure("invalid-params", "tools/call", str(INVALID_PARAMS), str(INVALID_PARAMS), "tools/call", {"arguments": {}}),
    Failure(
        "tool-answers-an-error",
        "tools/call refuse",
        str(REFUSED),
        str(REFUSED),
        "tools/call",
        {"name": "refuse", "arguments": {}},
        {"progressToken": "p-1"},
        streams_on_modern=True,
    ),
]


@pytest.mark.parametrize("case", FAILURES, ids=lambda case: case.name)
@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("mode", ["json", "sse"])
def test_server_failures_mark_the_span_for_json_and_sse_answers(
    servers: dict[str, str], http: httpx.Client, spans: SpanLog, mode: str, era: Era, case: Failure
) -> None:
    client = connect(era, http, servers[mode], spans)
    token, sid, _ = create(client, spans)
    spans.clear()

    response = client.post(_request(era, case.method, case.params, token, case.meta))
    message = answer(response)
    finished = spans.wait_middleware(1)

    streams = mode == "sse" and (era == "legacy" or case.streams_on_modern)
    assert response.headers["content-type"].startswith("text/event-stream" if streams else "application/json")
    if case.status_code is None:
        assert message["result"]["isError"] is True
    else:
        assert message["error"]["code"] == int(case.status_code)
    middleware = one(finished, MIDDLEWARE_SCOPE, case.span)
    assert attrs(middleware).items() >= case.attributes.items()
    assert attrs(middleware)["error.type"] == case.error_type
    assert attrs(middleware).get("rpc.response.status_code") == case.status_code
    assert attrs(middleware)["session.id"] == sid
    assert middleware.status.status_code is StatusCode.ERROR
    sdk = sdk_child(finished, middleware)
    assert attrs(sdk)["error.type"] == case.error_type  # the two layers agree


# -- parent and child -------------------------------------------------------------------------


CONTEXTS = ["none", "meta", "header", "meta+header"]


@pytest.mark.parametrize(
    ("server", "era", "context"),
    [pytest.param(m, e, c, id=f"{m}-{e}-{c}") for m in ("json", "sse") for e in ERAS for c in CONTEXTS]
    # "session" mode keeps the parent the client sent: not the creation span, so the request still links to it.
    + [pytest.param("session", "modern", c, id=f"session-mode-{c}") for c in ("meta", "header")],
)
def test_sdk_and_user_spans_nest_under_the_middleware_span(
    servers: dict[str, str], http: httpx.Client, spans: SpanLog, server: str, era: Era, context: str
) -> None:
    client = connect(era, http, servers[server], spans)
    token, sid, creation = create(client, spans)
    spans.clear()
    meta = {"traceparent": traceparent(*META_TRACE), "tracestate": META_STATE} if "meta" in context else None
    headers = {"traceparent": traceparent(*HEADER_TRACE), "tracestate": HEADER_STATE} if "header" in context else {}

    _, message = client.call_tool("lookup", {"q": "select 1"}, session=session_meta(token), meta=meta, **headers)
    finished = spans.wait_middleware(1)

    assert tool_text(message) == sid
    middleware = one(finished, MIDDLEWARE_SCOPE, "tools/call lookup")
    sdk = one(finished, SDK_SCOPE, "tools/call lookup")
    user = one(finished, USER_SCOPE, "db.query")
    assert_nested(middleware, sdk, user)
    # On HTTP the headers' trace context wins over _meta's (the transports WG's transport-native trace context).
    expected_parent = {"none": None, "meta": META_TRACE, "header": HEADER_TRACE, "meta+header": HEADER_TRACE}[context]
    assert parent_of(middleware) == expected_parent
    # tracestate goes with the traceparent that won, and reaches the SDK's span through the rewritten _meta.
    expected_state = {"none": None, "meta": META_STATE, "header": HEADER_STATE, "meta+header": HEADER_STATE}[context]
    assert trace_state_of(middleware) == trace_state_of(sdk) == expected_state
    if expected_parent is not None:
        assert self_of(middleware)[0] == self_of(sdk)[0] == self_of(user)[0] == expected_parent[0]
    else:
        assert self_of(middleware)[0] == self_of(sdk)[0] == self_of(user)[0]
    expected_links = [(self_of(creation), CREATION_LINK)]
    if context == "meta+header":
        expected_links.append((META_TRACE, META_LINK))  # the context _meta named, when the headers chose the parent
    assert links_of(middleware) == expected_links


# -- links and trace modes ---------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("server", ["json", "sse", "session"])
def test_every_request_of_a_session_points_at_its_creation_span(
    servers: dict[str, str], http: httpx.Client, spans: SpanLog, server: str, era: Era
) -> None:
    """In "link" mode each request of a session, its deletion too, is a trace of its own linked to the creation
    span; in "session" mode it is the creation span's child, so that the whole session reads as one trace."""
    client = connect(era, http, servers[server], spans)
    token, sid, creation = create(client, spans)
    client.call_tool("count", session=session_meta(token), id=11)
    _, lookup = client.call_tool("lookup", {"q": "x"}, session=session_meta(token), id=12)
    _, set_mode = client.call_tool("set_mode", {"mode": "terse"}, session=session_meta(token), id=13)
    state = set_mode["result"]["_meta"][SESSION_KEY]["state"]
    _, get_mode = client.call_tool("get_mode", session=session_meta(token, state=state), id=14)
    client.call_tool("count", id=15)  # no session: refused, no link
    client.call_tool("whoami", id=16)  # no session: its own trace
    response, deleted = client.request("sessions/delete", session=session_meta(token), id="del")
    finished = spans.wait_middleware(8)

    assert tool_text(lookup) == sid
    assert tool_text(get_mode) == "terse"
    assert response.status_code == 200, deleted
    # The creation span's context rides in the signed token.
    assert jwt_claims(token)["tp"] == traceparent_of(creation)
    assert parent_of(creation) is None
    for request_id in ("11", "12", "13", "14", "del"):
        span = by_request_id(finished, MIDDLEWARE_SCOPE, request_id)
        assert attrs(span)["session.id"] == attrs(span)["gen_ai.conversation.id"] == sid
        if server == "session":
            assert parent_of(span) == self_of(creation), request_id
            assert links_of(span) == []  # the parent says it all
        else:
            assert links_of(span) == [(self_of(creation), CREATION_LINK)], request_id
            assert parent_of(span) is None
            assert self_of(span)[0] != self_of(creation)[0]
        if request_id != "del":  # the middleware answers a deletion itself
            assert_nested(span, sdk_child(finished, span))
    delete = by_request_id(finished, MIDDLEWARE_SCOPE, "del")
    assert delete.name == "sessions/delete"
    assert delete.kind is SpanKind.SERVER
    assert delete.status.status_code is StatusCode.UNSET
    if server == "session":
        sdk = sdk_child(finished, by_request_id(finished, MIDDLEWARE_SCOPE, "12"))
        assert self_of(user_child(finished, sdk))[0] == self_of(creation)[0]
    assert links_of(by_request_id(finished, MIDDLEWARE_SCOPE, "15")) == []
    sessionless = by_request_id(finished, MIDDLEWARE_SCOPE, "16")
    assert links_of(sessionless) == []
    assert parent_of(sessionless) is None
    assert self_of(sessionless)[0] != self_of(creation)[0]


def test_links_reach_the_creation_span_across_replicas(http: httpx.Client, spans: SpanLog) -> None:
    replica_a = build_app(json_response=True, environ=ENVIRON)
    replica_b = build_app(json_response=False, environ=ENVIRON)
    with serve(replica_a) as url_a, serve(replica_b) as url_b:
        on_a, on_b = ModernClient(http, url_a), ModernClient(http, url_b)
        token, sid, creation = create(on_a, spans)
        _, counted = on_b.call_tool("count", session=session_meta(token), id="on-b")
        _, whoami = on_a.call_tool("whoami", session=session_meta(token), id="on-a")
        legacy_b = LegacyClient(http, url_b)
        legacy_b.initialize()
        legacy_b.call_tool("whoami", session=session_meta(token), id="legacy-on-b")
        finished = spans.wait_middleware(6)

    assert tool_text(counted) == "1"
    assert tool_text(whoami) == sid
    for request_id in ("on-b", "on-a", "legacy-on-b"):
        span = by_request_id(finished, MIDDLEWARE_SCOPE, request_id)
        assert links_of(span) == [(self_of(creation), CREATION_LINK)], request_id
        assert attrs(span)["session.id"] == sid
        assert attrs(sdk_child(finished, span))["session.id"] == sid


# -- baggage and SessionSpanProcessor ----------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "era", "baggage"),
    [(mode, era, None) for mode in ("json", "sse") for era in ERAS]
    + [("json", "modern", "meta"), ("json", "modern", "header")],
)
def test_every_span_inside_a_session_request_knows_the_session_and_a_client_cannot_name_it(
    servers: dict[str, str], http: httpx.Client, spans: SpanLog, mode: str, era: Era, baggage: str | None
) -> None:
    """``session.id`` baggage from the client names no span: only the middleware names the session."""
    client = connect(era, http, servers[mode], spans)
    token, sid, _ = create(client, spans)
    carrier = {"traceparent": traceparent(*META_TRACE), "baggage": "session.id=forged"}
    meta = carrier if baggage == "meta" else None
    headers = carrier if baggage == "header" else {}
    client.call_tool("lookup", {"q": "with"}, session=session_meta(token), meta=meta, id=31, **headers)
    client.call_tool("lookup", {"q": "without"}, meta=meta, id=32, **headers)  # right after, on the same connection
    finished = spans.wait_middleware(3)

    with_session = by_request_id(finished, MIDDLEWARE_SCOPE, "31")
    without = by_request_id(finished, MIDDLEWARE_SCOPE, "32")
    if baggage is not None:
        assert parent_of(with_session) == parent_of(without) == META_TRACE  # the client's context was read
    for span, expected, query in ((with_session, sid, "with"), (without, None, "without")):
        sdk = sdk_child(finished, span)
        user = user_child(finished, sdk)
        assert attrs(user)["db.query.text"] == query
        for one_span in (span, sdk, user):
            assert attrs(one_span).get("session.id") == expected, one_span.name
    assert not any("forged" in text for span in finished for text in span_strings(span))


# -- the real SDK client ------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_sdk_client_trace_context_flows_through_the_middleware(span_log: SpanLog, mode: str) -> None:
    span_log.clear()
    app_side = ExchangeRecorder(build_traced_server().streamable_http_app(streamable_http_path=MCP_PATH))
    client_side = ExchangeRecorder(MCPSessionMiddleware(app_side, secret=SECRET))
    with serve(client_side) as url:
        async with Client(url + MCP_PATH, mode=mode) as client:
            token = (await create_session(client))["sessionId"]
            meta: Any = {SESSION_KEY: {"sessionId": token}}  # RequestParamsMeta allows extra keys
            result = await client.call_tool("lookup", {"q": "select 1"}, meta=meta)
        finished = span_log.wait(
            lambda s: named(s, MIDDLEWARE_SCOPE, "tools/call lookup") != [], "the middleware's tools/call span"
        )
    sid = jwt_claims(token)["sid"]
    assert result.structured_content == {"result": sid}

    # The SDK client (OpenTelemetry configured) put its own span's context in _meta.
    client_span = one(finished, SDK_SCOPE, "MCP send tools/call lookup")
    assert client_span.kind is SpanKind.CLIENT
    [(sent_headers, sent)] = client_side.find("tools/call")
    assert sent["params"]["_meta"]["traceparent"] == traceparent_of(client_span)
    assert "traceparent" not in sent_headers  # this client's HTTP library is not instrumented

    middleware = one(finished, MIDDLEWARE_SCOPE, "tools/call lookup")
    server_sdk = one(finished, SDK_SCOPE, "tools/call lookup")
    user = one(finished, USER_SCOPE, "db.query")
    assert parent_of(middleware) == self_of(client_span)
    assert_nested(middleware, server_sdk, user)
    assert self_of(user)[0] == self_of(client_span)[0]
    # What reached the SDK names the middleware's span instead; the rest of _meta is intact.
    [(_, forwarded)] = app_side.find("tools/call")
    assert forwarded["params"]["_meta"]["traceparent"] == traceparent_of(middleware)
    assert forwarded["params"]["_meta"][SESSION_KEY] == {"sessionId": token}

    creation = one(finished, MIDDLEWARE_SCOPE, "sessions/create")
    assert parent_of(creation) == self_of(one(finished, SDK_SCOPE, "MCP send sessions/create"))
    assert links_of(middleware) == [(self_of(creation), CREATION_LINK)]
    for span in (middleware, server_sdk, user):
        assert attrs(span)["session.id"] == sid
    if mode == "legacy":
        assert attrs(middleware)["mcp.protocol.version"] == LEGACY
        # Only the transport session's keyed digest: the raw id is a bearer value.
        assert re.fullmatch(r"ts-[A-Za-z0-9_-]{24}", attrs(middleware)["mcp.session.id"])
        assert not any(sent_headers["mcp-session-id"] in text for text in span_strings(middleware))
    else:
        assert attrs(middleware)["mcp.protocol.version"] == MODERN
        assert all("mcp.session.id" not in attrs(span) for span in of_scope(finished, MIDDLEWARE_SCOPE))


# -- batches (2025-03-26) -----------------------------------------------------------------------


def batch_client(
    servers: dict[str, str], http: httpx.Client, spans: SpanLog
) -> tuple[LegacyClient, str, str, ReadableSpan]:
    """A 2025-03-26 client (the last version with batches) that listed the tools and created a session."""
    client = LegacyClient(http, servers["json"], version="2025-03-26")
    client.initialize()
    client.request("tools/list")  # the server's tool names: spans and metrics may name them
    spans.wait_middleware(3)
    token, sid, creation = create(client, spans)
    spans.clear()
    return client, token, sid, creation


def test_a_forwarded_batch_has_one_span_per_element(
    servers: dict[str, str], http: httpx.Client, spans: SpanLog
) -> None:
    client, token, sid, creation = batch_client(servers, http, spans)
    batch = [
        legacy_request("tools/call", {"name": "whoami", "arguments": {}}, id=41, session=session_meta(token)),
        legacy_request("tools/call", {"name": "lookup", "arguments": {"q": "x"}}, id=42, session=session_meta(token)),
        legacy_request("notifications/cancelled", {"requestId": 40}, id=None, session=session_meta(token)),
    ]
    response = client.post(batch)
    finished = spans.wait_middleware(3)

    # mcp 2.3 refuses JSON-RPC batches as a whole (HTTP 400): each element's span says so.
    assert response.status_code == 400
    middleware_spans = of_scope(finished, MIDDLEWARE_SCOPE)
    assert sorted(span.name for span in middleware_spans) == [
        "notifications/cancelled",
        "tools/call lookup",
        "tools/call whoami",
    ]
    assert sorted(attrs(span).get("jsonrpc.request.id", "-") for span in middleware_spans) == ["-", "41", "42"]
    assert len({attrs(span)["mcp.session.id"] for span in middleware_spans}) == 1
    for span in middleware_spans:
        assert span.kind is SpanKind.SERVER
        assert attrs(span)["session.id"] == sid
        assert re.fullmatch(r"ts-[A-Za-z0-9_-]{24}", attrs(span)["mcp.session.id"])
        assert attrs(span)["mcp.protocol.version"] == "2025-03-26"
        assert links_of(span) == [(self_of(creation), CREATION_LINK)]
        assert attrs(span)["error.type"] == "400"
        assert span.status.status_code is StatusCode.ERROR


def test_a_refused_batch_has_one_error_span_per_element(
    servers: dict[str, str], http: httpx.Client, spans: SpanLog
) -> None:
    client, token, _, _ = batch_client(servers, http, spans)
    batch = [
        legacy_request("tools/call", {"name": "count", "arguments": {}}, id=51, session=session_meta(token)),
        legacy_request("tools/call", {"name": "count", "arguments": {}}, id=52, session={"sessionId": "x.y.z"}),
        legacy_request("notifications/cancelled", {"requestId": 50}, id=None, session=session_meta(token)),
    ]
    response = client.post(batch)
    finished = spans.wait_middleware(3)

    # mcp 2.3 refuses every batch (400, -32602): the middleware answers as it would, not per element.
    assert response.status_code == 400
    assert response.json()["error"]["code"] == INVALID_PARAMS
    error_types = {
        attrs(span).get("jsonrpc.request.id", "-"): attrs(span) for span in of_scope(finished, MIDDLEWARE_SCOPE)
    }
    assert {key: value["error.type"] for key, value in error_types.items()} == {
        "51": str(INVALID_PARAMS),
        "52": str(INVALID_PARAMS),
        "-": str(INVALID_PARAMS),
    }
    assert all(value["rpc.response.status_code"] == value["error.type"] for value in error_types.values())
    assert of_scope(finished, SDK_SCOPE) == []


# -- metrics ----------------------------------------------------------------------------------------


def test_metrics_have_the_conventions_names_units_buckets_and_reasons(span_log: SpanLog, http: httpx.Client) -> None:
    reader = InMemoryMetricReader()
    with serve(traced_app(json_response=True, meter_provider=MeterProvider(metric_readers=[reader]))) as url:
        client = ModernClient(http, url)
        token = client.create_session()["sessionId"]
        sid = jwt_claims(token)["sid"]
        expired, _ = KeySet.from_secret(SECRET).mint_session_token(ttl=60, now=time.time() - 3600)
        client.call_tool("count", session=session_meta(token))
        client.call_tool("count")  # required
        client.call_tool("count", session={"sessionId": "not-a-token"})  # invalid_token
        client.call_tool("count", session={"sessionId": expired})  # expired
        client.call_tool("count", session=session_meta(token), Mcp_Session_Id="another-session")  # header_mismatch
        client.call_tool("get_mode", session=session_meta(token, state="not-a-state"))  # invalid_state
        client.call_tool("whoami", session={"sessionId": 42})  # invalid_metadata
        before_delete = wait_metric_count(reader, "mcp.server.operation.duration", 8)
        assert points(before_delete.get("mcp.server.session.duration")) == []
        client.request("sessions/delete", session=session_meta(token))
        client.call_tool("count", session=session_meta(token))  # revoked
        metrics = wait_metric_count(reader, "mcp.server.operation.duration", 10)

    duration = metrics["mcp.server.operation.duration"]
    assert duration.unit == "s"
    outcomes: dict[tuple[str, str | None], int] = {}
    for point in points(duration):
        assert list(point.explicit_bounds) == DURATION_BUCKETS
        attributes = dict(point.attributes)
        assert attributes["network.transport"] == "tcp"
        assert attributes["mcp.protocol.version"] == MODERN
        assert attributes.get("rpc.response.status_code") == attributes.get("error.type")  # JSON-RPC codes only
        outcome = (attributes["mcp.method.name"], attributes.get("error.type"))
        outcomes[outcome] = outcomes.get(outcome, 0) + point.count
    assert outcomes == {
        ("sessions/create", None): 1,
        ("tools/call", None): 1,
        ("tools/call", str(SESSION_REQUIRED)): 1,
        ("tools/call", str(SESSION_NOT_FOUND)): 4,  # invalid token, expired, bad state, revoked
        ("tools/call", str(HEADER_MISMATCH)): 1,
        ("tools/call", str(INVALID_REQUEST)): 1,
        ("sessions/delete", None): 1,
    }
    [count_point] = [
        p
        for p in points(duration)
        if dict(p.attributes).get("gen_ai.tool.name") == "count" and "error.type" not in p.attributes
    ]
    assert dict(count_point.attributes)["gen_ai.operation.name"] == "execute_tool"

    session_duration = metrics["mcp.server.session.duration"]
    assert session_duration.unit == "s"
    [session_point] = points(session_duration)
    assert session_point.count == 1
    assert list(session_point.explicit_bounds) == DURATION_BUCKETS
    assert [p.value for p in points(metrics["mcp_sessions.sessions.created"])] == [1]
    assert [p.value for p in points(metrics["mcp_sessions.sessions.deleted"])] == [1]
    rejected = {
        dict(p.attributes)["mcp_sessions.reason"]: p.value for p in points(metrics["mcp_sessions.sessions.rejected"])
    }
    assert rejected == {
        "required": 1,
        "invalid_token": 1,
        "expired": 1,
        "header_mismatch": 1,
        "invalid_state": 1,
        "invalid_metadata": 1,
        "revoked": 1,
    }
    for name, key, value in metric_attribute_values(metrics):
        assert sid not in str(value), (name, key)
        assert token not in str(value), (name, key)


# -- a conversation as the viewers read it ----------------------------------------------------------
# In process, the provider given to the middleware. The attribute names are the ones each viewer documents: MLflow
# 3.17 names a trace from its root span's ``mlflow.traceTag.mlflow.traceName`` (any ``mlflow.traceTag.<key>``
# becomes the trace tag ``<key>``); Langfuse's OpenTelemetry property mapping reads ``langfuse.trace.name``,
# ``langfuse.trace.tags``, ``user.id``, ``session.id``, ``input.value`` and ``output.value``; Phoenix reads the
# root span's name, ``session.id``, ``user.id``, ``input.value`` and ``output.value``. tests/e2e/test_viewers.py
# shows the same spans in real Phoenix and MLflow servers.

NAMES = ("mlflow.traceTag.mlflow.traceName", "langfuse.trace.name")
TAGS = ("mlflow.traceTag.mcp_sessions.call.kind", "langfuse.trace.tags")
USER = re.compile(r"u-[A-Za-z0-9_-]{24}")
HANDLE = "bsk_" + "Q" * 34 + "E"  # the shape of a handle (handles/_format.py): a bearer value


class Traced:
    """A quickstart server behind the middleware (and the server's own authentication), and the spans it made."""

    def __init__(self, **options: Any) -> None:
        provider, self.exporter = recording_provider()
        app = build_app(
            json_response=True, environ={"MCP_SESSIONS_SECRET": SECRET}, tracer_provider=provider, **options
        )
        self.app = AuthenticationMiddleware(app, backend=HeaderUser())

    def spans(self) -> list[ReadableSpan]:
        """The middleware's spans (each ends before its response has gone: no wait is needed)."""
        return of_scope(self.exporter.get_finished_spans(), MIDDLEWARE_SCOPE)

    def span(self, request_id: str) -> dict[str, Any]:
        return attrs(by_request_id(self.spans(), MIDDLEWARE_SCOPE, request_id))


def conversation(client: ModernClient) -> str:
    """A short conversation, each request id naming what it is; the session token."""
    client.request("server/discover", id="discover")
    token: str = client.create_session({"label": "a trip to Lisbon"})["sessionId"]
    meta = session_meta(token)
    client.call_tool("count", session=meta, id="unlisted")  # before tools/list: the name comes with the answer
    client.request("tools/list", session=meta, id="list")
    _, answer = client.call_tool("set_mode", {"mode": "terse"}, session=meta, id="mode")
    assert tool_text(answer) == "terse"
    client.request("sessions/delete", session=meta, id="delete")
    return token


def test_each_trace_the_middleware_starts_is_named_and_tagged_for_every_viewer() -> None:
    traced = Traced()
    with in_process(traced.app) as http:
        conversation(ModernClient(http, ""))
    expected = {
        "discover": ("server/discover", "housekeeping"),
        "unlisted": ("tools/call count", "turn"),  # named by its answer: the trace's name follows
        "list": ("tools/list", "housekeeping"),
        "mode": ("tools/call set_mode", "turn"),
        "delete": ("sessions/delete", "session"),
    }
    for request_id, (name, kind) in expected.items():
        assert traced.span(request_id).items() >= new_trace(name, kind).items(), request_id
    [create] = [span for span in traced.spans() if span.name == "sessions/create"]
    assert attrs(create)["langfuse.trace.name"] == "sessions/create"


@pytest.mark.parametrize("carrier", ["header", "meta"])
def test_a_trace_a_client_started_keeps_the_name_the_client_gave_it(carrier: str) -> None:
    """The client's span is the root: the middleware's span tells what kind of call it is, and names nothing."""
    traced = Traced()
    with in_process(traced.app) as http:
        client = ModernClient(http, "")
        if carrier == "header":
            client.request("tools/list", id="list", traceparent=traceparent(*META_TRACE))
        else:
            client.request("tools/list", meta={"traceparent": traceparent(*META_TRACE)}, id="list")
    span = traced.span("list")
    assert span["mcp_sessions.call.kind"] == "housekeeping"
    assert not {*NAMES, *TAGS} & set(span)


@pytest.mark.parametrize(
    ("trace_user", "user", "expected"),
    [
        (None, "alice@example.com", None),
        ("digest", "alice@example.com", "digest"),
        ("name", "alice@example.com", "alice@example.com"),
        ("digest", None, None),  # nobody authenticated: no user
        ("name", "x" * 40, "[redacted]"),  # a name that could be a token is redacted as every such string is
    ],
)
def test_the_user_of_every_call_is_who_the_server_authenticated_when_asked(
    trace_user: str | None, user: str | None, expected: str | None
) -> None:
    traced = Traced(trace_user=trace_user)
    headers = {} if user is None else {"x-user": user}
    with in_process(traced.app, headers=headers) as http:
        conversation(ModernClient(http, ""))
    users = {attrs(span).get("user.id") for span in traced.spans()}
    if expected == "digest":
        assert user is not None
        digest = IdDigests(SessionsConfig(secret=SECRET).keys).user(user)
        assert USER.fullmatch(digest)
        assert users == {digest}  # every call, the session's and the others
    else:
        assert users == {expected}


def test_the_authenticated_user_wins_over_the_one_a_host_asserts() -> None:
    """ChatGPT's ``openai/subject`` is the client's word; the principal is the server's."""
    traced = Traced(trace_user="name")
    host = {"openai/session": "chatgpt-conversation-1", "openai/subject": "user-anon-1"}
    with in_process(traced.app) as http:
        client = ModernClient(http, "")
        client.call_tool("whoami", meta=host, id="asserted")
        client.call_tool("whoami", meta=host, id="authenticated", X_User="alice@example.com")
    assert traced.span("asserted")["user.id"] == "user-anon-1"
    assert traced.span("authenticated")["user.id"] == "alice@example.com"


def test_a_failing_principal_hook_leaves_the_span_without_a_user() -> None:
    """The principal hook fails when telemetry asks it (first): the session is created all the same, unnamed."""
    asked: list[str] = []

    def principal(scope: Scope) -> str:
        asked.append(scope["path"])
        if len(asked) == 1:
            raise RuntimeError("the directory is down")
        return "alice"

    traced = Traced(trace_user="digest", principal=principal)
    with in_process(traced.app) as http:
        token = ModernClient(http, "").create_session()["sessionId"]
    assert jwt_claims(token)["sid"]
    assert len(asked) == 2  # telemetry's look, then the session's binding
    [create] = traced.spans()
    assert "user.id" not in attrs(create)


def test_with_capture_a_session_shows_its_label_first_and_how_it_ended_last() -> None:
    traced = Traced(capture_content=True)
    with in_process(traced.app) as http:
        client = ModernClient(http, "")
        token = conversation(client)
        careless = client.create_session({"label": f"my basket is {HANDLE}"})["sessionId"]
    sid = jwt_claims(token)["sid"]
    created = {attrs(span)["session.id"]: attrs(span) for span in traced.spans() if span.name == "sessions/create"}
    assert (created[sid]["input.value"], created[sid]["input.mime_type"]) == ("a trip to Lisbon", "text/plain")
    assert created[sid]["output.value"] == f"session {sid} created"
    assert created[jwt_claims(careless)["sid"]]["input.value"] == "my basket is [redacted]"
    ended = traced.span("delete")
    assert (ended["output.value"], ended["output.mime_type"]) == (f"session {sid} ended", "text/plain")
    assert "input.value" not in ended
    mode = traced.span("mode")
    assert (mode["output.value"], mode["output.mime_type"]) == ("terse", "text/plain")
    assert mode["gen_ai.tool.call.result"] == "terse"
    assert "input.value" not in traced.span("list")
    assert "output.value" not in traced.span("list")


# -- without an SDK --------------------------------------------------------------------------------

NO_SDK_SCRIPT = r"""
import json, sys
sys.path[:0] = ["tests", "."]
import httpx
from opentelemetry import trace
from mcp.shared import _otel as sdk_otel
from examples.quickstart import build_server
from mcp_sessions import MCPSessionMiddleware
from mcp_sessions._otel._telemetry import Telemetry
from _mcp import MCP_PATH, ModernClient, RecordingApp, session_meta, tool_text
from conftest import SECRET, serve

enabled_answers, started = [], []
original_enabled, original_start = Telemetry.enabled, Telemetry.start

def spy_enabled(self):
    answer = original_enabled(self)
    enabled_answers.append(answer)
    return answer

def spy_start(self, **kwargs):
    op = original_start(self, **kwargs)
    started.append(op.span.is_recording())
    return op

Telemetry.enabled, Telemetry.start = spy_enabled, spy_start
server = build_server()

@server.tool()
async def ambient() -> str:
    span = trace.get_current_span()
    return json.dumps({"recording": span.is_recording(), "trace_id": f"{span.get_span_context().trace_id:032x}"})

inner = RecordingApp(server.streamable_http_app(streamable_http_path=MCP_PATH, json_response=True))
app = MCPSessionMiddleware(inner, secret=SECRET)
probe = Telemetry()
op = original_start(
    probe, scope={"client": ("127.0.0.1", 1)}, headers={}, method="tools/call", protocol_version=None,
    message={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}}, modern=True,
    session_id="s", session_claims={"tp": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, start_ns=0,
)
out = {
    "probe_enabled": original_enabled(probe),
    "probe_recording": op.recording,
    "probe_attributes": dict(getattr(op.span, "attributes", None) or {}),
    "sdk_span_recording": sdk_otel._tracer.start_span("probe").is_recording(),
    "provider": type(trace.get_tracer_provider()).__name__,
}
op.end()
traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
with serve(app) as url, httpx.Client(timeout=10) as http:
    client = ModernClient(http, url)
    token = client.create_session()["sessionId"]
    _, counted = client.call_tool("count", session=session_meta(token))
    _, seen = client.call_tool("ambient", session=session_meta(token), meta={"traceparent": traceparent})
out["count"] = tool_text(counted)
out["ambient"] = json.loads(tool_text(seen))
out["forwarded_traceparent"] = inner.seen[-1]["params"]["_meta"]["traceparent"]
out["enabled_answers"] = enabled_answers
out["started_recording"] = started
print(json.dumps(out))
"""


def test_without_an_sdk_nothing_records_and_requests_work() -> None:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", NO_SDK_SCRIPT], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])

    assert out["provider"] == "ProxyTracerProvider"
    assert out["probe_enabled"] is False
    assert out["probe_recording"] is False
    assert out["probe_attributes"] == {}
    assert out["sdk_span_recording"] is False
    # The middleware asked, was told there is no SDK, and started no recording span.
    assert len(out["enabled_answers"]) >= 3
    assert not any(out["enabled_answers"])
    assert not any(out["started_recording"])
    assert out["count"] == "1"
    # The app runs in the client's trace, unrecorded: the middleware neither recorded nor re-parented it.
    assert out["ambient"] == {"recording": False, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}
    assert out["forwarded_traceparent"] == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
