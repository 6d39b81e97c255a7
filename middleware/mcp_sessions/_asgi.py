"""What both middlewares share: ASGI plumbing (the request's headers, the bounded body read and its replay,
the answers sent directly: refusals, local results, bare statuses); and where the session work runs, at the
MCP endpoint, inside the server's own authentication and routing.

``MCPSessionMiddleware(app)`` is the line users write, around the whole app. The
``mcp`` SDK (and fastmcp) put their bearer auth *inside* that app: Starlette's
``AuthenticationMiddleware`` on the app, ``RequireAuthMiddleware`` on the MCP
route, and the transport's own ``Host``/``Origin`` settings on the transport. In
front of all of it, the middleware would answer ``sessions/create`` to a
request the server refuses, and see no principal. So it finds the MCP endpoints
in the app (routes and mounts of Starlette, FastAPI, ``MCPServer`` and fastmcp
apps, through any middleware that keeps its inner app as ``.app``) and places
its session work right in front of each transport app, where the server's auth
has run and its transport's checks are next. Anything else keeps the outer form.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._wire import jsonrpc
from ._wire.protocol import MCP_SESSION_ID_HEADER

DEFAULT_MAX_BODY_SIZE: Final = 4 * 1024 * 1024
"""The largest body either middleware reads by default (``max_body_size``)."""
TOO_LARGE: Final = object()
_CONFLICTING_HEADER: Final = b"\x00conflicting"


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower case, as ASGI gives names), or ``None``."""
    return next((value for key, value in headers if key == name), None)


def headers_of(scope: Scope) -> dict[bytes, bytes]:
    """The request headers; the first of a repeated header wins, as in Starlette."""
    raw_headers = list(scope["headers"])  # ASGI allows any iterable
    headers = dict(reversed(raw_headers))
    repeated = len(headers) < len(raw_headers)
    if repeated:
        session_ids = {value for name, value in raw_headers if name == MCP_SESSION_ID_HEADER}
        if len(session_ids) > 1:
            # Two different Mcp-Session-Id headers: a proxy may route on one and we
            # would check the other, so the pair matches no session.
            headers[MCP_SESSION_ID_HEADER] = _CONFLICTING_HEADER
    return headers


async def read_body(receive: Receive, declared_length: bytes | None, limit: int) -> bytes | object | None:
    """The whole body; :data:`TOO_LARGE` over ``limit``; ``None`` when the client went away."""
    if declared_length is not None and declared_length.isdigit() and int(declared_length) > limit:
        return TOO_LARGE
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None  # http.disconnect: the client is gone, nothing to forward
        body += message.get("body", b"")
        if len(body) > limit:
            return TOO_LARGE
        if not message.get("more_body", False):
            return bytes(body)


async def too_large(send: Send, limit: int) -> None:
    """413, with a JSON-RPC error body: the request was never read to the end."""
    reject = jsonrpc.invalid_request(None, f"Request body too large (limit {limit} bytes)")
    await send_json(send, 413, reject, b"")


class Replay:
    """A ``receive`` that hands the app the body once (possibly rewritten), then the real ``receive``.

    So ``http.disconnect`` still reaches the app after the body.
    """

    def __init__(self, body: bytes, receive: Receive) -> None:
        self.body: bytes | None = body
        self.receive = receive

    async def __call__(self) -> Message:
        if self.body is None:
            return await self.receive()
        body, self.body = self.body, None
        return {"type": "http.request", "body": body, "more_body": False}

    def rewrite(self, body: bytes) -> None:
        """Replay ``body`` instead, if the app has not read the original yet."""
        if self.body is not None:
            self.body = body


async def send_json(send: Send, status: int, payload: Any, retry_after: bytes) -> None:
    """``payload`` as an ``application/json`` response."""
    body = jsonrpc.dumps(payload)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status in (503, 429):
        headers.append((b"retry-after", retry_after))
    await _send_response(send, status, headers, body)


async def send_result(send: Send, payload: Any, *, accept: bytes) -> None:
    """A successful answer, as JSON, or as one SSE event to a client that accepts only a stream."""
    accept = accept.lower()
    if b"application/json" in accept or b"text/event-stream" not in accept:
        return await send_json(send, 200, payload, b"")
    body = sse_event(payload)
    headers = [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache, no-transform"),
        (b"content-length", str(len(body)).encode()),
    ]
    await _send_response(send, 200, headers, body)


def sse_event(payload: Any) -> bytes:
    """``payload`` as one SSE ``message`` event, as the ``mcp`` SDK writes one."""
    return b"event: message\r\ndata: " + jsonrpc.dumps(payload) + b"\r\n\r\n"


async def send_status(send: Send, status: int, retry_after: bytes) -> None:
    """A response with no body: ``status``, and ``Retry-After`` with a 503."""
    headers = [(b"content-length", b"0")]
    if status == 503:
        headers.append((b"retry-after", retry_after))
    await _send_response(send, status, headers, b"")


async def _send_response(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers, "trailers": False})
    await send({"type": "http.response.body", "body": body, "more_body": False})


# -- where the session work runs: the MCP endpoints inside the app

logger = logging.getLogger("mcp_sessions")

_MAX_DEPTH = 64  # an app graph deeper than this is not one a person wrote


def is_transport(app: object) -> bool:
    """Whether ``app`` is an MCP Streamable HTTP transport app (the SDK's or fastmcp's): it has a session manager."""
    return callable(app) and hasattr(app, "session_manager")


@dataclass(eq=False)
class Endpoint:
    """One MCP server's transport app, the paths it is routed at, and where the app graph holds it."""

    transport: ASGIApp
    holders: list[object] = field(default_factory=list)
    """The objects whose ``app`` attribute is the transport app (a route, a mount, a route's auth wrapper)."""
    paths: list[str] = field(default_factory=list)
    """Every path inside the app routed to it (mount prefixes and the route's path)."""


def route_path(scope: Scope) -> str:
    """The path as Starlette routes it: without the ``root_path`` a proxy prefix or a ``Mount`` adds."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class EndpointPaths:
    """The paths routed to MCP endpoints, as Starlette matches them: a path template (``/{tenant}/mcp``)
    matches every concrete path its route does, so a request there is an endpoint's, not an ordinary route's."""

    def __init__(self, paths: Iterable[str]) -> None:
        paths = set(paths)
        self._exact = frozenset(p for p in paths if "{" not in p)
        self._templates = tuple(compile_path(p)[0] for p in sorted(paths - self._exact))

    def __contains__(self, path: str) -> bool:
        return path in self._exact or any(template.match(path) for template in self._templates)


class AtEndpoints:
    """What both middlewares share: their work runs at each MCP endpoint inside the app they wrap.

    The instance a user builds finds the endpoints (:meth:`place`) and puts a copy of its work in front of
    each transport app; it passes the requests routed there on, for the copy to serve, and serves the others
    itself (:meth:`passes`). A copy looks like the transport it wraps (``session_manager``), so that a
    middleware placed later goes in front of it, as the later-built middleware of a Starlette list is the
    outer one.
    """

    app: ASGIApp
    at_endpoint: bool = False
    """Whether this instance is the copy placed in front of a transport app."""
    _inner_paths: EndpointPaths | None = None

    def place(self, make: Callable[[ASGIApp], ASGIApp]) -> bool:
        """Put ``make(transport)`` in front of each MCP transport inside ``self.app``; whether it found one
        (wrapped around the transport app itself, this instance is already where its work belongs)."""
        if is_transport(self.app):
            return False
        self._inner_paths = place_at_endpoints(self.app, make, placed=lambda found: isinstance(found, type(self)))
        return self._inner_paths is not None

    def passes(self, scope: Scope) -> bool:
        """Whether a request is not this instance's to serve: not HTTP, or routed to an endpoint a copy serves."""
        inner = self._inner_paths
        return scope["type"] != "http" or (inner is not None and route_path(scope) in inner)

    @property
    def session_manager(self) -> object:
        """Placed at an MCP endpoint: the transport's session manager (a middleware placed later goes in front)."""
        if not self.at_endpoint:
            raise AttributeError("session_manager")
        return getattr(self.app, "session_manager", None)  # the transport's, or what was placed in front of it


def place_at_endpoints(
    app: object, make: Callable[[ASGIApp], ASGIApp], *, placed: Callable[[object], bool]
) -> EndpointPaths | None:
    """Put ``make(transport)`` in front of each MCP transport inside ``app``; the paths routed to them.

    ``None`` when ``app`` has no endpoint to be found: the caller keeps the outer form, and a warning says so. What
    ``make`` returns should look like a transport (a ``session_manager``), so that a middleware
    placed later goes in front of it, as the later-built middleware of a Starlette list is the outer one.
    ``placed`` says whether an app is already the session work of another middleware: finding one is an
    error, as two would then answer every session method.
    """
    found: dict[int, Endpoint] = {}  # one per transport app (several paths may route to one)
    _walk(app, "", found, set(), placed, 0)
    if not found:  # said once, at startup: what the middleware cannot read of such a server
        logger.warning(
            "mcp-sessions: found no MCP endpoint inside %s, so the session methods are answered in "
            "front of the whole app: the app still judges each request first, but the user its "
            "authentication signs in is not seen (sessions are bound to the principal= hook's "
            "answer)",
            type(app).__qualname__,
        )
        return None
    for endpoint in found.values():
        inner = make(endpoint.transport)
        for holder in endpoint.holders:  # a route's, a mount's or a middleware's public .app: what a request reaches
            holder.app = inner  # type: ignore[attr-defined]  # every holder was found through its .app
    paths = sorted({path for endpoint in found.values() for path in endpoint.paths})
    # What was found, said once: an endpoint the search cannot see (behind an ASGI app that is not
    # Starlette's) is missing from this line, and its requests are an ordinary route's.
    logger.info("mcp-sessions: the session work runs at the MCP endpoints %s", ", ".join(paths))
    return EndpointPaths(paths)


def _walk(
    node: object, prefix: str, found: dict[int, Endpoint], seen: set[int], placed: Callable[[object], bool], depth: int
) -> None:
    if id(node) in seen or depth > _MAX_DEPTH or hasattr(node, "path"):  # a route is _route's to read
        return
    seen.add(id(node))
    routes = getattr(node, "routes", None)
    if isinstance(routes, list):  # a Starlette or FastAPI app, a Router
        for route in routes:
            _route(route, prefix, found, seen, placed, depth + 1)
    elif (inner := getattr(node, "app", None)) is not None:  # a middleware around the app
        _walk(inner, prefix, found, seen, placed, depth + 1)


def _route(
    route: object, prefix: str, found: dict[int, Endpoint], seen: set[int], placed: Callable[[object], bool], depth: int
) -> None:
    path = getattr(route, "path", "")  # a Host route has none: it routes by host, under the same prefix
    if not isinstance(path, str):
        return
    holder, target = route, getattr(route, "app", None)
    for _ in range(_MAX_DEPTH):  # the route's own middleware and auth wrappers, down to what they wrap
        if target is None:
            return
        if placed(target):
            raise ValueError(
                f"the MCP endpoint at {prefix + path!r} already has an MCPSessionMiddleware: wrap the app once"
            )
        if is_transport(target):
            endpoint = found.setdefault(id(target), Endpoint(target))
            endpoint.holders.append(holder)
            endpoint.paths.append(prefix + path)
            return
        if isinstance(getattr(target, "routes", None), list):  # a mounted app: its routes, under the mount's path
            _walk(target, prefix + path, found, seen, placed, depth + 1)
            return
        holder, target = target, getattr(target, "app", None)
