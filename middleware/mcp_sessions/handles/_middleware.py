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
from collections.abc import Awaitable, Callable
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._protocol import HANDSHAKE_VERSIONS, SESSION_STORE_UNAVAILABLE
from ..stores import SessionStoreUnavailable
from ._check import check_call, handle_candidates, record_handles
from ._context import HandleContext, handle_context
from ._errors import HandleError
from ._registry import Handles

__all__ = ["HandleMiddleware"]

logger = logging.getLogger("mcp_sessions.handles")

PrincipalHook = Callable[[Scope], "str | Awaitable[str | None] | None"]
DEFAULT_MAX_BODY_SIZE: Final = 4 * 1024 * 1024
SPAN_NAME: Final = "mcp_sessions.handles.check"
_TRACER_NAME: Final = "mcp_sessions.handles"
_INTERNAL_ERROR: Final = -32603
_INVALID_REQUEST: Final = -32600
_DISCONNECTED: Final = b"\x00client disconnected\x00"  # a stand-in, compared by identity (never interned like b"x")


def _default_principal(scope: Scope) -> str | None:
    from .._principal import authenticated_user

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
        try:
            digest = await self._principal_digest(scope)
        except Exception:
            logger.exception("the principal hook failed")
            return await _send_json(send, 500, _error(None, _INTERNAL_ERROR, "Internal error"))
        context = HandleContext(self.handles, digest)
        headers = dict(reversed(list(scope["headers"])))
        content_type = headers.get(b"content-type", b"").lower()
        if scope["method"] != "POST" or not content_type.startswith(b"application/json"):
            with handle_context(context):
                await self.app(scope, receive, send)
            return
        declared = headers.get(b"content-length", b"")
        body = None if declared.isdigit() and int(declared) > self.max_body_size else await self._read_body(receive)
        if body is None:
            limit = f"Request body too large (limit {self.max_body_size} bytes)"
            return await _send_json(send, 413, _error(None, _INVALID_REQUEST, limit))
        if body is _DISCONNECTED:
            return None  # the client is gone: nothing to answer

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            message = None
        calls = [m for m in (message if isinstance(message, list) else [message]) if _is_tools_call(m)]
        if calls:
            answers = await self._check(calls, context)
            if answers is not None:
                await self._answer(send, headers, message, answers)
                return None
        with handle_context(context):
            await self.app(scope, replay, send)
        return None

    async def _principal_digest(self, scope: Scope) -> str | None:
        if self._principal is None:
            return None
        principal = self._principal(scope)
        if inspect.isawaitable(principal):
            principal = await principal
        return None if principal is None else self.handles.principal_digest(principal)

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole body; ``None`` past the size limit, :data:`_DISCONNECTED` if the client left."""
        chunks = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return _DISCONNECTED
            chunks += message.get("body", b"")
            if len(chunks) > self.max_body_size:
                return None
            if not message.get("more_body", False):
                return bytes(chunks)

    async def _check(self, calls: list[dict[str, Any]], context: HandleContext) -> dict[Any, dict[str, Any]] | None:
        """Verify the calls' handles; the answers to send instead of calling the app, or ``None``."""
        answers: dict[Any, dict[str, Any]] = {}
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
                    return {_key(call.get("id")): {"unavailable": True, "id": call.get("id")}}
                new = [context.verified[token] for token in context.verified if token not in before]
                record_handles(span, new, errors)
                record_handles(parent, new, errors)
            if refusal is not None:
                answers[_key(call.get("id"))] = {"result": refusal, "id": call.get("id")}
        return answers or None

    async def _answer(
        self, send: Send, headers: dict[bytes, bytes], message: Any, answers: dict[Any, dict[str, Any]]
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
                responses.append(_error(rid, SESSION_STORE_UNAVAILABLE, "Handle store unavailable, retry later"))
                continue
            refused = answers.get(_key(rid))
            if refused is None:
                responses.append(
                    _error(rid, _INVALID_REQUEST, "batch refused: another element carries a refused handle")
                )
                continue
            result = dict(refused["result"])
            if modern:
                result["resultType"] = "complete"
            responses.append({"jsonrpc": "2.0", "id": rid, "result": result})
        payload: Any = responses if isinstance(message, list) else responses[0]
        accept = headers.get(b"accept", b"").lower()
        if unavailable:
            return await _send_json(send, 503, payload, [(b"retry-after", self._retry_after)])
        if b"application/json" in accept or b"text/event-stream" not in accept:
            return await _send_json(send, 200, payload)
        body = b"event: message\r\ndata: " + _dumps(payload) + b"\r\n\r\n"
        response_headers = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache, no-transform"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": response_headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def _dumps(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "backslashreplace")


async def _send_json(send: Send, status: int, payload: Any, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = _dumps(payload)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _is_tools_call(message: Any) -> bool:
    return isinstance(message, dict) and message.get("method") == "tools/call" and "id" in message


def _key(request_id: Any) -> Any:
    return request_id if type(request_id) in (str, int, float) or request_id is None else repr(request_id)


def _error(request_id: Any, code: int, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}
