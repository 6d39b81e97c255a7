"""Servers that break one rule of the draft or the host conversation ids, for the conformance pack to catch.

A :class:`Breaker` is a small ASGI middleware in front of a working server (the
quickstart behind ``MCPSessionMiddleware``): a :class:`Fault` rewrites what
goes in (or answers in the server's place) and what comes out, JSON or SSE.
:func:`broken_servers` serves one working app with each fault at its own path,
``/<fault>/mcp``, and the app itself at ``/mcp``, on one real uvicorn.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from _mcp import replaying
from conftest import serve

KEY = "io.modelcontextprotocol/session"


def member(value: Any, *path: str) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


@dataclass
class Call:
    """A request as the broken server sees it: the parsed body and the headers (lower-case names), both editable."""

    body: Any
    headers: dict[str, str]
    notes: dict[str, Any] = field(default_factory=dict)
    """What a fault's request hook leaves for its response hook."""

    @property
    def message(self) -> dict[str, Any]:
        return self.body if isinstance(self.body, dict) else {}

    @property
    def method(self) -> Any:
        return self.message.get("method")

    @property
    def meta(self) -> dict[str, Any]:
        """``params._meta`` (an empty dict, not kept, when there is none)."""
        meta = member(self.message, "params", "_meta")
        return meta if isinstance(meta, dict) else {}

    @property
    def session_id(self) -> Any:
        return member(self.meta.get(KEY), "sessionId")

    def reply(self, *, result: Any = None, error: tuple[int, str] | None = None) -> Reply:
        """An answer in the server's place: this result, or this error."""
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": self.message.get("id")}
        if error is None:
            body["result"] = result if result is not None else {}
        else:
            body["error"] = {"code": error[0], "message": error[1]}
        return Reply(200, body)


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any


@dataclass
class Memory:
    """What the broken server has seen: the session ids it minted, the (sessionId, state) pairs it echoed."""

    minted: set[str] = field(default_factory=set)
    echoed: set[tuple[Any, Any]] = field(default_factory=set)
    creates: list[dict[str, Any]] = field(default_factory=list)

    def observe(self, message: dict[str, Any], call: Call) -> None:
        result = message.get("result")
        minted = member(result, "session", "sessionId")
        if isinstance(minted, str):
            self.minted.add(minted)
        echo = member(result, "_meta", KEY)
        if isinstance(echo, dict):
            self.echoed.add((echo.get("sessionId"), echo.get("state")))


RequestHook = Callable[[Call, Memory], Reply | None]
ResponseHook = Callable[[dict[str, Any], Call, Memory, bool], None]
StatusHook = Callable[[int, list[dict[str, Any]]], int]


@dataclass(frozen=True)
class Fault:
    """One broken rule: where it applies, what it breaks, and the hooks that break it."""

    name: str
    base: str
    wire: str
    era: str
    breaks: frozenset[str]
    conventions: bool = False
    """Whether the rule is this project's own: the pack checks it only with ``--conventions``."""
    request: RequestHook | None = None
    response: ResponseHook | None = None
    status: StatusHook | None = None


async def _body(receive: Receive) -> bytes:
    body = bytearray()
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return bytes(body)


def _sse_messages(text: str) -> list[Any]:
    events = text.replace("\r\n", "\n").split("\n\n")
    found = []
    for event in events:
        data = [line[5:].strip() for line in event.split("\n") if line.startswith("data:")]
        if data:
            found.append(json.loads("\n".join(data)))
    return found


class Breaker:
    """Runs one :class:`Fault` in front of ``app``; buffers each answer (test servers' answers end)."""

    def __init__(self, app: ASGIApp, fault: Fault) -> None:
        self.app, self.fault, self.memory = app, fault, Memory()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        raw = await _body(receive)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            call = Call(json.loads(raw), headers)
        except ValueError:
            await self.app(scope, replaying({"type": "http.request", "body": raw, "more_body": False}, receive), send)
            return
        reply = self.fault.request(call, self.memory) if self.fault.request else None
        if reply is not None:
            await _send(send, reply.status, [(b"content-type", b"application/json")], json.dumps(reply.body).encode())
            return
        body = json.dumps(call.body).encode()
        call.headers["content-length"] = str(len(body))
        inner = {**scope, "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in call.headers.items()]}
        status, out_headers, answer = await _capture(self.app, inner, body)
        content_type = dict(out_headers).get(b"content-type", b"").decode()
        sse = content_type.startswith("text/event-stream")
        parsed = _sse_messages(answer.decode()) if sse else json.loads(answer) if answer else None
        listed = parsed if isinstance(parsed, list) else [parsed] if isinstance(parsed, dict) else []
        for message in listed:
            self.memory.observe(message, call)
            if self.fault.response:
                self.fault.response(message, call, self.memory, sse)
        if self.fault.status:
            status = self.fault.status(status, listed)
        if sse:
            answer = "".join(f"event: message\ndata: {json.dumps(m)}\n\n" for m in listed).encode()
        elif parsed is not None:
            answer = json.dumps(parsed).encode()
        kept = [(k, v) for k, v in out_headers if k.lower() != b"content-length"]
        await _send(send, status, kept, answer)


async def _capture(app: ASGIApp, scope: Scope, body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    sent = False
    done = anyio.Event()
    start: Message = {}
    chunks: list[bytes] = []

    async def receive() -> Message:
        nonlocal sent
        if sent:  # the client stays connected until the answer is complete, as a real one does
            await done.wait()
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def collect(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            start = message
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    try:
        await app(scope, receive, collect)
    finally:
        done.set()
    return start["status"], list(start.get("headers", [])), b"".join(chunks)


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Faults:
    """One working app at ``/mcp`` and each fault in front of it at ``/<fault>/mcp``; lifespan goes to the app."""

    def __init__(self, app: ASGIApp, faults: Mapping[str, Fault]) -> None:
        self.app = app
        self.breakers = {name: Breaker(app, fault) for name, fault in faults.items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            name, _, rest = scope["path"].lstrip("/").partition("/")
            if name in self.breakers and rest == "mcp":
                scope = {**scope, "path": "/mcp", "raw_path": b"/mcp"}
                await self.breakers[name](scope, receive, send)
                return
        await self.app(scope, receive, send)


@contextmanager
def broken_servers(app: ASGIApp, faults: Mapping[str, Fault]) -> Iterator[str]:
    """Serve :class:`Faults`; yields the base URL (``/mcp`` works, ``/<fault>/mcp`` is broken)."""
    with serve(Faults(app, faults)) as url:
        yield url


class Unbatcher:
    """Stands in front of an MCP transport and takes batches: each element alone, the answers in one array."""

    def __init__(self, transport: ASGIApp) -> None:
        self.transport = transport

    @property
    def session_manager(self) -> Any:
        return getattr(self.transport, "session_manager", None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.transport(scope, receive, send)
            return
        raw = await _body(receive)
        batch = json.loads(raw)
        if not isinstance(batch, list):
            await self.transport(
                scope, replaying({"type": "http.request", "body": raw, "more_body": False}, receive), send
            )
            return
        answers = []
        for element in batch:
            body = json.dumps(element).encode()
            kept = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
            inner = {**scope, "headers": [*kept, (b"content-length", str(len(body)).encode())]}
            _, _, answer = await _capture(self.transport, inner, body)
            if answer:
                answers.append(json.loads(answer))
        await _send(send, 200, [(b"content-type", b"application/json")], json.dumps(answers).encode())


def place_unbatcher(node: Any, depth: int = 0) -> bool:
    """Put an :class:`Unbatcher` in front of the MCP transport inside ``node`` (routes, ``.app`` chains)."""
    if depth > 16:
        return False
    for route in getattr(node, "routes", None) or []:
        if place_unbatcher(route, depth + 1):
            return True
    inner = getattr(node, "app", None)
    if inner is None:
        return False
    if hasattr(inner, "session_manager"):
        node.app = Unbatcher(inner)
        return True
    return place_unbatcher(inner, depth + 1)
