"""Data-layer sessions as a stranger would add them to an MCP server, from the draft's text alone.

Written from "Data-Layer Sessions for MCP" (transports-wg PR #20) and its test vectors, with nothing of
this project's code: an ``MCPServer`` with two tools, behind a small ASGI layer that answers
``sessions/create`` and ``sessions/delete``, declares the ``sessions`` capability, checks the session a
request names in ``params._meta["io.modelcontextprotocol/session"]`` and echoes it on successful results.
Sessions live in a dict. The SDK app answers JSON, not event streams, so every answer is one JSON body.
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from _mcp import replaying

SESSION_KEY = "io.modelcontextprotocol/session"
SESSION_NOT_FOUND = -32043  # the draft's SESSION_NOT_FOUND
SESSION_REQUIRED = -32044  # the draft's test vector: {"error":{"code":-32044,"message":"Session required"}}
NEEDS_SESSION = {"count"}  # the tools that only make sense inside a session
LIFETIME = timedelta(hours=1)


def _session_of(message: dict[str, Any]) -> object:
    """The SessionMetadata a request carries, or ``None``."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get(SESSION_KEY) if isinstance(meta, dict) else None


def build_server(sessions: dict[str, dict[str, Any]]) -> MCPServer:
    """Two ordinary tools: ``count``, which needs a session, and ``ping``, which does not."""
    server = MCPServer("independent-draft")

    @server.tool()
    async def count(ctx: Context) -> int:
        """Add one to this session's counter and return it."""
        meta = ctx.request_context.meta or {}
        session = sessions[meta[SESSION_KEY]["sessionId"]]  # type: ignore[literal-required]
        session["count"] = session.get("count", 0) + 1
        return int(session["count"])

    @server.tool()
    async def ping() -> str:
        """``pong``, with or without a session."""
        return "pong"

    return server


class DraftSessions:
    """The draft's data-layer sessions around an MCP app that knows nothing of them."""

    def __init__(self, app: ASGIApp, sessions: dict[str, dict[str, Any]]) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            chunk = await receive()
            body += chunk.get("body", b"")
            if not chunk.get("more_body"):
                break
        try:
            message = json.loads(body)
        except ValueError:
            message = None
        if not isinstance(message, dict) or "id" not in message:  # batches and notifications: the SDK's
            await self.app(scope, replaying({"type": "http.request", "body": body, "more_body": False}, receive), send)
            return
        method, session = message.get("method"), _session_of(message)
        if method == "sessions/create":
            await _answer(send, message["id"], result={"session": self._create()})
            return
        sent = session.get("sessionId") if isinstance(session, dict) else None
        session_id = sent if isinstance(sent, str) and sent in self.sessions else None
        if session is not None and session_id is None:
            data = {"sessionId": sent if isinstance(sent, str) else ""}  # a string, whatever was sent
            error = {"code": SESSION_NOT_FOUND, "message": "Session not found", "data": data}
            await _answer(send, message["id"], error=error)
            return
        if method == "sessions/delete":
            if session_id is None:
                error = {"code": SESSION_REQUIRED, "message": "Session required: name the session to delete"}
                await _answer(send, message["id"], error=error)
                return
            del self.sessions[session_id]
            await _answer(send, message["id"], result={})
            return
        params = message.get("params")
        tool = params.get("name") if isinstance(params, dict) else None
        if method == "tools/call" and session is None and tool in NEEDS_SESSION:
            error = {"code": SESSION_REQUIRED, "message": "Session required: call sessions/create first"}
            await _answer(send, message["id"], error=error)
            return
        await self._forward(scope, body, receive, send, method, session_id)

    def _create(self) -> dict[str, str]:
        session_id = secrets.token_urlsafe(32)
        expires = (datetime.now(UTC) + LIFETIME).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.sessions[session_id] = {"expiresAt": expires}
        return {"sessionId": session_id, "expiresAt": expires}

    async def _forward(
        self, scope: Scope, body: bytes, receive: Receive, send: Send, method: object, session_id: str | None
    ) -> None:
        """Run the SDK app, then add the capability and the session's echo to its JSON result."""
        start: Message = {}
        chunks: list[bytes] = []

        async def keep(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
            else:
                await send(message)

        await self.app(scope, replaying({"type": "http.request", "body": body, "more_body": False}, receive), keep)
        out = b"".join(chunks)
        try:
            answer = json.loads(out)
        except ValueError:
            answer = None
        result = answer.get("result") if isinstance(answer, dict) else None
        if isinstance(result, dict):
            if method in ("initialize", "server/discover"):
                result.setdefault("capabilities", {})["sessions"] = {}
            if session_id is not None:
                echo = {"sessionId": session_id, "expiresAt": self.sessions[session_id]["expiresAt"]}
                result.setdefault("_meta", {})[SESSION_KEY] = echo
            out = json.dumps(answer).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(out)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": out})


async def _answer(send: Send, request_id: object, **outcome: object) -> None:
    """A JSON-RPC response of this layer's own: a result or an error, HTTP 200."""
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, **outcome}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_app(*, stateless: bool = True) -> ASGIApp:
    """The server, at ``/mcp``: a fresh dict of sessions each time (``stateless=False``: the SDK's 2025-era
    transport sessions too, which have nothing to do with these)."""
    sessions: dict[str, dict[str, Any]] = {}
    server = build_server(sessions)
    app = server.streamable_http_app(streamable_http_path="/mcp", json_response=True, stateless_http=stateless)
    return DraftSessions(app, sessions)
