"""Every Python snippet of docs/observability.md runs (the one that exports to Phoenix: tests/e2e/test_viewers.py),
SessionLogFilter names every log record of a request through uvicorn and a real MCPServer, and examples/tracing.py
exports spans a viewer groups by session."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from logging.handlers import BufferingHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
from examples import tracing
from examples.quickstart import SESSION_TOOLS, build_app, build_server
from opentelemetry import trace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from _docs import exec_snippet, snippet_with
from _mcp import MCP_PATH, LegacyClient, ModernClient, jwt_claims, session_meta, tool_text
from _otel import MIDDLEWARE_SCOPE, SDK_SCOPE, SpanLog, attrs, global_tracing, of_scope, one
from _otlp import STATUS_ERROR, Exported, Receiver
from conftest import SECRET, in_process, serve
from mcp_sessions import MCPSessionMiddleware, SessionLogFilter
from mcp_sessions.telemetry import SentrySessionSpanProcessor, SessionSpanProcessor

ROOT = Path(__file__).resolve().parents[2]
PAGE = "docs/observability.md"
FASTAPI_TELEMETRY = ', telemetry={"exclude": lambda scope: scope["path"] == "/mcp"}'


def run(snippet: str, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    return exec_snippet(snippet, PAGE, namespace)


def test_the_processor_fragments() -> None:
    provider = TracerProvider()
    run(snippet_with(PAGE, "attributes=("), {"provider": provider})
    sentry = run(snippet_with(PAGE, "SentrySessionSpanProcessor()"))["provider"]
    for configured, expected in (
        (provider, [SessionSpanProcessor] * 2),
        (sentry, [SessionSpanProcessor, SentrySessionSpanProcessor]),
    ):
        processors = configured._active_span_processor._span_processors
        assert [type(processor) for processor in processors] == expected


def fastapi_spans(snippet: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[ReadableSpan], list[ReadableSpan]]:
    """All the spans of one sessions/create and one tools/list through the snippet's app, and the middleware's."""
    monkeypatch.setenv("MCP_SESSIONS_SECRET", SECRET)
    with global_tracing() as exporter:
        log = SpanLog(exporter)
        app = run(snippet)["app"]
        with in_process(app) as http:
            client = ModernClient(http, "")
            client.create_session()
            response, answer = client.request("tools/list")
            assert response.status_code == 200, answer
            assert "tools" in answer["result"], answer
        spans = log.wait_middleware(2)
    return spans, of_scope(spans, MIDDLEWARE_SCOPE)


def test_fastapi_own_span_is_the_root_named_after_the_mount(monkeypatch: pytest.MonkeyPatch) -> None:
    snippet = snippet_with(PAGE, "app = FastAPI(")
    assert FASTAPI_TELEMETRY in snippet
    spans, middleware = fastapi_spans(snippet.replace(FASTAPI_TELEMETRY, ""), monkeypatch)
    roots = {span.context.span_id: span for span in spans if span.parent is None and span.context is not None}
    # tools/list and sessions/create were both routed to the mount: the session work runs at the MCP endpoint.
    assert sorted(span.name for span in roots.values()) == ["POST /{path}", "POST /{path}"]
    assert all(span.parent is not None and span.parent.span_id in roots for span in middleware)


def test_fastapi_telemetry_exclude_makes_the_middleware_span_the_root(monkeypatch: pytest.MonkeyPatch) -> None:
    spans, middleware = fastapi_spans(snippet_with(PAGE, "app = FastAPI("), monkeypatch)
    assert "POST /{path}" not in {span.name for span in spans}
    assert sorted(span.name for span in middleware) == ["sessions/create", "tools/list"]
    assert all(span.parent is None for span in middleware)


def test_sentry_processor_tags_the_sdk_span_not_the_middleware_span() -> None:
    """What the docs say SentrySessionSpanProcessor does, through the quickstart with the SDK's own span."""
    with global_tracing() as exporter:
        provider = trace.get_tracer_provider()
        assert isinstance(provider, TracerProvider)
        provider.add_span_processor(SentrySessionSpanProcessor())
        log = SpanLog(exporter)
        app = build_app(json_response=True, environ={"MCP_SESSIONS_SECRET": SECRET})
        with in_process(app) as http:
            client = ModernClient(http, "")
            session = client.create_session()
            _, answer = client.call_tool("count", session=session_meta(session))
            assert "result" in answer, answer
        spans = log.wait(lambda s: bool(of_scope(s, SDK_SCOPE)) and len(of_scope(s, MIDDLEWARE_SCOPE)) >= 2, "spans")
    sid = jwt_claims(session["sessionId"])["sid"]
    assert attrs(one(spans, SDK_SCOPE, "tools/call count"))["mcp.session.id"] == sid
    middleware = attrs(one(spans, MIDDLEWARE_SCOPE, "tools/call count"))
    assert middleware["session.id"] == sid
    assert "mcp.session.id" not in middleware


@contextlib.contextmanager
def logging_restored() -> Iterator[None]:
    """The root and ``uvicorn.access`` loggers as they were, after a snippet configured logging for the process."""
    loggers = [logging.getLogger(), logging.getLogger("uvicorn.access")]
    saved = [(logger.handlers[:], logger.level, logger.propagate) for logger in loggers]
    try:
        yield
    finally:
        for logger, (handlers, level, propagate) in zip(loggers, saved, strict=True):
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate = propagate


TOOL_LOGGER = "tests.session_logs.tool"


def logging_app(**options: Any) -> MCPSessionMiddleware:
    server = build_server()

    @server.tool()
    async def note(text: str) -> str:
        """Log ``text`` through the standard logging module, as application code does."""
        logging.getLogger(TOOL_LOGGER).info("note: %s", text)
        return "noted"

    inner = server.streamable_http_app(streamable_http_path=MCP_PATH, json_response=True)
    return MCPSessionMiddleware(inner, secret=SECRET, require_session_tools=SESSION_TOOLS, **options)


def test_the_logging_config_names_the_session_in_tool_and_access_lines() -> None:
    """The dictConfig snippet, through uvicorn: a tool's line and the access line carry the session, never the token."""
    out = io.StringIO()
    with logging_restored(), serve(logging_app()) as base, httpx.Client(timeout=10) as http:
        # After uvicorn configured its own loggers, as it would.
        run(snippet_with(PAGE, "mcp_sessions.SessionLogFilter"))
        for logger in (logging.getLogger(), logging.getLogger("uvicorn.access")):
            for handler in logger.handlers:
                assert isinstance(handler, logging.StreamHandler)
                handler.setStream(out)
        client = ModernClient(http, base)
        token = client.create_session()["sessionId"]
        client.call_tool("note", {"text": "in a session"}, session=session_meta(token))
        logging.getLogger(TOOL_LOGGER).info("outside")
    sid = jwt_claims(token)["sid"]
    lines = out.getvalue().splitlines()
    assert f"INFO {TOOL_LOGGER} [data-layer {sid}] note: in a session" in lines
    assert f"INFO {TOOL_LOGGER} [- -] outside" in lines
    assert any(line.endswith(f'"POST /mcp HTTP/1.1" 200 OK [data-layer {sid}]') for line in lines), lines
    assert any(line.endswith('"POST /mcp HTTP/1.1" 200 OK [- -]') for line in lines), lines  # sessions/create
    assert token not in out.getvalue()


# -- SessionLogFilter beyond the snippet: the 2025 era, a host's conversation, the default --------------------


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    """Started before ``records``: uvicorn configures its loggers as it starts."""
    with serve(logging_app()) as plain, serve(logging_app(conversation_data="anonymous")) as hosts:
        yield {"plain": plain, "hosts": hosts}


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    """Every record logged while the test runs, at DEBUG, with the filter on the handler of the root logger and
    of ``uvicorn.access`` (which does not propagate), as the page configures it."""
    handler = BufferingHandler(capacity=sys.maxsize)  # keeps every record it is handed, after its filters ran
    handler.addFilter(SessionLogFilter())
    with logging_restored():
        for name, level in (("", logging.DEBUG), ("uvicorn.access", logging.INFO)):
            logging.getLogger(name).addHandler(handler)
            logging.getLogger(name).setLevel(level)
        yield handler.buffer


def named(record: logging.LogRecord) -> tuple[str, str]:
    """What the filter set on ``record``: (session_id, session_source)."""
    return record.__dict__["session_id"], record.__dict__["session_source"]


def tool_record(records: list[logging.LogRecord], text: str) -> logging.LogRecord:
    [record] = [r for r in records if r.name == TOOL_LOGGER and r.getMessage() == f"note: {text}"]
    return record


def test_a_tools_log_line_carries_its_sessions_stable_id_in_the_2025_era(
    servers: dict[str, str], http: httpx.Client, records: list[logging.LogRecord]
) -> None:
    """The 2026 era is the snippet's test above; here the SDK's own records of the request are named too."""
    client = LegacyClient(http, servers["plain"])
    client.initialize()
    token = client.create_session()["sessionId"]
    sid = jwt_claims(token)["sid"]
    assert tool_text(client.call_tool("note", {"text": "in a session"}, session=session_meta(token))[1]) == "noted"
    assert tool_text(client.call_tool("note", {"text": "without one"})[1]) == "noted"

    assert named(tool_record(records, "in a session")) == (sid, "data-layer")
    assert named(tool_record(records, "without one")) == ("-", "-")
    # uvicorn writes its access line while the app sends the response: inside the request, so named too.
    assert [named(r) for r in records if r.name == "uvicorn.access"][-2:] == [(sid, "data-layer"), ("-", "-")]
    assert any(r.name.startswith("mcp.") and named(r)[0] == sid for r in records)  # the SDK's, at DEBUG
    # The token is a bearer value: never an attribute the filter sets.
    assert all(token not in named(r) for r in records)
    assert all(token not in r.getMessage() for r in records if r.name.startswith("mcp_sessions"))


def test_a_hosts_conversation_is_named_as_its_spans_name_it(
    servers: dict[str, str], http: httpx.Client, records: list[logging.LogRecord]
) -> None:
    ModernClient(http, servers["hosts"]).call_tool(
        "note", {"text": "vscode"}, meta={"vscode.conversationId": "chat-17"}
    )
    assert named(tool_record(records, "vscode")) == ("chat-17", "vscode")


def test_the_dash_is_an_option() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    assert SessionLogFilter(default="").filter(record) is True
    assert named(record) == ("", "")


# -- examples/tracing.py: over real OTLP/HTTP to a tiny receiver on 127.0.0.1 (tests/_otlp.py) ----------------------

# A whole compact JWS (a session or state token): three base64url segments.
WHOLE_TOKEN = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def _assert_no_token(spans: list[Exported]) -> None:
    for span in spans:
        for key, value in span.attributes.items():
            assert not WHOLE_TOKEN.search(f"{key}={value}"), f"a token in {span.name}: {key}"


def test_the_example_exports_spans_grouped_by_session(receiver: tuple[Receiver, str]) -> None:
    received, endpoint = receiver
    provider = tracing.make_tracer_provider(endpoint=endpoint)
    agent = tracing.make_tracer_provider(endpoint=endpoint, service_name=tracing.CLIENT_SERVICE_NAME)
    metrics = InMemoryMetricReader()
    app = tracing.build_app(
        tracer_provider=provider,
        meter_provider=tracing.make_meter_provider(readers=[metrics]),
        environ={"MCP_SESSIONS_SECRET": SECRET},
    )
    out = io.StringIO()
    with serve(app) as base:
        sids = tracing.run_conversations(f"{base}/mcp", out=out, agent_tracer=agent.get_tracer("test"))
    assert provider.force_flush()
    assert agent.force_flush()
    provider.shutdown()
    agent.shutdown()

    assert received.posts >= 1
    assert not WHOLE_TOKEN.search(out.getvalue()), "the conversation printed a token"
    _assert_no_token(received.spans)
    server = [s for s in received.spans if s.scope == "mcp_sessions"]
    assert {s.service for s in server} == {tracing.SERVICE_NAME}

    # Every span the middleware made for a session's request carries its stable id, twice.
    for name, sid in sids.items():
        of_session = [s for s in server if s.attributes.get("session.id") == sid]
        assert "sessions/create" in [s.name for s in of_session], name
        assert all(s.attributes["gen_ai.conversation.id"] == sid for s in of_session)
    a_names = [s.name for s in server if s.attributes.get("session.id") == sids["A"]]
    # Two counts, and the one refused after sessions/delete (its token verified: it still names A).
    assert a_names.count("tools/call count") == 3
    assert {"tools/call countdown", "tools/call add_note", "sessions/delete"} <= set(a_names)
    assert "mcp.session.id" not in {key for s in server for key in s.attributes}  # 2026-07-28: never
    assert not {"input.value", "output.value"} & {key for s in server for key in s.attributes}  # no capture asked

    # The user's span in the tool: session.id from baggage, in the trace of the middleware's span. (Its parent
    # is the SDK's span, which goes to the global provider: not this one, unless the global is set to it.)
    notes = [s for s in received.spans if s.name == "notes.append"]
    assert len(notes) == 4
    add_note_traces = {s.trace_id: s.attributes["session.id"] for s in server if s.name == "tools/call add_note"}
    for span in notes:
        assert span.attributes["session.id"] in sids.values()
        assert add_note_traces[span.trace_id] == span.attributes["session.id"]

    # Errors are marked: the tool's refusal, and the -32043 after sessions/delete.
    refused = [s for s in server if s.name == "tools/call add_note" and s.status == STATUS_ERROR]
    assert len(refused) == 1
    assert refused[0].attributes["error.type"] == "tool_error"
    assert refused[0].attributes["session.id"] == sids["B"]
    gone = [s for s in server if s.attributes.get("rpc.response.status_code") == "-32043"]
    assert len(gone) == 1
    assert gone[0].status == STATUS_ERROR
    assert gone[0].attributes["session.id"] == sids["A"]

    # Conversation B's agent sent _meta.traceparent: its CLIENT span is the parent of the middleware's span.
    b_spans = [s for s in server if s.attributes.get("session.id") == sids["B"]]
    spans = received.by_id()
    for span in b_spans:
        parent = spans[span.parent_id]
        assert parent.service == tracing.CLIENT_SERVICE_NAME
        assert parent.name.startswith("agent: ")

    data = metrics.get_metrics_data()
    assert data is not None
    recorded = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"mcp.server.operation.duration", "mcp_sessions.sessions.created", "mcp.server.session.duration"} <= recorded


def test_the_command_in_the_docs(receiver: tuple[Receiver, str]) -> None:
    """`python examples/tracing.py --conversation`: with the global provider set, the SDK's span nests too; with
    ``MCP_SESSIONS_CAPTURE_CONTENT=1`` in its environment, its spans hold each call's input and output."""
    received, endpoint = receiver
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MCP_SESSIONS_"))}
    env["MCP_SESSIONS_CAPTURE_CONTENT"] = "1"
    done = subprocess.run(
        [sys.executable, "examples/tracing.py", "--conversation", "--otlp-endpoint", endpoint],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Sessions: A = " in done.stdout
    assert not WHOLE_TOKEN.search(done.stdout + done.stderr)
    _assert_no_token(received.spans)
    # The spans were flushed before the process exited.
    notes = [s for s in received.spans if s.name == "notes.append"]
    assert len(notes) == 4
    for span in notes:
        chain = [(a.scope, a.name) for a in received.ancestors(span)]
        # user span -> the SDK's span -> the middleware's span, one trace
        assert chain[:2] == [("mcp-python-sdk", "tools/call add_note"), ("mcp_sessions", "tools/call add_note")]
        assert all(a.trace_id == span.trace_id for a in received.ancestors(span))
    sdk = [s for s in received.spans if s.scope == "mcp-python-sdk"]
    assert sdk
    assert all("session.id" in s.attributes for s in sdk)  # from SessionSpanProcessor
    server = [s for s in received.spans if s.scope == "mcp_sessions"]
    captured = {(s.name, s.attributes.get("input.value"), s.attributes.get("output.value")) for s in server}
    # What a person reads: the label a session was created with, each tool's arguments and its answer as text.
    assert {
        ("tools/call add_note", '{"text":"buy milk"}', "1"),
        ("tools/call set_mode", '{"mode":"focus"}', "focus"),
    } <= captured
    creates = {(inputs, output) for name, inputs, output in captured if name == "sessions/create"}
    sid = re.compile(r"session [A-Za-z0-9_-]{24} created")
    assert {label for label, _ in creates} == {"conversation A", "conversation B"}
    assert all(sid.fullmatch(str(output)) for _, output in creates)
