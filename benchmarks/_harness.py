"""What the benchmarks share: the apps and requests, the interleaved loop, the statistics, the machine, the report.

Not a benchmark itself: every ``bench_*.py`` imports it (they run as scripts, so this directory is on
``sys.path``). A benchmark's result is one JSON object (:func:`finish`): its raw ``rows``, the
``sections`` (a title, a paragraph and a table) and the ``verdicts`` (a target, what was measured, and
whether it was met) that ``run_all.py`` puts on ``docs/performance.md`` as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import logging
import math
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from _floor import FLOOR_SESSION
from mcp.server.mcpserver import Context, MCPServer
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_sessions import get_session

ROOT = Path(__file__).resolve().parent.parent
SECRET = "benchmark-secret-benchmark-secret-0123456789"
PROTOCOL_VERSION = "2026-07-28"
SESSION_META_KEY = "io.modelcontextprotocol/session"
NAME_HEADERS = [(b"mcp-method", b"tools/call"), (b"mcp-name", b"echo")]
CREATE_HEADERS = [(b"mcp-method", b"sessions/create")]
LIBRARIES = (
    "mcp-sessions",
    "mcp",
    "starlette",
    "uvicorn",
    "httpx",
    "opentelemetry-sdk",
    "opentelemetry-instrumentation-asgi",
    "pyjwt",
    "fastmcp",
)
Request = tuple[Scope, bytes]


class PassThrough:
    """The control: an ASGI layer that does nothing. Its ratio to the bare app is the run's noise."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


# -- the apps -----------------------------------------------------------------------


def read_session(scope: Scope) -> None:
    """What a tool does with its session: Starlette's cookie session if there is one, else this library's (else
    the hand-written floor's)."""
    if "session" in scope:
        HTTPConnection(scope).session.get("conversation")
    elif get_session() is None:
        FLOOR_SESSION.get()


def build_mcp_app() -> ASGIApp:
    """The ``mcp`` SDK's ``MCPServer`` app (JSON responses) with one tool, ``echo``, that reads its session."""
    server = MCPServer("bench")

    @server.tool()
    async def echo(text: str, ctx: Context) -> str:
        if ctx.request_context.request is not None:
            read_session(ctx.request_context.request.scope)
        return text

    return server.streamable_http_app(streamable_http_path="/mcp", json_response=True)


TRIVIAL_RESULT = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hello"}],"isError":false}}'
METHOD_NOT_FOUND = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"Method not found"}}'


async def read_whole(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_json(send: Send, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def trivial_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The least an MCP server does: read the body and the session, answer a fixed ``tools/call`` result."""
    if scope["type"] != "http":
        return
    body = await read_whole(receive)
    read_session(scope)
    await send_json(send, TRIVIAL_RESULT if b'"tools/call"' in body else METHOD_NOT_FOUND)


@contextlib.asynccontextmanager
async def lifespan(app: ASGIApp) -> AsyncIterator[ASGIApp]:
    """``app`` with its lifespan started, shut down on leaving."""
    messages: asyncio.Queue[Message] = asyncio.Queue()
    started, stopped = asyncio.Event(), asyncio.Event()

    async def send(message: Message) -> None:
        (started if message["type"] == "lifespan.startup.complete" else stopped).set()

    async def run() -> None:
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, messages.get, send)

    await messages.put({"type": "lifespan.startup"})
    task = asyncio.create_task(run())
    await started.wait()
    try:
        yield app
    finally:
        await messages.put({"type": "lifespan.shutdown"})
        await stopped.wait()
        await task


# -- the requests -------------------------------------------------------------------


def http_headers(raw: bytes, extra: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"content-length", str(len(raw)).encode()),
        (b"mcp-protocol-version", PROTOCOL_VERSION.encode()),
        *extra,
    ]


def client_headers(raw: bytes, extra: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The headers of :func:`http_headers`, less those an HTTP client writes itself."""
    return [(name, value) for name, value in http_headers(raw, extra) if name not in (b"host", b"content-length")]


def envelope() -> dict[str, Any]:
    """The ``_meta`` members every 2026-07-28 request carries."""
    return {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    }


def tools_call(token: str | None = None) -> dict[str, Any]:
    """A 2026-07-28 ``tools/call`` of ``echo``, in the session ``token`` names if any."""
    meta = envelope()
    if token is not None:
        meta[SESSION_META_KEY] = {"sessionId": token}
    params = {"name": "echo", "arguments": {"text": "hello"}, "_meta": meta}
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


def create_body() -> dict[str, Any]:
    """A 2026-07-28 ``sessions/create``."""
    return {"jsonrpc": "2.0", "id": 1, "method": "sessions/create", "params": {"_meta": envelope()}}


def call_headers(token: str | None = None) -> list[tuple[bytes, bytes]]:
    """The headers of a ``tools/call`` (:func:`tools_call`) in the session ``token`` names, if any."""
    return NAME_HEADERS if token is None else [*NAME_HEADERS, (b"mcp-session-id", token.encode())]


def request(body: dict[str, Any], extra_headers: Sequence[tuple[bytes, bytes]] = ()) -> Request:
    """An ASGI scope for ``POST /mcp`` and its body."""
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


def session_request(token: str | None = None) -> Request:
    return request(tools_call(token), call_headers(token))


async def call(app: ASGIApp, scope: Scope, body: bytes) -> tuple[int, bytes]:
    """One request, the app called directly; its status and body."""
    status, chunks, sent = 0, [], False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # the client stays connected
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(dict(scope, headers=list(scope["headers"]), state={}), receive, send)
    return status, b"".join(chunks)


def session_token(status: int, raw: bytes) -> str:
    """The session id in a ``sessions/create`` answer."""
    assert status == 200, raw
    token: str = json.loads(raw)["result"]["session"]["sessionId"]
    return token


async def create_session(app: ASGIApp) -> str:
    """A session created through ``app`` (the middleware answers ``sessions/create`` itself)."""
    return session_token(*await call(app, *request(create_body(), CREATE_HEADERS)))


# -- measuring ----------------------------------------------------------------------


async def interleaved(
    cases: Mapping[str, Callable[[], Awaitable[object]]], rounds: int, after: Callable[[], object] = lambda: None
) -> dict[str, list[int]]:
    """CPU nanoseconds of ``rounds`` calls of each case, the cases called one at a time in a shuffled order.

    Drift on a busy machine then falls on every case alike. ``after`` runs after each call, untimed, and then
    the event loop runs once, as a server's runs between requests: a call that never waits never lets it run,
    and asyncio drops the timers a request cancelled (the ``mcp`` SDK arms one for each, holding the request's
    context: its spans, its session) only when it runs. Held, they grew the heap by each request's context.
    """
    samples: dict[str, list[int]] = {name: [] for name in cases}
    order = list(cases) * rounds
    random.shuffle(order)
    for name in order:
        one = cases[name]
        start = time.process_time_ns()
        await one()
        samples[name].append(time.process_time_ns() - start)
        after()
        await asyncio.sleep(0)
    return samples


def median_half_width(values: Sequence[float]) -> float:
    """Half the width of the distribution-free 95% interval of the median (order statistics)."""
    ordered = sorted(values)
    n = len(ordered)
    spread = 0.98 * math.sqrt(n)  # 1.96 standard deviations of a Binomial(n, 1/2), halved
    low, high = max(math.floor(n / 2 - spread), 0), min(math.ceil(n / 2 + spread), n - 1)
    return (ordered[high] - ordered[low]) / 2


def compared(samples: Mapping[str, Sequence[float]], name: str, base: str, scale: float = 1e-3) -> dict[str, Any]:
    """A case's median against its base's: the added cost and its 95% interval (``scale``: ns to µs)."""
    middle, base_middle = statistics.median(samples[name]), statistics.median(samples[base])
    spread = math.hypot(median_half_width(samples[name]), median_half_width(samples[base]))
    return {
        "name": name,
        "base": base,
        "median_us": middle * scale,
        "ratio": middle / base_middle if base_middle else float("nan"),
        "added_us": (middle - base_middle) * scale,
        "ci_us": 0.0 if name == base else spread * scale,
        "samples": len(samples[name]),
    }


# -- servers in processes of their own ----------------------------------------------

Servers = dict[str, tuple[subprocess.Popen[str], str]]  # name -> its process and its URL
# Without address-space randomization, where setarch can turn it off: the same memory layout in every server.
SAME_LAYOUT = ["setarch", platform.machine(), "-R"] if shutil.which("setarch") else []


def free_port() -> int:
    """A loopback port free a moment ago, for a command that takes its port as a flag."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serve(build: Callable[[], ASGIApp]) -> None:
    """Serve the app ``build`` returns with uvicorn on an ephemeral loopback port, printed first; until killed."""
    import uvicorn

    logging.disable(logging.WARNING)  # the app's start and stop lines, the middleware's note on the trivial app
    app = build()
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only then (else Nagle and delayed ACKs add 40 ms).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    print(sock.getsockname()[1], flush=True)
    # Servers take turns: a kept-alive connection may idle for long on a busy machine.
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=3600)
    uvicorn.Server(config).run(sockets=[sock])


def pick_cpus() -> tuple[set[int] | None, set[int] | None]:
    """The servers' CPU and the client's, when the machine has two to give."""
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return ({usable[-1]}, {usable[0]}) if len(usable) >= 2 else (None, None)


@contextlib.contextmanager
def servers(commands: Mapping[str, Sequence[str]], cpus: set[int] | None) -> Iterator[Servers]:
    """A process per command (each a ``--serve`` run of a benchmark script), pinned to ``cpus``, with the
    same hash seed and memory layout; yields each one's process and URL, stops them on leaving."""
    environ = dict(os.environ, PYTHONHASHSEED="0")
    started: Servers = {}
    try:
        for name, command in commands.items():
            process = subprocess.Popen(
                [*SAME_LAYOUT, sys.executable, *command], env=environ, stdout=subprocess.PIPE, text=True
            )
            started[name] = (process, "")
        for name, (process, _) in started.items():
            assert process.stdout is not None
            port = process.stdout.readline().strip()  # printed once the socket listens
            if not port.isdigit():
                raise RuntimeError(f"{name}: the server did not start")
            started[name] = (process, f"http://127.0.0.1:{port}/mcp")
            if cpus is not None:  # once started: the imports of a start need not queue on one CPU
                os.sched_setaffinity(process.pid, cpus)
        yield started
    finally:
        for process, _ in started.values():
            process.terminate()
        for process, _ in started.values():
            process.wait(30)


def cpu_seconds(pid: int) -> float:
    """A process's CPU time (every thread's run time, ``/proc/<pid>/task/*/schedstat``), to the nanosecond."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


async def until_ready(
    client: httpx.AsyncClient, url: str, seconds: float = 60.0, extra: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Once the server at ``url`` answers a ``tools/call`` (bounded: it may still be starting); ``extra``: more
    headers (a bearer token's)."""
    body = json.dumps(tools_call()).encode()
    deadline = time.monotonic() + seconds
    while True:
        try:
            response = await client.post(url, content=body, headers=client_headers(body, [*NAME_HEADERS, *extra]))
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)
        else:
            assert response.status_code == 200, response.content
            return


async def new_session(client: httpx.AsyncClient, url: str, extra: Sequence[tuple[bytes, bytes]] = ()) -> str:
    """A session created through the server at ``url`` (``extra``: more headers)."""
    body = json.dumps(create_body()).encode()
    response = await client.post(url, content=body, headers=client_headers(body, [*CREATE_HEADERS, *extra]))
    return session_token(response.status_code, response.content)


# -- the report ---------------------------------------------------------------------


def section(title: str, text: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> dict[str, Any]:
    """A section of the page: its title, a paragraph, and a table (cells as text)."""
    return {"title": title, "text": text, "header": list(header), "rows": [[str(cell) for cell in row] for row in rows]}


def verdict(target: str, measured: str, met: bool | None, why: str) -> dict[str, str]:
    """A row of the page's verdict table; ``met`` is ``None`` when the run could not judge."""
    said = "not judged" if met is None else "met" if met else "**not met**"
    return {"target": target, "measured": measured, "verdict": f"{said}: {why}"}


def us(value: float, ci: float | None = None) -> str:
    """Microseconds, signed, with their 95% half-width if given."""
    return f"{value:+.1f} µs" + ("" if ci is None else f" ± {ci:.1f}")


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def machine() -> dict[str, Any]:
    """What the numbers ran on."""
    cpu = next(
        (line.partition(":")[2].strip() for line in _lines("/proc/cpuinfo") if line.startswith("model name")),
        platform.processor() or platform.machine(),
    )
    versions = {}
    for name in LIBRARIES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[name] = importlib.metadata.version(name)
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "middleware"], capture_output=True, text=True).stdout
    return {
        "cpu": cpu,
        "cores": f"{os.cpu_count()} ({len(os.sched_getaffinity(0))} usable by the benchmarks)",
        "system": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "libraries": ", ".join(f"{name} {version}" for name, version in versions.items()),
        "code": f"commit {commit or 'unknown'}" + (" with uncommitted changes to middleware/" if dirty else ""),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def plain_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: the first column left, the others right, two spaces apart."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = []
    for row in [header, *rows]:
        first, *others = zip(row, widths, strict=True)
        cells = [first[0].ljust(first[1]), *(cell.rjust(width) for cell, width in others)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def finish(
    benchmark: str,
    json_out: str | None,
    smoke: bool,
    began: tuple[float, list[float]],
    sections: list[dict[str, Any]],
    verdicts: list[dict[str, str]],
    **raw: Any,
) -> dict[str, Any]:
    """Print the sections and verdicts, and write the whole result to ``json_out`` (if given).

    ``began`` is ``(time.monotonic(), load_average())`` at the start: the page gives each
    benchmark's duration and the load before and after it.
    """
    started, load_before = began
    result = {
        "benchmark": benchmark,
        "smoke": smoke,
        "seconds": round(time.monotonic() - started, 1),
        "load_before": load_before,
        "load_after": load_average(),
        "machine": machine(),
        "sections": sections,
        "verdicts": verdicts,
        **raw,
    }
    for part in sections:
        print(f"{part['title']}\n\n{plain_table(part['header'], part['rows'])}\n")
    for row in verdicts:
        print(f"{row['target']}\n  {row['measured']}\n  {row['verdict']}\n")
    if json_out is not None:
        Path(json_out).write_text(json.dumps(result, indent=2) + "\n")
    return result
