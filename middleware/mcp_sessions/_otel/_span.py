"""Operation: one JSON-RPC call being handled, its SERVER span, its outcome and its metrics."""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from opentelemetry import baggage, context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import StatusCode
from opentelemetry.util.types import AttributeValue

from .._wire.protocol import KNOWN_VERSIONS
from ._content import record_arguments, record_result, record_text
from ._names import OTHER, _redacted
from ._propagation import SESSION_BAGGAGE_KEY, TRACE_KEYS
from ._viewers import trace_names

if TYPE_CHECKING:
    from ._telemetry import Telemetry

SESSION_SOURCE_ATTRIBUTE: Final = "mcp_sessions.session.source"


class Operation:
    """One JSON-RPC call being handled: its SERVER span, its outcome, its metrics."""

    __slots__ = (
        "_captured",
        "_ended",
        "_local_outcome",
        "_named_target",
        "_t0",
        "_token",
        "error_message",
        "error_type",
        "method",
        "method_name",
        "metric_attributes",
        "protocol_version",
        "root",
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
        self._token: object | None = None
        self._captured: tuple[str, ...] | None = None
        self._local_outcome: str | None = None
        self.root = False
        """Whether the span is the root of its trace: it then names the trace for the viewers (``_viewers``)."""
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
        """Record this call's arguments, and its result once it comes (content capture, ``_content``).

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
                exc, {"exception.message": _redacted(str(exc)), "exception.stacktrace": stacktrace}
            )

    def end(self) -> None:
        """End the span with the outcome, and record the duration (once: a second call does nothing)."""
        if self._ended:
            return
        self._ended = True
        duration = time.perf_counter() - self._t0
        attributes = self.metric_attributes
        span = self.span
        if self.target is not None:
            target = self.target_name()
            learned = target != self._named_target  # from this very answer: the metric and the span say it
            if learned:
                attributes = self._metric_attributes(target)
            if span.is_recording():
                if target == OTHER:
                    span.set_attribute("mcp_sessions.target_original", _redacted(self.target))
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
            if span.is_recording():
                span.set_attributes(errors)
                span.set_status(StatusCode.ERROR, self.error_message)
        elif self._local_outcome is not None and self.session_id is not None and span.is_recording():
            record_text(span, "output", f"session {self.session_id} {self._local_outcome}")
        span.end()
        self.telemetry.operation_duration.record(duration, attributes)


def _target_attribute(method: str) -> str:
    return "gen_ai.tool.name" if method == "tools/call" else "gen_ai.prompt.name"
