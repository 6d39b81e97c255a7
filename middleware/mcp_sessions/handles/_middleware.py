"""The check before a tool runs, HandleMiddleware, and how a refused request is answered (the pipeline's too).

The check verifies every handle a ``tools/call`` carries. A handle that fails
becomes the call's answer, an ``isError`` tool result that tells the model what
happened and what to do; the tool never runs. What the check verified goes into
the request's :class:`HandleContext`, which typed parameters read.

HandleMiddleware is for a server without the session middleware: it reads the
body (bounded, replayed once) and parses it as the session middleware does, runs
the one handle check (:func:`check_request`), answers a refused request itself,
and otherwise calls the app inside a :class:`HandleContext`.
"""

from __future__ import annotations

import contextlib
import copy
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeGuard

from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
from starlette.types import ASGIApp, Receive, Scope, Send

from .._asgi import DEFAULT_MAX_BODY_SIZE, TOO_LARGE, AtEndpoints, Replay, header, read_body, send_json, send_result
from .._session import PrincipalHook, authenticated_user, caller_of, principal_digest
from .._wire import Refusal, batch_refused, jsonrpc, store_unavailable
from .._wire.protocol import (
    INVALID_REQUEST,
    MCP_PROTOCOL_VERSION_HEADER,
    RATE_LIMITED,
    SESSION_STORE_UNAVAILABLE,
)
from ..profiles import Era
from ..stores import SessionStoreUnavailable
from ._format import REQUEST, HandleKind
from ._registry import Handle, HandleError, Handles, refusal

if TYPE_CHECKING:
    from .._session import RateLimit

BATCH_REFUSED: Final = "batch refused: another element's handle is invalid"


class HandleMiddleware(AtEndpoints):
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
        self.place(self._at)

    def _at(self, transport: ASGIApp) -> HandleMiddleware:
        """This middleware's check, placed in front of an MCP transport app."""
        inner = copy.copy(self)
        inner.app, inner.at_endpoint, inner._inner_paths = transport, True, None
        return inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.passes(scope):
            await self.app(scope, receive, send)
            return
        reply = send
        try:
            digest = await principal_digest(self._principal, scope, self.handles.keys.audience)
        except Refusal as failed:  # the principal hook failed: a server bug, logged
            return await send_json(reply, 500, failed.frame(None), b"")
        context = HandleContext(self.handles, digest, caller=caller_of(scope, digest))
        headers = scope["headers"]
        content_type = (header(headers, b"content-type") or b"").lower()
        if scope["method"] != "POST" or not content_type.startswith(b"application/json"):
            with handle_context(context):
                await self.app(scope, receive, send)
            return
        length = header(headers, b"content-length")
        body = await read_body(receive, declared_length=length, limit=self.max_body_size)
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
            version = header(headers, MCP_PROTOCOL_VERSION_HEADER)  # the SDK's era: present, not 2025-era, even empty
            era = Era.of(None if version is None else version.decode("latin-1"))
            answers = answer_elements(messages, refused, era=era, batch=batch, retryable=check.retryable)
            accept = header(headers, b"accept") or b""
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
    send: Send, answers: Sequence[Answer], *, batch: bool, accept: bytes, retry_after: bytes = b""
) -> None:
    """Send ``answers`` (from :func:`answer_elements`): a batch as an array, one message as itself.

    A refusal by an unavailable store is a 503 with ``Retry-After``, one over
    the caller's handle budget a 429 with its own ``Retry-After``; anything
    else goes out as a result, as JSON or as one SSE event to a client that
    accepts only a stream.
    """
    frames = [answer.frame for answer in answers if answer.frame is not None]
    payload: object = frames if batch else frames[0]
    for refused in {answer.refusal for answer in answers if answer.refusal is not None}:
        if refused.code == SESSION_STORE_UNAVAILABLE:
            return await send_json(send, 503, payload, retry_after)
        if refused.code == RATE_LIMITED:
            return await send_json(send, 429, payload, str(refused.retry_after or 1).encode())
    await send_result(send, payload, accept=accept)


ToolErrorResult = dict[str, object]
"""A ``CallToolResult`` with ``isError: true``, as JSON (the ``result`` of the JSON-RPC response)."""

ATTRIBUTE_KIND: Final = "mcp_sessions.handle.kind"
"""The span attribute listing the kinds of a call's handles."""
ATTRIBUTE_ID: Final = "mcp_sessions.handle.id"
"""The span attribute listing the stable ids of a call's handles (never the handles)."""
_ATTRIBUTE_ERROR: Final = "mcp_sessions.handle.error"
_SPAN_NAME: Final = "mcp_sessions.handles.check"
_MAX_DEPTH: Final = 8
# What a handle mistyped by a character or two still looks like: the base64url alphabet, near the length.
_HANDLE_LIKE: Final = re.compile(r"[A-Za-z0-9_-]{20,60}")


class HandleContext:
    """The handle view of one request, set by :class:`HandleMiddleware` (or the session middleware)."""

    def __init__(
        self,
        handles: Handles,
        principal_digest: str | None,
        verified: dict[str, Handle] | None = None,
        *,
        caller: str | None = None,
        create_limit: RateLimit | None = None,
    ) -> None:
        self.handles = handles
        """The registry that checks the request's handles."""
        self.principal_digest = principal_digest
        """What new handles are bound to (``None``: the request is anonymous)."""
        self.verified: dict[str, Handle] = {} if verified is None else verified
        """Each handle the request carried, verified, for typed parameters."""
        self.caller = caller
        """Whom the request's mints count against (``None``: nobody)."""
        self.create_limit = create_limit
        """The session middleware's create limit, which mints spend too."""

    def __repr__(self) -> str:
        return f"<HandleContext principal={'bound' if self.principal_digest else 'none'} handles={len(self.verified)}>"

    def typed_argument(self, value: str, kind: HandleKind) -> Handle:
        """The verified handle a tool parameter typed ``kind`` takes for ``value``, or pydantic's error saying why not.

        Only a handle this request's check verified is taken: a typed
        parameter is validated synchronously and cannot reach the store.
        """
        from pydantic_core import PydanticCustomError  # only pydantic calls this

        handle = self.verified.get(value)
        if handle is not None:
            if handle.kind == kind.name:
                return handle
            wrong = refusal("wrong_kind", kind, other=self.handles.kinds[handle.kind])
            raise PydanticCustomError("handle_wrong_kind", wrong.message)
        try:
            self.handles.authenticate(value, self.principal_digest, expected=kind)
        except HandleError as exc:
            raise PydanticCustomError(f"handle_{exc.reason}", exc.message) from None
        # Authentic, but never checked against the store for this request: refuse rather than skip
        # revocation. HandleMiddleware (or the session middleware) checks every tools/call first.
        raise PydanticCustomError(
            "handle_unchecked",
            "this {kind} handle was not checked for this request; the server's operator must install "
            "HandleMiddleware inside the session middleware",
            {"kind": kind.name},
        )


def current_handle_context() -> HandleContext | None:
    """The handle context of the current request, or ``None`` outside one."""
    context = REQUEST.get()
    return context if isinstance(context, HandleContext) else None


@contextlib.contextmanager
def handle_context(context: HandleContext) -> Iterator[HandleContext]:
    """Make ``context`` the current request's handle context for the block (what a middleware wraps the app in)."""
    token = REQUEST.set(context)
    try:
        yield context
    finally:
        REQUEST.reset(token)


def handle_candidates(handles: Handles, arguments: object) -> Iterator[tuple[str, str]]:
    """``(argument path, value)`` for each string in ``arguments`` that looks like a registered kind's handle."""
    prefixes = handles.prefixes
    stack: list[tuple[str, object, int]] = [("", arguments, 0)]
    while stack:
        path, value, depth = stack.pop()
        if isinstance(value, str):
            if value.startswith(prefixes) and _HANDLE_LIKE.fullmatch(value):
                yield path, value
        elif depth < _MAX_DEPTH:
            if isinstance(value, dict):
                stack.extend((f"{path}.{key}" if path else str(key), item, depth + 1) for key, item in value.items())
            elif isinstance(value, list):
                stack.extend((f"{path}[{index}]", item, depth + 1) for index, item in enumerate(value))


def record_handles(span: Span, verified: Iterable[Handle], errors: list[HandleError]) -> None:
    """Kinds and stable ids of a call's handles on ``span`` (lists, one entry per handle); never a handle."""
    verified = list(verified)
    if not span.is_recording() or not (verified or errors):
        return
    span.set_attribute(ATTRIBUTE_KIND, [handle.kind for handle in verified] + [error.kind for error in errors])
    span.set_attribute(ATTRIBUTE_ID, [handle.id for handle in verified] + [error.handle_id or "" for error in errors])
    if errors:
        span.set_attribute(_ATTRIBUTE_ERROR, errors[0].reason)
        span.set_status(Status(StatusCode.ERROR, errors[0].reason))


def tool_error_result(text: str) -> ToolErrorResult:
    """An ``isError`` ``CallToolResult`` with one text content."""
    return {"content": [{"type": "text", "text": text}], "isError": True}


async def check_call(
    handles: Handles,
    tools_call_params: object,
    principal_digest: str | None,
    *,
    verified: dict[str, Handle] | None = None,
    errors: list[HandleError] | None = None,
) -> ToolErrorResult | None:
    """Verify every handle in a ``tools/call``'s ``arguments``; the error result to answer, or ``None``.

    Each verified handle goes into ``verified`` (token to :class:`Handle`), a
    refusal into ``errors``. A store that cannot answer raises
    :class:`~mcp_sessions.stores.SessionStoreUnavailable`: answer that with the
    retryable error, never with a tool result.
    """
    arguments = tools_call_params.get("arguments") if isinstance(tools_call_params, dict) else None
    if not isinstance(arguments, dict):
        return None  # no arguments object: nothing named, and the server refuses the call itself
    found = list(handle_candidates(handles, arguments))
    if len(found) > handles.max_handles_per_call:
        return tool_error_result(
            f"this call carries {len(found)} handles; a call may carry at most {handles.max_handles_per_call}"
        )
    verified = {} if verified is None else verified
    for path, value in sorted(found):
        if value in verified:
            continue
        try:
            verified[value] = await handles.verify_digest(value, principal_digest)
        except HandleError as exc:
            if errors is not None:
                errors.append(exc)
            return tool_error_result(f"argument {path!r}: {exc.message}")
    return None


def is_tools_call(message: object) -> TypeGuard[dict[str, Any]]:
    """Whether ``message`` is a ``tools/call`` request: what runs a tool (a notification runs none)."""
    return (
        isinstance(message, dict)
        and message.get("jsonrpc") == "2.0"
        and message.get("method") == "tools/call"
        and "id" in message
    )


@dataclass
class CallCheck:
    """What the check found in one ``tools/call``: the handles it verified, the refusals, and its answer."""

    answer: ToolErrorResult | None = None
    """The ``isError`` result to answer instead of running the tool; ``None``: the tool runs."""
    checked: list[Handle] = field(default_factory=list)
    """The handles this call verified first (not those the request had verified already)."""
    errors: list[HandleError] = field(default_factory=list)
    """The refusal of the handle that failed, if one did."""


@dataclass
class RequestCheck:
    """What the check found in one request, by element index (a single message is element 0)."""

    calls: dict[int, CallCheck] = field(default_factory=dict)
    """Each ``tools/call`` request that carries something handle-shaped."""
    retryable: Refusal | None = None
    """The retryable refusal that stopped the check (-32010 or -32011)."""
    retryable_at: int | None = None
    """The element it refuses."""


async def check_request(
    handles: Handles, messages: Sequence[object], context: HandleContext, *, tracer: Tracer | None = None
) -> RequestCheck:
    """Check the handles of every ``tools/call`` request in ``messages`` (``None``: an element not to check).

    Verified handles go into ``context.verified`` (a handle met twice is
    verified once). A store that cannot answer, or a ``create`` tool called by a
    caller who may mint no handle now, stops the check with that retryable
    refusal. With ``tracer``, each call that carries handles gets a span, and it
    and the current span get the handles' kinds and stable ids.
    """
    check, parent = RequestCheck(), trace.get_current_span()
    for index, message in enumerate(messages):
        if not is_tools_call(message) or not isinstance(params := message.get("params"), dict):
            continue
        name, arguments = params.get("name"), params.get("arguments")
        if type(name) is str and name in handles.creators and (over := handles.budget.refusal(context, time.time())):
            check.retryable, check.retryable_at = over, index  # the tool would only fail to mint
            break
        if not isinstance(arguments, dict) or next(handle_candidates(handles, arguments), None) is None:
            continue  # no handle: no span, nothing to check
        call, before = CallCheck(), len(context.verified)
        spanned: contextlib.AbstractContextManager[Span] = (
            contextlib.nullcontext(INVALID_SPAN)
            if tracer is None
            else tracer.start_as_current_span(_SPAN_NAME, kind=SpanKind.INTERNAL)
        )
        with spanned as span:
            try:
                call.answer = await check_call(
                    handles, params, context.principal_digest, verified=context.verified, errors=call.errors
                )
            except SessionStoreUnavailable as exc:
                span.set_status(Status(StatusCode.ERROR, "store unavailable"))
                check.retryable, check.retryable_at = store_unavailable(exc), index
                break
            call.checked = list(context.verified.values())[before:]  # check_call only adds, in order
            record_handles(span, call.checked, call.errors)
            if tracer is not None:
                record_handles(parent, call.checked, call.errors)
        check.calls[index] = call
    return check
