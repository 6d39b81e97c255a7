"""What the handle check costs per tools/call: ``check_call`` with a MemoryStore, and the pure MAC check.

    PYTHONPATH=middleware python benchmarks/bench_handles.py [--rounds 20] [--calls 2000]

Prints the median over rounds of the mean time per call, in microseconds, for
a call without handles, with one valid handle, with one forged handle, and
the I/O-free part alone (shape, MAC and expiry). The store round trip of a
shared store (Redis) comes on top: measure it with bench_uvicorn.py.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from mcp_sessions import KeySet, MemoryStore
from mcp_sessions.handles import HandleKind, Handles, check_call

SECRET = "benchmark-secret-benchmark-secret-0123456789"


async def measure(step: Callable[[], Awaitable[object]], rounds: int, calls: int) -> float:
    """Median over ``rounds`` of the mean µs per call of ``calls`` awaited calls."""
    results = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(calls):
            await step()
        results.append((time.perf_counter_ns() - start) / calls / 1000)
    return statistics.median(results)


async def main(rounds: int, calls: int) -> dict[str, float]:
    basket = HandleKind("basket", prefix="bsk")
    handles = Handles(KeySet.from_secret(SECRET), MemoryStore(), kinds=[basket, HandleKind("order", prefix="ord")])
    token = await handles.mint(basket, principal=None)
    forged = token[:10] + ("A" if token[10] != "A" else "B") + token[11:]
    plain = {"name": "add_item", "arguments": {"item": "tea", "note": "two bags, no sugar", "count": 2}}
    valid = {"name": "add_item", "arguments": {"basket": token, "item": "tea"}}
    refused = {"name": "add_item", "arguments": {"basket": forged, "item": "tea"}}
    assert await check_call(handles, valid, None) is None
    assert await check_call(handles, refused, None) is not None

    async def pure() -> object:
        return handles.authenticate(token, None)

    return {
        "no handle": await measure(lambda: check_call(handles, plain, None), rounds, calls),
        "one valid handle": await measure(lambda: check_call(handles, valid, None), rounds, calls),
        "one forged handle": await measure(lambda: check_call(handles, refused, None), rounds, calls),
        "MAC check alone": await measure(pure, rounds, calls),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    for name, micros in asyncio.run(main(args.rounds, args.calls)).items():
        print(f"{name:>20}: {micros:7.2f} µs per tools/call")
