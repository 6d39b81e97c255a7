"""Telemetry through ``opentelemetry-api`` only: the instruments, one span per call, trace context, baggage.

The SDK-side helpers (span processors) are in the public :mod:`mcp_sessions.telemetry`.
"""

from ._span import SESSION_BAGGAGE_KEY as SESSION_BAGGAGE_KEY
from ._span import TRACEPARENT_CLAIM as TRACEPARENT_CLAIM
from ._span import attach_session as attach_session
from ._span import detach as detach
from ._telemetry import Operation as Operation
from ._telemetry import Telemetry as Telemetry
from ._telemetry import TraceMode as TraceMode
from ._telemetry import TraceUser as TraceUser
from ._telemetry import TraceUserMode as TraceUserMode
