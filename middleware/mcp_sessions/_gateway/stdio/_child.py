"""One stdio MCP server process and the MCP client link to it: spawned, read with a bound, and stopped whole.

The child runs in a process group of its own (``start_new_session``), in the place its :class:`Sandbox`
makes (a uid, a PID namespace, control groups: ``_sandbox``): stopping it closes its stdin, then the group
gets SIGTERM, then SIGKILL (the SDK's ``terminate_posix_process_tree``), and what left the group ends with its
namespace, its uid or its control group.
Its stdout is read a JSON-RPC message per line, each line bounded (``max_line``, the gateway's
``max_response_size``): a longer line ends the child, never a buffer without end. Its stderr goes to the
gateway's log, a line at a time, prefixed with the process's own id, with control characters escaped and at
most ``MAX_LOG_LINE`` bytes of a line; never to a client. The process's exit ends the child, even while a
process it started holds its stdout. The ``mcp`` SDK's ``JSONRPCDispatcher`` does the JSON-RPC: ids,
answers, progress, cancellation, and an error for every request still waiting when the child's stdout ends.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.dispatcher import DispatchContext, OnNotify, OnNotifyIntercept, OnRequest
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage
from mcp_types import CONNECTION_CLOSED
from mcp_types.version import LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION

from ..._version import __version__
from ..._wire import printable
from ..._wire.protocol import RATE_LIMITED
from ..sealed._sandbox import Place, Sandbox, SandboxError, SandboxPolicy, UidsInUse, reap_adopted
from ._first import FirstProcess, NotStarted, spawn
from ._models import OVER, End, EndReason

logger = logging.getLogger("mcp_sessions.gateway")

STDIN_GRACE: Final = 1.0
"""How long a child may take to exit by itself once its stdin is closed (the MCP stdio shutdown)."""
TERM_GRACE: Final = 2.0
"""How long a child's process group has between SIGTERM and SIGKILL."""
START_TIMEOUT: Final = 30.0
"""How long a child may take to answer its first request (``initialize``); the gateway's start, its revision probe
and its shared child's ``initialize`` together."""
EXIT_DRAIN: Final = 0.5
"""How long a child's stdout is still read once its process has exited: a process it started may hold it open."""
MAX_LOG_LINE: Final = 4096
"""The most of one stderr line that reaches the log (the rest of a longer line is dropped)."""
WRITE_DEADLINE: Final = 10.0
"""How long a child may leave a line unread on its stdin: then it is stopped, as a crash."""
MAX_WAITING_BYTES: Final = 8 << 20
"""How much may wait to be written to a child's stdin: once this much waits, more gets an error at once. In bytes,
not lines: a burst of a conversation's small concurrent requests all waits its turn at once."""
_POLL: Final = 0.05
stderr_logger = logging.getLogger("mcp_sessions.gateway.stderr")
# How every child runs: the name the process table knows.
ProcessOptions = Sandbox
# What ends a stream of the child's: its end, or its closing.
_ENDED: Final = (anyio.IncompleteRead, anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError)


class ChildProcess(Protocol):
    """The seam between the process table and a server process: a :class:`Child` (which says what each member
    means), or a test's in memory. The table asks it five questions: :meth:`run` it, :meth:`stop` it with a reason,
    is it ``ready``, is it ``done``, and its ``end`` (set once, where it ends: why it failed to start, too,
    ``End.failure``)."""

    ready: anyio.Event
    done: anyio.Event
    end: End | None

    async def run(self) -> None: ...

    def stop(self, reason: EndReason, detail: str = "") -> None: ...

    # What else the gateway reads of it, each for one reader that has no other source:
    label: str  # its name in every log line about it, its own and the table's ("process <id>", "shared")
    pid: int | None  # the operator's view of it (ProcessView), which reads its memory from /proc
    link: JSONRPCDispatcher[Any] | None  # where a conversation's requests go: the relay's only way to it
    initialized: types.InitializeResult | None  # its initialize answer: what the gateway says it serves
    judged: anyio.Event  # its end's cause known (a bound is read once its group has stopped): a cut call's error
    revisions: list[str]  # the revision probe's answer (server/discover): --processes auto's choice
    last_words: str | None  # its last stderr line: the operator's (never a client's) reason a start failed
    stderr_ended: anyio.Event  # ... once read whole


class ChildFactory(Protocol):
    """What makes every process, the revision probe's too: :class:`Child` (which says what each argument means), or
    a test's."""

    def __call__(
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
        discover: bool = False,
        start_deadline: float | None = None,
        user: Sequence[str] | None = None,
        first: FirstProcess | None = None,
    ) -> ChildProcess: ...


async def _no_client(dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    raise MCPError(types.INVALID_REQUEST, "no client is here")


async def _ignored(dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> None:
    return None


def _taken(method: str, params: Mapping[str, Any] | None) -> bool:
    return True


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
        discover: bool = False,
        start_deadline: float | None = None,
        user: Sequence[str] | None = None,
        first: FirstProcess | None = None,
    ) -> None:
        self.command = list(command)
        self.user = user  # who she is, whose own directory it is given (Sandbox.enter); None: no one's
        self.first = first  # its place and process, started ahead as the gateway started (the shared one's)
        self.label = label
        self.max_line = max_line
        self.discover = discover  # only ask its revisions (server/discover), then end
        # The end of the gateway's start (anyio's clock) for the children it starts with, the probe and the shared
        # one: START_TIMEOUT for both together, not each. Else START_TIMEOUT from its first request.
        self.start_deadline = start_deadline
        self.environ = environ
        self.on_request = on_request
        self.on_notify = on_notify
        self.on_progress = on_progress
        self.options = options or ProcessOptions(SandboxPolicy())
        self.ready = anyio.Event()  # initialized, or failed (then ``failure`` says why)
        self.done = anyio.Event()  # asked to stop, or its stdout ended
        # How it ended, set here alone: by the first to stop it, or by the cause of its crash (a bound it reached,
        # its start failing), final once its group is stopped (``judged``).
        self.end: End | None = None
        self.judged = anyio.Event()
        self.initialized: types.InitializeResult | None = None
        self.revisions: list[str] = []  # what its server/discover answer lists (with ``discover``)
        self.pid: int | None = None  # its server's, inside the wrappers that start it: found once it answered
        self.exit_code: int | None = None
        self.link: JSONRPCDispatcher[Any] | None = None
        self.last_words: str | None = None  # its last stderr line: why it failed to start, often
        self.stderr_ended = anyio.Event()
        self._asking: anyio.CancelScope | None = None  # its first request, which its end ends

    def stop(self, reason: EndReason, detail: str = "") -> None:
        """Ask the child to end (its :meth:`run` stops the process group), for ``reason``: its :class:`End`, unless
        another stopped it first; ``detail``, where the reason's text does not say which (a crash)."""
        if self.end is None:
            self.end = End(reason, detail)
        self.done.set()
        if self._asking is not None:
            self._asking.cancel()

    async def run(self) -> None:
        """Start the process in its place (:class:`Sandbox`), initialize it, serve it until :meth:`stop` or its
        end; then stop its group, and leave its place once all it started has ended."""
        # The conversation's id, else a shared process's (one at a time).
        process_id = self.environ.get("MCP_SESSION_ID") or f"shared-{secrets.token_hex(4)}"
        try:
            if self.first is not None:  # started ahead, as the gateway started
                place, process = await self.first.taken()
            else:
                place, process = await spawn(self.options, self.command, self.environ, process_id, self.user)
        except UidsInUse as exc:  # a limit: its conversation is refused, with when to retry
            return self._failed(str(exc), EndReason.UIDS_IN_USE)
        except SandboxError as exc:
            return self._failed(str(exc))
        except NotStarted as exc:
            with anyio.CancelScope(shield=True):
                await self._leave(exc.place)
            return self._failed(f"the server command could not be started: {exc}")
        pipe = Pipe(self, process)
        self.link = link = JSONRPCDispatcher(pipe, pipe)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._log_stderr, process)
                tasks.start_soon(self._watch_exit, process)
                if place.cgroup is not None:
                    tasks.start_soon(self._watch_bounds, place)
                await tasks.start(link.run, self.on_request, self.on_notify, self.on_progress)
                if self.discover:
                    await self._discover(link)
                else:
                    await self._initialize(link)
                self.pid = server_of(process.pid)  # it answered: it runs (a few small reads of /proc)
                self.ready.set()
                await self.done.wait()
                if self.failure is not None:  # its last words, which say why, read first
                    with anyio.move_on_after(EXIT_DRAIN):
                        await self.stderr_ended.wait()
                tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self._stopped(process, place)
            self.end = self.end or End(EndReason.SHUTDOWN)  # cancelled: the gateway stops
            self.done.set()
            self.ready.set()
            logger.info(
                "%s: server process %d ended (%s; exit code %s)",
                self.label,
                self.pid or process.pid,
                self.end,
                self.exit_code,
            )

    async def _stopped(self, process: anyio.abc.Process, place: Place) -> None:
        """Stop its process group, say why it ended, and leave its place, even when stopping failed."""
        try:
            self.exit_code = await stop_group(process)
            exceeded = await anyio.to_thread.run_sync(place.exceeded)
            if exceeded is not None:
                self._caused(End(OVER[exceeded]))
            bounds = self.options.policy.bounds
            if exceeded is not None and self.end is not None and self.end.failure is not None and bounds is not None:
                # Its start ended by its bound ("Connection closed" at initialize): the gateway's last line says which.
                self.end = End(self.end.reason, f"{self.end}; {bounds.told(exceeded)}")
        except Exception:
            # This conversation's alone: the process table's task group, everyone's, must not end with it.
            logger.exception("%s: its process group could not be stopped", self.label)
        finally:
            self.judged.set()
        await self._leave(place)

    async def _leave(self, place: Place) -> None:
        """Leave its place; what is left of it, or an error there, is logged: this conversation's alone, never the
        process table's (its task group runs everyone's), and its uid is cleared again before it is given out."""
        if self.options.edge is not None:  # no tunnel of the proxy's is made as its uid from now on
            self.options.edge.masks.placed(self.environ, None)
        try:
            left = await place.leave()
        except Exception:
            logger.exception("%s: its place could not be left", self.label)
            return
        if left is not None:
            logger.warning("%s: %s; it is cleared again before its uid is given out", self.label, left)

    @property
    def failure(self) -> str | None:
        """Why it failed to start, if it never served."""
        return None if self.end is None else self.end.failure

    def _caused(self, end: End) -> None:
        """``end`` in place of the crash it caused, or of none: a bound reached, a start that failed is the cause."""
        if self.end is None or self.end.reason is EndReason.CRASH:
            self.end = end

    def _failed(self, failure: str, reason: EndReason = EndReason.FAILED) -> None:
        self.stop(reason, failure)
        self.judged.set()
        self.ready.set()

    async def _watch_bounds(self, place: Place) -> None:
        """End the child once its control group reached a bound (a fork refused, a process killed for memory)."""
        bound = await place.reached()
        if bound is None:  # it has no control group
            return
        logger.warning("%s: its conversation is %s: it ends", self.label, OVER[bound].text)
        if bound == "memory" and place.cgroup is not None:
            # At once, as the kernel's OOM killer ends a process: what pins memory past the bound (unread socket
            # buffers, which no OOM kill counts under cgroup v1) would pin more for stdin's and SIGTERM's graces.
            await anyio.to_thread.run_sync(place.cgroup.killed, 0)
        self.stop(OVER[bound])

    async def _initialize(self, link: JSONRPCDispatcher[Any]) -> None:
        params = {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": {"sampling": {}, "elicitation": {}, "roots": {"listChanged": True}},
            "clientInfo": {"name": "mcp-sessions-gateway", "version": __version__},
        }
        seconds, within = self._first_answer_within()
        failure = None
        try:
            answer = await self._first_answer(link, seconds, "initialize", params)
            self.initialized = types.InitializeResult.model_validate(answer, by_name=False)
        except TimeoutError:
            failure = f"the server did not answer initialize {within}"
        except Exception as exc:
            # An error answer, a closed stdout, an answer that is no InitializeResult.
            failure = f"the server failed to initialize: {printable(str(exc))[:200]}"
        if failure is None:
            await link.notify("notifications/initialized", None)
        else:
            self._caused(End(EndReason.NOT_INITIALIZED, failure))
            self.stop(EndReason.NOT_INITIALIZED, failure)

    async def _discover(self, link: JSONRPCDispatcher[Any]) -> None:
        """Ask the revisions it speaks, as its first request (which decides a connection's era), then end it: a
        server that answers ``server/discover`` with an error (or with no ``DiscoverResult``) speaks none but the
        handshake's; one that answers nothing in time, or ends, has ``failure``."""
        meta = {
            types.PROTOCOL_VERSION_META_KEY: LATEST_MODERN_VERSION,
            types.CLIENT_INFO_META_KEY: {"name": "mcp-sessions-gateway", "version": __version__},
            types.CLIENT_CAPABILITIES_META_KEY: {},
        }
        seconds, within = self._first_answer_within()
        failure = None
        try:
            answer = await self._first_answer(link, seconds, "server/discover", {"_meta": meta})
            discovered = types.DiscoverResult.model_validate(answer, by_name=False)
            self.revisions = discovered.supported_versions
        except TimeoutError:
            failure = f"the server did not answer server/discover, its first request, {within}"
        except Exception:
            # Its stdout's end (or its stdin's) stopped it, as a crash: not an answer.
            if self.done.is_set():
                failure = f"the server ended at its first request, server/discover ({self.end})"
            else:  # an error answer, or one that is no DiscoverResult: the handshake's revisions only
                logger.debug("%s: no server/discover answer", self.label, exc_info=True)
        if failure is not None:
            self._caused(End(EndReason.UNANSWERED, failure))
        self.stop(EndReason.ASKED if failure is None else EndReason.UNANSWERED, failure or "")

    async def _first_answer(
        self, link: JSONRPCDispatcher[Any], seconds: float, method: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        """Its first request's answer within ``seconds`` (else ``TimeoutError``); ``MCPError`` for an error answer,
        and for its end, even while a process it started holds its stdout (:meth:`_watch_exit`)."""
        with anyio.fail_after(seconds), anyio.CancelScope() as self._asking:
            if self.done.is_set():
                self._asking.cancel()
            return await link.send_raw_request(method, params, {"cancel_on_abandon": False})
        raise MCPError(CONNECTION_CLOSED, "Connection closed")

    def _first_answer_within(self) -> tuple[float, str]:
        """How long its first request may wait for its answer, and how to say it."""
        if self.start_deadline is None:
            return START_TIMEOUT, f"within {START_TIMEOUT:g} s"
        return max(self.start_deadline - anyio.current_time(), 0), f"within {START_TIMEOUT:g} s of the gateway's start"

    async def _watch_exit(self, process: anyio.abc.Process) -> None:
        """The process's exit ends the child, its answers already written read first: a process it started may
        hold its stdout open, and requests in flight must not wait for that one."""
        await process.wait()
        with anyio.move_on_after(EXIT_DRAIN):
            # Its stdout's end.
            await self.done.wait()
        self.stop(EndReason.CRASH, "crash: it exited")

    async def _log_stderr(self, process: anyio.abc.Process) -> None:
        assert process.stderr is not None
        lines = BufferedByteReceiveStream(process.stderr)
        try:
            while True:
                try:
                    line = await lines.receive_until(b"\n", self.max_line)
                    whole = True
                except anyio.DelimiterNotFound:
                    # A line without end: a piece at a time.
                    line = await lines.receive(self.max_line)
                    whole = False
                except _ENDED:
                    return
                line = line.rstrip(b"\r")
                if not whole or len(line) > MAX_LOG_LINE:
                    line = line[:MAX_LOG_LINE] + b" [cut]"
                text = printable(line.decode(errors="replace"))
                stderr_logger.info("%s: %s", self.label, text)
                self.last_words = text.strip() or self.last_words
        finally:
            self.stderr_ended.set()


class Pipe(anyio.abc.UnreliableObjectStream[SessionMessage]):
    """The child's stdin and stdout as its link's two streams: a message is written as a line where the link sends
    it, and the next line is read where the link receives, with no task in between.

    One line at a time is written, whole, within ``WRITE_DEADLINE``, or the child is stopped as a crash; the messages
    waiting for their turn (at most ``MAX_WAITING_BYTES``; a request beyond gets ``RATE_LIMITED`` at once) are their
    senders' own, so a request whose caller left is dropped before it is written. Each stdout line is bounded
    (``max_line``): a longer one ends the child. A line that is no JSON-RPC message is logged and skipped. At the end
    of stdout, or when stdin no longer takes a line, the child is stopped, and the link answers each request still
    waiting with an error at once. anyio's stream class gives it iteration and ``async with``.
    """

    def __init__(self, child: Child, process: anyio.abc.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.child = child
        self.stdin = process.stdin
        self.stdout = BufferedByteReceiveStream(process.stdout)
        self.writing = anyio.Lock(fast_acquire=True)  # a line none holds up is written at once, not a turn later
        self.waiting = 0

    async def send(self, message: SessionMessage) -> None:
        if self.waiting >= MAX_WAITING_BYTES:
            # A request is the client's: a limit that time lifts.
            if isinstance(message.message, types.JSONRPCRequest):
                raise MCPError(RATE_LIMITED, "the server process is not reading its input; retry later")
            # The link drops it: a notification, an answer to the process.
            raise anyio.BrokenResourceError
        body = message.message.model_dump_json(by_alias=True, exclude_unset=True)
        line = body.encode() + b"\n"
        self.waiting += len(line)
        try:
            # Cancelled here (its caller left): never written.
            await self.writing.acquire()
        finally:
            self.waiting -= len(line)
        try:
            # A line begun is written whole, or the child stopped.
            with anyio.CancelScope(shield=True), anyio.move_on_after(WRITE_DEADLINE) as deadline:
                await self.stdin.send(line)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            self.child.stop(EndReason.CRASH, "crash: its stdin was closed")
            raise anyio.BrokenResourceError from None
        finally:
            self.writing.release()
        if deadline.cancelled_caught:
            self.child.stop(EndReason.CRASH, f"crash: it left its stdin unread for {WRITE_DEADLINE:g} s")
            raise anyio.BrokenResourceError

    async def receive(self) -> SessionMessage:
        label = self.child.label
        max_line = self.child.max_line
        while True:
            try:
                line = await self.stdout.receive_until(b"\n", max_line)
            except anyio.DelimiterNotFound:
                logger.error("%s: a stdout line longer than %d bytes; the server is stopped", label, max_line)
                self.child.stop(EndReason.CRASH, "crash: a stdout line too long")
                break
            except _ENDED:
                break
            if not line.strip():
                continue
            try:
                parsed = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                return SessionMessage(parsed)
            except ValueError:
                text = printable(line[:200].decode(errors="replace"))
                logger.warning("%s: stdout: not a JSON-RPC message: %s", label, text)
        self.child.stop(EndReason.CRASH, "crash: its stdout ended")
        raise anyio.EndOfStream

    async def aclose(self) -> None:
        """Nothing to do: the pipes close with the process (:func:`stop_group`)."""


async def stop_group(process: anyio.abc.Process) -> int | None:
    """Stop a child and its process group, its exit code: its stdin closed (the MCP stdio shutdown), then the SDK's
    ``terminate_posix_process_tree`` (SIGTERM to the group, SIGKILL after ``TERM_GRACE``; its migration guide names
    it), meanwhile reaping what of the group the gateway adopted (:func:`reap_adopted`), without which the group
    lives on as a zombie. What left the group ends with its PID namespace, its uid or its control group:
    :meth:`Place.leave`."""
    if process.stdin is not None:
        await process.stdin.aclose()
    with anyio.move_on_after(STDIN_GRACE):
        # Polled, as the SDK does: asyncio's wait() also waits for the pipes a process it started holds.
        while process.returncode is None:  # noqa: ASYNC110
            await anyio.sleep(_POLL)
    async with anyio.create_task_group() as reaping:  # the group is gone once what it left the gateway is reaped
        reaping.start_soon(_reaping, process)
        await terminate_posix_process_tree(process, TERM_GRACE)
        reaping.cancel_scope.cancel()
    # A process that left the group may hold the pipes open.
    with anyio.move_on_after(TERM_GRACE):
        await process.aclose()
    return process.returncode


async def _reaping(process: anyio.abc.Process) -> None:
    """:func:`reap_adopted` for ``process``'s group, once its leader is reaped, until cancelled."""
    while True:
        if process.returncode is not None:
            reap_adopted(process.pid)
        await anyio.sleep(_POLL)


def server_of(pid: int) -> int:
    """The server inside the wrappers that start it in its place (:data:`WRAPPERS`), from the first of them: the
    pid an operator finds in ``ps`` and the status, and the log's end line names; ``pid`` where it is gone."""
    for _ in range(len(WRAPPERS) + 2):  # each wrapper once, bubblewrap twice, at the most
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            break
        if name not in WRAPPERS or not children:
            break
        pid = int(children[0])
    return pid


WRAPPERS: Final = frozenset({"bwrap", "unshare", "sh", "setpriv", "prlimit"})
"""The programs that start a server in its place (``_sandbox``): the status shows the server they run, not them."""
