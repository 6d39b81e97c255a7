"""What a handle adds to a ``tools/call``, against what a session adds, through the middleware, in one run.

Three requests through one ``MCPSessionMiddleware`` (with ``handles=``) around
the trivial app, called in shuffled order: a ``tools/call`` with neither, with
a session (its token already verified), and with one valid handle in its
arguments. Reports each one's added CPU over the plain call and the ratio of
the handle's to the session's.

    python benchmarks/bench_handle_vs_session.py [--requests 3000] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from _harness import NAME_HEADERS, SECRET, call, create_session, median, request, trivial_app

from mcp_sessions import KeySet, MCPSessionMiddleware, MemoryStore
from mcp_sessions.handles import HandleKind, Handles

BASKET = HandleKind("basket", prefix="bsk")
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def tools_call(arguments: dict[str, object], session: str | None = None) -> dict[str, object]:
    meta: dict[str, object] = dict(META)
    if session is not None:
        meta["io.modelcontextprotocol/session"] = {"sessionId": session}
    params = {"name": "echo", "arguments": arguments, "_meta": meta}
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


async def measure(requests: int) -> dict[str, float]:
    keys, store = KeySet.from_secret(SECRET), MemoryStore()
    handles = Handles(keys, store, kinds=[BASKET])
    app = MCPSessionMiddleware(trivial_app, keys=keys, store=store, handles=handles)
    token = await create_session(app)
    handle = await handles.mint(BASKET)
    headers = [*NAME_HEADERS, (b"mcp-session-id", token.encode())]
    cases = {
        "plain": request(tools_call({"text": "hello"}), NAME_HEADERS),
        "session": request(tools_call({"text": "hello"}, token), headers),
        "handle": request(tools_call({"text": "hello", "basket": handle}), NAME_HEADERS),
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases) * requests
    random.shuffle(order)
    for name in list(cases) * 50:
        await call(app, *cases[name])
    for name in order:
        started = time.process_time_ns()
        status, body = await call(app, *cases[name])
        samples[name].append((time.process_time_ns() - started) / 1000)
        assert status == 200 and b'"isError":false' in body, (name, body[:200])
    return {name: median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--smoke", action="store_true", help="a few requests: check that it runs")
    args = parser.parse_args()
    medians = asyncio.run(measure(30 if args.smoke else args.requests))
    session, handle = medians["session"] - medians["plain"], medians["handle"] - medians["plain"]
    print(json.dumps({k: round(v, 1) for k, v in medians.items()}))
    print(f"a session adds {session:.1f} µs, a handle adds {handle:.1f} µs: handle/session {handle / session:.2f}")


if __name__ == "__main__":
    main()
