"""What the benchmarks share: the apps under test, the requests, the statistics, the machine.

Not a benchmark itself: ``bench_asgi.py``, ``bench_uvicorn.py`` and ``bench_sse.py``
import it (they run as scripts, so this directory is on ``sys.path``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import importlib.metadata
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_sessions import get_session

ROOT = Path(__file__).resolve().parent.parent
SECRET = "benchmark-secret-benchmark-secret-0123456789"
App = ASGIApp
Request = tuple[Scope, bytes]

PROTOCOL_VERSION = "2026-07-28"
SESSION_META_KEY = "io.modelcontextprotocol/session"
NAME_HEADERS = [(b"mcp-method", b"tools/call"), (b"mcp-name", b"echo")]
COOKIE_NAME = "session"
LIBRARIES = (
    "mcp-sessions",
    "mcp",
    "starlette",
    "uvicorn",
    "h11",
    "httpx",
    "opentelemetry-api",
    "opentelemetry-sdk",
    "opentelemetry-instrumentation-asgi",
    "itsdangerous",
    "pyjwt",
)


class PassThrough:
    """The control: an ASGI wrapper that does nothing."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


FLOOR_SESSION: ContextVar[Any] = ContextVar("floor_session", default=None)
# How an answer to request N opens, as the mcp SDK and any compact serializer write it.
_OPENING = b'{"jsonrpc":"2.0","id":%d,"result":{'


def _echo_member(token: str) -> bytes:
    """The echo, as the ``_meta`` member that carries it."""
    return b'"%s":{"sessionId":"%s"}' % (SESSION_META_KEY.encode(), token.encode())


def _spliced(raw: bytes, request_id: object, member: bytes) -> bytes | None:
    """``raw``, a JSON-RPC message, with ``member`` in its result's ``_meta``, if it answers ``request_id``.

    As the wire puts the echo: merged into any ``_meta`` the server set (the ``mcp`` SDK's results end
    with one, its ``serverInfo``), never in an error. ``None`` when nothing is added. The bytes decide
    alone when they open as the SDK writes an answer to ``request_id`` and spell no ``_meta``, even
    escaped: a new ``_meta`` goes first in the result. Anything else is parsed: the member goes last
    in a ``_meta`` that ends the result and the message (the SDK's shape), or the message is written again.
    """
    if type(request_id) is int:
        opening = _OPENING % request_id
        if raw.startswith(opening) and b'"_meta"' not in raw and b"\\u" not in raw:
            at = len(opening)
            return raw[:at] + b'"_meta":{' + member + (b"}" if raw[at : at + 1] == b"}" else b"},") + raw[at:]
    try:
        message = json.loads(raw)
    except ValueError:
        return None
    if type(message) is not dict or message.get("id") != request_id or type(message.get("result")) is not dict:
        return None
    result = message["result"]
    meta = result.get("_meta")
    ends_in_meta = next(reversed(message)) == "result" and next(reversed(result), None) == "_meta"  # the SDK's shape
    if ends_in_meta and type(meta) is dict and meta and raw.endswith(b"}}}"):
        return raw[:-3] + b"," + member + b"}}}"
    result["_meta"] = {**(meta if type(meta) is dict else {}), **json.loads(b"{%s}" % member)}
    return json.dumps(message, separators=(",", ":")).encode()


def _spliced_event(chunk: bytes, request_id: object, member: bytes) -> bytes | None:
    """An event stream's chunk with ``member`` spliced into the event that answers ``request_id``, if it holds it."""
    if b'"result"' not in chunk and b"\\" not in chunk:
        return None  # no result member, even escaped: a notification, a request, an error
    start = chunk.find(b"data: ")
    if start < 0:
        return None
    start += len(b"data: ")
    end = chunk.find(b"\n", start)
    end = len(chunk) if end < 0 else end - (chunk[end - 1 : end] == b"\r")
    spliced = _spliced(chunk[start:end], request_id, member)
    return None if spliced is None else chunk[:start] + spliced + chunk[end:]


async def _call_with_echo(
    app: App, scope: Scope, receive: Receive, send: Send, body: bytes, request_id: object, echo: bytes | None
) -> None:
    """Call ``app`` with ``body`` replayed, and ``echo`` (a ``_meta`` member) spliced into its answer to
    ``request_id``, fixing ``Content-Length``; an event stream passes chunk by chunk, the echo spliced into
    the event that answers."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    start: Message | None = None
    held: list[bytes] = []
    streaming = False  # an event stream: each chunk passes at once, the echo spliced into the one that answers

    async def splice(message: Message) -> None:
        nonlocal start, streaming, echo
        if message["type"] == "http.response.start":
            headers = message.get("headers", ())
            if (b"content-type", b"text/event-stream") in headers:
                streaming = True
                await send({**message, "headers": [(k, v) for k, v in headers if k != b"content-length"]})
                return
            start = message
            return
        if streaming and message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            if echo is not None and (spliced := _spliced_event(chunk, request_id, echo)) is not None:
                message = {**message, "body": spliced}
                echo = None
            await send(message)
            return
        if message["type"] != "http.response.body" or start is None:
            await send(message)
            return
        held.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        raw = b"".join(held)
        if echo is not None:
            raw = _spliced(raw, request_id, echo) or raw
        headers = [(k, v) for k, v in start.get("headers", ()) if k != b"content-length"]
        headers.append((b"content-length", str(len(raw)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": raw, "more_body": False})

    await app(scope, replay, splice)


class SessionFloor:
    """The least a session layer must do: the reference the middleware's cost is read against.

    Reads the body, parses it once with the standard library's ``json``, looks
    the (already verified) session id up in a dict, sets a context variable,
    replays the body, and splices the session echo into the answer's
    ``result._meta`` as the wire puts it (merged into any ``_meta`` the server
    set: the ``mcp`` SDK's results end with one), fixing ``Content-Length``; an
    event stream passes chunk by chunk, the echo spliced into the event that
    answers (:func:`_call_with_echo`). No token check, no store, no error
    handling: what any session layer must pay before doing anything right.
    """

    def __init__(self, app: App, sessions: dict[str, Any]) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = await read_whole(receive)
        parsed = json.loads(body)
        meta = parsed.get("params", {}).get("_meta", {}).get(SESSION_META_KEY)
        token = meta["sessionId"] if meta else None
        session = self.sessions[token] if token is not None else None
        echo = _echo_member(token) if token else None
        context = FLOOR_SESSION.set(session)
        try:
            await _call_with_echo(self.app, scope, receive, send, body, parsed.get("id"), echo)
        finally:
            FLOOR_SESSION.reset(context)


# What the checked floor allows, as the mcp SDK's DNS-rebinding protection allows a loopback server by default.
LOCAL_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOCAL_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")
# The protocol versions whose Mcp-Session-Id is the server's transport session, not the data-layer session.
LEGACY_VERSIONS = frozenset({b"2024-11-05", b"2025-03-26", b"2025-06-18", b"2025-11-25"})
MAX_BODY_SIZE = 4 * 1024 * 1024
# The member names on the path to the session (params, _meta, the session member, its id and state): a body
# that spells one twice could name one session to this parser and another to a parser that keeps the first.
_PATH_NAMES = re.compile(
    b'"(?:params|_meta|%s|sessionId|state)"' % re.escape(SESSION_META_KEY.encode()),
)


def _repeats_a_path_name(body: bytes) -> bool:
    found = _PATH_NAMES.findall(body)
    return len(found) != len(set(found))


def _allowed(patterns: Sequence[str]) -> tuple[frozenset[bytes], tuple[bytes, ...]]:
    """The exact values, and the prefixes of the ``base:*`` patterns (``base:`` then any port), as bytes."""
    exact = frozenset(p.encode() for p in patterns if not p.endswith(":*"))
    return exact, tuple(p[:-1].encode() for p in patterns if p.endswith(":*"))


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An ``object_pairs_hook`` that refuses an object with a repeated member name."""
    members = dict(pairs)
    if len(members) != len(pairs):
        raise ValueError("repeated member name")
    return members


def _refusal(status: int, code: int, text: str) -> tuple[Message, Message]:
    """The two messages of a fixed JSON-RPC error answer."""
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": text}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return (
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": body, "more_body": False},
    )


TOO_LARGE = _refusal(413, -32600, "Request body too large")
INVALID_HOST = _refusal(421, -32600, "Invalid Host header")
INVALID_ORIGIN = _refusal(403, -32600, "Invalid Origin header")
NOT_JSON = _refusal(400, -32700, "Parse error")
INVALID = _refusal(400, -32600, "Invalid request")
HEADER_MISMATCH = _refusal(400, -32600, "Mcp-Session-Id does not match the session")
NOT_FOUND = _refusal(404, -32001, "Session not found")


def token_claims(token: str) -> dict[str, Any]:
    """The claims of a session id (a JWS): its payload, as a check that already verified it returned it."""
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


class ClaimsOnFirstSight(dict[str, dict[str, Any]]):
    """A verified-claims cache that takes every session id it is asked for as verified, the first time."""

    def __missing__(self, token: str) -> dict[str, Any]:
        claims = self[token] = token_claims(token)
        return claims


class CheckedSessionFloor:
    """The session floor plus exactly the checks a session-bearing call needs: the checked reference.

    What :class:`SessionFloor` does (read the body, parse it once with ``json``,
    set a context variable, replay the body, splice the echo into the response
    and fix ``Content-Length``), and on top, each as cheaply as a careful hand
    would write it, the checks the middleware must make on a session-bearing
    ``tools/call``, and no others:

    - the request's own: a header dict built from the scope (the first of a
      repeated header wins); method ``POST``, the MCP path and a JSON
      ``Content-Type`` (anything else passes to the app untouched); the body
      read with a bound (413 above ``max_body_size``, by its declared length
      or as it arrives);
    - the server's own guard: ``Host`` in the allowed set and ``Origin``, if
      sent, in its set (loopback names with any port by default, as the
      ``mcp`` SDK's DNS-rebinding protection allows them): 421 and 403;
    - repeated member names: a body with a backslash, or that spells a
      member name on the path to the session (``params``, ``_meta``, the
      session member, ``sessionId``, ``state``) more than once, is parsed with an
      ``object_pairs_hook`` that refuses a repeated name (400);
    - the session id: looked up in ``verified``, a dict of claims already
      verified (the cache of verified tokens; a miss is "not found"), its
      ``exp`` checked against ``time.time()`` with ``leeway``, and an
      ``Mcp-Session-Id`` header, on a per-request protocol version (the
      header names the transport session under a handshake version), compared
      with it;
    - the principal: a session is refused unless the principal digest its
      claims bind (``pbh``, or none) is the caller's (an HMAC-SHA256 of
      ``scope["user"].identity`` under ``principal_key``, or none without an
      authenticated user): neither another's session nor, once signed in, an
      anonymous one;
    - the endpoint: a session minted at an endpoint (``mep``) is refused at any other path;
    - revocation and idle expiry: one lookup of the session's ``sid`` in
      ``revoked``, a dict of revoked or idle session ids (what the memory
      store's ``touch`` stands for).

    A refusal is a fixed JSON-RPC error. No store, no token signature (the
    cache has it), no telemetry, no fallbacks: what a hand-written session
    layer that checks what it must pays.
    """

    def __init__(
        self,
        app: App,
        verified: dict[str, dict[str, Any]],
        *,
        revoked: dict[str, str] | None = None,
        principal_key: bytes = SECRET.encode(),
        leeway: float = 0.0,
        path: str = "/mcp",
        max_body_size: int = MAX_BODY_SIZE,
        allowed_hosts: Sequence[str] = LOCAL_HOSTS,
        allowed_origins: Sequence[str] = LOCAL_ORIGINS,
    ) -> None:
        self.app = app
        self.verified = verified
        self.revoked = {} if revoked is None else revoked
        self.principal_key = principal_key
        self.leeway = leeway
        self.path = path
        self.max_body_size = max_body_size
        self.hosts, self.host_prefixes = _allowed(allowed_hosts)
        self.origins, self.origin_prefixes = _allowed(allowed_origins)

    def caller(self, scope: Scope) -> str | None:
        """The caller's principal digest: a keyed digest of the authenticated user's identity, if any."""
        user = scope.get("user")
        if user is None or not user.is_authenticated:
            return None
        return hmac.new(self.principal_key, user.identity.encode(), hashlib.sha256).hexdigest()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(reversed(scope["headers"]))  # the first of a repeated header wins
        content_type = headers.get(b"content-type")
        if (
            scope["method"] != "POST"
            or scope["path"] != self.path
            or content_type is None
            or not content_type.lower().startswith(b"application/json")
        ):
            await self.app(scope, receive, send)
            return
        host = headers.get(b"host", b"")
        if host not in self.hosts and not host.startswith(self.host_prefixes):
            await _answer(send, INVALID_HOST)
            return
        origin = headers.get(b"origin")
        if origin is not None and origin not in self.origins and not origin.startswith(self.origin_prefixes):
            await _answer(send, INVALID_ORIGIN)
            return
        limit = self.max_body_size
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _answer(send, TOO_LARGE)
            return
        chunks = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client is gone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _answer(send, TOO_LARGE)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            if 92 in body or _repeats_a_path_name(body):  # a backslash, or a name on the session's path twice
                parsed = json.loads(body, object_pairs_hook=_unique_names)
            else:
                parsed = json.loads(body)
        except ValueError:
            await _answer(send, NOT_JSON)
            return
        try:
            meta = parsed.get("params", {}).get("_meta", {}).get(SESSION_META_KEY)
            token = meta["sessionId"] if meta else None
        except (AttributeError, TypeError, KeyError):
            await _answer(send, INVALID)
            return
        claims = None
        if token is not None:
            if type(token) is not str:
                await _answer(send, INVALID)
                return
            header = headers.get(b"mcp-session-id")
            version = headers.get(b"mcp-protocol-version")  # absent: the handshake era
            if (
                header is not None
                and header != token.encode()
                and version is not None
                and version not in LEGACY_VERSIONS
            ):
                await _answer(send, HEADER_MISMATCH)
                return
            try:
                claims = self.verified[token]
            except KeyError:
                await _answer(send, NOT_FOUND)
                return
            minted_at = claims.get("mep")
            if (
                claims["exp"] + self.leeway <= time.time()
                or claims.get("pbh") != self.caller(scope)
                or (minted_at is not None and minted_at != scope["path"])
                or claims["sid"] in self.revoked
            ):
                await _answer(send, NOT_FOUND)
                return
        echo = _echo_member(token) if token else None
        context = FLOOR_SESSION.set(claims)
        try:
            await _call_with_echo(self.app, scope, receive, send, body, parsed.get("id"), echo)
        finally:
            FLOOR_SESSION.reset(context)


async def _answer(send: Send, refusal: tuple[Message, Message]) -> None:
    start, body = refusal
    await send(start)
    await send(body)


def read_session(scope: Scope) -> None:
    """What the tool does with its session: Starlette's cookie session if there is one, else this library's."""
    if "session" in scope:
        HTTPConnection(scope).session.get("conversation")
    elif get_session() is None:
        FLOOR_SESSION.get()


def build_mcp_app() -> Any:
    """The bare ``MCPServer`` app (JSON responses) with one tool, ``echo``, that reads its session."""
    server = MCPServer("bench")

    @server.tool()
    async def echo(text: str, ctx: Context) -> str:
        request = ctx.request_context.request
        if request is not None:
            read_session(request.scope)
        return text

    return server.streamable_http_app(streamable_http_path="/mcp", json_response=True)


TRIVIAL_RESULT = json.dumps(
    {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "hello"}], "isError": False}},
    separators=(",", ":"),
).encode()
# Any other method (the middleware's probe among them) is one the benchmarks' servers do not know.
METHOD_NOT_FOUND = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"Method not found"}}'
_TRIVIAL_ANSWERS = {
    answer_body: [(b"content-type", b"application/json"), (b"content-length", str(len(answer_body)).encode())]
    for answer_body in (TRIVIAL_RESULT, METHOD_NOT_FOUND)
}


async def read_whole(receive: Receive) -> bytes:
    """The request's body, read to its end."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_not_found(send: Send) -> None:
    """Answer "method not found", as a server that does not know the method does."""
    await send({"type": "http.response.start", "status": 200, "headers": _TRIVIAL_ANSWERS[METHOD_NOT_FOUND]})
    await send({"type": "http.response.body", "body": METHOD_NOT_FOUND, "more_body": False})


async def trivial_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The least an MCP server can do: read the body, read the session, answer a fixed ``tools/call`` result
    (and "method not found" to any other method)."""
    if scope["type"] != "http":
        return
    body = await read_whole(receive)
    read_session(scope)
    if b'"tools/call"' not in body:
        return await send_not_found(send)
    await send({"type": "http.response.start", "status": 200, "headers": _TRIVIAL_ANSWERS[TRIVIAL_RESULT]})
    await send({"type": "http.response.body", "body": TRIVIAL_RESULT, "more_body": False})


async def run_lifespan(app: App) -> Callable[[], Awaitable[None]]:
    """Start ``app``'s lifespan; returns the coroutine function that shuts it down."""
    started, stop = asyncio.Event(), asyncio.Event()
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await queue.put({"type": "lifespan.startup"})

    async def receive() -> Message:
        message = await queue.get()
        return message

    async def send(message: Message) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()
        elif message["type"] == "lifespan.shutdown.complete":
            stop.set()

    async def lifespan() -> None:
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)

    task = asyncio.create_task(lifespan())
    await started.wait()

    async def shutdown() -> None:
        await queue.put({"type": "lifespan.shutdown"})
        await stop.wait()
        await task

    return shutdown


class Lifespans:
    """The lifespans a benchmark started, shut down together at its end (last started, first shut down).

    The middleware places its session work inside the app it wraps (at the MCP
    endpoint), so an ``MCPServer`` app it wraps is no longer the bare app: each
    middleware measured gets an app of its own (:meth:`own_mcp_app`).
    """

    def __init__(self) -> None:
        self._stops: list[Callable[[], Awaitable[None]]] = []

    async def started(self, app: App) -> App:
        """``app``, its lifespan started."""
        self._stops.append(await run_lifespan(app))
        return app

    async def own_mcp_app(self, wrap: Callable[[Any], App]) -> App:
        """``wrap`` around a new ``MCPServer`` app (:func:`build_mcp_app`), the lifespan started through it."""
        return await self.started(wrap(build_mcp_app()))

    async def shutdown(self) -> None:
        while self._stops:
            await self._stops.pop()()


def http_headers(raw: bytes, extra_headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"content-length", str(len(raw)).encode()),
        (b"mcp-protocol-version", PROTOCOL_VERSION.encode()),
        *extra_headers,
    ]


def request(body: dict[str, Any], extra_headers: Sequence[tuple[bytes, bytes]] = ()) -> Request:
    """An ASGI HTTP scope for ``POST /mcp`` and its body."""
    raw = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": http_headers(raw, extra_headers),
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    return scope, raw


async def call(
    app: App, scope: Scope, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> tuple[int, bytes]:
    """One request, called directly; returns the status and the body (and fills ``headers`` if given)."""
    sent = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            if headers is not None:
                headers.extend(message.get("headers", ()))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(dict(scope, headers=list(scope["headers"]), state={}), receive, send)
    return status, b"".join(chunks)


def tools_call(meta_extra: dict[str, Any], request_id: int = 7) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": "echo",
            "arguments": {"text": "hello"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
                **meta_extra,
            },
        },
    }


def create_body() -> dict[str, Any]:
    """A 2026-07-28 ``sessions/create``, with the envelope every 2026 request carries."""
    envelope = {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "sessions/create", "params": {"_meta": envelope}}


CREATE_HEADERS = [(b"mcp-method", b"sessions/create")]


def session_token(status: int, raw: bytes) -> str:
    """The session id in a ``sessions/create`` answer."""
    assert status == 200, raw
    token: str = json.loads(raw)["result"]["session"]["sessionId"]
    return token


def plain_body() -> dict[str, Any]:
    return tools_call({})


def session_body(token: str) -> dict[str, Any]:
    return tools_call({SESSION_META_KEY: {"sessionId": token}})


def session_headers(token: str) -> list[tuple[bytes, bytes]]:
    return [*NAME_HEADERS, (b"mcp-session-id", token.encode())]


async def create_session(app: App) -> str:
    """A session created through ``app`` (the middleware answers ``sessions/create`` itself)."""
    return session_token(*await call(app, *request(create_body(), CREATE_HEADERS)))


# -- statistics ---------------------------------------------------------------------


def median_half_width(values: Sequence[float]) -> float:
    """Half the width of the distribution-free 95% confidence interval of the median (order statistics)."""
    ordered = sorted(values)
    n = len(ordered)
    if n < 6:
        return (ordered[-1] - ordered[0]) / 2
    spread = 0.98 * math.sqrt(n)  # 1.96 standard deviations of a Binomial(n, 1/2), halved
    low = max(math.floor(n / 2 - spread), 0)
    high = min(math.ceil(n / 2 + spread), n - 1)
    return (ordered[high] - ordered[low]) / 2


def difference_half_width(a: Sequence[float], b: Sequence[float]) -> float:
    """Approximate 95% half-width of the difference of two independent medians."""
    return math.hypot(median_half_width(a), median_half_width(b))


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


# Each process has a memory layout and hash seed of its own, and one process's luck with them moved
# the MCPServer's added cost by 10 µs from one run of the same code to the next: the ASGI benchmarks
# measure in a few processes, one after another, and pool the samples.
PROCESSES = 3


def in_processes(script: str, args: Sequence[str], processes: int) -> list[Any]:
    """What each of ``processes`` runs of ``script``, one after another, wrote to its ``--samples-out``."""
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        for index in range(processes):
            out = Path(folder) / f"{index}.json"
            command = [sys.executable, script, *args, "--samples-out", str(out)]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            runs.append(json.loads(out.read_text()))
    return runs


def pooled_samples(runs: Sequence[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Each case's samples from every run, in one list."""
    return {name: [value for run in runs for value in run[name]] for name in runs[0]}


# -- the machine --------------------------------------------------------------------


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def library_versions() -> dict[str, str]:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def code_under_test() -> str:
    """The commit, whether the middleware's sources differ from it, and a digest of those sources."""
    sources = sorted((ROOT / "middleware" / "mcp_sessions").rglob("*.py"))
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "middleware"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"sources sha256 {digest.hexdigest()[:12]}"
    state = " with uncommitted changes to middleware/" if dirty else ""
    return f"commit {commit}{state}, middleware sources sha256 {digest.hexdigest()[:12]}"


def machine() -> dict[str, Any]:
    """What the numbers ran on, for the report."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 1
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "system": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "libraries": library_versions(),
        "code": code_under_test(),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    if path is not None:
        Path(path).write_text(json.dumps(payload, indent=2) + "\n")


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> None:
    """A plain-text table, columns separated by at least two spaces (the tests split rows on them)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        out = [
            str(cell).rjust(width) if align else str(cell).ljust(width)
            for cell, width, align in zip(cells, widths, right, strict=True)
        ]
        return "  ".join(out).rstrip()

    print(line(header))
    for row in rows:
        print(line(row))
