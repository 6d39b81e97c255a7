"""Servers on older mcp SDKs, each in an environment of its own (``make test-all`` builds them; ``MCP_SERVER_VENVS``
names them), started as subprocesses: ``_versioned_server.py`` behind the middleware, one ``count`` tool."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from _redis import end_process, missing
from _waits import until

MAIN = Path(__file__).resolve().parents[2]
SERVER = Path(__file__).with_name("_versioned_server.py")
VENVS = os.environ.get(
    "MCP_SERVER_VENVS", " ".join(f"{MAIN}/.venv-mcp{name}" for name in ("2-floor", "1-newest", "1-fastmcp2", "1-floor"))
).split()


@contextmanager
def versioned_server(venv: str, secret: str, kind: str) -> Iterator[str]:
    """``_versioned_server.py`` in ``venv`` (``kind``: ``sdk``, ``fastmcp``, ``fastmcp-stateless``): its base URL,
    the server killed when the block ends."""
    python = Path(venv) / "bin" / "python"
    if not python.exists():
        missing(f"{python} is missing: `make {venv}/.installed` builds that environment")
    with printed_port_server([python, SERVER, secret, kind]) as url:
        yield url


@contextmanager
def printed_port_server(command: list[str | Path]) -> Iterator[str]:
    """``command`` (a server that prints its port on one line once it listens) run from the checkout: its base URL,
    the server ended when the block ends."""
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: nobody reads stderr while the server runs
        # A group of its own, which end_process ends.
        process = subprocess.Popen(command, cwd=MAIN, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        try:
            yield f"http://127.0.0.1:{_listening_port(process, log)}"
        finally:
            end_process(process)
            assert process.stdout is not None
            process.stdout.close()


def _listening_port(process: subprocess.Popen[bytes], log: IO[bytes]) -> int:
    """The port the server printed, once it accepts connections (after its lifespan started)."""
    stdout = process.stdout
    assert stdout is not None
    port: int | None = None

    def listening() -> bool:
        nonlocal port
        if process.poll() is not None:
            raise RuntimeError(f"the server exited at start ({process.returncode}):\n{_tail(log)}")
        if port is None:
            if select.select([stdout], [], [], 0.1)[0] and (line := stdout.readline()):
                port = int(line)
            return False
        with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
        return False

    until(listening, lambda: f"the server did not listen:\n{_tail(log)}")
    assert port is not None
    return port


def _tail(log: IO[bytes]) -> str:
    """The end of what the server wrote so far."""
    log.seek(0)
    return log.read().decode(errors="replace")[-4000:]
