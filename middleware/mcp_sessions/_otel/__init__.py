"""Telemetry through ``opentelemetry-api`` only: the instruments, one span per call, trace context, baggage.

The SDK-side helpers (span processors) are in the public :mod:`mcp_sessions.telemetry`.
"""

from ._propagation import SESSION_BAGGAGE_KEY, TRACEPARENT_CLAIM, attach_session, detach_session
from ._span import Operation
from ._telemetry import Telemetry, TraceMode
from ._viewers import TraceUserMode

__all__ = [
    "SESSION_BAGGAGE_KEY",
    "TRACEPARENT_CLAIM",
    "Operation",
    "Telemetry",
    "TraceMode",
    "TraceUserMode",
    "attach_session",
    "detach_session",
]
