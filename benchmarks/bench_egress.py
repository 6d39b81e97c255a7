"""What ``--process-network egress`` costs a stdio server against the host's network, in one run.

Two ``mcp-sessions gateway --stdio`` commands in front of one stdio server (``SERVER`` below, plain JSON-RPC lines
run by the system's python3), each process run as a uid of its own under bubblewrap: one with
``--process-network egress`` (a network namespace of its own, connected by a veth pair whose packets the kernel
forwards, the gateway's nftables rules on its interface), one with ``--process-network host``. Alternated request by
request, in a new shuffled order each round:

- a ``tools/call`` of ``echo``: what the namespace adds to a call (nothing on the wire: the call is a pipe);
- a conversation's start: ``initialize`` to its first call's answer (the process started, and its namespace
  and veth pair), and then what its control group holds of memory (``memory.usage_in_bytes``, or v2's
  ``memory.current``: the process's, and whatever helper of its network runs in it);
- a download of 10 MB from an HTTP server on this host's own address (granted by ``--process-allow-net``): the
  server process's ``urllib`` reads it whole, and says how long that took.

With ``--against DIR`` (another checkout of this repository, an earlier commit's: ``git worktree add DIR COMMIT``),
a third gateway runs that checkout's code under ``egress``, alternated with the other two: what a change to the
egress network costs against what it replaces, in one run.

Run as root (the uids, the namespaces and the rules need it), on an idle machine:

    python benchmarks/bench_egress.py                  # full run
    python benchmarks/bench_egress.py --quick          # a few rounds
    python benchmarks/bench_egress.py --json out.json  # also write the numbers
    python benchmarks/bench_egress.py --against ../before  # also that checkout's egress
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import itertools
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from _harness import finish, load_average, section

SECRET = "bench-egress-secret-bench-egress-secret-0123"
SIZE = 10 << 20
IDS = itertools.count(1)  # each request its own: an id is the session's until its request is done with
SERVER = r"""
import json, sys, time, urllib.request
def download(url):
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as answer:
        size = len(answer.read())
    return f"{size} {time.perf_counter() - start}"
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    params = message.get("params") or {}
    if message["method"] == "initialize":
        result = {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "bench", "version": "1"}}
    else:
        arguments = params.get("arguments", {})
        text = download(arguments["url"]) if params.get("name") == "download" else arguments.get("text", "")
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
"""


def host_address() -> str:
    """This host's address other than loopback's, as a connection out would leave from it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet: the kernel's choice of a source address
        address: str = probe.getsockname()[0]
    return address


@contextmanager
def serving(address: str) -> Iterator[int]:
    """An HTTP server of ``SIZE`` bytes on ``address``: its port."""
    body = bytes(SIZE)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((address, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


@contextmanager
def gateway(server: Path, uids: str, *options: str, code: str | None = None) -> Iterator[str]:
    """The gateway command in front of ``server``, a process per conversation, none started ahead (``code``: the
    checkout whose package it runs, else this one's): its URL."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    line = [sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(port)]
    line += ["--stdio", f"/usr/bin/python3 {server}"]
    line += ["--processes", "per-conversation", "--warm", "0", "--log-level", "info", "--process-uids", uids, *options]
    environ = {**os.environ, "MCP_SESSIONS_SECRET": SECRET}
    if code is not None:
        environ["PYTHONPATH"] = str(Path(code, "middleware").resolve())
    process = subprocess.Popen(line, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        for startup in process.stderr:  # its startup lines, up to its app's start
            if "Application startup complete" in startup:
                break
        else:
            raise RuntimeError(f"the gateway {options} did not start")
        listening(port, process)  # uvicorn listens on the gateway's socket after that line
        said: list[str] = []  # the rest, kept to say why if the run fails
        threading.Thread(target=lambda: said.extend(process.stderr or ()), daemon=True).start()
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        except BaseException:
            print(f"the gateway {' '.join(options)} said:", *said[-20:], sep="\n", file=sys.stderr)
            raise
    finally:
        process.terminate()
        process.wait(timeout=60)


def post(http: httpx.Client, url: str, body: dict[str, Any], session: str | None = None) -> httpx.Response:
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return http.post(url, json=body, headers=headers)


def listening(port: int, process: subprocess.Popen[str], within: float = 30) -> None:
    """Once ``process`` accepts a connection on ``port``, tried again each 10 ms, for ``within`` seconds."""
    ends = time.monotonic() + within
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=within).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > ends:
                raise RuntimeError(f"the gateway on port {port} did not listen") from None
            time.sleep(0.01)


def started(http: httpx.Client, url: str) -> tuple[str, float]:
    """A new conversation (a 2025 transport session): its id, and ms from ``initialize`` to its first call's answer
    (its process started for it, and under egress its namespace and its network)."""
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
    start = time.perf_counter()
    answer = post(http, url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
    session = answer.headers["mcp-session-id"]
    post(http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    called(http, url, session, "echo", {"text": "first"})
    return session, (time.perf_counter() - start) * 1000


def called(http: httpx.Client, url: str, session: str, name: str, arguments: dict[str, str]) -> tuple[str, float]:
    """The text of a ``tools/call`` of ``name``, and its ms."""
    params = {"name": name, "arguments": arguments}
    body = {"jsonrpc": "2.0", "id": next(IDS), "method": "tools/call", "params": params}
    start = time.perf_counter()
    answer = post(http, url, body, session)
    took = (time.perf_counter() - start) * 1000
    text = answer.text
    if text.startswith("event:") or text.startswith("data:"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    answer = json.loads(text)
    assert "result" in answer, answer
    return answer["result"]["content"][0]["text"], took


def groups(uids: str) -> dict[str, int]:
    """The memory control groups of the processes of ``uids`` (``FIRST-LAST``: a conversation's each), and what each
    holds now, bytes (v1's ``memory.usage_in_bytes``, v2's ``memory.current``)."""
    first, last = map(int, uids.split("-"))
    found = {}
    for process in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, StopIteration):
            status = (process / "status").read_text().splitlines()
            if not first <= int(next(line for line in status if line.startswith("Uid:")).split()[1]) <= last:
                continue
            for line in (process / "cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                place = {"memory": ("memory", "memory.usage_in_bytes"), "": ("", "memory.current")}.get(controllers)
                if place is not None and Path("/sys/fs/cgroup", place[0], path.lstrip("/"), place[1]).exists():
                    directory = Path("/sys/fs/cgroup", place[0], path.lstrip("/"))
                    found[str(directory)] = int((directory / place[1]).read_text())
    return found


def run(rounds: int, starts: int, downloads: int, against: str | None) -> dict[str, dict[str, list[float]]]:
    address = host_address()
    work = Path(tempfile.mkdtemp(prefix="mcp-sessions-bench-egress-", dir="/var/lib"))
    try:
        work.chmod(0o755)
        server = work / "server.py"
        server.write_text(SERVER)
        server.chmod(0o644)
        with serving(address) as port, httpx.Client(timeout=120) as http:
            grant = ("--process-allow-net", f"{address}:{port}")
            # Uids of its own: a gateway's egress rules hold for its whole --process-uids range, so another's processes
            # in it too (docs/gateway.md's recipe takes 61000-61999, the tests 62000-64999).
            with contextlib.ExitStack() as gateways:
                ranges = {"egress": "60700-60729", "host": "60730-60759", "egress before": "60760-60799"}
                urls = {
                    "egress": gateways.enter_context(
                        gateway(server, ranges["egress"], "--process-network", "egress", *grant)
                    ),
                    "host": gateways.enter_context(gateway(server, ranges["host"], "--process-network", "host")),
                }
                if against is not None:
                    before = gateway(
                        server, ranges["egress before"], "--process-network", "egress", *grant, code=against
                    )
                    urls["egress before"] = gateways.enter_context(before)
                sessions = {name: started(http, url)[0] for name, url in urls.items()}
                seen: dict[str, dict[str, list[float]]] = {"call": {}, "start": {}, "memory": {}, "download": {}}
                url_of = f"http://{address}:{port}/"
                for measure, count in (("call", rounds), ("start", starts), ("download", downloads)):
                    for _ in range(count):
                        for name in random.sample(list(urls), len(urls)):
                            if measure == "call":
                                took = called(http, urls[name], sessions[name], "echo", {"text": "x"})[1]
                            elif measure == "start":
                                held = groups(ranges[name])
                                session, took = started(http, urls[name])
                                fresh = [size for group, size in groups(ranges[name]).items() if group not in held]
                                seen["memory"].setdefault(name, []).append(sum(fresh) / (1 << 20))
                                http.delete(urls[name], headers={"Mcp-Session-Id": session})  # its process ended
                            else:
                                text = called(http, urls[name], sessions[name], "download", {"url": url_of})[0]
                                size, seconds = text.split()
                                assert int(size) == SIZE, text
                                took = float(seconds) * 1000
                            seen[measure].setdefault(name, []).append(took)
                return seen
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300, help="calls of each gateway")
    parser.add_argument("--starts", type=int, default=30, help="conversations started on each")
    parser.add_argument("--downloads", type=int, default=10, help="10 MB downloads through each")
    parser.add_argument("--quick", action="store_true", help="a few of each")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--against", metavar="DIR", help="also DIR's egress: a checkout of an earlier commit")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_egress runs as root: a uid per process, namespaces and nftables rules")
    began = (time.monotonic(), load_average())
    rounds, starts, downloads = (20, 3, 2) if args.quick else (args.rounds, args.starts, args.downloads)
    seen = run(rounds, starts, downloads, args.against)
    what = {
        "call": "a tools/call (echo)",
        "start": "a conversation's start, to its first call's answer",
        "memory": "a conversation's memory at rest, MiB (its control group's, after its start)",
        "download": "10 MB from this host's address, read whole",
    }
    rows = []
    before = args.against is not None
    names = ["host", "egress", *(["egress before"] if before else [])]
    for measure, found in seen.items():
        ways = {name: found[name] for name in names}
        p50 = {name: statistics.median(times) for name, times in ways.items()}
        p99 = {
            name: statistics.quantiles(times, n=100)[98] if len(times) > 1 else p50[name]
            for name, times in ways.items()
        }
        host, egress = p50["host"], p50["egress"]
        row = [what[measure], len(ways["host"]), f"{host:.2f}", f"{egress:.2f}", f"{egress - host:+.2f}"]
        row.append(f"{egress / host:.2f}x")
        if before:
            row += [f"{p50['egress before']:.2f}", f"{egress / p50['egress before']:.2f}x"]
        row.append(" / ".join(f"{p99[name]:.2f}" for name in ways))
        rows.append(row)
    text = (
        "What `--process-network egress` costs a stdio server against `--process-network host`, the same server "
        "(plain JSON-RPC lines, the system's python3) behind two `mcp-sessions gateway --stdio` commands, each "
        "process a uid of its own under bubblewrap, alternated request by request: under `egress` a process has a "
        "network namespace of its own, connected by a veth pair whose packets the kernel forwards, the gateway's "
        "nftables rules on its interface. A call is a pipe, on neither network; a start makes the namespace and its "
        "pair; a conversation's memory is what its control group holds once it has answered its first call (MiB, "
        "not ms, in that row: the process's, and any helper of its network that runs in the group); the download "
        "goes through the kernel's forwarding (10 MB from an HTTP server on this host's own address, granted by "
        "`--process-allow-net`, read whole by the process's `urllib`: the process's own timing)."
    )
    header = ["what", "count", "host p50 ms", "egress p50 ms", "added ms", "egress / host"]
    if before:
        header += ["egress before p50 ms", "egress / before"]
        text += (
            " `egress before` is the same gateway run from another checkout (the code this one's egress replaces), "
            "alternated with the other two, under the same load: read its ratio. Here `before` is pasta's egress "
            "(passt's userspace TCP/IP stack, run as the process's uid in its control group), which the veth pair "
            "replaced: why, docs/security.md."
        )
    header.append(f"p99 ms ({' / '.join(names)})")
    finish(
        "bench_egress.py",
        args.json,
        args.quick,
        began,
        [section("stdio servers: what egress costs", text, header, rows)],
        [],
        seen=seen,
    )


if __name__ == "__main__":
    main()
