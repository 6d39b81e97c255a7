"""``mcp-sessions gateway --stdio``'s processes live as MCP 2026-07-28 says (docs/gateway.md, "Process lifetimes"):
a server that speaks 2026-07-28 gets one process for every conversation of a caller, each request naming its own;
a server that speaks only the 2025-11-25 handshake keeps a process per conversation. Through the gateway with its
defaults, in process, in front of a real server of each era (the ``mcp`` 2.3 SDK's ``MCPServer``, an ``mcp`` 1.x
``FastMCP``); and a server that ends when it is asked which it speaks, which does not start (the command's exit).
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from _mcp import create_session, sdk_session_meta
from _redis import free_port, missing
from e2e._gateway import MAIN, gateway_run
from e2e._stdio import stdio_gateway, text_of
from e2e._versioned import VENVS

SCRIPT = str(MAIN / "tests" / "e2e" / "_conversation_server.py")
LATEST = [sys.executable, SCRIPT]  # the mcp 2.3 SDK: 2026-07-28
MCP1 = Path(next(venv for venv in VENVS if "mcp1" in Path(venv).name)) / "bin" / "python"  # the handshake only

pytestmark = pytest.mark.anyio


def gateway(server: list[str], **options: Any) -> contextlib.AbstractContextManager[str]:
    """The stdio gateway in front of ``server`` with its defaults (``--processes auto``), no process started ahead,
    and no containment (the tests tell processes apart by their pids, each pid 2 in a PID namespace of its own), and
    ``options``: its MCP URL."""
    return stdio_gateway(server, processes="auto", **options)


async def whoami(client: Client, session: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = None if session is None else sdk_session_meta(session)
    seen: dict[str, Any] = json.loads(text_of(await client.call_tool("whoami", {}, meta=meta)))
    return seen


async def test_a_2026_server_serves_every_conversation_of_a_caller_from_one_process(logged: list[str]) -> None:
    with gateway(LATEST) as url:
        async with Client(url) as client:
            first, second = await create_session(client), await create_session(client)
            seen = [await whoami(client, first), await whoami(client, second), await whoami(client, first)]
        async with Client(url, mode="legacy") as one, Client(url, mode="legacy") as other:
            hosts = [await whoami(one), await whoami(other), await whoami(one)]

    assert any("the server speaks 2026-07-28: a process per caller" in line for line in logged), logged
    assert len({answer["pid"] for answer in seen + hosts}) == 1  # one caller (an address), one process
    for answers in (seen, hosts):  # two data-layer sessions; two 2025 clients' transport sessions
        assert answers[0]["conversation"] == answers[2]["conversation"] != answers[1]["conversation"]
        assert all(answer["conversation"] for answer in answers)
    tokens = {first["sessionId"], second["sessionId"]}
    assert not tokens & {answer["conversation"] for answer in seen}  # a digest: no bearer value reaches it


async def test_a_2025_server_keeps_a_process_per_conversation(logged: list[str]) -> None:
    if not MCP1.exists():
        missing(f"{MCP1} is missing: `make {MCP1.parents[1]}/.installed` builds that environment")
    with gateway([str(MCP1), SCRIPT]) as url:
        async with Client(url) as client:
            first, second = await create_session(client), await create_session(client)
            seen = [await whoami(client, first), await whoami(client, second), await whoami(client, first)]

    handshake = "the server speaks only the 2025-11-25 handshake: --processes per-conversation"
    assert any(handshake in line for line in logged), logged
    assert seen[0]["pid"] == seen[2]["pid"] != seen[1]["pid"]  # a process per conversation, its own
    assert [answer["conversation"] for answer in seen] == [None] * 3  # its process is its conversation


async def test_a_value_per_user_keeps_a_process_per_conversation_whatever_the_server_speaks(logged: list[str]) -> None:
    with gateway(LATEST, process_env=["TEAM=header:X-Team"]) as url:
        async with (
            httpx2.AsyncClient(headers={"X-Team": "blue"}, timeout=30) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            first, second = await create_session(client), await create_session(client)
            seen = [await whoami(client, first), await whoami(client, second)]

    assert logged
    assert not any("the server speaks" in line for line in logged)  # a user's value: nothing asked
    assert seen[0]["pid"] != seen[1]["pid"]


@pytest.mark.parametrize(
    ("server", "last_words"),
    [
        ([sys.executable, "-c", "import sys; print('boom \\x1b[2J', file=sys.stderr); sys.exit(3)"], r"boom \x1b[2J"),
        # its exit while a process it started holds its stdout: a crash all the same, not the start's 30 s
        (["sh", "-c", "sleep 600 & read request; echo bye >&2; exit 3"], "bye"),
    ],
)
def test_a_server_that_exits_at_the_revision_probe_is_a_crash_and_no_start(server: list[str], last_words: str) -> None:
    """A server that exits as it is asked its revisions (its first request) speaks no revision at all: the start
    fails, in one line naming the crash and its last stderr line (escaped), and no other process is started."""
    done = gateway_run("--port", str(free_port()), "--stdio", shlex.join(server), "--process-containment", "none")
    said = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    why = r"the server ended at its first request, server/discover \(crash: [a-z ]+\)"
    last = re.escape(f"its last stderr line: {last_words}")
    assert re.fullmatch(f"mcp-sessions gateway: {re.escape(shlex.join(server))}: {why}; {last}", said[-1]), said
    probe = f"the revision probe: server process \\d+ ended \\({why}; exit code 3\\)"
    assert re.search(probe, done.stderr), said  # one end, in the same words
    assert "handshake" not in done.stderr
    assert "shared:" not in done.stderr  # no era guessed, no second process
