"""Bounded names and bearer-free values in the telemetry, on the OpenTelemetry SDK without a server.

Every client-chosen string the middleware puts on its span (``jsonrpc.request.id``, ``mcp.resource.uri``,
the ``mcp_sessions.*_original`` values, the status message, an exception event's message) goes through one
redaction: at most 256 characters, cut outside a run of base64url characters, and every such run that holds
``eyJ`` (a compact JWS: session and state tokens) or is 32 characters or longer (a handle, a transport
session id, a signature) replaced by ``[redacted]``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import metrics, trace
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider

from _otel import attrs, collect, points, recording_provider, span_strings, start_operation
from mcp_sessions import KeySet
from mcp_sessions._otel import Telemetry
from mcp_sessions._otel._span import OTHER, redacted_string
from mcp_sessions._otel._telemetry import Vocabulary
from mcp_sessions.handles import _format as fmt

KEYS = KeySet.from_secret("a-secret-that-is-long-enough-for-hs256-0123456789")
TOKEN, _ = KEYS.mint_session_token(ttl=60)
STATE = KEYS.sign_state("s" * 24, {"cart": ["apple", "pear"]})
HANDLE = fmt.encode("bsk", fmt.pack(flags=fmt.SESSION_FLAG, hint=3, expires_at=2_000_000_000), b"\x01" * 11)
TRANSPORT = uuid.uuid4().hex  # the MCP SDK's transport session id
BOUND = 256

Recorded = tuple[Telemetry, InMemorySpanExporter, InMemoryMetricReader]


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    (tracer_provider, exporter), reader = recording_provider(), InMemoryMetricReader()
    telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader]))
    yield telemetry, exporter, reader
    tracer_provider.shutdown()


def parts(bearer: str) -> list[str]:
    """What must not be left of a bearer value: itself, and each of its segments long enough to be secret."""
    return [bearer, *(part for part in bearer.replace("_", ".").split(".") if len(part) >= 20)]


# -- names: a vocabulary, OTHER for what is not in it ------------------------------------------------


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


def test_unknown_names_are_other_on_metrics_and_span_names_and_kept_on_the_span(recorded: Recorded) -> None:
    telemetry, exporter, reader = recorded
    start_operation(telemetry, "made/up", version="1999-01-01").end()
    start_operation(telemetry, "tools/call", {"name": "nope"}).end()
    [method_span, tool_span] = exporter.get_finished_spans()
    assert method_span.name == OTHER
    method_attributes = attrs(method_span)
    assert method_attributes["mcp.method.name"] == OTHER
    assert method_attributes["mcp_sessions.method_original"] == "made/up"
    assert method_attributes["mcp.protocol.version"] == OTHER
    assert method_attributes["mcp_sessions.protocol_version_original"] == "1999-01-01"
    tool_attributes = attrs(tool_span)
    assert tool_span.name == "tools/call"
    assert tool_attributes["gen_ai.tool.name"] == OTHER
    assert tool_attributes["mcp_sessions.target_original"] == "nope"
    series = [dict(point.attributes or {}) for point in points(collect(reader)["mcp.server.operation.duration"])]
    assert all("made/up" not in attributes.values() and "nope" not in attributes.values() for attributes in series)


def test_a_tool_the_server_answers_is_named_from_that_answer_on(recorded: Recorded) -> None:
    telemetry, exporter, _ = recorded
    first = start_operation(telemetry, "tools/call", {"name": "count"})
    first.observe_result({"content": [], "isError": False})
    first.end()
    failing = start_operation(telemetry, "tools/call", {"name": "broken"})
    failing.observe_result({"content": [], "isError": True})  # an error result proves nothing about the name
    failing.end()
    listed = start_operation(telemetry, "prompts/list")
    listed.observe_result({"prompts": [{"name": "summary"}]})
    listed.end()
    start_operation(telemetry, "prompts/get", {"name": "summary"}).end()
    names = [span.name for span in exporter.get_finished_spans()]
    assert names == ["tools/call count", "tools/call", "prompts/list", "prompts/get summary"]
    assert attrs(exporter.get_finished_spans()[0])["gen_ai.tool.name"] == "count"
    assert "mcp_sessions.target_original" not in attrs(exporter.get_finished_spans()[0])
    assert attrs(exporter.get_finished_spans()[1])["error.type"] == "tool_error"


def test_the_rejection_counter_bounds_its_method(recorded: Recorded) -> None:
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


# -- client-chosen strings: bounded, and never a bearer value ----------------------------------------


@pytest.mark.parametrize("bearer", [TOKEN, STATE, HANDLE, TRANSPORT], ids=["token", "state", "handle", "transport"])
def test_no_bearer_value_in_a_uri_an_id_a_status_or_an_exception(recorded: Recorded, bearer: str) -> None:
    telemetry, exporter, _ = recorded
    op = start_operation(telemetry, "resources/read", {"uri": f"note://{bearer}"}, request_id=bearer)
    op.fail(-32602, f"Unknown resource: note://{bearer}")
    try:
        raise ValueError(f"no note named {bearer}")
    except ValueError as exc:
        op.exception(exc)
    op.end()
    [span] = exporter.get_finished_spans()

    for text in span_strings(span):
        for part in parts(bearer):
            assert part not in text, f"{part!r} is in {text!r}"
    assert attrs(span)["mcp.resource.uri"].startswith("note://[redacted]")
    assert span.status.description is not None
    assert span.status.description.startswith("Unknown resource: note://")
    [event] = span.events
    assert str(dict(event.attributes or {})["exception.message"]).startswith("no note named [redacted]")
    assert "test_no_bearer_value_in_a_uri_an_id_a_status_or_an_exception" in str(event.attributes)  # its frames


@pytest.mark.parametrize("name", [HANDLE, TOKEN, "x" * 100_000], ids=["handle", "token", "long"])
def test_originals_are_bounded_and_redacted(recorded: Recorded, name: str) -> None:
    telemetry, exporter, _ = recorded
    start_operation(telemetry, "tools/call", {"name": name}, version=name).end()
    start_operation(telemetry, name, {}, request_id=2).end()

    for span in exporter.get_finished_spans():
        for text in span_strings(span):
            assert len(text) <= BOUND
            for part in parts(name):
                assert part not in text


@pytest.mark.parametrize(
    "request_id", ["i" * 2**20, "7 " * 2**19, 10**4000, "eyJ" + "e" * 2**20], ids=["run", "words", "int", "jws"]
)
def test_a_huge_request_id_or_uri_is_bounded(recorded: Recorded, request_id: object) -> None:
    telemetry, exporter, _ = recorded
    start_operation(telemetry, "resources/read", {"uri": f"note://{request_id}"}, request_id=request_id).end()
    [span] = exporter.get_finished_spans()

    assert all(len(text) <= BOUND for text in span_strings(span))
    assert attrs(span)["mcp.resource.uri"].startswith("note://")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        *((kept, kept) for kept in ["1", "req-42", "note://notes/today", "file:///home/me/project/src/main.py"]),
        *((kept, kept) for kept in ["Unknown resource: a/b", "tools/call"]),
        ("a signature: " + "A" * 43, "a signature: [redacted]"),
    ],
)
def test_ordinary_values_are_kept_as_sent_and_a_bearer_run_replaced(value: str, expected: str) -> None:
    assert redacted_string(value) == expected


bearers = st.one_of(
    st.sampled_from([TOKEN, STATE, TRANSPORT]),
    st.builds(
        lambda prefix, random: fmt.encode(
            prefix, fmt.pack(flags=0, hint=1, expires_at=2**31, random=random), b"t" * 11
        ),
        st.from_regex(fmt.PREFIX_SHAPE, fullmatch=True),
        st.binary(min_size=10, max_size=10),
    ),
)
fillers = st.text(alphabet=st.sampled_from("ab_-.Z9 /:?=&#%\"'é"), max_size=300)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(fillers, bearers), max_size=4), fillers)
def test_no_part_of_a_bearer_survives_wherever_it_sits(pieces: list[tuple[str, str]], tail: str) -> None:
    text = "".join(filler + bearer for filler, bearer in pieces) + tail
    redacted = redacted_string(text)
    assert len(redacted) <= BOUND
    for _, bearer in pieces:
        for part in parts(bearer):
            assert part not in redacted


# -- enabled(): whether anything records ----------------------------------------------------------------


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
