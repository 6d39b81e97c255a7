"""Forwarding to the app: the session attached, the trace continued, the responses rewritten, operations ended."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Receive, Scope, Send

from ..handles import handle_context
from ..otel import attach_session, detach_session
from ..session import SCOPE_KEY, STATE_ATTRIBUTE, Session, current_session
from ..wire.jsonrpc import hashable_id
from ..wire.protocol import Era
from ._echo import Target, advertising_tables
from ._request import continue_trace, strip_session_members
from ._response import ResponseRewriter

if TYPE_CHECKING:
    from asgiref.typing import ASGISendCallable

    from ..asgi import Replay
    from ..otel import Operation, Telemetry
    from ..plan import Plan
    from ..profiles import WireProfile
    from ..sources.transport import TransportSource
    from ._transport import TransportSessions

__all__ = ["Forwarder", "run_app"]

Capabilities = Mapping[str, Mapping[str, object]]


class Forwarder:
    """The forward step of one middleware: what the app is called with, for a plan nothing refused."""

    __slots__ = ("_advertising", "_capability", "_mapped", "_per_request", "_strips", "_transport")

    def __init__(
        self,
        profiles: Sequence[WireProfile],
        *,
        capability: Capabilities,
        strips: bool,
        transport: TransportSource | None,
        mapped: TransportSessions | None,
    ) -> None:
        tables = advertising_tables(profiles)  # by era: each is looked up by identity, an Enum hashes in Python
        self._advertising, self._per_request = tables[Era.HANDSHAKE.value], tables[Era.PER_REQUEST.value]
        self._capability = capability
        self._strips = strips
        self._transport = transport
        self._mapped = mapped

    def targets(self, plan: Plan) -> dict[object, Target]:
        """What to do with the response to each request of ``plan``: echo, advertise, observe (by request id)."""
        targets: dict[object, Target] = {}
        advertising = self._advertising if plan.era is Era.HANDSHAKE else self._per_request
        for call in plan.calls:
            if call.method is None or not call.is_request:
                continue
            advertised = advertising.get(call.method, ())
            session = call.session
            if session is not None or advertised or call.operation is not None or call.revoked is not None:
                targets[hashable_id(call.request_id)] = Target(
                    call.profile,
                    session if session is not None and session.token else None,  # echoed(): data-layer sessions
                    advertised=advertised,
                    capability=self._capability,
                    era=plan.era,
                    operation=call.operation,
                    revoked=call.revoked is not None,
                )
        return targets

    async def forward(self, app: ASGIApp, scope: Scope, replay: Replay, send: Send, plan: Plan) -> None:
        """Call ``app`` with the session attached, the trace continued and the responses rewritten."""
        if self._strips:
            strip_session_members(plan, replay)
        if self._transport is not None and plan.era is Era.HANDSHAKE and plan.calls[0].method == "initialize":
            send = self._transport.watch_initialize(send)
        targets = self.targets(plan)
        if plan.batch:
            operations = [call.operation for call in plan.calls if call.operation is not None]
            sessions = {call.session.id: call.session for call in plan.calls if call.session is not None}
            session = next(iter(sessions.values())) if len(sessions) == 1 else None
            attaches = bool(sessions)
        else:  # one message, the usual request
            call = plan.calls[0]
            session = call.session
            attaches = session is not None
            operations = [] if call.operation is None else [call.operation]
            if (
                session is not None
                and (mapped := self._mapped) is not None
                and plan.era is Era.HANDSHAKE
                and call.profile.header_every_era
            ):
                opening = call.method in call.profile.carrier.opening_methods
                scope, send = mapped.bind(scope, send, session, opening=opening)
        if not targets and not attaches and not operations and plan.handles is None:
            return await app(scope, replay, send)  # nothing to add, observe or attach
        if len(operations) == 1 and not plan.batch and operations[0].traced:
            continue_trace(plan.calls[0].message, replay, operations[0])
        if plan.handles is None:
            return await run_app(app, None, scope, replay, send, session, targets, operations)
        with handle_context(plan.handles):  # typed handle parameters read the verified handles there
            await run_app(app, None, scope, replay, send, session, targets, operations)


async def run_app(
    app: ASGIApp,
    telemetry: Telemetry | None,
    scope: Scope,
    receive: Receive,
    send: Send,
    session: Session | None,
    targets: dict[object, Target],
    operations: list[Operation],
) -> None:
    """Call the app with the session attached (scope, context variable, span or baggage) and the responses
    rewritten; end every operation however the app ends.

    ``telemetry`` is given for an ordinary route, whose spans get the session in baggage; a JSON-RPC
    call has its operation for that (when telemetry is on), so the pipeline passes ``None``.
    """
    typed_send: ASGISendCallable = send  # type: ignore[assignment]  # an annotation, not a call
    rewriter = ResponseRewriter(typed_send, targets) if targets else None
    if session is not None:  # where the app reads it: the scope, request.state, get_session()
        scope[SCOPE_KEY] = session
        state = scope.get("state")
        if state is None:
            state = scope["state"] = {}
        state[STATE_ATTRIBUTE] = session
    token = current_session.set(session)
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
