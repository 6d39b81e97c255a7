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
import functools

from _harness import (
    SECRET,
    call,
    compared,
    create_session,
    interleaved,
    request,
    session_request,
    tools_call,
    trivial_app,
)

from mcp_sessions import KeySet, MCPSessionMiddleware
from mcp_sessions.handles import HandleKind, Handles
from mcp_sessions.stores import MemoryStore

BASKET = HandleKind("basket", prefix="bsk")


async def measure(requests: int) -> dict[str, dict[str, float]]:
    keys, store = KeySet.from_secret(SECRET), MemoryStore()
    handles = Handles(keys, store, kinds=[BASKET])
    app = MCPSessionMiddleware(trivial_app, keys=keys, store=store, handles=handles)
    with_handle = tools_call()
    with_handle["params"]["arguments"]["basket"] = await handles.mint(BASKET)
    cases = {
        "plain": session_request(),
        "session": session_request(await create_session(app)),
        "handle": request(with_handle, [(b"mcp-method", b"tools/call"), (b"mcp-name", b"echo")]),
    }
    for name, case in cases.items():
        status, body = await call(app, *case)
        assert status == 200 and b'"isError":false' in body, (name, body[:200])
    samples = await interleaved({name: functools.partial(call, app, *case) for name, case in cases.items()}, requests)
    return {name: compared(samples, name, "plain") for name in cases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--smoke", "--quick", action="store_true", help="a few requests: check that it runs")
    args = parser.parse_args()
    rows = asyncio.run(measure(30 if args.smoke else args.requests))
    session, handle = rows["session"]["added_us"], rows["handle"]["added_us"]
    print(f"a session adds {session:.1f} µs, a handle adds {handle:.1f} µs: handle/session {handle / session:.2f}")


if __name__ == "__main__":
    main()
