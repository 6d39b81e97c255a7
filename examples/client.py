"""Two conversations with the quickstart, side by side: each has its own data-layer session and counter.

    python examples/client.py               starts the quickstart in this process (a throwaway secret)
    python examples/client.py --url URL     talks to a running quickstart (its MCP endpoint, .../mcp)
    python examples/client.py --legacy      uses the 2025-11-25 handshake instead of 2026-07-28

Each conversation is the ``mcp`` SDK's ordinary ``Client``. The only change for sessions is how its HTTP
client is built: ``httpx2.AsyncClient(transport=SessionTransport(...))``. The shim creates a session on
the first call, stamps it into every request, keeps its state from the server's echo, and (here) deletes
it when the conversation ends. Tokens are bearer secrets: only their stable ids are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

if __package__ in (None, ""):
    # Run as a script (python examples/client.py): make the examples package importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.demo import serve_quickstart
from mcp_sessions.client import HeldSession, SessionTransport


@contextlib.asynccontextmanager
async def conversation(url: str, label: str, *, legacy: bool) -> AsyncIterator[tuple[Client, SessionTransport]]:
    """An SDK Client whose requests all belong to one data-layer session, deleted at the end."""
    shim = SessionTransport(session=HeldSession(label=label), delete_on_close=True)
    async with (
        httpx2.AsyncClient(transport=shim) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy" if legacy else "auto") as client,
    ):
        yield client, shim


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Keep the SDK's and the HTTP libraries' INFO lines (MCPServer turns them on) off the screen."""
    loggers = [logging.getLogger(name) for name in ("httpx", "httpx2", "mcp", "uvicorn.error", "mcp_sessions")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    result = await client.call_tool(tool, arguments)
    return (result.structured_content or {}).get("result")


async def run(url: str, *, legacy: bool, out: TextIO) -> int:
    # (conversation, tool, arguments, the answer each conversation's own session gives)
    script: list[tuple[str, str, dict[str, Any], Any]] = [
        ("alice", "count", {}, 1),
        ("alice", "count", {}, 2),
        ("bob", "count", {}, 1),
        ("alice", "set_mode", {"mode": "terse"}, "terse"),
        ("bob", "count", {}, 2),
        ("bob", "set_mode", {"mode": "chatty"}, "chatty"),
        ("alice", "count", {}, 3),
        ("alice", "get_mode", {}, "terse"),
        ("bob", "get_mode", {}, "chatty"),
    ]
    failures = 0
    async with (
        conversation(url, "alice", legacy=legacy) as (alice, alice_shim),
        conversation(url, "bob", legacy=legacy) as (bob, bob_shim),
    ):
        clients = {"alice": alice, "bob": bob}
        print(f"{'':4}{'alice':<32}bob", file=out)
        for turn, (who, tool, arguments, expected) in enumerate(script, start=1):
            answer = await call(clients[who], tool, **arguments)
            shown = f"{tool}({', '.join(map(repr, arguments.values()))}) -> {answer!r}"
            mark = "" if answer == expected else f"  (expected {expected!r})"
            failures += answer != expected
            cells = [shown + mark if who == name else "" for name in ("alice", "bob")]
            print(f"{turn:<4}{cells[0]:<32}{cells[1]}".rstrip(), file=out)
        print(file=out)
        for name, shim in (("alice", alice_shim), ("bob", bob_shim)):
            session = shim.session
            expires = session.expires_at.isoformat() if session.expires_at else "?"
            print(f"{name}: session {session.id} (label {session.label!r}), expires {expires}", file=out)
    print(
        "both sessions deleted on close:", alice_shim.session.token is None and bob_shim.session.token is None, file=out
    )
    return 1 if failures else 0


def main(argv: list[str] | None = None, *, out: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(prog="client.py", description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="the MCP endpoint of a running quickstart, instead of starting one")
    parser.add_argument("--legacy", action="store_true", help="use the 2025-11-25 handshake (mode='legacy')")
    args = parser.parse_args(argv)
    out = sys.stdout if out is None else out
    with contextlib.ExitStack() as stack:
        stack.enter_context(quiet_logs())
        url = args.url or stack.enter_context(serve_quickstart(json_response=False))
        print(f"quickstart at {url}, {'2025-11-25 handshake' if args.legacy else '2026-07-28'}\n", file=out)
        return anyio.run(lambda: run(url, legacy=args.legacy, out=out))


if __name__ == "__main__":
    sys.exit(main())
