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
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

__all__ = [
    "SESSION_BAGGAGE_KEY",
    "TRACEPARENT_CLAIM",
    "TRACE_KEYS",
    "attach_session",
    "detach_session",
    "extract",
    "parent_and_links",
    "span_context_from_traceparent",
    "traceparent_of",
]

SESSION_BAGGAGE_KEY: Final = "session.id"
"""The OpenTelemetry baggage key that holds the session's stable id while one of its requests runs."""
TRACEPARENT_CLAIM: Final = "tp"
TRACE_KEYS: Final = ("traceparent", "tracestate", "baggage")
# The attributes of the links a SERVER span may have: to the session's creation, to the context _meta named.
_CREATED: Final = {"mcp_sessions.link": "session.created"}
_META: Final = {"mcp_sessions.link": "mcp.meta"}


def traceparent_of(span_context: SpanContext) -> str:
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{span_context.trace_flags:02x}"


def span_context_from_traceparent(value: object) -> SpanContext | None:
    """A remote SpanContext from our own ``tp`` claim (version 00 only)."""
    if type(value) is not str or len(value) != 55:
        return None
    return _span_context(value)


@functools.lru_cache(maxsize=1024)
def _span_context(value: str) -> SpanContext | None:
    """Parsed once per creation span: every request of a session links to the same one."""
    try:
        version, trace_id, span_id, flags = value.split("-")
        if version != "00":
            return None
        sc = SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(int(flags, 16)))
    except ValueError:
        return None
    return sc if sc.is_valid else None


def extract(carrier: dict[str, str]) -> Context | None:
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
        header_parent = extract({k: headers[k.encode()].decode("latin-1") for k in TRACE_KEYS if k.encode() in headers})
    meta = params.get("_meta") if params is not None else None
    meta_parent = None
    if isinstance(meta, dict) and "traceparent" in meta:
        meta_parent = extract({k: meta[k] for k in TRACE_KEYS if type(meta.get(k)) is str})
    parent = header_parent or meta_parent
    creation = None
    if session_claims is not None:
        creation = span_context_from_traceparent(session_claims.get(TRACEPARENT_CLAIM))
        if parent is None and creation is not None and not linked_only:
            # The parent already says it: no link as well (and with no parent, no transport context to link).
            return trace.set_span_in_context(NonRecordingSpan(creation)), None
    links = None
    if creation is not None:
        links = [Link(creation, _CREATED)]
    if meta_parent is not None and header_parent is not None:
        # The headers chose the parent: _meta's context, which the client's MCP layer sent, is kept as a link.
        meta_span = trace.get_current_span(meta_parent).get_span_context()
        links = [*(links or ()), Link(meta_span, _META)]
    return parent, links
