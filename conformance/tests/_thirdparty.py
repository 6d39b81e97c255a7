"""Other people's servers, each installed from the package index in an environment of its own (``make test-all``
builds them; ``THIRDPARTY_SERVER_VENVS`` names them), started as processes on loopback; and the pack run against
them through its command line, as a user's CI runs it (never imported: the pack is a stranger to them too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _redis import missing
from e2e._versioned import printed_port_server

MAIN = Path(__file__).resolve().parents[2]
VENVS = os.environ.get("THIRDPARTY_SERVER_VENVS", f"{MAIN}/.venv-fast-agent {MAIN}/.venv-ag2").split()
PACK_TIMEOUT = 300.0


def venv_of(name: str) -> Path:
    """The environment of the server ``name`` (``fast-agent``, ``ag2``): a missing one skips, or fails under CI."""
    venv = next((Path(v) for v in VENVS if Path(v).name.endswith(f"-{name}")), MAIN / f".venv-{name}")
    if not (venv / "bin" / "python").exists():
        missing(f"{venv}/bin/python is missing: `make {venv}/.installed` builds that environment")
    return venv


@contextmanager
def thirdparty_server(venv: Path, *argv: str) -> Iterator[str]:
    """``venv``'s python running ``argv`` (a launcher that prints its port on one line): the base URL, the server
    ended when the block ends."""
    with printed_port_server([venv / "bin" / "python", *argv]) as url:
        yield url


@dataclass(frozen=True)
class CommandRun:
    """``mcp-sessions conformance``'s exit status, what it printed, and the checks of every checks.json it wrote."""

    code: int
    out: str
    checks: list[dict[str, Any]]

    def statuses(self) -> dict[str, str]:
        """Each check id's status (a check of several cases has one entry a case: the worst of them)."""
        order = ["SUCCESS", "SKIPPED", "WARNING", "FAILURE"]
        found: dict[str, str] = {}
        for check in self.checks:
            found[check["id"]] = max(found.get(check["id"], "SUCCESS"), check["status"], key=order.index)
        return found


def conformance(url: str, *args: str) -> CommandRun:
    """``python -m mcp_sessions conformance URL ARGS --json DIR`` in a process of its own."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "mcp_sessions", "conformance", url, *args, "--json", folder]
        done = subprocess.run(command, capture_output=True, text=True, timeout=PACK_TIMEOUT, check=False)
        checks = [c for path in sorted(Path(folder).glob("*/checks.json")) for c in json.loads(path.read_text())]
    assert done.stderr == "", done.stderr
    return CommandRun(done.returncode, done.stdout, checks)
