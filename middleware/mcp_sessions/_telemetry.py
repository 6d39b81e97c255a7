"""Spans, links, baggage and metrics, on ``opentelemetry-api`` only.

Follows the MCP semantic conventions (GenAI conventions repository,
``docs/gen-ai/mcp.md``): one SERVER span per JSON-RPC message, named
``{mcp.method.name} {target}``, parented to the W3C context in
``params._meta`` (SEP-414), else the HTTP headers, else the ambient context.
The session (data-layer, adopted transport session, or the host's
conversation id verbatim) goes in ``session.id`` and ``gen_ai.conversation.id``,
its source in ``mcp_sessions.session.source``; ``mcp.session.id`` carries only
a 2025-era transport session, as its keyed digest. Nothing here ever sees a
session token or a raw transport session id: only stable ids.

Every value a client chooses is bounded before it names a span or labels a
metric, as the OpenTelemetry HTTP conventions bound ``http.request.method``:
a method, tool, prompt or protocol version outside the known set becomes
``_OTHER``, and the span alone keeps the original under
``mcp_sessions.*_original``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Final, Literal

from opentelemetry import baggage, context, propagate, trace
from opentelemetry import metrics as otel_metrics
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.metrics import _internal as _metrics_internal
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags, TracerProvider

from ._protocol import KNOWN_METHODS, KNOWN_VERSIONS

__all__ = ["OTHER", "SESSION_BAGGAGE_KEY", "Operation", "Telemetry", "TraceMode", "Vocabulary"]

TraceMode = Literal["link", "session"]

SESSION_BAGGAGE_KEY: Final = "session.id"
"""The OpenTelemetry baggage key that holds the session's stable id while one of its requests runs."""
SESSION_SOURCE_ATTRIBUTE: Final = "mcp_sessions.session.source"
TRACEPARENT_CLAIM: Final = "tp"
# The conventions' bucket advice for both MCP duration histograms.
DURATION_BUCKETS: Final = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
_TRACE_KEYS: Final = ("traceparent", "tracestate", "baggage")

# The OpenTelemetry conventions' value for a client-chosen name outside the known set.
OTHER: Final = "_OTHER"
# How many tool (and prompt) names the server lists are learned before the rest count as _OTHER.
MAX_LEARNED_NAMES: Final = 1000
TRANSPORT_SESSION_PREFIX: Final = "ts-"
_ORIGINAL_LIMIT: Final = 256
# A compact JWS (session ids and state tokens are), or what is left of one: never recorded.
_JWS_LIKE: Final = re.compile(r"eyJ[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*)*")
_LONG_BASE64URL: Final = re.compile(r"[A-Za-z0-9_-]{40,}")
_REDACTED: Final = "[redacted]"


def _version() -> str:
    from . import __version__

    return __version__


def traceparent_of(span_context: SpanContext) -> str:
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{span_context.trace_flags:02x}"


def span_context_from_traceparent(value: Any) -> SpanContext | None:
    """A remote SpanContext from our own ``tp`` claim (version 00 only)."""
    if type(value) is not str or len(value) != 55:
        return None
    try:
        version, trace_id, span_id, flags = value.split("-")
        if version != "00":
            return None
        sc = SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(int(flags, 16)))
    except ValueError:
        return None
    return sc if sc.is_valid else None


class Vocabulary:
    """The values a metric attribute may take: the known ones, then up to ``cap`` learned ones; else ``_OTHER``."""

    __slots__ = ("_cap", "_names")

    def __init__(self, known: Iterable[str] = (), cap: int = MAX_LEARNED_NAMES) -> None:
        self._names = {name for name in known if type(name) is str}
        self._cap = len(self._names) + cap

    def learn(self, name: Any) -> None:
        """Add ``name`` if it is a string and there is room (it stays once learned)."""
        if type(name) is str and len(self._names) < self._cap:
            self._names.add(name)

    def learn_listed(self, items: Any) -> None:
        """Learn the ``name`` of every object in a list result (``tools``, ``prompts``)."""
        if type(items) is list:
            for item in items:
                if isinstance(item, dict):
                    self.learn(item.get("name"))

    def bounded(self, name: str) -> str:
        return name if name in self._names else OTHER


class Telemetry:
    """The instruments of one middleware instance."""

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        trace_mode: TraceMode = "link",
        known_tools: Collection[str] = (),
        known_prompts: Collection[str] = (),
        max_learned_names: int = MAX_LEARNED_NAMES,
        known_methods: Collection[str] = (),
        transport_digest: Callable[[bytes], str] | None = None,
    ) -> None:
        if trace_mode not in ("link", "session"):
            raise ValueError('trace_mode must be "link" or "session"')
        if isinstance(known_tools, str) or isinstance(known_prompts, str):
            raise TypeError("known_tools and known_prompts take collections of names, not one string")
        if type(max_learned_names) is not int or max_learned_names < 0:
            raise ValueError("max_learned_names must be a whole number, 0 or more")
        self.trace_mode = trace_mode
        # MCP's own methods and the enabled wires' session methods; any other name is "_OTHER".
        self.methods = KNOWN_METHODS | frozenset(known_methods)
        # Tool and prompt names: the ones given, and those the server lists (or answers) through the middleware.
        self.tools = Vocabulary(known_tools, max_learned_names)
        self.prompts = Vocabulary(known_prompts, max_learned_names)
        # Per process: digests of one transport session agree for as long as the session (held in memory) lives.
        self._transport_key = secrets.token_bytes(32)
        self._transport_digest = transport_digest
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._enabled = False
        self.tracer = trace.get_tracer("mcp_sessions", _version(), tracer_provider)
        meter = otel_metrics.get_meter("mcp_sessions", _version(), meter_provider)
        self.operation_duration = meter.create_histogram(
            "mcp.server.operation.duration",
            unit="s",
            description="MCP request or notification duration as observed on the receiver.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.session_duration = meter.create_histogram(
            "mcp.server.session.duration",
            unit="s",
            description="The duration of the MCP session as observed on the MCP server.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.sessions_created = meter.create_counter(
            "mcp_sessions.sessions.created", unit="{session}", description="Data-layer sessions created."
        )
        self.sessions_deleted = meter.create_counter(
            "mcp_sessions.sessions.deleted", unit="{session}", description="Data-layer sessions deleted."
        )
        self.sessions_rejected = _RejectionCounter(
            meter.create_counter(
                "mcp_sessions.sessions.rejected",
                unit="{request}",
                description="Requests refused for their session, by reason.",
            ),
            self.methods,
        )

    def transport_session_digest(self, transport_session: bytes) -> str:
        """What ``mcp.session.id`` records of a 2025-era ``Mcp-Session-Id``: a keyed digest, never the value.

        The header is a bearer value (the SDK's transport session, or a session
        token a client put there): HMAC-SHA256 under a random per-process key,
        base64url, cut to 24 characters (144 bits), prefixed ``ts-``: the format of
        the middleware's own digest, which is keyed by the key set instead, so that
        every replica agrees.
        """
        digest = hmac.new(self._transport_key, transport_session, hashlib.sha256).digest()
        return TRANSPORT_SESSION_PREFIX + base64.urlsafe_b64encode(digest)[:24].decode()

    def enabled(self) -> bool:
        """Whether an OpenTelemetry SDK is there to record: without one, the middleware skips telemetry.

        On the hot path of every request: once true it stays true (a global
        provider is set once and for all), and until then it reads the API's
        globals directly, since ``get_tracer_provider()`` reads the environment
        on every call.
        """
        if self._enabled:
            return True
        tracer_provider = self._tracer_provider or _global_tracer_provider()
        meter_provider = self._meter_provider or _global_meter_provider()
        enabled = (tracer_provider is not None and type(tracer_provider) not in _NOOP_PROVIDERS) or (
            meter_provider is not None and type(meter_provider) not in _NOOP_PROVIDERS
        )
        self._enabled = enabled
        return enabled

    def start(
        self,
        *,
        scope: Mapping[str, Any],
        headers: Mapping[bytes, bytes],
        message: Mapping[str, Any],
        method: str,
        protocol_version: str | None,
        modern: bool,
        session_id: str | None,
        session_claims: Mapping[str, Any] | None,
        start_ns: int,
        session_source: str | None = None,
        user_id: str | None = None,
    ) -> Operation:
        """Start the SERVER span of one JSON-RPC message."""
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        meta_parent = None
        if isinstance(meta, dict) and "traceparent" in meta:
            meta_parent = _extract({k: meta[k] for k in _TRACE_KEYS if type(meta.get(k)) is str})
        header_parent = None
        if b"traceparent" in headers:
            header_parent = _extract(
                {k: headers[k.encode()].decode("latin-1") for k in _TRACE_KEYS if k.encode() in headers}
            )
        parent = meta_parent or header_parent
        creation = None
        if session_claims is not None:
            creation = span_context_from_traceparent(session_claims.get(TRACEPARENT_CLAIM))
            if parent is None and creation is not None and self.trace_mode == "session":
                parent = trace.set_span_in_context(NonRecordingSpan(creation))
                creation = None  # the parent already says it: no link as well
        target = None
        if isinstance(params, dict) and method in ("tools/call", "prompts/get"):
            name = params.get("name")
            target = name if type(name) is str else None
        op = Operation(self, trace.INVALID_SPAN, method, target, protocol_version, session_id)
        span = op.span = self.tracer.start_span(
            op.span_name(), context=parent, kind=SpanKind.SERVER, start_time=start_ns
        )
        if span.is_recording():
            attributes = op.metric_attributes()
            if op.method_name == OTHER:
                attributes["mcp_sessions.method_original"] = _original(method)
            if op.version_name == OTHER and protocol_version is not None:
                attributes["mcp_sessions.protocol_version_original"] = _original(protocol_version)
            request_id = message.get("id")
            if request_id is not None and type(request_id) in (str, int, float):
                attributes["jsonrpc.request.id"] = str(request_id)
            if method in ("resources/read", "resources/subscribe", "resources/unsubscribe") and isinstance(
                params, dict
            ):
                uri = params.get("uri")
                if type(uri) is str:
                    attributes["mcp.resource.uri"] = uri
            attributes["network.protocol.version"] = scope.get("http_version", "1.1")
            client = scope.get("client")
            if client:
                attributes["client.address"] = client[0]
                attributes["client.port"] = client[1]
            if session_id is not None:
                attributes["session.id"] = session_id
                attributes["gen_ai.conversation.id"] = session_id
                if session_source is not None:
                    attributes[SESSION_SOURCE_ATTRIBUTE] = session_source
            if user_id is not None:
                attributes["user.id"] = user_id
            transport_session = None if modern else headers.get(b"mcp-session-id")
            if transport_session is not None:
                # The 2025-era transport session, a bearer value (or whatever a client put there): only a digest.
                digest = self._transport_digest or self.transport_session_digest
                attributes["mcp.session.id"] = digest(transport_session)
            span.set_attributes(attributes)
            if creation is not None:
                span.add_link(creation, {"mcp_sessions.link": "session.created"})
            if meta_parent is not None and header_parent is not None:
                # The conventions: parent from _meta, link the transport's context.
                header_span = trace.get_current_span(header_parent).get_span_context()
                span.add_link(header_span, {"mcp_sessions.link": "http.request"})
        return op


# The API's stand-ins before (or without) an SDK: nothing they make records.
_NOOP_PROVIDERS: Final[frozenset[type]] = frozenset(
    {
        trace.NoOpTracerProvider,
        trace.ProxyTracerProvider,
        otel_metrics.NoOpMeterProvider,
        type(otel_metrics.get_meter_provider()),  # the API's private proxy, until an SDK is set
    }
)


def _global_tracer_provider() -> object | None:
    """The global TracerProvider once one is set, else None (no environment lookup)."""
    if hasattr(trace, "_TRACER_PROVIDER"):
        return trace._TRACER_PROVIDER
    return trace.get_tracer_provider()  # pragma: no cover - a future API without the global


def _global_meter_provider() -> object | None:
    if hasattr(_metrics_internal, "_METER_PROVIDER"):
        return _metrics_internal._METER_PROVIDER
    return otel_metrics.get_meter_provider()  # pragma: no cover


class _RejectionCounter:
    """The rejection counter, with its method attribute bounded like every metric's."""

    __slots__ = ("_counter", "_methods")

    def __init__(self, counter: otel_metrics.Counter, methods: frozenset[str]) -> None:
        self._counter = counter
        self._methods = methods

    def add(self, amount: int, attributes: Mapping[str, Any]) -> None:
        method = attributes.get("mcp.method.name")
        if method is not None and method not in self._methods:
            attributes = {**attributes, "mcp.method.name": OTHER}
        self._counter.add(amount, attributes)


def _original(value: str) -> str:
    """A client-chosen value kept on a span: bounded in length, and never anything shaped like a token."""
    return _JWS_LIKE.sub(_REDACTED, value[:_ORIGINAL_LIMIT])


def _redacted(text: str) -> str:
    """An error message for a span's status: tokens, and any long base64url run, replaced."""
    return _LONG_BASE64URL.sub(_REDACTED, _JWS_LIKE.sub(_REDACTED, text))


def _extract(carrier: dict[str, str]) -> Context | None:
    try:
        ctx = propagate.extract(carrier)
    except (ValueError, TypeError):
        return None
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def attach_session(session_id: str) -> object:
    """Put a session's id in baggage for a request that has no span of its own (an ordinary route)."""
    return context.attach(baggage.set_baggage(SESSION_BAGGAGE_KEY, session_id))


def detach_session(token: object) -> None:
    """Undo :func:`attach_session`."""
    context.detach(token)  # type: ignore[arg-type]


class Operation:
    """One JSON-RPC message being handled: its span, its outcome, its metrics."""

    __slots__ = (
        "_ended",
        "_named_target",
        "_t0",
        "_token",
        "error_message",
        "error_type",
        "method",
        "method_name",
        "protocol_version",
        "session_id",
        "span",
        "status_code",
        "target",
        "telemetry",
        "version_name",
    )

    def __init__(
        self,
        telemetry: Telemetry,
        span: trace.Span,
        method: str,
        target: str | None,
        protocol_version: str | None,
        session_id: str | None,
    ) -> None:
        self.telemetry = telemetry
        self.span = span
        self.method = method
        self.target = target
        self.protocol_version = protocol_version
        self.session_id = session_id
        # The bounded values, for names and metrics; the raw ones stay on the span only.
        self.method_name = method if method in telemetry.methods else OTHER
        self.version_name = None if protocol_version is None else protocol_version
        if protocol_version is not None and protocol_version not in KNOWN_VERSIONS:
            self.version_name = OTHER
        self._named_target = self.target_name()
        self.error_type: str | None = None
        self.status_code: str | None = None
        self.error_message: str | None = None
        self._token: object | None = None
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

    def metric_attributes(self) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "mcp.method.name": self.method_name,
            "network.transport": "tcp",
            "network.protocol.name": "http",
        }
        if self.version_name is not None:
            attributes["mcp.protocol.version"] = self.version_name
        target = self.target_name()
        if target is not None:
            if self.method == "tools/call":
                attributes["gen_ai.tool.name"] = target
            else:
                attributes["gen_ai.prompt.name"] = target
        if self.method == "tools/call":
            attributes["gen_ai.operation.name"] = "execute_tool"
        return attributes

    def session_attributes(self) -> dict[str, Any]:
        """Attributes of the session metrics (never the session id: unbounded cardinality)."""
        attributes: dict[str, Any] = {"network.transport": "tcp", "network.protocol.name": "http"}
        if self.version_name is not None:
            attributes["mcp.protocol.version"] = self.version_name
        return attributes

    def observe_result(self, result: Mapping[str, Any]) -> None:
        """The server's result for this message: a tool error, or names it proves the server has."""
        if result.get("isError") is True:
            self.tool_error()
            return
        if self.method == "tools/list":
            self.telemetry.tools.learn_listed(result.get("tools"))
        elif self.method == "prompts/list":
            self.telemetry.prompts.learn_listed(result.get("prompts"))
        elif self.method == "tools/call":
            self.telemetry.tools.learn(self.target)
        elif self.method == "prompts/get":
            self.telemetry.prompts.learn(self.target)

    def set_session(self, session_id: str, source: str = "data-layer") -> None:
        self.session_id = session_id
        if self.span.is_recording():
            self.span.set_attributes(
                {"session.id": session_id, "gen_ai.conversation.id": session_id, SESSION_SOURCE_ATTRIBUTE: source}
            )

    def traceparent(self) -> str | None:
        """This span's context as a traceparent, for the token's creation claim."""
        span_context = self.span.get_span_context()
        return traceparent_of(span_context) if span_context.is_valid else None

    def context(self) -> Context:
        """The context the application runs in: this span, and the session in baggage."""
        ctx = trace.set_span_in_context(self.span)
        if self.session_id is not None:
            ctx = baggage.set_baggage(SESSION_BAGGAGE_KEY, self.session_id, ctx)
        return ctx

    def inject(self, meta: dict[str, Any]) -> None:
        """Make ``_meta``'s trace context name this span, so the server's own span nests under it."""
        for key in _TRACE_KEYS:
            meta.pop(key, None)
        propagate.inject(meta, context=self.context())

    def attach(self) -> None:
        if self.traced:
            self._token = context.attach(self.context())

    def detach(self) -> None:
        if self._token is not None:
            context.detach(self._token)  # type: ignore[arg-type]
            self._token = None

    def fail(self, code: int, message: str) -> None:
        """The message ended in a JSON-RPC error (answered here or by the server)."""
        if self.error_type is None:
            self.error_type = self.status_code = str(code)
            self.error_message = _redacted(message)

    def tool_error(self) -> None:
        if self.error_type is None:
            self.error_type = "tool_error"

    def http_error(self, status: int) -> None:
        if self.error_type is None:
            self.error_type = str(status)

    def refused(self, status: int, code: int | None, message: str | None) -> None:
        """The wrapped server's own checks refused the message (a JSON-RPC error, or an HTTP status)."""
        if code is not None:
            self.fail(code, message or "")
        elif status >= 400:
            self.http_error(status)

    def exception(self, exc: BaseException) -> None:
        if self.error_type is None:
            self.error_type = type(exc).__qualname__
        if self.span.is_recording():
            self.span.record_exception(exc)

    def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        duration = time.perf_counter() - self._t0
        attributes = self.metric_attributes()
        if self.error_type is not None:
            attributes["error.type"] = self.error_type
            if self.status_code is not None:
                attributes["rpc.response.status_code"] = self.status_code
        span = self.span
        if span.is_recording() and self.target is not None:
            target = self.target_name()
            if target == OTHER:
                span.set_attribute("mcp_sessions.target_original", _original(self.target))
            elif target != self._named_target:  # learned from this very answer: name the span after it
                span.update_name(f"{self.method_name} {target}")
                span.set_attribute("gen_ai.tool.name" if self.method == "tools/call" else "gen_ai.prompt.name", target)
        if span.is_recording() and self.error_type is not None:
            errors = {"error.type": self.error_type}
            if self.status_code is not None:
                errors["rpc.response.status_code"] = self.status_code
            span.set_attributes(errors)
            span.set_status(StatusCode.ERROR, self.error_message)
        span.end()
        self.telemetry.operation_duration.record(duration, attributes)
