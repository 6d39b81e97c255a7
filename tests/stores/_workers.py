"""Servers with several worker processes, for the tests: ``uvicorn --workers N`` and gunicorn, bounded in time."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx

from _mcp import ModernClient, tool_text
from _redis import end_process, free_port
from conftest import SECRET

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 30.0


class Workers:
    """``uvicorn --workers N --factory workers_app:app`` (or gunicorn's forked workers): N processes behind one
    listening socket."""

    def __init__(self, count: int, environ: dict[str, str], *, gunicorn: bool = False) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_SESSIONS_", "WORKERS_APP_"))}
        env.update(environ)
        paths = [str(ROOT / "middleware"), str(ROOT), str(Path(__file__).parent), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        self._log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        server = [
            *("uvicorn", "--factory", "workers_app:app", "--host", "127.0.0.1", "--port", str(self.port)),
            *("--log-level", "warning"),
        ]
        if gunicorn:
            server = ["gunicorn", "workers_app:app()", "--worker-class", "uvicorn.workers.UvicornWorker"]
            server += ["--bind", f"127.0.0.1:{self.port}"]
        self.process = subprocess.Popen(
            [sys.executable, "-m", *server, "--workers", str(count)],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, workers: int) -> None:
        """Until the workers answer; returns once ``workers`` distinct pids have, or the deadline passes."""
        deadline = time.monotonic() + START_TIMEOUT
        seen: set[int] = set()
        while len(seen) < workers:
            if self.process.poll() is not None:
                raise RuntimeError(f"uvicorn exited at start:\n{self.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(seen)} of {workers} workers answered within {START_TIMEOUT} s")
            with contextlib.suppress(httpx.HTTPError), httpx.Client(timeout=5) as http:
                seen.add(self.pid_of(http))
            time.sleep(0.05)

    def pid_of(self, http: httpx.Client) -> int:
        """The worker at the other end of ``http``'s connection."""
        return int(tool_text(ModernClient(http, self.url).call_tool("pid")[1]))

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-6000:]

    def stop(self) -> None:
        end_process(self.process)

    def close(self) -> None:
        self.stop()
        self._log.close()


@contextlib.contextmanager
def workers(count: int, environ: dict[str, str]) -> Iterator[Workers]:
    """Started, all ``count`` workers answering; stopped at the end of the block."""
    running = Workers(count, {"MCP_SESSIONS_SECRET": SECRET, **environ})
    try:
        running.wait_ready(count)
        yield running
    finally:
        running.close()
