"""Server CPU per request through real uvicorn servers on loopback: is the middleware within noise?

One uvicorn process per compared server (access log off), all pinned to one CPU with the same hash seed
and memory layout, the ``httpx`` client on the other: the bare ``MCPServer``, a pass-through control, the
middleware without and with a session, the bare server sent the session-bearing body (the base of the
session case), and the same for the trivial app. Each round sends one slice of ``tools/call`` requests
(``--concurrency`` in flight on kept-alive connections) to every server in a new shuffled order, so that
drift hits every server alike. A server's CPU is its process's threads' run time across its slices
(``/proc/<pid>/task/*/schedstat``), uvicorn's HTTP handling included: the whole server's cost.

    python benchmarks/bench_uvicorn.py                 # full run
    python benchmarks/bench_uvicorn.py --quick         # a few requests: the tests check it runs
    python benchmarks/bench_uvicorn.py --json out.json # also write the results for run_all.py
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import random
import statistics
import time
from typing import Any

import httpx
from _harness import (
    SECRET,
    PassThrough,
    Servers,
    build_mcp_app,
    call_headers,
    client_headers,
    cpu_seconds,
    finish,
    load_average,
    new_session,
    pick_cpus,
    section,
    serve,
    servers,
    tools_call,
    trivial_app,
    until_ready,
    us,
    verdict,
)

# name -> (the app its server runs, whether its requests carry a session, its base)
SERVERS: dict[str, tuple[str, bool, str]] = {
    "bare MCPServer": ("bare", False, "bare MCPServer"),
    "pass-through control": ("pass-through", False, "bare MCPServer"),
    "middleware, no session": ("middleware", False, "bare MCPServer"),
    "bare, session body": ("bare", True, "bare MCPServer"),
    "middleware, with session": ("middleware", True, "bare, session body"),
    "trivial app": ("trivial", False, "trivial app"),
    "trivial + middleware, no session": ("trivial-middleware", False, "trivial app"),
    "trivial + middleware, session": ("trivial-middleware", True, "trivial app"),
}
TRIVIAL_WEIGHT = 3  # a trivial request costs about a third: three times as many per slice, as long as the others'


def app_of(kind: str) -> Any:
    from mcp_sessions import MCPSessionMiddleware

    inner = trivial_app if kind.startswith("trivial") else build_mcp_app()
    if kind.endswith("middleware"):
        return MCPSessionMiddleware(inner, secret=SECRET)
    return PassThrough(inner) if kind == "pass-through" else inner


async def run_slice(client: httpx.AsyncClient, url: str, body: bytes, headers: Any, count: int, width: int) -> None:
    """``count`` requests, at most ``width`` in flight; every answer checked."""
    remaining = count

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            response = await client.post(url, content=body, headers=headers)
            assert response.status_code == 200 and b'"isError":false' in response.content, response.content

    await asyncio.gather(*(worker() for _ in range(min(width, count))))


async def measure(started: Servers, args: argparse.Namespace) -> dict[str, list[float]]:
    """Each server's CPU seconds per request, slice by slice (slice ``i`` of every server in round ``i``)."""
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    clients = {name: httpx.AsyncClient(limits=limits, timeout=60) for name in started}
    slices: dict[str, list[float]] = {name: [] for name in started}
    try:
        for name, (_, url) in started.items():
            await until_ready(clients[name], url)
        mcp_token = await new_session(clients["middleware, with session"], started["middleware, with session"][1])
        trivial_url = started["trivial + middleware, session"][1]
        trivial_token = await new_session(clients["trivial + middleware, session"], trivial_url)
        requests = {}
        for name, (kind, with_session, _) in SERVERS.items():
            token = (trivial_token if kind.startswith("trivial") else mcp_token) if with_session else None
            body = json.dumps(tools_call(token)).encode()
            requests[name] = (body, client_headers(body, call_headers(token)))
            await run_slice(clients[name], started[name][1], *requests[name], args.warmup, args.concurrency)
        order = list(started)
        for _ in range(args.rounds):
            random.shuffle(order)
            for name in order:
                process, url = started[name]
                count = args.slice * (TRIVIAL_WEIGHT if SERVERS[name][0].startswith("trivial") else 1)
                before = cpu_seconds(process.pid)
                await run_slice(clients[name], url, *requests[name], count, args.concurrency)
                slices[name].append((cpu_seconds(process.pid) - before) / count)
    finally:
        for client in clients.values():
            await client.aclose()
    return slices


def paired_half_width(a: list[float], b: list[float]) -> float:
    """95% half-width of the mean difference of two servers' slices, paired by round (each round's load cancels)."""
    differences = [x - y for x, y in zip(a, b, strict=True)]
    return 1.96 * statistics.stdev(differences) / math.sqrt(len(differences)) if len(differences) > 1 else math.inf


def summarize(slices: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    rows = {}
    for name, (_, _, base) in SERVERS.items():
        cpu, base_cpu = statistics.fmean(slices[name]) * 1e6, statistics.fmean(slices[base]) * 1e6
        rows[name] = {
            "name": name,
            "base": base,
            "cpu_us": cpu,
            "ratio": cpu / base_cpu,
            "added_us": cpu - base_cpu,
            "ci_us": 0.0 if name == base else paired_half_width(slices[name], slices[base]) * 1e6,
            "slices": len(slices[name]),
        }
    return rows


NOISE = (
    "Within noise means: the middleware adds no more server CPU than two processes of one app differ by in the "
    "same run, which the pass-through control (a do-nothing layer in a process of its own) shows: its added CPU "
    "taken either way, plus its 95% half-width. A smaller added cost cannot be told from running the same app "
    "in another process."
)


def within_noise(rows: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The verdict: a session-bearing call on the MCPServer within noise of the bare server (:data:`NOISE`)."""
    ours, control = rows["middleware, with session"], rows["pass-through control"]
    noise = abs(control["added_us"]) + control["ci_us"]
    share = ours["added_us"] / rows["bare, session body"]["cpu_us"]
    return verdict(
        "Through uvicorn, a session-bearing `tools/call` on an `MCPServer` behind the middleware stays within "
        "noise of the bare server (no more added server CPU than the pass-through control's difference and its "
        "95% interval)",
        f"server CPU per request: the middleware {us(ours['added_us'], ours['ci_us'])} on "
        f"{rows['bare, session body']['cpu_us']:.0f} µs ({share:+.1%}); "
        f"the pass-through control {us(control['added_us'], control['ci_us'])}",
        ours["added_us"] <= noise,
        f"{ours['added_us']:+.1f} µs against a noise of {noise:.1f} µs",
    )


def main(args: argparse.Namespace) -> None:
    began = time.monotonic(), load_average()
    server_cpus, client_cpus = pick_cpus()
    if client_cpus is not None:
        os.sched_setaffinity(0, client_cpus)
    commands = {name: [__file__, "--serve", kind] for name, (kind, _, _) in SERVERS.items()}
    with servers(commands, server_cpus) as started:
        slices = asyncio.run(measure(started, args))
    rows = summarize(slices)
    how = (
        f"`bench_uvicorn.py`: {args.rounds} rounds, each a slice of {args.slice} requests per server "
        f"({TRIVIAL_WEIGHT} times as many for the trivial app's), {args.concurrency} in flight on kept-alive "
        "connections, the servers taking turns in a shuffled order; server CPU per request from the server "
        "process's threads' run time; \"± µs\" is the 95% half-width of the mean per-round difference from the base."
    )
    table = [
        [r["name"], f"{r['cpu_us']:.0f}", f"{r['ratio']:.3f}", f"{r['added_us']:+.1f}", f"{r['ci_us']:.1f}", r["base"]]
        for r in rows.values()
    ]
    header = ["server", "server CPU µs/request", "ratio", "added µs", "± µs (95%)", "base"]
    sections = [section("Through uvicorn", f"{how} {NOISE}", header, table)]
    finish("uvicorn", args.json, args.quick, began, sections, [within_noise(rows)], rows=list(rows.values()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=120, help="slices per server")
    parser.add_argument("--slice", type=int, default=50, help="requests per server per round")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight per server")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured requests per server first")
    parser.add_argument("--quick", "--smoke", action="store_true", help="a few requests only")
    parser.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    parser.add_argument("--serve", choices=sorted({kind for kind, _, _ in SERVERS.values()}), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(functools.partial(app_of, args.serve))
    else:
        if args.quick:
            args.rounds, args.slice, args.warmup = 3, 4, 4
        main(args)
