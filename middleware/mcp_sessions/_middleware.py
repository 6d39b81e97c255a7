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

import logging
import time
from typing import TYPE_CHECKING, Any, Final, Unpack, cast

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import _jsonrpc as jsonrpc
from ._answers import Refusal, batch_refused, send_accepted, send_json, send_refusal, send_result, send_status
from ._body import TOO_LARGE, Replay, read_body
from ._config import SessionsConfig, SessionsOptions
from ._echo import Target, annotate, hashable_id
from ._handle_check import check_handles
from ._local import LocalCall
from ._plan import Call, Plan, Planner
from ._protocol import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    MCP_METHOD_HEADER,
    MCP_SESSION_ID_HEADER,
    SESSION_STORE_UNAVAILABLE,
    Era,
)
from ._response import ResponseRewriter
from ._service import SessionRefused, SessionService
from ._session import SCOPE_KEY, STATE_ATTRIBUTE, Session, _current
from ._telemetry import Operation, Telemetry
from .handles import handle_context, record_handles
from .sources import DataLayerSource, SessionSource

if TYPE_CHECKING:
    from asgiref.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope

__all__ = ["MCPSessionMiddleware"]

logger = logging.getLogger("mcp_sessions")

_JSON_CONTENT_TYPE: Final = b"application/json"
_CONFLICTING_HEADER: Final = b"\x00conflicting"


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
            keys=config.keys, store=config.store, ttl=config.ttl, idle_ttl=config.idle_ttl, principal=config.principal
        )
        self._sources: tuple[SessionSource, ...] = (DataLayerSource(self._sessions),)
        self._planner = Planner(config.profiles)
        self._profiles = config.profiles
        self._capability: dict[str, Any] = {"required": True} if config.require_all else {}
        self._retry_after = str(config.retry_after).encode()
        self._telemetry = Telemetry(
            tracer_provider=config.tracer_provider, meter_provider=config.meter_provider, trace_mode=config.trace_mode
        )

    @classmethod
    def from_env(cls, app: ASGIApp, /, *, environ: Any = None, **options: Any) -> MCPSessionMiddleware:
        """The middleware configured by :meth:`SessionsConfig.from_env` (``MCP_SESSIONS_*`` variables)."""
        return cls(app, config=SessionsConfig.from_env(environ=environ, **options))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self._not_http(scope, receive, send)
        http_scope = cast("HTTPScope", scope)
        reply = cast("ASGISendCallable", send)  # our own answers, checked as typed ASGI events
        headers = _headers(http_scope)
        if not self._is_for_us(http_scope, headers):
            return await self._pass_through(scope, receive, send, headers)
        start_ns = time.time_ns()
        body = await read_body(
            cast("ASGIReceiveCallable", receive),
            declared_length=headers.get(b"content-length"),
            limit=self.config.max_body_size,
        )
        if body is None:
            return None  # http.disconnect: the client is gone, nothing to forward
        if body is TOO_LARGE:
            return await self._too_large(reply)
        assert isinstance(body, bytes)
        replay = Replay(body, receive)
        plan = self._planner.plan(body, headers, start_ns)
        if plan is None:
            return await self._pass_through(scope, replay, send, headers)
        if plan.batch and any(call.local is not None for call in plan.calls):
            return await self._refuse_batch_with_local_method(plan, reply)
        local = plan.local
        if local is not None and not local.is_request:
            return await send_accepted(reply)  # a session method as a notification: no answer, no effect
        await self._resolve(scope, plan)
        if self.config.handles is not None:
            await check_handles(self.config.handles, self._sessions, scope, plan)
        self._start_operations(scope, plan)
        if any(call.refusal is not None for call in plan.calls):
            return await self._refuse(plan, reply)
        if local is not None:
            return await self._answer_locally(scope, plan, local, reply)
        if any(call.answer is not None for call in plan.calls):
            return await self._answer_before_the_tool(plan, reply)
        return await self._forward(scope, replay, send, plan)

    # -- the steps ------------------------------------------------------------------

    def _is_for_us(self, scope: HTTPScope, headers: dict[bytes, bytes]) -> bool:
        content_type = headers.get(b"content-type")
        paths = self.config.paths
        return (
            scope["method"] == "POST"
            and content_type is not None
            and content_type.lower().startswith(_JSON_CONTENT_TYPE)
            and (paths is None or _route_path(scope) in paths or scope["path"] in paths)
        )

    async def _resolve(self, scope: Scope, plan: Plan) -> None:
        """Find each call's session, or its refusal, through the session sources in order."""
        for call in plan.calls:
            if call.method is None:
                continue
            try:
                local = call.local
                if local is not None:
                    _check_local_call(call, plan)
                    if not local.needs_session:
                        continue
                call.session = await self._session_for(scope, call, plan)
                if call.session is None and (
                    local is not None or (call.is_request and self.config.requires(call.method, call.params))
                ):
                    profile = call.profile
                    raise Refusal(profile.required, profile.required_message, profile.required_data, reason="required")
            except Refusal as refusal:
                call.refusal = refusal

    async def _session_for(self, scope: Scope, call: Call, plan: Plan) -> Session | None:
        for source in self._sources:
            session = await source.session_for(scope, call, plan)
            if session is not None:
                return session
        return None

    def _start_operations(self, scope: Scope, plan: Plan) -> None:
        if not self._telemetry.enabled():
            return
        for call in plan.calls:
            if call.method is not None:
                call.operation = self._start_operation(scope, plan, call)

    def _start_operation(self, scope: Scope, plan: Plan, call: Call) -> Operation:
        session = call.session
        operation = self._telemetry.start(
            scope=scope,
            headers=plan.headers,
            message=call.message,
            method=call.method or "",
            protocol_version=plan.protocol_version,
            modern=plan.era is Era.PER_REQUEST,
            session_id=None if session is None else session.id,
            session_claims=None if session is None else session.claims,
            start_ns=plan.start_ns,
        )
        if call.refusal is not None and call.refusal.session_id is not None:
            operation.set_session(call.refusal.session_id)
        if call.handles is not None:
            record_handles(operation.span, *call.handles)
        return operation

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
            return await self._refuse(plan, send)
        if plan.era is Era.PER_REQUEST:
            result["resultType"] = "complete"
        await send_json(send, 200, jsonrpc.result(call.request_id, result), self._retry_after)
        if call.operation is not None:
            call.operation.end()

    async def _answer_before_the_tool(self, plan: Plan, send: ASGISendCallable) -> None:
        """Answer calls a handle refused with their ``isError`` result; the tool never runs.

        In a batch, the other elements are refused as a whole (-32600), as for an invalid session.
        """
        targets = self._targets(plan)
        frames: list[dict[str, Any]] = []
        for call in plan.calls:
            if call.answer is None:
                refusal = batch_refused("batch refused: another element's handle is invalid")
                _end(call.operation, refusal)
                if call.is_request or call.method is None:
                    frames.append(refusal.frame(call.request_id))
                continue
            if plan.era is Era.PER_REQUEST:
                call.answer["resultType"] = "complete"
            frame = jsonrpc.result(call.request_id, call.answer)
            if (target := targets.get(hashable_id(call.request_id))) is not None:
                annotate(target, frame)  # the session echo, and the operation learns of the tool error
            if call.operation is not None:
                call.operation.end()
            frames.append(frame)
        await send_result(send, frames if plan.batch else frames[0], accept=plan.headers.get(b"accept", b""))

    async def _forward(self, scope: Scope, replay: Replay, send: Send, plan: Plan) -> None:
        """Call the app with the session attached, the trace continued and the responses rewritten."""
        targets = self._targets(plan)
        operations = [call.operation for call in plan.calls if call.operation is not None]
        sessions = {call.session.id: call.session for call in plan.calls if call.session is not None}
        if not targets and not sessions and not operations and plan.handles is None:
            return await self.app(scope, replay, send)
        session = next(iter(sessions.values())) if len(sessions) == 1 else None
        ambient = operations[0] if len(operations) == 1 else None
        if ambient is not None and not plan.batch and ambient.traced:
            _continue_trace(plan.calls[0].message, replay, ambient)
        if plan.handles is None:
            return await self._run_app(scope, replay, send, session, targets, operations)
        with handle_context(plan.handles):  # typed handle parameters read the verified handles there
            await self._run_app(scope, replay, send, session, targets, operations)

    def _targets(self, plan: Plan) -> dict[Any, Target]:
        targets: dict[Any, Target] = {}
        for call in plan.calls:
            if call.method is None or not call.is_request:
                continue
            advertised = tuple(p for p in self._profiles if p.advertises(call.method, plan.era))
            if call.session is not None or advertised or call.operation is not None:
                targets[hashable_id(call.message["id"])] = Target(
                    call.profile,
                    call.session,
                    advertised=advertised,
                    capability=self._capability,
                    era=plan.era,
                    operation=call.operation,
                )
        return targets

    async def _run_app(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        session: Session | None,
        targets: dict[Any, Target],
        operations: list[Operation],
    ) -> None:
        rewriter = ResponseRewriter(cast("ASGISendCallable", send), targets) if targets else None
        if session is not None:
            scope[SCOPE_KEY] = session
            scope.setdefault("state", {})[STATE_ATTRIBUTE] = session
        token = _current.set(session)
        ambient = operations[0] if len(operations) == 1 else None
        if ambient is not None:
            ambient.attach()
        try:
            await self.app(scope, receive, send if rewriter is None else rewriter.send)
        except BaseException as exc:
            for operation in operations:
                operation.exception(exc)
            raise
        finally:
            if ambient is not None:
                ambient.detach()
            _current.reset(token)
            if rewriter is not None and rewriter.status >= 400:
                for operation in operations:
                    operation.http_error(rewriter.status)
            for operation in operations:
                operation.end()

    async def _pass_through(self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes]) -> None:
        """Forward a request that is not JSON-RPC untouched.

        Ordinary routes get the session named by a JWT-shaped ``Mcp-Session-Id``
        header (a 2025-era transport session id is a bare uuid and never is).
        An invalid one is simply not attached: the route decides what that means.
        """
        header_session_id = headers.get(MCP_SESSION_ID_HEADER)
        if header_session_id is not None and header_session_id.count(b".") == 2:
            try:
                session = await self._sessions.resolve(scope, header_session_id.decode("latin-1"), None)
            except (SessionRefused, Refusal):
                pass
            else:
                return await self._run_app(scope, receive, send, session, {}, [])
        await self.app(scope, receive, send)

    # -- refusals -------------------------------------------------------------------

    async def _refuse(self, plan: Plan, send: ASGISendCallable) -> None:
        """Answer a request with a refused call: nothing of it reaches the app."""
        calls = [call for call in plan.calls if call.method is not None]
        refusals = [call.refusal for call in calls if call.refusal is not None]
        unavailable = any(r.code == SESSION_STORE_UNAVAILABLE for r in refusals)
        for call in calls:
            if call.refusal is not None:
                self._count_refusal(call, call.refusal)
        if not plan.batch:
            call = plan.calls[0]
            assert call.refusal is not None
            _end(call.operation, call.refusal)
            if not call.is_request:
                # Notifications get no JSON-RPC answer; they simply never reach the app.
                return await send_status(send, 503 if unavailable else 202, self._retry_after)
            return await send_refusal(send, call.request_id, call.refusal, era=plan.era, retry_after=self._retry_after)
        errors = []
        for call in plan.calls:
            refusal = call.refusal or batch_refused()
            if unavailable:
                refusal = Refusal(SESSION_STORE_UNAVAILABLE, "Session store unavailable", reason="store_unavailable")
            _end(call.operation, refusal)
            if call.is_request or call.method is None:
                errors.append(refusal.frame(call.request_id))
        return await self._send_batch(send, errors, 503 if unavailable else _batch_refused_status(plan.era))

    async def _refuse_batch_with_local_method(self, plan: Plan, send: ASGISendCallable) -> None:
        errors = [
            jsonrpc.invalid_request(call.request_id, "session methods are not allowed in a batch")
            for call in plan.calls
            if call.is_request or not isinstance(call.message, dict)
        ]
        await self._send_batch(send, errors, _batch_refused_status(plan.era))

    def _count_refusal(self, call: Call, refusal: Refusal) -> None:
        if call.operation is not None:
            call.operation.telemetry.sessions_rejected.add(
                1, {"mcp_sessions.reason": refusal.reason, "mcp.method.name": call.method}
            )

    async def _send_batch(self, send: ASGISendCallable, errors: list[dict[str, Any]], status: int) -> None:
        if not errors:
            return await send_accepted(send)
        await send_json(send, status, errors, self._retry_after)

    async def _too_large(self, send: ASGISendCallable) -> None:
        limit = self.config.max_body_size
        reject = jsonrpc.invalid_request(None, f"Request body too large (limit {limit} bytes)")
        await send_json(send, 413, reject, self._retry_after)

    async def _not_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Lifespan and websockets go straight to the app; a store built here is closed at shutdown."""
        if scope["type"] == "lifespan" and self.config.owns_store:
            send = self._close_store_after_shutdown(send)
        await self.app(scope, receive, send)

    def _close_store_after_shutdown(self, send: Send) -> Send:
        async def lifespan_send(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                try:
                    await self.store.aclose()
                except Exception:
                    logger.exception("could not close the session store")
            await send(message)

        return lifespan_send


def _headers(scope: HTTPScope) -> dict[bytes, bytes]:
    """The request headers; the first of a repeated header wins, as in Starlette."""
    raw_headers = scope["headers"]
    if not isinstance(raw_headers, list | tuple):  # ASGI allows any iterable
        raw_headers = list(raw_headers)
    headers = dict(reversed(raw_headers))
    if len(headers) != len(raw_headers) and len({v for n, v in raw_headers if n == MCP_SESSION_ID_HEADER}) > 1:
        # Two different Mcp-Session-Id headers: a proxy may route on one and we
        # would check the other, so the pair matches no session.
        headers[MCP_SESSION_ID_HEADER] = _CONFLICTING_HEADER
    return headers


def _route_path(scope: HTTPScope) -> str:
    """The path as Starlette routes it: without the ``root_path`` a proxy prefix or a ``Mount`` adds."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _check_local_call(call: Call, plan: Plan) -> None:
    header_method = plan.headers.get(MCP_METHOD_HEADER)
    assert call.method is not None
    if plan.era is Era.PER_REQUEST and header_method is not None and header_method != call.method.encode():
        raise Refusal(HEADER_MISMATCH, "Mcp-Method header does not match the request method")
    params = call.params
    if params is not None and not isinstance(params, dict):
        raise Refusal(INVALID_PARAMS, "params must be an object")


def _batch_refused_status(era: Era) -> int:
    """A batch answered here is one error response: 400 on the 2026-07-28 path, as -32600 is."""
    return 400 if era is Era.PER_REQUEST else 200


def _continue_trace(message: dict[str, Any], replay: Replay, operation: Operation) -> None:
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


def _end(operation: Operation | None, refusal: Refusal) -> None:
    if operation is not None:
        operation.fail(refusal.code, refusal.message)
        operation.end()
