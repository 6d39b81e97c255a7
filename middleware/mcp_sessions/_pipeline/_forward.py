"""Forwarding to the app: the session attached, the trace continued, the responses rewritten, operations ended;
a request that is not JSON-RPC, passed through with the session its header names; and a session's
``subscriptions/listen`` response, ended when the session ends (``docs/deployment.md``).

The SDK's ``ListenHandler`` cannot end one stream (its ``close()`` ends them all), so the middleware sends the
listen request's own result as the last frame (the spec's graceful closure), ends the response, and tells the
transport the client has gone (``http.disconnect``), which cancels the handler and its subscription.

The stream ends when the bus orders it (the session deleted on any replica), at the token's absolute expiry,
or when a touch every ``idle_ttl / 2`` seconds (60 without ``idle_ttl``) finds the session ended. The touches
do not depend on the watch, which a replica at the bus's ``max_sessions`` refuses (the SDK then refuses the
listen, unless another session's stream ended in between). A stream without a session only waits, at its
start, until its events can arrive.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._otel import attach_session, detach
from .._plan import body_of
from .._session import (
    SCOPE_KEY,
    STATE_ATTRIBUTE,
    HeaderSession,
    Session,
    SessionNotFound,
    current_conversation,
    current_session,
    header_session,
    inherited,
)
from .._tokens import is_session_token
from .._wire import Refusal, ThrottledWarning, jsonrpc
from .._wire.jsonrpc import hashable_id
from .._wire.protocol import MCP_SESSION_ID_HEADER
from ..handles import handle_context
from ..profiles import Era
from ..stores import SessionStoreUnavailable
from ._response import ResponseRewriter, Target, advertising_tables, uncoded

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from .._asgi import Replay
    from .._otel import Operation, Telemetry
    from .._plan import Plan
    from .._session import SessionBus, SessionService
    from ..handles import HandleContext
    from ..profiles import WireProfile
    from ..sources import TransportSource

REQUEST_ID: Final = "mcp_sessions.request_id"
"""The scope key of the id of the one request a forwarded POST carries, as its answer repeats it (a string or an
integer; ``None`` for an id no answer can repeat), from the body the sessions parsed: set on the scope the app is
called with, absent for a notification, a batch, or a body that is no JSON-RPC call. A layer inside the sessions
that answers for a request (``gateway --stdio``'s, for a call its stop cuts) reads it here, not the body again."""


class Forwarder:
    """The forward step of one middleware: what the app is called with, for a plan nothing refused."""

    def __init__(
        self,
        profiles: Sequence[WireProfile],
        *,
        capability: Mapping[str, Mapping[str, object]],
        transport: TransportSource | None,
        sessions: SessionService,
        telemetry: Telemetry,
        at_endpoint: bool,
        hides: bool = False,
        max_response_size: int,
    ) -> None:
        """``hides`` (a gateway's): every wire's session member is removed from every message's ``_meta``."""
        tables = advertising_tables(profiles)
        self._max_response = max_response_size
        self._advertising, self._per_request = tables[Era.LEGACY], tables[Era.MODERN]
        self._capability = capability
        self.hidden = frozenset(p.carrier.meta_key for p in profiles) if hides else None
        """The ``_meta`` keys a probe leaves out (``ask_server``): a gateway's, every wire's session member's."""
        self._transport = transport
        self._telemetry = telemetry
        self._at_endpoint = at_endpoint
        self._sessions = sessions
        # With a bus (subscriptions=), a session's listen streams end with it: ListenStream.
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
            if session is not None or advertised or call.operation is not None:
                targets[hashable_id(call.request_id)] = Target(
                    call.profile,
                    session
                    if session is not None and session.token
                    else None,  # data-layer sessions: the others have no token to echo
                    advertised,
                    self._capability,
                    plan.era,
                    call.operation,
                )
        return targets

    def prepare(self, scope: Scope, replay: Replay, send: Send, plan: Plan) -> Exchange | None:
        """What the app is called with for ``plan``: ``None`` when nothing is added, observed or attached.

        The caller calls the app itself and then :meth:`Exchange.finish`: no coroutine of the
        pipeline stays on the stack while the app runs, where every suspension of the app would
        pass through it.
        """
        if self.hidden is not None:
            strip_session_members(plan, replay, self.hidden)
        if not plan.batch and plan.calls[0].is_request:
            scope[REQUEST_ID] = jsonrpc.echoable_id(plan.calls[0].request_id)
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
            if self._bus is not None and call.method == LISTEN:  # the one check on every request with a bus
                listen = ListenStream(self._bus, self._sessions, session, call.request_id, replay, send)
                receive, send = listen.receive, listen.send
        if not (targets or attaches or operations or plan.handles or inherited()):
            return None if send is given else Exchange(scope, receive, send, None, None, [], listen=listen)
        if len(operations) == 1 and not plan.batch:
            continue_trace(plan.calls[0].message, replay, operations[0])
        rewriter = None
        if targets:
            answers = None if plan.batch else plan.calls[0].request_id
            rewriter = ResponseRewriter(send, targets, limit=self._max_response, request_id=answers)
            scope["headers"] = uncoded(scope["headers"])
        return Exchange(scope, receive, send, session, rewriter, operations, plan.handles, None, conversation, listen)

    async def pass_through(
        self, app: ASGIApp, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes]
    ) -> None:
        """Forward a request that is not JSON-RPC untouched, with the session a JWT-shaped ``Mcp-Session-Id``
        names if it is valid (a 2025 transport session id is a bare uuid): the route decides what none means."""
        header_session_id, named = headers.get(MCP_SESSION_ID_HEADER), None
        if header_session_id is not None and self._transport is not None and scope["method"] == "DELETE":
            send = self._transport.watch_delete(header_session_id, send)  # the server's own transport session's
        if header_session_id is not None and is_session_token(header_session_id):
            sessions = self._sessions
            try:  # the MCP endpoint's own GET and DELETE are bound to it; an ordinary route reads any endpoint's
                session = await sessions.resolve(
                    scope, header_session_id.decode("latin-1"), None, endpoint=self._at_endpoint, owner_later=True
                )
            except (SessionNotFound, Refusal):
                pass
            else:
                named = HeaderSession(session, scope, sessions.owns)  # whose it is, asked once the app's auth ran
        if named is None and not inherited():
            return await app(scope, receive, send)
        with Exchange(scope, receive, send, None, None, [], telemetry=self._telemetry, named=named) as exchange:
            return await app(exchange.scope, exchange.receive, exchange.send)


class Exchange:
    """One call of the app: what it is called with, and what is undone once it is done.

    Built with the session attached (the scope, ``request.state``, :func:`get_session`'s context
    variable), the call's span current or the session in baggage, the handle view current, and the
    responses going through a :class:`ResponseRewriter`. Used as ``with exchange: await app(...)``: the app
    runs in the caller's own frame, with no coroutine of the pipeline between it and the event loop, and
    leaving the block undoes all of it and ends every operation, however the app ended.
    """

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
        self._conversation = current_conversation.set(conversation)  # None too: none may be inherited (``inherited``)
        self._operations = operations
        self._context: object = None
        """The token of the context the app runs in: the one operation of a one-message request current, or the
        session in baggage."""
        if len(operations) == 1:
            self._context = operations[0].attach()
        elif named is not None and telemetry is not None and telemetry.enabled():
            self._context = attach_session(named.session.id)  # an ordinary route: its spans carry the session too
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
        if self._context is not None:
            detach(self._context)
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


def strip_session_members(plan: Plan, replay: Replay, keys: frozenset[str]) -> None:
    """Remove every wire's session member (``keys``, in ``_meta``) from every message before the app (a
    gateway's: the upstream never sees a session it did not mint)."""
    stripped = False
    for call in plan.calls:
        meta = jsonrpc.meta(call.params) if call.method is not None else None
        if meta is not None:
            for key in keys & meta.keys():
                del meta[key]
                stripped = True
    if stripped:
        replay.rewrite(jsonrpc.dumps(body_of(plan)))


def continue_trace(message: dict[str, object], replay: Replay, operation: Operation) -> None:
    """Forward a ``_meta`` trace context that names this span, so the server's span nests under it.

    The SDK parents its span to ``_meta.traceparent`` when present (SEP-414)
    and to the ambient context otherwise: only the first case needs the body
    rewritten.
    """
    meta = jsonrpc.meta(message.get("params"))
    if meta is None or "traceparent" not in meta or not operation.traced:
        return
    operation.inject(meta)
    replay.rewrite(jsonrpc.dumps(message))


if TYPE_CHECKING:
    from .._session import Session, SessionBus, SessionService

# -- a session's subscriptions/listen stream

LISTEN: Final = "subscriptions/listen"
SUBSCRIPTION_ID_META_KEY: Final = "io.modelcontextprotocol/subscriptionId"
RECHECK_WITHOUT_IDLE_TTL: Final = 60.0
_DISCONNECT: Final[Message] = {"type": "http.disconnect"}
_SSE_HEADERS: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform")]
# What the SDK's first frame says once it has subscribed the stream to its bus.
_ACKNOWLEDGED: Final = b'"notifications/subscriptions/acknowledged"'
_OTHER_BUS: Final = (
    "a listen stream in a session was subscribed to a bus other than the middleware's SessionSubscriptionBus: "
    "it gets none of its session's events; build the server with the same bus, MCPServer(subscriptions=bus)"
)
_other_bus = ThrottledWarning(logging.getLogger("mcp_sessions"))


class ListenStream:
    """The ``receive`` and ``send`` of one listen request: see the module's docstring."""

    __slots__ = (
        "_body_read",
        "_bus",
        "_bus_checked",
        "_done",
        "_ended",
        "_lock",
        "_ready",
        "_receive",
        "_request_id",
        "_send",
        "_session",
        "_sessions",
        "_started",
        "_unwatch",
    )

    def __init__(
        self,
        bus: SessionBus,
        sessions: SessionService,
        session: Session | None,
        request_id: object,
        receive: Receive,
        send: Send,
    ) -> None:
        self._bus, self._sessions, self._session, self._request_id = bus, sessions, session, request_id
        self._receive, self._send = receive, send
        self._ended = anyio.Event()
        # Before the SDK's subscribe(), so that the session's channel is joined by the acknowledgement; None
        # at the bus's limit of sessions listening here (see the module's docstring).
        self._unwatch = None if session is None else bus.watch(session.id, self._ended.set)
        self._lock = anyio.Lock()
        self._ready = self._body_read = self._started = self._done = self._bus_checked = False

    def close(self) -> None:
        """The request is over: stop watching the session."""
        if (unwatch := self._unwatch) is not None:
            self._unwatch = None
            unwatch()

    async def send(self, message: Message) -> None:
        if not self._ready and message["type"] == "http.response.start":
            self._ready = True  # the acknowledgement follows: events published from now on must arrive
            await self._bus.ready(None if self._session is None else self._session.id)
        async with self._lock:
            if self._done:  # ended here: the app's last frames go nowhere
                return
            if message["type"] == "http.response.start":
                self._started = True
            elif message["type"] == "http.response.body":
                if not self._bus_checked:  # the first frame: the SDK acknowledges once it has subscribed
                    self._bus_checked = True
                    session = self._session
                    if (
                        session is not None
                        and _ACKNOWLEDGED in message.get("body", b"")
                        and not self._bus.serves(session.id)
                    ):
                        _other_bus.warn(_OTHER_BUS)
                self._done = not message.get("more_body", False)
            await self._send(message)

    async def receive(self) -> Message:
        if self._done:
            return _DISCONNECT
        if not self._body_read or self._session is None:
            self._body_read = True  # the body, replayed at once; then what the transport waits on
            return await self._receive()
        message: Message | None = None
        async with anyio.create_task_group() as group:

            async def client() -> None:
                nonlocal message
                message = await self._receive()
                group.cancel_scope.cancel()

            group.start_soon(client)
            await self._until_session_ends()
            group.cancel_scope.cancel()
        if message is not None:
            return message
        await self._end()
        return _DISCONNECT

    async def _until_session_ends(self) -> None:
        session = self._session
        assert session is not None
        idle_ttl = self._sessions.idle_ttl
        every = RECHECK_WITHOUT_IDLE_TTL if idle_ttl is None else idle_ttl / 2
        while True:
            now = time.time()
            with anyio.move_on_after(min(session.token_expires_at, now + every) - now):
                await self._ended.wait()
                return  # deleted, on this replica or another
            if time.time() >= session.token_expires_at or not await self._sessions.still_active(session):
                return

    async def _end(self) -> None:
        """The last frame, the listen request's result, then the end of the response."""
        async with self._lock:
            if self._done:
                return
            self._done = True
            if not self._started:
                await self._send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            await self._send({"type": "http.response.body", "body": final_frame(self._request_id), "more_body": False})


def final_frame(request_id: object) -> bytes:
    """The listen request's ``SubscriptionsListenResult`` as one SSE event: the graceful end of the stream."""
    result = {"_meta": {SUBSCRIPTION_ID_META_KEY: request_id}, "resultType": "complete"}
    data = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, separators=(",", ":"))
    return f"event: message\r\ndata: {data}\r\n\r\n".encode()
