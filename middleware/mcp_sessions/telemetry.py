"""OpenTelemetry SDK helpers: import this module only where the SDK is installed.

The middleware itself depends on ``opentelemetry-api`` alone; this module is
for applications that configure the SDK (``opentelemetry-sdk``).
"""

from __future__ import annotations

from typing import Final

from opentelemetry import baggage
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Span, SpanProcessor

from ._otel import SESSION_BAGGAGE_KEY

__all__ = ["SESSION_BAGGAGE_KEY", "SentrySessionSpanProcessor", "SessionSpanProcessor"]

MCP_SESSION_ID: Final = "mcp.session.id"


class SessionSpanProcessor(SpanProcessor):
    """Stamps ``session.id`` on every span started inside a session's request.

    The middleware puts the session's stable id in OpenTelemetry baggage for
    the duration of each request; this processor copies it onto every span
    started there: the SDK's own MCP span, your spans, your database
    client's spans. Add it to your ``TracerProvider`` before the exporting
    processor::

        provider.add_span_processor(SessionSpanProcessor())

    It holds and buffers nothing: ``on_end``, ``shutdown`` and ``force_flush`` are the SDK's own no-ops.
    """

    def __init__(self, *, attributes: tuple[str, ...] = ("session.id",)) -> None:
        self._attributes = attributes

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Set each of ``attributes`` on ``span`` to the session id in ``parent_context``'s baggage, if there is one."""
        session_id = baggage.get_baggage(SESSION_BAGGAGE_KEY, parent_context)
        if not isinstance(session_id, str) or not session_id:
            return
        for name in self._attributes:
            span.set_attribute(name, session_id)


class SentrySessionSpanProcessor(SessionSpanProcessor):
    """Copies the request's session id into ``mcp.session.id``, for Sentry's MCP monitoring view, which groups by it.

    Opt-in, because it goes against the MCP semantic conventions' registry:
    ``mcp.session.id`` is reserved there for the 2025-era transport session
    and must not be set for a 2026-07-28 session. The middleware follows the
    registry; add this processor only if Sentry's MCP view is where you read
    your traces::

        provider.add_span_processor(SentrySessionSpanProcessor())

    Like :class:`SessionSpanProcessor` it reads the id from the baggage the
    middleware sets, so it tags the spans started inside a request (the MCP
    SDK's own span, your spans), never the middleware's own span, which
    starts before the middleware sets the baggage. A span that already has
    ``mcp.session.id`` keeps it.
    """

    def __init__(self) -> None:
        super().__init__(attributes=(MCP_SESSION_ID,))

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Set ``mcp.session.id`` on ``span`` to the session id in the baggage, unless the span has one already."""
        if MCP_SESSION_ID in (span.attributes or {}):
            return
        super().on_start(span, parent_context)
