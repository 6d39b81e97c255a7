"""Spans, links, baggage and metrics, on ``opentelemetry-api`` only: the instruments.

Follows the MCP semantic conventions (GenAI conventions repository, ``docs/gen-ai/mcp.md``): one SERVER
span per JSON-RPC message, named ``{mcp.method.name} {target}``, parented to the W3C context in the HTTP
headers (which win on HTTP: "transport-native trace context"), else in ``params._meta`` (SEP-414), else
the ambient context. The session (data-layer, adopted transport session, or the host's conversation id
verbatim) goes in ``session.id`` and ``gen_ai.conversation.id``, its source in
``mcp_sessions.session.source``; ``mcp.session.id`` carries only a 2025-era transport session, as its
keyed digest. Nothing here ever sees a session token or a raw transport session id: only stable ids.

Every value a client chooses is bounded first (``_names``); one message's span, outcome and metrics are
an :class:`Operation` (``_operation``); what viewers read of a whole trace is in ``_viewers``; trace
context and baggage, in ``_propagation``; the providers' checks and flush, in ``_providers``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import secrets
from collections.abc import Callable, Collection, Mapping, MutableMapping
from time import monotonic
from typing import Any, Final, Literal

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from opentelemetry.util.types import AttributeValue

from .._version import __version__
from .._wire.protocol import KNOWN_METHODS
from ._names import MAX_LEARNED_NAMES, OTHER, Vocabulary, _RejectionCounter
from ._names import _redacted as _redacted
from ._operation import CONVERSATION_TURN_ATTRIBUTE, SERVER_KIND, SESSION_SOURCE_ATTRIBUTE, Operation
from ._propagation import SESSION_BAGGAGE_KEY, parent_and_links
from ._propagation import attach_session as attach_session
from ._propagation import detach_session as detach_session
from ._propagation import traceparent_of as traceparent_of
from ._providers import flush_providers, records
from ._viewers import CALL_KIND_ATTRIBUTE, TURN, TraceUser, TraceUserMode, call_kinds, root_attributes

__all__ = ["OTHER", "SESSION_BAGGAGE_KEY", "Operation", "Telemetry", "TraceMode", "Vocabulary"]

TraceMode = Literal["link", "session"]

# The conventions' bucket advice for both MCP duration histograms.
DURATION_BUCKETS: Final = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
TRANSPORT_SESSION_PREFIX: Final = "ts-"
# While no SDK records, how often (at most) enabled() asks the API's public getters again: they cost microseconds.
RECHECK_SECONDS: Final = 1.0


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
        trace_user: TraceUserMode | None = None,
        principal: Callable[[MutableMapping[str, Any]], object] | None = None,
        user_digest: Callable[[str], str] | None = None,
    ) -> None:
        _check_options(trace_mode, known_tools, known_prompts, max_learned_names)
        self.trace_mode = trace_mode
        # MCP's own methods and the enabled wires' session methods; any other name is "_OTHER".
        self.methods = KNOWN_METHODS | frozenset(known_methods)
        self.kinds = call_kinds(known_methods)  # what each method is to a conversation (_viewers)
        # Who made each traced call, from the principal hook: only when the operator asks (trace_user).
        self.users = None if trace_user is None or principal is None else TraceUser(trace_user, principal, user_digest)
        # Tool and prompt names: the ones given, and those the server lists (or answers) through the middleware.
        self.tools = Vocabulary(known_tools, max_learned_names)
        self.prompts = Vocabulary(known_prompts, max_learned_names)
        # Per process: digests of one transport session agree for as long as the session (held in memory) lives.
        self._transport_key = secrets.token_bytes(32)
        self._transport_digest = transport_digest
        # The signals whose provider is the global one, looked up while nothing records (see enabled()).
        self._tracer_provider, self._meter_provider = tracer_provider, meter_provider
        self._global_tracer = tracer_provider is None
        self._global_meter = meter_provider is None
        self._enabled = (tracer_provider is not None and records(tracer_provider)) or (
            meter_provider is not None and records(meter_provider)
        )
        # When enabled() next asks the global providers: at the first call, never when both are explicit.
        self._next_check = math.inf if tracer_provider is not None and meter_provider is not None else -math.inf
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

        On the hot path of every request, so it reads public API only, and rarely:

        - Each signal's provider is the one given (``tracer_provider=``,
          ``meter_provider=``), else the global one (``trace.get_tracer_provider()``,
          ``metrics.get_meter_provider()``). A provider records unless it is one
          of the API's stand-ins: :class:`~opentelemetry.trace.ProxyTracerProvider`,
          :class:`~opentelemetry.trace.NoOpTracerProvider`,
          :class:`~opentelemetry.metrics.NoOpMeterProvider`, or the API's proxy
          meter provider (which it does not export: any provider whose class is
          defined in the ``opentelemetry.metrics`` package).
        - Given providers are judged at construction: if one records, this is
          true for good; if both are given and neither records, false for good,
          and the globals are never read.
        - Otherwise the first call asks the global getters, and while nothing
          records they are asked again at most once per :data:`RECHECK_SECONDS`
          (1 s, monotonic clock); calls in between answer false at the cost of a
          clock read. Once a global SDK provider is seen, true for good (the API
          sets a global provider once per process; it has no public way to unset
          it).

        So an SDK installed before the first request (at import, or in the app's
        lifespan startup) is recorded from the first request on; one installed
        after requests have started is recorded from the first request at least
        1 s after the previous look, within about a second: the requests in
        between are neither traced nor counted.
        """
        if self._enabled:
            return True
        if monotonic() < self._next_check:
            return False
        return self._check_globals()

    def _check_globals(self) -> bool:
        """Ask the API's getters for the global providers (which read the environment while none is set)."""
        self._next_check = monotonic() + RECHECK_SECONDS
        enabled = (self._global_tracer and records(trace.get_tracer_provider())) or (
            self._global_meter and records(otel_metrics.get_meter_provider())
        )
        self._enabled = enabled
        return enabled

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
        op = Operation(self, trace.INVALID_SPAN, method, target, protocol_version, session_id)
        # Attributes and links go to start_span: the sampler sees them, and the SDK cleans them in one pass.
        attributes = self._span_attributes(op, scope, headers, message, params, modern, session_source)
        if user_id is not None:
            attributes["user.id"] = user_id
        if turn_id is not None:
            attributes[CONVERSATION_TURN_ATTRIBUTE] = turn_id
        kind = attributes[CALL_KIND_ATTRIBUTE] = self.kinds.get(op.method_name, TURN)
        if parent is None and not trace.get_current_span().get_span_context().is_valid:
            op.root = True  # a new trace: this span names it for the viewers
            attributes.update(root_attributes(op.span_name(), kind))
        op.span = self.tracer.start_span(
            op.span_name(),
            context=parent,
            kind=SERVER_KIND,
            attributes=attributes,
            links=links,
            start_time=start_ns,
        )
        return op

    def _span_attributes(
        self,
        op: Operation,
        scope: Mapping[str, Any],
        headers: Mapping[bytes, bytes],
        message: Mapping[str, object],
        params: Mapping[str, object] | None,
        modern: bool,
        session_source: str | None,
    ) -> dict[str, AttributeValue]:
        """The attributes the span starts with: the metrics', then what the message, connection and session say."""
        attributes = dict(op.metric_attributes)
        if op.method_name == OTHER:
            attributes["mcp_sessions.method_original"] = _redacted(op.method)
        if op.version_name == OTHER and op.protocol_version is not None:
            attributes["mcp_sessions.protocol_version_original"] = _redacted(op.protocol_version)
        request_id = message.get("id")
        if request_id is not None and type(request_id) in (str, int, float):
            attributes["jsonrpc.request.id"] = _redacted(str(request_id))
        if params is not None and op.method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
            uri = params.get("uri")
            if type(uri) is str:
                attributes["mcp.resource.uri"] = _redacted(uri)
        attributes["network.protocol.version"] = scope.get("http_version", "1.1")
        client = scope.get("client")
        if client:
            attributes["client.address"] = client[0]
            attributes["client.port"] = client[1]
        if (session_id := op.session_id) is not None:
            attributes["session.id"] = session_id
            attributes["gen_ai.conversation.id"] = session_id
            if session_source is not None:
                attributes[SESSION_SOURCE_ATTRIBUTE] = session_source
        transport_session = None if modern else headers.get(b"mcp-session-id")
        if transport_session is not None:
            # The 2025-era transport session, a bearer value (or whatever a client put there): only a digest.
            digest = self._transport_digest or self.transport_session_digest
            attributes["mcp.session.id"] = digest(transport_session)
        return attributes


def _check_options(
    trace_mode: str, known_tools: Collection[str], known_prompts: Collection[str], max_learned_names: int
) -> None:
    """Refuse, at construction, the options no request could use."""
    if trace_mode not in ("link", "session"):
        raise ValueError('trace_mode must be "link" or "session"')
    if isinstance(known_tools, str) or isinstance(known_prompts, str):
        raise TypeError("known_tools and known_prompts take collections of names, not one string")
    if type(max_learned_names) is not int or max_learned_names < 0:
        raise ValueError("max_learned_names must be a whole number, 0 or more")
