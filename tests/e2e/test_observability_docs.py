"""Every Python snippet of docs/observability.md runs (the one that exports to Phoenix: tests/e2e/test_viewers.py)."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from examples.quickstart import build_app, build_server
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from _docs import exec_snippet, one_with, python_snippets
from _mcp import ModernClient, jwt_claims, session_meta
from _otel import MIDDLEWARE_SCOPE, SDK_SCOPE, SpanLog, attrs, global_tracing, of_scope, one
from conftest import SECRET, in_process, serve
from mcp_sessions import MCPSessionMiddleware
from mcp_sessions.telemetry import SentrySessionSpanProcessor, SessionSpanProcessor

SNIPPETS = python_snippets("docs/observability.md")
FASTAPI_TELEMETRY = ', telemetry={"exclude": lambda scope: scope["path"] == "/mcp"}'


def snippet_with(text: str) -> str:
    return one_with(SNIPPETS, text)


def run(snippet: str, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    return exec_snippet(snippet, "docs/observability.md", namespace)


def test_the_processor_fragments() -> None:
    provider = TracerProvider()
    run(snippet_with("attributes=("), {"provider": provider})
    sentry = run(snippet_with("SentrySessionSpanProcessor()"))["provider"]
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
            assert response.status_code == 200 and "tools" in answer["result"], answer
        spans = log.wait_middleware(2)
    return spans, of_scope(spans, MIDDLEWARE_SCOPE)


def test_fastapi_own_span_is_the_root_named_after_the_mount(monkeypatch: pytest.MonkeyPatch) -> None:
    snippet = snippet_with("app = FastAPI(")
    assert FASTAPI_TELEMETRY in snippet
    spans, middleware = fastapi_spans(snippet.replace(FASTAPI_TELEMETRY, ""), monkeypatch)
    roots = {span.context.span_id: span for span in spans if span.parent is None and span.context is not None}
    # tools/list and sessions/create were both routed to the mount: the session work runs at the MCP endpoint.
    assert sorted(span.name for span in roots.values()) == ["POST /{path}", "POST /{path}"]
    assert all(span.parent is not None and span.parent.span_id in roots for span in middleware)


def test_fastapi_telemetry_exclude_makes_the_middleware_span_the_root(monkeypatch: pytest.MonkeyPatch) -> None:
    spans, middleware = fastapi_spans(snippet_with("app = FastAPI("), monkeypatch)
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
    assert middleware["session.id"] == sid and "mcp.session.id" not in middleware


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


def test_the_logging_config_names_the_session_in_tool_and_access_lines() -> None:
    """The dictConfig snippet, through uvicorn: a tool's line and the access line carry the session, never the token."""
    server = build_server()

    @server.tool()
    async def note() -> str:
        """Log a line, as application code does."""
        logging.getLogger("docs.tool").info("noted")
        return "noted"

    app = MCPSessionMiddleware(
        server.streamable_http_app(streamable_http_path="/mcp", json_response=True), secret=SECRET
    )
    out = io.StringIO()
    with logging_restored(), serve(app) as base, httpx.Client(timeout=10) as http:
        run(snippet_with("mcp_sessions.SessionLogFilter"))  # after uvicorn configured its own loggers, as it would
        for logger in (logging.getLogger(), logging.getLogger("uvicorn.access")):
            for handler in logger.handlers:
                assert isinstance(handler, logging.StreamHandler)
                handler.setStream(out)
        client = ModernClient(http, base)
        token = client.create_session()["sessionId"]
        client.call_tool("note", session=session_meta(token))
        logging.getLogger("docs.tool").info("outside")
    sid = jwt_claims(token)["sid"]
    lines = out.getvalue().splitlines()
    assert f"INFO docs.tool [data-layer {sid}] noted" in lines
    assert "INFO docs.tool [- -] outside" in lines
    assert any(line.endswith(f'"POST /mcp HTTP/1.1" 200 OK [data-layer {sid}]') for line in lines), lines
    assert any(line.endswith('"POST /mcp HTTP/1.1" 200 OK [- -]') for line in lines), lines  # sessions/create
    assert token not in out.getvalue()
