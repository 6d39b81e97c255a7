"""Spans, links, baggage and metrics, on ``opentelemetry-api`` only: the instruments, and each call's Operation.

Follows the MCP semantic conventions (GenAI conventions repository, ``docs/gen-ai/mcp.md``): one SERVER
span per JSON-RPC message, named ``{mcp.method.name} {target}``, parented to the W3C context in the HTTP
headers (which win on HTTP: "transport-native trace context"), else in ``params._meta`` (SEP-414), else
the ambient context. The session (data-layer, adopted transport session, or the host's conversation id
verbatim) goes in ``session.id`` and ``gen_ai.conversation.id``, its source in
``mcp_sessions.session.source``; ``mcp.session.id`` carries only a 2025-era transport session, as its
keyed digest. Nothing here ever sees a session token or a raw transport session id: only stable ids.

Providers are judged through the API only: an SDK's is told apart from the API's stand-ins by its class,
and flushed at shutdown by its ``force_flush`` method, found by name (the API declares none).
"""

from __future__ import annotations

import inspect
import logging
import time
import traceback
from collections.abc import Callable, Collection, Iterable, Mapping, MutableMapping
from typing import Any, Final, Literal, NamedTuple

from opentelemetry import baggage, context, propagate, trace
from opentelemetry import metrics as otel_metrics
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider, NoOpMeterProvider
from opentelemetry.trace import SpanKind, StatusCode, TracerProvider
from opentelemetry.util.types import AttributeValue

from .._version import __version__
from .._wire.protocol import KNOWN_METHODS, KNOWN_VERSIONS
from ._span import (
    CALL_KIND_ATTRIBUTE,
    OTHER,
    SESSION_BAGGAGE_KEY,
    SESSION_SOURCE_ATTRIBUTE,
    TRACE_KEYS,
    TURN,
    call_kinds,
    parent_and_links,
    process_digest,
    record_arguments,
    record_result,
    record_text,
    redacted_string,
    root_attributes,
    trace_names,
)

logger = logging.getLogger("mcp_sessions")

TraceMode = Literal["link", "session"]
TraceUserMode = Literal["digest", "name"]

# The conventions' bucket advice for both MCP duration histograms.
DURATION_BUCKETS: Final = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
FLUSH_MILLIS: Final = 10_000
"""How long each provider may take to export what it holds when the server stops (the SDK's default for metrics)."""
# The API's stand-ins before (or without) an SDK: nothing they make records.
_STAND_INS: Final = (trace.ProxyTracerProvider, trace.NoOpTracerProvider, NoOpMeterProvider)
# The API's own package for metrics, where its (unexported) proxy MeterProvider is defined.
_METRICS_API: Final = "opentelemetry.metrics"
MAX_VIEWER_ID_LENGTH: Final = 200
"""The longest ``session.id`` the viewers keep (Langfuse drops a longer one): a longer host id is recorded as its
digest, and, when nothing in it looks like a bearer value, verbatim in :data:`ORIGINAL_ID_ATTRIBUTE`."""
ORIGINAL_ID_ATTRIBUTE: Final = "mcp_sessions.conversation.id"
# How many tool (and prompt) names the server lists are learned before the rest count as _OTHER.
MAX_LEARNED_NAMES: Final = 1000


class Vocabulary:
    """The values a metric attribute may take: the known ones, then up to ``cap`` learned ones; else ``_OTHER``."""

    def __init__(self, known: Iterable[str] = (), cap: int = MAX_LEARNED_NAMES) -> None:
        self._names = {name for name in known if type(name) is str}
        self._cap = len(self._names) + cap

    def learn(self, name: object) -> None:
        """Add ``name`` if it is a string and there is room (it stays once learned)."""
        if type(name) is str and len(self._names) < self._cap:
            self._names.add(name)

    def learn_listed(self, items: object) -> None:
        """Learn the ``name`` of every object in a list result (``tools``, ``prompts``)."""
        if type(items) is list:
            for item in items:
                if isinstance(item, dict):
                    self.learn(item.get("name"))

    def bounded(self, name: str) -> str:
        return name if name in self._names else OTHER


class _RejectionCounter:
    """The rejection counter, with its method attribute bounded like every metric's."""

    def __init__(self, counter: otel_metrics.Counter, methods: frozenset[str]) -> None:
        self._counter = counter
        self._methods = methods

    def add(self, amount: int, attributes: Mapping[str, AttributeValue]) -> None:
        method = attributes.get("mcp.method.name")
        if method is not None and method not in self._methods:
            attributes = {**attributes, "mcp.method.name": OTHER}
        self._counter.add(amount, attributes)


class TraceUser:
    """``user.id`` from the principal the server authenticated (the ``trace_user`` option): a digest, or the name.

    ``principal`` is the middleware's principal hook (what binds a session to its creator), asked once
    per traced request. ``digest`` keys the digest (every replica that shares the signing keys computes
    the same one); without it, a random key of this process does. A name is redacted and bounded as
    every client-chosen string on a span is (:func:`redacted_string`): a principal may be a token.
    """

    def __init__(
        self,
        mode: TraceUserMode,
        principal: Callable[[MutableMapping[str, Any]], object],
        digest: Callable[[str], str] | None,
    ) -> None:
        self.mode = mode
        self._principal = principal
        self._digest = process_digest("u-") if digest is None else digest

    async def user_id(self, scope: MutableMapping[str, Any]) -> str | None:
        """The user of the request ``scope`` is, as ``user.id`` records it; ``None`` when it has no principal."""
        try:
            principal = self._principal(scope)
            if inspect.isawaitable(principal):
                principal = await principal
        except Exception:  # the session work answers a failing hook; telemetry only goes without a user
            return None
        if principal is None:
            return None
        return self._digest(str(principal)) if self.mode == "digest" else redacted_string(str(principal))


class Telemetry:
    """The instruments of one middleware instance."""

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        trace_mode: TraceMode = "link",
        known_methods: Collection[str] = (),
        transport_digest: Callable[[bytes], str] | None = None,
        trace_user: TraceUserMode | None = None,
        principal: Callable[[MutableMapping[str, Any]], object] | None = None,
        user_digest: Callable[[str], str] | None = None,
        conversation_digest: Callable[[str, str, None], str] | None = None,
    ) -> None:
        self.trace_mode = trace_mode
        # MCP's own methods and the enabled wires' session methods; any other name is "_OTHER".
        self.methods = KNOWN_METHODS | frozenset(known_methods)
        self.kinds = call_kinds(known_methods)  # what each method is to a conversation (_span)
        # Who made each traced call, from the principal hook: only when the operator asks (trace_user).
        self.users = None if trace_user is None or principal is None else TraceUser(trace_user, principal, user_digest)
        # Tool and prompt names: those the server lists (or answers) through the middleware.
        self.tools = Vocabulary()
        self.prompts = Vocabulary()
        # What mcp.session.id records of a 2025-era Mcp-Session-Id, a bearer value: a keyed digest, never the
        # value. Without the key set's, one under a key of this process (it agrees while the session lives).
        self.transport_session_digest = transport_digest or process_digest("ts-")
        # What session.id records of a host's id too long for the viewers: the key set's digest of the conversation.
        self._conversation_digest = conversation_digest or _process_conversation_digest()
        self._shared: dict[tuple[str, str | None, str | None, bool], _Shared] = {}
        self._tracer_provider, self._meter_provider = tracer_provider, meter_provider
        self._enabled = False
        self.tracer = trace.get_tracer("mcp_sessions", __version__, tracer_provider)
        self._create_instruments(otel_metrics.get_meter("mcp_sessions", __version__, meter_provider))

    def _create_instruments(self, meter: otel_metrics.Meter) -> None:
        """The conventions' two MCP duration histograms, and the middleware's session counters."""
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
        rejected = meter.create_counter(
            "mcp_sessions.sessions.rejected",
            unit="{request}",
            description="Requests refused for their session, by reason.",
        )
        self.sessions_rejected = _RejectionCounter(rejected, self.methods)

    def enabled(self) -> bool:
        """Whether an OpenTelemetry SDK is there to record: without one, the middleware skips telemetry.

        Each signal's provider is the one given, else the global one; it records unless it is one of the API's
        stand-ins (:func:`records`). Once one records, true for good (the API sets a global provider once per
        process); until then each call asks again, so an SDK set up after the middleware is recorded from then on.
        """
        if not self._enabled:
            self._enabled = records(self._tracer_provider or trace.get_tracer_provider()) or records(
                self._meter_provider or otel_metrics.get_meter_provider()
            )
        return self._enabled

    def flush(self) -> None:
        """Export the spans and metrics the providers still hold: the lifespan calls it when the server stops."""
        flush_providers(self._tracer_provider, self._meter_provider)

    def start(
        self,
        *,
        scope: Mapping[str, Any],
        headers: Mapping[bytes, bytes],
        message: Mapping[str, object],
        method: str,
        protocol_version: str | None,
        modern: bool,
        session_id: str | None,
        session_claims: Mapping[str, object] | None,
        start_ns: int,
        session_source: str | None = None,
        user_id: str | None = None,
        turn_id: str | None = None,
    ) -> Operation:
        """Start the SERVER span of one JSON-RPC message (``scope`` is its ASGI HTTP scope)."""
        params = message.get("params")
        if not isinstance(params, dict):
            params = None
        parent, links = parent_and_links(params, headers, session_claims, linked_only=self.trace_mode == "link")
        target = None
        if params is not None and method in ("tools/call", "prompts/get"):
            name = params.get("name")
            target = name if type(name) is str else None
        original = None
        if session_id is not None and len(session_id) > MAX_VIEWER_ID_LENGTH:
            original, session_id = session_id, self._conversation_digest(session_source or "", session_id, None)
        op = Operation(self, method, target, protocol_version, session_id)
        if parent is None:  # the ambient context, read once: for whether a trace starts here, and for the SDK
            parent = context.get_current()
            # A new trace: this span names it for the viewers.
            op.root = not trace.get_current_span(parent).get_span_context().is_valid
        # Attributes and links go to start_span: the sampler sees them, and the SDK cleans them in one pass.
        shared = self._shared_attributes(op)
        op.metric_attributes = shared.metric
        attributes = self._span_attributes(op, shared.span, scope, headers, message, params, modern, session_source)
        if user_id is not None:
            attributes["user.id"] = user_id
        if original is not None and redacted_string(original) == original:  # kept only if nothing in it is redacted
            attributes[ORIGINAL_ID_ATTRIBUTE] = original
        if turn_id is not None:
            attributes["mcp_sessions.conversation.turn_id"] = turn_id  # Codex's turn, Claude Code's tool use…
        op.span = self.tracer.start_span(
            shared.name, context=parent, kind=SpanKind.SERVER, attributes=attributes, links=links, start_time=start_ns
        )
        return op

    def _shared_attributes(self, op: Operation) -> _Shared:
        """The span's name, and the attributes its span and its duration metric share with every call of its method,
        protocol version, target and place in its trace (the metric's, its kind, a root's names for the viewers):
        built once, then shared, never changed. Each part of the key is a bounded name."""
        key = (op.method_name, op.version_name, op.named_target, op.root)
        found = self._shared.get(key)
        if found is None:
            name, kind = op.span_name(), self.kinds.get(op.method_name, TURN)
            metric = op.metric_attributes_for(op.named_target)
            span = {**metric, CALL_KIND_ATTRIBUTE: kind}
            if op.root:
                span.update(root_attributes(name, kind))
            found = self._shared[key] = _Shared(name, span, metric)
        return found

    def _span_attributes(
        self,
        op: Operation,
        shared: Mapping[str, AttributeValue],
        scope: Mapping[str, Any],
        headers: Mapping[bytes, bytes],
        message: Mapping[str, object],
        params: Mapping[str, object] | None,
        modern: bool,
        session_source: str | None,
    ) -> dict[str, AttributeValue]:
        """The attributes the span starts with: the ``shared`` ones, then what the message, connection and session
        say."""
        attributes = dict(shared)
        if op.method_name == OTHER:
            attributes["mcp_sessions.method_original"] = redacted_string(op.method)
        if op.version_name == OTHER and op.protocol_version is not None:
            attributes["mcp_sessions.protocol_version_original"] = redacted_string(op.protocol_version)
        request_id = message.get("id")
        if request_id is not None and type(request_id) in (str, int, float):
            attributes["jsonrpc.request.id"] = redacted_string(str(request_id))
        if params is not None and op.method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
            uri = params.get("uri")
            if type(uri) is str:
                attributes["mcp.resource.uri"] = redacted_string(uri)
        attributes["network.protocol.version"] = scope.get("http_version", "1.1")
        client = scope.get("client")
        if client:
            attributes["client.address"] = client[0]
            attributes["client.port"] = client[1]
        if op.session_id is not None:
            attributes["session.id"] = attributes["gen_ai.conversation.id"] = op.session_id
            if session_source is not None:
                attributes[SESSION_SOURCE_ATTRIBUTE] = session_source
        transport_session = None if modern else headers.get(b"mcp-session-id")
        if transport_session is not None:
            attributes["mcp.session.id"] = self.transport_session_digest(transport_session)
        return attributes


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
        self.named_target = self.target_name()
        """The target as the span's name and the metric carry it when the call starts (:meth:`target_name`)."""
        self.metric_attributes: Mapping[str, AttributeValue] = {}
        """The duration metric's attributes, shared by every call of the same method, version and target
        (:meth:`Telemetry.start` sets them): never changed."""
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
        target = self.named_target
        return self.method_name if target is None or target == OTHER else f"{self.method_name} {target}"

    def session_attributes(self) -> dict[str, AttributeValue]:
        """Attributes of the session metrics (never the session id: unbounded cardinality)."""
        attributes: dict[str, AttributeValue] = {"network.transport": "tcp", "network.protocol.name": "http"}
        if self.version_name is not None:
            attributes["mcp.protocol.version"] = self.version_name
        return attributes

    def metric_attributes_for(self, target: str | None) -> dict[str, AttributeValue]:
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
            learned = target != self.named_target  # from this very answer: the metric and the span say it
            if learned:
                attributes = self.metric_attributes_for(target)
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


class _Shared(NamedTuple):
    """What every call of one method, protocol version, target and place in its trace shares (built once)."""

    name: str
    """The span's name."""
    span: dict[str, AttributeValue]
    """The span's first attributes: the metric's, the call's kind, a root's names for the viewers (copied)."""
    metric: dict[str, AttributeValue]
    """The duration metric's attributes."""


def _target_attribute(method: str) -> str:
    return "gen_ai.tool.name" if method == "tools/call" else "gen_ai.prompt.name"


def _process_conversation_digest() -> Callable[[str, str, None], str]:
    """A conversation's digest under a random key of this process, as :class:`~mcp_sessions._tokens.IdDigests`
    makes it with the key set's."""
    digest = process_digest("cv-")
    return lambda source, conversation, _: digest(f"{source}\0{conversation}")


def records(provider: TracerProvider | MeterProvider) -> bool:
    """Whether ``provider`` is an SDK's (or any real implementation's), not one of the API's stand-ins."""
    if isinstance(provider, _STAND_INS):
        return False
    module = type(provider).__module__
    return module != _METRICS_API and not module.startswith(_METRICS_API + ".")


def flush_providers(tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None) -> None:
    """Export what the given providers and the global ones still hold (blocking; bounded by :data:`FLUSH_MILLIS`).

    For the end of the app's lifespan: uvicorn re-raises the SIGTERM it caught once its graceful shutdown is
    done, so the process ends by the signal and the SDK's own exit flush (an ``atexit`` handler) never runs.
    The global providers are flushed too: the MCP SDK's own span, and most libraries', come from them. A
    failure is logged, never raised: the server is stopping either way.
    """
    providers: list[object] = []
    for provider in (tracer_provider, trace.get_tracer_provider(), meter_provider, otel_metrics.get_meter_provider()):
        if provider is None or any(provider is seen for seen in providers):
            continue
        providers.append(provider)
        force_flush = getattr(provider, "force_flush", None)
        if not callable(force_flush):
            continue
        name = type(provider).__qualname__
        try:
            try:
                flushed = force_flush(FLUSH_MILLIS)
            except TypeError:  # a provider whose force_flush takes no timeout
                flushed = force_flush()
        except Exception:
            logger.exception("could not flush the telemetry of %s at shutdown", name)
            continue
        if flushed is False:
            logger.warning("%s did not export everything within %d ms at shutdown", name, FLUSH_MILLIS)
