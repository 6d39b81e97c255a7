"""The opt-in span processors of mcp_sessions.telemetry, on the real OpenTelemetry SDK (a provider of their own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_sessions.telemetry import SESSION_BAGGAGE_KEY, SentrySessionSpanProcessor, SessionSpanProcessor

SESSION_ID = "conv-4f1c"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    yield exported
    exported.shutdown()


def provider_with(*processors: object, exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    for processor in processors:
        provider.add_span_processor(processor)  # type: ignore[arg-type]
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def in_session(session_id: str | None) -> context.Context:
    """The context a request of ``session_id`` runs in: the middleware's baggage, nothing else."""
    ctx = context.Context()
    return ctx if session_id is None else baggage.set_baggage(SESSION_BAGGAGE_KEY, session_id, ctx)


def finished(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_sentry_processor_puts_the_session_in_mcp_session_id(exporter: InMemorySpanExporter) -> None:
    provider = provider_with(SessionSpanProcessor(), SentrySessionSpanProcessor(), exporter=exporter)
    tracer = provider.get_tracer("test")
    token = context.attach(in_session(SESSION_ID))
    try:
        with tracer.start_as_current_span("tools/call count"), tracer.start_as_current_span("db.query"):
            pass
    finally:
        context.detach(token)
    spans = finished(exporter)
    for name in ("tools/call count", "db.query"):
        attributes = dict(spans[name].attributes or {})
        assert attributes["mcp.session.id"] == SESSION_ID, name
        assert attributes["session.id"] == SESSION_ID, name


@pytest.mark.parametrize(
    ("processors", "session_id", "started_with", "expected"),
    [
        pytest.param(
            (SentrySessionSpanProcessor,),
            SESSION_ID,
            {"mcp.session.id": "transport-digest"},
            {"mcp.session.id": "transport-digest"},
            id="sentry-keeps-what-the-span-started-with",
        ),
        pytest.param((SentrySessionSpanProcessor,), None, {}, {}, id="sentry-outside-a-session"),
        pytest.param((SentrySessionSpanProcessor,), "", {}, {}, id="sentry-empty-session"),
        # The registry reserves mcp.session.id for 2025-era transport sessions: only the opt-in processor sets it.
        pytest.param((SessionSpanProcessor,), SESSION_ID, {}, {"session.id": SESSION_ID}, id="default-processor"),
    ],
)
def test_what_each_processor_sets_on_a_span(
    exporter: InMemorySpanExporter,
    processors: tuple[type, ...],
    session_id: str | None,
    started_with: dict[str, str],
    expected: dict[str, str],
) -> None:
    provider = provider_with(*(processor() for processor in processors), exporter=exporter)
    tracer = provider.get_tracer("test")
    tracer.start_span("tools/call count", context=in_session(session_id), attributes=started_with).end()
    assert dict(finished(exporter)["tools/call count"].attributes or {}) == expected
    assert trace.get_current_span() is trace.INVALID_SPAN
