"""What a 2025-era batch that names many invalid sessions costs the event loop, against the same batch without.

A batch of ``--elements`` ``tools/call`` requests (6,000 by default, about
3.2 MiB), each naming a session token of this deployment's shape with a
random signature (so every token is distinct and none verifies), posted on
the 2025 era (where a server may take a batch, so the middleware resolves
it). The control is the same batch, byte for byte the same size, with a
``_meta`` member of the same length that names no session. Both go through
the same ``MCPSessionMiddleware`` around the bare ``MCPServer`` (which
refuses a batch after parsing it: the middleware asks it first, and sends its
refusal) and around the trivial app, a server that takes batches (no checks of
its own: the middleware answers its own refusal, an error per element). Reports
the CPU time of each call (the event loop is busy for all of it: nothing
awaits I/O), median of ``--runs``, and the ratio.

It also counts the store round trips of a batch whose elements all name one
valid session, on a counting store: the resolve step verifies a token and
touches the store once per request, not once per element.

    python benchmarks/bench_refused_batch.py [--elements 6000] [--runs 7]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import json
import logging
import secrets
import statistics
import time
from typing import Any

from _harness import SECRET, build_mcp_app, call, lifespan, request, trivial_app

from mcp_sessions import KeySet, MCPSessionMiddleware
from mcp_sessions.stores import MemoryStore, SessionStatus

SESSION_KEY = "io.modelcontextprotocol/session"
LEGACY_VERSION = b"2025-11-25"


def element(index: int, meta: dict[str, Any]) -> dict[str, Any]:
    # About 560 bytes an element, as the batch of the report (6,000 elements, 3.2 MiB).
    params = {"name": "echo", "arguments": {"text": "hello " * 17}, "_meta": meta}
    return {"jsonrpc": "2.0", "id": index, "method": "tools/call", "params": params}


def forged(token: str) -> str:
    """``token`` with its signature replaced by random bytes of the same length."""
    head, _, _ = token.rpartition(".")
    return head + "." + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def batches(keys: KeySet, elements: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The batch naming a forged token in every element, and the same-sized batch naming none."""
    with_tokens, without = [], []
    for index in range(elements):
        token = forged(keys.mint_session_token(ttl=3600)[0])
        with_tokens.append(element(index, {SESSION_KEY: {"sessionId": token}}))
        # The same number of bytes: a member name as long as the session key's, a value as long as its object.
        filler = "x" * len(json.dumps({"sessionId": token}))
        without.append(element(index, {"io.example/not-a-session-member": filler[: len(filler) - 2]}))
    return with_tokens, without


class CountingStore(MemoryStore):
    """A memory store that counts its touches: the round trips a remote store would make."""

    touches = 0

    async def touch(self, session_id: str, **kwargs: Any) -> SessionStatus:
        self.touches += 1
        return await super().touch(session_id, **kwargs)


def legacy_request(batch: list[dict[str, Any]]) -> tuple[dict[str, Any], bytes]:
    """``POST /mcp`` of ``batch`` on the 2025 era (the harness's requests are 2026-07-28 ones)."""
    scope, body = request(batch)  # type: ignore[arg-type]  # a batch is a list
    version = b"mcp-protocol-version"
    headers = [(k, LEGACY_VERSION if k == version else v) for k, v in scope["headers"]]
    return {**scope, "headers": headers}, body


async def timed(app: Any, scope: dict[str, Any], body: bytes, runs: int) -> tuple[float, int]:
    samples, status = [], 0
    for _ in range(runs):
        gc.collect()  # each call starts from the same heap: a full collection inside it is then its own
        started = time.process_time()  # this process's CPU: what the loop spent, whatever else the machine runs
        status, _ = await call(app, scope, body)
        samples.append(time.process_time() - started)
    return statistics.median(samples), status


async def measure(elements: int, runs: int) -> dict[str, Any]:
    keys = KeySet.from_secret(SECRET)
    with_tokens, without = batches(keys, elements)
    scope_tokens, body_tokens = legacy_request(with_tokens)
    scope_plain, body_plain = legacy_request(without)
    assert abs(len(body_tokens) - len(body_plain)) < elements, (len(body_tokens), len(body_plain))
    results: dict[str, Any] = {"elements": elements, "bytes": len(body_tokens)}
    async with lifespan(build_mcp_app()) as mcp_app:
        for name, app in (("MCPServer", mcp_app), ("trivial, takes batches", trivial_app)):
            middleware = MCPSessionMiddleware(app, keys=keys, store=MemoryStore())
            await call(middleware, scope_plain, body_plain)  # warm up
            plain, plain_status = await timed(middleware, scope_plain, body_plain, runs)
            tokens, tokens_status = await timed(middleware, scope_tokens, body_tokens, runs)
            results[name] = {
                "without sessions s": round(plain, 4),
                "with forged tokens s": round(tokens, 4),
                "ratio": round(tokens / plain, 2),
                "statuses": [plain_status, tokens_status],
            }
    store = CountingStore()
    middleware = MCPSessionMiddleware(trivial_app, keys=keys, store=store, idle_ttl=3600)
    token = keys.mint_session_token(ttl=3600)[0]
    scope_valid, body_valid = legacy_request([element(i, {SESSION_KEY: {"sessionId": token}}) for i in range(elements)])
    await call(middleware, scope_valid, body_valid)
    results["store touches for one valid session in every element"] = store.touches
    return results


def main() -> None:
    logging.disable(logging.INFO)  # the SDK's session manager logs each start and stop
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=6000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.elements, args.runs)), indent=2))


if __name__ == "__main__":
    main()
