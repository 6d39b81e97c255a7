"""Per-request CPU cost of the middleware, measured by calling ASGI apps directly.

The compared apps are called request by request in a shuffled order (this
machine is noisy), and a pass-through wrapper is the control: its ratio to the
bare app should read 1.00. Reports the median CPU time per request of each
app and its ratio to the bare app, plus the added microseconds.

    python benchmarks/bench_asgi.py            # full run
    python benchmarks/bench_asgi.py --smoke    # a few requests: CI checks it runs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from mcp.server.mcpserver import MCPServer

from mcp_sessions import MCPSessionMiddleware

SECRET = "benchmark-secret-benchmark-secret-0123456789"
App = Callable[[dict[str, Any], Any, Any], Coroutine[Any, Any, None]]


class PassThrough:
    """The control: an ASGI wrapper that does nothing."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def build_mcp_app() -> Any:
    server = MCPServer("bench")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    return server.streamable_http_app(streamable_http_path="/mcp", json_response=True), server


async def run_lifespan(app: App) -> Callable[[], Awaitable[None]]:
    started, stop = asyncio.Event(), asyncio.Event()
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await queue.put({"type": "lifespan.startup"})

    async def receive() -> dict[str, Any]:
        message = await queue.get()
        return message

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()
        elif message["type"] == "lifespan.shutdown.complete":
            stop.set()

    task = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send))
    await started.wait()

    async def shutdown() -> None:
        await queue.put({"type": "lifespan.shutdown"})
        await stop.wait()
        await task

    return shutdown


def request(body: dict[str, Any], extra_headers: list[tuple[bytes, bytes]]) -> tuple[dict[str, Any], bytes]:
    raw = json.dumps(body).encode()
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"content-length", str(len(raw)).encode()),
        (b"mcp-protocol-version", b"2026-07-28"),
        *extra_headers,
    ]
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
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    return scope, raw


async def call(app: App, scope: dict[str, Any], body: bytes) -> tuple[int, bytes]:
    sent = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(dict(scope, headers=list(scope["headers"]), state={}), receive, send)
    return status, b"".join(chunks)


def tools_call(meta_extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "echo",
            "arguments": {"text": "hello"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                **meta_extra,
            },
        },
    }


async def main(rounds: int) -> None:
    inner, _ = build_mcp_app()
    middleware = MCPSessionMiddleware(inner, secret=SECRET)
    control = PassThrough(inner)
    shutdown = await run_lifespan(inner)
    try:
        name_headers = [(b"mcp-method", b"tools/call"), (b"mcp-name", b"echo")]
        create_scope, create_body = request({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}, [])
        status, raw = await call(middleware, create_scope, create_body)
        token = json.loads(raw)["result"]["session"]["sessionId"]
        plain = request(tools_call({}), name_headers)
        with_session = request(
            tools_call({"io.modelcontextprotocol/session": {"sessionId": token}}),
            [*name_headers, (b"mcp-session-id", token.encode())],
        )
        cases: dict[str, tuple[App, tuple[dict[str, Any], bytes]]] = {
            "bare MCPServer": (inner, plain),
            "pass-through control": (control, plain),
            "middleware, no session": (middleware, plain),
            # The same session-bearing body, which the bare server ignores: the fair base
            # for the session case (the SDK itself pays for the larger _meta).
            "bare, session body": (inner, with_session),
            "middleware, with session": (middleware, with_session),
        }
        for app, (scope, body) in cases.values():  # warm up and check every case answers
            for _ in range(20):
                status, raw = await call(app, scope, body)
                assert status == 200, raw
        samples: dict[str, list[int]] = {name: [] for name in cases}
        order = list(cases) * rounds
        random.shuffle(order)
        for name in order:
            app, (scope, body) = cases[name]
            start = time.process_time_ns()
            await call(app, scope, body)
            samples[name].append(time.process_time_ns() - start)
    finally:
        await shutdown()
    bases = {"middleware, with session": "bare, session body"}
    print(f"{'app':28} {'median CPU µs':>14} {'ratio':>7} {'added µs':>9}  base")
    for name, values in samples.items():
        base_name = bases.get(name, "bare MCPServer")
        base = statistics.median(samples[base_name])
        median = statistics.median(values)
        print(f"{name:28} {median / 1000:14.1f} {median / base:7.3f} {(median - base) / 1000:9.1f}  {base_name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000, help="requests per app")
    parser.add_argument("--smoke", action="store_true", help="a few requests only")
    args = parser.parse_args()
    asyncio.run(main(20 if args.smoke else args.rounds))
