"""MCPSessionMiddleware: the pipeline, and nothing else.

guard → bounded read → plan (parse once, classify, wire per message) →
resolve (session sources) → answer locally, or forward with replay →
response rewriting. Each step lives in its own module; see
``docs/architecture.md``.

References: the data-layer sessions draft (transports-wg PR #20, 2026-03-13
revision) as condensed in the project's wire page, MCP 2026-07-28 Streamable
HTTP, and ASGI 3 (HTTP connection scope).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final, Unpack

from starlette.types import ASGIApp, Receive, Scope, Send

from ._config import SessionsConfig, SessionsOptions
from ._lifespan import watch_lifespan
from ._policy import never as _never
from .asgi import TOO_LARGE, Replay, read_body, send_accepted, send_json
from .handles import handle_context
from .otel import Telemetry
from .pipeline import (
    Refusals,
    Target,
    TransportSessions,
    advertising_tables,
    answer_refused_handles,
    body_of,
    check_handles,
    check_local_call,
    continue_trace,
    echoed,
    headers_of,
    reject,
    route_path,
    run_app,
    start_operations,
    strip_session_members,
    targets_of,
)
from .plan import Call, Plan, Planner
from .profiles import LocalCall
from .session import Session, SessionRefused, SessionService
from .sources import DataLayerSource, SessionSource
from .sources.host import HostConversationSource
from .sources.transport import TransportSource, is_transport_session_id
from .tokens import IdDigests
from .wire import Refusal, jsonrpc
from .wire.jsonrpc import hashable_id
from .wire.protocol import MCP_SESSION_ID_HEADER, Era

if TYPE_CHECKING:
    from asgiref.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope

__all__ = ["MCPSessionMiddleware"]


_JSON_CONTENT_TYPE: Final = b"application/json"


class MCPSessionMiddleware:
    """Data-layer sessions for any Streamable HTTP MCP server.

    Answers the session methods of the enabled wires itself (for the draft,
    ``sessions/create`` and ``sessions/delete``), verifies the session each
    request names, exposes it to the application
    (:func:`mcp_sessions.get_session`), and echoes it in results. Requests
    without a session pass through unchanged unless the policy requires one.

    Pass a :class:`SessionsConfig` as ``config=``, or its options as keywords.
    """

    def __init__(
        self, app: ASGIApp, *, config: SessionsConfig | None = None, **options: Unpack[SessionsOptions]
    ) -> None:
        if config is None:
            config = SessionsConfig(**options)
        elif options:
            raise TypeError(f"pass {', '.join(sorted(options))} in the SessionsConfig, not beside it")
        self.app = app
        self.config = config
        self.keys = config.keys
        self.store = config.store
        self._sessions = SessionService(
            limit=config.create_limit,
            keys=config.keys,
            store=config.store,
            ttl=config.ttl,
            idle_ttl=config.idle_ttl,
            principal=config.principal,
        )
        digests = IdDigests(config.keys)
        self._transport = TransportSource(self._sessions, digests) if config.adopt_transport_sessions else None
        hosts = HostConversationSource(
            config.host_keys, sessions=self._sessions, digests=digests, data=config.conversation_data
        )
        # A data-layer session always wins; then the host's conversation; then the transport session.
        self._sources: tuple[SessionSource, ...] = (
            DataLayerSource(self._sessions),
            hosts,
            *(() if self._transport is None else (self._transport,)),
        )
        self._data_layer = self._sources[0]
        self._only_source = self._sources[0] if len(self._sources) == 1 else None
        self._planner = Planner(config.profiles)
        self._transports = TransportSessions() if any(p.header_every_era for p in config.profiles) else None
        self._advertising_by_value = advertising_tables(config.profiles)
        self._requires = None if config.requires is _never else config.requires
        self._capability = {p.name: p.capability.value(required=config.require_all) for p in config.profiles}
        self._retry_after = str(config.retry_after).encode()
        self._refusals = Refusals(self._retry_after)
        self._guard = config.guard
        self._telemetry = Telemetry(
            tracer_provider=config.tracer_provider,
            meter_provider=config.meter_provider,
            trace_mode=config.trace_mode,
            known_methods={method for profile in config.profiles for method in profile.methods},
            transport_digest=digests.transport,
        )

    @classmethod
    def from_env(cls, app: ASGIApp, /, *, environ: Any = None, **options: Any) -> MCPSessionMiddleware:
        """The middleware configured by :meth:`SessionsConfig.from_env` (``MCP_SESSIONS_*`` variables)."""
        return cls(app, config=SessionsConfig.from_env(environ=environ, **options))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                send = watch_lifespan(send, self.store, owns_store=self.config.owns_store)
            return await self.app(scope, receive, send)
        # The same objects, typed as asgiref's ASGI events (annotations, not cast(): no call per request).
        http_scope: HTTPScope = scope  # type: ignore[assignment]
        reply: ASGISendCallable = send  # type: ignore[assignment]  # our own answers, checked as typed events
        typed_receive: ASGIReceiveCallable = receive  # type: ignore[assignment]
        raw_headers = http_scope["headers"]
        # As headers_of() reads them, inline for the usual list without a repeated name.
        if not isinstance(raw_headers, list) or len(headers := dict(reversed(raw_headers))) != len(raw_headers):
            headers = headers_of(http_scope)  # another iterable, or a repeated header
        # JSON-RPC posts to the MCP path are ours; everything else passes (_pass_through).
        content_type = headers.get(b"content-type")
        paths = self.config.paths
        if (
            http_scope["method"] != "POST"
            or content_type is None
            or not content_type.lower().startswith(_JSON_CONTENT_TYPE)
            or (paths is not None and http_scope["path"] not in paths and route_path(http_scope) not in paths)
        ):
            return await self._pass_through(scope, receive, send, headers)
        start_ns = time.time_ns()
        body = await read_body(
            typed_receive,
            declared_length=headers.get(b"content-length"),
            limit=self.config.max_body_size,
        )
        if body is None:
            return None  # http.disconnect: the client is gone, nothing to forward
        if body is TOO_LARGE:
            return await self._refusals.too_large(reply, self.config.max_body_size)
        assert isinstance(body, bytes)
        replay = Replay(body, receive)
        plan = self._planner.plan(body, headers, start_ns)
        if plan is None:
            return await self._pass_through(scope, replay, send, headers)
        if plan.batch and any(call.local is not None for call in plan.calls):
            if (rejection := self._guard.check(http_scope["headers"], body_of(plan))) is not None:
                return await rejection.send(send)
            return await self._refusals.refuse_local_methods_in_batch(plan, reply)
        local = None if plan.batch else plan.calls[0]
        if local is not None and local.local is None:
            local = None
        if local is not None and not local.is_request:
            if (rejection := self._guard.check(http_scope["headers"], body_of(plan))) is not None:
                return await rejection.send(send)
            return await send_accepted(reply)  # a session method as a notification: no answer, no effect
        await self._resolve(scope, plan)
        return await self._conclude(scope, replay, send, plan, local)

    async def _conclude(self, scope: Scope, replay: Replay, send: Send, plan: Plan, local: Call | None) -> None:
        """From the sessions resolved on: handles, spans, then refuse, answer locally or forward."""
        reply: ASGISendCallable = send  # type: ignore[assignment]
        if self.config.handles is not None:
            await check_handles(self.config.handles, self._sessions, scope, plan)
        start_operations(self._telemetry, scope, plan)
        if (plan.refused or local is not None or plan.answered) and (
            rejection := self._guard.check(scope["headers"], body_of(plan))
        ) is not None:
            return await reject(plan, rejection, send)  # what the wrapped server would answer, not ours
        if plan.refused:
            return await self._refusals.refuse(plan, reply)
        if local is not None:
            return await self._answer_locally(scope, plan, local, reply)
        if plan.answered:
            targets = targets_of(plan, self._advertising_by_value, self._capability)
            return await answer_refused_handles(plan, targets, reply)
        return await self._forward(scope, replay, send, plan)

    # -- the steps ------------------------------------------------------------------

    async def _resolve(self, scope: Scope, plan: Plan) -> None:
        """Find each call's session, or its refusal, through the session sources in order."""
        for call in plan.calls:
            if call.method is None:
                continue
            try:
                local = call.local
                if local is not None:
                    check_local_call(call, plan)
                    if not local.needs_session:
                        continue
                # A session method acts on a data-layer session only, never a host's or a transport's.
                only = self._data_layer if local is not None else self._only_source
                call.session = await (
                    only.session_for(scope, call, plan) if only is not None else self._session_for(scope, call, plan)
                )
                requires = self._requires
                if call.session is None and (
                    local is not None
                    or (requires is not None and call.is_request and requires(call.method, call.params))
                ):
                    profile = call.profile
                    message = profile.required_message
                    if call.conversation is not None and call.conversation.no_data is not None:
                        message = f"{message}: {call.conversation.no_data}"
                    raise Refusal(profile.required, message, profile.required_data, reason="required")
            except Refusal as refusal:
                call.refusal = refusal
                plan.refused = True

    async def _session_for(self, scope: Scope, call: Call, plan: Plan) -> Session | None:
        for source in self._sources:
            session = await source.session_for(scope, call, plan)
            if session is not None:
                return session
        return None

    async def _answer_locally(self, scope: Scope, plan: Plan, call: Call, send: ASGISendCallable) -> None:
        assert call.local is not None
        local = LocalCall(
            scope=scope,
            message=call.message,
            profile=call.profile,
            era=plan.era,
            sessions=self._sessions,
            session=call.session,
            operation=call.operation,
        )
        try:
            result = await call.local.answer(local)
        except Refusal as refusal:
            call.refusal = refusal
            plan.refused = True
            return await self._refusals.refuse(plan, send)
        if plan.era is Era.PER_REQUEST:
            result["resultType"] = "complete"
        frame = jsonrpc.result(call.request_id, result)
        if local.envelope:
            frame.update(local.envelope)
        if (
            self._transports is not None
            and local.minted is not None
            and plan.era is Era.HANDSHAKE
            and call.profile.header_every_era
            and plan.header_session_id is not None
            and plan.header_session_id.count(b".") != 2  # a transport session id, not a session token
        ):
            # Created inside the server's transport session: requests in the session go on in it.
            self._transports.adopt(local.minted.claims.session_id, plan.header_session_id)
        await send_json(send, 200, frame, self._retry_after)
        if call.operation is not None:
            call.operation.end()

    async def _forward(self, scope: Scope, replay: Replay, send: Send, plan: Plan) -> None:
        """Call the app with the session attached, the trace continued and the responses rewritten."""
        if self._planner.strips:
            strip_session_members(plan, replay)
        if self._transport is not None and plan.era is Era.HANDSHAKE and plan.calls[0].method == "initialize":
            send = self._transport.watch_initialize(send)
        if not plan.batch and self._transports is None:  # one message, the usual case: no loops
            call = plan.calls[0]
            session, operation, revoked = call.session, call.operation, call.revoked is not None
            advertised = self._advertising_by_value[plan.era.value].get(call.method or "", ())
            if session is None and operation is None and not advertised and not revoked and plan.handles is None:
                return await self.app(scope, replay, send)  # nothing to add, observe or attach
            targets = {}
            if call.is_request and (session is not None or advertised or operation is not None or revoked):
                targets[hashable_id(call.request_id)] = Target(
                    call.profile,
                    echoed(session),
                    advertised=advertised,
                    capability=self._capability,
                    era=plan.era,
                    operation=operation,
                    revoked=revoked,
                )
            operations = [] if operation is None else [operation]
        else:
            targets = targets_of(plan, self._advertising_by_value, self._capability)
            operations = [call.operation for call in plan.calls if call.operation is not None]
            sessions = {call.session.id: call.session for call in plan.calls if call.session is not None}
            if not targets and not sessions and not operations and plan.handles is None:
                return await self.app(scope, replay, send)
            session = next(iter(sessions.values())) if len(sessions) == 1 else None
            if self._transports is not None and plan.era is Era.HANDSHAKE and not plan.batch:
                call = plan.calls[0]
                if call.session is not None and call.profile.header_every_era:
                    opening = call.method in call.profile.carrier.opening_methods
                    scope, send = self._transports.bind(scope, send, call.session, opening=opening)
        ambient = operations[0] if len(operations) == 1 else None
        if ambient is not None and not plan.batch and ambient.traced:
            continue_trace(plan.calls[0].message, replay, ambient)
        if plan.handles is None:
            return await run_app(self.app, None, scope, replay, send, session, targets, operations)
        with handle_context(plan.handles):  # typed handle parameters read the verified handles there
            await run_app(self.app, None, scope, replay, send, session, targets, operations)

    async def _pass_through(self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes]) -> None:
        """Forward a request that is not JSON-RPC untouched.

        Ordinary routes get the session named by a JWT-shaped ``Mcp-Session-Id``
        header (a 2025-era transport session id is a bare uuid and never is).
        An invalid one is simply not attached: the route decides what that means.
        """
        header_session_id = headers.get(MCP_SESSION_ID_HEADER)
        if (
            self._transport is not None
            and header_session_id is not None
            and scope["method"] == "DELETE"
            and is_transport_session_id(header_session_id)
        ):
            send = self._transport.watch_delete(header_session_id, send)
        if header_session_id is not None and header_session_id.count(b".") == 2:
            try:
                session = await self._sessions.resolve(scope, header_session_id.decode("latin-1"), None)
            except (SessionRefused, Refusal):
                pass
            else:
                return await run_app(self.app, self._telemetry, scope, receive, send, session, {}, [])
        await self.app(scope, receive, send)
