"""Where the session work runs: at the MCP endpoint, inside the server's own authentication and routing.

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

from starlette.routing import compile_path
from starlette.types import ASGIApp, Scope

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

    __slots__ = ("_exact", "_templates")

    def __init__(self, paths: Iterable[str]) -> None:
        paths = set(paths)
        self._exact = frozenset(p for p in paths if "{" not in p)
        self._templates = tuple(compile_path(p)[0] for p in sorted(paths - self._exact))

    def __contains__(self, path: str) -> bool:
        return path in self._exact or any(template.match(path) for template in self._templates)


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
            "mcp-sessions: found no MCP endpoint inside %s, so the session methods are answered in front of the "
            "whole app: the app still judges each request first, but the user its authentication signs in is "
            "not seen (sessions are bound to the principal= hook's answer)",
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
