"""Redis memory per live session, measured on real keys written by RedisStore.

Starts nothing: point it at a Redis you can write to (a scratch one: it only
touches keys under its own prefix, and deletes them afterwards).

    python benchmarks/redis_memory.py redis://127.0.0.1:6379/0
    python benchmarks/redis_memory.py redis://127.0.0.1:6379/0 --sessions 200

For each kind of session it reports ``MEMORY USAGE`` (``SAMPLES 0``, exact for
these small keys) summed over the session's keys, and the growth of
``used_memory`` per session, which adds Redis's own per-key bookkeeping (the
main dict and the expires dict).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from mcp_sessions.stores._redis import RedisStore

TTL = 24 * 3600


def new_sid() -> str:
    return secrets.token_urlsafe(18)  # the shape of a real sid claim: 24 characters


async def measure(url: str, sessions: int) -> None:
    prefix = f"bench-{uuid.uuid4().hex[:6]}:"
    store = RedisStore(url, prefix=prefix)
    raw = aioredis.Redis.from_url(url, decode_responses=True)
    now = time.time()
    expires_at = now + TTL

    async def created(sid: str) -> None:
        # Creation stores nothing; a use with an idle timeout writes the idle clock.
        await store.touch(sid, expires_at=expires_at, now=now, idle_ttl=1800, issued_at=now - 60)

    async def counter(sid: str) -> None:
        await created(sid)
        await store.incr(sid, "count", expires_at=expires_at)

    async def cart(sid: str) -> None:
        await counter(sid)
        items = [{"sku": f"SKU-{i:04d}", "qty": i % 3 + 1} for i in range(5)]
        await store.set(sid, "cart", {"items": items, "currency": "EUR"}, expires_at=expires_at)

    async def revoked(sid: str) -> None:
        await counter(sid)
        await store.revoke(sid, expires_at=expires_at)

    kinds: list[tuple[str, Callable[[str], Awaitable[None]]]] = [
        ("live, no data (touched, idle timeout)", created),
        ("live, one counter (incr)", counter),
        ("live, counter + 163-byte cart", cart),
        ("revoked (sessions/delete)", revoked),
    ]
    try:
        print(f"{'session':38} {'MEMORY USAGE':>13} {'used_memory':>12}   keys")
        for label, write in kinds:
            sids = [new_sid() for _ in range(sessions)]
            before = int((await raw.info("memory"))["used_memory"])
            for sid in sids:
                await write(sid)
            after = int((await raw.info("memory"))["used_memory"])
            usage = 0
            keys = 0
            for sid in sids:
                for key in (f"{prefix}{{{sid}}}:s", f"{prefix}{{{sid}}}:d"):
                    size = await raw.memory_usage(key, samples=0)
                    if size is not None:
                        usage += size
                        keys += 1
            per_key, growth = usage / sessions, (after - before) / sessions
            print(f"{label:38} {per_key:>11.0f} B {growth:>10.0f} B   {keys / sessions:.0f}")
    finally:
        async for key in raw.scan_iter(match=prefix + "*", count=1000):
            await raw.delete(key)
        await raw.aclose()
        await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="a scratch Redis, e.g. redis://127.0.0.1:6379/0")
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions of each kind (default 10000)")
    args = parser.parse_args()
    asyncio.run(measure(args.url, args.sessions))


if __name__ == "__main__":
    main()
