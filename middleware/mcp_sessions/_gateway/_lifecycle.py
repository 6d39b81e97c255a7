"""The gateway's life, from its start to its end, in one class: :class:`Gateway`, uvicorn's ``Server`` with the
gateway's named startup and shutdown steps, as uvicorn's own has ``startup``, ``main_loop`` and ``shutdown``; and
:func:`serve`, which runs it. It imports uvicorn, and so is imported by ``_cli.run`` alone, once the gateway is built.

A stop of a started gateway (SIGTERM, the first Ctrl-C) drains it first, as Envoy and Kubernetes drain a replica: it
keeps listening, ``GET /readyz`` answers 503, a request that would open a conversation, or a stream (which would hold
the stop), gets 503 with ``Retry-After`` (``-32014``: a retry reaches the next gateway), every answer closes its
connection (none is left idle for a client to reuse as the listener closes), and every call in flight (a request other
than a ``GET`` stream or a ``subscriptions/listen``) may end, for ``--shutdown-timeout`` at most. A conversation's next
call is served until every call that was in flight at the signal is answered; from then ``--stdio``'s table refuses a
new request as it would a new conversation (``REFUSING``), so the calls in flight only end, and conversations that call
back to back do not hold the drain to its bound. Then the streams are ended and uvicorn stops: it closes the listener
and waits for a call that came meanwhile for what is left of the bound. A call past the bound is told that it may have
run (``-32603``, ``_drain.cut``; 502 where its answer has not started), never uvicorn's 500, nor a 503 with
``Retry-After``, which a client or a front would send again. A second Ctrl-C (or SIGTERM) ends the drain at once, its
calls told so.

A gateway whose listening socket outlives it (systemd's, under socket activation; or handed to the next gateway,
``--handover``) stops accepting at the signal instead: a new connection waits in the socket's queue for the next
gateway, where it would be refused, and the drain ends the calls of the connections it has. With ``--handover`` the
next gateway takes the socket over a Unix socket (``SCM_RIGHTS``, as HAProxy's seamless reload does: the same socket,
so that no connection queued in it is lost, where two sockets bound with ``SO_REUSEPORT`` reset the connections
queued in the one that closes) and tells this one once it listens, which then drains as at SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import FrameType
from typing import Any, Final, TextIO

import anyio
import anyio.lowlevel
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._asgi import header
from .._wire import jsonrpc
from .._wire.protocol import (
    MCP_METHOD_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    MCP_SESSION_ID_HEADER,
    UPSTREAM_UNAVAILABLE,
)
from ..profiles import Era
from ._config import GatewayConfig
from ._drain import REFUSED, cut, is_call
from ._front import startup_failure
from ._serving import (
    DRAINING,
    EXIT_USAGE,
    REFUSING,
    RETRY_AFTER,
    STOPPING,
    Listener,
    StartSignals,
    bind,
    handing,
    private_socket,
)
from .stdio._first import Ahead

logger = logging.getLogger("mcp_sessions.gateway")

STARTUP_FAILURE: Final = 3
"""uvicorn's exit status for an app that failed to start in another way (a bug: its traceback is logged)."""
_PROBES: Final = {"/healthz", "/readyz"}


def serve(
    app: ASGIApp | Ahead,
    bound: Listener,
    config: GatewayConfig,
    stderr: TextIO,
    reload: Callable[[], Awaitable[GatewayConfig | None]] | None = None,
    release: Callable[[], None] | None = None,
    start: StartSignals | None = None,
) -> int:
    """Serve ``app`` with uvicorn on ``bound`` (``_serving.listener``'s) as ``config`` says, until stopped; the exit
    status (:class:`Gateway` says how it starts, drains and stops, and what a signal does in each). ``reload``: what
    SIGHUP does (``_cli.Reload``, with ``--config``), the gateway's configuration then (``None``: unchanged).
    ``release``: what the app's processes ran in, let go once they have all ended (``_cli``'s: every server's
    sandbox, ``_sandbox.Sandbox.close``). ``start``: the signals that came while the gateway was built, each taken
    as one during its start. ``app`` may be built as the gateway starts (``_first.Ahead``: a ``--stdio`` gateway's,
    its shared process started beside)."""
    return Gateway(app, config, reload, release, start).run_until_stopped(bound, stderr)


class Gateway(uvicorn.Server):
    """The gateway serving ``app`` as ``config`` says, from its start to its end (:meth:`run_until_stopped`).

    **Startup**: ``_listeners`` (the operator's status port and Unix socket beside the gateway's bound socket: one
    refused is one line and exit status 2, before anything starts); uvicorn's ``startup``, which starts the app
    (``_lifespan``: with ``--stdio``, the app's own start, ``StdioServer._running``, runs its first process), a
    failure to start (``StartupFailed``) held and said in one line, exit status 2, never uvicorn's traceback; then
    it listens. **Main loop**: until a signal, and then until the drain has ended (:meth:`main_loop`).
    **Shutdown**: ``_drain`` (see the module), :meth:`shutdown` (uvicorn's: the listener closed, the calls left
    waited for what is left of the bound, then the app's lifespan ended: every process stopped), ``_gone`` (the
    status socket's file and the processes' egress rules removed), and the signal that stopped it raised again
    (:meth:`capture_signals`): SIGTERM ends the process by it, Ctrl-C with exit status 0.

    It drives uvicorn through what uvicorn lets a subclass override (``handle_exit``, ``capture_signals``,
    ``main_loop``, ``shutdown``) and reads its ``server_state``; it writes neither uvicorn's configuration nor its
    private attributes, and it sets uvicorn's ``should_exit`` only before the app has started: sse-starlette, whose
    event streams carry the ``mcp`` SDK's answers, ends every stream of the process once that is set (it finds the
    server by its SIGTERM handler), the answer of a call that came as the drain ended among them (told ``-32014``
    in a 200), and turning that off is a setting of the whole process; the drain ends the streams itself.

    What a signal does (:meth:`handle_exit`), whichever it is, SIGTERM or SIGINT (Ctrl-C):

    - **during the start** (while the gateway is built, which ``StartSignals`` notes, or before the app has
      started: its first process not answering yet, which uvicorn would wait for, deaf to signals): the start is
      ended (``_stop_starting`` cancels the lifespan's start, whose processes are stopped), nothing is said of a
      failure, the rules are removed, and the gateway exits with status 0, never having listened (a start that
      ends as the signal comes is stopped at once, as uvicorn stops, its processes stopped, and exits 0 too: a
      signal of the start is never raised again);
    - **during the drain** (the second signal): the drain ends at once: every call still in flight is cancelled and
      told ``-32014`` (503 where its answer has not started), the streams are ended, and uvicorn stops, its shutdown
      steps as above;
    - **a second Ctrl-C**: the same as a second SIGTERM (uvicorn's own force quit, which would skip the app's
      shutdown and leave its processes running, is never used); a third signal changes nothing more.

    With ``reload`` (``--config``), SIGHUP, once started and until a stop, runs it (one at a time, in the order
    they came), and the configuration it returns is the gateway's from then on (whose tables ``_gone`` removes);
    before the start, or while it drains, SIGHUP is said and changes nothing. Without it, SIGHUP ends the gateway,
    as the system's default does.
    """

    def __init__(
        self,
        app: ASGIApp | Ahead,
        config: GatewayConfig,
        reload: Callable[[], Awaitable[GatewayConfig | None]] | None = None,
        release: Callable[[], None] | None = None,
        start: StartSignals | None = None,
    ) -> None:
        # The upstream's own Date and Server go to the client, as any proxy's do. The app itself reads the forwarded
        # headers of the proxies --forwarded-allow-ips trusts (uvicorn's own would hide the peer from it). h11, the
        # parser the gateway's request checks are tested with, whatever else is installed. Each request in a context
        # of its own: else a request that arrives on a keep-alive connection before the last answer's end is started
        # in the previous request's context (python/cpython#140947), with its conversation (current_conversation).
        listening = config.listening
        super().__init__(
            uvicorn.Config(
                self._asgi,
                interface="asgi3",  # a bound method: uvicorn would take it for ASGI 2
                host=listening.host,
                port=listening.port,
                log_level=listening.log_level,
                log_config=None,  # the gateway's own (_logs), set up once by _cli.run
                lifespan="on",
                http="h11",
                server_header=False,
                date_header=False,
                proxy_headers=False,
                # uvicorn waits a float as well
                timeout_graceful_shutdown=listening.shutdown_timeout,  # type: ignore[arg-type]
                reset_contextvars=True,
            )
        )
        self._ahead = app if isinstance(app, Ahead) else None  # built by _built, as it starts
        self.app: ASGIApp = _unbuilt if isinstance(app, Ahead) else app
        self.gateway = config
        self.failure: BaseException | None = None  # the app's failure to start, said in one line
        self.stopped = False  # its start ended by a signal
        self._stop_asked = False
        self._signals: list[int] = []  # raised again once stopped, as uvicorn raises those it caught
        self._starting: anyio.CancelScope | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.calls: set[asyncio.Task[Any]] = set()  # in flight: every request but a stream that waits for events
        self._signalled: set[asyncio.Task[Any]] = set()  # those in flight at the drain's signal, until answered
        self._refusing = False
        self._drained = self._hurried = False
        self._drain_ends = asyncio.Event()  # set once no call is in flight, or by a second signal
        self._drain_ended = asyncio.Event()  # set once it has: the main loop's end
        self._bound: float | None = None  # the loop's time at which the drain's bound (--shutdown-timeout) ends
        self._draining: asyncio.Task[None] | None = None
        self._status_socket: str | None = None  # its file, once bound, removed by _gone
        self._reload = reload
        self._release = release
        self._start = start or StartSignals()
        self._reloads: list[asyncio.Task[None]] = []  # SIGHUP's, run one at a time
        self._listener: Listener | None = None
        self._shared = False  # its listening socket held by another process too (systemd, the next gateway)
        self._hands: socket.socket | None = None  # --handover's, until it drains
        self._handover: asyncio.Task[None] | None = None
        self._put: tuple[str, os.stat_result] | None = None  # --handover's file, once this gateway's

    def run_until_stopped(self, bound: Listener, stderr: TextIO) -> int:
        """Serve on ``bound`` (``_serving.listener``'s) and the status sockets until stopped; the exit status. uvicorn's
        lines go through the gateway's logging (``_logs``), but for those :meth:`said_once` and :meth:`planned` drop
        or lower while it serves."""
        errors = logging.getLogger("uvicorn.error")
        errors.addFilter(self.said_once)
        errors.addFilter(self.planned)
        try:
            return self._run(bound, stderr)
        finally:
            errors.removeFilter(self.planned)
            errors.removeFilter(self.said_once)
            self._gone()  # also where uvicorn never ran (a status socket refused)

    def _run(self, bound: Listener, stderr: TextIO) -> int:
        self._listener = bound
        self._shared = bound.shared
        try:
            sockets = [bound.listening, *self._listeners()]
        except ValueError as exc:
            print(f"mcp-sessions gateway: {exc}", file=stderr)
            return EXIT_USAGE
        try:
            self.run(sockets=sockets)
        except KeyboardInterrupt:  # Ctrl-C, raised again once stopped: ended quietly, as uvicorn's own command ends
            pass  # (exit status 0)
        except SystemExit:  # uvicorn's, for an app that did not start
            if self.stopped:  # a signal while it started: stopped, as asked
                return 0
            if self.failure is None:
                raise
        if self.failure is not None:
            print(f"mcp-sessions gateway: {self.failure}", file=stderr)
            return EXIT_USAGE
        return 0 if self.started or self.stopped else STARTUP_FAILURE

    def _listeners(self) -> list[socket.socket]:
        """Startup: the operator's sockets: its port, on loopback only whatever ``--host`` is, and its Unix socket,
        in a directory of the gateway's user alone; ``ValueError`` saying why one cannot be had."""
        listening = self.gateway.listening
        status = []
        if listening.status_port is not None:
            status.append(bind("127.0.0.1", listening.status_port, "--status-port {port}"))
            logger.info(
                "mcp-sessions gateway: the processes' status on http://127.0.0.1:%d/status", listening.status_port
            )
        if listening.status_socket is not None:
            status.append(private_socket(listening.status_socket))
            self._status_socket = listening.status_socket
            logger.info("mcp-sessions gateway: the processes' status on the Unix socket %s", listening.status_socket)
        if listening.handover is not None:
            self._hands = handing(listening.handover)
        return status

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """A signal, as the class says: before the app has started, the start ended (exit status 0: never raised
        again); then the drain, or its end."""
        if not self.started:  # uvicorn's own stop, never its force quit; a first process that never answers keeps
            self.should_exit = True  # no one waiting
            return self._stop_starting()
        self._signals.append(sig)
        assert self._loop is not None
        if self._stop_asked:
            self._hurried = True
            self._loop.call_soon_threadsafe(self._drain_ends.set)
            return None
        self._stop_asked = True
        # a signal comes in whichever task runs, a server's request's among them: the drain is the whole gateway's,
        # in a context of its own (its lines name no server, ``_logs``)
        self._loop.call_soon_threadsafe(self._begin_drain, context=contextvars.Context())
        return None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's, its handler :meth:`handle_exit`; once uvicorn has stopped, the shutdown's last step,
        ``_gone``; then, uvicorn's handlers and the system's given back (``StartSignals.restore``), the signals that
        stopped a started gateway raised again, the last first, as uvicorn raises those it caught (SIGTERM ends the
        process by it, Ctrl-C raises ``KeyboardInterrupt``). A signal noted while the gateway was built is taken
        first."""
        with super().capture_signals():
            for sig in self._start.signals:  # while the gateway was built: its start is ended before it begins
                self.handle_exit(sig, None)
            hangup = None if self._reload is None else signal.signal(signal.SIGHUP, self._hangup)
            try:
                yield
            finally:
                if hangup is not None:
                    signal.signal(signal.SIGHUP, hangup)
                self._gone()
        self._start.restore()
        for sig in reversed(self._signals):
            signal.raise_signal(sig)

    def _hangup(self, sig: int, frame: FrameType | None) -> None:
        """SIGHUP, with ``reload``: the reload run once the ones before it have ended (see the class)."""
        if not self.started or self._stop_asked or self._loop is None:
            logger.warning("mcp-sessions gateway: SIGHUP: no reload while the gateway starts or stops")
            return None
        self._loop.call_soon_threadsafe(self._begin_reload, context=contextvars.Context())  # as the drain's
        return None

    def _begin_reload(self) -> None:
        before = self._reloads[-1] if self._reloads else None
        self._reloads.append(asyncio.get_running_loop().create_task(self._reloaded(before)))

    async def _reloaded(self, before: asyncio.Task[None] | None) -> None:
        assert self._reload is not None
        try:
            if before is not None:
                await asyncio.wait([before])
            if not self._stop_asked and (config := await self._reload()) is not None:
                self.gateway = config
        finally:
            self._reloads.remove(asyncio.current_task())  # type: ignore[arg-type]

    async def main_loop(self) -> None:
        """Until the drain has ended (``should_exit`` is set only before the app has started: then not at all).
        uvicorn's woke ten times a second to read its flags and write its Date and Server headers (``on_tick``),
        which the gateway leaves to the upstream: 0.5 ms of CPU a second of an idle gateway's, for nothing."""
        if not self.should_exit:
            self._listening()
            await self._drain_ended.wait()

    def _listening(self) -> None:
        """Once it listens: the gateway it took its socket from told so (it drains), and with ``--handover`` its own
        Unix socket put at ``PATH`` for the next gateway, which it serves until it drains."""
        assert self._listener is not None
        if (predecessor := self._listener.predecessor) is not None:
            with contextlib.suppress(OSError), predecessor:
                predecessor.send(b"1")
        if self._hands is not None and (path := self.gateway.listening.handover) is not None:
            os.replace(self._hands.getsockname(), path)
            self._put = (path, os.stat(path))
            self._handover = asyncio.get_running_loop().create_task(self._hand_over(self._hands))

    async def _hand_over(self, hands: socket.socket) -> None:
        """``--handover``: the listening socket sent to each gateway that asks, one at a time (SCM_RIGHTS, as
        HAProxy's seamless reload sends its listeners); once one says it listens, this one drains, as at SIGTERM
        (its exit status 0). One that ends first never listened: the socket is this gateway's alone again."""
        assert self._listener is not None
        loop = asyncio.get_running_loop()
        while True:
            asking, _ = await loop.sock_accept(hands)
            told = False
            with asking, contextlib.suppress(OSError):
                socket.send_fds(asking, [b"0"], [self._listener.listening.fileno()])
                self._shared = True
                told = await loop.sock_recv(asking, 1) == b"1"
            self._shared = told
            if told:
                logger.info("mcp-sessions gateway: the gateway started with --handover listens on its socket")
                self._stop_asked = True
                return self._begin_drain()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's, the calls that came as the drain ended told so once its bound has passed. uvicorn's own
        bound, ``--shutdown-timeout`` from here, is only a last resort, for a call that outlives its cancellation."""
        loop = asyncio.get_running_loop()
        bounded = loop.call_at(self._bound, self._end, True) if self._bound is not None else None
        try:
            await super().shutdown(sockets)
        finally:
            if bounded is not None:
                bounded.cancel()

    def _hand_no_more(self) -> None:
        """``--handover``'s socket closed, and its file removed unless the next gateway's is there now."""
        if self._handover is not None:
            self._handover.cancel()
        hands, self._hands = self._hands, None
        if hands is None:
            return
        with contextlib.suppress(OSError):
            if self._put is None:
                os.unlink(hands.getsockname())
            elif os.path.samestat(os.stat(self._put[0]), self._put[1]):
                os.unlink(self._put[0])
        hands.close()

    def _gone(self) -> None:
        """Shutdown, once uvicorn has stopped (every process ended): the status socket's file removed, the
        processes' egress rules, the gateway's own control groups, and the masked credentials' values and
        certificates (a SIGKILLed gateway's go at the next start), every server's (``release``: what runs in the
        sandboxes of the servers served now). Said twice, done once."""
        if self._status_socket is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._status_socket)
            self._status_socket = None
        self._hand_no_more()
        if self._release is not None:  # SIGTERM, raised again after this, ends the process
            self._release()

    def _begin_drain(self) -> None:
        """Shutdown's first step, at the first signal of a started gateway (see the module)."""
        timeout = self.gateway.listening.shutdown_timeout
        logger.info(
            "mcp-sessions gateway: draining: /readyz answers 503, a new conversation is refused (503, Retry-After); "
            "%d call(s) in flight may end for %g s",
            len(self.calls),
            timeout,
        )
        self._signalled = set(self.calls)
        self._answered_signalled()
        self._hand_no_more()
        if self._shared:  # the next gateway accepts what comes from now: none waits for this one's stop
            self.servers[0].close()
        loop = asyncio.get_running_loop()
        self._bound = loop.time() + timeout
        self._draining = loop.create_task(self._drain(timeout))

    async def _drain(self, within: float) -> None:
        """Wait for the calls in flight (at most ``within`` seconds), then end the streams, and let uvicorn stop
        (:meth:`main_loop`): it closes the listener, and waits for a call that came meanwhile for what is left of
        ``within`` (:meth:`shutdown`). Past it, or at a second signal, the calls are ended too."""
        try:
            await asyncio.wait_for(self._drain_ends.wait(), within)
        except TimeoutError:
            self._hurried = True
        self._drained = True
        self._end(self._hurried)
        self._drain_ended.set()

    def _end(self, calls: bool) -> None:
        """The streams ended where they are, and with ``calls`` the calls still in flight too, each told so as the
        module says (``_request``)."""
        if calls and self.calls:
            logger.info(
                "mcp-sessions gateway: %d call(s) still in flight are told the gateway restarts", len(self.calls)
            )
        for task in self.server_state.tasks:
            if calls or task not in self.calls:
                task.cancel()

    def _answered_signalled(self) -> None:
        """The drain's steps as its calls end: once those in flight at the signal are answered, a new request is
        refused (``REFUSING``); once none is in flight, the drain ends."""
        if not self._signalled and not self._refusing:
            self._refusing = True
            logger.info(
                "mcp-sessions gateway: the calls in flight at the signal are answered: a new call is refused (503, "
                "Retry-After); %d call(s) in flight",
                len(self.calls),
            )
        if not self.calls:
            self._drain_ends.set()

    def _stop_starting(self) -> None:
        """A signal before the app has started: the start under way, or about to be, is ended (its processes
        stopped)."""
        self._stop_asked = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._cancel_start)

    def _cancel_start(self) -> None:
        """The app's start cancelled, unless it ended meanwhile: a started app's lifespan is never cancelled (its
        shutdown would not run, and uvicorn would be told of a failed start after its end); uvicorn stops it, as
        ``should_exit`` asks."""
        if self._starting is not None:
            self._starting.cancel()

    def stop_asked(self) -> bool:
        """Whether the gateway drains (``DRAINING``)."""
        return self._stop_asked

    def refusing(self) -> bool:
        """Whether its drain refuses a new request (``REFUSING``)."""
        return self._refusing

    def drained(self) -> bool:
        """Whether its drain has ended (``STOPPING``)."""
        return self._drained

    async def _asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app uvicorn serves: ``app``, its start held (``_lifespan``), its requests counted (``_request``)."""
        if scope["type"] == "http":
            return await self._request(scope, receive, send)
        if scope["type"] != "lifespan":
            return await self.app(scope, receive, send)
        return await self._lifespan(scope, receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Startup: the app's start, which a signal ends while it is under way (uvicorn hears one only once the app
        has started), and whose failure (``StartupFailed``: its first process's) is kept as ``failure``, for the
        gateway to say in one line, instead of uvicorn's traceback."""
        held: list[Message] = []

        async def sending(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                self._starting = None  # started: a stop is uvicorn's from now on
                if starting.cancel_called:  # a signal as it ended, its cancel not delivered yet (anyio delivers it at
                    return None  # the app's next wait): a stopped start, as below, never a failure after its end
            if message["type"] == "lifespan.startup.failed":
                held.append(message)  # its text is a traceback: the exception says it in one line
            else:
                await send(message)

        self._loop = asyncio.get_running_loop()
        with anyio.CancelScope() as starting:
            self._starting = starting
            if self._stop_asked:  # before the start began
                starting.cancel()
            try:
                async with self._built():
                    # What the start made lasts as long as the gateway: frozen, never scanned by the collector,
                    # which _cli.run kept off until now.
                    gc.freeze()
                    gc.enable()
                    await self.app(scope, receive, sending)
            except BaseException as exc:
                self.failure = startup_failure(exc)
                if self.failure is None:
                    raise
            finally:
                if held:  # said in one line by the gateway, or not at all for a stop
                    quiet = self.failure is not None or starting.cancel_called
                    await send({**held[0], "message": "" if quiet else held[0].get("message", "")})
        self.stopped = starting.cancelled_caught
        if (self.stopped or self.failure is not None) and not held:  # uvicorn waits for the start's end (an app
            await send({"type": "lifespan.startup.failed", "message": ""})  # that failed to build never said it)

    @contextlib.asynccontextmanager
    async def _built(self) -> AsyncIterator[None]:
        """Startup, first, with ``Ahead``: the app built on a worker thread (the ``mcp`` SDK's import, about half a
        second of CPU), while its shared process starts beside it in this loop (``FirstProcess``), which the app's
        start then takes and asks to initialize; one not taken (the build failed, or a signal ended the start) is
        stopped at the end."""
        ahead = self._ahead
        if ahead is None:
            yield
            return
        try:
            async with anyio.create_task_group() as starting:
                await anyio.lowlevel.checkpoint()  # a start ended already goes no further
                starting.start_soon(ahead.first.run)
                self.app = await anyio.to_thread.run_sync(ahead.build)
            yield
        finally:
            await ahead.first.aclose()

    async def _request(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request: the probes answered, a new conversation refused while draining, a call counted in flight."""
        if scope["method"] == "GET" and scope["path"] in _PROBES:
            ready = scope["path"] == "/healthz" or not self._stop_asked
            return await _probe_answer(send, ready)
        call = is_call(scope)
        # a stream would hold the stop: its client opens it again at the next gateway
        if self._stop_asked and (_opens(scope) or not call):
            return await REFUSED.send(send)
        scope[STOPPING] = self.drained
        scope[DRAINING] = self.stop_asked
        scope[REFUSING] = self.refusing
        task = asyncio.current_task()
        if call and task is not None:
            self.calls.add(task)
        responding = _Responding(send, draining=self._stop_asked, stopping=self.stop_asked)
        try:
            return await self.app(scope, receive, responding)
        except asyncio.CancelledError:  # by the drain's end, or uvicorn's
            if not self._stop_asked:
                raise
            # a stream ended where it is, not left for uvicorn to call an error
            return await cut(send, call=call, started=responding.started, ended=responding.ended)
        finally:
            if task is not None:
                self.calls.discard(task)
                self._signalled.discard(task)
            if self._stop_asked:  # the gateway's drain, not this request's server's
                contextvars.Context().run(self._answered_signalled)

    def planned(self, record: logging.LogRecord) -> bool:
        """A logging filter: uvicorn's cancellations at the end of a stop the gateway drained for are INFO, as
        planned (its "Cancel N running task(s), timeout graceful shutdown exceeded" is an ERROR): its bound is
        reached at once with ``--shutdown-timeout 0``, else by a call that outlives its cancellation alone."""
        if self._stop_asked and record.levelno == logging.ERROR and record.getMessage().startswith("Cancel "):
            record.levelno = logging.INFO
            record.levelname = "INFO"
        return True

    def said_once(self, record: logging.LogRecord) -> bool:
        """A logging filter: uvicorn's "Application startup failed" dropped when the gateway says why itself."""
        said = self.failure is not None or self.stopped
        return not said or not record.getMessage().startswith("Application startup failed")


class _Responding:
    """A request's ``send``, which notes whether its answer has started and ended; for a request that came while
    the gateway drains (``draining``), a JSON answer that is ``-32014`` (a conversation the app would not open)
    goes as 503 with ``Retry-After``, as the front's own refusal does, so that a client retries it elsewhere."""

    def __init__(self, send: Send, *, draining: bool, stopping: Callable[[], bool]) -> None:
        self._send = send
        self._draining = draining
        self._stopping = stopping
        self._held: Message | None = None  # the start of a JSON answer, until its body says what it is
        self.started = self.ended = False

    async def __call__(self, message: Message) -> None:
        if self._held is not None:
            start, self._held = self._held, None
            body = message.get("body", b"") if message["type"] == "http.response.body" else b""
            answer = jsonrpc.loads(body, answer=True) if not message.get("more_body", False) else None
            if jsonrpc.error_code(answer) == UPSTREAM_UNAVAILABLE:
                start = {**start, "status": 503, "headers": [*start["headers"], (b"retry-after", RETRY_AFTER)]}
            await self._start(start)
        elif message["type"] == "http.response.start":
            if self._draining and _json_ok(message):
                self._held = message
                return None
            return await self._start(message)
        await self._send(message)
        self.ended = self.ended or (message["type"] == "http.response.body" and not message.get("more_body", False))

    async def _start(self, start: Message) -> None:
        if self._stopping():  # no request after it on this connection: the next one finds the next gateway
            start = {**start, "headers": [*start.get("headers", ()), (b"connection", b"close")]}
        await self._send(start)
        self.started = True


def _json_ok(start: Message) -> bool:
    return start["status"] == 200 and header(start.get("headers", ()), b"content-type") == b"application/json"


def _opens(scope: Scope) -> bool:
    """Whether a request would open a conversation, as its headers say: a 2025 ``initialize`` (a POST of no
    transport session) or a 2026-07-28 ``sessions/create``. ``--stdio``'s table refuses the others (``DRAINING``)."""
    headers = scope["headers"]
    if scope["method"] != "POST" or header(headers, MCP_SESSION_ID_HEADER) is not None:
        return False
    legacy = Era.of(header(headers, MCP_PROTOCOL_VERSION_HEADER)) is Era.LEGACY
    return legacy or header(headers, MCP_METHOD_HEADER) == b"sessions/create"


async def _unbuilt(scope: Scope, receive: Receive, send: Send) -> None:
    """The app of a gateway not built yet (``Gateway._built``): it serves nothing before its start."""
    raise RuntimeError("the gateway's app is not built yet")


async def _probe_answer(send: Send, ready: bool) -> None:
    """``/healthz`` and ``/readyz``'s answer: 200 ``ok``, or 503 ``draining``; nothing more."""
    body = b"ok\n" if ready else b"draining\n"
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200 if ready else 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})
