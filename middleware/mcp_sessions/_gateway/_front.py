"""The gateway's front door: what it checks of a request before any session work, and who sent it.

**Targets** (RFC 9112 §3.2). Only the origin form, ``/path?query``, is proxied: the upstream URL is the
configured upstream's scheme, host and port with the request's path and query as parts (``httpx.URL``),
never a string joined with what the client sent. ``OPTIONS *`` gets the 200 a server gives it; any other
target (the absolute form ``http://host/x``, the authority form, ``*``, anything that does not start with
``/``) gets 400. A path that two parsers may read as two paths is refused with 400, never normalised: a dot
segment (``.`` or ``..``, percent-encoded or not), an empty segment (``//``; a trailing slash is a path of
its own), a backslash, an encoded ``/`` or ``\\``, an encoded control character, a malformed
percent-escape, a ``#``. What is left means one path to every parser: the path the session pipeline
matches (uvicorn's ``scope["path"]``, the raw path percent-decoded) is the path the upstream gets.

The pipeline matches the MCP endpoint as the most lenient server routes it (:class:`RoutedPaths`): Express,
server-everything's framework, serves ``POST /MCP/`` at ``/mcp``, and a servlet container serves ``/mcp;x``
there, so the session work is done on every path such a server may take for its endpoint.

**Framing** (RFC 9112 §6.3): ``Content-Length`` beside ``Transfer-Encoding``, two different lengths, a
length that is not a number, a coding other than ``chunked``, and two ``Host`` headers (§3.2): 400, and the
connection closed.

**Who sent it.** The connection's peer is what the gateway adds to ``X-Forwarded-For``. A client's own
``X-Forwarded-*``, ``Forwarded`` and ``X-Real-IP`` reach the upstream only from a peer the operator
trusts (``forwarded_allow_ips``, uvicorn's option of that name); from it, uvicorn's own
``ProxyHeadersMiddleware`` also takes the client's address and scheme, which the create limit and the
logs then see.

**Host and Origin.** The upstream gets its own ``Host``, never the client's, so the gateway checks ``Host``
and ``Origin`` itself (:class:`HostCheck`), with the allow-lists and the rule of the ``mcp`` SDK's DNS-rebinding
protection.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Collection, Iterable
from typing import Final, NamedTuple
from urllib.parse import quote, unquote_to_bytes

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from .._pipeline import Rejection

PEER: Final = "mcp_sessions.gateway.peer"
"""The scope key of the connection's :class:`Peer`, set by :class:`GatewayFront`."""
LOCALHOST_HOSTS: Final = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOCALHOST_ORIGINS: Final = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")
# A space, a control, a non-ASCII byte, a fragment.
_OUTSIDE_TARGET: Final = re.compile(rb"[^\x21-\x7e]|#")
_ESCAPES: Final = re.compile(rb"(?:[^%]|%[0-9A-Fa-f]{2})*")
# Decoded: a control, a slash, a backslash.
_ENCODED_REFUSED: Final = re.compile(rb"[\x00-\x1f\x7f/\\]")
_DOT_SEGMENTS: Final = (b".", b"..")
_OPTIONS_ANSWER: Final = Rejection(200, ((b"content-length", b"0"),), b"", "options_asterisk")


class Peer(NamedTuple):
    """The connection's peer: its address, and whether it is a proxy the operator trusts."""

    address: str | None
    trusted: bool


class RoutedPaths(frozenset[str]):
    """MCP endpoint paths, matched as the most lenient server routes them: in any case, each segment's
    ``;`` parameters and a trailing slash ignored (see the module). ``in`` takes a request's decoded path."""

    def __new__(cls, paths: Iterable[str]) -> RoutedPaths:
        return super().__new__(cls, (_routed(path) for path in paths))

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and frozenset.__contains__(self, _routed(path))


def _routed(path: str) -> str:
    segments = (segment.partition(";")[0] for segment in path.lower().split("/"))
    return "/".join(segments).rstrip("/") or "/"


class StartupFailed(RuntimeError):
    """The gateway could not start (its first stdio process did not): the command says so in one line."""


def startup_failure(exc: BaseException) -> BaseException | None:
    """The ``StartupFailed`` in ``exc`` (raised in a task group, it comes in exception groups), else ``None``."""
    if isinstance(exc, StartupFailed):
        return exc
    inner = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc.__cause__]
    for each in inner:
        if each is not None and (found := startup_failure(each)) is not None:
            return found
    return None


class GatewayFront:
    """The gateway's outermost app: refuses what it may not forward (see the module), records the peer, and
    lets a trusted proxy name the client; then the session middleware, ``app``."""

    def __init__(self, app: ASGIApp, *, trusted: list[str]) -> None:
        """``trusted``: the proxies whose forwarded headers count, as :func:`trusted_proxies` returns them."""
        self.app = app
        self._trusted: Collection[str] = ()
        self._inner = app
        if trusted:
            from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

            # ASGI 3 either way, and the same protocol: uvicorn's types are its own.
            front = ProxyHeadersMiddleware(app, trusted_hosts=trusted)  # type: ignore[arg-type]
            self._trusted = front.trusted_hosts  # type: ignore[assignment]
            self._inner = front  # type: ignore[assignment]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = refusal(scope)
            if refused is not None:
                return await refused.send(send)
            client = scope.get("client")
            address = None if client is None else str(client[0])
            # In place, as uvicorn's ProxyHeadersMiddleware changes the client: its access log shows what the app saw.
            trusted = address is not None and address in self._trusted
            scope[PEER] = Peer(address, trusted)
        await self._inner(scope, receive, send)


def trusted_proxies(value: str | Collection[str] | None) -> list[str]:
    """The proxies ``forwarded_allow_ips`` trusts, as uvicorn reads them: IP addresses and networks (a string:
    comma-separated), or ``*`` for every peer; ``None`` or empty trusts none. Anything else is refused."""
    if value is None:
        return []
    listed = value.split(",") if isinstance(value, str) else value
    entries = []
    for entry in listed:
        if entry.strip():
            entries.append(entry.strip())
    if "*" in entries:
        return ["*"]
    for entry in entries:
        try:
            if "/" in entry:
                ipaddress.ip_network(entry)
            else:
                ipaddress.ip_address(entry)
        except ValueError:
            raise ValueError(
                f"forwarded_allow_ips takes IP addresses, networks (10.0.0.0/8) or '*', not {entry!r}"
            ) from None
    return entries


def raw_path_of(scope: Scope) -> bytes:
    """The request's path as the client sent it (``raw_path``; a server that gives none: the path, encoded)."""
    raw: bytes | None = scope.get("raw_path")
    if raw is not None:
        return raw
    return quote(scope["path"], safe="/;:@&=+$,!~*'()").encode()


def refusal(scope: Scope) -> Rejection | None:
    """The gateway's answer to a request it must not forward (see the module), else ``None``."""
    why = _framing(Headers(scope=scope))
    if why is not None:
        return _bad_request(why)
    raw = raw_path_of(scope)
    query = scope.get("query_string", b"")
    if raw == b"*":
        if scope["method"] == "OPTIONS" and not query:
            return _OPTIONS_ANSWER
        return _bad_request("only OPTIONS takes the asterisk target")
    why = _path_problem(raw)
    if why is None and _OUTSIDE_TARGET.search(query):
        why = "the query has a character no request target has"
    if why is None:
        return None
    return _bad_request(why)


def _path_problem(raw: bytes) -> str | None:
    """Why ``raw`` is not a path the gateway forwards, or ``None``."""
    if not raw.startswith(b"/"):
        return "only origin-form targets (/path?query) are served"
    if _OUTSIDE_TARGET.search(raw) or b"\\" in raw:
        return "the path has a character no path has"
    if b"//" in raw:
        return "the path has an empty segment (//)"
    if not _ESCAPES.fullmatch(raw):
        return "the path has a malformed percent-escape"
    for segment in raw.split(b"/"):
        decoded = unquote_to_bytes(segment)
        if decoded in _DOT_SEGMENTS:
            return "the path has a dot segment (. or ..), encoded or not"
        # The raw path has none of these: an escape made it.
        if _ENCODED_REFUSED.search(decoded):
            return "the path has an encoded slash, backslash or control character"
    return None


def _framing(headers: Headers) -> str | None:
    """Why a request's body framing (RFC 9112 §6.3) or its ``Host`` (§3.2) is ambiguous, or ``None``."""
    lengths = {value.strip() for value in headers.getlist("content-length")}
    codings = [value.strip().lower() for value in headers.getlist("transfer-encoding")]
    if len(headers.getlist("host")) > 1:
        return "more than one Host"
    if lengths and codings:
        return "Content-Length and Transfer-Encoding together"
    if codings not in ([], ["chunked"]):
        return "a Transfer-Encoding other than chunked"
    numeric = all(length.isascii() and length.isdigit() for length in lengths)
    if len(lengths) > 1 or not numeric:
        return "Content-Length must be one number"
    return None


def _bad_request(why: str) -> Rejection:
    """A plain-text 400 that closes the connection: a client that sent this may have sent more that means nothing."""
    body = f"Bad Request: {why}".encode()
    headers = (
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    )
    return Rejection(400, headers, body, "bad_request")


class HostCheck:
    """The gateway's own DNS-rebinding protection: ``Host`` and ``Origin`` against allow-lists.

    As the ``mcp`` SDK checks them: a ``Host`` must be on its list (``"example.com:*"`` allows any
    port), an ``Origin``, when there is one, on its. ``None`` is the SDK's default for a server on a
    loopback address (localhost names only); an empty list checks nothing.
    """

    def __init__(self, allowed_hosts: Collection[str] | None, allowed_origins: Collection[str] | None) -> None:
        if isinstance(allowed_hosts, str) or isinstance(allowed_origins, str):
            raise TypeError("allowed_hosts and allowed_origins take collections of strings, not one string")
        if allowed_hosts is None:
            allowed_hosts = LOCALHOST_HOSTS
        if allowed_origins is None:
            allowed_origins = LOCALHOST_ORIGINS
        self._hosts = frozenset(allowed_hosts)
        self._origins = frozenset(allowed_origins)

    def check(self, headers: Iterable[tuple[bytes, bytes]]) -> Rejection | None:
        """The gateway's refusal of a request from a host or an origin it does not serve, else ``None``."""
        request = Headers(raw=list(headers))
        host = request.get("host")
        origin = request.get("origin")
        if self._hosts and (host is None or not _allowed(host, self._hosts)):
            return _plain(421, "Invalid Host header", "invalid_host")
        if self._origins and origin is not None and not _allowed(origin, self._origins):
            return _plain(403, "Invalid Origin header", "invalid_origin")
        return None


def _allowed(value: str, allowed: frozenset[str]) -> bool:
    """Whether ``value`` is on the list: as it is, or as ``base:`` and anything, for a ``base:*`` on it."""
    if value in allowed:
        return True
    bases = (entry[:-1] for entry in allowed if entry.endswith(":*"))
    return any(value.startswith(base) for base in bases)


def _plain(status: int, text: str, reason: str) -> Rejection:
    """A plain-text answer, as the SDK's transport security sends its refusals."""
    body = text.encode()
    headers = ((b"content-length", str(len(body)).encode()),)
    return Rejection(status, headers, body, reason)


class QueryDropped(logging.Filter):
    """uvicorn's access log line without the query string, where OAuth codes and legacy SSE session ids travel.

    A filter on the ``uvicorn.access`` logger: its records' arguments are the client, the method, the path
    with its query, the HTTP version and the status.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            path = args[2].partition("?")[0]
            record.args = (args[0], args[1], path, args[3], args[4])
        return True
