"""Throughput and server CPU per request through real uvicorn servers on loopback.

One uvicorn process per compared server, each on its own 127.0.0.1 port, all
pinned to the same CPU (the client to another one when there are two), with
the same hash seed and, where ``setarch -R`` is available, the same memory
layout:

- ``bare MCPServer``: the ``mcp`` SDK's ``MCPServer`` app (JSON responses);
- ``pass-through control``: the same app behind a do-nothing ASGI wrapper;
- ``middleware, no session``: behind ``MCPSessionMiddleware``, requests without a session;
- ``bare, session body``: the bare app sent the session-bearing requests (which it ignores);
- ``middleware, with session``: behind the middleware, each request naming a session;
- ``session floor``: behind the hand-written minimum session layer (``SessionFloor``), the same requests;
- ``checked floor``: behind that minimum plus the checks a session-bearing call must make
  (``CheckedSessionFloor``), the same requests;
- ``trivial app``, ``trivial + middleware, no session``, ``trivial + middleware, session``:
  the same for an app that reads the body and answers a fixed result, so that
  the middleware's cost shows against uvicorn's own; and ``trivial + session floor``
  and ``trivial + checked floor``.

An ``httpx.AsyncClient`` per server (keep-alive, at most ``--concurrency``
requests in flight) sends ``tools/call`` requests in slices: each round runs
one slice on every server, in a new shuffled order, so that drift on this
noisy machine hits every server alike (the trivial app's servers, whose
requests cost about a third as much, run slices three times as long). For each server it reports requests
per second over its slices and the server process's CPU time per request:
the delta of its threads' ``/proc/<pid>/task/*/schedstat`` run time across
its slices, in nanoseconds (``utime + stime`` of ``/proc/<pid>/stat``, in
10 ms clock ticks, is kept in the JSON as a cross-check), which covers
uvicorn's HTTP handling as well as the app; each with its ratio to its base,
and a 95% interval on the added CPU from the spread of its slices' differences
from its base's, paired by round (each round's load falls on both alike); each
multiple of a floor gets its own 95% interval the same way (``*_multiple_ci`` in
the JSON). The client shares the machine: requests/s tells how the pair does,
CPU per request is the server's own cost.

    python benchmarks/bench_uvicorn.py                 # full run
    python benchmarks/bench_uvicorn.py --smoke         # a few requests: CI checks it runs
    python benchmarks/bench_uvicorn.py --json out.json # also write the numbers for run_all.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
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
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _harness import (
    CREATE_HEADERS,
    NAME_HEADERS,
    SECRET,
    CheckedSessionFloor,
    ClaimsOnFirstSight,
    PassThrough,
    SessionFloor,
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
    trivial_app,
    write_json,
)

# name -> (the app the server runs, whether its requests carry a session, its base)
SERVERS: dict[str, tuple[str, bool, str]] = {
    "bare MCPServer": ("bare", False, "bare MCPServer"),
    "pass-through control": ("pass-through", False, "bare MCPServer"),
    "middleware, no session": ("middleware", False, "bare MCPServer"),
    "bare, session body": ("bare", True, "bare MCPServer"),
    "middleware, with session": ("middleware", True, "bare, session body"),
    "session floor": ("floor", True, "bare, session body"),
    "checked floor": ("checked-floor", True, "bare, session body"),
    "trivial app": ("trivial", False, "trivial app"),
    "trivial + middleware, no session": ("trivial-middleware", False, "trivial app"),
    "trivial + middleware, session": ("trivial-middleware", True, "trivial app"),
    "trivial + session floor": ("trivial-floor", True, "trivial app"),
    "trivial + checked floor": ("trivial-checked-floor", True, "trivial app"),
}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Without address-space randomization, where setarch can turn it off: the same memory layout in every server.
SAME_LAYOUT = ["setarch", platform.machine(), "-R"] if shutil.which("setarch") else []
STARTUP_SECONDS = 30.0
# A trivial app's request costs about a third of an MCPServer's: its servers run three times as many
# requests per round, as long as the others', so that their smaller added costs are measured as closely.
TRIVIAL_WEIGHT = 3


def serve(kind: str) -> None:
    """The server process: bind an ephemeral port, print it, serve until killed."""
    import uvicorn

    from mcp_sessions import MCPSessionMiddleware

    # The floor takes every session it is sent as verified: a dict that has them all. The checked
    # floor's cache takes a token's claims as verified the first time, then checks them on each request.
    sessions: defaultdict[str, object] = defaultdict(object)
    verified = ClaimsOnFirstSight()
    app: Any
    if kind.startswith("trivial"):
        app = {
            "trivial": trivial_app,
            "trivial-middleware": MCPSessionMiddleware(trivial_app, secret=SECRET),
            "trivial-floor": SessionFloor(trivial_app, sessions),
            "trivial-checked-floor": CheckedSessionFloor(trivial_app, verified),
        }[kind]
    else:
        inner = build_mcp_app()
        app = {
            "bare": inner,
            "pass-through": PassThrough(inner),
            "middleware": MCPSessionMiddleware(inner, secret=SECRET),
            "floor": SessionFloor(inner, sessions),
            "checked-floor": CheckedSessionFloor(inner, verified),
        }[kind]
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only then (else Nagle + delayed ACK add ~40 ms).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    print(sock.getsockname()[1], flush=True)
    # The servers take turns: a busy machine can leave one's kept-alive connections idle past
    # uvicorn's default 5 s, and a request racing the server's close fails with ReadError.
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="auto", timeout_keep_alive=3600)
    uvicorn.Server(config).run(sockets=[sock])


def client_headers(body: bytes, extra: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The request headers, less those httpx writes itself."""
    return [(name, value) for name, value in http_headers(body, extra) if name not in (b"host", b"content-length")]


def cpu_seconds(pid: int) -> float:
    """The CPU time of a process (all its threads) in seconds, to the nanosecond.

    From ``/proc/<pid>/task/*/schedstat`` (the scheduler's run time of each
    thread); ``utime + stime`` of ``/proc/<pid>/stat`` counts in clock ticks
    (10 ms), as long as a whole slice of a trivial app's requests.
    """
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        for task in tasks:
            with contextlib.suppress(FileNotFoundError):  # a thread that just ended
                total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return tick_seconds(pid)
    return total / 1e9


def tick_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds, counted in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 14 and 15 of proc(5), after pid and comm


@dataclass
class Server:
    name: str
    process: subprocess.Popen[str]
    url: str
    with_session: bool
    middleware: bool
    weight: int = 1  # requests per slice, and in all, as a multiple of --slice and --requests
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    requests: int = 0
    seconds: float = 0.0
    cpu: float = 0.0
    ticks: float = 0.0
    slices: list[float] = field(default_factory=list)  # CPU seconds per request of each slice


def pick_cpus() -> tuple[set[int] | None, set[int] | None]:
    """Servers on one CPU, the client on another, when the machine has two to give."""
    try:
        usable = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None, None
    if len(usable) < 2:
        return None, None
    return {usable[-1]}, {usable[0]}


@contextlib.contextmanager
def started_servers(server_cpus: set[int] | None) -> Iterator[dict[str, Server]]:
    servers: dict[str, Server] = {}
    # Alike, not just pinned alike: the same string hashes (so the same dict layouts) in every server.
    environ = dict(os.environ, PYTHONHASHSEED="0")
    try:
        for name, (kind, with_session, _) in SERVERS.items():
            process = subprocess.Popen(
                [*SAME_LAYOUT, sys.executable, __file__, "--serve", kind],
                env=environ,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            weight = TRIVIAL_WEIGHT if kind.startswith("trivial") else 1
            servers[name] = Server(name, process, "", with_session, "middleware" in kind, weight)
            if server_cpus is not None:
                os.sched_setaffinity(process.pid, server_cpus)
        for server in servers.values():
            assert server.process.stdout is not None
            line = server.process.stdout.readline()  # the port, once the socket listens
            if not line.strip().isdigit():
                raise RuntimeError(f"{server.name}: the server did not start")
            server.url = f"http://127.0.0.1:{int(line)}/mcp"
        yield servers
    finally:
        for server in servers.values():
            server.process.terminate()
        for server in servers.values():
            try:
                server.process.wait(10)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait(10)


async def wait_ready(server: Server, client: httpx.AsyncClient) -> None:
    """Wait for the server to answer a ``tools/call``."""
    deadline = time.monotonic() + STARTUP_SECONDS
    raw = json.dumps(plain_body()).encode()
    while True:
        try:
            response = await client.post(server.url, content=raw, headers=client_headers(raw, NAME_HEADERS))
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)
        else:
            assert response.status_code == 200, (server.name, response.content)
            return


async def new_session(server: Server, client: httpx.AsyncClient) -> str:
    raw = json.dumps(create_body()).encode()
    response = await client.post(server.url, content=raw, headers=client_headers(raw, CREATE_HEADERS))
    return session_token(response.status_code, response.content)


def set_request(server: Server, token: str) -> None:
    if server.with_session:
        server.body = json.dumps(session_body(token)).encode()
        server.headers = client_headers(server.body, session_headers(token))
    else:
        server.body = json.dumps(plain_body()).encode()
        server.headers = client_headers(server.body, NAME_HEADERS)


async def run_slice(server: Server, client: httpx.AsyncClient, count: int, concurrency: int) -> None:
    """``count`` requests, at most ``concurrency`` in flight; checks every answer."""
    remaining = count
    echoes = server.middleware or SERVERS[server.name][0].endswith("floor")
    expected = b"io.modelcontextprotocol/session" if server.with_session and echoes else None

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            response = await client.post(server.url, content=server.body, headers=server.headers)
            assert response.status_code == 200, (server.name, response.status_code, response.content)
            assert expected is None or expected in response.content, (server.name, response.content)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))


async def measure(
    servers: dict[str, Server], requests: int, slice_size: int, concurrency: int, warmup: int, max_seconds: float
) -> None:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    clients = {name: httpx.AsyncClient(limits=limits, timeout=30) for name in servers}
    try:
        for name, server in servers.items():
            await wait_ready(server, clients[name])
        tokens = {
            name: await new_session(server, clients[name])
            for name, server in servers.items()
            if server.with_session and server.middleware
        }
        borrowed = next(iter(tokens.values()))  # a bare server ignores the session it is sent
        for name, server in servers.items():
            set_request(server, tokens.get(name, borrowed))
            await run_slice(server, clients[name], warmup, concurrency)
        deadline = time.monotonic() + max_seconds
        order = list(servers)
        while any(server.requests < requests * server.weight for server in servers.values()):
            if time.monotonic() > deadline:
                break
            random.shuffle(order)
            for name in order:
                server = servers[name]
                count = min(slice_size * server.weight, requests * server.weight - server.requests)
                if count <= 0:
                    continue
                pid = server.process.pid
                cpu_before, ticks_before = cpu_seconds(pid), tick_seconds(pid)
                start = time.perf_counter()
                await run_slice(server, clients[name], count, concurrency)
                server.seconds += time.perf_counter() - start
                used = cpu_seconds(pid) - cpu_before
                server.cpu += used
                server.slices.append(used / count)
                server.ticks += tick_seconds(pid) - ticks_before
                server.requests += count
    finally:
        for client in clients.values():
            await client.aclose()


def mean_half_width(a: list[float], b: list[float]) -> float:
    """Approximate 95% half-width of the difference of two servers' means, from their slices.

    Slice ``i`` of every server ran in round ``i``: paired by round, the load a round met on this
    machine, which every server in it met alike, cancels; unpaired (two independent spreads) only
    when a deadline left the servers with different numbers of slices.
    """
    if len(a) < 2 or len(b) < 2:
        return 0.0
    if len(a) == len(b):
        return 1.96 * statistics.stdev([x - y for x, y in zip(a, b, strict=True)]) / math.sqrt(len(a))
    return 1.96 * math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))


def ratio_half_width(
    server: list[float], server_base: list[float], floor: list[float], floor_base: list[float]
) -> float | None:
    """Approximate 95% half-width of ``(server - server_base) / (floor - floor_base)``, all paired by round.

    The delta method for a ratio of means: the spread of ``a - r * f`` over the rounds, where ``a`` and
    ``f`` are a round's two added costs and ``r`` their ratio, over the floor's mean added cost. With
    one base for both (as a row and its app's floors have), the base's share of a round moves the
    two together and mostly cancels. ``None`` when the slices cannot be paired (a deadline left them
    unequal) or the floor added nothing.
    """
    n = len(server)
    if n < 2 or not len(server_base) == len(floor) == len(floor_base) == n:
        return None
    added = [x - b for x, b in zip(server, server_base, strict=True)]
    floor_added = [f - b for f, b in zip(floor, floor_base, strict=True)]
    floor_mean = statistics.fmean(floor_added)
    if floor_mean <= 0:
        return None
    ratio = statistics.fmean(added) / floor_mean
    residuals = [a - ratio * f for a, f in zip(added, floor_added, strict=True)]
    return 1.96 * statistics.stdev(residuals) / (math.sqrt(n) * floor_mean)


def summarize(servers: dict[str, Server]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, server in servers.items():
        base = servers[SERVERS[name][2]]
        throughput = server.requests / server.seconds if server.seconds else 0.0
        base_throughput = base.requests / base.seconds if base.seconds else 0.0
        cpu_us = server.cpu / server.requests * 1e6 if server.requests else 0.0
        base_cpu_us = base.cpu / base.requests * 1e6 if base.requests else 0.0
        rows.append(
            {
                "name": name,
                "base": base.name,
                "requests": server.requests,
                "requests_per_second": throughput,
                "throughput_ratio": throughput / base_throughput if base_throughput else 0.0,
                "cpu_us": cpu_us,
                "cpu_ratio": cpu_us / base_cpu_us if base_cpu_us else 0.0,
                "added_cpu_us": cpu_us - base_cpu_us,
                "ci_us": mean_half_width(server.slices, base.slices) * 1e6 if base is not server else 0.0,
                "tick_cpu_us": server.ticks / server.requests * 1e6 if server.requests else 0.0,
            }
        )
    for row in rows:  # each row's added CPU as a multiple of each floor's among the servers of its app
        trivial = row["name"].startswith("trivial")
        for key, floor_name in (("floor_multiple", "session floor"), ("checked_multiple", "checked floor")):
            floor = next(
                f for f in rows if f["name"].endswith(floor_name) and f["name"].startswith("trivial") == trivial
            )
            # A multiple of a floor lost in the noise (its added CPU within its own ± µs) would say nothing;
            # nor would a row's own added CPU lost in its noise (through uvicorn the MCPServer's rows can read
            # below their base: two processes differ by tens of µs, as the pass-through control shows).
            measured = (
                row["base"] != row["name"]
                and floor["added_cpu_us"] > max(floor["ci_us"], 0.0)
                and abs(row["added_cpu_us"]) > row["ci_us"]
            )
            row[key] = row["added_cpu_us"] / floor["added_cpu_us"] if measured else None
            row[f"{key}_ci"] = (
                ratio_half_width(
                    servers[row["name"]].slices,
                    servers[row["base"]].slices,
                    servers[floor["name"]].slices,
                    servers[floor["base"]].slices,
                )
                if measured
                else None
            )
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    header = (
        "server",
        "requests",
        "req/s",
        "ratio",
        "server CPU µs/req",
        "ratio",
        "added µs",
        "± µs (95%)",
        "x floor",
        "x checked",
        "base",
    )
    table = [
        (
            row["name"],
            str(row["requests"]),
            f"{row['requests_per_second']:.0f}",
            f"{row['throughput_ratio']:.3f}",
            f"{row['cpu_us']:.0f}",
            f"{row['cpu_ratio']:.3f}",
            f"{row['added_cpu_us']:.0f}",
            f"{row['ci_us']:.0f}",
            "" if row["floor_multiple"] is None else f"{row['floor_multiple']:.2f}",
            "" if row["checked_multiple"] is None else f"{row['checked_multiple']:.2f}",
            row["base"],
        )
        for row in rows
    ]
    print_table(header, table, (False, True, True, True, True, True, True, True, True, True, False))


async def main(args: argparse.Namespace) -> None:
    load_before = load_average()
    server_cpus, client_cpus = pick_cpus()
    if client_cpus is not None:
        os.sched_setaffinity(0, client_cpus)
    started = time.monotonic()
    with started_servers(server_cpus) as servers:
        await measure(servers, args.requests, args.slice, args.concurrency, args.warmup, args.max_seconds)
    rows = summarize(servers)
    report(rows)
    write_json(
        args.json,
        {
            "benchmark": "uvicorn",
            "smoke": args.smoke,
            "requests": args.requests,
            "slice": args.slice,
            "trivial_weight": TRIVIAL_WEIGHT,
            "concurrency": args.concurrency,
            "server_cpus": sorted(server_cpus) if server_cpus else None,
            "client_cpus": sorted(client_cpus) if client_cpus else None,
            "clock_ticks_per_second": CLOCK_TICKS,
            "same_layout": bool(SAME_LAYOUT),
            "seconds": round(time.monotonic() - started, 1),
            "load_before": load_before,
            "load_after": load_average(),
            "machine": machine(),
            "rows": rows,
        },
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=6000, help="measured requests per server")
    parser.add_argument("--slice", type=int, default=50, help="requests per server per round")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight per server")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured requests per server first")
    parser.add_argument("--max-seconds", type=float, default=400.0, help="stop measuring after this long")
    parser.add_argument("--smoke", "--quick", dest="smoke", action="store_true", help="a few requests only")
    parser.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    parser.add_argument("--serve", choices=sorted({kind for kind, _, _ in SERVERS.values()}), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
    else:
        if args.smoke:
            args.requests, args.slice, args.warmup, args.max_seconds = 16, 8, 8, 30.0
        asyncio.run(main(args))
