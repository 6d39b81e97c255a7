"""``mcp-sessions gateway --stdio`` against supergateway 4.0.0 ``--stateful``, on the same stdio server.

Three ways to reach one stdio MCP server (``SERVER`` below: an ``MCPServer`` of the ``mcp`` SDK with an
``echo`` tool), measured side by side in one run:

- ``stdio directly``: this process writes JSON-RPC lines to the server's stdin and reads its stdout: the base;
- ``mcp-sessions gateway --stdio``: a 2025-11-25 transport session with a process of its own (no data-layer
  session, as a stock client);
- ``supergateway --stateful``: a process per 2025-11-25 transport session (``--outputTransport
  streamableHttp``).

One ``httpx`` client (keep-alive) sends ``tools/call`` requests one at a time, a request to each way per
round, in a new shuffled order each round (a bounded loop), so that the machine's drift hits them alike. The
added latency is each gateway's p50 (and p99) minus the direct stdio p50 (p99). Then each gateway opens
``--conversations`` more conversations (transport sessions), each used once,
and the growth of the gateway process's own RSS (``VmRSS``, its children excluded) is divided by their number.

    python benchmarks/bench_stdio.py                  # full run
    python benchmarks/bench_stdio.py --rounds 5000    # more rounds, for a surer p50
    python benchmarks/bench_stdio.py --quick          # a few rounds: the tests check it runs
    python benchmarks/bench_stdio.py --json out.json  # also write the numbers

supergateway comes from ``scripts/system-deps.sh`` (``.cache/supergateway``); node from the system.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from _harness import finish, load_average, section, verdict

ROOT = Path(__file__).resolve().parents[1]
SUPERGATEWAY = ROOT / ".cache/supergateway/node_modules/supergateway/dist/index.js"
SUPERGATEWAY_VERSION = "4.0.0"
SECRET = "bench-stdio-secret-bench-stdio-secret-0123456"
SESSION_KEY = "io.modelcontextprotocol/session"
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
OURS = "mcp-sessions gateway --stdio"
PER_REQUEST = f"{OURS}, 2026 request, --sessionless per-request"
SHARED = f"{OURS} --sessionless shared, 2026 request"
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
START_TIMEOUT = 30.0
SERVER = """
from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-stdio")


@server.tool()
def echo(message: str) -> str:
    return message


server.run("stdio")
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rss_kib(pid: int) -> int:
    """The process's own resident memory (``VmRSS``), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


@contextmanager
def process(argv: list[str], port: int, environ: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` running until the block ends, once its port answers (bounded)."""
    with log.open("wb") as out:
        child = subprocess.Popen(argv, env={**os.environ, **environ}, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if child.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited: {log.read_text()[-2000:]}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} did not listen within {START_TIMEOUT:g} s")
            time.sleep(0.05)
        yield child
    finally:
        child.terminate()
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def result_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC result of a JSON or SSE answer."""
    response.raise_for_status()
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and ('"result"' in line or '"error"' in line):
                message = json.loads(line.removeprefix("data:"))
                break
        else:
            raise RuntimeError(f"no answer in {response.text[:500]!r}")
    else:
        message = response.json()
    if "result" not in message:
        raise RuntimeError(f"error answer: {message}")
    result: dict[str, Any] = message["result"]
    return result


class Conversation:
    """A 2025-11-25 transport session at ``url`` (and, with ``sessions``, a data-layer session in it)."""

    def __init__(self, http: httpx.Client, url: str, *, sessions: bool) -> None:
        self.http, self.url, self.id = http, url, 0
        body = {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "bench-stdio", "version": "1"},
        }
        answer = http.post(url, json=self.body("initialize", body), headers=HEADERS)
        result_of(answer)
        self.headers = {**HEADERS, "Mcp-Session-Id": answer.headers["mcp-session-id"], "Mcp-Protocol-Version": LEGACY}
        http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers)
        self.meta: dict[str, Any] = {}
        if sessions:
            created = self.request("sessions/create", {})
            self.meta = {SESSION_KEY: {"sessionId": created["session"]["sessionId"]}}

    def body(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.id += 1
        return {"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return result_of(self.http.post(self.url, json=self.body(method, params), headers=self.headers))

    def call(self) -> None:
        params: dict[str, Any] = {"name": "echo", "arguments": {"message": "hi"}}
        if self.meta:
            params["_meta"] = self.meta
        result = self.request("tools/call", params)
        assert result["content"][0]["text"] == "hi", result


class Modern:
    """2026-07-28 ``tools/call`` requests at ``url`` that name no conversation (a stock 2026 client's)."""

    def __init__(self, http: httpx.Client, url: str) -> None:
        self.http, self.url = http, url
        self.headers = {**HEADERS, "Mcp-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "echo"}

    def call(self) -> None:
        meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
        params = {"name": "echo", "arguments": {"message": "hi"}, "_meta": meta}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        result = result_of(self.http.post(self.url, json=body, headers=self.headers))
        assert result["content"][0]["text"] == "hi", result


class Direct:
    """The server over its own stdio, from this process: the base."""

    def __init__(self, command: list[str]) -> None:
        self.child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.id = 0
        self.ask(
            "initialize", {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}}
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.child.stdin is not None
        self.child.stdin.write(json.dumps(message).encode() + b"\n")
        self.child.stdin.flush()

    def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.id += 1
        self.send({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        assert self.child.stdout is not None
        while True:  # a bounded server: it answers each request, notifications aside
            message = json.loads(self.child.stdout.readline())
            if message.get("id") == self.id:
                result: dict[str, Any] = message["result"]
                return result

    def call(self) -> None:
        self.ask("tools/call", {"name": "echo", "arguments": {"message": "hi"}})

    def close(self) -> None:
        assert self.child.stdin is not None
        self.child.stdin.close()
        self.child.wait(timeout=10)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(rounds: int, conversations: int, every: float) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not SUPERGATEWAY.exists():
        raise SystemExit(f"node and {SUPERGATEWAY.relative_to(ROOT)} are needed: run scripts/system-deps.sh")
    work = Path(tempfile.mkdtemp(prefix="bench-stdio-"))
    server = work / "server.py"
    server.write_text(SERVER)
    command = [sys.executable, str(server)]
    ours_port, theirs_port, shared_port = free_port(), free_port(), free_port()
    # Neither gateway writes a log line per request: ours at warning (no access log), supergateway at none.
    ours_argv = [sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(ours_port), "--log-level", "warning"]
    limit = str(conversations + 1)  # one caller opens them all
    ours_argv += ["--max-processes", limit, "--max-processes-per-principal", limit, "--stdio", " ".join(command)]
    shared_argv = [*ours_argv[:4], "--port", str(shared_port), *ours_argv[6:]]
    shared_argv[-2:-2] = ["--sessionless", "shared"]
    theirs_argv = [node, str(SUPERGATEWAY), "--stdio", " ".join(command), "--outputTransport", "streamableHttp"]
    theirs_argv += ["--stateful", "--port", str(theirs_port), "--logLevel", "none"]
    secret = {"MCP_SESSIONS_SECRET": SECRET}
    with (
        process(ours_argv, ours_port, secret, work / "ours.log") as ours,
        process(theirs_argv, theirs_port, {}, work / "theirs.log") as theirs,
        process(shared_argv, shared_port, secret, work / "shared.log"),
        httpx.Client(timeout=30) as http,
    ):
        ours_url, theirs_url = f"http://127.0.0.1:{ours_port}/mcp", f"http://127.0.0.1:{theirs_port}/mcp"
        direct = Direct(command)
        ways: dict[str, Any] = {
            "stdio directly": direct,
            OURS: Conversation(http, ours_url, sessions=False),
            f"supergateway {SUPERGATEWAY_VERSION} --stateful": Conversation(http, theirs_url, sessions=False),
            PER_REQUEST: Modern(http, ours_url),
            SHARED: Modern(http, f"http://127.0.0.1:{shared_port}/mcp"),
        }
        for way in ways.values():  # warm up: imports, first calls
            for _ in range(5):
                way.call()
        timings: dict[str, list[float]] = {name: [] for name in ways}
        last = 0.0  # a request's own process is taken from the warm pool: at most one each `every` seconds
        for _ in range(rounds):
            order = list(ways.items())
            random.shuffle(order)
            for name, way in order:
                if name == PER_REQUEST and time.monotonic() - last < every:
                    continue
                last = time.monotonic() if name == PER_REQUEST else last
                started = time.perf_counter()
                way.call()
                timings[name].append((time.perf_counter() - started) * 1000)
        direct.close()
        memory = {}
        for name, pid, url, sessions in (
            ("mcp-sessions gateway --stdio", ours.pid, ours_url, False),
            (f"supergateway {SUPERGATEWAY_VERSION} --stateful", theirs.pid, theirs_url, False),
        ):
            before = rss_kib(pid)
            held = [Conversation(http, url, sessions=sessions) for _ in range(conversations)]
            for conversation in held:
                conversation.call()
            memory[name] = (rss_kib(pid) - before) / conversations
    base = timings["stdio directly"]
    results: dict[str, Any] = {
        "rounds": rounds,
        "conversations": conversations,
        "per_request_every_s": every,
        "machine": {"cpus": os.cpu_count(), "load": os.getloadavg(), "python": platform.python_version()},
        "ways": {},
    }
    for name, values in timings.items():
        entry: dict[str, float | None] = {"p50_ms": statistics.median(values), "p99_ms": percentile(values, 0.99)}
        if name != "stdio directly":
            entry["added_p50_ms"] = statistics.median(values) - statistics.median(base)
            entry["added_p99_ms"] = percentile(values, 0.99) - percentile(base, 0.99)
            entry["rss_kib_per_conversation"] = memory.get(name)
            entry["calls"] = len(values)
        results["ways"][name] = entry
    shutil.rmtree(work, ignore_errors=True)
    return results


TEXT = (
    "What `mcp-sessions gateway --stdio` adds to a 2025-11-25 `tools/call` (an `echo` tool of an `MCPServer` over"
    " stdio), against the same server over its own stdio from the client's process and against supergateway"
    f" {SUPERGATEWAY_VERSION} `--stateful --outputTransport streamableHttp` (a process per transport session):"
    " one request at a time, the three alternated request by request in a new shuffled order each round. Then each"
    " gateway opens more conversations (ours: a session each; supergateway: a transport session each), each used"
    " once: KiB/conversation is the growth of the gateway process's own resident memory (`VmRSS`, its child"
    ' processes excluded) over their number ("shrank": the process gave back more than the conversations took,'
    " as node's collector may). Neither gateway writes a log line per request (ours `--log-level"
    " warning`, supergateway `--logLevel none`). The gateway's path is longer than supergateway's: the session work,"
    " then the `mcp` SDK's own server (a 2025-11-25 transport session, answers as event streams) and an MCP client"
    " link to the process; supergateway relays JSON-RPC messages between the HTTP transport and the pipe."
    " Two more rows: a 2026-07-28 `tools/call` naming no conversation, to our gateway (a process of its own per"
    " request, from `--warm 2` started ahead: at most one such request each `--every` seconds, since a process"
    " start is the pool's ceiling) and to one with `--sessionless shared`."
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000, help="measured requests to each way")
    parser.add_argument("--conversations", type=int, default=16, help="conversations opened for the memory figure")
    parser.add_argument(
        "--every", type=float, default=1.0, help="seconds between per-request calls: the warm pool's refill rate"
    )
    parser.add_argument("--quick", action="store_true", help="a few rounds and conversations: it runs")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    began = (time.monotonic(), load_average())
    rounds, conversations = (20, 2) if args.quick else (args.rounds, args.conversations)
    results = run(rounds, conversations, 0.2 if args.quick else args.every)
    rows = []
    for name, entry in results["ways"].items():
        added = [entry.get(key) for key in ("added_p50_ms", "added_p99_ms")]
        memory = entry.get("rss_kib_per_conversation")
        rows.append(
            [
                name,
                f"{entry['p50_ms']:.1f}",
                f"{entry['p99_ms']:.1f}",
                *("-" if value is None else f"{value:+.1f}" for value in added),
                "-" if memory is None else f"{memory:.0f}" if memory >= 0 else "n/a (shrank)",
            ]
        )
    ours = results["ways"][OURS]["added_p50_ms"]
    per_request, shared = (results["ways"][name]["added_p50_ms"] for name in (PER_REQUEST, SHARED))
    theirs = results["ways"][f"supergateway {SUPERGATEWAY_VERSION} --stateful"]["added_p50_ms"]
    text = f"{TEXT} {rounds} rounds, {conversations} conversations."
    header = ["way", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "KiB/conversation"]
    finish(
        "stdio",
        args.json,
        args.quick,
        began,
        [section("stdio servers", text, header, rows)],
        [
            verdict(
                "`mcp-sessions gateway --stdio` adds to a `tools/call` at most what supergateway"
                f" {SUPERGATEWAY_VERSION} `--stateful` adds (p50, the same stdio server)",
                f"the gateway +{ours:.1f} ms, supergateway +{theirs:.1f} ms over the server's own stdio",
                ours <= theirs,
                f"{ours / theirs:.2f}x supergateway's" if theirs > 0 else "supergateway added nothing",
            ),
            verdict(
                "a 2026 request's own process (`--sessionless per-request`, from the warm pool, one request each"
                f" {results['per_request_every_s']:g} s) adds at most 1.5x what the shared process adds (p50)",
                f"per-request +{per_request:.1f} ms, shared +{shared:.1f} ms",
                per_request <= 1.5 * shared,
                f"{per_request / shared:.2f}x the shared process's"
                if shared > 0
                else "the shared process added nothing",
            ),
        ],
        **results,
    )


if __name__ == "__main__":
    main()
