"""Bounded names and bearer-free values in the telemetry, on the OpenTelemetry SDK without a server."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from _otel import collect, points
from mcp_sessions import KeySet
from mcp_sessions.otel._names import _original
from mcp_sessions.otel._telemetry import OTHER, Operation, Telemetry, Vocabulary, _redacted

TOKEN, _ = KeySet.from_secret("a-secret-that-is-long-enough-for-hs256-0123456789").mint_session_token(ttl=60)


@pytest.fixture
def recorded() -> Iterator[tuple[Telemetry, InMemorySpanExporter, InMemoryMetricReader]]:
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader]))
    yield telemetry, exporter, reader
    tracer_provider.shutdown()


def start(telemetry: Telemetry, method: str, *, name: str | None = None, version: str = "2026-07-28") -> Operation:
    params: dict[str, Any] = {} if name is None else {"name": name}
    return telemetry.start(
        scope={},
        headers={},
        message={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        method=method,
        protocol_version=version,
        modern=True,
        session_id=None,
        session_claims=None,
        start_ns=0,
    )


def test_a_vocabulary_learns_up_to_its_cap_and_keeps_what_it_learned() -> None:
    vocabulary = Vocabulary(["given"], cap=2)
    vocabulary.learn_listed([{"name": "a"}, "not an object", {"name": 7}, {"title": "no name"}])
    vocabulary.learn("b")
    vocabulary.learn("c")  # over the cap
    assert [vocabulary.bounded(name) for name in ("given", "a", "b", "c", "7")] == ["given", "a", "b", OTHER, OTHER]


def test_the_transport_session_digest_is_keyed_per_instance() -> None:
    first, second = Telemetry(), Telemetry()
    digest = first.transport_session_digest(TOKEN.encode())
    assert re.fullmatch(r"ts-[A-Za-z0-9_-]{24}", digest)
    assert digest == first.transport_session_digest(TOKEN.encode())
    assert digest != second.transport_session_digest(TOKEN.encode())
    assert digest != first.transport_session_digest(b"another")


@pytest.mark.parametrize("around", ["{}", "Validation error: input_value={{'sessionId': '{}'}}", "x{}x"])
def test_tokens_never_reach_a_status_or_an_original(around: str) -> None:
    text = around.format(TOKEN)
    for cleaned in (_redacted(text), _original(text)):
        assert TOKEN.split(".")[1] not in cleaned and TOKEN.rsplit(".", 1)[1] not in cleaned
        assert "[redacted]" in cleaned
    assert _redacted("a signature: " + "A" * 43) == "a signature: [redacted]"
    assert _original("tools/call") == "tools/call"
    assert len(_original("x" * 10_000)) == 256


def test_unknown_names_are_other_on_metrics_and_span_names_and_kept_on_the_span(
    recorded: tuple[Telemetry, InMemorySpanExporter, InMemoryMetricReader],
) -> None:
    telemetry, exporter, reader = recorded
    start(telemetry, "made/up", version="1999-01-01").end()
    start(telemetry, "tools/call", name="nope").end()
    [method_span, tool_span] = exporter.get_finished_spans()
    assert method_span.name == OTHER
    method_attributes = dict(method_span.attributes or {})
    assert method_attributes["mcp.method.name"] == OTHER
    assert method_attributes["mcp_sessions.method_original"] == "made/up"
    assert method_attributes["mcp.protocol.version"] == OTHER
    assert method_attributes["mcp_sessions.protocol_version_original"] == "1999-01-01"
    tool_attributes = dict(tool_span.attributes or {})
    assert tool_span.name == "tools/call"
    assert tool_attributes["gen_ai.tool.name"] == OTHER
    assert tool_attributes["mcp_sessions.target_original"] == "nope"
    series = [dict(point.attributes or {}) for point in points(collect(reader)["mcp.server.operation.duration"])]
    assert all("made/up" not in attributes.values() and "nope" not in attributes.values() for attributes in series)


def test_a_tool_the_server_answers_is_named_from_that_answer_on(
    recorded: tuple[Telemetry, InMemorySpanExporter, InMemoryMetricReader],
) -> None:
    telemetry, exporter, _ = recorded
    first = start(telemetry, "tools/call", name="count")
    first.observe_result({"content": [], "isError": False})
    first.end()
    failing = start(telemetry, "tools/call", name="broken")
    failing.observe_result({"content": [], "isError": True})  # an error result proves nothing about the name
    failing.end()
    listed = start(telemetry, "prompts/list")
    listed.observe_result({"prompts": [{"name": "summary"}]})
    listed.end()
    prompt = start(telemetry, "prompts/get", name="summary")
    prompt.end()
    names = [span.name for span in exporter.get_finished_spans()]
    assert names == ["tools/call count", "tools/call", "prompts/list", "prompts/get summary"]
    assert dict(exporter.get_finished_spans()[0].attributes or {})["gen_ai.tool.name"] == "count"
    assert "mcp_sessions.target_original" not in dict(exporter.get_finished_spans()[0].attributes or {})
    assert dict(exporter.get_finished_spans()[1].attributes or {})["error.type"] == "tool_error"


def test_the_rejection_counter_bounds_its_method(
    recorded: tuple[Telemetry, InMemorySpanExporter, InMemoryMetricReader],
) -> None:
    telemetry, _, reader = recorded
    telemetry.sessions_rejected.add(1, {"mcp_sessions.reason": "required", "mcp.method.name": "made/up"})
    telemetry.sessions_rejected.add(1, {"mcp_sessions.reason": "required", "mcp.method.name": "tools/call"})
    telemetry.sessions_rejected.add(1, {"mcp_sessions.reason": "invalid_token"})
    rejected = {
        tuple(sorted(dict(point.attributes or {}).items())): point.value
        for point in points(collect(reader)["mcp_sessions.sessions.rejected"])
    }
    assert rejected == {
        (("mcp.method.name", OTHER), ("mcp_sessions.reason", "required")): 1,
        (("mcp.method.name", "tools/call"), ("mcp_sessions.reason", "required")): 1,
        (("mcp_sessions.reason", "invalid_token"),): 1,
    }


@pytest.mark.parametrize(
    ("options", "error"),
    [({"known_tools": "count"}, TypeError), ({"max_learned_names": -1}, ValueError), ({"trace_mode": "x"}, ValueError)],
)
def test_bad_options_fail_at_construction(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Telemetry(**options)


def test_known_tools_are_named_from_the_start(
    recorded: tuple[Telemetry, InMemorySpanExporter, InMemoryMetricReader],
) -> None:
    _, exporter, _ = recorded
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(tracer_provider=provider, known_tools=["count"], max_learned_names=0)
    start(telemetry, "tools/call", name="count").end()
    unknown = start(telemetry, "tools/call", name="other")
    unknown.observe_result({"content": []})  # no room to learn it
    unknown.end()
    provider.shutdown()
    assert [span.name for span in exporter.get_finished_spans()] == ["tools/call count", "tools/call"]


def test_an_sdk_set_after_requests_without_one_is_recorded_from_then_on() -> None:
    """enabled() remembers the global providers it found without an SDK, and looks again once they change."""
    from opentelemetry import trace
    from opentelemetry.metrics import _internal as metrics_internal

    saved = trace._TRACER_PROVIDER, metrics_internal._METER_PROVIDER
    try:
        trace._TRACER_PROVIDER = None
        metrics_internal._METER_PROVIDER = None
        telemetry = Telemetry()
        assert telemetry.enabled() is False
        assert telemetry.enabled() is False  # the same globals: answered from what the first check found
        trace._TRACER_PROVIDER = TracerProvider()  # an SDK, set the way set_tracer_provider() sets it
        assert telemetry.enabled() is True
        trace._TRACER_PROVIDER = None
        assert telemetry.enabled() is True  # once recording, always recording
    finally:
        trace._TRACER_PROVIDER, metrics_internal._METER_PROVIDER = saved
