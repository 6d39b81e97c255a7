"""Bounded names and bearer-free values in the telemetry, on the OpenTelemetry SDK without a server."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from opentelemetry import metrics, trace
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider

from _otel import collect, points, recording_provider, start_operation
from mcp_sessions import KeySet
from mcp_sessions._otel import Operation, Telemetry
from mcp_sessions._otel._span import OTHER
from mcp_sessions._otel._telemetry import Vocabulary

TOKEN, _ = KeySet.from_secret("a-secret-that-is-long-enough-for-hs256-0123456789").mint_session_token(ttl=60)


@pytest.fixture
def recorded() -> Iterator[tuple[Telemetry, InMemorySpanExporter, InMemoryMetricReader]]:
    (tracer_provider, exporter), reader = recording_provider(), InMemoryMetricReader()
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


class Globals:
    """The API's global getters, answering :attr:`tracer` and :attr:`meter` (the API's stand-ins until a test
    sets an SDK's), spied on: :meth:`ask` says which of them ``enabled()`` asked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tracer: object = ProxyTracerProvider()
        self.meter: object = NoOpMeterProvider()
        self.asked: list[str] = []
        monkeypatch.setattr(trace, "get_tracer_provider", lambda: self.answer("get_tracer_provider", self.tracer))
        monkeypatch.setattr(metrics, "get_meter_provider", lambda: self.answer("get_meter_provider", self.meter))

    def answer(self, getter: str, provider: object) -> object:
        self.asked.append(getter)
        return provider

    def ask(self, telemetry: Telemetry) -> tuple[bool, list[str]]:
        self.asked = []
        return telemetry.enabled(), self.asked


@pytest.fixture
def providers(monkeypatch: pytest.MonkeyPatch) -> Globals:
    return Globals(monkeypatch)


TRACER, METER = ["get_tracer_provider"], ["get_meter_provider"]


def test_an_sdk_set_after_requests_without_one_is_recorded_from_then_on(providers: Globals) -> None:
    """enabled() asks the global getters while nothing records, and never again once something does."""
    telemetry = Telemetry()
    assert providers.ask(telemetry) == (False, TRACER + METER)
    assert providers.ask(telemetry) == (False, TRACER + METER)  # asked again: an SDK may come later
    providers.tracer = TracerProvider()  # an SDK, set after requests started
    assert providers.ask(telemetry) == (True, TRACER)
    assert providers.ask(telemetry) == (True, [])  # once recording, never asked again
    assert providers.ask(Telemetry()) == (True, TRACER)  # an instance built after the SDK: from its first call


def test_given_providers_are_asked_before_the_globals(providers: Globals) -> None:
    assert providers.ask(Telemetry(tracer_provider=TracerProvider())) == (True, [])
    assert providers.ask(Telemetry(meter_provider=MeterProvider())) == (True, TRACER)
    # The API's stand-ins, given explicitly (the proxies are what the getters answer without an SDK).
    quiet = [
        Telemetry(tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider()),
        Telemetry(tracer_provider=ProxyTracerProvider(), meter_provider=NoOpMeterProvider()),
    ]
    providers.tracer = TracerProvider()
    assert [providers.ask(telemetry) for telemetry in quiet] == [(False, [])] * 2  # the global SDK is not theirs
    # Only the signal it was given no provider for comes from the globals.
    providers.tracer = ProxyTracerProvider()
    assert providers.ask(Telemetry(tracer_provider=NoOpTracerProvider())) == (False, METER)
