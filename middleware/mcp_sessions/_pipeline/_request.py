"""Pure helpers of the pipeline that read or rewrite one request: headers, body, trace context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from starlette.types import Scope

from .._wire import jsonrpc
from .._wire.protocol import MCP_SESSION_ID_HEADER
from ..profiles import Carrier, SessionCarrier

if TYPE_CHECKING:
    from .._asgi import Replay
    from .._otel import Operation
    from .._plan import Plan

_CONFLICTING_HEADER: Final = b"\x00conflicting"


def headers_of(scope: Scope) -> dict[bytes, bytes]:
    """The request headers; the first of a repeated header wins, as in Starlette."""
    raw_headers = scope["headers"]
    if type(raw_headers) is not list and not isinstance(raw_headers, tuple):  # ASGI allows any iterable
        raw_headers = list(raw_headers)
    headers = dict(raw_headers)
    if len(headers) == len(raw_headers):
        return headers  # no name repeated: the usual request
    headers = dict(reversed(raw_headers))
    if len({v for n, v in raw_headers if n == MCP_SESSION_ID_HEADER}) > 1:
        # Two different Mcp-Session-Id headers: a proxy may route on one and we
        # would check the other, so the pair matches no session.
        headers[MCP_SESSION_ID_HEADER] = _CONFLICTING_HEADER
    return headers


def strip_session_members(plan: Plan, replay: Replay, every_wire: Sequence[Carrier] = ()) -> None:
    """Remove the session members JSON-RPC does not know (SEP-1364's top-level ``sessionId``) before the app;
    with ``every_wire`` (a gateway's), every wire's session member of every message, in ``_meta`` too."""
    stripped = False
    for call in plan.calls:
        if call.method is not None and call.profile.carrier.strip(call.message):
            stripped = True
        if call.method is not None and every_wire:
            stripped = _strip_every_wire(call.message, every_wire) or stripped
    if stripped:
        replay.rewrite(jsonrpc.dumps(body_of(plan)))


def _strip_every_wire(message: dict[str, Any], carriers: Sequence[Carrier]) -> bool:
    """Remove each carrier's session from ``message`` (a ``_meta`` key, or what its ``strip`` removes)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    stripped = False
    for carrier in carriers:
        if isinstance(carrier, SessionCarrier):
            if isinstance(meta, dict) and carrier.meta_key in meta:
                del meta[carrier.meta_key]
                stripped = True
        elif carrier.strip(message):
            stripped = True
    return stripped


def continue_trace(message: dict[str, object], replay: Replay, operation: Operation) -> None:
    """Forward a ``_meta`` trace context that names this span, so the server's span nests under it.

    The SDK parents its span to ``_meta.traceparent`` when present (SEP-414)
    and to the ambient context otherwise: only the first case needs the body
    rewritten.
    """
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or "traceparent" not in meta:
        return
    operation.inject(meta)
    replay.rewrite(jsonrpc.dumps(message))


def body_of(plan: Plan) -> Any:
    """The parsed body, as the guard reads it: one message, or the batch."""
    return [call.message for call in plan.calls] if plan.batch else plan.calls[0].message
