"""Client-chosen strings on the middleware's spans: bounded, and never a bearer value, on the OpenTelemetry SDK.

Every client-chosen string the middleware puts on its span (``jsonrpc.request.id``, ``mcp.resource.uri``,
the ``mcp_sessions.*_original`` values, the status message, an exception event's message) goes through one
redaction: at most 256 characters, cut outside a run of base64url characters, and every such run that holds
``eyJ`` (a compact JWS: session and state tokens) or is 32 characters or longer (a handle, a transport
session id, a signature) replaced by ``[redacted]``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from _otel import attrs, span_strings, start_operation
from mcp_sessions import KeySet
from mcp_sessions._otel import Operation, Telemetry
from mcp_sessions._otel._span import redacted_string
from mcp_sessions.handles import _format as fmt

KEYS = KeySet.from_secret("a-secret-that-is-long-enough-for-hs256-0123456789")
TOKEN, _ = KEYS.mint_session_token(ttl=60)
STATE = KEYS.sign_state("s" * 24, {"cart": ["apple", "pear"]})
HANDLE = fmt.encode("bsk", fmt.pack(flags=fmt.SESSION_FLAG, hint=3, expires_at=2_000_000_000), b"\x01" * 11)
TRANSPORT = uuid.uuid4().hex  # the MCP SDK's transport session id
BOUND = 256


def parts(bearer: str) -> list[str]:
    """What must not be left of a bearer value: itself, and each of its segments long enough to be secret."""
    return [bearer, *(part for part in bearer.replace("_", ".").split(".") if len(part) >= 20)]


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def telemetry(exporter: InMemorySpanExporter) -> Iterator[Telemetry]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Telemetry(tracer_provider=provider)
    provider.shutdown()


def start(telemetry: Telemetry, method: str, params: dict[str, Any], request_id: object, version: str) -> Operation:
    return start_operation(telemetry, method, params, request_id=request_id, version=version)


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    [span] = exporter.get_finished_spans()
    return span


@pytest.mark.parametrize("bearer", [TOKEN, STATE, HANDLE, TRANSPORT], ids=["token", "state", "handle", "transport"])
def test_no_bearer_value_in_a_uri_an_id_a_status_or_an_exception(
    telemetry: Telemetry, exporter: InMemorySpanExporter, bearer: str
) -> None:
    op = start(telemetry, "resources/read", {"uri": f"note://{bearer}"}, bearer, "2026-07-28")
    op.fail(-32602, f"Unknown resource: note://{bearer}")
    try:
        raise ValueError(f"no note named {bearer}")
    except ValueError as exc:
        op.exception(exc)
    op.end()
    span = only_span(exporter)

    for text in span_strings(span):
        for part in parts(bearer):
            assert part not in text, f"{part!r} is in {text!r}"
    assert attrs(span)["mcp.resource.uri"].startswith("note://[redacted]")
    assert span.status.description is not None and span.status.description.startswith("Unknown resource: note://")
    [event] = span.events
    assert str(dict(event.attributes or {})["exception.message"]).startswith("no note named [redacted]")
    assert "test_no_bearer_value_in_a_uri_an_id_a_status_or_an_exception" in str(event.attributes)  # its frames


@pytest.mark.parametrize("name", [HANDLE, TOKEN, "x" * 100_000], ids=["handle", "token", "long"])
def test_originals_are_bounded_and_redacted(telemetry: Telemetry, exporter: InMemorySpanExporter, name: str) -> None:
    op = start(telemetry, "tools/call", {"name": name}, 1, name)
    op.end()
    start(telemetry, name, {}, 2, "2026-07-28").end()

    for span in exporter.get_finished_spans():
        for text in span_strings(span):
            assert len(text) <= BOUND
            for part in parts(name):
                assert part not in text


@pytest.mark.parametrize(
    "request_id", ["i" * 2**20, "7 " * 2**19, 10**4000, "eyJ" + "e" * 2**20], ids=["run", "words", "int", "jws"]
)
def test_a_huge_request_id_or_uri_is_bounded(
    telemetry: Telemetry, exporter: InMemorySpanExporter, request_id: object
) -> None:
    start(telemetry, "resources/read", {"uri": f"note://{request_id}"}, request_id, "2026-07-28").end()
    span = only_span(exporter)

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
