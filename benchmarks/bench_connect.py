"""``mcp-sessions connect`` against ``mcp-remote`` 0.15.1, the usual stdio-to-HTTP bridge, on the same remote.

One remote (``REMOTE`` below: an ``MCPServer`` with an ``echo`` tool behind the session middleware, served by
uvicorn in a process of its own) reached three ways by the ``mcp`` SDK's client, a host as Claude Code is one
(2025-11-25, the era ``mcp-remote`` speaks), a ``tools/call`` each, alternated call by call in a new shuffled
order each round:

- ``directly``: the client over Streamable HTTP itself, the base;
- ``mcp-sessions connect``: the client starts the shim on stdio, ``CLAUDE_CODE_SESSION_ID`` set, so its calls carry
  the conversation's data-layer session;
- the same, ``CLAUDE_CODE_SESSION_ID`` unset: a relay alone, as mcp-remote is;
- ``mcp-remote``: the client starts ``node .../mcp-remote/dist/proxy.js URL`` on stdio.

"Added" is a way's latency less the direct one's at the same percentile. Memory at rest is each bridge process's
resident memory (``VmRSS``) once its calls are done and a second has passed, its own process only (neither
starts others). Its start is the CPU time (every thread's, user and system, as ``/proc`` counts it) each bridge
spends from its spawn to its answer to a host's ``initialize`` line: what a host pays for every conversation it
starts, alternated start by start.

    python benchmarks/bench_connect.py                # full run
    python benchmarks/bench_connect.py --quick        # a few rounds: the tests check it runs
    python benchmarks/bench_connect.py --json out.json

mcp-remote comes from ``scripts/system-deps.sh`` (``.cache/mcp-remote``); node from the system.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TextIO

import anyio
from _harness import cpu_seconds, finish, load_average, section, verdict
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parents[1]
MCP_REMOTE = ROOT / ".cache/mcp-remote/node_modules/mcp-remote/dist/proxy.js"
MCP_REMOTE_VERSION = "0.15.1"
SECRET = "bench-connect-secret-bench-connect-secret-0123"
REMOTE = """
import logging, sys, uvicorn
logging.disable(logging.INFO)
from mcp.server.mcpserver import MCPServer
from mcp_sessions import MCPSessionMiddleware
server = MCPServer("remote")
@server.tool()
def echo(text: str) -> str:
    return text
app = MCPSessionMiddleware(server.streamable_http_app(streamable_http_path="/mcp"), secret=sys.argv[2])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
OURS, ALONE, THEIRS = "mcp-sessions connect", "mcp-sessions connect, no conversation", "mcp-remote 0.15.1"
WAYS = ("directly", OURS, ALONE, THEIRS)
INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}
INITIALIZE_LINE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE}).encode() + b"\n"
MOST_START_CPU = 0.35
"""The most CPU seconds ``connect`` may spend from its spawn to its first answer (issue 86)."""


@contextlib.contextmanager
def remote() -> Iterator[str]:
    """The remote in a process of its own: its MCP URL, once it listens."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", REMOTE, str(port), SECRET])
    try:
        deadline = time.monotonic() + 60
        while not _listens(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the remote did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _listens(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def bridges(url: str, state: str) -> dict[str, StdioServerParameters]:
    """How the client starts each bridge, as a host's configuration would."""
    node = shutil.which("node")
    if node is None or not MCP_REMOTE.exists():
        raise SystemExit(f"mcp-remote needs node and {MCP_REMOTE}: run scripts/system-deps.sh")
    environ = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "XDG_STATE_HOME": state}
    shim = ["-m", "mcp_sessions", "connect", url]
    conversation = {**environ, "CLAUDE_CODE_SESSION_ID": "bench-conversation", "CLAUDECODE": "1"}
    return {
        OURS: StdioServerParameters(command=sys.executable, args=shim, env=conversation),
        ALONE: StdioServerParameters(command=sys.executable, args=shim, env=environ),
        THEIRS: StdioServerParameters(command=node, args=[str(MCP_REMOTE), url], env=environ),
    }


def bridge_pids() -> dict[str, int]:
    """The bridges this process started (its children), by way."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if int(stat.read_text().rpartition(")")[2].split()[1]) != os.getpid():
                continue
            command, environ = ((stat.parent / name).read_bytes() for name in ("cmdline", "environ"))
            if b"mcp-remote" in command:
                found[THEIRS] = int(stat.parent.name)
            elif b"mcp_sessions\0connect" in command:
                found[OURS if b"CLAUDE_CODE_SESSION_ID=" in environ else ALONE] = int(stat.parent.name)
    return found


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@contextlib.asynccontextmanager
async def clients(url: str, state: str, quiet: TextIO) -> AsyncIterator[dict[str, Client]]:
    """A client of each way, started side by side (each in a task that holds it open); the bridges' logs to
    ``quiet``."""
    opened: dict[str, Client] = {}
    all_open, done = anyio.Event(), anyio.Event()

    async def hold(way: str, client: Client) -> None:
        async with client:
            opened[way] = client
            if len(opened) == len(WAYS):
                all_open.set()
            await done.wait()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(hold, "directly", Client(url, mode="legacy"))
        for way, server in bridges(url, state).items():
            tasks.start_soon(hold, way, Client(stdio_client(server, errlog=quiet), mode="legacy"))
        await all_open.wait()
        try:
            yield opened
        finally:
            done.set()


async def measure(url: str, rounds: int, quiet: TextIO) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Each way's call times (ms), alternated; then each bridge's resident memory at rest (MiB)."""
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as state:
        async with clients(url, state, quiet) as opened:
            for way in WAYS:  # warm up: the session created, the connections open
                for _ in range(3):
                    await opened[way].call_tool("echo", {"text": "warm"})
            for _ in range(rounds):
                for way in random.sample(WAYS, len(WAYS)):
                    started = time.perf_counter()
                    await opened[way].call_tool("echo", {"text": "hello"})
                    times[way].append((time.perf_counter() - started) * 1000)
            await anyio.sleep(1.0 if rounds > 5 else 0.1)  # at rest: the last answers sent, the buffers freed
            rest = {way: rss_mib(pid) for way, pid in bridge_pids().items()}
    return times, rest


def start_cpu(bridge: StdioServerParameters) -> float:
    """The CPU seconds ``bridge`` spends from its spawn to its answer to ``initialize``."""
    command, environ = [bridge.command, *bridge.args], {**os.environ, **(bridge.env or {})}
    pipe = subprocess.PIPE
    with subprocess.Popen(command, env=environ, stdin=pipe, stdout=pipe, stderr=subprocess.DEVNULL) as started:
        assert started.stdin is not None and started.stdout is not None
        started.stdin.write(INITIALIZE_LINE)
        started.stdin.flush()
        if not started.stdout.readline():
            raise RuntimeError(f"{bridge.command} ended without an answer")
        spent = cpu_seconds(started.pid)
        started.stdin.close()
        started.wait(30)
    return spent


def starts(url: str, rounds: int) -> dict[str, list[float]]:
    """Each bridge's CPU seconds to its first answer, ``rounds`` starts each, alternated in a new order each round."""
    with tempfile.TemporaryDirectory() as state:
        ways = bridges(url, state)
        spent: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(rounds):
            for way in random.sample(list(ways), len(ways)):
                spent[way].append(start_cpu(ways[way]))
    return spent


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def report(times: dict[str, list[float]], rest: dict[str, float]) -> tuple[list[list[str]], float, float]:
    base50, base99 = percentile(times["directly"], 50), percentile(times["directly"], 99)
    rows = []
    for way in WAYS:
        p50, p99 = percentile(times[way], 50), percentile(times[way], 99)
        added = "-" if way == "directly" else f"{p50 - base50:+.2f}"
        added99 = "-" if way == "directly" else f"{p99 - base99:+.2f}"
        memory = f"{rest[way]:.1f}" if way in rest else "-"
        rows.append([way, str(len(times[way])), f"{p50:.2f}", f"{p99:.2f}", added, added99, memory])
    ours = percentile(times[ALONE], 50) - base50
    theirs = percentile(times[THEIRS], 50) - base50
    return rows, ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300, help="measured calls through each way")
    parser.add_argument("--quick", action="store_true", help="a few rounds: it runs")
    parser.add_argument("--starts", type=int, default=20, help="measured starts of each bridge")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    began = (time.monotonic(), load_average())
    rounds = 5 if args.quick else args.rounds
    with open(os.devnull, "w") as quiet, remote() as url:
        spent = starts(url, 2 if args.quick else args.starts)
        times, rest = anyio.run(measure, url, rounds, quiet)
    rows, ours, theirs = report(times, rest)
    start_rows = [
        [way, str(len(cpu)), f"{statistics.median(cpu):.3f}", f"{min(cpu):.3f}", f"{max(cpu):.3f}"]
        for way, cpu in spent.items()
    ]
    started = max(statistics.median(spent[OURS]), statistics.median(spent[ALONE]))
    their_start = statistics.median(spent[THEIRS])
    text = (
        "The `mcp` SDK's client (2025-11-25, as a host) calls one remote's `echo` tool directly, through "
        "`mcp-sessions connect` (`CLAUDE_CODE_SESSION_ID` set: each call carries its conversation's session, which "
        "the remote verifies and echoes), through the shim without a conversation (a relay, as mcp-remote is) and "
        f"through mcp-remote {MCP_REMOTE_VERSION}, alternated call by call in {rounds} shuffled rounds. Added is a "
        "way's latency less the direct one's at the same percentile; RSS is the bridge process's own resident "
        "memory at rest, after its calls."
    )
    header = ["way", "calls", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "RSS at rest MiB"]
    memory = f"{rest[OURS]:.1f} MiB against {rest[THEIRS]:.1f} MiB"
    start_text = (
        "Each bridge started as a host starts it, a host's `initialize` written to it at once: the CPU time (user and "
        "system, every thread's) it spent from its spawn to its answer, alternated start by start."
    )
    start_header = ["way", "starts", "median CPU s", "least CPU s", "most CPU s"]
    finish(
        "connect",
        args.json,
        args.quick,
        began,
        [
            section("mcp-sessions connect against mcp-remote", text, header, rows),
            section("Start: CPU from spawn to the first answer", start_text, start_header, start_rows),
        ],
        [
            verdict(
                "`mcp-sessions connect` starts in at most 0.35 CPU-s, and no more than mcp-remote",
                f"{started:.3f} CPU-s against {their_start:.3f} (medians; the larger of its two ways)",
                None if args.quick else started <= min(MOST_START_CPU, their_start),
                "from spawn to its answer to initialize",
            ),
            verdict(
                "`mcp-sessions connect` (no conversation: a relay) adds no more to a call than mcp-remote",
                f"{ours:+.2f} ms against {theirs:+.2f} ms at p50",
                None if args.quick else ours <= theirs + 0.5,
                "within 0.5 ms of mcp-remote's added p50, or less",
            ),
            verdict("its memory at rest, beside mcp-remote's", memory, None, "a Python and a node process, reported"),
        ],
        times=times,
        rest=rest,
        starts=spent,
    )


if __name__ == "__main__":
    main()
