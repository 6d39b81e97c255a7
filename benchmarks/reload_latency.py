"""A request's latency to a server a reload leaves unchanged, while the reload runs: what a SIGHUP costs the servers
that go on (issue 112, item 5).

One ``--config`` gateway (as root: each process a uid of ``--process-uids`` of its own, contained, under its egress
table) serves ``a``, a stdio server of the standard library's alone (an ``echo`` tool), to one 2025 conversation that
calls it back to back from a thread; beside it ``c``, the same server. The file is written again and SIGHUPed
``--reloads`` times, each changing ``c``'s ``process-idle``: the gateway reads the file, drains and stops ``c``,
removes its egress table (``nft``), checks its command as its uid, tries its sandbox and installs its new table.
Each call is timed and said to be during a reload where it overlaps one (from the SIGHUP to the gateway's
``reloaded`` line); the report is each set's count, p50, p99 and most, in ms.

    sudo python benchmarks/reload_latency.py                     # 20 reloads
    sudo python benchmarks/reload_latency.py --reloads 50
    sudo PYTHONPATH=../main/middleware python benchmarks/reload_latency.py   # another checkout's gateway

Measured here (2 cores shared with other work, 20 reloads; "before": the reload's work on the event loop, "after":
on a worker thread), ms, two runs each alternated:

    calls                       count    p50    p99    most
    before: between reloads      1674    2.5   20.8   208.6
    before: during a reload      1156    9.0  150.5   363.3
    after:  between reloads      1379    3.5   29.8   192.6
    after:  during a reload      1924    6.7   48.5   209.1
    before: between reloads      1018    8.1   36.3   306.9
    before: during a reload      1304    6.6  160.4   400.7
    after:  between reloads      1755    2.2   27.1   298.1
    after:  during a reload      4069    2.0   36.5   191.2
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _harness import free_port
from bench_stdio import SECRET, Conversation, percentile, process

SERVER = """
import json, sys

for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    method, params = message["method"], message.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "echo", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": params["arguments"]["message"]}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\\n")
    sys.stdout.flush()
"""
RELOAD_TIMEOUT = 60.0


def servers_file(server: Path, uids: str, idle: int) -> str:
    """The gateway's file: ``a`` and ``c``, each the echo server, a process per conversation, none started ahead;
    ``c``'s ``process-idle`` is ``idle``, which a reload changes (so ``c`` is built anew)."""
    command = json.dumps(shlex.join(["/usr/bin/python3", str(server)]))  # the system's: every uid may run it
    tables = [f"[gateway]\nprocess-uids = {json.dumps(uids)}\n"]
    for name, extra in (("a", ""), ("c", f"process-idle = {idle}\n")):
        tables.append(f'[servers.{name}]\nstdio = {command}\nprocesses = "per-conversation"\nwarm = 0\n{extra}')
    return "\n".join(tables)


def run(reloads: int, uids: str) -> dict[str, list[float]]:
    """Each call's latency (ms), between reloads and during one."""
    latencies: dict[str, list[float]] = {"between reloads": [], "during a reload": []}
    with tempfile.TemporaryDirectory(prefix="reload-latency-", dir="/var/lib") as work:
        os.chmod(work, 0o755)  # the processes' uids read the server there
        server = Path(work, "echo.py")
        server.write_text(SERVER, encoding="utf-8")
        server.chmod(0o644)
        file = Path(work, "servers.toml")
        file.write_text(servers_file(server, uids, 60), encoding="utf-8")
        port = free_port()
        argv = [sys.executable, "-m", "mcp_sessions", "gateway", "--config", str(file), "--port", str(port)]
        log = Path(work, "gateway.log")
        with process([*argv, "--log-level", "info"], port, {"MCP_SESSIONS_SECRET": SECRET}, log) as gateway:
            http = httpx.Client(timeout=RELOAD_TIMEOUT)
            conversation = Conversation(http, f"http://127.0.0.1:{port}/servers/a/mcp")
            calls: list[tuple[float, float]] = []  # each call's start and end
            stop = threading.Event()

            def calling() -> None:
                while not stop.is_set():
                    started = time.perf_counter()
                    conversation.call()
                    calls.append((started, time.perf_counter()))

            caller = threading.Thread(target=calling)
            caller.start()
            windows: list[tuple[float, float]] = []
            try:
                for reload in range(reloads):
                    time.sleep(0.5)  # calls between reloads
                    file.write_text(servers_file(server, uids, 61 + reload), encoding="utf-8")
                    said = log.read_bytes().count(b"reloaded ")
                    started = time.perf_counter()
                    gateway.send_signal(signal.SIGHUP)
                    deadline = started + RELOAD_TIMEOUT
                    while log.read_bytes().count(b"reloaded ") == said:
                        if time.perf_counter() > deadline:
                            raise RuntimeError(f"no reload within {RELOAD_TIMEOUT:g} s: {log.read_text()[-2000:]}")
                        time.sleep(0.01)
                    windows.append((started, time.perf_counter()))
                time.sleep(0.5)
            finally:
                stop.set()
                caller.join()
                http.close()
    for started, ended in calls:
        during = any(started < end and ended > begin for begin, end in windows)
        latencies["during a reload" if during else "between reloads"].append((ended - started) * 1000)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reloads", type=int, default=20)
    parser.add_argument("--process-uids", default="60900-60949", help="a range no user of this host has")
    options = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("reload_latency: run as root (a uid per process, an egress table: what a reload does)")
    latencies = run(options.reloads, options.process_uids)
    print(f"{'calls':<24}{'count':>7}{'p50':>9}{'p99':>9}{'most':>9}")
    for name, values in latencies.items():
        if values:
            row = (statistics.median(values), percentile(values, 0.99), max(values))
            print(f"{name:<24}{len(values):>7}" + "".join(f"{value:>9.1f}" for value in row))


if __name__ == "__main__":
    main()
