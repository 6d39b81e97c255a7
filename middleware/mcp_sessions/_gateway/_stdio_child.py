"""One stdio MCP server process and the MCP client link to it: spawned, read with a bound, and stopped whole.

The child runs in a process group of its own (``start_new_session``), so that stopping it stops what it
started too: its stdin is closed, then the group gets SIGTERM, then SIGKILL. Its stdout is read a JSON-RPC
message per line, each line bounded (``max_line``, the gateway's ``max_response_size``): a longer line
ends the child, never a buffer without end. Its stderr goes to the gateway's log, a line at a time,
prefixed with the process's own id, with control characters escaped and at most ``MAX_LOG_LINE`` bytes of
a line; never to a client. The process's exit ends the child, even while a process it started holds its stdout. The
``mcp`` SDK's ``JSONRPCDispatcher`` does the JSON-RPC: ids, answers, progress, cancellation, and an error
for every request still waiting when the child's stdout ends.
"""

from __future__ import annotations

import ctypes
import logging
import os
import resource
import secrets
import shutil
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.shared.dispatcher import OnNotify, OnNotifyIntercept, OnRequest
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from .._version import __version__
from .._wire import printable
from .._wire.protocol import RATE_LIMITED

logger = logging.getLogger("mcp_sessions.gateway")

STDIN_GRACE: Final = 1.0
"""How long a child may take to exit by itself once its stdin is closed (the MCP stdio shutdown)."""
TERM_GRACE: Final = 2.0
"""How long a child's process group has between SIGTERM and SIGKILL."""
START_TIMEOUT: Final = 30.0
"""How long a child may take to answer ``initialize``."""
EXIT_DRAIN: Final = 0.5
"""How long a child's stdout is still read once its process has exited: a process it started may hold it open."""
MAX_LOG_LINE: Final = 4096
"""The most of one stderr line that reaches the log (the rest of a longer line is dropped)."""
WRITE_DEADLINE: Final = 10.0
"""How long a child may leave a line unread on its stdin: then it is stopped, as a crash."""
MAX_WAITING_WRITES: Final = 4
"""How many messages may wait to be written to a child's stdin; more get an error at once."""
_POLL: Final = 0.05
_PR_SET_DUMPABLE: Final = 4
_PR_SET_CHILD_SUBREAPER: Final = 36
_SPAWNING = anyio.Lock()  # one spawn at a time, with a cgroup or a subreaper: the command's gateway, one event loop
_OURS: set[int] = set()  # the processes the gateway started, running: its other children are orphans it adopted
stderr_logger = logging.getLogger("mcp_sessions.gateway.stderr")


def inherited(name: str) -> bool:
    """Whether the gateway's environment variable ``name`` reaches a child: not the sessions' configuration, nor the
    gateway's own telemetry credentials (the OTLP exporters' headers, certificates and client keys), nor its own
    ``MCP_SESSION_ID`` (a process gets its own id)."""
    secret = name.startswith("OTEL_EXPORTER_") and name.endswith(("HEADERS", "CERTIFICATE", "CLIENT_KEY"))
    return not secret and not name.startswith("MCP_SESSIONS_") and name != "MCP_SESSION_ID"


@dataclass(frozen=True)
class ProcessOptions:
    """How every child runs: as whom (``user``, ``group``: uid and gid, no supplementary group), with how much
    address space (``memory``, bytes), where (``cwd``, a directory per process, ``{id}`` in it), and contained
    how: a cgroup of its own inside ``cgroup`` (the gateway's), else by a child-subreaper gateway (``subreaper``),
    else only by its process group."""

    user: int | None = None
    group: int | None = None
    memory: int | None = None
    cwd: str | None = None
    cgroup: Path | None = None
    subreaper: bool = False

    @property
    def containment(self) -> str:
        if self.cgroup is not None:
            return f"a cgroup each, in {self.cgroup}"
        return "its process group, the gateway a child subreaper" if self.subreaper else "its process group only"


def contain(*, cgroups: bool = True) -> tuple[Path | None, bool]:
    """Make this process (the gateway) non-dumpable, so that no process of its user reads its ``/proc`` files (its
    environment, its memory); and choose the containment of its children: the gateway's own cgroup v2 when it may
    create cgroups there that have ``cgroup.kill`` (and ``cgroups``), else the gateway becomes a child subreaper."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    own = _own_cgroup() if cgroups else None
    if own is not None:
        probe = own / f"mcp-sessions-{os.getpid()}-probe"
        try:
            probe.mkdir()
            usable = (probe / "cgroup.kill").exists()
            probe.rmdir()
        except OSError:
            usable = False
        if usable:
            _end_stale(own)
            return own, False
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return None, False
    return None, True


def _end_stale(own: Path) -> None:
    """End the processes of gateways that died without ending them (SIGKILL, the OOM killer): each cgroup of theirs
    in ``own`` whose gateway's pid runs nothing, killed and removed."""
    for stale in own.glob("mcp-sessions-*-*"):
        if not Path("/proc", stale.name.split("-")[2]).exists():
            with suppress(OSError):
                (stale / "cgroup.kill").write_text("1")
                deadline = time.monotonic() + TERM_GRACE
                while "populated 1" in (stale / "cgroup.events").read_text() and time.monotonic() < deadline:
                    time.sleep(_POLL)
                stale.rmdir()


def _own_cgroup() -> Path | None:
    """This process's cgroup v2 directory: its ``0::`` line in ``/proc/self/cgroup``, under the cgroup2 mount."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    path = next((line[3:] for line in lines if line.startswith("0::")), None)
    for mount in mounts:
        fields, _, kind = mount.partition(" - ")
        if path is not None and kind.split(" ", 1)[0] == "cgroup2":
            root, point = fields.split()[3:5]
            if path == root or path.startswith(root.rstrip("/") + "/"):
                return Path(point) / path[len(root) :].lstrip("/")
    return None


class Child:
    """A stdio server process, started by :meth:`run` in a task group, and its ``initialize`` answer."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        label: str,
        environ: Mapping[str, str],
        max_line: int,
        on_request: OnRequest,
        on_notify: OnNotify,
        on_progress: OnNotifyIntercept,
        options: ProcessOptions | None = None,
    ) -> None:
        self.command, self.label, self.max_line = list(command), label, max_line
        self.environ = environ
        self.on_request, self.on_notify, self.on_progress = on_request, on_notify, on_progress
        self.options = options or ProcessOptions()
        self.ready = anyio.Event()  # initialized, or failed (then ``failure`` says why)
        self.done = anyio.Event()  # asked to stop, or its stdout ended
        self.reason: str | None = None  # why it was stopped: the first to stop it says
        self.failure: str | None = None
        self.initialized: types.InitializeResult | None = None
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.link: JSONRPCDispatcher[Any] | None = None
        self.last_words: str | None = None  # its last stderr line: why it failed to start, often
        self.stderr_ended = anyio.Event()

    def stop(self, reason: str = "stopped") -> None:
        """Ask the child to end (its :meth:`run` stops the process group); ``reason`` goes to the log."""
        self.reason = self.reason or reason
        self.done.set()

    async def run(self) -> None:
        """Start the process, initialize it, serve it until :meth:`stop` or its end, then stop its group."""
        options, cgroup, cwd = self.options, None, None
        try:
            if options.cwd is not None:
                process_id = self.environ.get("MCP_SESSION_ID") or f"shared-{secrets.token_hex(4)}"  # one at a time
                cwd = _workdir(options.cwd, process_id, options.user, options.group)
            if options.cgroup is not None:
                cgroup = options.cgroup / f"mcp-sessions-{os.getpid()}-{id(self):x}"
                cgroup.mkdir()
            async with _SPAWNING if options.cgroup or options.subreaper else nullcontext():  # no lock across loops
                with _standing_in(cgroup):
                    process = await anyio.open_process(
                        self.command,
                        env=self.environ,
                        cwd=cwd,
                        start_new_session=True,
                        user=options.user,
                        group=options.group,
                        extra_groups=None if options.user is None else [],
                    )
                _OURS.add(process.pid)
        except OSError as exc:
            self.failure = f"the server command could not be started: {exc.strerror or exc}"
            self.ready.set()
            self.done.set()
            _removed(cgroup, cwd)
            return
        self.pid = process.pid
        pipe = Pipe(self, process)
        self.link = link = JSONRPCDispatcher(pipe, pipe)
        try:
            if options.memory is not None:  # as it starts: each mapping past the bound fails from then on
                with suppress(ProcessLookupError):  # gone already: its end is noticed as any
                    resource.prlimit(process.pid, resource.RLIMIT_AS, (options.memory, options.memory))
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._log_stderr, process)
                tasks.start_soon(self._watch_exit, process)
                await tasks.start(link.run, self.on_request, self.on_notify, self.on_progress)
                await self._initialize(link)
                await self.done.wait()
                if self.failure is not None:  # its last words, which say why, read first
                    with anyio.move_on_after(EXIT_DRAIN):
                        await self.stderr_ended.wait()
                tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                self.exit_code = await stop_group(process, cgroup)
                _OURS.discard(process.pid)
                if options.subreaper:
                    await _end_orphans()
            _removed(cgroup, cwd)
            self.done.set()
            self.ready.set()
            logger.info(
                "%s: server process %d ended (%s; exit code %s)",
                self.label,
                process.pid,
                self.reason or "shutdown",
                self.exit_code,
            )

    async def _initialize(self, link: JSONRPCDispatcher[Any]) -> None:
        params = {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": {"sampling": {}, "elicitation": {}, "roots": {"listChanged": True}},
            "clientInfo": {"name": "mcp-sessions-gateway", "version": __version__},
        }
        try:
            with anyio.fail_after(START_TIMEOUT):
                answer = await link.send_raw_request("initialize", params, {"cancel_on_abandon": False})
            self.initialized = types.InitializeResult.model_validate(answer, by_name=False)
        except TimeoutError:
            self.failure = f"the server did not answer initialize within {START_TIMEOUT:g} s"
        except Exception as exc:  # an error answer, a closed stdout, an answer that is no InitializeResult
            self.failure = f"the server failed to initialize: {printable(str(exc))[:200]}"
        if self.failure is None:
            await link.notify("notifications/initialized", None)
        else:
            self.stop("it did not initialize")
        self.ready.set()

    async def _watch_exit(self, process: anyio.abc.Process) -> None:
        """The process's exit ends the child, its answers already written read first: a process it started may
        hold its stdout open, and requests in flight must not wait for that one."""
        await process.wait()
        with anyio.move_on_after(EXIT_DRAIN):
            await self.done.wait()  # its stdout's end
        self.stop("crash: it exited")

    async def _log_stderr(self, process: anyio.abc.Process) -> None:
        assert process.stderr is not None
        lines = BufferedByteReceiveStream(process.stderr)
        try:
            while True:
                try:
                    line, whole = await lines.receive_until(b"\n", self.max_line), True
                except anyio.DelimiterNotFound:
                    line, whole = await lines.receive(self.max_line), False  # a line without end: a piece at a time
                except (anyio.IncompleteRead, anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return
                line = line.rstrip(b"\r")
                if not whole or len(line) > MAX_LOG_LINE:
                    line = line[:MAX_LOG_LINE] + b" [cut]"
                text = printable(line.decode(errors="replace"))
                stderr_logger.info("%s: %s", self.label, text)
                self.last_words = text.strip() or self.last_words
        finally:
            self.stderr_ended.set()


class Pipe:
    """The child's stdin and stdout as its link's two streams: a message is written as a line where the link sends
    it, and the next line is read where the link receives, with no task in between.

    One line at a time is written, whole, within ``WRITE_DEADLINE``, or the child is stopped as a crash; the messages
    waiting for their turn (at most ``MAX_WAITING_WRITES``; a request beyond gets ``RATE_LIMITED`` at once) are their
    senders' own, so a
    request whose caller left is dropped before it is written. Each stdout line is bounded (``max_line``): a longer
    one ends the child. A line that is no JSON-RPC message is logged and skipped. At the end of stdout, or when stdin
    no longer takes a line, the child is stopped, and the link answers each request still waiting with an error at
    once.
    """

    def __init__(self, child: Child, process: anyio.abc.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.child, self.stdin, self.stdout = child, process.stdin, BufferedByteReceiveStream(process.stdout)
        self.writing, self.waiting = anyio.Lock(), 0

    async def send(self, message: SessionMessage) -> None:
        if self.waiting >= MAX_WAITING_WRITES:
            if isinstance(message.message, types.JSONRPCRequest):  # the client's: a limit that time lifts
                raise MCPError(RATE_LIMITED, "the server process is not reading its input; retry later")
            raise anyio.BrokenResourceError  # the link drops it: a notification, an answer to the process
        self.waiting += 1
        try:
            await self.writing.acquire()  # cancelled here (its caller left): never written
        finally:
            self.waiting -= 1
        try:
            line = message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
            with anyio.CancelScope(shield=True), anyio.move_on_after(WRITE_DEADLINE) as deadline:
                await self.stdin.send(line)  # a line begun is written whole, or the child stopped
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            self.child.stop("crash: its stdin was closed")
            raise anyio.BrokenResourceError from None
        finally:
            self.writing.release()
        if deadline.cancelled_caught:
            self.child.stop(f"crash: it left its stdin unread for {WRITE_DEADLINE:g} s")
            raise anyio.BrokenResourceError

    async def receive(self) -> SessionMessage:
        label, max_line = self.child.label, self.child.max_line
        while True:
            try:
                line = await self.stdout.receive_until(b"\n", max_line)
            except anyio.DelimiterNotFound:
                logger.error("%s: a stdout line longer than %d bytes; the server is stopped", label, max_line)
                self.child.stop("crash: a stdout line too long")
                break
            except (anyio.IncompleteRead, anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                break
            if not line.strip():
                continue
            try:
                return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
            except ValueError:
                text = printable(line[:200].decode(errors="replace"))
                logger.warning("%s: stdout: not a JSON-RPC message: %s", label, text)
        self.child.stop("crash: its stdout ended")
        raise anyio.EndOfStream

    def __aiter__(self) -> Pipe:
        return self

    async def __anext__(self) -> SessionMessage:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Nothing to do: the pipes close with the process (:func:`stop_group`)."""

    async def __aenter__(self) -> Pipe:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None


async def stop_group(process: anyio.abc.Process, cgroup: Path | None = None) -> int | None:
    """Stop a child and its process group (and its cgroup, every process in it): stdin closed, then SIGTERM, then
    SIGKILL; its exit code."""
    if process.stdin is not None:
        await process.stdin.aclose()
    await _exited(lambda: process.returncode is not None, STDIN_GRACE)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)  # the group outlives its leader while a process of the child's is in it
        except ProcessLookupError:
            if cgroup is None:
                break
        if cgroup is not None:
            _signal_cgroup(cgroup, sig)
        if await _exited(lambda: _group_gone(process, cgroup), TERM_GRACE):
            break
    with anyio.move_on_after(TERM_GRACE):  # a process that left the group may hold the pipes open
        await process.aclose()
    return process.returncode


def _group_gone(process: anyio.abc.Process, cgroup: Path | None) -> bool:
    if process.returncode is None:
        return False
    if cgroup is not None:
        with suppress(OSError):
            return "populated 0" in (cgroup / "cgroup.events").read_text().splitlines()
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return True
    return False


def _signal_cgroup(cgroup: Path, sig: int) -> None:
    """``sig`` to every process in ``cgroup``: SIGKILL by ``cgroup.kill`` (which no fork escapes), SIGTERM to each."""
    with suppress(OSError):
        if sig == signal.SIGKILL:
            (cgroup / "cgroup.kill").write_text("1")
            return
        for pid in (cgroup / "cgroup.procs").read_text().split():
            with suppress(ProcessLookupError):
                os.kill(int(pid), sig)


@contextmanager
def _standing_in(cgroup: Path | None) -> Iterator[None]:
    """The gateway in ``cgroup`` while a process forks from it, so the process starts in it, before it runs a line:
    then back in its own (a cgroup holds only the processes it contains, so this costs nothing in between)."""
    if cgroup is None:
        yield
        return
    (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    try:
        yield
    finally:
        (cgroup.parent / "cgroup.procs").write_text(str(os.getpid()))


async def _end_orphans() -> None:
    """Kill and reap the gateway's children it did not start: the orphans of its children's processes, which a child
    subreaper adopts (a daemon that double-forked). Again while killing one orphans more, for at most TERM_GRACE."""
    with anyio.move_on_after(TERM_GRACE):
        async with _SPAWNING:  # no process of the gateway's own is being started: each it started is in ``_OURS``
            while orphans := [pid for pid in _children(os.getpid()) if pid not in _OURS]:
                for pid in orphans:
                    with suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    with suppress(ChildProcessError):
                        os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG: it never blocks
                await anyio.sleep(_POLL)


def _children(parent: int) -> list[int]:
    """The pids of ``parent``'s children, read from ``/proc``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rpartition(")")[2].split()[1]) == parent:
                found.append(int(stat.parent.name))
    return found


def _workdir(template: str, process_id: str, user: int | None, group: int | None) -> str:
    """A new directory for a process: ``template`` with ``{id}``, the process's id (the gateway's hex, never a
    client's); owned by ``user``."""
    path = template.replace("{id}", process_id)
    os.makedirs(path, mode=0o700)
    if user is not None:
        os.chown(path, user, -1 if group is None else group)
    return path


def _removed(cgroup: Path | None, cwd: str | None) -> None:
    """A stopped child's cgroup and working directory, removed (``rmtree`` follows no link a process planted)."""
    if cgroup is not None:
        with suppress(OSError):
            cgroup.rmdir()
    if cwd is not None:
        shutil.rmtree(cwd, ignore_errors=True)


async def _exited(condition: Callable[[], bool], seconds: float) -> bool:
    """Whether ``condition`` holds within ``seconds`` (a process's end is polled: asyncio reaps it in time)."""
    with anyio.move_on_after(seconds):
        while not condition():  # noqa: ASYNC110 - no event says a process group is empty
            await anyio.sleep(_POLL)
        return True
    return False
