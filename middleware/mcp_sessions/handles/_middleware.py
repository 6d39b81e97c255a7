"""HandleMiddleware, and how a request the handle check refused is answered (the pipeline's answers too).

For a server without the session middleware: it reads the body (bounded,
replayed once) and parses it as the session middleware does, runs the one
handle check (:func:`check_request`), answers a refused request itself, and
otherwise calls the app inside a :class:`HandleContext`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from opentelemetry import trace
from opentelemetry.trace import TracerProvider
from starlette.types import ASGIApp, Receive, Scope, Send

from .._asgi import DEFAULT_MAX_BODY_SIZE, TOO_LARGE, Replay, read_body, send_json, send_result
from .._inside import place_at_endpoints, route_path
from .._session import PrincipalHook, authenticated_user, caller_of, principal_digest
from .._wire import Refusal, batch_refused, jsonrpc
from .._wire.protocol import (
    INVALID_REQUEST,
    MCP_PROTOCOL_VERSION_HEADER,
    SESSION_STORE_UNAVAILABLE,
    TOO_MANY_SESSIONS,
    Era,
)
from ._check import HandleContext, ToolErrorResult, check_request, handle_context
from ._registry import Handles

if TYPE_CHECKING:
    from asgiref.typing import ASGIReceiveCallable, ASGISendCallable

BATCH_REFUSED: Final = "batch refused: another element's handle is invalid"


class HandleMiddleware:
    """Verify the handles every ``tools/call`` carries; answer a refusal with an ``isError`` result.

    ``handles`` is the registry. ``principal`` returns the authenticated
    principal of a request (by default the user Starlette's
    ``AuthenticationMiddleware`` set, as the session middleware does).
    Wrap the app with it (or list it as Starlette middleware): its check runs at each MCP
    endpoint inside the app, after the server's own authentication; with the session
    middleware too, the later-built (outer) one runs first there, as in the list.
    Spans record each handle's kind and stable id, never the handle.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        handles: Handles,
        principal: PrincipalHook | None = authenticated_user,
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
        self._tracer = trace.get_tracer("mcp_sessions.handles", tracer_provider=tracer_provider)
        self._placed = False
        self._inner_paths = place_at_endpoints(app, self._at, placed=lambda x: isinstance(x, HandleMiddleware))

    def _at(self, transport: ASGIApp) -> HandleMiddleware:
        """This middleware's check, placed in front of an MCP transport app."""
        inner = copy.copy(self)
        inner.app, inner._placed, inner._inner_paths = transport, True, None
        return inner

    @property
    def session_manager(self) -> object:
        """Placed at an MCP endpoint: the transport's session manager (a middleware placed later goes in front)."""
        if not self._placed:
            raise AttributeError("session_manager")
        return getattr(self.app, "session_manager", None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self._inner_paths is not None and route_path(scope) in self._inner_paths):
            await self.app(scope, receive, send)
            return
        reply: ASGISendCallable = send  # type: ignore[assignment]  # our own answers, checked as typed events
        try:
            digest = await principal_digest(self._principal, scope, self.handles.keys.audience)
        except Refusal as failed:  # the principal hook failed: a server bug, logged
            return await send_json(reply, 500, failed.frame(None), b"")
        context = HandleContext(self.handles, digest, caller=caller_of(scope, digest))
        headers = dict(reversed(list(scope["headers"])))
        content_type = headers.get(b"content-type", b"").lower()
        if scope["method"] != "POST" or not content_type.startswith(b"application/json"):
            with handle_context(context):
                await self.app(scope, receive, send)
            return
        typed_receive: ASGIReceiveCallable = receive  # type: ignore[assignment]  # an annotation, not a call
        body = await read_body(typed_receive, declared_length=headers.get(b"content-length"), limit=self.max_body_size)
        if body is None:
            return  # the client is gone: nothing to answer
        if body is TOO_LARGE:
            limit = f"Request body too large (limit {self.max_body_size} bytes)"
            return await send_json(reply, 413, jsonrpc.error(None, INVALID_REQUEST, limit), self._retry_after)
        assert isinstance(body, bytes)
        parsed = jsonrpc.loads(body)  # as the session middleware reads it: a BOM, UTF-16 and UTF-32 too
        batch = type(parsed) is list
        messages: list[Any] = parsed if batch else [parsed]
        check = await check_request(self.handles, messages, context, tracer=self._tracer)
        refused = {index: call.answer for index, call in check.calls.items() if call.answer is not None}
        if refused or check.retryable is not None:
            version = headers.get(MCP_PROTOCOL_VERSION_HEADER)  # the SDK's era: present and not 2025-era, even empty
            era = Era.of(None if version is None else version.decode("latin-1"))
            answers = answer_elements(messages, refused, era=era, batch=batch, retryable=check.retryable)
            accept = headers.get(b"accept", b"")
            return await send_answers(reply, answers, batch=batch, accept=accept, retry_after=self._retry_after)
        with handle_context(context):
            await self.app(scope, Replay(body, receive), send)


class Answer(NamedTuple):
    """How one element of a refused request is answered."""

    frame: dict[str, Any] | None
    """Its JSON-RPC response; ``None`` for a notification, which is never answered."""
    refusal: Refusal | None
    """Why it is refused, when it is not given its own ``isError`` result."""


def answer_elements(
    messages: Sequence[object],
    answers: Mapping[int, ToolErrorResult],
    *,
    era: Era,
    batch: bool,
    retryable: Refusal | None = None,
) -> list[Answer]:
    """The answer of each element of ``messages`` (one message when not ``batch``), in order.

    ``answers`` are the ``isError`` results of the refused calls, by element
    index (with ``resultType: "complete"`` on the 2026-07-28 path); the other
    elements of a batch are refused as a whole (-32600), as for an invalid
    session. ``retryable`` (the store could not answer, -32010, or the caller
    may mint no handle now, -32011) goes to every element instead.
    Notifications are never answered.
    """
    others = retryable or batch_refused(BATCH_REFUSED)
    elements: list[Answer] = []
    for index, message in enumerate(messages):
        # One message's id is repeated as sent; a batch element's only when JSON-RPC allows it.
        request_id = message.get("id") if not batch and isinstance(message, dict) else jsonrpc.request_id_of(message)
        answer = answers.get(index) if retryable is None else None
        if answer is not None:
            result = dict(answer)
            if era is Era.MODERN:
                result["resultType"] = "complete"
            elements.append(Answer(jsonrpc.result(request_id, result), None))
            continue
        # Requests are answered, and so is anything that is no call at all; notifications are not.
        answered = (isinstance(message, dict) and "id" in message) or not jsonrpc.is_request_or_notification(message)
        elements.append(Answer(others.frame(request_id) if answered else None, others))
    return elements


async def send_answers(
    send: ASGISendCallable, answers: Sequence[Answer], *, batch: bool, accept: bytes, retry_after: bytes = b""
) -> None:
    """Send ``answers`` (from :func:`answer_elements`): a batch as an array, one message as itself.

    A refusal by an unavailable store is a 503 with ``Retry-After``, one over
    the caller's handle budget a 429 with its own ``Retry-After``; anything
    else goes out as a result, as JSON or as one SSE event to a client that
    accepts only a stream.
    """
    frames = [answer.frame for answer in answers if answer.frame is not None]
    payload: object = frames if batch else frames[0]
    for refusal in {answer.refusal for answer in answers if answer.refusal is not None}:
        if refusal.code == SESSION_STORE_UNAVAILABLE:
            return await send_json(send, 503, payload, retry_after)
        if refusal.code == TOO_MANY_SESSIONS:
            return await send_json(send, 429, payload, str(refusal.retry_after or 1).encode())
    await send_result(send, payload, accept=accept)
