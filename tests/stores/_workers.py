"""Servers with several worker processes, for the tests: ``uvicorn --workers N`` and gunicorn, bounded in time."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx

from _mcp import ModernClient, tool_text
from _redis import end_process
from _waits import until
from conftest import SECRET
from e2e._replicas import MAIN, Replica


class Workers(Replica):
    """``uvicorn --workers N --factory workers_app:app`` (or gunicorn's forked workers): N processes behind one
    listening socket, started at once."""

    output_tail = 6000

    def __init__(self, count: int, environ: dict[str, str], *, gunicorn: bool = False) -> None:
        def command(app: str, port: int) -> list[str]:
            server = ["uvicorn", "--factory", app, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
            if gunicorn:
                server = ["gunicorn", f"{app}()", "--worker-class", "uvicorn.workers.UvicornWorker"]
                server += ["--bind", f"127.0.0.1:{port}"]
            return [sys.executable, "-m", *server, "--workers", str(count)]

        paths = [str(MAIN / "middleware"), str(MAIN), str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
        super().__init__("workers", {**environ, "PYTHONPATH": os.pathsep.join(paths)}, "workers_app:app", command)
        self.count = count
        self.spawn()

    def wait_ready(self) -> None:
        """Until the workers answer; returns once all ``count`` distinct pids have, or the deadline passes."""
        process = self.process
        assert process is not None
        seen: set[int] = set()

        def all_answered() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"uvicorn exited at start:\n{self.output()}")
            with contextlib.suppress(httpx.HTTPError), httpx.Client(timeout=5) as http:
                seen.add(self.pid_of(http))
            return len(seen) >= self.count

        until(all_answered, lambda: f"{len(seen)} of {self.count} workers answered")

    def pid_of(self, http: httpx.Client) -> int:
        """The worker at the other end of ``http``'s connection."""
        return int(tool_text(ModernClient(http, self.url).call_tool("pid")[1]))

    def stop(self) -> None:
        """End the processes; their output stays readable until :meth:`close`."""
        if self.process is not None:
            end_process(self.process)

    def close(self) -> None:
        super().stop()


@contextlib.contextmanager
def workers(count: int, environ: dict[str, str]) -> Iterator[Workers]:
    """Started, all ``count`` workers answering; stopped at the end of the block."""
    running = Workers(count, {"MCP_SESSIONS_SECRET": SECRET, **environ})
    try:
        running.wait_ready()
        yield running
    finally:
        running.close()
