"""What the gateway adds to a request, against the upstream directly and against the other ways to proxy one.

Each compared setup is a uvicorn process of its own on 127.0.0.1, all pinned to one CPU (the client to
another when there are two), the same hash seed and memory layout (as ``bench_uvicorn.py``):

- ``upstream directly``: the ``mcp`` SDK's ``MCPServer`` (JSON responses), the base;
- ``pass-through control``: the same app behind a do-nothing ASGI wrapper, in its own process: its
  added latency is the noise between two processes (it reads about 1.00);
- ``bare httpx proxy``: 40 lines of Starlette-free ASGI, one pooled ``httpx.AsyncClient``, bodies
  streamed both ways, nothing else (no header hygiene, no failure answers);
- ``fastmcp create_proxy``: fastmcp's proxy server in front of the upstream;
- ``gateway, no session`` and ``gateway, with session``: ``mcp-sessions gateway``'s app.

The proxies all forward to one more upstream process of their own. One client (``httpx``, keep-alive)
sends 2026-07-28 ``tools/call`` requests one at a time, a request to each setup per round, in a new
shuffled order each round, so that the machine's drift hits every setup alike. Each setup's latency
is read at p50 and p99; its added latency is that minus the upstream's own at the same percentile.
A proxy's CPU per request is its process's own (``/proc/<pid>/task/*/schedstat``), the upstream's
work being in another process.

    python benchmarks/bench_gateway.py                   # full run
    python benchmarks/bench_gateway.py --smoke           # a few rounds: CI checks it runs
    python benchmarks/bench_gateway.py --json out.json   # also write the numbers
    python benchmarks/bench_gateway.py --write docs/performance.md   # put its section on the page
    python benchmarks/bench_gateway.py --from out.json --write docs/performance.md   # from kept results
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _harness import (
    CREATE_HEADERS,
    NAME_HEADERS,
    SECRET,
    PassThrough,
    build_mcp_app,
    create_body,
    http_headers,
    load_average,
    machine,
    plain_body,
    print_table,
    session_body,
    session_headers,
    session_token,
    write_json,
)
from bench_uvicorn import SAME_LAYOUT, cpu_seconds, pick_cpus
from starlette.types import Receive, Scope, Send

# name -> (what the process serves, whether it forwards to the proxies' upstream, whether requests carry a session)
SETUPS: dict[str, tuple[str, bool, bool]] = {
    "upstream directly": ("upstream", False, False),
    "pass-through control": ("pass-through", False, False),
    "bare httpx proxy": ("bare-proxy", True, False),
    "fastmcp create_proxy": ("create-proxy", True, False),
    "gateway, no session": ("gateway", True, False),
    "gateway, with session": ("gateway", True, True),
}
BASE = "upstream directly"
STARTUP_SECONDS = 60.0
GATEWAY_MULTIPLE = 1.5  # the gateway with a session adds at most this multiple of what the bare proxy adds (p50)
SECTION = "## The gateway"


class BareProxy:
    """The least a streaming proxy does: the request as it came (its Host aside), the response as it comes."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/").rsplit("/mcp", 1)[0]
        self.client = httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_keepalive_connections=64))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = [(name, value) for name, value in scope["headers"] if name != b"host"]

        async def body() -> AsyncIterator[bytes]:
            while True:
                message = await receive()
                yield message.get("body", b"")
                if not message.get("more_body", False):
                    return

        url = self.upstream + scope["path"]
        request = self.client.build_request(scope["method"], url, headers=headers, content=body())
        response = await self.client.send(request, stream=True)
        try:
            hop = {b"connection", b"keep-alive", b"transfer-encoding"}
            start = [(name.lower(), value) for name, value in response.headers.raw if name.lower() not in hop]
            await send({"type": "http.response.start", "status": response.status_code, "headers": start})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


def serve(kind: str, upstream: str) -> None:
    """The server process: bind an ephemeral port, print it, serve until killed."""
    import uvicorn

    app: Any
    if kind == "upstream":
        app = build_mcp_app()
    elif kind == "pass-through":
        app = PassThrough(build_mcp_app())
    elif kind == "bare-proxy":
        app = BareProxy(upstream)
    elif kind == "create-proxy":
        from fastmcp.server import create_proxy

        app = create_proxy(upstream).http_app(path="/mcp")
    else:
        from mcp_sessions import SessionsConfig, gateway_app

        app = gateway_app([upstream], config=SessionsConfig(secret=SECRET))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY: see bench_uvicorn
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_keep_alive=3600)
    uvicorn.Server(config).run(sockets=[sock])


@dataclass
class Setup:
    name: str
    process: subprocess.Popen[str]
    url: str = ""
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    cpu: float = 0.0


def start(kind: str, upstream: str, cpus: set[int] | None) -> subprocess.Popen[str]:
    environ = dict(os.environ, PYTHONHASHSEED="0")
    command = [*SAME_LAYOUT, sys.executable, __file__, "--serve", kind, "--upstream", upstream]
    process = subprocess.Popen(command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if cpus is not None:
        os.sched_setaffinity(process.pid, cpus)
    return process


def port_of(process: subprocess.Popen[str], name: str) -> int:
    assert process.stdout is not None
    line = process.stdout.readline()  # the port, once the socket listens
    if not line.strip().isdigit():
        raise RuntimeError(f"{name}: the server did not start")
    return int(line)


@contextlib.contextmanager
def started(cpus: set[int] | None) -> Iterator[dict[str, Setup]]:
    """Each setup's server, and the upstream the proxies share."""
    processes: list[subprocess.Popen[str]] = []
    try:
        behind = start("upstream", "", cpus)
        processes.append(behind)
        upstream = f"http://127.0.0.1:{port_of(behind, 'the proxies upstream')}/mcp"
        setups = {}
        for name, (kind, forwards, _) in SETUPS.items():
            processes.append(start(kind, upstream if forwards else "", cpus))
            setups[name] = Setup(name, processes[-1])
        for setup in setups.values():
            setup.url = f"http://127.0.0.1:{port_of(setup.process, setup.name)}/mcp"
        yield setups
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def client_headers(body: bytes, extra: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(name, value) for name, value in http_headers(body, extra) if name not in (b"host", b"content-length")]


async def prepare(setup: Setup, client: httpx.AsyncClient, with_session: bool) -> None:
    """Wait until the setup answers; then its request (a session created through the gateway, where it has one)."""
    raw = json.dumps(plain_body()).encode()
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        try:
            ready = await client.post(setup.url, content=raw, headers=client_headers(raw, NAME_HEADERS))
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
            continue
        assert ready.status_code == 200, (setup.name, ready.content)
        break
    setup.body, setup.headers = raw, client_headers(raw, NAME_HEADERS)
    if with_session:
        create = json.dumps(create_body()).encode()
        response = await client.post(setup.url, content=create, headers=client_headers(create, CREATE_HEADERS))
        token = session_token(response.status_code, response.content)
        setup.body = json.dumps(session_body(token)).encode()
        setup.headers = client_headers(setup.body, session_headers(token))


async def one(setup: Setup, client: httpx.AsyncClient) -> float:
    started_at = time.perf_counter()
    response = await client.post(setup.url, content=setup.body, headers=setup.headers)
    elapsed = time.perf_counter() - started_at
    assert response.status_code == 200 and b'"isError":false' in response.content, (setup.name, response.content)
    return elapsed


async def measure(setups: dict[str, Setup], rounds: int, warmup: int, max_seconds: float) -> int:
    clients = {name: httpx.AsyncClient(timeout=60) for name in setups}
    try:
        for name, setup in setups.items():
            await prepare(setup, clients[name], SETUPS[name][2])
        order = list(setups)
        for _ in range(warmup):
            for name in order:
                await one(setups[name], clients[name])
        before = {name: cpu_seconds(setup.process.pid) for name, setup in setups.items()}
        deadline, done = time.monotonic() + max_seconds, 0
        while done < rounds and time.monotonic() < deadline:
            random.shuffle(order)
            for name in order:
                setups[name].latencies.append(await one(setups[name], clients[name]))
            done += 1
        for name, setup in setups.items():
            setup.cpu = cpu_seconds(setup.process.pid) - before[name]
        return done
    finally:
        for client in clients.values():
            await client.aclose()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def summarize(setups: dict[str, Setup]) -> list[dict[str, Any]]:
    base = setups[BASE]
    base_p50, base_p99 = percentile(base.latencies, 0.5), percentile(base.latencies, 0.99)
    rows = []
    for name, setup in setups.items():
        p50, p99 = percentile(setup.latencies, 0.5), percentile(setup.latencies, 0.99)
        rows.append(
            {
                "name": name,
                "requests": len(setup.latencies),
                "p50_us": p50 * 1e6,
                "p99_us": p99 * 1e6,
                "added_p50_us": (p50 - base_p50) * 1e6,
                "added_p99_us": (p99 - base_p99) * 1e6,
                "p50_ratio": p50 / base_p50,
                "cpu_us": setup.cpu / len(setup.latencies) * 1e6 if setup.latencies else 0.0,
            }
        )
    return rows


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_name = {row["name"]: row for row in rows}
    gateway, bare = by_name["gateway, with session"]["added_p50_us"], by_name["bare httpx proxy"]["added_p50_us"]
    multiple = gateway / bare if bare > 0 else None
    return {
        "multiple": multiple,
        "target": GATEWAY_MULTIPLE,
        "met": multiple is not None and multiple <= GATEWAY_MULTIPLE,
    }


def report(rows: list[dict[str, Any]]) -> None:
    header = ("setup", "requests", "p50 µs", "p99 µs", "added p50 µs", "added p99 µs", "p50 ratio", "proxy CPU µs/req")
    table = [
        (
            row["name"],
            str(row["requests"]),
            f"{row['p50_us']:.0f}",
            f"{row['p99_us']:.0f}",
            f"{row['added_p50_us']:+.0f}",
            f"{row['added_p99_us']:+.0f}",
            f"{row['p50_ratio']:.2f}",
            f"{row['cpu_us']:.0f}",
        )
        for row in rows
    ]
    print_table(header, table, (False, True, True, True, True, True, True, True))


def gateway_verdict(result: dict[str, Any]) -> list[str]:
    """The performance page's verdict row: the gateway with a session against the bare proxy (p50)."""
    target = f"The gateway with a session adds ≤ {GATEWAY_MULTIPLE:g}x what a bare httpx proxy adds (p50)"
    if not result.get("available", True):
        return [target, "not measured in this run", "not judged"]
    rows = {row["name"]: row for row in result["rows"]}
    gateway, bare = rows["gateway, with session"], rows["bare httpx proxy"]
    measured = (
        f"gateway with a session {gateway['added_p50_us']:+.0f} µs (p99 {gateway['added_p99_us']:+.0f}), bare "
        f"httpx proxy {bare['added_p50_us']:+.0f} µs (p99 {bare['added_p99_us']:+.0f}), fastmcp create_proxy "
        f"{rows['fastmcp create_proxy']['added_p50_us']:+.0f} µs, over the upstream's own p50 of "
        f"{rows[BASE]['p50_us']:.0f} µs"
    )
    judged = result["verdict"]
    if judged["multiple"] is None:
        return [target, measured, "not judged: the bare proxy added nothing measurable"]
    met = "met" if judged["met"] else "**not met**"
    return [target, measured, f"{met}: {judged['multiple']:.2f}x"]


def section(result: dict[str, Any]) -> str:
    """The performance page's section for this benchmark's results (``--write``, and ``run_all.py``)."""
    if not result.get("available", True):
        return f"{SECTION}\n\nNot measured in this run (`python benchmarks/bench_gateway.py --write PAGE`).\n"
    lines = [
        SECTION,
        "",
        "What `mcp-sessions gateway` adds to a 2026-07-28 `tools/call`, against the upstream directly, a bare",
        "httpx streaming proxy and fastmcp's `create_proxy`, measured in one run by",
        "`python benchmarks/bench_gateway.py`: each setup its own uvicorn process, one request at a time, the",
        'setups alternated request by request, the proxies forwarding to an `MCPServer` of their own. "Added"',
        "is a setup's latency less the upstream's at the same percentile; \"CPU\" is the proxy process's own",
        "(for the upstreams, their whole request).",
        "",
        "| setup | p50 µs | p99 µs | added p50 µs | added p99 µs | p50 ratio | CPU µs/request |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['name']} | {row['p50_us']:.0f} | {row['p99_us']:.0f} | {row['added_p50_us']:+.0f} | "
            f"{row['added_p99_us']:+.0f} | {row['p50_ratio']:.2f} | {row['cpu_us']:.0f} |"
        )
    target, _, judged = gateway_verdict(result)
    machine_ = result["machine"]
    lines += [
        "",
        f"{target}: {judged}. {result['rounds']} rounds on {machine_['cpu']}, {machine_['date']}; load "
        f"{' / '.join(str(v) for v in result['load_before'])} before, "
        f"{' / '.join(str(v) for v in result['load_after'])} after.",
        "",
    ]
    return "\n".join(lines)


def write_section(page: Path, text: str) -> None:
    """Replace the page's section (or put it before "## Reading the numbers")."""
    content = page.read_text(encoding="utf-8")
    if f"\n{SECTION}\n" in content:
        start = content.index(f"\n{SECTION}\n") + 1
        end = content.find("\n## ", start + len(SECTION))
        content = content[:start] + text + (content[end + 1 :] if end >= 0 else "")
    else:
        anchor = content.index("\n## Reading the numbers\n") + 1
        content = content[:anchor] + text + "\n" + content[anchor:]
    page.write_text(content, encoding="utf-8")


async def main(args: argparse.Namespace) -> None:
    load_before, clock = load_average(), time.monotonic()
    server_cpus, client_cpus = pick_cpus()
    if client_cpus is not None:
        os.sched_setaffinity(0, client_cpus)
    with started(server_cpus) as setups:
        rounds = await measure(setups, args.rounds, args.warmup, args.max_seconds)
    rows = summarize(setups)
    report(rows)
    result = {
        "benchmark": "gateway",
        "smoke": args.smoke,
        "rounds": rounds,
        "seconds": round(time.monotonic() - clock, 1),
        "load_before": load_before,
        "load_after": load_average(),
        "machine": machine(),
        "rows": rows,
        "verdict": verdict(rows),
    }
    print(f"gateway with a session, added p50: {result['verdict']}")
    write_json(args.json, result)
    if args.write:
        write_section(Path(args.write), section(result))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400, help="measured requests per setup")
    parser.add_argument("--warmup", type=int, default=30, help="unmeasured rounds first")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="stop measuring after this long")
    parser.add_argument("--smoke", "--quick", dest="smoke", action="store_true", help="a few rounds only")
    parser.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    parser.add_argument("--write", metavar="PAGE", help="put the section on this page (docs/performance.md)")
    parser.add_argument("--from", dest="source", metavar="JSON", help="with --write: render kept results; run nothing")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--upstream", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.upstream)
    elif args.source and args.write:
        write_section(Path(args.write), section(json.loads(Path(args.source).read_text())))
    else:
        if args.smoke:
            args.rounds, args.warmup, args.max_seconds = 5, 2, 60.0
        asyncio.run(main(args))
