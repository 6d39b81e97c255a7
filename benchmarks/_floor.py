"""The hand-written floor: the least a session layer that makes the middleware's checks pays per request.

What ``bench_asgi.py`` reads the session path's added cost against. :class:`CheckedFloor` reads the body
with a bound, parses it once with the standard library's ``json``, makes the checks a session-bearing call
needs, each as cheaply as a careful hand writes it, sets a context variable, replays the body, and splices
the echo into the answer's ``result._meta`` (JSON answers only, which is what the benchmark's apps send):

- the request's own: method ``POST``, the MCP path and a JSON ``Content-Type`` (anything else passes
  untouched); the body read with a bound (413); ``Host`` and ``Origin`` in the loopback sets the ``mcp``
  SDK allows by default (421, 403);
- repeated member names: a body with a backslash, or that spells a name on the path to the session more
  than once, is parsed with an ``object_pairs_hook`` that refuses a repeated name (400);
- the session id: looked up in ``verified``, the claims of tokens already verified (a miss is "not found"),
  its ``exp`` against the clock, an ``Mcp-Session-Id`` header that names another session (400), the
  principal the claims bind against the caller's (an HMAC of ``scope["user"].identity``), the endpoint it
  was minted at, and one lookup in ``revoked`` (what the memory store's ``touch`` stands for).

No store, no token signature (the cache has it), no telemetry, no error handling beyond fixed refusals.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

SESSION_META_KEY = "io.modelcontextprotocol/session"
FLOOR_SESSION: ContextVar[Any] = ContextVar("floor_session", default=None)
ECHO = b'"%s":{"sessionId":"%%s","expiresAt":"%%s"}' % SESSION_META_KEY.encode()
LOCAL_HOSTS = (b"127.0.0.1:", b"localhost:", b"[::1]:")
LOCAL_ORIGINS = (b"http://127.0.0.1:", b"http://localhost:", b"http://[::1]:")
MAX_BODY_SIZE = 4 * 1024 * 1024
# The names on the path to the session: a body that spells one twice could name two sessions to two parsers.
_PATH_NAMES = re.compile(b'"(?:params|_meta|%s|sessionId)"' % re.escape(SESSION_META_KEY.encode()))


def _refusal(status: int, code: int, text: str) -> tuple[Message, Message]:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": text}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return {"type": "http.response.start", "status": status, "headers": headers}, {
        "type": "http.response.body",
        "body": body,
    }


TOO_LARGE = _refusal(413, -32600, "Request body too large")
INVALID_HOST = _refusal(421, -32600, "Invalid Host header")
INVALID_ORIGIN = _refusal(403, -32600, "Invalid Origin header")
NOT_JSON = _refusal(400, -32700, "Parse error")
INVALID = _refusal(400, -32600, "Invalid request")
HEADER_MISMATCH = _refusal(400, -32600, "Mcp-Session-Id does not match the session")
NOT_FOUND = _refusal(404, -32001, "Session not found")


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) != len(pairs):
        raise ValueError("repeated member name")
    return members


async def _answer(send: Send, refusal: tuple[Message, Message]) -> None:
    await send(refusal[0])
    await send(refusal[1])


def _spliced(raw: bytes, request_id: object, member: bytes) -> bytes:
    """``raw`` with ``member`` in its result's ``_meta``, if it answers ``request_id``: spliced as bytes where the
    answer opens as the SDK writes one and spells no ``_meta``, or ends in the ``_meta`` it merges into; else
    parsed and written again."""
    if type(request_id) is int:
        opening = b'{"jsonrpc":"2.0","id":%d,"result":{' % request_id
        if raw.startswith(opening) and b'"_meta"' not in raw and b"\\" not in raw:
            at = len(opening)
            return raw[:at] + b'"_meta":{' + member + (b"}" if raw[at : at + 1] == b"}" else b"},") + raw[at:]
    message = json.loads(raw)
    if type(message) is not dict or message.get("id") != request_id or type(message.get("result")) is not dict:
        return raw
    result = message["result"]
    meta = result.get("_meta")
    # The mcp SDK's shape: the result ends the message, and a non-empty _meta ends the result.
    if next(reversed(message)) == "result" and next(reversed(result)) == "_meta" and type(meta) is dict and meta:
        return raw[:-3] + b"," + member + b"}}}" if raw.endswith(b"}}}") else raw
    result["_meta"] = {**(meta if type(meta) is dict else {}), **json.loads(b"{%s}" % member)}
    return json.dumps(message, separators=(",", ":")).encode()


class CheckedFloor:
    """The hand-written floor (see the module): ``verified`` maps a token to its claims."""

    def __init__(self, app: ASGIApp, verified: dict[str, dict[str, Any]], principal_key: bytes) -> None:
        self.app = app
        self.verified = verified
        self.revoked: dict[str, str] = {}
        self.principal_key = principal_key

    def caller(self, scope: Scope) -> str | None:
        user = scope.get("user")
        if user is None or not user.is_authenticated:
            return None
        return hmac.new(self.principal_key, user.identity.encode(), hashlib.sha256).hexdigest()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(reversed(scope["headers"]))
        content_type = headers.get(b"content-type", b"")
        if scope["method"] != "POST" or scope["path"] != "/mcp" or not content_type.startswith(b"application/json"):
            return await self.app(scope, receive, send)
        if not headers.get(b"host", b"").startswith(LOCAL_HOSTS):
            return await _answer(send, INVALID_HOST)
        origin = headers.get(b"origin")
        if origin is not None and not origin.startswith(LOCAL_ORIGINS):
            return await _answer(send, INVALID_ORIGIN)
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > MAX_BODY_SIZE:
                return await _answer(send, TOO_LARGE)
            if not message.get("more_body", False):
                break
        try:
            repeats = b"\\" in body or len(set(found := _PATH_NAMES.findall(body))) != len(found)
            parsed = json.loads(body, object_pairs_hook=_unique_names) if repeats else json.loads(body)
        except ValueError:
            return await _answer(send, NOT_JSON)
        try:
            meta = parsed.get("params", {}).get("_meta", {}).get(SESSION_META_KEY)
            token = meta["sessionId"] if meta else None
        except (AttributeError, TypeError, KeyError):
            return await _answer(send, INVALID)
        claims = echo = None
        if token is not None:
            if type(token) is not str:
                return await _answer(send, INVALID)
            header = headers.get(b"mcp-session-id")
            if header is not None and header != token.encode():
                return await _answer(send, HEADER_MISMATCH)
            claims = self.verified.get(token)
            if (
                claims is None
                or claims["exp"] <= time.time()
                or claims.get("pbh") != self.caller(scope)
                or claims.get("mep", scope["path"]) != scope["path"]
                or claims["sid"] in self.revoked
            ):
                return await _answer(send, NOT_FOUND)
            expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(claims["exp"]))
            echo = ECHO % (token.encode(), expires.encode())  # a token verified above: base64url and dots
        context = FLOOR_SESSION.set(claims)
        try:
            await self.app(scope, _replay(bytes(body), receive), _echoing(send, parsed.get("id"), echo))
        finally:
            FLOOR_SESSION.reset(context)


def _replay(body: bytes, receive: Receive) -> Receive:
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _echoing(send: Send, request_id: object, echo: bytes | None) -> Send:
    """``send``, with ``echo`` spliced into the JSON answer and its ``Content-Length`` fixed."""
    start: Message | None = None
    held = bytearray()

    async def splice(message: Message) -> None:
        nonlocal start
        if echo is None:
            return await send(message)
        if message["type"] == "http.response.start":
            start = message
            return
        held.extend(message.get("body", b""))
        if message.get("more_body", False):
            return
        raw = _spliced(bytes(held), request_id, echo)
        headers = [(k, v) for k, v in start["headers"] if k != b"content-length"] if start else []
        await send({**(start or {}), "headers": [*headers, (b"content-length", str(len(raw)).encode())]})
        await send({"type": "http.response.body", "body": raw, "more_body": False})

    return splice
