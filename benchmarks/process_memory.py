"""The memory of a conversation's process, for the ecosystem's common stdio servers: what ``--max-processes``'
default is sized by (``_config.FOOTPRINT``).

Each server is started ``--processes`` times at once, as a gateway runs a process per conversation, over its own
stdio from this process (JSON-RPC lines, as the gateway writes them): ``initialize`` and ``tools/list``, then each
process's memory at rest; then a ``tools/call`` each, and its memory again. Memory is the kernel's: ``VmRSS`` and
``VmHWM`` (its peak) of ``/proc/PID/status``, and ``Pss`` of ``/proc/PID/smaps_rollup`` (the pages it shares with
its siblings divided among them: what one more costs the host), the mean of the processes, in MiB.

    python benchmarks/process_memory.py               # 8 of each
    python benchmarks/process_memory.py --processes 20

The npm servers come from ``scripts/system-deps.sh`` (``.cache/memory``, ``.cache/filesystem``); node from the
system.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NPM = ROOT / ".cache"
PYTHON_SERVER = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("echo")

@server.tool()
def echo(message: str) -> str:
    return message

server.run()
"""
VERSION = "2025-11-25"


class Server:
    """One process of a stdio server, spoken to over its own stdio."""

    def __init__(self, command: list[str], environ: dict[str, str]) -> None:
        pipe = subprocess.PIPE
        self.child = subprocess.Popen(
            command, stdin=pipe, stdout=pipe, stderr=subprocess.DEVNULL, env=environ, cwd=NPM / "memory"
        )
        self.id = 0
        client = {"name": "process-memory", "version": "1"}
        self.ask("initialize", {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": client})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.ask("tools/list", {})

    def send(self, message: dict[str, Any]) -> None:
        assert self.child.stdin is not None
        self.child.stdin.write(json.dumps(message).encode() + b"\n")
        self.child.stdin.flush()

    def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.id += 1
        self.send({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        assert self.child.stdout is not None
        for _ in range(1000):  # notifications aside, it answers
            line = self.child.stdout.readline()
            if not line:
                raise RuntimeError(f"the server ended before it answered {method}")
            message = json.loads(line)
            if message.get("id") == self.id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result
        raise RuntimeError(f"no answer to {method}")

    def memory(self) -> dict[str, float]:
        """RSS, its peak and PSS, in MiB, of the process and every process it started (npx's ``npm exec`` runs the
        server as its child)."""
        kib = {"rss": 0, "peak": 0, "pss": 0}
        for pid in tree(self.child.pid):
            status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
            kib["pss"] += next(int(line.split()[1]) for line in rollup if line.startswith("Pss:"))
            kib["rss"] += int(status["VmRSS"].split()[0])
            kib["peak"] += int(status["VmHWM"].split()[0])
        return {name: value / 1024 for name, value in kib.items()}

    def close(self) -> None:
        assert self.child.stdin is not None
        self.child.stdin.close()
        try:
            self.child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``/proc/PID/task/TID/children``)."""
    found, at = [pid], 0
    while at < len(found):  # a process tree is finite: each pid once
        for task in Path(f"/proc/{found[at]}/task").iterdir():
            found += [int(child) for child in (task / "children").read_text().split()]
        at += 1
    return found


def servers(scratch: Path) -> dict[str, tuple[list[str], dict[str, Any]]]:
    """Each server's command and the call it is measured under."""
    memory = NPM / "memory/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
    filesystem = NPM / "filesystem/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
    (scratch / "server.py").write_text(PYTHON_SERVER)
    (scratch / "notes.txt").write_text("a note\n" * 100)
    entity = {"name": "team", "entityType": "group", "observations": ["twenty users"]}
    return {
        "server-memory (node)": (
            ["node", str(memory)],
            {"name": "create_entities", "arguments": {"entities": [entity]}},
        ),
        "server-filesystem (node)": (
            ["node", str(filesystem), str(scratch)],
            {"name": "read_text_file", "arguments": {"path": str(scratch / "notes.txt")}},
        ),
        "server-memory (npx)": (
            ["npx", "--offline", "@modelcontextprotocol/server-memory"],  # its package's, from its directory
            {"name": "create_entities", "arguments": {"entities": [entity]}},
        ),
        "mcp SDK server (python)": (
            [sys.executable, str(scratch / "server.py")],
            {"name": "echo", "arguments": {"message": "hi"}},
        ),
    }


def mean(rows: list[dict[str, float]], name: str) -> float:
    return statistics.fmean(row[name] for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=8, help="processes of each server at once (default 8)")
    args = parser.parse_args()
    print(f"{'server':<26} {'at rest: RSS':>13} {'PSS':>6} {'after a call: RSS':>18} {'PSS':>6} {'peak RSS':>9}  (MiB)")
    with tempfile.TemporaryDirectory() as scratch:
        environ = {**os.environ, "MEMORY_FILE_PATH": os.path.join(scratch, "memory.jsonl")}  # not in its package
        for name, (command, call) in servers(Path(scratch)).items():
            running = [Server(command, environ) for _ in range(args.processes)]
            try:
                rest = [server.memory() for server in running]
                for server in running:
                    server.ask("tools/call", call)
                called = [server.memory() for server in running]
            finally:
                for server in running:
                    server.close()
            print(
                f"{name:<26} {mean(rest, 'rss'):>13.1f} {mean(rest, 'pss'):>6.1f} {mean(called, 'rss'):>18.1f} "
                f"{mean(called, 'pss'):>6.1f} {mean(called, 'peak'):>9.1f}"
            )


if __name__ == "__main__":
    main()
