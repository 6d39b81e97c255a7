"""A host that keeps one data-layer session per conversation, and resumes it after a restart.

    python examples/host.py demo                          the whole story, with a quickstart started here
    python examples/host.py --url URL chat trip           one turn of conversation "trip" (calls count)
    python examples/host.py --url URL chat trip           run it again, a "restart": the counter goes on
    python examples/host.py --url URL chat work           another conversation, its own counter
    python examples/host.py list                          the saved conversations
    python examples/host.py --url URL end trip            delete trip's session and forget it

Each conversation's session (token, state, expiry) lives in a small JSON file (``--store``, default
``.mcp-sessions.json``), written with mode 0600 because it holds bearer tokens, and rewritten after every
change through ``SessionTransport(on_change=...)``. A saved session is reused until it expires; an
expired one is never sent, and one the server no longer knows (deleted, or its server lost it) is
replaced at once (``recreate=True``), so a conversation always continues, with the file up to date.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

if __package__ in (None, ""):
    # Run as a script (python examples/host.py): make the examples package importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.client import quiet_logs
from examples.demo import serve_quickstart
from mcp_sessions.client import HeldSession, SessionTransport


class SessionFile:
    """Saved sessions, one per conversation, in a JSON file only its owner can read."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> dict[str, dict[str, str]]:
        try:
            saved: dict[str, dict[str, str]] = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        return saved

    def load(self, conversation: str) -> HeldSession:
        """The saved session of ``conversation``, or an empty handle labelled with its name."""
        saved = self.all().get(conversation)
        return HeldSession.from_dict(saved) if saved else HeldSession(label=conversation)

    def save(self, conversation: str, session: HeldSession) -> None:
        everything = self.all()
        everything[conversation] = session.to_dict()
        self.write(everything)

    def forget(self, conversation: str) -> None:
        everything = self.all()
        everything.pop(conversation, None)
        self.write(everything)

    def write(self, everything: dict[str, dict[str, str]]) -> None:
        """Replace the file's content. Atomic: a new file (0600 from the start) renamed over the old one."""
        fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(everything, file, indent=2, sort_keys=True)
            os.replace(temporary, self.path)
        except BaseException:
            os.unlink(temporary)
            raise


async def chat(url: str, store: SessionFile, conversation: str, tool: str = "count") -> tuple[Any, str]:
    """One turn of ``conversation``: its saved session is resumed (or a new one created) and kept saved."""
    session = store.load(conversation)
    before = session.token
    shim = SessionTransport(
        session=session,
        recreate=True,  # a session the server no longer knows is replaced at once: the turn still runs
        on_change=lambda changed: store.save(conversation, changed),
    )
    async with (
        httpx2.AsyncClient(transport=shim) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        result = await client.call_tool(tool, {})
    how = "resumed" if before is not None and session.token == before else "new session"
    return (result.structured_content or {}).get("result"), how


async def end(url: str, store: SessionFile, conversation: str) -> bool:
    """Delete the conversation's session on the server, and forget it."""
    session = store.load(conversation)
    shim = SessionTransport(session=session)
    try:
        deleted = await shim.delete(url) if session.token else False
    finally:
        await shim.aclose()
    store.forget(conversation)
    return deleted


def describe(conversation: str, saved: dict[str, str]) -> str:
    session = HeldSession.from_dict(saved)
    if session.token is None:
        return f"{conversation}: no session"
    status = "expired" if session.expired() else "active"
    state = "state saved" if session.state else "no state"
    return f"{conversation}: session {session.id}, {status} until {saved.get('expiresAt')}, {state}"


async def demo(url: str, store: SessionFile, out: TextIO) -> int:
    expected = [("trip", 1, "new session"), ("trip", 2, "resumed"), ("work", 1, "new session")]
    seen = []
    print("-- first run of the host", file=out)
    for conversation, *_ in expected:
        value, how = await chat(url, store, conversation)
        seen.append((conversation, value, how))
        print(f"{conversation}: count -> {value} ({how})", file=out)
    print(f"\n-- the host restarts: nothing is left in memory, only {store.path.name}", file=out)
    for conversation, saved in store.all().items():
        print("   " + describe(conversation, saved), file=out)
    value, how = await chat(url, store, "trip")
    seen.append(("trip", value, how))
    expected.append(("trip", 3, "resumed"))
    print(f"trip: count -> {value} ({how})", file=out)
    print("\n-- a day later: work's saved session has expired (its expiresAt is moved back here)", file=out)
    everything = store.all()
    everything["work"]["expiresAt"] = (datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    store.write(everything)
    value, how = await chat(url, store, "work")
    seen.append(("work", value, how))
    expected.append(("work", 1, "new session"))
    print(f"work: count -> {value} ({how}: an expired session is never sent; the counter starts again)", file=out)
    print("\n-- ending the trip conversation", file=out)
    print(f"trip: deleted on the server: {await end(url, store, 'trip')}", file=out)
    for conversation, saved in store.all().items():
        print("   " + describe(conversation, saved), file=out)
    return 0 if seen == expected else 1


def main(argv: list[str] | None = None, *, out: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(prog="host.py", description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="the MCP endpoint of a running quickstart (the demo starts its own)")
    parser.add_argument(
        "--store", help="the session file (default .mcp-sessions.json; for demo, a temporary file)", type=Path
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="first run, restart, expiry and end, against a quickstart started here")
    commands.add_parser("chat", help="one turn of a conversation (calls count)").add_argument("conversation")
    commands.add_parser("end", help="delete a conversation's session").add_argument("conversation")
    commands.add_parser("list", help="the saved conversations")
    args = parser.parse_args(argv)
    out = sys.stdout if out is None else out
    with contextlib.ExitStack() as stack:
        if args.store is None and args.command == "demo":
            args.store = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "sessions.json"
        return run(args, parser, SessionFile(args.store or Path(".mcp-sessions.json")), out)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, store: SessionFile, out: TextIO) -> int:
    if args.command == "list":
        for conversation, saved in store.all().items():
            print(describe(conversation, saved), file=out)
        return 0
    with contextlib.ExitStack() as stack:
        stack.enter_context(quiet_logs())
        if args.command == "demo":
            url = args.url or stack.enter_context(serve_quickstart(json_response=False))
            return anyio.run(demo, url, store, out)
        if not args.url:
            parser.error(f"{args.command} needs --url (a quickstart started by you, so that sessions outlive a run)")
        if args.command == "chat":
            value, how = anyio.run(chat, args.url, store, args.conversation)
            print(f"{args.conversation}: count -> {value} ({how})", file=out)
        else:
            print(f"{args.conversation}: deleted: {anyio.run(end, args.url, store, args.conversation)}", file=out)
        return 0


if __name__ == "__main__":
    sys.exit(main())
