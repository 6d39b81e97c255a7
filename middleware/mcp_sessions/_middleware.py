"""ASGI glue: guard, bounded body read and replay, dispatch, response rewriting.

References: the data-layer sessions draft (transports-wg PR #20, 2026-03-13
revision) as condensed in the project's wire page, MCP 2026-07-28 Streamable
HTTP, and ASGI 3 (HTTP connection scope).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import inspect
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import _jsonrpc as jsonrpc
from ._guard import Guard, Rejection
from ._protocol import (
    HANDSHAKE_VERSIONS,
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MCP_METHOD_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    MCP_SESSION_ID_HEADER,
    METHOD_CREATE,
    SESSION_META_KEY,
    SESSION_METHODS,
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    SESSION_STORE_UNAVAILABLE,
    SESSIONLESS_METHODS,
    SESSIONS_EXTENSION_ID,
    capability,
    http_status,
)
from ._session import SCOPE_KEY, STATE_ATTRIBUTE, Session, _current
from ._sse import SSERewriter
from ._telemetry import TRACEPARENT_CLAIM, Operation, Telemetry, TraceMode
from ._tokens import DEFAULT_MAX_STATE_SIZE, InvalidToken, KeySet, SessionKey
from .stores import MemoryStore, SessionStatus, SessionStore, SessionStoreUnavailable

__all__ = ["MCPSessionMiddleware"]

logger = logging.getLogger("mcp_sessions")

DEFAULT_TTL: Final = 24 * 3600
MAX_TTL: Final = 10 * 365 * 24 * 3600
DEFAULT_MAX_BODY_SIZE: Final = 4 * 1024 * 1024
MAX_LABEL_LENGTH: Final = 256

RequirePolicy = bool | Collection[str] | Callable[[str, Any], bool]
PrincipalHook = Callable[[Scope], "str | Awaitable[str | None] | None"]
PRINCIPAL_CLAIM: Final = "pbh"


def authenticated_user(scope: Scope) -> str | None:
    """The default principal hook: the authenticated user Starlette's ``AuthenticationMiddleware`` set.

    Works when that middleware runs before this one. For the ``mcp`` SDK's
    bearer auth the principal is the token's subject, else its client id.
    """
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    access_token = getattr(user, "access_token", None)
    subject = getattr(access_token, "subject", None) or getattr(access_token, "client_id", None)
    if isinstance(subject, str) and subject:
        return subject
    name = getattr(user, "display_name", None)
    return name if isinstance(name, str) and name else None


_JSON_CONTENT_TYPE: Final = b"application/json"
_SSE_CONTENT_TYPE: Final = b"text/event-stream"
_JSON_HEADERS: Final = [(b"content-type", b"application/json")]
_CONFLICTING_HEADER: Final = b"\x00conflicting"


class _Reject(Exception):
    """A JSON-RPC error the middleware answers itself instead of forwarding."""

    def __init__(
        self,
        code: int,
        message: str,
        data: Any = None,
        *,
        reason: str = "invalid_request",
        session_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.reason = reason
        # The stable id, when the token verified but the session was refused (deleted,
        # idle, bad state, another principal): telemetry files the refusal under it.
        self.session_id = session_id


@functools.lru_cache(maxsize=64)
def _iso(timestamp: int) -> str:
    """RFC 3339 UTC; cached, as most echoes of a process repeat a few expiry times."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class MCPSessionMiddleware:
    """Data-layer sessions for any Streamable HTTP MCP server.

    Answers ``sessions/create`` and ``sessions/delete`` itself, verifies the
    session named in each request's ``params._meta``, exposes it to the
    application (:func:`mcp_sessions.get_session`), and echoes it in results.
    Requests without a session pass through unchanged unless the policy
    requires one.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        secret: str | bytes | None = None,
        keys: KeySet | None = None,
        ttl: float = DEFAULT_TTL,
        idle_ttl: float | None = None,
        issuer: str | None = None,
        audience: str | None = None,
        store: SessionStore | None = None,
        require_session: RequirePolicy = False,
        require_session_tools: Collection[str] = (),
        path: str | Collection[str] | None = None,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        max_state_size: int | None = None,
        retry_after: int = 1,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        trace_mode: TraceMode = "link",
        principal: PrincipalHook | None = authenticated_user,
        guard: Guard | None = None,
    ) -> None:
        if (secret is None) == (keys is None):
            raise ValueError(
                "MCPSessionMiddleware needs exactly one of secret= (HS256, at least 32 bytes) or keys= (a KeySet); "
                "MCPSessionMiddleware.from_env reads MCP_SESSIONS_SECRET"
            )
        if keys is None:
            assert secret is not None
            keys = KeySet(
                [SessionKey.from_secret(secret)],
                issuer=issuer or "mcp-sessions",
                audience=audience or "mcp-sessions",
                max_state_size=DEFAULT_MAX_STATE_SIZE if max_state_size is None else max_state_size,
            )
        elif issuer is not None or audience is not None or max_state_size is not None:
            raise ValueError("with keys=, set issuer, audience and max_state_size on the KeySet")
        if keys.signer is None:
            raise ValueError(
                "the KeySet is verify-only: the middleware mints sessions and signs state, "
                "so add a secret or a private key that can sign"
            )
        if not 0 < ttl <= MAX_TTL:
            raise ValueError(f"ttl must be a positive number of seconds, at most {MAX_TTL} (ten years)")
        if idle_ttl is not None and not 0 < idle_ttl <= MAX_TTL:
            raise ValueError(
                f"idle_ttl must be a positive number of seconds (at most {MAX_TTL}), or None to disable it"
            )
        if max_body_size < 1:
            raise ValueError("max_body_size must be positive")
        if type(retry_after) is not int or retry_after < 0:
            raise ValueError("retry_after must be a whole number of seconds, 0 or more")
        self.app = app
        self.keys = keys
        self.ttl = float(ttl)
        self.idle_ttl = None if idle_ttl is None else float(idle_ttl)
        self.store: SessionStore = MemoryStore() if store is None else store
        # A store passed in belongs to the caller, who closes it. One that from_env builds
        # from the environment (a RedisStore) is closed when the app's lifespan shuts down.
        self._owns_store = False
        self.max_body_size = max_body_size
        self._paths = frozenset([path] if isinstance(path, str) else path) if path is not None else None
        self._retry_after = str(retry_after).encode()
        self._require_all = require_session is True
        self._require_methods: frozenset[str] = frozenset()
        self._require_fn: Callable[[str, Any], bool] | None = None
        if callable(require_session):
            self._require_fn = require_session
        elif not isinstance(require_session, bool):
            if isinstance(require_session, str):
                raise TypeError("require_session takes a collection of method names, not one string")
            self._require_methods = frozenset(require_session)
        if isinstance(require_session_tools, str):
            raise TypeError("require_session_tools takes a collection of tool names, not one string")
        self._require_tools = frozenset(require_session_tools)
        self._capability = capability(required=self._require_all)
        self._principal = principal
        if guard is not None and not isinstance(guard, Guard):
            raise TypeError("guard takes a mcp_sessions.Guard, built with the options of the wrapped server")
        # The wrapped server's own checks, applied before any answer given here (the SDK's defaults unless told).
        self._guard = Guard() if guard is None else guard
        self._telemetry = Telemetry(
            tracer_provider=tracer_provider, meter_provider=meter_provider, trace_mode=trace_mode
        )

    @classmethod
    def from_env(
        cls,
        app: ASGIApp,
        /,
        *,
        environ: Mapping[str, str] | None = None,
        **options: Any,
    ) -> MCPSessionMiddleware:
        """Configure from ``MCP_SESSIONS_*`` variables; keyword options override them.

        ``MCP_SESSIONS_SECRET`` or ``MCP_SESSIONS_KEYS`` (a JWKS, ``kid:secret``
        pairs or ``@/path``; :meth:`KeySet.from_config`, with
        ``MCP_SESSIONS_SIGNER`` naming the signing kid) is required, not both.
        ``MCP_SESSIONS_DEV=1`` instead generates a random secret and warns:
        sessions then die with the process and no other replica accepts them.
        ``MCP_SESSIONS_REDIS_URL`` selects a :class:`~mcp_sessions.stores.RedisStore`
        (the ``redis`` extra), with ``MCP_SESSIONS_REDIS_PREFIX`` and
        ``MCP_SESSIONS_REDIS_TIMEOUT``.
        """
        env = os.environ if environ is None else environ

        def number(name: str) -> float | None:
            raw = env.get(name, "").strip()
            if not raw:
                return None
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {raw!r}")
            return value

        settings: dict[str, Any] = {}
        key_config = env.get("MCP_SESSIONS_KEYS", "").strip()
        signer = env.get("MCP_SESSIONS_SIGNER", "").strip() or None
        if "keys" not in options and "secret" not in options and (key_config or signer):
            if not key_config:
                raise ValueError("MCP_SESSIONS_SIGNER names a key of MCP_SESSIONS_KEYS, which is not set")
            if env.get("MCP_SESSIONS_SECRET", ""):
                raise ValueError(
                    "MCP_SESSIONS_SECRET and MCP_SESSIONS_KEYS are both set: set only one "
                    "(to rotate away from a secret, list it in MCP_SESSIONS_KEYS as ':<secret>')"
                )
            # A KeySet carries issuer, audience and the state limit: options and variables go there.
            key_options = {
                name: value for name in ("issuer", "audience", "max_state_size") if (value := options.pop(name, None))
            }
            for name, key in (("MCP_SESSIONS_ISSUER", "issuer"), ("MCP_SESSIONS_AUDIENCE", "audience")):
                if key not in key_options and (value := env.get(name, "").strip()):
                    key_options[key] = value
            settings["keys"] = KeySet.from_config(key_config, signer=signer, source="MCP_SESSIONS_KEYS", **key_options)
        elif "keys" not in options and "secret" not in options:
            secret = env.get("MCP_SESSIONS_SECRET", "")
            if not secret:
                if env.get("MCP_SESSIONS_DEV", "").strip().lower() not in ("1", "true", "yes"):
                    raise RuntimeError(
                        "MCP_SESSIONS_SECRET is not set: set it to a random string of at least 32 bytes "
                        "(python -c 'import secrets; print(secrets.token_urlsafe(32))'), shared by every replica; "
                        "or set MCP_SESSIONS_DEV=1 to use a throwaway key for local development"
                    )
                secret = secrets.token_urlsafe(32)
                logger.warning(
                    "MCP_SESSIONS_DEV is set: signing sessions with a random key; they end with this process"
                )
            settings["secret"] = secret
        if (ttl := number("MCP_SESSIONS_TTL")) is not None:
            settings["ttl"] = ttl
        if (idle_ttl := number("MCP_SESSIONS_IDLE_TTL")) is not None:
            settings["idle_ttl"] = idle_ttl
        if "keys" not in options and "keys" not in settings:  # a KeySet carries its own issuer and audience
            for name, key in (("MCP_SESSIONS_ISSUER", "issuer"), ("MCP_SESSIONS_AUDIENCE", "audience")):
                if value := env.get(name, "").strip():
                    settings[key] = value
        if "store" not in options and (redis_url := env.get("MCP_SESSIONS_REDIS_URL", "").strip()):
            try:
                from .stores.redis import RedisStore
            except ImportError:
                raise RuntimeError(
                    "MCP_SESSIONS_REDIS_URL is set but the redis package is not installed: "
                    "pip install 'mcp-sessions[redis]'"
                ) from None
            store_options: dict[str, Any] = {}
            if prefix := env.get("MCP_SESSIONS_REDIS_PREFIX", "").strip():
                store_options["prefix"] = prefix
            if (redis_timeout := number("MCP_SESSIONS_REDIS_TIMEOUT")) is not None:
                store_options["timeout"] = redis_timeout
            try:
                settings["store"] = RedisStore(redis_url, **store_options)
            except ValueError as exc:
                raise ValueError(f"MCP_SESSIONS_REDIS_URL, _PREFIX or _TIMEOUT: {exc}") from None
        settings.update(options)
        middleware = cls(app, **settings)
        middleware._owns_store = "store" in settings and "store" not in options
        return middleware

    # -- the request path ------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan" and self._owns_store:
                send = self._close_store_after_shutdown(send)
            await self.app(scope, receive, send)
            return
        raw_headers = scope["headers"]
        if not isinstance(raw_headers, list | tuple):  # ASGI allows any iterable
            raw_headers = list(raw_headers)
        headers = dict(reversed(raw_headers))  # the first value of a repeated header wins, as in Starlette
        if len(headers) != len(raw_headers) and len({v for n, v in raw_headers if n == MCP_SESSION_ID_HEADER}) > 1:
            # Two different Mcp-Session-Id headers: a proxy may route on one and we
            # would check the other, so the pair matches no session.
            headers[MCP_SESSION_ID_HEADER] = _CONFLICTING_HEADER
        header_session_id = headers.get(MCP_SESSION_ID_HEADER)
        content_type = headers.get(b"content-type")
        if (
            scope["method"] != "POST"
            or content_type is None
            or not content_type.lower().startswith(_JSON_CONTENT_TYPE)
            or (self._paths is not None and scope["path"] not in self._paths)
        ):
            await self._pass_through(scope, receive, send, header_session_id)
            return

        declared_length = headers.get(b"content-length", b"")
        if declared_length.isdigit() and int(declared_length) > self.max_body_size:
            return await self._too_large(send)
        start_ns = time.time_ns()
        message = await receive()
        if message["type"] != "http.request":
            return None  # http.disconnect: the client is gone, nothing to forward
        body = message.get("body", b"")
        if message.get("more_body", False):
            buffer = bytearray(body)
            while True:
                if len(buffer) > self.max_body_size:
                    return await self._too_large(send)
                message = await receive()
                if message["type"] != "http.request":
                    return None
                buffer += message.get("body", b"")
                if not message.get("more_body", False):
                    break
            body = bytes(buffer)
        if len(body) > self.max_body_size:
            return await self._too_large(send)
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        protocol_version = None if version is None else version.decode("latin-1")
        ctx = _RequestContext(
            modern=protocol_version is not None and protocol_version not in HANDSHAKE_VERSIONS,
            protocol_version=protocol_version,
            headers=headers,
            body=body,
            start_ns=start_ns,
        )

        async def replay() -> Any:
            if ctx.body is None:
                return await receive()
            replayed, ctx.body = ctx.body, None
            return {"type": "http.request", "body": replayed, "more_body": False}

        parsed = jsonrpc.loads(body)
        if isinstance(parsed, dict):
            return await self._handle_message(scope, replay, send, parsed, ctx)
        if type(parsed) is list and parsed:
            return await self._handle_batch(scope, replay, send, parsed, ctx)
        await self._pass_through(scope, replay, send, header_session_id)
        return None

    def _close_store_after_shutdown(self, send: Send) -> Send:
        """Pass lifespan messages on untouched, closing a store this middleware built on shutdown."""

        async def lifespan_send(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                try:
                    await self.store.aclose()
                except Exception:
                    logger.exception("could not close the session store")
            await send(message)

        return lifespan_send

    async def _handle_message(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        message: dict[str, Any],
        ctx: _RequestContext,
    ) -> None:
        method = message.get("method")
        if type(method) is not str or message.get("jsonrpc") != "2.0":
            await self._pass_through(scope, receive, send, ctx.header_session_id)
            return
        is_request = "id" in message
        request_id = message.get("id")
        telemetry = self._telemetry if self._telemetry.enabled() else None
        op = None
        try:
            if method in SESSION_METHODS:
                if (refusal := self._guard.check(scope["headers"], message)) is not None:
                    return await self._refuse(send, refusal, telemetry, scope, ctx, message, method)
                if not is_request:
                    return await _send_accepted(send)
                self._check_session_method(method, message, ctx)
                # sessions/delete resolves its session first, so that its span links to (or,
                # with trace_mode="session", joins) the session's creation span.
                target = None
                if method != METHOD_CREATE:
                    target = await self._session_for(scope, method, message, ctx, is_request=True)
                    if target is None:
                        raise _Reject(
                            SESSION_REQUIRED, "Session required", {"create": METHOD_CREATE}, reason="required"
                        )
                if telemetry is not None:
                    op = self._start_operation(telemetry, scope, ctx, message, method, target)
                payload = await self._answer_session_method(scope, message, ctx, op, target)
                await self._send_json(send, 200, jsonrpc.result(request_id, payload))
                if op is not None:
                    op.end()
                return None
            session = await self._session_for(scope, method, message, ctx, is_request=is_request)
        except _Reject as reject:
            if (refusal := self._guard.check(scope["headers"], message)) is not None:
                return await self._refuse(send, refusal, telemetry, scope, ctx, message, method)
            if telemetry is not None:
                if op is None:
                    op = self._start_operation(telemetry, scope, ctx, message, method, None)
                if reject.session_id is not None:
                    op.set_session(reject.session_id)
                op.fail(reject.code, reject.message)
                telemetry.sessions_rejected.add(1, {"mcp_sessions.reason": reject.reason, "mcp.method.name": method})
            if not is_request:
                # Notifications get no JSON-RPC answer; they simply never reach the app.
                status = 503 if reject.code == SESSION_STORE_UNAVAILABLE else 202
                await self._send_status(send, status)
            else:
                await self._send_error(send, request_id, reject, ctx.modern)
            if op is not None:
                op.end()
            return None
        advertise = method == "server/discover" or (method == "initialize" and not ctx.modern)
        if telemetry is not None:
            op = self._start_operation(telemetry, scope, ctx, message, method, session)
            if op.traced:
                self._continue_trace(message, ctx, op)
        if session is None and not advertise and op is None:
            await self.app(scope, receive, send)
            return None
        targets = {}
        if is_request and (session is not None or advertise or op is not None):
            targets[_hashable_id(request_id)] = _Target(session, advertise, ctx.modern, op)
        await self._forward(scope, receive, send, session, targets, [op] if op is not None else [])
        return None

    async def _handle_batch(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        batch: list[Any],
        ctx: _RequestContext,
    ) -> None:
        calls = [isinstance(el, dict) and el.get("jsonrpc") == "2.0" and type(el.get("method")) is str for el in batch]
        if not any(calls):
            await self._pass_through(scope, receive, send, ctx.header_session_id)
            return
        # A batch answered here is one error response: 400 on the 2026-07-28 path, as -32600 is.
        refused_status = 400 if ctx.modern else 200
        if any(call and el["method"] in SESSION_METHODS for call, el in zip(calls, batch, strict=True)):
            if (refusal := self._guard.check(scope["headers"], batch)) is not None:
                return await refusal.send(send)
            errors = [
                jsonrpc.invalid_request(jsonrpc.request_id_of(el), "session methods are not allowed in a batch")
                for el in batch
                if not isinstance(el, dict) or "id" in el
            ]
            return await self._send_batch(send, errors, status=refused_status)
        sessions: list[Session | None] = []
        failures: dict[int, _Reject] = {}
        for index, (call, element) in enumerate(zip(calls, batch, strict=True)):
            session = None
            if call:
                try:
                    session = await self._session_for(
                        scope, element["method"], element, ctx, is_request="id" in element
                    )
                except _Reject as reject:
                    failures[index] = reject
            sessions.append(session)
        telemetry = self._telemetry if self._telemetry.enabled() else None
        ops: list[Operation | None] = [
            self._start_operation(telemetry, scope, ctx, element, element["method"], session)
            if call and telemetry is not None
            else None
            for call, element, session in zip(calls, batch, sessions, strict=True)
        ]
        if failures:
            if (refusal := self._guard.check(scope["headers"], batch)) is not None:
                for op in ops:
                    if op is not None:
                        op.refused(refusal.status, refusal.code, refusal.message)
                        op.end()
                return await refusal.send(send)
            unavailable = any(r.code == SESSION_STORE_UNAVAILABLE for r in failures.values())
            errors = []
            for index, element in enumerate(batch):
                failure = failures.get(index)
                if unavailable:
                    failure = _Reject(
                        SESSION_STORE_UNAVAILABLE, "Session store unavailable", reason="store_unavailable"
                    )
                elif failure is None:
                    failure = _Reject(INVALID_REQUEST, "batch refused: another element's session is invalid")
                op = ops[index]
                if op is not None:
                    op.fail(failure.code, failure.message)
                    op.end()
                if isinstance(element, dict) and "id" not in element:
                    continue
                errors.append(
                    jsonrpc.error(jsonrpc.request_id_of(element), failure.code, failure.message, failure.data)
                )
            if telemetry is not None:
                for failure in failures.values():
                    telemetry.sessions_rejected.add(1, {"mcp_sessions.reason": failure.reason})
            return await self._send_batch(send, errors, status=503 if unavailable else refused_status)
        targets: dict[Any, _Target] = {}
        for element, session, op in zip(batch, sessions, ops, strict=True):
            if not isinstance(element, dict) or "id" not in element:
                continue
            advertise = element.get("method") in ("initialize", "server/discover")
            if session is not None or advertise or op is not None:
                targets[_hashable_id(element["id"])] = _Target(session, advertise, ctx.modern, op)
        live_ops = [op for op in ops if op is not None]
        if not targets and not any(sessions) and not live_ops:
            await self.app(scope, receive, send)
            return
        distinct = {s.id for s in sessions if s is not None}
        shared = next(s for s in sessions if s is not None) if len(distinct) == 1 else None
        await self._forward(scope, receive, send, shared, targets, live_ops)
        return None

    async def _refuse(
        self,
        send: Send,
        refusal: Rejection,
        telemetry: Telemetry | None,
        scope: Scope,
        ctx: _RequestContext,
        message: dict[str, Any],
        method: str,
    ) -> None:
        """Answer as the wrapped server would have, instead of answering here."""
        op = None if telemetry is None else self._start_operation(telemetry, scope, ctx, message, method, None)
        if op is not None:
            op.refused(refusal.status, refusal.code, refusal.message)
        await refusal.send(send)
        if op is not None:
            op.end()

    def _start_operation(
        self,
        telemetry: Telemetry,
        scope: Scope,
        ctx: _RequestContext,
        message: dict[str, Any],
        method: str,
        session: Session | None,
    ) -> Operation:
        return telemetry.start(
            scope=scope,
            headers=ctx.headers,
            message=message,
            method=method,
            protocol_version=ctx.protocol_version,
            modern=ctx.modern,
            session_id=None if session is None else session.id,
            session_claims=None if session is None else session.claims,
            start_ns=ctx.start_ns,
        )

    def _continue_trace(self, message: dict[str, Any], ctx: _RequestContext, op: Operation) -> None:
        """Forward a ``_meta`` trace context that names this span, so the server's span nests under it.

        The SDK parents its span to ``_meta.traceparent`` when present (SEP-414)
        and to the ambient context otherwise: only the first case needs the body
        rewritten.
        """
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if not isinstance(meta, dict) or "traceparent" not in meta or ctx.body is None:
            return
        op.inject(meta)
        ctx.body = jsonrpc.dumps(message)

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        session: Session | None,
        targets: dict[Any, _Target],
        ops: list[Operation],
    ) -> None:
        """Call the app with the session attached, the trace continued and the responses rewritten."""
        responder = _Responder(send, targets, self._capability) if targets else None
        if session is not None:
            scope[SCOPE_KEY] = session
            scope.setdefault("state", {})[STATE_ATTRIBUTE] = session
        token = _current.set(session)
        ambient = ops[0] if len(ops) == 1 else None
        if ambient is not None:
            ambient.attach()
        try:
            await self.app(scope, receive, send if responder is None else responder.send)
        except BaseException as exc:
            for op in ops:
                op.exception(exc)
            raise
        finally:
            if ambient is not None:
                ambient.detach()
            _current.reset(token)
            if responder is not None and responder.status >= 400:
                for op in ops:
                    op.http_error(responder.status)
            for op in ops:
                op.end()

    async def _pass_through(self, scope: Scope, receive: Receive, send: Send, header_session_id: bytes | None) -> None:
        """Forward a request that is not JSON-RPC untouched.

        Ordinary routes get the session named by a JWT-shaped ``Mcp-Session-Id``
        header (a 2025-era transport session id is a bare uuid and never is).
        An invalid one is simply not attached: the route decides what that means.
        """
        if header_session_id is not None and header_session_id.count(b".") == 2:
            try:
                session = await self._resolve(scope, {"sessionId": header_session_id.decode("latin-1")})
            except _Reject:
                pass
            else:
                await self._forward(scope, receive, send, session, {}, [])
                return
        await self.app(scope, receive, send)

    # -- sessions ---------------------------------------------------------------

    async def _session_for(
        self, scope: Scope, method: str, message: dict[str, Any], ctx: _RequestContext, *, is_request: bool
    ) -> Session | None:
        """The verified session a message names, ``None`` if it names none; :class:`_Reject` otherwise."""
        try:
            meta = jsonrpc.session_meta(message)
        except jsonrpc.InvalidSessionMeta as exc:
            raise _Reject(INVALID_REQUEST, str(exc), reason="invalid_metadata") from None
        if meta is None:
            if is_request and self._requires(method, message.get("params")):
                raise _Reject(SESSION_REQUIRED, "Session required", {"create": METHOD_CREATE}, reason="required")
            return None
        if (
            ctx.modern
            and ctx.header_session_id is not None
            and ctx.header_session_id != meta["sessionId"].encode("utf-8", "surrogatepass")
        ):
            raise _Reject(
                HEADER_MISMATCH, "Mcp-Session-Id header does not match the session in _meta", reason="header_mismatch"
            )
        return await self._resolve(scope, meta)

    async def _resolve(self, scope: Scope, meta: dict[str, Any]) -> Session:
        token: str = meta["sessionId"]
        now = time.time()
        sid = None
        try:
            claims = self.keys.verify_session_token(token, now=now)
            sid = claims.session_id
            bound = claims.extra.get(PRINCIPAL_CLAIM)
            if bound is not None and bound != await self._principal_hash(scope):
                raise InvalidToken("bound to another principal")
            state_token = meta.get("state")
            try:
                state_json = None if state_token is None else self.keys.verify_state(sid, state_token)
            except InvalidToken as exc:
                raise InvalidToken(f"state: {exc.reason}") from None
            status = await self.store.touch(sid, expires_at=claims.expires_at, now=now, idle_ttl=self.idle_ttl)
            if status is not SessionStatus.ACTIVE:
                raise InvalidToken(status.value)
        except InvalidToken as exc:
            logger.debug("session rejected: %s (sid=%s)", exc.reason, sid)
            raise _Reject(
                SESSION_NOT_FOUND,
                "Session not found",
                {"sessionId": jsonrpc.echoed_session_id(token)},
                reason=_rejection_reason(exc.reason),
                session_id=sid,
            ) from None
        except SessionStoreUnavailable as exc:
            raise _store_unavailable(exc) from None
        return Session(
            token=token,
            session_id=sid,
            issued_at=claims.issued_at,
            expires_at=claims.expires_at,
            claims=claims.extra,
            keys=self.keys,
            store=self.store,
            state_token=state_token,
            state_json=state_json,
            now=now,
            idle_ttl=self.idle_ttl,
        )

    async def _principal_hash(self, scope: Scope) -> str | None:
        """A pseudonymous digest of the authenticated principal, or None when there is none.

        Bound into the token at creation; a later request by another principal
        (or by none) is refused with -32043. A failing hook is a server bug:
        the request gets -32603 and nothing is forwarded.
        """
        if self._principal is None:
            return None
        try:
            principal = self._principal(scope)
            if inspect.isawaitable(principal):
                principal = await principal
        except Exception:
            logger.exception("the principal hook failed")
            raise _Reject(INTERNAL_ERROR, "Internal error", reason="principal_hook_failed") from None
        if principal is None:
            return None
        digest = hashlib.sha256(
            b"mcp-sessions principal\x00%s\x00%s"
            % (self.keys.audience.encode(), str(principal).encode("utf-8", "surrogatepass"))
        )
        return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()

    def _requires(self, method: str, params: Any) -> bool:
        if method in SESSIONLESS_METHODS or method.startswith("notifications/"):
            return False
        if self._require_all or method in self._require_methods:
            return True
        if (
            self._require_tools
            and method == "tools/call"
            and isinstance(params, dict)
            and params.get("name") in self._require_tools
        ):
            return True
        return self._require_fn is not None and bool(self._require_fn(method, params))

    def _check_session_method(self, method: str, message: dict[str, Any], ctx: _RequestContext) -> None:
        header_method = ctx.headers.get(MCP_METHOD_HEADER)
        if ctx.modern and header_method is not None and header_method != method.encode():
            raise _Reject(HEADER_MISMATCH, "Mcp-Method header does not match the request method")
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            raise _Reject(INVALID_PARAMS, "params must be an object")

    async def _answer_session_method(
        self,
        scope: Scope,
        message: dict[str, Any],
        ctx: _RequestContext,
        op: Operation | None,
        session: Session | None,
    ) -> dict[str, Any]:
        """The result of ``sessions/create`` (``session`` is None) or ``sessions/delete`` (of ``session``)."""
        params = message.get("params")
        if session is None:
            meta = params.get("_meta") if params else None
            if isinstance(meta, dict) and meta.get(SESSION_META_KEY) is not None:
                raise _Reject(INVALID_REQUEST, "sessions/create must not carry session metadata")
            label = params.get("label") if params else None
            if label is not None and (type(label) is not str or len(label) > MAX_LABEL_LENGTH):
                raise _Reject(INVALID_PARAMS, f"label must be a string of at most {MAX_LABEL_LENGTH} characters")
            now = time.time()
            # The creation span's context rides in the (signed) token, so that every
            # later request of the session links to it, on any replica.
            extra: dict[str, str] = {}
            if op is not None and (traceparent := op.traceparent()) is not None:
                extra[TRACEPARENT_CLAIM] = traceparent
            if (principal := await self._principal_hash(scope)) is not None:
                extra[PRINCIPAL_CLAIM] = principal
            token, claims = self.keys.mint_session_token(ttl=self.ttl, now=now, extra_claims=extra)
            try:
                await self.store.create(claims.session_id, expires_at=claims.expires_at, now=now)
            except SessionStoreUnavailable as exc:
                raise _store_unavailable(exc) from None
            expires = claims.expires_at if self.idle_ttl is None else min(claims.expires_at, now + self.idle_ttl)
            logger.debug("session created (sid=%s)", claims.session_id)
            if op is not None:
                op.set_session(claims.session_id)
                op.telemetry.sessions_created.add(1, op.session_attributes())
            result: dict[str, Any] = {"session": {"sessionId": token, "expiresAt": _iso(int(expires))}}
        else:
            try:
                revoked = await self.store.revoke(session.id, expires_at=session.token_expires_at)
            except SessionStoreUnavailable as exc:
                raise _store_unavailable(exc) from None
            if not revoked:
                raise _Reject(
                    SESSION_NOT_FOUND,
                    "Session not found",
                    {"sessionId": jsonrpc.echoed_session_id(session.token)},
                    reason="revoked",
                    session_id=session.id,
                )
            logger.debug("session deleted (sid=%s)", session.id)
            if op is not None:
                attributes = op.session_attributes()
                op.telemetry.sessions_deleted.add(1, attributes)
                op.telemetry.session_duration.record(max(time.time() - session.issued_at, 0.0), attributes)
            result = {}
        if ctx.modern:
            result["resultType"] = "complete"
        return result

    # -- answers ------------------------------------------------------------------

    async def _send_error(self, send: Send, request_id: Any, reject: _Reject, modern: bool) -> None:
        status = http_status(reject.code, modern=modern)
        await self._send_json(send, status, jsonrpc.error(request_id, reject.code, reject.message, reject.data))

    async def _send_batch(self, send: Send, errors: list[dict[str, Any]], status: int) -> None:
        if not errors:
            return await _send_accepted(send)
        await self._send_json(send, status, errors)

    async def _send_json(self, send: Send, status: int, payload: Any) -> None:
        body = jsonrpc.dumps(payload)
        headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
        if status == 503:
            headers.append((b"retry-after", self._retry_after))
        await send({"type": "http.response.start", "status": status, "headers": headers, "trailers": False})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _send_status(self, send: Send, status: int) -> None:
        headers = [(b"content-length", b"0")]
        if status == 503:
            headers.append((b"retry-after", self._retry_after))
        await send({"type": "http.response.start", "status": status, "headers": headers, "trailers": False})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _too_large(self, send: Send) -> None:
        reject = jsonrpc.invalid_request(None, f"Request body too large (limit {self.max_body_size} bytes)")
        await self._send_json(send, 413, reject)


def _store_unavailable(exc: SessionStoreUnavailable) -> _Reject:
    logger.warning("session store unavailable: %s", exc)
    return _Reject(SESSION_STORE_UNAVAILABLE, "Session store unavailable, retry later", reason="store_unavailable")


def _rejection_reason(reason: str) -> str:
    """A low-cardinality reason for the rejection counter."""
    if reason in ("expired", "revoked", "idle_expired"):
        return reason
    if reason.startswith("state:"):
        return "invalid_state"
    return "invalid_token"


async def _send_accepted(send: Send) -> None:
    await send(
        {"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0")], "trailers": False}
    )
    await send({"type": "http.response.body", "body": b"", "more_body": False})


class _RequestContext:
    """What one HTTP request's messages share: era, headers, and the body to replay."""

    __slots__ = ("body", "header_session_id", "headers", "modern", "protocol_version", "start_ns")

    def __init__(
        self, *, modern: bool, protocol_version: str | None, headers: dict[bytes, bytes], body: bytes, start_ns: int
    ) -> None:
        self.modern = modern
        self.protocol_version = protocol_version
        self.headers = headers
        self.header_session_id = headers.get(MCP_SESSION_ID_HEADER)
        self.body: bytes | None = body
        self.start_ns = start_ns


class _Target:
    """What to do with the response to one request id."""

    __slots__ = ("advertise", "modern", "op", "session")

    def __init__(self, session: Session | None, advertise: bool, modern: bool, op: Operation | None) -> None:
        self.session = session
        self.advertise = advertise
        self.modern = modern
        self.op = op


def _hashable_id(request_id: Any) -> Any:
    return request_id if type(request_id) in (str, int, float) or request_id is None else repr(request_id)


class _Responder:
    """Rewrites and observes the responses to one HTTP request.

    Adds the session echo and the capability, and tells each request's
    operation how it ended. ``application/json`` bodies are buffered (they are
    one message) and get a new ``Content-Length``; ``text/event-stream`` is
    rewritten event by event as it flows; anything else passes through.
    """

    __slots__ = ("_body", "_capability", "_mode", "_send", "_sse", "_start", "_targets", "status")

    def __init__(self, send: Send, targets: dict[Any, _Target], capability_value: dict[str, Any]) -> None:
        self._send = send
        self._targets = targets
        self._capability = capability_value
        self._mode = 0  # 0 pass-through, 1 JSON, 2 SSE
        self._start: Any = None
        self._body = bytearray()
        self._sse: SSERewriter | None = None
        self.status = 0

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
            content_type = b""
            encoded = False
            for name, value in message.get("headers", ()):
                name = name.lower()
                if name == b"content-type":
                    content_type = bytes(value).lower()
                elif name == b"content-encoding":
                    encoded = True
            if not encoded and content_type.startswith(_JSON_CONTENT_TYPE):
                self._mode = 1
                self._start = message
                return
            if not encoded and content_type.startswith(_SSE_CONTENT_TYPE):
                self._mode = 2
                self._sse = SSERewriter(self._rewrite_text, once=len(self._targets) == 1)
                message = {
                    **message,
                    "headers": [(n, v) for n, v in message.get("headers", ()) if n.lower() != b"content-length"],
                }
            await self._send(message)
        elif kind == "http.response.body" and self._mode == 1:
            chunk = message.get("body", b"")
            if message.get("more_body", False):
                self._body += chunk
                return
            if self._body:
                self._body += chunk
                chunk = bytes(self._body)
            body = self._rewrite_json(chunk)
            start = self._start
            headers = [(n, v) for n, v in start.get("headers", ()) if n.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await self._send({**start, "headers": headers})
            await self._send({"type": "http.response.body", "body": body, "more_body": False})
        elif kind == "http.response.body" and self._mode == 2:
            assert self._sse is not None
            more = message.get("more_body", False)
            chunk = self._sse.feed(message.get("body", b""))
            if not more:
                chunk += self._sse.flush()
            await self._send({"type": "http.response.body", "body": chunk, "more_body": more})
        else:
            await self._send(message)

    def _rewrite_json(self, body: bytes) -> bytes:
        parsed = jsonrpc.loads(body, request=False)
        try:
            if isinstance(parsed, dict):
                rewritten = self._rewrite_message(body, parsed)
                return body if rewritten is None else rewritten
            if type(parsed) is list:
                changed = [self._apply(element) for element in parsed if isinstance(element, dict)]
                if any(change is not None for change in changed):
                    return jsonrpc.dumps(parsed)
        except Exception:  # never let a rewriting bug break a response
            logger.exception("could not add session metadata to a response")
        return body

    def _rewrite_text(self, data: str) -> str | None:
        if '"id"' not in data and "\\" not in data:
            return None  # no "id" member, even escaped: a notification or a comment, never a response
        try:
            raw = data.encode()
            parsed = jsonrpc.loads(raw, request=False)
            if isinstance(parsed, dict) and (rewritten := self._rewrite_message(raw, parsed)) is not None:
                return rewritten.decode()
        except Exception:
            logger.exception("could not add session metadata to an event")
        return None

    def _rewrite_message(self, raw: bytes, message: dict[str, Any]) -> bytes | None:
        """The new bytes of one response message, or None when it stays as it is.

        When only the echo is added and the message ends the way a compact
        serializer ends it, the echo is spliced into the original bytes instead
        of serializing the whole message again (large results cost nothing).
        """
        target = self._target_of(message)
        if target is None:
            return None  # notifications, server requests, other ids: nothing to look at
        splice = _echo_splice_point(raw, message) if target.session is not None else None
        change = self._apply_to(target, message)
        if change is None:
            return None
        if not isinstance(change, dict) or splice is None:
            return jsonrpc.dumps(message)
        position, opener, closer = splice
        return b"".join((raw[:position], opener, _echo_json(change), closer, raw[position:]))

    def _target_of(self, message: dict[str, Any]) -> _Target | None:
        if "method" in message:
            return None
        return self._targets.get(_hashable_id(message.get("id")))

    def _apply(self, message: dict[str, Any]) -> dict[str, Any] | object | None:
        target = self._target_of(message)
        return None if target is None else self._apply_to(target, message)

    def _apply_to(self, target: _Target, message: dict[str, Any]) -> dict[str, Any] | object | None:
        """Observe a response to a target request, and add the echo and the capability.

        Returns None when ``message`` did not change, the echo when the echo is
        the only change, and ``_CHANGED`` otherwise.
        """
        result = message.get("result")
        if not isinstance(result, dict):
            error = message.get("error")
            if target.op is not None and isinstance(error, dict) and type(error.get("code")) is int:
                target.op.fail(error["code"], str(error.get("message", "")))
            return None
        if target.op is not None:
            target.op.observe_result(result)  # a tool error, or tool and prompt names the server has
        change: dict[str, Any] | object | None = None
        session = target.session
        if session is not None:
            echo: dict[str, Any] = {"sessionId": session.token}
            if session.state_token is not None:
                echo["state"] = session.state_token
            echo["expiresAt"] = _iso(int(session.expires_at_timestamp))
            meta = result.get("_meta")
            if not isinstance(meta, dict):
                meta = result["_meta"] = {}
            meta[SESSION_META_KEY] = echo
            change = echo
        if target.advertise and isinstance(caps := result.get("capabilities"), dict):
            caps.setdefault("sessions", dict(self._capability))
            if target.modern:
                extensions = caps.get("extensions")
                if not isinstance(extensions, dict):
                    extensions = caps["extensions"] = {}
                extensions.setdefault(SESSIONS_EXTENSION_ID, dict(self._capability))
            else:
                experimental = caps.get("experimental")
                if not isinstance(experimental, dict):
                    experimental = caps["experimental"] = {}
                experimental.setdefault("sessions", dict(self._capability))
            change = _CHANGED
        return change


_CHANGED: Final = object()


def _echo_json(echo: dict[str, Any]) -> bytes:
    """The echo as JSON, by concatenation: its values never need escaping.

    The session id and the state are compact JWS (verified against the
    base64url-and-dots shape, or signed here) and ``expiresAt`` is RFC 3339.
    """
    state = echo.get("state")
    return b"".join(
        (
            b'{"sessionId":"',
            echo["sessionId"].encode(),
            b'"' if state is None else b'","state":"' + state.encode() + b'"',
            b',"expiresAt":"',
            echo["expiresAt"].encode(),
            b'"}',
        )
    )


_META_OPENER: Final = b',"' + SESSION_META_KEY.encode() + b'":'


def _echo_splice_point(raw: bytes, message: dict[str, Any]) -> tuple[int, bytes, bytes] | None:
    """Where the echo can go in ``raw`` without reserializing, if the bytes allow it.

    The message must end with ``result`` as its last member and ``result``
    with ``_meta`` (an object, which then gets one more member) or without
    any ``_meta`` (which is then added last), with no whitespace after the
    last braces: how the SDK, and any compact serializer, writes it.
    """
    if not raw.endswith(b"}}") or next(reversed(message), None) != "result":
        return None
    result = message["result"]
    if not isinstance(result, dict):
        return None
    if not result:
        return len(raw) - 2, b'"_meta":{' + _META_OPENER[1:], b"}"
    last = next(reversed(result))
    if last == "_meta":
        meta = result["_meta"]
        if isinstance(meta, dict) and meta and SESSION_META_KEY not in meta and raw.endswith(b"}}}"):
            return len(raw) - 3, _META_OPENER, b""
        return None
    if "_meta" in result:
        return None
    return len(raw) - 2, b',"_meta":{' + _META_OPENER[1:], b"}"
