"""What a viewer reads of a conversation, without a server: readable results, user ids, the session on every span,
and the flush at shutdown.

Readable results are what a person reads of a tool's answer, redacted and bounded as every captured value
is; the user of a call is a keyed digest of the principal or, asked for, its redacted name; the opt-in span
processors of ``mcp_sessions.telemetry`` name the session on every span of a request; and the lifespan
flushes the providers (duck-typed: the API declares no ``force_flush``) when the app's shutdown is over,
before the server hears of it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import baggage, context, metrics, trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer
from starlette.types import Message, Scope

from _otel import attrs, recording_provider
from mcp_sessions import KeySet
from mcp_sessions._middleware import watch_lifespan
from mcp_sessions._otel import _telemetry
from mcp_sessions._otel._span import (
    HOUSEKEEPING_METHODS,
    MAX_CONTENT_BYTES,
    REDACTED,
    TRUNCATED,
    bounded_text,
    call_kinds,
    readable_result,
    record_result,
    record_text,
)
from mcp_sessions._otel._telemetry import TraceUser
from mcp_sessions._tokens import IdDigests
from mcp_sessions._wire.protocol import KNOWN_METHODS
from mcp_sessions.stores import MemoryStore
from mcp_sessions.telemetry import SESSION_BAGGAGE_KEY, SentrySessionSpanProcessor, SessionSpanProcessor

KEYS = KeySet.from_secret("a-secret-that-is-long-enough-for-hs256-0123456789")
TOKEN, _ = KEYS.mint_session_token(ttl=60)
HANDLE = "bsk_" + "Q" * 34 + "E"


@pytest.mark.parametrize(
    ("result", "text", "value"),
    [
        ({"content": [{"type": "text", "text": "1"}], "structuredContent": {"result": 1}, "isError": False}, "1", None),
        ({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, "a\nb", None),
        (
            {"content": [{"type": "image", "data": "…", "mimeType": "image/png"}, {"type": "text", "text": "a cat"}]},
            "[image]\na cat",
            None,
        ),
        ({"content": [{"type": "image", "data": "…"}], "structuredContent": {"cats": 1}}, None, {"cats": 1}),
        ({"content": [{"type": "audio", "data": "…"}]}, "[audio]", None),
        ({"content": [], "structuredContent": [1, 2]}, None, [1, 2]),
        (
            {"resultType": "complete", "_meta": {"io.modelcontextprotocol/session": {}}},
            None,
            {"resultType": "complete"},
        ),
        ({"content": "not a list", "_meta": {}}, None, {"content": "not a list"}),
        ({"content": [7, {"type": 7}, {"type": "text", "text": 7}]}, "[text]", None),
    ],
    ids=["text-first", "lines", "image-and-text", "structured", "audio", "structured-list", "envelope", "odd", "junk"],
)
def test_a_result_reads_as_its_text_else_its_structured_content(
    result: dict[str, Any], text: str | None, value: object
) -> None:
    assert readable_result(result) == (text, value)


def test_a_long_result_is_read_only_up_to_the_bound() -> None:
    text, _ = readable_result({"content": [{"type": "text", "text": "x" * 10_000}] * 1000})
    assert text is not None
    assert len(text) <= MAX_CONTENT_BYTES + 1
    assert bounded_text(text).endswith(TRUNCATED)
    assert len(bounded_text("é" * 5000).encode()) <= MAX_CONTENT_BYTES


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["", " ", "é", "a_", "-.", "\n", TOKEN, HANDLE, "😀"]), max_size=40), st.integers(0, 5000)
)
def test_no_bearer_value_survives_in_a_text(pieces: list[str], padding: int) -> None:
    text = bounded_text("x" * padding + "".join(pieces), known=())
    assert len(text.encode()) <= MAX_CONTENT_BYTES
    for part in (TOKEN, *TOKEN.split("."), HANDLE):
        if len(part) >= 37 or part.startswith("eyJ"):
            assert part not in text
    if TOKEN in "".join(pieces) and REDACTED not in text:
        assert TRUNCATED in text  # the token fell past the bound: cut away, never cut in half and kept


def test_every_known_method_has_a_kind_and_the_rest_are_turns() -> None:
    kinds = call_kinds({"sessions/create", "sessions/delete"})
    assert HOUSEKEEPING_METHODS < KNOWN_METHODS
    turns = KNOWN_METHODS - HOUSEKEEPING_METHODS
    assert turns == {"tools/call", "prompts/get", "resources/read", "completion/complete"}
    assert [kinds.get(method, "turn") for method in ("sessions/create", "tools/list", "tools/call", "_OTHER")] == [
        "session",
        "housekeeping",
        "turn",
        "turn",
    ]


def user_of(mode: Any, principal: Callable[[Scope], object], digest: Callable[[str], str] | None = None) -> Any:
    return anyio.run(TraceUser(mode, principal, digest).user_id, {"type": "http"})


def test_a_user_digest_is_keyed_and_stable_and_a_name_is_redacted() -> None:
    digests = IdDigests(KEYS)
    assert user_of("digest", lambda scope: "alice", digests.user) == digests.user("alice")
    assert digests.user("alice") != IdDigests(KeySet.from_secret("another-secret-long-enough-for-hs256-0123")).user(
        "alice"
    )
    assert user_of("digest", lambda scope: "alice") != user_of("digest", lambda scope: "alice")  # a key per process
    assert user_of("name", lambda scope: "alice@example.com") == "alice@example.com"
    name = user_of("name", lambda scope: f"sub {TOKEN}")
    assert name.startswith("sub [redacted]")
    assert not any(part in name for part in TOKEN.split("."))
    assert user_of("name", lambda scope: None) is None

    async def later(scope: Scope) -> str:
        return "bob"

    assert user_of("name", later) == "bob"


class Provider:
    """A provider with the SDK's ``force_flush(timeout_millis)``, recording its calls."""

    def __init__(self, log: list[str], name: str, answer: object = True) -> None:
        self.log, self.name, self.answer = log, name, answer

    def force_flush(self, timeout_millis: int = 30_000) -> object:
        self.log.append(f"{self.name} {timeout_millis}")
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_the_providers_are_flushed_each_once_and_a_failure_is_only_logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    log: list[str] = []
    tracer = Provider(log, "tracer", answer=False)
    meter = Provider(log, "meter", answer=RuntimeError("the collector is down"))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: tracer)  # the global one, given too
    no_timeout = SimpleNamespace(force_flush=lambda: log.append("no timeout"))  # a force_flush without a timeout
    monkeypatch.setattr(metrics, "get_meter_provider", lambda: no_timeout)
    _telemetry.flush_providers(tracer, meter)  # type: ignore[arg-type]
    assert log == ["tracer 10000", "meter 10000", "no timeout"]
    assert "did not export everything" in caplog.text
    assert "the collector is down" in caplog.text


def test_the_api_stand_ins_are_left_alone(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    monkeypatch.setattr(metrics, "get_meter_provider", metrics.NoOpMeterProvider)
    with caplog.at_level(logging.DEBUG, logger="mcp_sessions"):
        _telemetry.flush_providers(None, None)  # they have no force_flush: nothing to do, nothing raised
    assert caplog.records == []


@pytest.mark.parametrize("ending", ["lifespan.shutdown.complete", "lifespan.shutdown.failed"])
def test_the_lifespan_flushes_when_the_shutdown_is_over_before_the_server_hears_of_it(ending: str) -> None:
    log: list[str] = []

    async def server_send(message: Message) -> None:
        log.append(message["type"])

    send = watch_lifespan(server_send, MemoryStore(), owns_store=True, flush=lambda: log.append("flush"))

    async def lifespan() -> None:
        await send({"type": "lifespan.startup.complete"})
        await send({"type": ending})

    anyio.run(lifespan)
    assert log == ["lifespan.startup.complete", "flush", ending]


def test_a_captured_label_is_text_and_a_result_json_only_when_it_is_no_text() -> None:
    """The mime types the viewers read: text for a label and a tool's words, JSON for structured content."""
    span = TracerProvider().get_tracer("test").start_span("s")
    record_text(span, "input", "a trip to Lisbon")
    record_result(span, {"content": [{"type": "image"}], "structuredContent": {"cats": 1}}, ())
    attributes = dict(span.attributes or {})  # type: ignore[attr-defined]  # an SDK span
    assert (attributes["input.value"], attributes["input.mime_type"]) == ("a trip to Lisbon", "text/plain")
    assert json.loads(attributes["output.value"]) == {"cats": 1}
    assert attributes["output.mime_type"] == "application/json"


# -- the opt-in span processors, on a provider of their own ------------------------------------------------

SESSION_ID = "conv-4f1c"


def traced_by(*processors: SpanProcessor) -> tuple[Tracer, InMemorySpanExporter]:
    """A tracer of a provider of its own with ``processors``, and the exporter of every span it ends."""
    provider, exporter = recording_provider()
    for processor in processors:
        provider.add_span_processor(processor)
    return provider.get_tracer("test"), exporter


def in_session(session_id: str | None) -> context.Context:
    """The context a request of ``session_id`` runs in: the middleware's baggage, nothing else."""
    ctx = context.Context()
    return ctx if session_id is None else baggage.set_baggage(SESSION_BAGGAGE_KEY, session_id, ctx)


def test_sentry_processor_puts_the_session_in_mcp_session_id() -> None:
    tracer, exporter = traced_by(SessionSpanProcessor(), SentrySessionSpanProcessor())
    token = context.attach(in_session(SESSION_ID))
    try:
        with tracer.start_as_current_span("tools/call count"), tracer.start_as_current_span("db.query"):
            pass
    finally:
        context.detach(token)
    spans = {span.name: attrs(span) for span in exporter.get_finished_spans()}
    for name in ("tools/call count", "db.query"):
        assert spans[name]["mcp.session.id"] == SESSION_ID, name
        assert spans[name]["session.id"] == SESSION_ID, name


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
    processors: tuple[type, ...], session_id: str | None, started_with: dict[str, str], expected: dict[str, str]
) -> None:
    tracer, exporter = traced_by(*(processor() for processor in processors))
    tracer.start_span("tools/call count", context=in_session(session_id), attributes=started_with).end()
    [span] = exporter.get_finished_spans()
    assert attrs(span) == expected
    assert trace.get_current_span() is trace.INVALID_SPAN
