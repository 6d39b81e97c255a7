"""OpenTelemetry helpers for the telemetry tests: the process's one SDK TracerProvider, spans, metrics.

The global TracerProvider can be set once per process, and the MCP SDK's own
span always uses it; so the tests install one (or, if something in the same
process already set an SDK provider, add their processors to it) and read
every span through one in-memory exporter, then undo it for the tests that
run after them. Spans end in the server's thread, some after the response
reached the client: :meth:`SpanLog.wait` waits, bounded, for the ones a test
expects.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from mcp.shared import _otel as sdk_otel
from opentelemetry import trace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import ProxyTracer, SpanContext
from opentelemetry.util._once import Once
from starlette.types import Scope

from _mcp import LegacyClient, ModernClient, RecordingApp
from _waits import until
from mcp_sessions._otel import Operation, Telemetry
from mcp_sessions.telemetry import SessionSpanProcessor

MIDDLEWARE_SCOPE = "mcp_sessions"
SDK_SCOPE = "mcp-python-sdk"


def recording_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A TracerProvider of the test's own (the global one untouched), and the exporter that keeps each span it ends."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@contextlib.contextmanager
def global_tracing() -> Iterator[InMemorySpanExporter]:
    """The process's SDK TracerProvider, with a SessionSpanProcessor and an in-memory exporter added.

    On exit, a provider set here is unset again, so that later tests run without an SDK as they would
    alone: the API's globals are reset as ``opentelemetry-test-utils``' ``reset_trace_globals`` does,
    and the MCP SDK's module-level proxy tracer forgets the real tracer it cached.
    """
    installed = not isinstance(trace.get_tracer_provider(), TracerProvider)
    if installed:
        trace.set_tracer_provider(TracerProvider())
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), f"the global TracerProvider is a {type(provider)}"
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SessionSpanProcessor())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield exporter
    finally:
        exporter.shutdown()  # keeps no more spans
        if installed:
            trace._TRACER_PROVIDER_SET_ONCE = Once()
            trace._TRACER_PROVIDER = None
            if isinstance(sdk_otel._tracer, ProxyTracer):
                sdk_otel._tracer._real_tracer = None


class SpanLog:
    """The spans the process started since the last :meth:`clear`, and has finished.

    A span that started before (a request of an earlier test or fixture, whose span ends after its
    response reached the client) is not in the log, even if it ends after the clear.
    """

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self._exporter = exporter
        self._since = 0

    def clear(self) -> None:
        self._exporter.clear()
        self._since = time.time_ns()  # the clock spans take their start times from

    def finished(self) -> list[ReadableSpan]:
        return [
            span
            for span in self._exporter.get_finished_spans()
            if span.start_time is None or span.start_time >= self._since
        ]

    def wait(self, done: Callable[[list[ReadableSpan]], bool], what: str) -> list[ReadableSpan]:
        """All finished spans, once ``done`` holds for them (a bounded wait, not a timing check)."""
        return until(
            lambda: spans if done(spans := self.finished()) else None,
            lambda: f"never saw {what}; finished spans: {describe(self.finished())}",
        )

    def wait_middleware(self, count: int) -> list[ReadableSpan]:
        """All finished spans, once ``count`` middleware spans have ended (they end last in a request)."""
        return self.wait(lambda spans: len(of_scope(spans, MIDDLEWARE_SCOPE)) >= count, f"{count} middleware spans")


def describe(spans: Iterable[ReadableSpan]) -> list[str]:
    return [f"{span.instrumentation_scope.name if span.instrumentation_scope else '?'}:{span.name}" for span in spans]


def of_scope(spans: Iterable[ReadableSpan], scope: str) -> list[ReadableSpan]:
    return [
        span for span in spans if span.instrumentation_scope is not None and span.instrumentation_scope.name == scope
    ]


def named(spans: Iterable[ReadableSpan], scope: str, name: str) -> list[ReadableSpan]:
    return [span for span in of_scope(spans, scope) if span.name == name]


def one(spans: Iterable[ReadableSpan], scope: str, name: str) -> ReadableSpan:
    found = named(spans, scope, name)
    assert len(found) == 1, f"expected one {scope}:{name}, got {describe(found)}"
    return found[0]


def by_request_id(spans: Iterable[ReadableSpan], scope: str, request_id: str) -> ReadableSpan:
    found = [span for span in of_scope(spans, scope) if attrs(span).get("jsonrpc.request.id") == request_id]
    assert len(found) == 1, f"expected one {scope} span for request {request_id}, got {describe(found)}"
    return found[0]


def sdk_child(spans: Iterable[ReadableSpan], parent: ReadableSpan) -> ReadableSpan:
    [child] = [span for span in of_scope(spans, SDK_SCOPE) if parent_of(span) == self_of(parent)]
    return child


def connect(era: str, http: Any, url: str, spans: SpanLog) -> ModernClient | LegacyClient:
    """A raw client of ``era``; a legacy one has done its handshake, whose spans are then cleared."""
    if era == "modern":
        return ModernClient(http, url)
    client = LegacyClient(http, url)
    client.initialize()
    spans.wait_middleware(2)  # initialize, notifications/initialized
    spans.clear()
    return client


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def ids(context: SpanContext | None) -> tuple[int, int] | None:
    """A span context as (trace id, span id), comparable across local and remote contexts."""
    return None if context is None else (context.trace_id, context.span_id)


def parent_of(span: ReadableSpan) -> tuple[int, int] | None:
    return ids(span.parent)


def self_of(span: ReadableSpan) -> tuple[int, int]:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id, context.span_id


def links_of(span: ReadableSpan) -> list[tuple[tuple[int, int] | None, dict[str, Any]]]:
    return [(ids(link.context), dict(link.attributes or {})) for link in span.links]


def traceparent(trace_id: int, span_id: int, flags: int = 1) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def traceparent_of(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return traceparent(context.trace_id, context.span_id, context.trace_flags)


# -- metrics ------------------------------------------------------------------------------


def collect(reader: InMemoryMetricReader) -> dict[str, Metric]:
    """Every metric the reader has, by name."""
    data = reader.get_metrics_data()
    resources = [] if data is None else data.resource_metrics
    return {
        metric.name: metric for resource in resources for scope in resource.scope_metrics for metric in scope.metrics
    }


def points(metric: Metric | None) -> list[Any]:
    return [] if metric is None else list(metric.data.data_points)


def wait_metric_count(reader: InMemoryMetricReader, name: str, count: int) -> dict[str, Metric]:
    """The reader's metrics once the histogram ``name`` has ``count`` measurements (recorded after the response)."""

    def measured(metrics: dict[str, Metric]) -> int:
        return sum(point.count for point in points(metrics.get(name)))

    return until(
        lambda: metrics if measured(metrics := collect(reader)) >= count else None,
        lambda: f"{name} has {measured(collect(reader))} measurements, expected {count}",
    )


# -- what a scan for secrets reads -------------------------------------------------------


def _values(attributes: Mapping[str, Any] | None) -> Iterator[str]:
    for key, value in (attributes or {}).items():
        yield key
        if isinstance(value, str):
            yield value
        elif isinstance(value, Sequence):
            yield from (str(item) for item in value)
        else:
            yield str(value)


def span_strings(span: ReadableSpan) -> Iterator[str]:
    """Every string a span exports: name, attributes, events, links, status."""
    yield span.name
    yield from _values(span.attributes)
    for event in span.events:
        yield event.name
        yield from _values(event.attributes)
    for link in span.links:
        yield from _values(link.attributes)
    if span.status.description is not None:
        yield span.status.description


def metric_attribute_values(metrics: Mapping[str, Metric]) -> list[tuple[str, str, Any]]:
    """(metric, attribute, value) for every data point attribute of every metric."""
    found = []
    for name, metric in metrics.items():
        for point in points(metric):
            for key, value in (point.attributes or {}).items():
                found.append((name, key, value))
    return found


# -- recording what crosses the wire ----------------------------------------------------


class ExchangeRecorder(RecordingApp):
    """A :class:`RecordingApp` that also keeps each POST's headers (lower-case names)."""

    def __init__(self, app: Any) -> None:
        super().__init__(app)
        self.headers: list[dict[str, str]] = []

    def keep(self, scope: Scope, body: bytes, message: Any) -> None:
        super().keep(scope, body, message)
        self.headers.append({name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]})

    def find(self, method: str) -> list[tuple[dict[str, str], Any]]:
        """(headers, body) of every recorded single-message POST of ``method``."""
        return [
            (headers, body)
            for headers, body in zip(self.headers, self.seen, strict=True)
            if isinstance(body, dict) and body.get("method") == method
        ]


def start_operation(
    telemetry: Telemetry,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    request_id: object = 1,
    version: str = "2026-07-28",
) -> Operation:
    """One call's operation, started as the pipeline starts it for a request with no session."""
    return telemetry.start(
        scope={},
        headers={},
        message={"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}},
        method=method,
        protocol_version=version,
        modern=True,
        session_id=None,
        session_claims=None,
        start_ns=0,
    )
