"""Forwarding to the app: the session attached, the responses rewritten, the operations ended."""

from __future__ import annotations

from contextvars import Token
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Receive, Scope, Send

from ..otel import Operation, Telemetry, attach_session, detach_session
from ..session import SCOPE_KEY, STATE_ATTRIBUTE, Session, current_session
from ..wire.jsonrpc import hashable_id
from ._echo import Target
from ._request import echoed
from ._response import ResponseRewriter

if TYPE_CHECKING:
    from asgiref.typing import ASGISendCallable

    from ..plan import Plan
    from ..profiles import WireProfile

__all__ = ["attach", "run_app", "targets_of"]


def targets_of(
    plan: Plan, advertising_by_era: dict[str, dict[str, tuple[WireProfile, ...]]], capability: dict[str, Any]
) -> dict[Any, Target]:
    """What to do with the response to each request of a batch (or of a request on a mapped transport)."""
    targets: dict[Any, Target] = {}
    advertising = advertising_by_era[plan.era.value]
    for call in plan.calls:
        if call.method is None or not call.is_request:
            continue
        advertised = advertising.get(call.method, ())
        if call.session is not None or advertised or call.operation is not None or call.revoked is not None:
            targets[hashable_id(call.message["id"])] = Target(
                call.profile,
                echoed(call.session),
                advertised=advertised,
                capability=capability,
                era=plan.era,
                operation=call.operation,
                revoked=call.revoked is not None,
            )
    return targets


def attach(scope: Scope, session: Session | None) -> Token[Session | None]:
    """Put the session where the app reads it (the scope, ``request.state``, :func:`get_session`).

    Returns the context variable's token: reset it once the app is done.
    """
    if session is not None:
        scope[SCOPE_KEY] = session
        state = scope.get("state")
        if state is None:
            state = scope["state"] = {}
        state[STATE_ATTRIBUTE] = session
    return current_session.set(session)


async def run_app(
    app: ASGIApp,
    telemetry: Telemetry | None,
    scope: Scope,
    receive: Receive,
    send: Send,
    session: Session | None,
    targets: dict[Any, Target],
    operations: list[Operation],
) -> None:
    """Call the app with the session attached (scope, context variable, span or baggage) and the responses
    rewritten; end every operation however the app ends.

    ``telemetry`` is given for an ordinary route, whose spans get the session in baggage; a JSON-RPC
    call has its operation for that (when telemetry is on), so the pipeline passes ``None``.
    """
    typed_send: ASGISendCallable = send  # type: ignore[assignment]
    rewriter = ResponseRewriter(typed_send, targets) if targets else None
    token = attach(scope, session)
    ambient = operations[0] if len(operations) == 1 else None
    baggage_token = None
    if ambient is not None:
        ambient.attach()
    elif session is not None and telemetry is not None and telemetry.enabled():
        baggage_token = attach_session(session.id)  # an ordinary route: its spans carry the session too
    try:
        await app(scope, receive, send if rewriter is None else rewriter.send)
    except BaseException as exc:
        for operation in operations:
            operation.exception(exc)
        raise
    finally:
        if ambient is not None:
            ambient.detach()
        if baggage_token is not None:
            detach_session(baggage_token)
        current_session.reset(token)
        if rewriter is not None and rewriter.status >= 400:
            for operation in operations:
                operation.http_error(rewriter.status)
        for operation in operations:
            operation.end()
