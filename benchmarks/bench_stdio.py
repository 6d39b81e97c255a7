"""``mcp-sessions gateway --stdio`` against supergateway 4.0.0, on the same stdio server, in one run.

One stdio MCP server (``SERVER`` below: an ``MCPServer`` of the ``mcp`` SDK with an ``echo`` tool) reached
six ways, a ``tools/call`` each, alternated request by request in a new shuffled order each round:

- ``stdio directly``: this process writes JSON-RPC lines to the server's stdin and reads its stdout: the base;
- our gateway, a 2025-11-25 client: a transport session with a process of its own (no data-layer session);
- our gateway, a 2026-07-28 request that names no conversation, ``--sessionless per-request``: a process of its
  own from the warm pool (``--warm 2``), stopped once it is answered;
- our gateway with ``--sessionless shared``, the same 2026 request: the one shared process;
- supergateway ``--stateful``, a 2025-11-25 client: a process per transport session;
- supergateway, the same 2026 request: its 2026-07-28 mode, a process started for each request.

Before each request the machine is let settle, by a condition, bounded: each gateway's pool refilled (every
process it should hold is running and has answered ``initialize``: the server touches a file when it gets
``notifications/initialized``) and the processes of answered requests gone. So the per-request rows are taken
at a rate the pool keeps up with, which the run reports; a process start is its ceiling. Two more measures:
a new conversation (a 2026 ``sessions/create``, a 2025 ``initialize`` and the first call after it), its time
against a call's, and its first answer (``initialize``, then that call) beside a new session's through
supergateway; and the most calls a second each sessionless mode sustains, unpaced, ``--clients`` at once.
Then each gateway opens ``--conversations`` more (transport sessions), each used once, and the growth of the
gateway process's own RSS (``VmRSS``, its children excluded) is divided by their number. Last, each gateway's
start: from its spawn to the first ``tools/call`` a 2025 client has answered through it (its server's process
started for it), ``--starts`` times, the two gateways alternated; and, as root, from its exec to its first ready answer
(ours ``/readyz`` with ``--process-uids`` and their egress network, supergateway's ``--healthEndpoint``), the same.

    python benchmarks/bench_stdio.py                  # full run
    python benchmarks/bench_stdio.py --rounds 500     # more rounds, for a surer p50
    python benchmarks/bench_stdio.py --quick          # a few rounds: the tests check it runs
    python benchmarks/bench_stdio.py --json out.json  # also write the numbers

supergateway comes from ``scripts/system-deps.sh`` (``.cache/supergateway``); node from the system.
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
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from _harness import cpu_seconds, finish, free_port, load_average, section, verdict

ROOT = Path(__file__).resolve().parents[1]
SUPERGATEWAY = ROOT / ".cache/supergateway/node_modules/supergateway/dist/index.js"
SUPERGATEWAY_VERSION = "4.0.0"
MEMORY = ROOT / ".cache/memory/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
READY_UIDS = "60800-60829"  # docs/gateway.md's recipe takes 61000-61999, the tests 62000-64999, bench_egress 607xx
SECRET = "bench-stdio-secret-bench-stdio-secret-0123456"
SESSION_KEY = "io.modelcontextprotocol/session"
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
OURS = "mcp-sessions gateway --stdio, 2025 client"
PER_REQUEST = "mcp-sessions gateway --stdio, 2026 request, --sessionless per-request"
SHARED = "mcp-sessions gateway --stdio --sessionless shared, 2026 request"
THEIRS = f"supergateway {SUPERGATEWAY_VERSION} --stateful, 2025 client"
THEIRS_MODERN = f"supergateway {SUPERGATEWAY_VERSION}, 2026 request (a process per request)"
CREATE = "sessions/create (2026)"
INITIALIZE = "initialize (2025)"
FIRST_CALL = "the first tools/call after a 2025 initialize"
FIRST_ANSWER = "a new 2025 conversation's first answer (initialize, then its first tools/call)"
THEIRS_INITIALIZE = f"initialize (2025), supergateway {SUPERGATEWAY_VERSION} --stateful"
THEIRS_FIRST_ANSWER = f"{FIRST_ANSWER}, supergateway {SUPERGATEWAY_VERSION} --stateful"
READY = "mcp-sessions gateway --stdio --process-uids (egress), /readyz"
THEIRS_READY = f"supergateway {SUPERGATEWAY_VERSION} --stateful, --healthEndpoint"
OPENINGS = (CREATE, INITIALIZE, FIRST_CALL, FIRST_ANSWER, THEIRS_INITIALIZE, THEIRS_FIRST_ANSWER)
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
START_TIMEOUT = 30.0
SETTLE_TIMEOUT = 30.0  # how long the machine may take to settle between two requests
READY_DIR = "BENCH_STDIO_READY"  # where the server says it is initialized: a file named by its pid
SERVER = """
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-stdio")


@server.tool()
def echo(message: str) -> str:
    return message


async def fresh(ctx, call_next):  # the benchmark's pacing: a file while this process is initialized and unused
    if ctx.method == "tools/call" and (ready := os.environ.get("BENCH_STDIO_READY")):
        Path(ready, str(os.getpid())).unlink(missing_ok=True)
    result = await call_next(ctx)
    if ctx.method == "notifications/initialized" and (ready := os.environ.get("BENCH_STDIO_READY")):
        Path(ready, str(os.getpid())).touch()
    return result


server.middleware.append(fresh)
server.run("stdio")
"""


def rss_kib(pid: int) -> int:
    """The process's own resident memory (``VmRSS``), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def children(parent: int) -> set[int]:
    """The pids of ``parent``'s children, from ``/proc``."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rpartition(")")[2].split()[1]) == parent:
                found.add(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


class Settled:
    """Whether a gateway holds ``count`` processes, at least ``fresh`` of them initialized and unused (their files
    in ``ready``): its pool refilled, and the process of an answered request gone."""

    def __init__(self, pid: int, count: int, ready: Path | None = None, fresh: int = 0) -> None:
        self.pid, self.count, self.ready, self.fresh = pid, count, ready, fresh

    def __call__(self) -> bool:
        held = children(self.pid)
        ready = sum((self.ready / str(pid)).exists() for pid in held) if self.ready is not None else 0
        return len(held) == self.count and ready >= self.fresh


def settle(conditions: list[Settled]) -> None:
    """Wait until every gateway has settled (bounded): its pool refilled, its answered requests' processes gone."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while not all(condition() for condition in conditions):
        if time.monotonic() > deadline:
            held = {condition.pid: sorted(children(condition.pid)) for condition in conditions}
            raise RuntimeError(f"the gateways did not settle within {SETTLE_TIMEOUT:g} s: {held}")
        time.sleep(0.005)


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


def elapsed_ms(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


ECHO: dict[str, Any] = {"name": "echo", "arguments": {"message": "hi"}}


class Conversation:
    """A 2025-11-25 transport session at ``url`` (and, with ``sessions``, a data-layer session in it)."""

    def __init__(self, http: httpx.Client, url: str, *, sessions: bool = False) -> None:
        self.http, self.url, self.id = http, url, 0
        self.opened_ms = elapsed_ms(self.initialize)  # the answer to initialize, with its Mcp-Session-Id
        http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers)
        self.meta: dict[str, Any] = {}
        if sessions:
            created = self.request("sessions/create", {})
            self.meta = {SESSION_KEY: {"sessionId": created["session"]["sessionId"]}}

    def initialize(self) -> None:
        body = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "bench-stdio", "version": "1"}}
        answer = self.http.post(self.url, json=self.body("initialize", body), headers=HEADERS)
        result_of(answer)
        self.headers = {**HEADERS, "Mcp-Session-Id": answer.headers["mcp-session-id"], "Mcp-Protocol-Version": LEGACY}

    def body(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.id += 1
        return {"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return result_of(self.http.post(self.url, json=self.body(method, params), headers=self.headers))

    def call(self) -> float:
        params = {**ECHO, "_meta": self.meta} if self.meta else ECHO
        started = time.perf_counter()
        result = self.request("tools/call", params)
        assert result["content"][0]["text"] == "hi", result
        return (time.perf_counter() - started) * 1000

    def close(self) -> None:
        self.http.delete(self.url, headers=self.headers)


class Initialize:
    """A new 2025 conversation each time: its ``initialize`` timed, then its first ``tools/call`` (kept in
    ``first_calls``), then its ``DELETE``; and the whole, from ``initialize`` sent to that call's answer (kept in
    ``first_answers``): what a user of a new conversation waits for."""

    def __init__(self, http: httpx.Client, url: str) -> None:
        self.http, self.url, self.first_calls, self.first_answers = http, url, list[float](), list[float]()

    def call(self) -> float:
        started = time.perf_counter()
        conversation = Conversation(self.http, self.url)
        self.first_calls.append(conversation.call())
        self.first_answers.append((time.perf_counter() - started) * 1000)
        conversation.close()
        return conversation.opened_ms


class Modern:
    """2026-07-28 requests at ``url`` that name no conversation (a stock 2026 client's): ``tools/call`` by
    :meth:`call`; a new data-layer session by :meth:`create`, timed, then deleted."""

    def __init__(self, http: httpx.Client, url: str) -> None:
        self.http, self.url = http, url

    def post(self, method: str, params: dict[str, Any], **meta: Any) -> dict[str, Any]:
        headers = {**HEADERS, "Mcp-Protocol-Version": MODERN, "Mcp-Method": method}
        if method == "tools/call":
            headers["Mcp-Name"] = params["name"]
        envelope = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": {**envelope, **meta}}}
        return result_of(self.http.post(self.url, json=body, headers=headers))

    def call(self) -> float:
        started = time.perf_counter()
        result = self.post("tools/call", ECHO)
        assert result["content"][0]["text"] == "hi", result
        return (time.perf_counter() - started) * 1000

    def create(self) -> float:
        started = time.perf_counter()
        session = self.post("sessions/create", {})["session"]
        took = (time.perf_counter() - started) * 1000
        self.post("sessions/delete", {}, **{SESSION_KEY: {"sessionId": session["sessionId"]}})
        return took


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

    def call(self) -> float:
        return elapsed_ms(lambda: self.ask("tools/call", ECHO))

    def close(self) -> None:
        assert self.child.stdin is not None
        self.child.stdin.close()
        self.child.wait(timeout=10)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ceiling(url: str, clients: int, seconds: float) -> dict[str, float]:
    """The most 2026 ``tools/call``s a second ``url`` answers, unpaced: ``clients`` threads back to back for
    ``seconds`` (each a bounded loop); the calls refused (a limit) are counted apart."""
    counts, refused = [0] * clients, [0] * clients

    def client(index: int) -> None:
        with httpx.Client(timeout=60) as http:
            modern, deadline = Modern(http, url), time.monotonic() + seconds
            while time.monotonic() < deadline:
                try:
                    modern.call()
                    counts[index] += 1
                except (RuntimeError, httpx.HTTPStatusError):
                    refused[index] += 1

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - started
    return {"calls": sum(counts), "refused": sum(refused), "seconds": took, "per_second": sum(counts) / took}


def gateways(work: Path, command: list[str], limit: int) -> dict[str, tuple[list[str], int, dict[str, str]]]:
    """Each gateway's command, port and environment: ours (``--sessionless per-request``, ``--warm 2``, the
    default), ours with ``--sessionless shared``, and supergateway ``--stateful`` (its 2026 mode too)."""
    node = shutil.which("node")
    if node is None or not SUPERGATEWAY.exists():
        raise SystemExit(f"node and {SUPERGATEWAY.relative_to(ROOT)} are needed: run scripts/system-deps.sh")
    ports = {name: free_port() for name in ("ours", "shared", "theirs")}
    (work / "ready").mkdir()
    # Neither gateway writes a log line per request: ours at warning (no access log), supergateway at none.
    limits = ["--max-processes", str(limit), "--max-processes-per-principal", str(limit)]
    # A process per conversation, as supergateway --stateful gives, whatever revision the server speaks (its
    # server here speaks 2026-07-28, which --processes auto would serve with one shared process).
    per_conversation = ["--processes", "per-conversation", *limits, "--pass-env", READY_DIR]
    # No containment, as supergateway has none; and under one the server's pid and its file in READY_DIR (in /tmp)
    # would be its namespace's, not the machine's.
    contained = ["--process-containment", "none"]
    if os.geteuid() == 0:  # run as this user, root too, as supergateway runs it: said so, or the gateway refuses
        contained.append("--accept-root-processes")
    ours = [sys.executable, "-m", "mcp_sessions", "gateway", "--log-level", "warning", *per_conversation, *contained]
    secret = {"MCP_SESSIONS_SECRET": SECRET}
    theirs = [node, str(SUPERGATEWAY), "--stdio", " ".join(command), "--outputTransport", "streamableHttp"]
    return {
        "ours": (
            [*ours, "--port", str(ports["ours"]), "--sessionless", "per-request", "--stdio", " ".join(command)],
            ports["ours"],
            {**secret, READY_DIR: str(work / "ready")},
        ),
        "shared": (
            [*ours, "--port", str(ports["shared"]), "--sessionless", "shared", "--stdio", " ".join(command)],
            ports["shared"],
            secret,
        ),
        "theirs": ([*theirs, "--stateful", "--port", str(ports["theirs"]), "--logLevel", "none"], ports["theirs"], {}),
    }


def first_call(argv: list[str], port: int, environ: dict[str, str], log: Path) -> tuple[float, float]:
    """``argv`` spawned: the seconds until a 2025 client's first ``tools/call`` through it is answered (``initialize``,
    then the call), its port asked again each 2 ms until it listens; and the CPU seconds of the gateway's own process
    by then (its server's process excluded)."""
    url = f"http://127.0.0.1:{port}/mcp"
    with log.open("wb") as out, httpx.Client(timeout=60) as http:
        began = time.perf_counter()
        child = subprocess.Popen(argv, env={**os.environ, **environ}, stdout=out, stderr=subprocess.STDOUT)
        try:
            for _ in range(int(START_TIMEOUT / 0.002)):
                try:
                    conversation = Conversation(http, url)
                except httpx.TransportError:
                    if child.poll() is not None:
                        raise RuntimeError(f"{argv[0]} exited: {log.read_text()[-2000:]}") from None
                    time.sleep(0.002)
                    continue
                conversation.call()
                return time.perf_counter() - began, cpu_seconds(child.pid)
            raise RuntimeError(f"{argv[0]} did not answer within {START_TIMEOUT:g} s")
        finally:
            child.terminate()
            child.wait(timeout=15)


def starts(argv: dict[str, tuple[list[str], int, dict[str, str]]], count: int, work: Path) -> dict[str, list[float]]:
    """Each gateway's :func:`first_call`, ``count`` times, the two alternated: wall ms and CPU s, by their names."""
    timed: dict[str, list[float]] = {f"{name} {what}": [] for name in (OURS, THEIRS) for what in ("ms", "cpu")}
    for _ in range(count):
        for name, key in random.sample([(OURS, "ours"), (THEIRS, "theirs")], 2):
            wall, cpu = first_call(*argv[key], work / f"{key}-start.log")
            timed[f"{name} ms"].append(wall * 1000)
            timed[f"{name} cpu"].append(cpu)
    return timed


def ready(argv: list[str], url: str, log: Path) -> float:
    """``argv`` spawned: the seconds until ``url`` (its readiness) answers 200, asked again each 2 ms."""
    with log.open("wb") as out, httpx.Client(timeout=60) as http:
        began = time.perf_counter()
        child = subprocess.Popen(argv, env={**os.environ, "MCP_SESSIONS_SECRET": SECRET}, stdout=out, stderr=out)
        try:
            for _ in range(int(START_TIMEOUT / 0.002)):
                with contextlib.suppress(httpx.TransportError):
                    if http.get(url).status_code == 200:
                        return time.perf_counter() - began
                if child.poll() is not None:
                    raise RuntimeError(f"{argv[0]} exited: {log.read_text()[-2000:]}")
                time.sleep(0.002)
            raise RuntimeError(f"{argv[0]} was not ready within {START_TIMEOUT:g} s")
        finally:
            child.terminate()
            child.wait(timeout=15)


def readiness(count: int, work: Path) -> dict[str, list[float]]:
    """As root, each gateway's :func:`ready`, ``count`` times, the two alternated, in front of server-memory (run by
    node, where a uid of ``--process-uids`` may read it): ours as a team runs it, a uid each and the egress network
    (``/readyz``: its shared process has answered), supergateway ``--stateful`` (its ``--healthEndpoint``: it
    listens; it starts a process for each session). Wall ms by their names; none where not root."""
    node = shutil.which("node")
    if os.geteuid() != 0 or node is None or not MEMORY.exists():
        return {}
    memory = f"{node} {MEMORY}"
    ports = {name: free_port() for name in ("ours", "theirs")}
    ours = [sys.executable, "-m", "mcp_sessions", "gateway", "--log-level", "warning", "--port", str(ports["ours"])]
    ours += ["--process-uids", READY_UIDS, "--stdio", memory]
    theirs = [node, str(SUPERGATEWAY), "--stdio", memory, "--outputTransport", "streamableHttp", "--stateful"]
    theirs += ["--port", str(ports["theirs"]), "--logLevel", "none", "--healthEndpoint", "/healthz"]
    argv = {
        READY: (ours, f"http://127.0.0.1:{ports['ours']}/readyz"),
        THEIRS_READY: (theirs, f"http://127.0.0.1:{ports['theirs']}/healthz"),
    }
    timed: dict[str, list[float]] = {name: [] for name in argv}
    for _ in range(count):
        for name in random.sample(list(argv), len(argv)):
            timed[name].append(ready(*argv[name], work / "ready.log") * 1000)
    return timed


def interleaved(ways: dict[str, Callable[[], float]], rounds: int, settled: list[Settled]) -> dict[str, list[float]]:
    """Each way once a round, in a new shuffled order each round, the machine settled before each request."""
    timings: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        order = list(ways.items())
        random.shuffle(order)
        for name, way in order:
            settle(settled)
            timings[name].append(way())
    return timings


def run(rounds: int, conversations: int, clients: int, seconds: float, count: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-stdio-"))
    (work / "server.py").write_text(SERVER)
    command = [sys.executable, str(work / "server.py")]
    argv = gateways(work, command, conversations + clients + 4)
    with (
        process(*argv["ours"], work / "ours.log") as ours,
        process(*argv["theirs"], work / "theirs.log") as theirs,
        process(*argv["shared"], work / "shared.log"),
        httpx.Client(timeout=60) as http,
    ):
        url = {name: f"http://127.0.0.1:{port}/mcp" for name, (_, port, _) in argv.items()}
        direct = Direct(command)
        initialize, per_request = Initialize(http, url["ours"]), Modern(http, url["ours"])
        their_initialize = Initialize(http, url["theirs"])
        paced: list[float] = []  # when each per-request call was sent

        def own_process() -> float:
            paced.append(time.monotonic())
            return per_request.call()

        conversation = Conversation(http, url["ours"])
        conversation.call()  # its process starts with its first call, not its initialize
        ways: dict[str, Callable[[], float]] = {
            "stdio directly": direct.call,
            OURS: conversation.call,
            THEIRS: Conversation(http, url["theirs"]).call,
            PER_REQUEST: own_process,
            SHARED: Modern(http, url["shared"]).call,
            THEIRS_MODERN: Modern(http, url["theirs"]).call,
            CREATE: per_request.create,
            INITIALIZE: initialize.call,
            THEIRS_INITIALIZE: their_initialize.call,
        }
        # ours: the shared process, the 2025 client's (used) and the warm pool (fresh); supergateway: the 2025 client's
        settled = [Settled(ours.pid, 4, work / "ready", fresh=3), Settled(theirs.pid, 1)]
        interleaved(ways, min(2, rounds), settled)  # warm up: imports, first calls
        del paced[:], initialize.first_calls[:], initialize.first_answers[:], their_initialize.first_answers[:]
        timings = interleaved(ways, rounds, settled)
        timings[FIRST_CALL] = initialize.first_calls
        timings[FIRST_ANSWER] = initialize.first_answers
        timings[THEIRS_FIRST_ANSWER] = their_initialize.first_answers
        direct.close()
        most = {}
        for name, target in ((PER_REQUEST, url["ours"]), (SHARED, url["shared"]), (THEIRS_MODERN, url["theirs"])):
            settle(settled)
            most[name] = ceiling(target, clients, seconds)
        memory = {}
        for name, pid, target in ((OURS, ours.pid, url["ours"]), (THEIRS, theirs.pid, url["theirs"])):
            before = rss_kib(pid)
            for conversation in [Conversation(http, target) for _ in range(conversations)]:
                conversation.call()
            memory[name] = (rss_kib(pid) - before) / conversations
    started = starts(argv, count, work)
    readied = readiness(count, work)
    shutil.rmtree(work, ignore_errors=True)
    results = summary(timings, memory, most, paced, rounds=rounds, conversations=conversations)
    return {**results, "starts": started, "ready": readied}


def summary(
    timings: dict[str, list[float]],
    memory: dict[str, float],
    most: dict[str, dict[str, float]],
    paced: list[float],
    **sizes: int,
) -> dict[str, Any]:
    base = timings["stdio directly"]
    ways: dict[str, dict[str, float | None]] = {}
    for name, values in timings.items():
        entry: dict[str, float | None] = {"calls": len(values)}
        entry |= {"p50_ms": statistics.median(values), "p99_ms": percentile(values, 0.99)}
        if name != "stdio directly":
            entry["added_p50_ms"] = statistics.median(values) - statistics.median(base)
            entry["added_p99_ms"] = percentile(values, 0.99) - percentile(base, 0.99)
            entry["rss_kib_per_conversation"] = memory.get(name)
        ways[name] = entry
    rate = (len(paced) - 1) / (paced[-1] - paced[0]) if len(paced) > 1 and paced[-1] > paced[0] else 0.0
    return {**sizes, "per_request_paced_per_s": rate, "ways": ways, "ceiling": most}


TEXT = (
    "What `mcp-sessions gateway --stdio` adds to a `tools/call` (an `echo` tool of an `MCPServer` over stdio),"
    " against the same server over its own stdio from the client's process and against supergateway"
    f" {SUPERGATEWAY_VERSION} (`--stateful --outputTransport streamableHttp`: a process per 2025 transport session,"
    " and in its 2026-07-28 mode a process started for each request): one request at a time, every row alternated"
    " request by request in a new shuffled order each round. Before each request the machine settles, by a"
    " condition (bounded): each gateway holds the processes it should, each initialized (the server touches a file"
    " at `notifications/initialized`), and the processes of answered requests are gone. So a per-request row is"
    " taken at a rate its pool keeps up with (the rate is in the verdict): a process start is its ceiling, the"
    " last table. The 2025 client has a transport session and no data-layer session, as a stock client; the 2026"
    " requests name no conversation. Then each gateway opens more conversations (transport sessions), each used"
    " once: KiB/conversation is the growth of the gateway process's own resident memory (`VmRSS`, its child"
    ' processes excluded) over their number ("shrank": the process gave back more than the conversations took, as'
    " node's collector may). Neither gateway writes a log line per request (ours `--log-level warning`,"
    " supergateway `--logLevel none`). Where a 2025 client's call goes in the gateway (a cProfile of 1,000 calls,"
    " issue 102's last step): about 4,950 Python calls a call, about 250 of them this project's (the table's"
    " decision, the relay, the session's check and echo); the rest is the `mcp` SDK's transport the gateway is built"
    " on (its lowlevel `Server` behind its streamable HTTP transport, its `JSONRPCDispatcher` to the process):"
    " sse_starlette's five tasks a response, the SDK's own two spans (made with no provider set), its validation,"
    " serialization and dump of each result; 7 task spawns and 21 turns of the event loop a call. The process gets"
    " one `write(2)` a call and answers in one `read(2)` (strace); its seccomp filter costs nothing this measures"
    " (the server's CPU a call 1.93 ms uncontained, 1.87 under Docker's profile, 1.85 under an allow-all one)."
)
OPEN_TEXT = (
    "A new conversation through `mcp-sessions gateway --stdio` (its default `--warm 2`), alternated with the rows"
    " above: a 2026 `sessions/create` (timed to its answer; then `sessions/delete`), a 2025 `initialize` (timed to"
    " its answer, which carries the transport session's id; then `notifications/initialized`), and the first"
    " `tools/call` of that 2025 conversation (the process may still be starting), then its `DELETE`. The ratio is"
    " to the added p50 of a 2025 client's `tools/call` in the table above. The last row is what a user of a new"
    " conversation waits for, beside the peer's: from the `initialize` sent to its first `tools/call`'s answer,"
    f" through the gateway (already running, its warm pool on) and through supergateway {SUPERGATEWAY_VERSION}"
    " `--stateful` (a process started for each new session), alternated with every row above; its ratio is to"
    " supergateway's. The gateway is the first table's: a process per conversation (`--processes"
    " per-conversation`, as supergateway's a process per session: the default, `auto`, would serve this client in"
    " its caller's process, started already) and `--process-containment none` (a process started ahead is"
    " contained before it is taken, so its containment is not in this time)."
)
CEILING_TEXT = (
    "The most 2026 `tools/call`s (naming no conversation) a second each gateway answers, unpaced: {clients} clients"
    " back to back for {seconds:g} s. With `--sessionless per-request` each call takes a process of its own: once"
    " the warm pool is empty, a call waits for a process to start (an `MCPServer` imports the `mcp` SDK: most of a"
    " second of CPU), so the machine's process starts are the ceiling."
)


START_TEXT = (
    "Each gateway started, a new process each time, the two alternated: from its spawn to the first `tools/call`"
    " a 2025 client has answered through it (its `initialize`, then the call; the gateway's port asked again each"
    " 2 ms until it listens), which starts the server's process too; and the CPU the gateway's own process spent by"
    " then (its server's process excluded). Ours with the flags of the first table (`--process-containment none`,"
    " as supergateway contains nothing)."
)

READY_TEXT = (
    "As root, each gateway started, a new process each time, the two alternated, in front of server-memory (run by"
    " node): from its exec to its first ready answer, asked again each 2 ms. Ours as a team runs it, each process a"
    f" uid of its own (`--process-uids {READY_UIDS}`) on the egress network, bubblewrap and its seccomp filter: its"
    " `/readyz` answers 200 once its checks are made, its egress table installed, and its shared process has"
    " answered `initialize` (a process started ahead beside it). supergateway's `--healthEndpoint` answers once it"
    " listens: it starts no process before a session's. Where ours goes (issue 112, item 2: timestamps per step"
    " from the process's own audit events, `-X importtime`): its own modules and the checks' (about 0.25 CPU-s:"
    " `mcp_sessions`' core, starlette, PyJWT and `cryptography`), its checks (each directory to the server's program"
    " searched as the uid; the containment's trial run, and beside it the trial of a process's network) and its"
    " egress table (`nft`; the host's chains listed beside), then, at once, its shared process in its place (its"
    " namespace, veth pair and rules, about 25 helpers) and the server's own start (server-memory 0.25 CPU-s, a"
    " Python `MCPServer` 0.7) beside the import of the `mcp` SDK and its pydantic models on a worker thread (about"
    " 0.5 CPU-s, on which the app is built), which the process needs none of until it is asked `initialize`. The"
    " table is installed before any process starts: a process's uid and veth pair go into its sets before it starts."
    " A `--warm` process starts once the app is built, the others once the shared one has answered. The gateway's"
    " Python runs one thread at a time: the SDK's import begun earlier, beside the table's install, delayed the"
    " first process by about what it saved of the build (tried, alternated: no change). A loaded host stretches"
    " each step."
)


def tables(results: dict[str, Any], clients: int, seconds: float) -> list[dict[str, Any]]:
    ways = results["ways"]
    rows = []
    for name, entry in ways.items():
        if name in OPENINGS:
            continue
        added = [entry.get(key) for key in ("added_p50_ms", "added_p99_ms")]
        memory = entry.get("rss_kib_per_conversation")
        rows.append(
            [
                name,
                str(entry["calls"]),
                f"{entry['p50_ms']:.1f}",
                f"{entry['p99_ms']:.1f}",
                *("-" if value is None else f"{value:+.1f}" for value in added),
                "-" if memory is None else f"{memory:.0f}" if memory >= 0 else "n/a (shrank)",
            ]
        )
    call = ways[OURS]["added_p50_ms"]
    opening = [
        [
            name,
            str(ways[name]["calls"]),
            f"{ways[name]['p50_ms']:.1f}",
            f"{ways[name]['p99_ms']:.1f}",
            f"{ways[name]['p50_ms'] / call:.1f}x" if call > 0 else "n/a",
        ]
        for name in (CREATE, INITIALIZE, FIRST_CALL)
    ]
    ours_first, theirs_first = ways[FIRST_ANSWER], ways[THEIRS_FIRST_ANSWER]
    opening.append(
        [
            f"{FIRST_ANSWER}: the gateway (supergateway {SUPERGATEWAY_VERSION} --stateful's beside it)",
            str(ours_first["calls"]),
            f"{ours_first['p50_ms']:.1f} ({theirs_first['p50_ms']:.1f})",
            f"{ours_first['p99_ms']:.1f} ({theirs_first['p99_ms']:.1f})",
            f"{ours_first['p50_ms'] / theirs_first['p50_ms']:.2f}x supergateway's",
        ]
    )
    most = [
        [name, f"{entry['calls']:.0f}", f"{entry['refused']:.0f}", f"{entry['per_second']:.1f}"]
        for name, entry in results["ceiling"].items()
    ]
    header = ["way", "calls", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "KiB/conversation"]
    text = f"{TEXT} {results['rounds']} rounds, {results['conversations']} conversations."
    timed = results["starts"]
    started = [
        [
            name,
            str(len(timed[f"{name} ms"])),
            f"{statistics.median(timed[f'{name} ms']):.0f}",
            f"{min(timed[f'{name} ms']):.0f}",
            f"{max(timed[f'{name} ms']):.0f}",
            f"{statistics.median(timed[f'{name} cpu']):.2f}",
        ]
        for name in (OURS, THEIRS)
    ]
    readied = results["ready"]
    ready = [
        [
            name,
            str(len(took)),
            f"{statistics.median(took):.0f}",
            f"{percentile(took, 0.9):.0f}",
            f"{min(took):.0f}",
            f"{max(took):.0f}",
        ]
        for name, took in readied.items()
    ]
    return [
        section("stdio servers", text, header, rows),
        section(
            "stdio servers: a new conversation",
            OPEN_TEXT,
            ["what", "count", "p50 ms", "p99 ms", "p50 / a call's added p50"],
            opening,
        ),
        section(
            "stdio servers: the most sessionless calls a second",
            CEILING_TEXT.format(clients=clients, seconds=seconds),
            ["way", "calls", "refused", "calls/s"],
            most,
        ),
        section(
            "stdio servers: from a start to the first answer",
            START_TEXT,
            ["gateway", "starts", "p50 ms", "least ms", "most ms", "CPU s (p50)"],
            started,
        ),
        *(
            [
                section(
                    "stdio servers: from exec to ready",
                    READY_TEXT,
                    ["gateway", "starts", "p50 ms", "p90 ms", "least ms", "most ms"],
                    ready,
                )
            ]
            if ready
            else []
        ),
    ]


def verdicts(results: dict[str, Any]) -> list[dict[str, str]]:
    ways = results["ways"]
    ours, theirs, per_request, shared = (ways[name]["added_p50_ms"] for name in (OURS, THEIRS, PER_REQUEST, SHARED))
    call, rate = ours, results["per_request_paced_per_s"]
    most = {name: entry["per_second"] for name, entry in results["ceiling"].items()}
    mine, peer = ways[OURS]["p50_ms"], ways[THEIRS]["p50_ms"]
    timed = results["starts"]
    start, peer_start = (statistics.median(timed[f"{name} ms"]) for name in (OURS, THEIRS))
    judged = [
        verdict(
            "a 2025 client's `tools/call` through `mcp-sessions gateway --stdio` takes at most 1.3x what it takes"
            f" through supergateway {SUPERGATEWAY_VERSION} `--stateful` (p50, the same stdio server)",
            f"the gateway {mine:.2f} ms, supergateway {peer:.2f} ms, the server's own stdio"
            f" {ways['stdio directly']['p50_ms']:.2f} ms",
            mine <= 1.3 * peer,
            f"{mine / peer:.2f}x supergateway's",
        ),
        verdict(
            "`mcp-sessions gateway --stdio`'s time from its spawn to its first answered `tools/call`, beside"
            " supergateway's",
            f"the gateway {start:.0f} ms, supergateway {peer_start:.0f} ms (p50 of {len(timed[f'{OURS} ms'])} starts"
            " each)",
            None,
            f"reported: {start / peer_start:.2f}x supergateway's",
        ),
        verdict(
            "a 2025 client's `tools/call` through `mcp-sessions gateway --stdio` adds at most 1.25x what supergateway"
            f" {SUPERGATEWAY_VERSION} `--stateful` adds (p50, the same stdio server)",
            f"the gateway +{ours:.1f} ms, supergateway +{theirs:.1f} ms over the server's own stdio",
            ours <= 1.25 * theirs,
            f"{ours / theirs:.2f}x supergateway's" if theirs > 0 else "supergateway added nothing",
        ),
        verdict(
            "a 2026 request's own process (`--sessionless per-request`, from the warm pool, at a rate the pool keeps"
            " up with) adds at most 1.5x what the shared process adds (p50)",
            f"per-request +{per_request:.1f} ms (one call each {1 / rate:.1f} s on average), shared +{shared:.1f} ms"
            if rate > 0
            else f"per-request +{per_request:.1f} ms, shared +{shared:.1f} ms",
            per_request <= 1.5 * shared,
            f"{per_request / shared:.2f}x the shared process's" if shared > 0 else "the shared process added nothing",
        ),
        verdict(
            "the most `--sessionless per-request` calls a second the gateway sustains, beside the shared process's",
            f"per-request {most[PER_REQUEST]:.1f}/s, shared {most[SHARED]:.1f}/s, supergateway's 2026 mode"
            f" {most[THEIRS_MODERN]:.1f}/s",
            None,
            "reported: a process start is the per-request ceiling",
        ),
    ]
    if readied := results["ready"]:
        mine, theirs = (statistics.median(readied[name]) for name in (READY, THEIRS_READY))
        judged.append(
            verdict(
                "`mcp-sessions gateway --stdio` as root with `--process-uids` and the egress network is ready"
                " (`/readyz` 200) at most 1.5 s from its exec (p50)",
                f"the gateway {mine:.0f} ms, supergateway {theirs:.0f} ms (its health endpoint; p50 of"
                f" {len(readied[READY])} starts each)",
                mine <= 1500,
                f"{mine / theirs:.2f}x supergateway's",
            )
        )
    first = ways[FIRST_CALL]["p50_ms"]
    for name, then in ((CREATE, ""), (INITIALIZE, f"; its first `tools/call` then {first:.1f} ms")):
        took = ways[name]["p50_ms"]
        judged.append(
            verdict(
                f"a new conversation's `{name.split()[0]}` answers in at most 3x a `tools/call`'s added p50 (the warm"
                " pool on)",
                f"{name} {took:.1f} ms{then}, a 2025 client's call +{call:.1f} ms (p50)",
                took <= 3 * call,
                f"{took / call:.1f}x" if call > 0 else "a call added nothing",
            )
        )
    ours_first, theirs_first = ways[FIRST_ANSWER]["p50_ms"], ways[THEIRS_FIRST_ANSWER]["p50_ms"]
    judged.append(
        verdict(
            "a new conversation's first answer (a 2025 `initialize`, then its first `tools/call`) through"
            " `mcp-sessions gateway --stdio`, already running, takes at most 1.0x what a new session's takes through"
            f" supergateway {SUPERGATEWAY_VERSION} `--stateful` (p50, the same stdio server)",
            f"the gateway {ours_first:.1f} ms (its warm pool: a process started ahead), supergateway"
            f" {theirs_first:.1f} ms (a process started for the session)",
            ours_first <= theirs_first,
            f"{ours_first / theirs_first:.2f}x supergateway's",
        )
    )
    return judged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=80, help="measured requests to each way")
    parser.add_argument("--conversations", type=int, default=16, help="conversations opened for the memory figure")
    parser.add_argument("--clients", type=int, default=4, help="clients at once for the most calls a second")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each gateway's most calls a second")
    parser.add_argument("--starts", type=int, default=10, help="how many times each gateway is started")
    parser.add_argument("--quick", action="store_true", help="a few rounds and conversations: it runs")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    began = (time.monotonic(), load_average())
    quick = (2, 2, 1.0, 1)
    rounds, conversations, seconds, count = (
        quick if args.quick else (args.rounds, args.conversations, args.seconds, args.starts)
    )
    results = run(rounds, conversations, args.clients, seconds, count)
    finish(
        "stdio",
        args.json,
        args.quick,
        began,
        tables(results, args.clients, seconds),
        verdicts(results),
        **results,
    )


if __name__ == "__main__":
    main()
