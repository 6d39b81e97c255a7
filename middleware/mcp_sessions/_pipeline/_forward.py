"""Forwarding to the app: the session attached, the trace continued, the responses rewritten, operations ended."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from starlette.types import Receive, Scope, Send

from .._otel import attach_session, detach_session
from .._session import (
    SCOPE_KEY,
    STATE_ATTRIBUTE,
    HeaderSession,
    Session,
    current_conversation,
    current_session,
    header_session,
)
from .._tokens import InvalidToken
from .._wire import Refusal
from .._wire.jsonrpc import hashable_id
from .._wire.protocol import Era
from ..handles import handle_context
from ..profiles import SessionCarrier
from ..stores import SessionStoreUnavailable
from ._echo import Target, advertising_tables
from ._listen import LISTEN, ListenStream
from ._request import continue_trace, strip_session_members
from ._response import ResponseRewriter

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from contextvars import Token

    from asgiref.typing import ASGISendCallable

    from .._asgi import Replay
    from .._otel import Operation, Telemetry
    from .._plan import Plan
    from .._session import SessionService
    from ..handles import HandleContext
    from ..profiles import Carrier, WireProfile
    from ..sources import TransportSource
    from ._transport import TransportSessions


class Forwarder:
    """The forward step of one middleware: what the app is called with, for a plan nothing refused."""

    __slots__ = (
        "_advertising",
        "_bus",
        "_capability",
        "_every_wire",
        "_mapped",
        "_max_response",
        "_per_request",
        "_sessions",
        "_strips",
        "_transport",
        "hidden",
    )

    def __init__(
        self,
        profiles: Sequence[WireProfile],
        *,
        capability: Mapping[str, Mapping[str, object]],
        strips: bool,
        transport: TransportSource | None,
        mapped: TransportSessions | None,
        sessions: SessionService,
        hides: bool = False,
        max_response_size: int,
    ) -> None:
        """``strips``: a wire removes its session member before the app; ``hides`` (a gateway's): every wire's is
        removed from every message, ``_meta`` included."""
        tables = advertising_tables(profiles)
        self._max_response = max_response_size
        self._advertising, self._per_request = tables[Era.LEGACY], tables[Era.MODERN]
        self._capability = capability
        self._every_wire: tuple[Carrier, ...] = tuple(p.carrier for p in profiles) if hides else ()
        keys = (c.meta_key for c in self._every_wire if isinstance(c, SessionCarrier))
        self.hidden = frozenset(keys) if hides else None
        """The ``_meta`` keys a probe leaves out (``ask_server``): a gateway's, every wire's session member's."""
        self._strips = strips or hides
        self._transport = transport
        self._mapped = mapped
        self._sessions = sessions
        # With a bus (subscriptions=), a session's listen streams end with it: _listen.py.
        self._bus = sessions.bus

    def targets(self, plan: Plan) -> dict[object, Target]:
        """What to do with the response to each request of ``plan``: echo, advertise, observe (by request id)."""
        targets: dict[object, Target] = {}
        advertising = self._advertising if plan.era is Era.LEGACY else self._per_request
        for call in plan.calls:
            if call.method is None or not call.is_request:
                continue
            advertised = advertising.get(call.method, ())
            session = call.session
            if session is not None or advertised or call.operation is not None or call.revoked is not None:
                targets[hashable_id(call.request_id)] = Target(
                    call.profile,
                    session
                    if session is not None and session.token
                    else None,  # data-layer sessions: the others have no token to echo
                    advertised,
                    self._capability,
                    plan.era,
                    call.operation,
                    call.revoked is not None,
                )
        return targets

    def scope_for(self, scope: Scope, plan: Plan) -> Scope:
        """The scope the app would be called with for ``plan``'s first message: on the 2025 wire of a profile
        that carries the session in ``Mcp-Session-Id``, the server's own transport session there instead, that
        of the session the header or the message names (see ``_transport.py`` for one bound to none)."""
        call = plan.calls[0]
        if self._mapped is None or plan.era is not Era.LEGACY or not call.profile.header_every_era:
            return scope
        if call.session is not None:  # as the request would be forwarded
            return self._mapped.scope_for(scope, call.session.id)
        header = plan.header_session_id
        try:  # the token the header holds, else the one the message carries
            if header is not None and header.count(b".") == 2:
                token: str | None = header.decode("latin-1")
            else:
                ref = call.profile.carrier.read(call.message) if isinstance(call.message, dict) else None
                token = None if ref is None else ref.token
        except Refusal:
            token = None
        if token is None:  # no session named: the header, if any, is the server's own transport session
            return scope
        try:
            session_id: str | None = self._sessions.keys.verify_session_token(token).session_id
        except InvalidToken:  # a session bound to no transport session here
            session_id = None
        return self._mapped.scope_for(scope, session_id)

    def prepare(self, scope: Scope, replay: Replay, send: Send, plan: Plan) -> Exchange | None:
        """What the app is called with for ``plan``: ``None`` when nothing is added, observed or attached.

        The caller calls the app itself and then :meth:`Exchange.finish`: no coroutine of the
        pipeline stays on the stack while the app runs, where every suspension of the app would
        pass through it.
        """
        if self._strips:
            strip_session_members(plan, replay, self._every_wire)
        given, listen = send, None
        receive: Receive = replay
        if self._transport is not None and plan.era is Era.LEGACY and plan.calls[0].method == "initialize":
            send = self._transport.watch_initialize(send)
        targets = self.targets(plan)
        if plan.batch:
            operations: Sequence[Operation] = [call.operation for call in plan.calls if call.operation is not None]
            sessions = {call.session.id: call.session for call in plan.calls if call.session is not None}
            session = next(iter(sessions.values())) if len(sessions) == 1 else None
            named = {(c.conversation.id, c.conversation.source) for c in plan.calls if c.conversation is not None}
            conversation = next(iter(named)) if len(named) == 1 else None
            attaches = bool(sessions) or conversation is not None
        else:  # one message, the usual request
            call = plan.calls[0]
            session = call.session
            host = call.conversation  # what the logs name, as the spans do (a host's request may have no Session)
            conversation = None if host is None else (host.id, host.source)
            attaches = session is not None or conversation is not None
            operations = () if call.operation is None else (call.operation,)
            if (
                session is not None
                and (mapped := self._mapped) is not None
                and plan.era is Era.LEGACY
                and call.profile.header_every_era
            ):
                opening = call.method in call.profile.carrier.opening_methods
                scope, send = mapped.bind(scope, send, session, opening=opening)
            if self._bus is not None and call.method == LISTEN:  # the one check on every request with a bus
                listen = ListenStream(self._bus, self._sessions, session, call.request_id, replay, send)
                receive, send = listen.receive, listen.send
        if not (targets or attaches or operations or plan.handles or header_session.get()):
            return None if send is given else Exchange(scope, receive, send, None, None, [], listen=listen)
        if len(operations) == 1 and not plan.batch and operations[0].traced:
            continue_trace(plan.calls[0].message, replay, operations[0])
        typed_send: ASGISendCallable = send  # type: ignore[assignment]  # an annotation, not a call
        rewriter = None
        if targets:
            answers = None if plan.batch else plan.calls[0].request_id
            rewriter = ResponseRewriter(typed_send, targets, limit=self._max_response, request_id=answers)
        return Exchange(scope, receive, send, session, rewriter, operations, plan.handles, None, conversation, listen)


class Exchange:
    """One call of the app: what it is called with, and what is undone once it is done.

    Built with the session attached (the scope, ``request.state``, :func:`get_session`'s context
    variable), the call's span current or the session in baggage, the handle view current, and the
    responses going through a :class:`ResponseRewriter`. Used as ``with exchange: await app(...)``: the app
    runs in the caller's own frame, with no coroutine of the pipeline between it and the event loop, and
    leaving the block undoes all of it and ends every operation, however the app ended.
    """

    __slots__ = (
        "_ambient",
        "_baggage",
        "_conversation",
        "_handles",
        "_listen",
        "_named",
        "_operations",
        "_refuses",
        "_rewriter",
        "_token",
        "receive",
        "scope",
        "send",
        "store_failure",
    )

    def __init__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        session: Session | None,
        rewriter: ResponseRewriter | None,
        operations: Sequence[Operation],
        handles: HandleContext | None = None,
        telemetry: Telemetry | None = None,
        conversation: tuple[str, str] | None = None,
        listen: ListenStream | None = None,
        named: HeaderSession | None = None,
    ) -> None:
        self.scope, self.receive = scope, receive
        self._refuses = named is None  # a request the pipeline planned, which it can still refuse
        self.store_failure: SessionStoreUnavailable | None = None
        """A store failure the app let out before it answered (a tool's ``session.data`` write): to be refused."""
        self._listen = listen
        self._rewriter = rewriter
        self.send: Send = send if rewriter is None else rewriter.send
        if session is not None:  # where the app reads it: the scope, request.state, get_session()
            scope[SCOPE_KEY] = session
            state = scope.get("state")
            if state is None:
                state = scope["state"] = {}
            state[STATE_ATTRIBUTE] = session
        self._token = current_session.set(session)
        # An ordinary route's header session for get_session(); none at an MCP endpoint, whatever an outer set.
        self._named = None if named is None and header_session.get() is None else header_session.set(named)
        self._conversation: Token[tuple[str, str] | None] | None = (
            None if conversation is None else current_conversation.set(conversation)
        )
        self._operations = operations
        self._ambient: Operation | None = None
        """The one operation of a one-message request, current while the app runs."""
        self._baggage: object = None
        if len(operations) == 1:
            self._ambient = ambient = operations[0]
            ambient.attach()
        elif named is not None and telemetry is not None and telemetry.enabled():
            self._baggage = attach_session(named.session.id)  # an ordinary route: its spans carry the session too
        self._handles: AbstractContextManager[HandleContext] | None = None
        if handles is not None:  # typed handle parameters read the verified handles there
            self._handles = context = handle_context(handles)
            context.__enter__()

    def __enter__(self) -> Exchange:
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> bool:
        """Record what the app raised and :meth:`finish`; keep a store failure of a planned request that is still
        unanswered in :attr:`store_failure` instead of raising it (its refusal ends the operations). What the app
        raised once its answer was refused as too large is its reaction to that (``_response.py``): not raised."""
        if self._rewriter is not None and self._rewriter.refused:
            self.finish()
            return True
        if (
            self._refuses
            and isinstance(error, SessionStoreUnavailable)
            and self._rewriter is not None  # else this exchange cannot tell whether the app has answered
            and self._rewriter.status == 0
        ):
            self.store_failure = error
            self.finish(end=False)
            return True
        if error is not None:
            for operation in self._operations:
                operation.exception(error)
        self.finish()
        return False

    def finish(self, *, end: bool = True) -> None:
        """Undo what was attached, in reverse order, and end every operation (unless ``end`` is false)."""
        if self._listen is not None:
            self._listen.close()
        if self._handles is not None:
            self._handles.__exit__(None, None, None)
        if self._ambient is not None:
            self._ambient.detach()
        if self._baggage is not None:
            detach_session(self._baggage)
        if self._conversation is not None:
            current_conversation.reset(self._conversation)
        current_session.reset(self._token)
        if self._named is not None:
            header_session.reset(self._named)
        operations = self._operations if end else ()
        if self._rewriter is not None and self._rewriter.status >= 400:
            for operation in operations:
                operation.http_error(self._rewriter.status)
        for operation in operations:
            operation.end()
