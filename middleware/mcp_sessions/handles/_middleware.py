"""HandleMiddleware: verify the handles of each ``tools/call`` before the tool runs.

Until the session middleware runs this check itself, this small ASGI
middleware does: it reads the body (bounded, replayed once), verifies every
handle in a ``tools/call``'s arguments with :func:`check_call`, answers a
refused call itself with the ``isError`` tool result (the tool never runs),
and otherwise calls the app inside a :class:`HandleContext` (the principal
for minting, the verified handles for typed parameters). Spans record each
handle's kind and stable id, never the handle.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Final, TypedDict, TypeGuard

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider
from starlette.types import ASGIApp, Receive, Scope, Send

from ..asgi import TOO_LARGE, Replay, read_body, send_json, send_result
from ..stores import SessionStoreUnavailable
from ..wire import jsonrpc
from ..wire.jsonrpc import hashable_id
from ..wire.protocol import HANDSHAKE_VERSIONS, INTERNAL_ERROR, INVALID_REQUEST, SESSION_STORE_UNAVAILABLE
from ._check import ToolErrorResult, check_call, handle_candidates, record_handles
from ._context import HandleContext, handle_context
from ._errors import HandleError
from ._registry import Handles

if TYPE_CHECKING:
    from asgiref.typing import ASGIReceiveCallable, ASGISendCallable

__all__ = ["HandleMiddleware"]

logger = logging.getLogger("mcp_sessions.handles")

PrincipalHook = Callable[[Scope], "str | Awaitable[str | None] | None"]
DEFAULT_MAX_BODY_SIZE: Final = 4 * 1024 * 1024
SPAN_NAME: Final = "mcp_sessions.handles.check"
_TRACER_NAME: Final = "mcp_sessions.handles"


class _Answer(TypedDict, total=False):
    """How to answer one refused call: its ``isError`` result, or that the store cannot answer now."""

    id: object
    result: ToolErrorResult
    unavailable: bool


def _default_principal(scope: Scope) -> str | None:
    from ..session import authenticated_user

    return authenticated_user(scope)


class HandleMiddleware:
    """Verify the handles every ``tools/call`` carries; answer a refusal with an ``isError`` result.

    ``handles`` is the registry. ``principal`` returns the authenticated
    principal of a request (by default the user Starlette's
    ``AuthenticationMiddleware`` set, as the session middleware does).
    Install it inside the session middleware, around the MCP app.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        handles: Handles,
        principal: PrincipalHook | None = _default_principal,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        retry_after: int = 1,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        if not isinstance(handles, Handles):
            raise TypeError("HandleMiddleware needs handles=, a Handles registry")
        if max_body_size < 1:
            raise ValueError("max_body_size must be positive")
        self.app = app
        self.handles = handles
        self._principal = principal
        self.max_body_size = max_body_size
        self._retry_after = str(retry_after).encode()
        self._tracer = trace.get_tracer(_TRACER_NAME, tracer_provider=tracer_provider)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reply: ASGISendCallable = send  # type: ignore[assignment]  # our own answers, checked as typed events
        try:
            digest = await self._principal_digest(scope)
        except Exception:
            logger.exception("the principal hook failed")
            return await send_json(reply, 500, jsonrpc.error(None, INTERNAL_ERROR, "Internal error"), b"")
        context = HandleContext(self.handles, digest)
        headers = dict(reversed(list(scope["headers"])))
        content_type = headers.get(b"content-type", b"").lower()
        if scope["method"] != "POST" or not content_type.startswith(b"application/json"):
            with handle_context(context):
                await self.app(scope, receive, send)
            return
        typed_receive: ASGIReceiveCallable = receive  # type: ignore[assignment]  # an annotation, not a call
        body = await read_body(typed_receive, declared_length=headers.get(b"content-length"), limit=self.max_body_size)
        if body is None:
            return None  # the client is gone: nothing to answer
        if body is TOO_LARGE:
            limit = f"Request body too large (limit {self.max_body_size} bytes)"
            return await send_json(reply, 413, jsonrpc.error(None, INVALID_REQUEST, limit), self._retry_after)
        assert isinstance(body, bytes)
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            message = None
        calls = [m for m in (message if isinstance(message, list) else [message]) if _is_tools_call(m)]
        if calls:
            answers = await self._check(calls, context)
            if answers is not None:
                await self._answer(reply, headers, message, answers)
                return None
        with handle_context(context):
            await self.app(scope, Replay(body, receive), send)
        return None

    async def _principal_digest(self, scope: Scope) -> str | None:
        if self._principal is None:
            return None
        principal = self._principal(scope)
        if inspect.isawaitable(principal):
            principal = await principal
        return None if principal is None else self.handles.principal_digest(principal)

    async def _check(self, calls: list[dict[str, object]], context: HandleContext) -> dict[Hashable, _Answer] | None:
        """Verify the calls' handles; the answers to send instead of calling the app, or ``None``."""
        answers: dict[Hashable, _Answer] = {}
        parent = trace.get_current_span()
        for call in calls:
            params = call.get("params")
            arguments = params.get("arguments") if isinstance(params, dict) else None
            if not isinstance(arguments, dict) or next(handle_candidates(self.handles, arguments), None) is None:
                continue  # no handle: no span, nothing to check
            before = set(context.verified)
            errors: list[HandleError] = []
            with self._tracer.start_as_current_span(SPAN_NAME, kind=SpanKind.INTERNAL) as span:
                try:
                    refusal = await check_call(
                        self.handles,
                        call.get("params"),
                        context.principal_digest,
                        verified=context.verified,
                        errors=errors,
                    )
                except SessionStoreUnavailable as exc:
                    logger.warning("handle store unavailable: %s", exc)
                    span.set_status(Status(StatusCode.ERROR, "store unavailable"))
                    return {hashable_id(call.get("id")): {"unavailable": True, "id": call.get("id")}}
                new = [context.verified[token] for token in context.verified if token not in before]
                record_handles(span, new, errors)
                record_handles(parent, new, errors)
            if refusal is not None:
                answers[hashable_id(call.get("id"))] = {"result": refusal, "id": call.get("id")}
        return answers or None

    async def _answer(
        self, send: ASGISendCallable, headers: dict[bytes, bytes], message: object, answers: dict[Hashable, _Answer]
    ) -> None:
        modern = headers.get(b"mcp-protocol-version", b"").decode("latin-1") not in ("", *HANDSHAKE_VERSIONS)
        unavailable = any("unavailable" in a for a in answers.values())
        elements = message if isinstance(message, list) else [message]
        responses = []
        for element in elements:
            if not isinstance(element, dict) or "id" not in element:
                continue
            rid = element.get("id")
            if unavailable:
                responses.append(jsonrpc.error(rid, SESSION_STORE_UNAVAILABLE, "Handle store unavailable, retry later"))
                continue
            refused = answers.get(hashable_id(rid))
            if refused is None:
                reason = "batch refused: another element carries a refused handle"
                responses.append(jsonrpc.error(rid, INVALID_REQUEST, reason))
                continue
            result = dict(refused["result"])
            if modern:
                result["resultType"] = "complete"
            responses.append(jsonrpc.result(rid, result))
        payload: object = responses if isinstance(message, list) else responses[0]
        if unavailable:
            return await send_json(send, 503, payload, self._retry_after)
        await send_result(send, payload, accept=headers.get(b"accept", b""))


def _is_tools_call(message: object) -> TypeGuard[dict[str, object]]:
    return isinstance(message, dict) and message.get("method") == "tools/call" and "id" in message
