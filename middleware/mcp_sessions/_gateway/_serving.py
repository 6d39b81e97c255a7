"""How ``mcp-sessions gateway`` serves its app: uvicorn, as the gateway's command configures it.

``bind`` takes the gateway's socket before anything starts (a port in use is one line and exit status 2); ``serve``
runs uvicorn on it (and the operator's status port, ``--status-port``, on a loopback socket of its own, and its Unix
socket, ``--status-socket``); ``_Started`` stands between uvicorn and the app's lifespan, so that a failure to start
is one line and exit status 2, and a SIGTERM while the app starts (its first server process not answering yet) ends
that start: uvicorn hears signals only once the app has started.

A stop of a started gateway (SIGTERM, the first Ctrl-C) drains it first, as Envoy and Kubernetes drain a
replica: it keeps listening, ``GET /readyz`` answers 503, a request that would open a conversation, or a stream
(which would hold the stop), gets 503 with ``Retry-After`` (``-32014``: a retry reaches the next gateway), every
answer closes its connection (none is left idle for a client to reuse as the listener closes), and every call in
flight (a request other than a ``GET`` stream or a ``subscriptions/listen``) may end, for ``--shutdown-timeout`` at
most. Then the streams are ended and uvicorn stops: it closes the listener and waits for a call that came meanwhile
for what is left of the bound. A call past the bound is told ``-32014`` (503 where its answer has not started), never
uvicorn's 500. A second Ctrl-C (or SIGTERM) ends the drain at once, its calls told so.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import socket
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, Final, Literal, TextIO, get_args

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._asgi import header
from .._pipeline import unavailable
from .._wire import jsonrpc
from .._wire.protocol import (
    MCP_METHOD_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    MCP_SESSION_ID_HEADER,
    UPSTREAM_UNAVAILABLE,
)
from ..profiles import Era
from ._front import QueryDropped, StartupFailed

logger = logging.getLogger("mcp_sessions.gateway")

EXIT_USAGE = 2
"""A usage or startup error the gateway says in one line: a flag, its port in use, a server that does not start."""
STARTUP_FAILURE = 3
"""uvicorn's exit status for an app that failed to start in another way (a bug: its traceback is logged)."""
RESTARTING: Final = "The gateway is restarting: send the request again, and the next one answers it"
"""What a request refused by a drain, or cut by the stop that ends it, is told (with ``-32014``)."""
RETRY_AFTER: Final = b"1"
_SHUTTING_DOWN = unavailable(503, RESTARTING, RETRY_AFTER, None, "shutting_down")
STOPPING: Final = "mcp_sessions.gateway.stopping"
"""The scope key of a callable that says whether the gateway's drain has ended (it stops): a request still unanswered
then says so (``--stdio``'s, whose stream ends unanswered, before the app's shutdown)."""
DRAINING: Final = "mcp_sessions.gateway.draining"
"""The scope key of a callable that says whether the gateway drains (it has been asked to stop): it opens no
conversation then (``--stdio``'s table refuses one with ``-32014``)."""
_PROBES: Final = {"/healthz", "/readyz"}
_LISTEN: Final = b"subscriptions/listen"


LogLevel = Literal["critical", "error", "warning", "info", "debug"]
LOG_LEVELS: Final = get_args(LogLevel)  # --log-level's choices


@dataclass(frozen=True)
class Listening:
    """How the gateway serves, whatever it serves: its address, its log level, how long its drain lasts, and the
    operator's status port and Unix socket (loopback only). Built once from the flags (``_cli``); what
    :func:`serve` reads."""

    host: str
    port: int
    log_level: LogLevel
    shutdown_timeout: float
    status_port: int | None = None
    status_socket: str | None = None


def serve(
    app: ASGIApp,
    bound: socket.socket,
    listening: Listening,
    stderr: TextIO,
    stopped: Callable[[], None] = lambda: None,
) -> int:
    """Serve ``app`` with uvicorn on ``bound`` (:func:`bind`'s) until stopped (and the operator's status on its own
    loopback socket); a failure to start (``StartupFailed``) is one line on ``stderr`` and exit status 2.
    ``stopped`` is called once the app has stopped (its processes ended), also before uvicorn raises the signal
    that stopped it again, which ends the gateway then and there."""
    import uvicorn

    # The upstream's own Date and Server go to the client, as any proxy's do. The app itself reads the forwarded
    # headers of the proxies --forwarded-allow-ips trusts (uvicorn's own would hide the peer from it). h11, the
    # parser the gateway's request checks are tested with, whatever else is installed. Each request in a context of
    # its own: else a request that arrives on a keep-alive connection before the last answer's end is started in the
    # previous request's context (python/cpython#140947), with its conversation (current_conversation) in it.
    started = _Started(app)
    shutdown_timeout = listening.shutdown_timeout
    config = uvicorn.Config(
        started,
        host=listening.host,
        port=listening.port,
        log_level=listening.log_level,
        log_config=_log_config(uvicorn.config.LOGGING_CONFIG, started),
        lifespan="on",
        http="h11",
        server_header=False,
        date_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=shutdown_timeout,  # type: ignore[arg-type]  # uvicorn waits a float as well
        reset_contextvars=True,
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if not self.started:  # uvicorn's own stop; a first process that never answers keeps no one waiting
                super().handle_exit(sig, frame)
                return started.stop_starting()
            self._captured_signals.append(sig)  # raised again once stopped, as uvicorn does
            started.drain(self, shutdown_timeout)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                try:
                    yield
                finally:
                    gone()

    def gone() -> None:
        """Once uvicorn has stopped: its status socket's file removed, and what ``stopped`` removes."""
        if listening.status_socket is not None:
            with contextlib.suppress(OSError):
                os.unlink(listening.status_socket)
        stopped()

    server = Server(config)
    try:
        sockets = [bound, *_status_sockets(listening)]
    except ValueError as exc:
        print(f"mcp-sessions gateway: {exc}", file=stderr)
        return EXIT_USAGE
    # sse-starlette, whose event streams carry the mcp SDK's answers, ends every stream once uvicorn's should_exit is
    # set (it finds the server by its SIGTERM handler), the answer of a call that came as the drain ended among them
    # (told -32014 in a 200): the drain ends the streams itself, and uvicorn waits for the calls.
    from sse_starlette.sse import AppStatus

    automatic = AppStatus.enable_automatic_graceful_drain
    AppStatus.enable_automatic_graceful_drain = False
    try:
        server.run(sockets=sockets)
    except KeyboardInterrupt:  # Ctrl-C, raised again by uvicorn once it has stopped: ended quietly, as uvicorn's own
        pass  # command ends (exit status 0)
    except SystemExit:  # uvicorn's, for an app that did not start
        if started.stopped:  # a SIGTERM while it started: stopped, as asked
            return 0
        if started.failure is None:
            raise
    finally:
        AppStatus.enable_automatic_graceful_drain = automatic
    if started.failure is not None:
        print(f"mcp-sessions gateway: {started.failure}", file=stderr)
        return EXIT_USAGE
    return 0 if server.started or started.stopped else STARTUP_FAILURE


def bind(host: str, port: int, flags: str = "--host {host} --port {port}") -> socket.socket:
    """A TCP socket bound to ``host`` and ``port`` before any process starts; uvicorn listens on it once the app has
    started (until then a connection is refused, as where nothing listens). ``ValueError`` saying why it cannot be
    had (``flags``, formatted, names what asked for it), for one line and exit status 2: a port in use, an address
    not this host's.

    Made as ``IPPROTO_TCP``, as ``getaddrinfo`` gives it to asyncio's own ``create_server``: asyncio sets
    ``TCP_NODELAY`` only on a socket whose protocol says TCP, and an accepted connection takes the listening
    socket's, so one made with protocol 0 sent an answer written in pieces after the client's delayed ACK (40 ms)."""
    bound = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        bound.bind((host, port))
    except OSError as exc:
        bound.close()
        raise ValueError(f"{flags.format(host=host, port=port)}: {exc.strerror}") from None
    return bound


def private_directory(path: str) -> None:
    """The directory of the socket ``path``, which only the gateway's user may enter: made 0700 if missing,
    refused (``ValueError``) if another user may enter it."""
    directory = os.path.dirname(os.path.abspath(path))
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    found = os.lstat(directory)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o011:
        raise ValueError(
            f"--status-socket: {directory} must be a directory of the gateway's user that no one else may enter "
            f"(mode 0700): it is mode {found.st_mode & 0o7777:o}, owned by uid {found.st_uid}"
        )


def private_socket(path: str) -> socket.socket:
    """A Unix socket bound at ``path``, in a :func:`private_directory`; a socket left there by a gateway that was
    killed is replaced, one another gateway serves is refused (``ValueError``)."""
    private_directory(path)
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if stat.S_ISSOCK(os.lstat(path).st_mode if os.path.lexists(path) else 0):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            if probe.connect_ex(path) == 0:
                listening.close()
                raise ValueError(f"--status-socket: another gateway serves {path}")
        os.unlink(path)
    try:
        listening.bind(path)
        os.chmod(path, 0o600)
        listening.listen(128)
    except OSError as exc:
        listening.close()
        raise ValueError(f"--status-socket: {path}: {exc.strerror}") from None
    return listening


def _status_sockets(listening: Listening) -> list[socket.socket]:
    """The operator's sockets: its port, on loopback only whatever ``--host`` is, and its Unix socket, in a
    directory of the gateway's user alone; ``ValueError`` saying why one cannot be had."""
    status = []
    if listening.status_port is not None:
        status.append(bind("127.0.0.1", listening.status_port, "--status-port {port}"))
        logger.info("mcp-sessions gateway: the processes' status on http://127.0.0.1:%d/status", listening.status_port)
    if listening.status_socket is not None:
        status.append(private_socket(listening.status_socket))
        logger.info("mcp-sessions gateway: the processes' status on the Unix socket %s", listening.status_socket)
    return status


def _log_config(uvicorns: dict[str, Any], started: _Started) -> dict[str, Any]:
    """uvicorn's logging configuration, its access log without query strings (OAuth codes travel there), and
    without its own line for a failed start the gateway says in one line itself (``started``)."""
    config = copy.deepcopy(uvicorns)
    config.setdefault("filters", {})["query_dropped"] = {"()": QueryDropped}
    config["filters"]["said_once"] = {"()": lambda: started.said_once}
    config["filters"]["planned"] = {"()": lambda: started.planned}
    config["loggers"]["uvicorn.access"]["filters"] = ["query_dropped"]
    config["loggers"]["uvicorn.error"]["filters"] = ["said_once", "planned"]
    return config


class _Started:
    """The gateway's app, whose failure to start (``StartupFailed``: its first process's) is kept as ``failure``,
    for the gateway to say in one line, instead of uvicorn's traceback of the lifespan; and whose start a stop
    (SIGTERM) ends while it is under way (``stopped``): uvicorn hears a signal only once the app has started; and
    whose requests still unanswered when a stop's ``--shutdown-timeout`` ends are answered 503 and ``-32014``, which
    a client may retry elsewhere, instead of uvicorn's 500 and traceback."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.failure: BaseException | None = None
        self.stopped = False
        self._stop_asked = False
        self._starting: anyio.CancelScope | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.calls: set[asyncio.Task[Any]] = set()  # in flight: every request but a stream that waits for events
        self._drained = self._hurried = False
        self._drain_ends = asyncio.Event()  # set once no call is in flight, or by a second signal
        self._draining: asyncio.Task[None] | None = None

    def stop_asked(self) -> bool:
        return self._stop_asked

    def drained(self) -> bool:
        return self._drained

    def drain(self, server: Any, timeout: float) -> None:
        """Called by the signal handler of a started gateway: the first signal begins the drain (see the module),
        which stops ``server`` once no call is in flight or ``timeout`` has passed; the next ends it at once."""
        assert self._loop is not None
        if self._stop_asked:
            self._hurried = True
            self._loop.call_soon_threadsafe(self._drain_ends.set)
            return
        self._stop_asked = True
        self._loop.call_soon_threadsafe(self._begin_drain, server, timeout)

    def _begin_drain(self, server: Any, timeout: float) -> None:
        logger.info(
            "mcp-sessions gateway: draining: /readyz answers 503, a new conversation is refused (503, Retry-After); "
            "%d call(s) in flight may end for %g s",
            len(self.calls),
            timeout,
        )
        if not self.calls:
            self._drain_ends.set()
        self._draining = asyncio.get_running_loop().create_task(self._drain(server, timeout))

    async def _drain(self, server: Any, within: float) -> None:
        """Wait for the calls in flight (at most ``within`` seconds), then end the streams, and let uvicorn stop: it
        closes the listener, and waits for a call that came meanwhile for what is left of ``within``. Past it, or at
        a second signal, the calls are ended too."""
        loop = asyncio.get_running_loop()
        ends = loop.time() + within
        try:
            await asyncio.wait_for(self._drain_ends.wait(), within)
        except TimeoutError:
            self._hurried = True
        self._drained = True
        if self._hurried and self.calls:
            logger.info(
                "mcp-sessions gateway: %d call(s) still in flight are told the gateway restarts", len(self.calls)
            )
        for task in server.server_state.tasks:  # each ends as the module says
            if self._hurried or task not in self.calls:
                task.cancel()
        server.config.timeout_graceful_shutdown = max(ends - loop.time(), 0.1)
        server.should_exit = True

    def stop_starting(self) -> None:
        """Called by the signal handler: the start under way, or about to be, is ended (its processes stopped)."""
        self._stop_asked = True
        if self._starting is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._starting.cancel)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            return await self._request(scope, receive, send)
        if scope["type"] != "lifespan":
            return await self.app(scope, receive, send)
        held: list[Message] = []

        async def sending(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                self._starting = None  # started: a stop is uvicorn's from now on
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
                await self.app(scope, receive, sending)
            except BaseException as exc:
                self.failure = _startup_failure(exc)
                if self.failure is None:
                    raise
            finally:
                if held:  # said in one line by the gateway, or not at all for a stop
                    quiet = self.failure is not None or starting.cancel_called
                    await send({**held[0], "message": "" if quiet else held[0].get("message", "")})
        self.stopped = starting.cancelled_caught
        if self.stopped and not held:  # uvicorn waits for the start's end
            await send({"type": "lifespan.startup.failed", "message": ""})

    async def _request(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request: the probes answered, a new conversation refused while draining, a call counted in flight."""
        headers = scope["headers"]
        if scope["method"] == "GET" and scope["path"] in _PROBES:
            ready = scope["path"] == "/healthz" or not self._stop_asked
            return await _probe_answer(send, ready)
        call = scope["method"] != "GET" and header(headers, MCP_METHOD_HEADER) != _LISTEN
        # a stream would hold the stop: its client opens it again at the next gateway
        if self._stop_asked and (_opens(scope) or not call):
            return await _SHUTTING_DOWN.send(send)
        scope[STOPPING], scope[DRAINING] = self.drained, self.stop_asked
        task = asyncio.current_task()
        if call and task is not None:
            self.calls.add(task)
        responding = _Responding(send, draining=self._stop_asked, stopping=self.stop_asked)
        try:
            return await self.app(scope, receive, responding)
        except asyncio.CancelledError:  # by the drain's end, or uvicorn's
            if not self._stop_asked:
                raise
            if not responding.started:
                return await _SHUTTING_DOWN.send(send)
            if not responding.ended:  # a stream: ended where it is, not left for uvicorn to call an error
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            return None
        finally:
            if task is not None:
                self.calls.discard(task)
            if self._stop_asked and not self.calls:
                self._drain_ends.set()

    def planned(self, record: logging.LogRecord) -> bool:
        """A logging filter: uvicorn's cancellations at the end of a stop the gateway drained for are INFO, as
        planned (its "Cancel N running task(s), timeout graceful shutdown exceeded" is an ERROR)."""
        if self._stop_asked and record.levelno == logging.ERROR and record.getMessage().startswith("Cancel "):
            record.levelno, record.levelname = logging.INFO, "INFO"
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
        self._send, self._draining, self._stopping = send, draining, stopping
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


async def _probe_answer(send: Send, ready: bool) -> None:
    """``/healthz`` and ``/readyz``'s answer: 200 ``ok``, or 503 ``draining``; nothing more."""
    body = b"ok\n" if ready else b"draining\n"
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200 if ready else 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _startup_failure(exc: BaseException) -> BaseException | None:
    """The ``StartupFailed`` in ``exc`` (raised in a task group, it comes in exception groups), else ``None``."""
    if isinstance(exc, StartupFailed):
        return exc
    inner = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc.__cause__]
    for each in inner:
        if each is not None and (found := _startup_failure(each)) is not None:
            return found
    return None
