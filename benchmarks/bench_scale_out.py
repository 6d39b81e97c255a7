"""Throughput across replicas: uvicorn replicas sharing a Redis Cluster, against one replica on the memory store.

Each setup serves ``examples/quickstart.py`` (JSON responses) from real uvicorn
processes on loopback, configured only by environment, as a deployment would:

- ``1 replica, memory store``: the base, one process and nothing shared;
- ``3 replicas, one Redis``: ``MCP_SESSIONS_STORE=redis://…``;
- ``3 replicas, 3-node Redis Cluster``: ``MCP_SESSIONS_STORE=redis+cluster://…``, three masters.

A bounded load generator in this process runs conversations, ``--concurrency``
at a time, each on an HTTP client of its own, as MCP clients are. Each is
``sessions/create``, ``--calls`` ``tools/call count`` (the tool increments a
counter in ``session.data``) and ``sessions/delete``, every
request sent to the next replica in turn, so that each conversation crosses
every replica. It reports requests per second, p50 and p99 latency per request,
the conversations whose counts were not exactly 1, 2, … (lost increments: must
be 0) and every error; then, with the Redis setups, the memory one live session
with a counter takes in Redis (``MEMORY USAGE`` of its keys, summed over the
nodes) and what a deleted session's tombstone takes.

Everything runs on this machine, the load generator included: on two cores the
replicas, the Redis nodes and the client share the CPU, so the figures are a
floor of what the middleware sustains, not a capacity plan.

    python benchmarks/bench_scale_out.py                  # full run (about a minute)
    python benchmarks/bench_scale_out.py --quick          # a few conversations: the tests check it runs
    python benchmarks/bench_scale_out.py --json out.json  # also the numbers, for run_all.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

MAIN = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(MAIN / "tests"))  # the real Redis topologies the tests start
sys.path.insert(0, str(MAIN))  # ... whose helpers import the examples

from _harness import finish, load_average, section, verdict  # noqa: E402 - after the path above

from _mcp import modern_headers, modern_request, session_meta  # noqa: E402
from _redis import redis_server  # noqa: E402
from _redis_topologies import redis_cluster  # noqa: E402
from e2e._replicas import replicas  # noqa: E402

SECRET = "scale-out-benchmark-secret-0123456789-abcdef"
REPLICAS = 3


async def post(
    client: httpx.AsyncClient, url: str, method: str, params: Mapping[str, Any] | None = None, token: str | None = None
) -> httpx.Response:
    """One 2026-07-28 request, as the tests send it, in the session ``token`` names (if any)."""
    body = modern_request(method, params, session=None if token is None else session_meta(token))
    return await client.post(url, json=body, headers=modern_headers(body))


@dataclass
class Load:
    """What one setup's load produced."""

    latencies: list[float] = field(default_factory=list)
    conversations: int = 0
    lost: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def converse(client: httpx.AsyncClient, urls: Sequence[str], first: int, calls: int, load: Load) -> None:
    """One conversation: create, ``calls`` counts, delete; request ``n`` goes to replica ``first + n``."""
    turn = first

    async def call(method: str, params: Mapping[str, Any] | None = None, token: str | None = None) -> Any:
        nonlocal turn
        url = urls[turn % len(urls)]
        turn += 1
        started = time.perf_counter()
        response = await post(client, url, method, params, token)
        load.latencies.append(time.perf_counter() - started)
        message = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        if response.status_code != 200 or "error" in message:
            code = message.get("error", {}).get("code") if isinstance(message, dict) else None
            load.error(f"{method}: HTTP {response.status_code}, code {code}")
            return None
        return message["result"]

    created = await call("sessions/create")
    if created is None:
        return
    token = created["session"]["sessionId"]
    counts = []
    for _ in range(calls):
        result = await call("tools/call", {"name": "count", "arguments": {}}, token)
        counts.append(None if result is None else int(result["content"][0]["text"]))
    if counts != list(range(1, calls + 1)):
        load.lost += 1
    await call("sessions/delete", {}, token)
    load.conversations += 1


async def run_load(urls: Sequence[str], conversations: int, concurrency: int, calls: int, budget: float) -> Load:
    """``conversations`` conversations, ``concurrency`` at a time, stopping early at ``budget`` seconds."""
    load = Load()
    # A client of its own for each conversation at a time, as MCP clients are: one client's pool for all of them
    # looks at every connection for each request, and the load generator would measure itself.
    tls = httpx.create_ssl_context()  # one for all: unused on http://, and 40 ms of CPU to build
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(verify=tls, timeout=30)) for _ in range(concurrency)
        ]
        for index, client in enumerate(clients[:conversations]):  # warm every replica and connection up
            await converse(client, urls, index, 1, Load())
        queue = iter(range(conversations))
        deadline = time.monotonic() + budget

        async def worker(client: httpx.AsyncClient) -> None:
            for index in queue:
                if time.monotonic() > deadline:
                    return
                await converse(client, urls, index, calls, load)

        started = time.perf_counter()
        await asyncio.gather(*(worker(client) for client in clients))
        load.seconds = time.perf_counter() - started
    return load


def key_bytes(ports: Sequence[int]) -> int:
    """``MEMORY USAGE`` (exact for these small keys: ``SAMPLES 0``) summed over every key of every node.

    Read key by key rather than from ``used_memory``, which moves with client buffers and the
    allocator as much as with the keys after a burst of load.
    """
    total = 0
    for port in ports:
        with redis.Redis(port=port) as client:
            for key in client.scan_iter(count=1000):
                total += int(client.memory_usage(key, samples=0) or 0)
    return total


async def memory_per_session(urls: Sequence[str], ports: Sequence[int], sessions: int) -> dict[str, float]:
    """The Redis memory one live session with a counter takes, and one deleted session's tombstone."""
    async with httpx.AsyncClient(timeout=30) as client:

        async def result(
            url: str, method: str, params: Mapping[str, Any] | None = None, token: str | None = None
        ) -> Any:
            return (await post(client, url, method, params, token)).json()["result"]

        before = key_bytes(ports)
        tokens = []
        for index in range(sessions):
            url = urls[index % len(urls)]
            token = (await result(url, "sessions/create"))["session"]["sessionId"]
            await result(url, "tools/call", {"name": "count", "arguments": {}}, token)
            tokens.append(token)
        live = key_bytes(ports)
        for index, token in enumerate(tokens):
            await result(urls[index % len(urls)], "sessions/delete", {}, token)
        deleted = key_bytes(ports)
    return {"live_bytes": (live - before) / sessions, "tombstone_bytes": (deleted - before) / sessions}


def summarize(name: str, load: Load, requests_per_conversation: int) -> dict[str, Any]:
    latencies = sorted(load.latencies)
    quantiles = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else latencies * 99
    return {
        "setup": name,
        "conversations": load.conversations,
        "requests": len(latencies),
        "requests_per_second": len(latencies) / load.seconds if load.seconds else 0.0,
        "p50_ms": quantiles[49] * 1000,
        "p99_ms": quantiles[98] * 1000,
        "lost_increments": load.lost,
        "errors": load.errors,
        "requests_per_conversation": requests_per_conversation,
    }


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    per = args.calls + 2

    async def one(name: str, count: int, store: Mapping[str, str], ports: Sequence[int] = ()) -> None:
        environ = {"MCP_SESSIONS_SECRET": SECRET, "QUICKSTART_JSON": "1", **store}
        with replicas(*[environ] * count) as started:
            urls = [replica.url + "/mcp" for replica in started]
            load = await run_load(urls, args.conversations, args.concurrency, args.calls, args.budget)
            row = summarize(name, load, per)
            if ports:
                row.update(await memory_per_session(urls, ports, args.memory_sessions))
            rows.append(row)
            print(f"  {name}: {row['requests_per_second']:.0f} requests/s", file=sys.stderr)

    await one("1 replica, memory store", 1, {})
    with redis_server() as server:
        await one(f"{REPLICAS} replicas, one Redis", REPLICAS, {"MCP_SESSIONS_STORE": server.url}, [server.port])
    with redis_cluster(3) as cluster:
        await one(
            f"{REPLICAS} replicas, 3-node Redis Cluster",
            REPLICAS,
            {"MCP_SESSIONS_STORE": cluster.url},
            [node.port for node in cluster.nodes],
        )
    return rows


def scale_out_report(
    rows: list[dict[str, Any]], args: argparse.Namespace
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    how = (
        "`bench_scale_out.py`: real uvicorn processes serving `examples/quickstart.py` (JSON responses), configured "
        "only by environment as a deployment is: one replica on the memory store (the base), three replicas sharing "
        "one Redis (`redis://`), and three sharing a three-node Redis Cluster (`redis+cluster://`). A load generator "
        f"on the same machine runs {args.conversations} conversations per setup, {args.concurrency} at a time, each "
        "on an HTTP client of its own (as MCP clients are): "
        f"`sessions/create`, {args.calls} `tools/call count` (an increment of `session.data`) and `sessions/delete`, "
        "every request sent to the next replica in turn; p50 and p99 are per request, as the client sees them. "
        '"lost increments" counts the conversations whose counts were not exactly 1, 2, …; "errors" every answer '
        "that was not a result. The Redis memory is `MEMORY USAGE` of the keys, summed over the nodes, per session "
        f"({args.memory_sessions} live sessions with a counter, then the same deleted: a deleted session keeps a "
        "tombstone until its token would have expired). Replicas, Redis and the client share this machine's cores: "
        "the figures are a floor, not a capacity plan."
    )
    header = ["setup", "conversations", "requests", "requests/s", "p50 ms", "p99 ms", "lost increments", "errors"]
    header += ["Redis bytes per live session", "per deleted session"]
    table = [
        [
            row["setup"],
            row["conversations"],
            row["requests"],
            f"{row['requests_per_second']:.0f}",
            f"{row['p50_ms']:.1f}",
            f"{row['p99_ms']:.1f}",
            row["lost_increments"],
            sum(row["errors"].values()),
            f"{row['live_bytes']:.0f}" if "live_bytes" in row else "n/a",
            f"{row['tombstone_bytes']:.0f}" if "tombstone_bytes" in row else "n/a",
        ]
        for row in rows
    ]
    lost, errors = sum(row["lost_increments"] for row in rows), sum(sum(row["errors"].values()) for row in rows)
    judged = verdict(
        f"Scale out: {REPLICAS} replicas sharing a Redis or a Redis Cluster lose no increment, answer every request",
        "; ".join(
            f"{row['setup']}: {row['requests_per_second']:.0f} requests/s, p99 {row['p99_ms']:.1f} ms" for row in rows
        ),
        lost == 0 and errors == 0,
        f"{lost} conversations lost an increment, {errors} errors",
    )
    return [section("Scale out", how, header, table)], [judged]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=600, help="conversations per setup")
    parser.add_argument("--concurrency", type=int, default=24, help="conversations at a time")
    parser.add_argument("--calls", type=int, default=8, help="tools/call count per conversation")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds of load per setup at most")
    parser.add_argument("--memory-sessions", type=int, default=500, help="live sessions for the memory figure")
    parser.add_argument("--quick", "--smoke", action="store_true", help="a few conversations only")
    parser.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    args = parser.parse_args()
    if args.quick:
        args.conversations, args.concurrency, args.calls, args.memory_sessions = 12, 4, 3, 20
    began = time.monotonic(), load_average()
    rows = asyncio.run(measure(args))
    sections, verdicts = scale_out_report(rows, args)
    finish("scale_out", args.json, args.quick, began, sections, verdicts, rows=rows)


if __name__ == "__main__":
    main()
