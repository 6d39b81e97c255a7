"""What a call's span (:class:`~._telemetry.Operation`) is made of: its trace context, what viewers read, what it keeps.

**Trace context.** W3C trace context and baggage: read from a request, kept in a token, set for the
application. Only stable ids ever go in baggage (never a session token or a raw transport session id).

**Viewers.** What trace viewers read of a whole trace from its root span: its name, what kind of call it
was, who made it.

Phoenix names a trace after its root span. MLflow 3.17's OTLP ingestion turns each ``mlflow.traceTag.<key>``
attribute of the root span into the trace tag ``<key>`` and names the trace only from ``mlflow.traceName``
(else its "Trace name" column shows ``-``). Langfuse names and tags a trace from ``langfuse.trace.name``
and ``langfuse.trace.tags``. The middleware's span carries these only when it is the root of its trace; every
span of it says what kind of call it is (:data:`CALL_KIND_ATTRIBUTE`), so a viewer can leave out the
housekeeping: a client's handshake, discovery and listings, which often carry no session.

**Names.** What a span keeps of what a client sent: names bounded, strings redacted, content capped.
As the OpenTelemetry HTTP conventions bound ``http.request.method``: a method,
tool, prompt or protocol version outside the known set becomes ``_OTHER``, and
the span alone keeps the original under ``mcp_sessions.*_original``.

Every client-chosen string a span keeps (those originals, ``jsonrpc.request.id``,
``mcp.resource.uri``, a status or exception message) goes through :func:`_redacted_value`:
at most :data:`MAX_RECORDED_CHARS` characters, cut outside a run of base64url
characters, and each run that holds ``eyJ`` (a compact JWS: session and state
tokens) or has :data:`OPAQUE_CHARS` characters or more becomes ``[redacted]``.
A bearer value recorded as an id is a keyed digest (:func:`process_digest`).

**Content capture.** A ``tools/call``'s arguments and result on its span, redacted and bounded.

Opt-in (``capture_content=True``): the GenAI conventions' ``gen_ai.tool.call.arguments`` and ``.result``,
and the same text as OpenInference's ``input.value`` and ``output.value`` (with ``*.mime_type``), which
Phoenix shows as a span's input and output, MLflow's OTLP ingestion turns into ``mlflow.spanInputs`` and
``mlflow.spanOutputs``, and Langfuse reads as an observation's input and output.

The arguments are their compact JSON; the result, what a person reads of it (:func:`readable_result`). Each
value is at most :data:`MAX_CONTENT_BYTES` of UTF-8, a longer one cut and ended with :data:`TRUNCATED`.
Before that, in every string of it (object keys too), every run of token characters (``A-Z a-z 0-9 _ - .``)
of 37 or more that holds ``eyJ`` (a compact JWS: session and state tokens), a handle
(``handles/_format.py``) or one of the call's own tokens becomes :data:`REDACTED`, the whole run.
"""

from __future__ import annotations

import functools
import json
import re
import secrets
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Final, Literal

from opentelemetry import baggage, context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, TraceFlags
from opentelemetry.util.types import AttributeValue

from .._tokens import keyed_digest
from .._wire import jsonrpc
from .._wire.protocol import KNOWN_METHODS

MAX_CONTENT_BYTES: Final = 4096
"""The most UTF-8 bytes each captured value takes, the truncation marker included."""
REDACTED: Final = "[redacted]"
TRUNCATED: Final = "…[truncated]"
_JSON: Final = "application/json"
_TEXT: Final = "text/plain"

# Every character a JWS or a handle is made of: a bearer value is always inside one such run.
_RUN_CHARS: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-."
# The runs as long as the shortest handle or longer: a one-letter prefix, "_", 35 payload characters.
_CONTENT_RUN: Final = re.compile(r"[A-Za-z0-9_.\-]{37,}")
# A handle's prefix and payload. A compact JWS is found by its "eyJ" ('{"' encoded) with a substring test: a pattern
# that scans on from each eyJ rescans the rest of the run, quadratic in it (tests/unit/test_linear_parsers.py).
_SECRET: Final = re.compile(r"[a-z][a-z0-9]{0,3}_[A-Za-z0-9_-]{34}[AEIMQUYcgkosw048]")


def redacted(
    text: str, bound: int, kept: int, run_chars: str, runs: re.Pattern[str], redact: Callable[[re.Match[str]], str]
) -> str:
    """``text`` with each of its ``runs`` replaced by what ``redact`` makes of it (:data:`REDACTED` or the run).

    A text longer than ``bound`` characters is first cut to ``kept``, then back to before its last run of
    ``run_chars`` (a run cut short may be the start of a bearer value: it goes whole), and ends with
    :data:`TRUNCATED`. Linear in ``text``: one cut, one scan.
    """
    if len(text) > bound:
        text = text[:kept].rstrip(run_chars) + TRUNCATED
    return runs.sub(redact, text)


def _redacted_text(text: str, known: Collection[str]) -> str:
    """One string of captured content, redacted, and cut outside a run past the bound."""

    def redact(run: re.Match[str]) -> str:
        value = run[0]
        secret = "eyJ" in value or _SECRET.search(value) is not None or any(token in value for token in known)
        return REDACTED if secret else value

    return redacted(text, MAX_CONTENT_BYTES, MAX_CONTENT_BYTES, _RUN_CHARS, _CONTENT_RUN, redact)


def _redacted_value(value: object, known: Collection[str]) -> object:
    """``value`` with every string (object keys too) redacted: in the parsed JSON, where no escape hides a run."""
    if type(value) is str:
        return _redacted_text(value, known)
    if isinstance(value, dict):
        return {_redacted_text(str(key), known): _redacted_value(item, known) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted_value(item, known) for item in value]
    return value


def _fitted(text: str) -> str:
    """``text`` in at most :data:`MAX_CONTENT_BYTES` of UTF-8: its strings were redacted, and cut outside a run
    past the bound, already; only bytes are left to cut."""
    encoded = text.encode("utf-8", "backslashreplace")  # a lone surrogate, as JSON escapes it
    if len(encoded) <= MAX_CONTENT_BYTES:
        return encoded.decode()
    return encoded[: MAX_CONTENT_BYTES - len(TRUNCATED.encode())].decode("utf-8", "ignore") + TRUNCATED


def bounded_content(value: object, known: Collection[str] = ()) -> tuple[str, bool]:
    """``value`` as compact JSON, redacted, at most :data:`MAX_CONTENT_BYTES`; and whether it is whole.

    ``known`` are bearer values of this very call (its session and state tokens), redacted wherever
    they appear even if their shape changes one day.
    """
    try:
        text = json.dumps(_redacted_value(value, known), ensure_ascii=False, separators=(",", ":"), default=repr)
    except RecursionError:  # nested deeper than Python recurses: nothing of it is recorded
        return TRUNCATED, False
    text = _fitted(text)
    return text, TRUNCATED not in text


def bounded_text(text: str, known: Collection[str] = ()) -> str:
    """``text`` redacted as every string of :func:`bounded_content`, at most :data:`MAX_CONTENT_BYTES` of UTF-8."""
    return _fitted(_redacted_text(text, known))


def readable_result(result: Mapping[str, object]) -> tuple[str | None, object]:
    """What a person reads of a ``tools/call`` result: ``(text, None)``, or ``(None, value)`` to record as JSON.

    The text of its ``content`` items, one a line (an item of another type is ``[type]``); else its
    ``structuredContent``; else the result without ``_meta``. Reading stops past the bound.
    """
    parts: list[str] = []
    size = 0
    has_text = False
    content = result.get("content")
    for item in content if type(content) is list else ():
        if size > MAX_CONTENT_BYTES:
            break
        kind = item.get("type") if isinstance(item, dict) else None
        text = item.get("text") if kind == "text" else None
        if type(text) is str:
            has_text = True
        elif type(kind) is str:
            text = f"[{kind}]"
        else:
            continue
        parts.append(text[: MAX_CONTENT_BYTES + 1])  # longer than the bound: bounded_text cuts it outside a run
        size += len(parts[-1]) + 1
    if has_text:
        return "\n".join(parts), None
    structured = result.get("structuredContent")
    if structured is not None:
        return None, structured
    if parts:
        return "\n".join(parts), None
    return None, {key: value for key, value in result.items() if key != "_meta"}


def record_arguments(span: Span, arguments: object, known: Collection[str]) -> None:
    """A ``tools/call``'s arguments on its span (the caller checks that the span records)."""
    text, whole = bounded_content(arguments, known)
    span.set_attributes(
        {"gen_ai.tool.call.arguments": text, "input.value": text, "input.mime_type": _JSON if whole else _TEXT}
    )


def record_result(span: Span, result: Mapping[str, object], known: Collection[str]) -> None:
    """What a person reads of a ``tools/call``'s result, on its span (the caller checks that the span records)."""
    text, value = readable_result(result)
    if text is not None:
        text, whole = bounded_text(text, known), False
    else:
        text, whole = bounded_content(value, known)
    span.set_attributes(
        {"gen_ai.tool.call.result": text, "output.value": text, "output.mime_type": _JSON if whole else _TEXT}
    )


def record_text(span: Span, side: Literal["input", "output"], text: str) -> None:
    """A session method's label (its input) or outcome (its output) as text, bounded and redacted."""
    span.set_attributes({side + ".value": bounded_text(text), side + ".mime_type": _TEXT})


# The OpenTelemetry conventions' value for a client-chosen name outside the known set.
OTHER: Final = "_OTHER"
MAX_RECORDED_CHARS: Final = 256
"""The most characters of a client-chosen string a span keeps, the truncation marker included."""
OPAQUE_CHARS: Final = 32
"""The shortest run of base64url characters redacted whatever it holds: the MCP SDK's transport session id
(``uuid4().hex``) has 32, a handle 37 or more, a token's signature 43 or more."""
_BASE64URL: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_NAME_RUN: Final = re.compile(r"[A-Za-z0-9_-]+")


def redacted_string(text: str) -> str:
    """A client-chosen string as a span keeps it: bounded, and with nothing shaped like a bearer value."""
    return redacted(text, MAX_RECORDED_CHARS, MAX_RECORDED_CHARS - len(TRUNCATED), _BASE64URL, _NAME_RUN, _redacted_run)


def _redacted_run(run: re.Match[str]) -> str:
    value = run[0]
    return REDACTED if len(value) >= OPAQUE_CHARS or "eyJ" in value else value


def process_digest(prefix: str) -> Callable[[str | bytes], str]:
    """A keyed digest under a random key of this process: ``prefix`` and 24 base64url characters (144 bits of
    HMAC-SHA256), the format of the key set's own digests (:func:`~mcp_sessions._tokens.keyed_digest`), for when
    none is given."""
    key = secrets.token_bytes(32)

    def digest(value: str | bytes) -> str:
        data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
        return prefix + keyed_digest(key, data)

    return digest


SESSION_BAGGAGE_KEY: Final = "session.id"
"""The OpenTelemetry baggage key that holds the session's stable id while one of its requests runs."""
TRACEPARENT_CLAIM: Final = "tp"
TRACE_KEYS: Final = ("traceparent", "tracestate", "baggage")
# The attributes of the links a SERVER span may have: to the session's creation, to the context _meta named.
_CREATED: Final = {"mcp_sessions.link": "session.created"}
_META: Final = {"mcp_sessions.link": "mcp.meta"}
# Our own tp claim, as Operation.traceparent writes it: a W3C traceparent of version 00.
_TRACEPARENT: Final = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


@functools.lru_cache(maxsize=10_000)
def _span_context(traceparent: str) -> SpanContext | None:
    """The remote SpanContext our own ``tp`` claim names: read where it is, without a context of its own.

    A session's claim is the same on each of its requests: read once per session (SpanContext is immutable)."""
    if not _TRACEPARENT.fullmatch(traceparent):
        return None
    trace_id, span_id, flags = int(traceparent[3:35], 16), int(traceparent[36:52], 16), int(traceparent[53:], 16)
    span_context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))
    return span_context if span_context.is_valid else None


def _extract(carrier: dict[str, str]) -> Context | None:
    """The remote parent a request names; its baggage never names the session (only the middleware does)."""
    try:
        ctx = propagate.extract(carrier)
    except (ValueError, TypeError):
        return None
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None
    if baggage.get_baggage(SESSION_BAGGAGE_KEY, ctx) is not None:
        ctx = baggage.remove_baggage(SESSION_BAGGAGE_KEY, ctx)
    return ctx


def attach_session(session_id: str) -> object:
    """Put a session's id in baggage for a request that has no span of its own (an ordinary route)."""
    return context.attach(baggage.set_baggage(SESSION_BAGGAGE_KEY, session_id))


def detach(token: object) -> None:
    """Undo :func:`attach_session` or :meth:`Operation.attach`."""
    context.detach(token)  # type: ignore[arg-type]


def parent_and_links(
    params: Mapping[str, object] | None,
    headers: Mapping[bytes, bytes],
    session_claims: Mapping[str, object] | None,
    *,
    linked_only: bool,
) -> tuple[Context | None, list[Link] | None]:
    """A SERVER span's parent (the headers win on HTTP, else ``params._meta``) and links (its creation, ``_meta``).

    ``linked_only`` (``trace_mode="link"``): the session's creation is a link, never the parent.
    """
    header_parent = None
    if b"traceparent" in headers:
        header_parent = _extract(
            {k: headers[k.encode()].decode("latin-1") for k in TRACE_KEYS if k.encode() in headers}
        )
    meta = jsonrpc.meta(params)
    meta_parent = None
    if meta is not None and "traceparent" in meta:
        meta_parent = _extract({k: value for k in TRACE_KEYS if type(value := meta.get(k)) is str})
    parent = header_parent or meta_parent
    claim = None if session_claims is None else session_claims.get(TRACEPARENT_CLAIM)
    creation = _span_context(claim) if type(claim) is str else None
    if parent is None and creation is not None and not linked_only:
        # The parent already says it: no link as well (and with no parent, no transport context to link).
        return trace.set_span_in_context(NonRecordingSpan(creation)), None
    links = None if creation is None else [Link(creation, _CREATED)]
    if meta_parent is not None and header_parent is not None:
        # The headers chose the parent: _meta's context, which the client's MCP layer sent, is kept as a link.
        meta_span = trace.get_current_span(meta_parent).get_span_context()
        links = [*(links or ()), Link(meta_span, _META)]
    return parent, links


CALL_KIND_ATTRIBUTE: Final = "mcp_sessions.call.kind"
TURN: Final = "turn"
"""A call that does the conversation's work: ``tools/call``, ``prompts/get``, ``resources/read``, any other method."""
SESSION: Final = "session"
"""A session method of an enabled wire: ``sessions/create``, ``sessions/delete``."""
HOUSEKEEPING: Final = "housekeeping"
"""What a client does around the conversation: the handshake, discovery, listings, pings, notifications."""
_KIND_TAG: Final = "mlflow.traceTag." + CALL_KIND_ATTRIBUTE  # MLflow's trace tag of the call's kind
HOUSEKEEPING_METHODS: Final = KNOWN_METHODS - {"completion/complete", "prompts/get", "resources/read", "tools/call"}
"""Every method a client sends but the turns: :data:`HOUSEKEEPING` calls."""


def call_kinds(session_methods: Iterable[str]) -> dict[str, str]:
    """The kind of each method that is not a turn (every other method, ``_OTHER`` included, is a turn)."""
    kinds = dict.fromkeys(HOUSEKEEPING_METHODS, HOUSEKEEPING)
    kinds.update(dict.fromkeys(session_methods, SESSION))
    return kinds


def trace_names(name: str) -> dict[str, AttributeValue]:
    """The root span's attributes that name its trace in MLflow and Langfuse (Phoenix reads the span's name)."""
    return {"mlflow.traceTag.mlflow.traceName": name, "langfuse.trace.name": name}


def root_attributes(name: str, kind: str) -> dict[str, AttributeValue]:
    """Everything a root span of the middleware adds for the viewers: the trace's name, and its kind as a tag."""
    return {**trace_names(name), _KIND_TAG: kind, "langfuse.trace.tags": (kind,)}


SESSION_SOURCE_ATTRIBUTE: Final = "mcp_sessions.session.source"
