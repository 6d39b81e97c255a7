"""Operation: one JSON-RPC call being handled, its SERVER span, its outcome and its metrics.

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
import time
import traceback
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Final, Literal

from opentelemetry import baggage, context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from .._tokens import keyed_digest
from .._wire import jsonrpc
from .._wire.protocol import KNOWN_METHODS, KNOWN_VERSIONS

if TYPE_CHECKING:
    from ._telemetry import Telemetry

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


class Operation:
    """One JSON-RPC call being handled: its SERVER span, its outcome, its metrics."""

    def __init__(
        self,
        telemetry: Telemetry,
        method: str,
        target: str | None,
        protocol_version: str | None,
        session_id: str | None,
    ) -> None:
        self.telemetry = telemetry
        self.span: trace.Span = trace.INVALID_SPAN  # Telemetry.start starts the real one
        self.method = method
        self.target = target
        self.protocol_version = protocol_version
        self.session_id = session_id
        # The bounded values, for names and metrics; the raw ones stay on the span only.
        self.method_name = method if method in telemetry.methods else OTHER
        self.version_name = protocol_version
        if protocol_version is not None and protocol_version not in KNOWN_VERSIONS:
            self.version_name = OTHER
        self._named_target = self.target_name()
        self.metric_attributes = self._metric_attributes(self._named_target)
        """The duration metric's attributes (and the span's first ones), built once: copy before changing."""
        self.error_type: str | None = None
        self.status_code: str | None = None
        self.error_message: str | None = None
        self._captured: tuple[str, ...] | None = None
        self._local_outcome: str | None = None
        self.root = False
        """Whether the span is the root of its trace: it then names the trace for the viewers."""
        self._ended = False
        self._t0 = time.perf_counter()

    @property
    def recording(self) -> bool:
        return self.span.is_recording()

    @property
    def traced(self) -> bool:
        """Whether there is a trace to continue (recording, or sampled out with valid ids)."""
        return self.span.get_span_context().is_valid

    def target_name(self) -> str | None:
        """The tool or prompt name, as a metric may carry it: learned from the server, else ``_OTHER``."""
        if self.target is None:
            return None
        vocabulary = self.telemetry.tools if self.method == "tools/call" else self.telemetry.prompts
        return vocabulary.bounded(self.target)

    def span_name(self) -> str:
        """``{mcp.method.name} {target}``, the target only when it is a known name (span names stay low-cardinality)."""
        target = self._named_target
        return self.method_name if target is None or target == OTHER else f"{self.method_name} {target}"

    def session_attributes(self) -> dict[str, AttributeValue]:
        """Attributes of the session metrics (never the session id: unbounded cardinality)."""
        attributes: dict[str, AttributeValue] = {"network.transport": "tcp", "network.protocol.name": "http"}
        if self.version_name is not None:
            attributes["mcp.protocol.version"] = self.version_name
        return attributes

    def _metric_attributes(self, target: str | None) -> dict[str, AttributeValue]:
        """The duration metric's attributes, with ``target`` as :meth:`target_name` bounds it."""
        attributes = self.session_attributes()
        attributes["mcp.method.name"] = self.method_name
        if target is not None:
            attributes[_target_attribute(self.method)] = target
        if self.method == "tools/call":
            attributes["gen_ai.operation.name"] = "execute_tool"
        return attributes

    def capture(self, arguments: object, known: tuple[str, ...]) -> None:
        """Record this call's arguments, and its result once it comes (content capture, ``_redact``).

        ``known`` are the call's own bearer values (its session and state tokens), redacted wherever they appear.
        """
        self._captured = known
        if self.span.is_recording():
            record_arguments(self.span, arguments, known)

    def capture_local(self, label: str | None, outcome: str | None) -> None:
        """A session method's label as its input and, once it succeeded, ``session <id> <outcome>`` as its output.

        A session's first input in a viewer is then the label its client gave it, not nothing.
        """
        self._captured = ()
        self._local_outcome = outcome
        if label is not None and self.span.is_recording():
            record_text(self.span, "input", label)

    def set_user(self, user_id: str) -> None:
        """The ``user.id`` of the call: who the server authenticated (``trace_user``), as a digest or a name."""
        if self.span.is_recording():
            self.span.set_attribute("user.id", user_id)

    def observe_result(self, result: Mapping[str, object]) -> None:
        """The server's result for this message: a tool error, or names it proves the server has."""
        if self._captured is not None and self.span.is_recording():
            record_result(self.span, result, self._captured)
        if result.get("isError") is True:
            self.error_type = self.error_type or "tool_error"
        elif self.method == "tools/list":
            self.telemetry.tools.learn_listed(result.get("tools"))
        elif self.method == "prompts/list":
            self.telemetry.prompts.learn_listed(result.get("prompts"))
        elif self.method == "tools/call":
            self.telemetry.tools.learn(self.target)
        elif self.method == "prompts/get":
            self.telemetry.prompts.learn(self.target)

    def set_session(self, session_id: str) -> None:
        self.session_id = session_id
        if self.span.is_recording():
            self.span.set_attributes(
                {"session.id": session_id, "gen_ai.conversation.id": session_id, SESSION_SOURCE_ATTRIBUTE: "data-layer"}
            )

    def traceparent(self) -> str | None:
        """This span's context as a traceparent, for the token's creation claim."""
        ids = self.span.get_span_context()
        return f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{ids.trace_flags:02x}" if ids.is_valid else None

    def context(self) -> Context:
        """The context the application runs in: this span, and the session in baggage."""
        ctx = trace.set_span_in_context(self.span)
        if self.session_id is not None:
            ctx = baggage.set_baggage(SESSION_BAGGAGE_KEY, self.session_id, ctx)
        return ctx

    def inject(self, meta: dict[str, object]) -> None:
        """Make ``_meta``'s trace context name this span, so the server's own span nests under it."""
        for key in TRACE_KEYS:
            meta.pop(key, None)
        propagate.inject(meta, context=self.context())

    def attach(self) -> object:
        """Make :meth:`context` current while the app runs, if there is a trace: the token that :func:`detach` takes."""
        return context.attach(self.context()) if self.traced else None

    def fail(self, code: int, message: str) -> None:
        """The message ended in a JSON-RPC error (answered here or by the server)."""
        if self.error_type is None:
            self.error_type = self.status_code = str(code)
            self.error_message = redacted_string(message)

    def http_error(self, status: int) -> None:
        self.error_type = self.error_type or str(status)

    def refused(self, status: int, code: int | None, message: str | None) -> None:
        """The wrapped server's own checks refused the message (a JSON-RPC error, or an HTTP status)."""
        if code is not None:
            self.fail(code, message or "")
        elif status >= 400:
            self.http_error(status)

    def exception(self, exc: BaseException) -> None:
        self.error_type = self.error_type or type(exc).__qualname__
        if self.span.is_recording():
            # The message may quote the request (a URI, an argument): redacted; the frames only, without messages.
            stacktrace = "".join(traceback.format_tb(exc.__traceback__))
            self.span.record_exception(
                exc, {"exception.message": redacted_string(str(exc)), "exception.stacktrace": stacktrace}
            )

    def end(self) -> None:
        """End the span with the outcome, and record the duration (once: a second call does nothing)."""
        if self._ended:
            return
        self._ended = True
        duration = time.perf_counter() - self._t0
        attributes = self.metric_attributes
        span = self.span
        recording = span.is_recording()
        if self.target is not None:
            target = self.target_name()
            learned = target != self._named_target  # from this very answer: the metric and the span say it
            if learned:
                attributes = self._metric_attributes(target)
            if recording:
                if target == OTHER:
                    span.set_attribute("mcp_sessions.target_original", redacted_string(self.target))
                elif learned:
                    span.update_name(name := f"{self.method_name} {target}")
                    if self.root:
                        span.set_attributes(trace_names(name))
                    span.set_attribute(_target_attribute(self.method), target)
        if self.error_type is not None:
            errors = {"error.type": self.error_type}
            if self.status_code is not None:
                errors["rpc.response.status_code"] = self.status_code
            attributes = {**attributes, **errors}
            if recording:
                span.set_attributes(errors)
                span.set_status(StatusCode.ERROR, self.error_message)
        elif self._local_outcome is not None and self.session_id is not None and recording:
            record_text(span, "output", f"session {self.session_id} {self._local_outcome}")
        span.end()
        self.telemetry.operation_duration.record(duration, attributes)


def _target_attribute(method: str) -> str:
    return "gen_ai.tool.name" if method == "tools/call" else "gen_ai.prompt.name"
