"""The express lane: the usual request on a short path; anything else takes the whole pipeline.

The usual request is one JSON-RPC request of the only enabled wire that is
not one of its local methods, nor a method whose result advertises the wire,
and that either names a data-layer session or names none and needs none. For
it, planning, the session sources and forwarding come down to a few checks.
Every check that could go another way declines before anything has happened
(nothing read from the store, nothing sent), and the pipeline then takes the
request from the start, so the lane decides nothing the pipeline would decide
differently. A named session that does not resolve (its token does not verify,
or the store refuses it: revoked, idle, or the store down) is raised as
:class:`Refused`, with the refusal the pipeline gives it, for the pipeline to
answer as it answers any refusal; the store is then not asked twice.

The lane is built only for the configurations whose pipeline does nothing
more for such a request: one wire of the draft's shape (its session in
``params._meta``, echoed in ``result._meta``), no handles, no transport
sessions. While an OpenTelemetry SDK records, it starts and ends each
request's SERVER span as the pipeline does (``_operations._start``,
``_request.continue_trace``, ``_forward.run_app``), named by the request's
session, else by the conversation id its host sends (``sources.host``).

It runs on every request, between two calls of a server whose own code has
evicted it from the CPU caches, where each call and each object costs two to
three times what it costs in a tight loop. So :func:`express_lane` builds it once
as one closure over everything it reads, with the steps of the pipeline it
stands for written inline (each says which): the replay and the reply are
closures of the request, as in a hand-written session layer. The property
tests in ``tests/asgi/test_express.py`` hold it to the pipeline byte for byte.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import Token
from typing import TYPE_CHECKING, Any, Final

from starlette.types import Message, Receive, Scope, Send

from . import _jsonrpc as jsonrpc
from ._answers import Refusal, store_unavailable
from ._echo import Target, hashable_id
from ._jsonrpc import Watch, fast_loads
from ._plan import UNPARSED, era_of
from ._principal import PRINCIPAL_CLAIM
from ._protocol import MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER, Era
from ._response import ResponseRewriter, _answer_spliced, _Messages, _SseBody, logger
from ._service import SessionRefused, SessionService
from ._session import SCOPE_KEY, STATE_ATTRIBUTE, Session, _current
from .profiles import Echo, SessionCarrier, WireProfile
from .sources.data_layer import refusal_of
from .stores import SessionStatus, SessionStoreUnavailable

if TYPE_CHECKING:
    from asgiref.typing import ASGISendCallable

    from ._operation import Operation
    from ._policy import Requires
    from ._telemetry import Telemetry
    from .sources.host import HostConversationSource

__all__ = ["Declined", "Exchange", "Refused", "Take", "express_for", "express_lane"]

Finish = Callable[[BaseException | None], None]
Exchange = tuple[Receive, Send, Token[Session | None] | None, Finish | None]
"""What the app is called with (the replayed ``receive``, the ``send`` it answers through), the
context variable's token to reset once it is done (``None`` without a session), and, for a traced
request, what ends its operation once the app is done (given the exception the app raised, if any)."""
Take = Callable[[Scope, Receive, Send, dict[bytes, bytes], bytes, int, bool], Awaitable["Exchange | Declined"]]
"""``take(scope, receive, send, headers, body, start_ns, traced)``: see :func:`express_lane`."""

_JSON: Final = b"application/json"
_ACTIVE: Final = SessionStatus.ACTIVE


class Declined:
    """The request is not the usual one: nothing has happened. ``parsed`` is the body as the lane read
    it, which :func:`_jsonrpc.loads` would read the same way (the planner reuses it), or
    :data:`UNPARSED`."""

    __slots__ = ("parsed",)

    def __init__(self, parsed: Any) -> None:
        self.parsed = parsed


_UNREAD: Final = Declined(UNPARSED)


class Refused(Exception):
    """The session the request names did not resolve: the pipeline answers with ``refusal``."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.reason)
        self.refusal = refusal


def express_lane(
    profile: WireProfile,
    *,
    sessions: SessionService,
    hosts: HostConversationSource,
    requires: Requires | None,
    capability: dict[str, dict[str, Any]],
    watch: Watch,
    telemetry: Telemetry,
) -> Take:
    """The lane for ``profile``: ``take(scope, receive, send, headers, body, start_ns, traced)`` returns
    what to call the app with if the request is the usual one (the session attached, and with
    ``traced`` its SERVER span started as the pipeline starts it), :class:`Declined` having done
    nothing if it is not, and raises :class:`Refused` for a named session that does not resolve.

    The caller calls the app itself, so that the lane is not one more coroutine on the stack that every
    suspension of the app goes through."""
    carrier, echo = profile.carrier, profile.echo
    assert isinstance(carrier, SessionCarrier) and isinstance(echo, Echo)
    meta_key, id_member, state_member = carrier.meta_key, carrier.id_member, carrier.state_member
    # Methods the lane never takes: the wire's own, and those whose result advertises it.
    declined = frozenset((*profile.methods, *profile.advertised_per_request, *profile.advertised_handshake))
    # A host's conversation id names the span when traced; with its data kept, the pipeline adopts it.
    find_conversation, keeps_data = hosts.find, hosts.data != "off"
    needs_check = watch.needs_check
    keys, store, idle_ttl = sessions.keys, sessions.store, sessions.idle_ttl
    cached_claims, leeway, touch = keys.cached_session_claims, keys.leeway, store.touch
    direct_touch = sessions.touch_takes_issued_at
    resolve, refused, new_session = sessions.resolve, sessions.refused, sessions.session
    now_of = time.time

    def target(session: Session | None, headers: dict[bytes, bytes], operation: Operation | None) -> Target:
        """What the general rewriter needs for the lane's response: its session's echo, its operation."""
        era = era_of(headers.get(MCP_PROTOCOL_VERSION_HEADER))
        return Target(profile, session, advertised=(), capability=capability, era=era, operation=operation)

    def start_operation(
        scope: Scope,
        headers: dict[bytes, bytes],
        message: dict[str, Any],
        method: str,
        start_ns: int,
        session_id: str | None,
        claims: Mapping[str, Any] | None,
        source: str | None,
        user: str | None,
    ) -> Operation:
        """``_operations._start`` for the lane's one call: its SERVER span, named by its session or
        conversation."""
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        return telemetry.start(
            scope=scope,
            headers=headers,
            message=message,
            method=method,
            protocol_version=None if version is None else version.decode("latin-1"),
            modern=era_of(version) is Era.PER_REQUEST,
            session_id=session_id,
            session_claims=claims,
            start_ns=start_ns,
            session_source=source,
            user_id=user,
        )

    async def take(
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
        body: bytes,
        start_ns: int,
        traced: bool,
    ) -> Exchange | Declined:
        # An escape could spell a name or a lone surrogate, a repeated name could mean another session
        # to the server, and anything but a plain object is not the usual request: the pipeline reads those.
        if body[:1] != b"{" or needs_check(body):
            return _UNREAD
        try:
            message = fast_loads(body)
        except ValueError:
            return _UNREAD
        if type(message) is not dict or message.get("jsonrpc") != "2.0" or "id" not in message:
            return Declined(message)
        method = message.get("method")
        if type(method) is not str or method in declined:
            return Declined(message)
        params = message.get("params")
        meta = params.get("_meta") if type(params) is dict else None
        named = meta.get(meta_key) if type(meta) is dict else None

        replayed = False

        async def replay() -> Message:  # _body.Replay: the body once, then the real receive
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        if named is None:  # no session named (null is none)
            conversation = find_conversation(headers, meta) if traced or keeps_data else None
            if conversation is not None and keeps_data:
                return Declined(message)  # a host's conversation with its data: the pipeline adopts it
            if requires is not None and requires(method, params):
                return Declined(message)  # refused for want of a session: the pipeline answers
            if not traced:
                return replay, send, None, None
            named_by = source = user = None  # without a session: named by its host's conversation, if any
            if conversation is not None:
                named_by, source, user = conversation.id, conversation.source, conversation.user
            sessionless = start_operation(scope, headers, message, method, start_ns, named_by, None, source, user)
            if type(meta) is dict and "traceparent" in meta and sessionless.traced:
                sessionless.inject(meta)  # _request.continue_trace
                body = jsonrpc.dumps(message)
            plain_send: ASGISendCallable = send  # type: ignore[assignment]  # an annotation, not a call
            rewriter = ResponseRewriter(plain_send, {hashable_id(message["id"]): target(None, headers, sessionless)})

            def finish_sessionless(error: BaseException | None) -> None:  # _forward.run_app, for one operation
                _end(sessionless, error, rewriter.status)

            sessionless.attach()
            return replay, rewriter.send, None, finish_sessionless

        # The carrier's rules (SessionCarrier.read) for a plain object: anything else, the pipeline refuses.
        if type(named) is not dict:
            return Declined(message)
        token = named.get(id_member)
        state = None if state_member is None else named.get(state_member)
        if type(token) is not str or (state is not None and type(state) is not str):
            return Declined(message)
        header = headers.get(MCP_SESSION_ID_HEADER)
        if (
            header is not None
            and header != token.encode()
            and era_of(headers.get(MCP_PROTOCOL_VERSION_HEADER)).session_header
        ):
            return Declined(message)  # the header names another session: the pipeline refuses

        # SessionService.resolve, for a token already verified that binds no principal and carries no
        # state; the store's touch and its refusals as there. Anything else: resolve itself.
        now = now_of()
        claims = cached_claims(token)
        if (
            claims is None
            or claims.expires_at + leeway <= now
            or state is not None
            or not direct_touch
            or claims.extra.get(PRINCIPAL_CLAIM) is not None
        ):
            try:
                session = await resolve(scope, token, state)
            except SessionRefused as exc:
                raise Refused(refusal_of(profile, token, exc)) from None
            except Refusal as refusal:  # the store is unavailable
                raise Refused(refusal) from None
        else:
            try:
                status = await touch(
                    claims.session_id,
                    expires_at=claims.expires_at,
                    now=now,
                    idle_ttl=idle_ttl,
                    issued_at=claims.issued_at,
                )
            except SessionStoreUnavailable as exc:
                raise Refused(store_unavailable(exc)) from None
            if status is not _ACTIVE:
                raise Refused(refusal_of(profile, token, refused(status.value, claims.session_id)))
            session = new_session(token, claims, now)

        # _forward.attach: the session where the app reads it.
        scope[SCOPE_KEY] = session
        app_state = scope.get("state")
        if app_state is None:
            app_state = scope["state"] = {}
        app_state[STATE_ATTRIBUTE] = session
        key = hashable_id(message["id"])
        operation = None
        if traced:  # in a data-layer session
            operation = start_operation(
                scope, headers, message, method, start_ns, session.id, session.claims, session.source, None
            )
            if "traceparent" in meta and operation.traced:  # type: ignore[operator]  # meta: a dict here
                # _request.continue_trace: the app's _meta names this span, so the server's nests under it.
                operation.inject(meta)  # type: ignore[arg-type]
                body = jsonrpc.dumps(message)

        # The reply (ResponseRewriter, for the usual response): a JSON body that comes whole, not
        # encoded, gets the echo spliced into its bytes and a new Content-Length; anything else (a
        # stream, a body in parts, an encoding) goes to the general rewriter from the response's start.
        start: Message | None = None
        kept: list[tuple[bytes, bytes]] = []  # the start's headers but Content-Length
        general: ResponseRewriter | None = None
        stream: _SseBody | None = None  # the general rewriter's, for an event stream
        done = False
        response_status = 0

        async def reply(event: Message) -> None:
            nonlocal start, general, stream, done, response_status
            if stream is not None and event["type"] == "http.response.body":
                # ResponseRewriter.send's stream branch: the usual event costs one call.
                body = event.get("body", b"")
                chunk = stream.feed(body)
                if chunk is body and event.get("more_body", False):
                    return await send(event)
                return await send(stream.rewrite(event, chunk))  # type: ignore[arg-type]
            if general is not None:
                return await general.send(event)
            if done:
                return await send(event)  # after the last body: untouched
            if start is None:
                if event["type"] == "http.response.start":
                    response_status = event["status"]
                    plain_json = False
                    for name, value in event.get("headers", ()):  # _response._content_type, in one pass
                        lowered = name.lower()
                        if lowered == b"content-length":
                            continue
                        if lowered == b"content-type":
                            plain_json = bytes(value).lower().startswith(_JSON)
                        elif lowered == b"content-encoding":
                            plain_json = False
                            break
                        kept.append((name, value))
                    if plain_json:
                        start = event  # held until the body, whose length changes
                        return None
            elif event["type"] == "http.response.body" and not event.get("more_body", False):
                done = True
                raw = event.get("body", b"")
                answer = echoed(raw)
                kept.append((b"content-length", str(len(answer)).encode()))
                await send({**start, "headers": kept})
                return await send({"type": "http.response.body", "body": answer, "more_body": False})
            typed_send: ASGISendCallable = send  # type: ignore[assignment]  # an annotation, not a call
            general = ResponseRewriter(typed_send, {key: target(session, headers, operation)})
            if start is not None:
                await general.send(start)  # the app's own start, held
            await general.send(event)
            stream = general.stream
            return None

        def echoed(raw: bytes) -> bytes:
            """The body with the echo (``raw`` itself when nothing changes), as _response._JsonBody has it."""
            try:
                parsed = jsonrpc.loads(raw)
                if type(parsed) is dict and (spliced := _answer_spliced(raw, parsed, key, session, echo)) is not None:
                    if operation is not None:  # _echo.annotate: what the result tells
                        operation.observe_result(parsed["result"])
                    return spliced
                rewritten = _Messages({key: target(session, headers, operation)}).rewrite(raw, parsed)
            except Exception:  # never let a rewriting bug break a response
                logger.exception("could not add session metadata to a response")
                return raw
            return raw if rewritten is None else rewritten

        context = _current.set(session)
        if operation is None:
            return replay, reply, context, None
        traced_operation = operation  # _forward.run_app, for one operation

        def finish(error: BaseException | None) -> None:
            _end(traced_operation, error, response_status)

        traced_operation.attach()
        return replay, reply, context, finish

    return take


def _end(operation: Operation, error: BaseException | None, status: int) -> None:
    """How ``_forward.run_app`` ends one operation once the app is done: the exception the app raised
    (``error``), the context, an HTTP error status, then the span and its duration."""
    if error is not None:
        operation.exception(error)
    operation.detach()
    if status >= 400:
        operation.http_error(status)
    operation.end()


def express_for(
    profiles: Sequence[WireProfile], *, simple: bool, handles: object, transports: object
) -> WireProfile | None:
    """The wire the lane serves, when the configuration lets the pipeline do nothing more than it does."""
    if len(profiles) != 1 or not simple or handles is not None or transports is not None:
        return None
    profile = profiles[0]
    carrier = profile.carrier
    if (
        not isinstance(carrier, SessionCarrier)
        or not isinstance(profile.echo, Echo)
        or profile.unknown_is_no_session
        or profile.header_every_era
        or profile.declared is not None
    ):
        return None
    return profile
