"""The memory of a conversation's process, for the ecosystem's common stdio servers: what ``--max-processes``'
default is sized by (``_config.FOOTPRINT``).

Each server is started ``--processes`` times at once, as a gateway runs a process per conversation, over its own
stdio from this process (``bench_stdio.Direct``: JSON-RPC lines, as the gateway writes them): ``initialize`` and
``tools/list``, then each process's memory at rest; then a ``tools/call`` each, and its memory again. Memory is the
kernel's: ``VmRSS`` and ``VmHWM`` (its peak) of ``/proc/PID/status``, and ``Pss`` of ``/proc/PID/smaps_rollup``
(the pages it shares with its siblings divided among them: what one more costs the host), each summed over the
process and those it started (``npx`` runs ``npm exec``, which runs the server), the mean of the conversations, in
MiB. The Python server is ``bench_stdio``'s (the ``mcp`` SDK's ``MCPServer``, an ``echo`` tool).

    python benchmarks/process_memory.py               # 8 of each
    python benchmarks/process_memory.py --processes 20

The npm servers come from ``scripts/system-deps.sh`` (``.cache/memory``, ``.cache/filesystem``); node and npx from
the system. Measured here (node 20, Python 3.11, 8 of each), in MiB:

    server                      at rest: RSS    PSS  after a call: RSS    PSS  peak RSS
    server-memory (node)                67.8   32.2               67.8   32.3      67.9
    server-filesystem (node)            67.8   32.3               67.9   32.3      68.0
    server-memory (npx)                146.7   65.5              146.8   65.5     146.8
    mcp SDK server (python)             70.3   49.6               70.3   49.6      70.3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_stdio import SERVER, Direct

NPM = Path(__file__).resolve().parents[1] / ".cache"


def memory(pid: int) -> dict[str, float]:
    """RSS, its peak and PSS, in MiB, of process ``pid`` and every process it started (npx's ``npm exec`` runs the
    server as its child)."""
    kib = {"rss": 0, "peak": 0, "pss": 0}
    for each in tree(pid):
        status = dict(line.split(":", 1) for line in Path(f"/proc/{each}/status").read_text().splitlines())
        rollup = Path(f"/proc/{each}/smaps_rollup").read_text().splitlines()
        kib["pss"] += next(int(line.split()[1]) for line in rollup if line.startswith("Pss:"))
        kib["rss"] += int(status["VmRSS"].split()[0])
        kib["peak"] += int(status["VmHWM"].split()[0])
    return {name: value / 1024 for name, value in kib.items()}


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
    graph = NPM / "memory/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
    filesystem = NPM / "filesystem/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
    (scratch / "server.py").write_text(SERVER)
    (scratch / "notes.txt").write_text("a note\n" * 100)
    entity = {"name": "team", "entityType": "group", "observations": ["twenty users"]}
    return {
        "server-memory (node)": (
            ["node", str(graph)],
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
        os.environ["MEMORY_FILE_PATH"] = os.path.join(scratch, "memory.jsonl")  # server-memory's, not in its package
        os.chdir(NPM / "memory")  # where npx finds the package installed
        for name, (command, call) in servers(Path(scratch)).items():
            running = [Direct(command) for _ in range(args.processes)]
            try:
                for server in running:
                    server.ask("tools/list", {})
                rest = [memory(server.child.pid) for server in running]
                for server in running:
                    server.ask("tools/call", call)
                called = [memory(server.child.pid) for server in running]
            finally:
                for server in running:
                    server.close()
            print(
                f"{name:<26} {mean(rest, 'rss'):>13.1f} {mean(rest, 'pss'):>6.1f} {mean(called, 'rss'):>18.1f} "
                f"{mean(called, 'pss'):>6.1f} {mean(called, 'peak'):>9.1f}"
            )


if __name__ == "__main__":
    main()
