"""What one session request costs each store: a touch (the hot path) and an ``incr``, in microseconds.

    python benchmarks/bench_stores.py                   # memory, sqlite, and redis if redis-server is installed
    python benchmarks/bench_stores.py --redis-url redis://127.0.0.1:6379/0
    python benchmarks/bench_stores.py --smoke           # a few requests each: proves the script runs

One client, requests one after another, over 100 sessions: latency, not throughput. Each row is the
median of several rounds. The Redis server (started here on a free loopback port when no URL is
given) and the SQLite file (in a temporary directory) are local, so the numbers are the stores' own
cost plus a loopback round trip for Redis; a networked Redis adds its round-trip time to every call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from mcp_sessions.stores import MemoryStore, SessionStore
from mcp_sessions.stores._sqlite import SQLiteStore

SESSIONS = 100
IDLE_TTL = 1800.0


@contextlib.contextmanager
def local_redis() -> Iterator[str | None]:
    """A throwaway redis-server on a free loopback port, or None when it is not installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as directory:
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", directory],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
                time.sleep(0.02)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(10)


async def per_request(request: Callable[[int], Awaitable[None]], requests: int, rounds: int) -> float:
    """Median microseconds per request over ``rounds`` rounds of ``requests`` requests."""
    for i in range(min(requests, SESSIONS)):  # warm: scripts loaded, connections open, rows present
        await request(i)
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        for i in range(requests):
            await request(i)
        samples.append((time.perf_counter() - started) / requests * 1e6)
    return statistics.median(samples)


async def measure_store(store: SessionStore, requests: int, rounds: int) -> dict[str, float]:
    """The store's cost per touch without idle timeout, per touch with one, and per touch + incr."""
    expires_at = time.time() + 3600

    async def read(i: int) -> None:
        now = time.time()
        await store.touch(f"s{i % SESSIONS}", expires_at=expires_at, now=now, idle_ttl=None, issued_at=now)

    async def idle(i: int) -> None:
        now = time.time()
        await store.touch(f"s{i % SESSIONS}", expires_at=expires_at, now=now, idle_ttl=IDLE_TTL, issued_at=now)

    async def counted(i: int) -> None:
        await idle(i)
        await store.incr(f"s{i % SESSIONS}", "n", expires_at=expires_at)

    return {
        "touch, no idle timeout": await per_request(read, requests, rounds),
        "touch, idle timeout": await per_request(idle, requests, rounds),
        "touch + incr (a session request)": await per_request(counted, requests, rounds),
    }


async def run(redis_url: str | None, requests: int, rounds: int) -> dict[str, dict[str, float]]:
    """Every store's row."""
    results: dict[str, dict[str, float]] = {}
    results["memory"] = await measure_store(MemoryStore(), requests, rounds)
    with tempfile.TemporaryDirectory() as directory:
        sqlite = SQLiteStore(Path(directory) / "sessions.db")
        try:
            results["sqlite"] = await measure_store(sqlite, requests, rounds)
        finally:
            await sqlite.aclose()
    if redis_url is not None:
        from mcp_sessions.stores._redis import RedisStore

        redis = RedisStore(redis_url, prefix=f"bench-{time.time_ns()}:")
        try:
            results["redis"] = await measure_store(redis, requests, rounds)
        finally:
            await redis.aclose()
    return results


def report(results: dict[str, dict[str, float]]) -> str:
    """A plain-text table: microseconds per operation, and the ratio to MemoryStore."""
    lines = [f"{'operation':40}  {'store':8}  {'µs/op':>8}  {'x memory':>9}"]
    base = results["memory"]
    for operation in results["sqlite"]:
        for name, row in results.items():
            if operation in row:
                reference = base.get(operation, base["touch, no idle timeout"])
                lines.append(f"{operation:40}  {name:8}  {row[operation]:8.1f}  {row[operation] / reference:9.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", help="a scratch Redis (default: start redis-server here, if installed)")
    parser.add_argument("--requests", type=int, default=2000, help="requests a round (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported (default 5)")
    parser.add_argument("--smoke", action="store_true", help="20 requests, 1 round: proves the script runs")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    requests, rounds = (20, 1) if args.smoke else (args.requests, args.rounds)
    if args.redis_url:
        results = asyncio.run(run(args.redis_url, requests, rounds))
    else:
        with local_redis() as url:
            results = asyncio.run(run(url, requests, rounds))
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
