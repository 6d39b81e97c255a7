"""W3C trace context and baggage: read from a request, kept in a token, set for the application.

Only stable ids ever go in baggage (never a session token or a raw transport
session id).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Final

from opentelemetry import baggage, context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

SESSION_BAGGAGE_KEY: Final = "session.id"
"""The OpenTelemetry baggage key that holds the session's stable id while one of its requests runs."""
TRACEPARENT_CLAIM: Final = "tp"
TRACE_KEYS: Final = ("traceparent", "tracestate", "baggage")
# The attributes of the links a SERVER span may have: to the session's creation, to the context _meta named.
_CREATED: Final = {"mcp_sessions.link": "session.created"}
_META: Final = {"mcp_sessions.link": "mcp.meta"}
_W3C: Final = TraceContextTextMapPropagator()


@functools.lru_cache(maxsize=1024)
def _span_context(traceparent: str) -> SpanContext | None:
    """The remote SpanContext our own ``tp`` claim names, parsed once per creation span."""
    span_context = trace.get_current_span(_W3C.extract({"traceparent": traceparent})).get_span_context()
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


def detach_session(token: object) -> None:
    """Undo :func:`attach_session`."""
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
    meta = params.get("_meta") if params is not None else None
    meta_parent = None
    if isinstance(meta, dict) and "traceparent" in meta:
        meta_parent = _extract({k: meta[k] for k in TRACE_KEYS if type(meta.get(k)) is str})
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
