"""HandleMiddleware: verify the handles of each ``tools/call`` before the tool runs.

For a server without the session middleware: it reads the body (bounded,
replayed once) and parses it as the session middleware does, runs the one
handle check (:func:`check_request`, :func:`check_call` for each call), answers
a refused request itself (:func:`answer_elements`: the tool never runs), and
otherwise calls the app inside a :class:`HandleContext` (the principal for
minting, the verified handles for typed parameters). Spans record each
handle's kind and stable id, never the handle.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import trace
from opentelemetry.trace import TracerProvider
from starlette.types import ASGIApp, Receive, Scope, Send

from .._inside import place_at_endpoints, route_path
from ..asgi import TOO_LARGE, Replay, read_body, send_json
from ..session import caller_of
from ..wire import jsonrpc
from ..wire.protocol import INTERNAL_ERROR, INVALID_REQUEST, MCP_PROTOCOL_VERSION_HEADER, Era
from ._answer import answer_elements, send_answers
from ._context import HandleContext, handle_context
from ._registry import Handles
from ._request import RequestCheck, check_request

if TYPE_CHECKING:
    from asgiref.typing import ASGIReceiveCallable, ASGISendCallable

__all__ = ["HandleMiddleware"]

logger = logging.getLogger("mcp_sessions.handles")

PrincipalHook = Callable[[Scope], "str | Awaitable[str | None] | None"]
DEFAULT_MAX_BODY_SIZE: Final = 4 * 1024 * 1024
_TRACER_NAME: Final = "mcp_sessions.handles"


def _default_principal(scope: Scope) -> str | None:
    from ..session import authenticated_user

    return authenticated_user(scope)


class HandleMiddleware:
    """Verify the handles every ``tools/call`` carries; answer a refusal with an ``isError`` result.

    ``handles`` is the registry. ``principal`` returns the authenticated
    principal of a request (by default the user Starlette's
    ``AuthenticationMiddleware`` set, as the session middleware does).
    Wrap the app with it (or list it as Starlette middleware): its check runs at each MCP
    endpoint inside the app, after the server's own authentication; with the session
    middleware too, the later-built (outer) one runs first there, as in the list.
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
        # At each MCP endpoint inside the app, where the server's auth has run (see _inside.py).
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
        transport: object = self.app
        return getattr(transport, "session_manager", None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self._inner_paths is not None and route_path(scope) in self._inner_paths):
            await self.app(scope, receive, send)
            return
        reply: ASGISendCallable = send  # type: ignore[assignment]  # our own answers, checked as typed events
        try:
            digest = await self._principal_digest(scope)
        except Exception:
            logger.exception("the principal hook failed")
            return await send_json(reply, 500, jsonrpc.error(None, INTERNAL_ERROR, "Internal error"), b"")
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
            return None  # the client is gone: nothing to answer
        if body is TOO_LARGE:
            limit = f"Request body too large (limit {self.max_body_size} bytes)"
            return await send_json(reply, 413, jsonrpc.error(None, INVALID_REQUEST, limit), self._retry_after)
        assert isinstance(body, bytes)
        parsed = jsonrpc.loads(body)  # as the session middleware reads it: a BOM, UTF-16 and UTF-32 too
        batch = type(parsed) is list
        messages: list[Any] = parsed if batch else [parsed]
        check = await check_request(self.handles, messages, context, tracer=self._tracer)
        if check.refused:
            return await self._answer(reply, headers, messages, batch, check)
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

    async def _answer(
        self, send: ASGISendCallable, headers: dict[bytes, bytes], messages: list[Any], batch: bool, check: RequestCheck
    ) -> None:
        """Answer a refused request; the era is the SDK's (a header present but not a 2025-era version, even empty)."""
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        era = Era.of(None if version is None else version.decode("latin-1"))
        answers = answer_elements(messages, check.answers, era=era, batch=batch, retryable=check.retryable)
        accept = headers.get(b"accept", b"")
        await send_answers(send, answers, batch=batch, accept=accept, retry_after=self._retry_after)
