"""Direct ASGI calls to the middleware: a recording downstream app, a recording ``send``, a scripted ``receive``.

Shared by the tests under ``tests/asgi/`` (and imported by nothing else): the pattern Starlette's own
middleware tests use, without a socket.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from datetime import UTC, datetime
from typing import Any

from _mcp import SESSION_KEY, AnswersProbes
from conftest import SECRET
from mcp_sessions import MCPSessionMiddleware, get_session
from mcp_sessions._session import SCOPE_KEY
from mcp_sessions.handles import HandleContext, current_handle_context
from mcp_sessions.stores import MemoryStore

# What every real client sends: the server (and so the guard) refuses a POST without them.
JSON = [
    (b"content-type", b"application/json"),
    (b"host", b"127.0.0.1:8000"),
    (b"accept", b"application/json, text/event-stream"),
]
PER_REQUEST = [*JSON, (b"mcp-protocol-version", b"2026-07-28")]
HANDSHAKE = [*JSON, (b"mcp-protocol-version", b"2025-11-25")]
Message = MutableMapping[str, Any]


class Receiver:
    """The server side of ``receive``: the body in the given chunks, then ``http.disconnect`` (with ``more_body``, a
    client that leaves before its last chunk)."""

    def __init__(self, *chunks: bytes, more_body: bool = False) -> None:
        self.pending: list[Message] = [
            {"type": "http.request", "body": chunk, "more_body": more_body or i < len(chunks) - 1}
            for i, chunk in enumerate(chunks)
        ]
        self.calls = 0

    async def __call__(self) -> Message:
        self.calls += 1
        if self.pending:
            return self.pending.pop(0)
        return {"type": "http.disconnect"}


class Sender:
    """A recording ``send``."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)

    @property
    def starts(self) -> list[Message]:
        return [m for m in self.messages if m["type"] == "http.response.start"]

    @property
    def status(self) -> int:
        (start,) = self.starts
        return int(start["status"])

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        (start,) = self.starts
        return list(start["headers"])

    def header(self, name: bytes) -> bytes | None:
        values = [v for n, v in self.headers if n.lower() == name]
        assert len(values) <= 1, f"{name!r} appears {len(values)} times"
        return values[0] if values else None

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body")

    def json(self) -> Any:
        return json.loads(self.body)


def json_response(payload: Any, *, status: int = 200) -> list[Message]:
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = [*JSON, (b"content-length", str(len(body)).encode())]
    return [
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": body, "more_body": False},
    ]


class Downstream:
    """A tiny app that records what reaches it, reads its request to the end, and replays a response."""

    def __init__(self, response: list[Message] | None = None) -> None:
        self.response = response if response is not None else json_response({"jsonrpc": "2.0", "id": 1, "result": {}})
        self.calls = 0
        self.scope: Any = None
        self.receive: Any = None
        self.received: list[Message] = []
        # (scope[SCOPE_KEY], scope["state"]["mcp_session"], get_session()) while the app ran.
        self.seen: tuple[Any, Any, Any] = ("never called",) * 3
        self.handle_context: HandleContext | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        self.scope, self.receive = scope, receive
        while True:
            message = await receive()
            self.received.append(message)
            if message["type"] != "http.request":
                break
            if len(self.received) > 1000:
                raise AssertionError("receive() never handed over to the real receive (no http.disconnect)")
        self.seen = (scope.get(SCOPE_KEY), scope.get("state", {}).get("mcp_session"), get_session())
        self.handle_context = current_handle_context()
        for message in self.response:
            await send(message)

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.received if m["type"] == "http.request")


class CountingStore(MemoryStore):
    """The real memory store, counting the touches that session work makes."""

    touches = 0

    async def touch(self, session_id: str, **kwargs: Any) -> Any:
        self.touches += 1
        return await super().touch(session_id, **kwargs)


def http_scope(
    method: str = "POST", path: str = "/mcp", headers: list[tuple[bytes, bytes]] | None = None
) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": JSON if headers is None else headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


def modern_headers(message: Message) -> list[tuple[bytes, bytes]]:
    """The headers of a 2026-07-28 POST of ``message``: version, Mcp-Method and, for tools/call, Mcp-Name."""
    headers = [*PER_REQUEST, (b"mcp-method", message["method"].encode())]
    if message["method"] == "tools/call":
        headers.append((b"mcp-name", message["params"]["name"].encode()))
    return headers


def with_envelope(message: Message) -> Message:
    """``message`` with the 2026-07-28 envelope in ``params._meta``, which every 2026 request carries."""
    params = dict(message.get("params") or {})
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        **params.get("_meta", {}),
    }
    return {**message, "params": params}


def dumps(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def middleware(app: Any, *, batches: bool = False, **options: Any) -> MCPSessionMiddleware:
    """The middleware around ``app``, a fake server that takes what the middleware asks it about, and takes a
    batch only with ``batches`` (the mcp SDK refuses them: then the middleware's own batch rules never apply)."""
    return MCPSessionMiddleware(AnswersProbes(app, batches=batches), secret=SECRET, **options)


async def call(mw: Any, body: bytes | list[bytes], scope: dict[str, Any] | None = None) -> Sender:
    sender = Sender()
    chunks = [body] if isinstance(body, bytes) else body
    await mw(http_scope() if scope is None else scope, Receiver(*chunks), sender)
    return sender


async def create_session(mw: MCPSessionMiddleware) -> str:
    sender = await call(mw, dumps({"jsonrpc": "2.0", "id": 0, "method": "sessions/create"}))
    token: str = sender.json()["result"]["session"]["sessionId"]
    return token


def request(request_id: Any, token: str | None = None, *, method: str = "tools/call", **session: Any) -> Message:
    params: dict[str, Any] = {"name": "t", "arguments": {}}
    if token is not None:
        params["_meta"] = {SESSION_KEY: {"sessionId": token, **session}}
    message: Message = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not ...:
        message["id"] = request_id
    return message


def echo_for(mw: MCPSessionMiddleware, token: str) -> dict[str, Any]:
    expires_at = datetime.fromtimestamp(int(mw.keys.verify_session_token(token).expires_at), UTC)
    return {"sessionId": token, "expiresAt": expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")}
