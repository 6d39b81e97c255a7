"""Per-request CPU cost of the middleware, measured by calling ASGI apps directly.

The compared apps are called request by request in a shuffled order (this
machine is noisy), and a pass-through wrapper is the control: its ratio to the
bare app should read 1.00. Reports the median CPU time per request of each
app and its ratio to its base app, plus the added microseconds.

Two phases, because OpenTelemetry's global TracerProvider can be set only once
per process and the MCP SDK's own span always uses it:

1. without an OpenTelemetry SDK: the API alone, as a server without tracing
   runs (the middleware then skips telemetry altogether);
2. with the SDK configured: a global ``TracerProvider`` with the
   ``SessionSpanProcessor`` and a ``SimpleSpanProcessor`` to an in-memory
   exporter, cleared after each request outside the timed region (so export
   work is counted inline: an upper bound on what a ``BatchSpanProcessor``
   costs on the request path), and a ``MeterProvider`` with an
   ``InMemoryMetricReader``. The bare MCPServer then records the SDK's own
   span; the middleware adds its SERVER span, session link, baggage and
   metrics; ``opentelemetry-instrumentation-asgi``'s ``OpenTelemetryMiddleware``
   (default options: an HTTP SERVER span plus its internal receive/send spans,
   and HTTP metrics) wraps the same MCPServer app for comparison.

Each phase keeps its own pass-through control and interleaves only its own
cases; "bare MCPServer + SDK" is compared with phase 1's bare app, across
phases (not interleaved, so read that ratio with the noise in mind). Run it in
a process of its own: if an SDK TracerProvider is already set, phase 1 is not
SDK-free.

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
from opentelemetry import trace
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_sessions import MCPSessionMiddleware
from mcp_sessions.telemetry import SessionSpanProcessor

SECRET = "benchmark-secret-benchmark-secret-0123456789"
App = Callable[[dict[str, Any], Any, Any], Coroutine[Any, Any, None]]
Request = tuple[dict[str, Any], bytes]
# name -> (app, request, the instrumentation scopes whose spans one request must record)
Cases = dict[str, tuple[App, Request, frozenset[str]]]

SDK_SCOPE = "mcp-python-sdk"
MIDDLEWARE_SCOPE = "mcp_sessions"
ASGI_SCOPE = "opentelemetry.instrumentation.asgi"
NAME_HEADERS = [(b"mcp-method", b"tools/call"), (b"mcp-name", b"echo")]


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


async def create_session(middleware: MCPSessionMiddleware) -> str:
    scope, body = request({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}, [])
    status, raw = await call(middleware, scope, body)
    assert status == 200, raw
    token: str = json.loads(raw)["result"]["session"]["sessionId"]
    return token


def session_request(token: str) -> Request:
    return request(
        tools_call({"io.modelcontextprotocol/session": {"sessionId": token}}),
        [*NAME_HEADERS, (b"mcp-session-id", token.encode())],
    )


async def cases_without_sdk(inner: Any) -> Cases:
    middleware = MCPSessionMiddleware(inner, secret=SECRET)
    plain = request(tools_call({}), NAME_HEADERS)
    with_session = session_request(await create_session(middleware))
    none: frozenset[str] = frozenset()
    return {
        "bare MCPServer": (inner, plain, none),
        "pass-through control": (PassThrough(inner), plain, none),
        "middleware, no session": (middleware, plain, none),
        # The same session-bearing body, which the bare server ignores: the fair base
        # for the session case (the SDK itself pays for the larger _meta).
        "bare, session body": (inner, with_session, none),
        "middleware, with session": (middleware, with_session, none),
    }


async def cases_with_sdk(inner: Any, meter_provider: MeterProvider) -> Cases:
    middleware = MCPSessionMiddleware(inner, secret=SECRET, meter_provider=meter_provider)
    instrumented = OpenTelemetryMiddleware(inner, meter_provider=meter_provider)
    plain = request(tools_call({}), NAME_HEADERS)
    with_session = session_request(await create_session(middleware))  # its token links to a creation span
    sdk = frozenset({SDK_SCOPE})
    return {
        "bare MCPServer + SDK": (inner, plain, sdk),
        "pass-through + SDK": (PassThrough(inner), plain, sdk),
        "middleware, no session + SDK": (middleware, plain, sdk | {MIDDLEWARE_SCOPE}),
        "bare, session body + SDK": (inner, with_session, sdk),
        "middleware, session + SDK": (middleware, with_session, sdk | {MIDDLEWARE_SCOPE}),
        "otel-asgi + SDK": (instrumented, plain, sdk | {ASGI_SCOPE}),
    }


def install_sdk() -> InMemorySpanExporter:
    """The global SDK TracerProvider (set here, or the one already set), with our processors added."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SessionSpanProcessor())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


async def measure(cases: Cases, rounds: int, exporter: InMemorySpanExporter | None) -> dict[str, list[int]]:
    """CPU nanoseconds of each request, the cases interleaved in a shuffled order."""
    if exporter is not None:
        exporter.clear()
    for name, (app, (scope, body), scopes) in cases.items():  # warm up; check every case answers and records
        for _ in range(20):
            status, raw = await call(app, scope, body)
            assert status == 200, raw
            if exporter is not None:
                spans = exporter.get_finished_spans()
                recorded = {span.instrumentation_scope.name for span in spans if span.instrumentation_scope}
                assert recorded == scopes, (name, recorded)
                exporter.clear()
    samples: dict[str, list[int]] = {name: [] for name in cases}
    order = list(cases) * rounds
    random.shuffle(order)
    for name in order:
        app, (scope, body), _ = cases[name]
        start = time.process_time_ns()
        await call(app, scope, body)
        samples[name].append(time.process_time_ns() - start)
        if exporter is not None:
            exporter.clear()
    return samples


def report(samples: dict[str, list[int]]) -> None:
    bases = {
        "middleware, with session": "bare, session body",
        "bare MCPServer + SDK": "bare MCPServer",
        "pass-through + SDK": "bare MCPServer + SDK",
        "middleware, no session + SDK": "bare MCPServer + SDK",
        "bare, session body + SDK": "bare MCPServer + SDK",
        "middleware, session + SDK": "bare, session body + SDK",
        "otel-asgi + SDK": "bare MCPServer + SDK",
    }
    print(f"{'app':30} {'median CPU µs':>14} {'ratio':>7} {'added µs':>9}  base")
    for name, values in samples.items():
        base_name = bases.get(name, "bare MCPServer")
        base = statistics.median(samples[base_name])
        median = statistics.median(values)
        print(f"{name:30} {median / 1000:14.1f} {median / base:7.3f} {(median - base) / 1000:9.1f}  {base_name}")


async def main(rounds: int) -> None:
    inner, _ = build_mcp_app()
    shutdown = await run_lifespan(inner)
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    exporter = None
    try:
        samples = await measure(await cases_without_sdk(inner), rounds, None)
        exporter = install_sdk()
        samples |= await measure(await cases_with_sdk(inner, meter_provider), rounds, exporter)
    finally:
        await shutdown()
        if exporter is not None:
            exporter.shutdown()  # the provider stays global: stop keeping spans
        meter_provider.shutdown()
    report(samples)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000, help="requests per app")
    parser.add_argument("--smoke", action="store_true", help="a few requests only")
    args = parser.parse_args()
    asyncio.run(main(20 if args.smoke else args.rounds))
