"""How ``mcp-sessions gateway`` serves its app: uvicorn, as the gateway's configuration says.

``listener`` takes the gateway's socket before anything starts (the one systemd passed, or ``bind``'s: a port in use is
one line and exit status 2); ``private_socket`` the operator's Unix socket (``--status-socket``); ``_lifecycle.serve``
runs the gateway on them until it is stopped (its start, its drain and its stop: ``_lifecycle.Gateway``, which imports
uvicorn). The words a drain's requests are told, and the scope keys through which the app asks whether the gateway
drains, are here, for the app's parts to read without uvicorn.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import stat
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any, Final

logger = logging.getLogger("mcp_sessions.gateway")

EXIT_USAGE = 2
"""A usage or startup error the gateway says in one line: a flag, its port in use, a server that does not start."""
RESTARTING: Final = "The gateway is restarting: send the request again, and the next one answers it"
"""What a request a drain refused is told (with ``-32014``): it reached no server, and the next gateway answers it."""
CUT: Final = "The gateway stopped while the call ran: it may have run; check before sending it again"
"""What a call the stop cut is told (with ``-32603`` and :data:`CUT_DATA`): it reached the server, which may have done
what it asked (a ``write_file``), so that sending it again may do it twice; no ``Retry-After``, which a client or a
front would take as leave to send it again."""
CUT_DATA: Final = {"reason": "gateway_stopped", "mayHaveRun": True}
RETRY_AFTER: Final = b"1"
_SD_LISTEN_FDS_START: Final = 3
"""The first socket systemd passes (``SD_LISTEN_FDS_START``)."""
_HANDOVER_TIMEOUT: Final = 10.0
"""How long a gateway waits for its predecessor's socket (``--handover``): it sends it as it accepts."""
STOPPING: Final = "mcp_sessions.gateway.stopping"
"""The scope key of a callable that says whether the gateway's drain has ended (it stops): a request still unanswered
then says so (``--stdio``'s, whose stream ends unanswered, before the app's shutdown)."""
DRAINING: Final = "mcp_sessions.gateway.draining"
"""The scope key of a callable that says whether the gateway drains (it has been asked to stop): it opens no
conversation then (``--stdio``'s table refuses one with ``-32014``)."""
REFUSING: Final = "mcp_sessions.gateway.refusing"
"""The scope key of a callable that says whether the gateway, draining, has answered every call that was in flight at
its signal: from then ``--stdio``'s table takes no new request (``-32014``, 503 with ``Retry-After``), so that the
drain's calls only end, and a conversation's next call goes to the next gateway."""


class StartSignals:
    """SIGTERM and SIGINT (Ctrl-C) from the gateway's first step until uvicorn hears them: noted, not obeyed, so that
    one that comes while the gateway is built (its configuration read, its sandboxes made, its egress rules installed)
    ends the start as one during the app's start does (``_lifecycle.Gateway``, which takes them as it starts):
    nothing left running, exit status 0; the system's SIGTERM ended the process at once (exit -15), its rules and
    control groups left for the next start, and Python's Ctrl-C printed a traceback. :meth:`restore` gives the
    signals back their handlers, as a stopped gateway raises its signal again. Outside the main thread (a test's
    gateway), which signals never reach, it notes nothing."""

    def __init__(self) -> None:
        self.signals: list[int] = []
        self._before: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    def __enter__(self) -> StartSignals:
        if threading.current_thread() is threading.main_thread():
            self._before = {sig: signal.signal(sig, self._noted) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.restore()

    def _noted(self, sig: int, frame: FrameType | None) -> None:
        self.signals.append(sig)

    def restore(self) -> None:
        """The handlers the signals had before (said twice, done once)."""
        while self._before:
            sig, handler = self._before.popitem()
            signal.signal(sig, handler)


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


@dataclass(frozen=True)
class Listener:
    """The gateway's listening socket (:func:`listener`'s), and who else holds it. ``shared``: systemd holds it too
    (socket activation), so that it outlives the gateway: at its drain's signal the gateway stops accepting, and a
    new connection waits in the socket's queue for the next gateway (``_lifecycle.Gateway``, which also shares it
    with the next gateway started with ``--handover``). ``predecessor``: the gateway it was taken from (its
    ``--handover`` socket), told once this one listens, when it stops accepting and drains."""

    listening: socket.socket
    shared: bool = False
    predecessor: socket.socket | None = None


def listener(host: str, port: int, handover: str | None, environ: Mapping[str, str]) -> Listener:
    """The gateway's listening socket: the one systemd passed (socket activation, ``sd_listen_fds(3)``: fd 3 when
    ``LISTEN_PID`` is this process and ``LISTEN_FDS`` says 1; the variables then removed, as ``sd_listen_fds``
    removes them, so that no process the gateway starts takes them for its own); else, with ``handover``, the one
    the gateway serving that Unix socket sends (as HAProxy's seamless reload takes its predecessor's: the same
    socket, its queue whole); else :func:`bind`'s. A socket passed or taken goes on listening while gateways
    change: a connection waits in its queue until one accepts it. It must be a TCP socket on ``host`` and
    ``port``, the address the gateway checks requests against and says it serves (``ValueError`` else, saying
    what to change)."""
    if environ.get("LISTEN_PID") == str(os.getpid()):
        count = environ.get("LISTEN_FDS")
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(name, None)
        if count != "1":
            raise ValueError(
                f"LISTEN_FDS={count}: the gateway serves one socket: give its .socket unit one ListenStream"
            )
        try:
            passed = socket.socket(fileno=_SD_LISTEN_FDS_START)
        except OSError as exc:
            raise ValueError(f"LISTEN_FDS: fd {_SD_LISTEN_FDS_START} is not a socket: {exc.strerror}") from None
        fix = "give the gateway its .socket unit's ListenStream address"
        return Listener(_on(passed, host, port, "LISTEN_FDS: systemd passed", fix), shared=True)
    if handover is not None and (taken := _taken(handover, host, port)) is not None:
        return taken
    return Listener(bind(host, port))


def _taken(path: str, host: str, port: int) -> Listener | None:
    """The socket of the gateway serving ``path`` (``--handover``), and the connection that tells it this one
    listens; ``None`` where none serves there (the first gateway, or one left by a gateway that was killed)."""
    private_directory(path, "--handover")
    asking = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    asking.settimeout(_HANDOVER_TIMEOUT)
    try:
        asking.connect(path)
        fds = socket.recv_fds(asking, 1, 1)[1]
    except (FileNotFoundError, ConnectionRefusedError):
        asking.close()
        return None
    except OSError as exc:
        asking.close()
        raise ValueError(f"--handover: {path}: {exc.strerror or exc}") from None
    if not fds:
        asking.close()
        raise ValueError(f"--handover: the gateway serving {path} sent no socket")
    by = f"--handover: the gateway serving {path} listens on"
    return Listener(_on(socket.socket(fileno=fds[0]), host, port, by, "give both gateways one"), predecessor=asking)


def _on(passed: socket.socket, host: str, port: int, by: str, fix: str) -> socket.socket:
    """``passed``, held by this process alone (``FD_CLOEXEC``, as ``sd_listen_fds`` sets it: no process the gateway
    starts holds it), if it is a TCP socket on ``host`` and ``port``; else closed, and ``ValueError``."""
    passed.set_inheritable(False)
    tcp = passed.family in (socket.AF_INET, socket.AF_INET6) and passed.type == socket.SOCK_STREAM
    address = passed.getsockname()[:2] if tcp else None
    if address != (host, port):
        passed.close()
        where = f"{address[0]} port {address[1]}" if address else f"a {passed.family.name} {passed.type.name} socket"
        raise ValueError(f"{by} {where}, the gateway serves --host {host} --port {port}: {fix}")
    return passed


def handing(path: str) -> socket.socket:
    """The Unix socket on which the gateway hands its listening socket to the next (``--handover``), made beside
    ``path`` (``PATH.PID``, 0600, in a :func:`private_directory`) and renamed to it once the gateway listens
    (``_lifecycle.Gateway``), so that until then ``path`` stays its predecessor's."""
    private_directory(path, "--handover")
    made = f"{path}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(made)
    hands = _listening_at(made, "--handover")
    hands.setblocking(False)
    return hands


def private_directory(path: str, flag: str = "--status-socket") -> None:
    """The directory of the socket ``path``, which only the gateway's user may enter: made 0700 if missing,
    refused (``ValueError``) if another user may enter it, or it cannot be made."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)
        found = os.lstat(directory)
    except OSError as exc:
        raise ValueError(
            f"{flag}: {directory}: {exc.strerror}: give a path in a directory the gateway's user can create"
        ) from None
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o011:
        raise ValueError(
            f"{flag}: {directory} must be a directory of the gateway's user that no one else may enter "
            f"(mode 0700): it is mode {found.st_mode & 0o7777:o}, owned by uid {found.st_uid}"
        )


def private_socket(path: str) -> socket.socket:
    """A Unix socket bound at ``path``, in a :func:`private_directory`; a socket left there by a gateway that was
    killed is replaced, one another gateway serves is refused (``ValueError``)."""
    private_directory(path)
    if stat.S_ISSOCK(os.lstat(path).st_mode if os.path.lexists(path) else 0):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            if probe.connect_ex(path) == 0:
                raise ValueError(f"--status-socket: another gateway serves {path}")
        os.unlink(path)
    return _listening_at(path, "--status-socket")


def _listening_at(path: str, flag: str) -> socket.socket:
    """A Unix socket bound at ``path``, mode 0600, listening; ``ValueError`` naming ``flag`` where it cannot be."""
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listening.bind(path)
        os.chmod(path, 0o600)
        listening.listen(128)
    except OSError as exc:
        listening.close()
        raise ValueError(f"{flag}: {path}: {exc.strerror}") from None
    return listening
