"""Bounded names and bearer-free values in the telemetry, on the OpenTelemetry SDK without a server."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.metrics import _internal as metrics_api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider
from opentelemetry.util._once import Once

from _otel import collect, global_tracing, points, start_operation
from mcp_sessions import KeySet
from mcp_sessions._otel import Operation, Telemetry, _telemetry
from mcp_sessions._otel._names import OTHER, Vocabulary, _redacted

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
    return start_operation(telemetry, method, None if name is None else {"name": name}, version=version)


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
    cleaned = _redacted(text)
    assert TOKEN.split(".")[1] not in cleaned and TOKEN.rsplit(".", 1)[1] not in cleaned
    assert "[redacted]" in cleaned
    assert _redacted("a signature: " + "A" * 43) == "a signature: [redacted]"
    assert _redacted("tools/call") == "tools/call"
    assert len(_redacted("x/" * 10_000)) == 256


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


@pytest.fixture
def no_global_sdk() -> Iterator[None]:
    """The API's own stand-ins as the global providers, whatever an earlier test in this process set.

    A global provider cannot be unset publicly: it is set aside and put back as opentelemetry-test-utils'
    ``reset_trace_globals`` does, never skipped (a skip would hide the test under some orders).
    """
    saved = (
        trace._TRACER_PROVIDER,
        trace._TRACER_PROVIDER_SET_ONCE,
        metrics_api._METER_PROVIDER,
        metrics_api._METER_PROVIDER_SET_ONCE,
    )
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    metrics_api._METER_PROVIDER, metrics_api._METER_PROVIDER_SET_ONCE = None, Once()
    try:
        assert isinstance(trace.get_tracer_provider(), ProxyTracerProvider)
        yield
    finally:
        (
            trace._TRACER_PROVIDER,
            trace._TRACER_PROVIDER_SET_ONCE,
            metrics_api._METER_PROVIDER,
            metrics_api._METER_PROVIDER_SET_ONCE,
        ) = saved


Ask = Callable[[Telemetry], tuple[bool, list[str]]]


@pytest.fixture
def ask(monkeypatch: pytest.MonkeyPatch) -> Ask:
    """``enabled()``'s answer, and which of the API's global getters it called (spied on) to give it."""
    called: list[str] = []

    def spy(name: str, original: Callable[[], object]) -> Callable[[], object]:
        def getter() -> object:
            called.append(name)
            return original()

        return getter

    monkeypatch.setattr(trace, "get_tracer_provider", spy("get_tracer_provider", trace.get_tracer_provider))
    monkeypatch.setattr(metrics, "get_meter_provider", spy("get_meter_provider", metrics.get_meter_provider))

    def enabled(telemetry: Telemetry) -> tuple[bool, list[str]]:
        called.clear()
        return telemetry.enabled(), list(called)

    return enabled


TRACER, METER = ["get_tracer_provider"], ["get_meter_provider"]


@pytest.mark.usefixtures("no_global_sdk")
def test_an_sdk_set_after_requests_without_one_is_recorded_within_a_second(
    monkeypatch: pytest.MonkeyPatch, ask: Ask
) -> None:
    """enabled() asks the global getters at the first call, then once per RECHECK_SECONDS until an SDK records."""
    now = [100.0]
    monkeypatch.setattr(_telemetry, "monotonic", lambda: now[0])
    telemetry = Telemetry()
    assert ask(telemetry) == (False, TRACER + METER)  # the first call asks
    now[0] += _telemetry.RECHECK_SECONDS / 2
    assert ask(telemetry) == (False, [])  # within the interval: the clock only
    with global_tracing():  # an SDK set the public way, after requests started
        assert ask(telemetry) == (False, [])  # not seen before the interval is over
        now[0] += _telemetry.RECHECK_SECONDS / 2
        assert ask(telemetry) == (True, TRACER)
        now[0] += 3600
        assert ask(telemetry) == (True, [])  # once recording, never asked again
        assert ask(Telemetry()) == (True, TRACER)  # an instance built after the SDK: from its first call
    assert ask(telemetry) == (True, [])  # once recording, always recording


@pytest.mark.usefixtures("no_global_sdk")
def test_given_providers_decide_at_construction(ask: Ask) -> None:
    assert ask(Telemetry(tracer_provider=TracerProvider())) == (True, [])
    assert ask(Telemetry(meter_provider=MeterProvider())) == (True, [])
    # The API's stand-ins, given explicitly (the proxies are what the getters answer without an SDK).
    quiet = [
        Telemetry(tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider()),
        Telemetry(tracer_provider=trace.get_tracer_provider(), meter_provider=metrics.get_meter_provider()),
    ]
    with global_tracing():
        assert [ask(telemetry) for telemetry in quiet] == [(False, [])] * 2  # the global SDK is not theirs
    # Only the signal it was given no provider for comes from the globals.
    assert ask(Telemetry(tracer_provider=NoOpTracerProvider())) == (False, METER)
