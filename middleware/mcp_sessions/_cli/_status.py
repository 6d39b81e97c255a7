"""``mcp-sessions gateway status URL``: the operator's view of a ``gateway --stdio``'s processes.

URL is the gateway's ``--status-port`` (``http://127.0.0.1:PORT``), served on the loopback address alone: every
live process (its kind, whose, a digest of its conversation, age, idle time, memory, requests served), then each
user's processes and everyone's against the limits.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any, Final, TextIO

from . import EXIT_OK
from ._sessions import cell, fetched, table

DESCRIPTION: Final = (
    "Show what a gateway --stdio runs, from its --status-port: each process, and each user's against the limits. "
    "Exit status: 0 shown, 1 unreachable or refused, 2 usage error."
)
COLUMNS: Final = ("kind", "principal", "conversation", "pid", "age", "idle", "memory", "requests")


def add_arguments(status: argparse.ArgumentParser) -> None:
    """The arguments of ``gateway status``."""
    status.add_argument("url", help="the gateway's status port, e.g. http://127.0.0.1:8001")
    status.add_argument("--json", action="store_true", help="print the gateway's answer as JSON")


def run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO, environ: Mapping[str, str]) -> int:
    """Run ``gateway status``; returns the exit status."""
    url = args.url.rstrip("/")
    answer = fetched("GET", url if url.endswith("/status") else url + "/status")
    if args.json:
        stdout.write(json.dumps(answer, indent=2) + "\n")
        return EXIT_OK
    rows = [[_shown(column, process.get(column)) for column in COLUMNS] for process in answer.get("processes", [])]
    stdout.write(table([column.upper() for column in COLUMNS], rows))
    total = answer.get("total", {})
    stdout.write(f"\nprocesses: {cell(total.get('processes'))} of {cell(total.get('limit'))} (--max-processes)\n")
    for user in answer.get("users", []):
        said = f"{cell(user.get('processes'))} of {cell(user.get('limit'))} (--max-processes-per-principal)"
        stdout.write(f"  {cell(user.get('principal'))}: {said}\n")
    return EXIT_OK


def _shown(column: str, value: Any) -> str:
    if column == "memory" and isinstance(value, int):
        return f"{value / (1 << 20):.1f} MiB"
    if column in ("age", "idle") and isinstance(value, int | float):
        return f"{value:.0f} s"
    return cell(value)
