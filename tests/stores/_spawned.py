"""What the tests' spawned processes run (``multiprocessing``'s spawn, as ``uvicorn --workers`` starts its workers):
a spawned process imports the module of the function it runs, and this one imports the stores alone, where a test
module's imports (the ``mcp`` SDK among them) cost a second of CPU a process."""

from __future__ import annotations

import asyncio
import logging

from mcp_sessions.stores import MemoryStore, SQLiteStore


def make_a_store_in_a_worker(log_path: str) -> None:
    """Log to a file, make two stores (one warning), exit."""
    logging.basicConfig(filename=log_path, level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    MemoryStore()
    MemoryStore()


def count_in_a_process(path: str, rounds: int, worker: int, expires_at: float) -> None:
    """Its own store on the shared file, counting and appending."""

    async def work() -> None:
        store = SQLiteStore(path)
        for i in range(rounds):
            mark = worker * 1000 + i
            await store.incr("s1", "n", expires_at=expires_at)

            def append(old: list[int], mark: int = mark) -> list[int]:
                return [*old, mark]

            await store.update("s1", "seen", append, expires_at=expires_at, default=[])
        await store.aclose()

    asyncio.run(work())
