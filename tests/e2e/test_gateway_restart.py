"""A lone gateway's restart no client sees (issue 112, item 1): the listening socket outlives the process.

Under socket activation systemd holds the socket and passes it to each gateway it starts (``LISTEN_FDS``,
``LISTEN_PID``); here the test holds it, as systemd would, and starts each gateway through ``ACTIVATED``, which puts
the socket at fd 3 and names its own pid, then execs the gateway, as systemd's ``ExecStart`` does.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import anyio
import httpx
import pytest
from anyio.abc import TaskGroup
from mcp import Client
from starlette.types import ASGIApp

from _mcp import legacy_request
from _redis import end_process, free_port, missing
from _waits import WITHIN, until, until_awaited
from conftest import serve
from e2e._clients import CLIENTS, Conversations
from e2e._gateway import INITIALIZE, MAIN, PYTHONPATH, SECRET, said_as_root, upstream_server
from e2e._stdio import text_of

pytestmark = pytest.mark.anyio

ACTIVATED: Final = (
    "import os, sys; fd = int(sys.argv[1]); os.dup2(fd, 3); os.close(fd); "
    "os.environ.update(LISTEN_FDS='1', LISTEN_PID=str(os.getpid())); os.execv(sys.argv[2], sys.argv[2:])"
)
"""What systemd does between its fork and its exec: the socket at fd 3 (``SD_LISTEN_FDS_START``), and this pid."""
UNITS: Final = (MAIN / "docs/deployment.md").read_text()
INSTALLED: Final = Path(sys.executable).with_name("mcp-sessions")
"""The command the units' ``ExecStart`` and the handover run, ``mcp-sessions``: this environment's."""
SERVICE: Final = {"gateway": "mcp-sessions.service", "front": "mcp-front.service"}
"""deployment.md's service unit of the lone gateway, and of the front."""
HANDOVER: Final = {"gateway": "flags", "front": "front"}
"""deployment.md's handover flags (the shell array's name) of the lone gateway, and of the front."""
REPLICAS: Final = {"gateway": range(1), "front": range(2)}
"""The upstreams the lone gateway serves, and the front's replicas."""
CALLS: Final = 20  # a conversation's, each era's: half before the kill, half after it (served once the next accepts)
CONVERSATIONS: Final = 6  # new ones of each era while the old gateway drains: none may reach it
THINKING: Final = 0.3  # a conversation's pause between two calls, as a host's model takes between two tool calls


def unit(name: str) -> str:
    """deployment.md's unit ``name``, as printed."""
    [found] = re.findall(rf"```ini\n(# /etc/systemd/system/{re.escape(name)}:.*?)```", UNITS, re.S)
    return str(found)


def setting(name: str, key: str) -> str:
    """The value of ``key`` in deployment.md's unit ``name``."""
    [value] = re.findall(rf"^{key}=(.*)$", unit(name), re.M)
    return str(value)


def the_units_gateway(upstreams: Sequence[str], port: int, service: str = "mcp-sessions.service") -> list[str]:
    """The flags of deployment.md's unit ``service``'s ``ExecStart``, on the test's ``upstreams`` and port where it
    names its own; its ``--host`` and ``--port`` its socket unit's ``ListenStream``."""
    program, command, *flags = shlex.split(setting(service, "ExecStart"))
    assert (Path(program).name, command) == ("mcp-sessions", "gateway")
    host, _, printed = setting(setting(service, "Requires"), "ListenStream").rpartition(":")
    assert (flags[flags.index("--host") + 1], flags[flags.index("--port") + 1]) == (host, printed)
    return as_run(flags, upstreams, port)


def the_handover_gateway(upstreams: Sequence[str], port: int, handover: Path, name: str = "flags") -> list[str]:
    """The flags of deployment.md's handover (its array ``name``), on the test's ``upstreams``, port and ``PATH``
    where it names its own."""
    [line] = re.findall(rf"^{name}=\((.*--handover .*)\)$", UNITS, re.M)
    flags = shlex.split(line)
    return as_run(flags, upstreams, port, {flags[flags.index("--handover") + 1]: str(handover)})


def as_run(flags: list[str], upstreams: Sequence[str], port: int, also: dict[str, str] | None = None) -> list[str]:
    """``flags`` with their ``--upstream``s ``upstreams``, in order, their ``--port`` ``port``, and what ``also``
    changes."""
    printed = [flags[n + 1] for n, flag in enumerate(flags) if flag == "--upstream"]
    served = {flags[flags.index("--port") + 1]: str(port), **dict(zip(printed, upstreams, strict=True)), **(also or {})}
    return [served.get(flag, flag) for flag in flags]


def activated(held: socket.socket, *gateway: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    """``mcp-sessions gateway`` with the socket ``held`` passed to it, as systemd passes a ``.socket`` unit's."""
    return started(*gateway, log=log, activating=held)


def started(*gateway: str, log: Path | None = None, activating: socket.socket | None = None) -> subprocess.Popen[bytes]:
    """``mcp-sessions gateway`` with flags ``gateway``, what it writes in ``log`` (else a pipe), and the socket
    ``activating`` passed to it where given."""
    command = said_as_root([str(INSTALLED), "gateway", *gateway])
    if activating is not None:
        command = [sys.executable, "-c", ACTIVATED, str(activating.fileno()), *command]
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("MCP_SESSIONS_", "LISTEN_"))}
    with open(log, "ab") if log is not None else contextlib.nullcontext(subprocess.PIPE) as written:
        return subprocess.Popen(
            command,
            cwd=MAIN,
            env={**environ, "MCP_SESSIONS_SECRET": SECRET, "PYTHONPATH": PYTHONPATH},
            pass_fds=() if activating is None else (activating.fileno(),),
            stderr=written,
            start_new_session=True,
        )


def ready(gateway: subprocess.Popen[bytes], url: str) -> bool:
    """Whether ``gateway``'s ``/readyz`` says 200; ``AssertionError`` with what it said if it has ended."""
    assert gateway.poll() is None, gateway.returncode if gateway.stderr is None else gateway.communicate()[1]
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    return False


def held_upstream(gate: threading.Event, entered: threading.Event) -> ASGIApp:
    """The tests' upstream, with a tool ``hold`` that answers once ``gate`` is set (``entered`` set as it waits)."""
    server = upstream_server("upstream")

    @server.tool()
    async def hold() -> str:
        entered.set()
        await anyio.to_thread.run_sync(gate.wait, WITHIN)
        return "held"

    return server.streamable_http_app()


def queued(held: socket.socket) -> int:
    """How many connections wait in the listening socket ``held``'s queue, none accepting them (``TCP_INFO``'s
    ``tcpi_unacked``, which a listening socket's says)."""
    info = held.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return int(struct.unpack_from("I", info, 24)[0])


@contextlib.asynccontextmanager
async def holding_a_call(
    url: str, entered: threading.Event, answers: list[str]
) -> AsyncIterator[tuple[Client, Client, TaskGroup]]:
    """A 2026-07-28 and a 2025-11-25 conversation on ``url``, the first's call answered, the second's ``hold`` in
    flight (``entered``), and the task group it runs in."""
    async with (
        Client(url, mode="auto") as modern,
        Client(url, mode="legacy") as legacy,
        anyio.create_task_group() as tasks,
    ):
        await echoed(answers, modern, "before")

        async def holding() -> None:
            answers.append(text_of(await legacy.call_tool("hold", {})))

        tasks.start_soon(holding)
        await anyio.to_thread.run_sync(entered.wait, WITHIN)
        yield modern, legacy, tasks


async def echoed(answers: list[str], client: Client, message: str) -> None:
    answers.append(text_of(await client.call_tool("echo", {"message": message})))


async def opened(answers: list[str], url: str, mode: Literal["auto", "legacy"]) -> None:
    """A new conversation of ``mode``'s era, and its call."""
    async with Client(url, mode=mode) as client:
        await echoed(answers, client, mode)


def listening(unit: str = "mcp-sessions.socket") -> socket.socket:
    """A TCP socket, listening, as deployment.md's ``unit``'s ``ListenStream`` makes it: on its address, a free port
    for its own."""
    return socket.create_server((setting(unit, "ListenStream").rpartition(":")[0], 0))


async def killed_and_started(
    held: socket.socket, flags: Sequence[str], call: Callable[[Client, int], Awaitable[str]]
) -> list[str]:
    """A 2026-07-28 and a 2025-11-25 conversation calling in turn (``call``, each call's number), the gateway
    ``flags`` say, on the socket ``held``, SIGKILLed halfway and started again at once, not waited for: the
    answers, in order (an error raises)."""
    url = f"http://127.0.0.1:{held.getsockname()[1]}"
    gateways = [activated(held, *flags)]
    try:
        until(lambda: ready(gateways[0], url), "the first gateway to be ready")
        answers: list[str] = []
        async with Client(url + "/mcp", mode="auto") as modern, Client(url + "/mcp", mode="legacy") as legacy:
            for number in range(CALLS):
                if number == CALLS // 2:
                    gateways[-1].send_signal(signal.SIGKILL)
                    gateways[-1].wait()
                    gateways.append(await anyio.to_thread.run_sync(activated, held, *flags))
                for client in (modern, legacy):
                    answers.append(await call(client, number))
        assert ready(gateways[-1], url)
        return answers
    finally:
        for gateway in gateways:
            end_process(gateway, kill=True)


async def test_a_sigkill_and_a_start_under_socket_activation_cost_clients_latency_only() -> None:
    """deployment.md's socket-activated units' lone ``--upstream`` gateway SIGKILLed mid-conversation and started
    again on the socket systemd holds: the calls made while none runs wait in the socket's queue and are answered by
    the next gateway; no client of either era sees an error. Without the socket passed, the gateway binds its port
    itself, which the socket holds: it exits (port in use), and no client is answered."""

    async def echo(client: Client, number: int) -> str:
        return text_of(await client.call_tool("echo", {"message": f"{number}"}))

    with serve(upstream_server("upstream").streamable_http_app()) as upstream_url, listening() as held:
        flags = (*the_units_gateway([upstream_url + "/mcp"], held.getsockname()[1]), "--log-level", "warning")
        answers = await killed_and_started(held, flags, echo)
    assert answers == [f"{number}" for number in range(CALLS) for _ in range(2)]


async def test_a_sigkill_and_a_start_of_a_stdio_gateway_whose_state_is_on_disk_cost_clients_latency_only() -> None:
    """The same for a ``--stdio`` gateway whose server keeps its state on disk, or none (``--conversation-state
    disk``): each conversation's next call after the kill is answered by a new process (its count, which this
    server keeps in its memory, starts again), never told its conversation ended (``-32043``)."""

    async def count(client: Client, number: int) -> str:
        return text_of(await client.call_tool("count", {}))

    server = ("--stdio", f"{sys.executable} -m e2e._plain_stdio", "--conversation-state", "disk")
    processes = ("--processes", "per-conversation", "--warm", "0", "--process-containment", "none")
    with listening() as held:
        flags = ("--port", str(held.getsockname()[1]), *server, *processes, "--pass-env", "PYTHONPATH")
        answers = await killed_and_started(held, (*flags, "--log-level", "warning"), count)
    counted = [*range(1, CALLS // 2 + 1), *range(1, CALLS // 2 + 1)]
    assert answers == [f"{number}" for number in counted for _ in range(2)]


def test_a_passed_socket_the_gateway_was_not_told_of_is_refused_in_one_line() -> None:
    """The gateway checks requests against its ``--host`` and says it serves its ``--host`` and ``--port``: a socket
    systemd passed on another address is refused at the start, in one line that says what to change."""
    with listening() as held:
        port = held.getsockname()[1]
        gateway = activated(held, "--port", str(port + 1), "--upstream", "http://127.0.0.1:9/mcp")
        try:
            said = gateway.communicate(timeout=WITHIN)[1].decode()
        finally:
            end_process(gateway, kill=True)
    assert gateway.returncode == 2, said
    assert said.splitlines() == [
        f"mcp-sessions gateway: LISTEN_FDS: systemd passed 127.0.0.1 port {port}, the gateway serves --host 127.0.0.1 "
        f"--port {port + 1}: give the gateway its .socket unit's ListenStream address"
    ]


@pytest.mark.parametrize("service", SERVICE.values())
def test_the_socket_activated_units_verify(tmp_path: Path, service: str) -> None:
    """deployment.md's service units (the lone gateway's, the front's) and their socket units as printed, their
    ``ExecStart`` this environment's ``mcp-sessions``: ``systemd-analyze verify`` finds nothing to say of them."""
    verify = shutil.which("systemd-analyze")
    if verify is None:
        missing("systemd-analyze is not installed (the systemd package)")
    units = [tmp_path / setting(service, "Requires"), tmp_path / service]
    for path in units:
        path.write_text(unit(path.name).replace("/usr/local/bin/mcp-sessions", str(INSTALLED)))
    verified = subprocess.run([verify, "verify", *map(str, units)], capture_output=True, text=True, timeout=WITHIN)
    assert (verified.returncode, verified.stderr) == (0, "")


async def test_a_sigterm_restart_under_socket_activation_costs_clients_latency_only(tmp_path: Path) -> None:
    """``systemctl restart`` of the units' gateway with a call in flight: the old one drains, but accepts no more
    (the socket is systemd's: a new connection is the next gateway's), so that a conversation that starts meanwhile
    waits in the socket's queue instead of a 503, and is answered by the next, started once the old has stopped.
    Without it, the draining gateway accepts the new conversations and refuses them (503, ``Retry-After``)."""
    gate, entered = threading.Event(), threading.Event()
    with serve(held_upstream(gate, entered)) as upstream_url, listening() as held:
        port = held.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        flags = (*the_units_gateway([upstream_url + "/mcp"], port), "--log-level", "info")
        gateways = [activated(held, *flags, log=tmp_path / "old.log")]
        answers: list[str] = []
        try:
            until(lambda: ready(gateways[0], url), "the first gateway to be ready")
            async with holding_a_call(url + "/mcp", entered, answers) as (modern, legacy, tasks):
                gateways[0].send_signal(signal.SIGTERM)
                await until_awaited(lambda: b"draining" in (tmp_path / "old.log").read_bytes(), "the drain")
                for mode in ("auto", "legacy"):
                    tasks.start_soon(opened, answers, url + "/mcp", mode)
                await until_awaited(lambda: queued(held) == 2, "the new conversations to wait in the queue")
                gate.set()
                assert await anyio.to_thread.run_sync(gateways[0].wait, WITHIN) == -signal.SIGTERM
                gateways.append(activated(held, *flags, log=tmp_path / "new.log"))  # as systemd starts it
                await echoed(answers, modern, "after")
                await echoed(answers, legacy, "after")
        finally:
            gate.set()
            for gateway in gateways:
                end_process(gateway, kill=True)
    assert sorted(answers) == sorted(["before", "held", "auto", "legacy", "after", "after"])


async def test_a_handover_without_systemd_costs_clients_latency_only(tmp_path: Path) -> None:
    """deployment.md's ``--handover PATH``: the next gateway takes the running one's listening socket (the same
    socket, its queue whole), and once it listens the old one drains, accepting no more, its call in flight
    answered; conversations of both eras that call all along, and new ones that start during the drain, see no
    error. Without it, the next gateway cannot bind the port the old one listens on (exit status 2)."""
    gate, entered = threading.Event(), threading.Event()
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    with serve(held_upstream(gate, entered)) as upstream_url:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        flags = (*the_handover_gateway([upstream_url + "/mcp"], port, runtime / "handover"), "--log-level", "info")
        gateways = [started(*flags, log=tmp_path / "old.log")]
        answers: list[str] = []
        try:
            until(lambda: ready(gateways[0], url), "the first gateway to be ready")
            async with holding_a_call(url + "/mcp", entered, answers) as (modern, legacy, _):
                gateways.append(started(*flags, log=tmp_path / "new.log"))
                old = tmp_path / "old.log"
                await until_awaited(lambda: b"draining" in old.read_bytes() or gateways[1].poll(), "the handover")
                assert gateways[1].poll() is None, (tmp_path / "new.log").read_text()
                for _ in range(CONVERSATIONS):
                    await opened(answers, url + "/mcp", "auto")
                    await opened(answers, url + "/mcp", "legacy")
                    await echoed(answers, modern, "during")
                gate.set()
                assert await anyio.to_thread.run_sync(gateways[0].wait, WITHIN) == 0
                await echoed(answers, modern, "after")
                await echoed(answers, legacy, "after")
                assert ready(gateways[1], url)
        finally:
            gate.set()
            for gateway in gateways:
                end_process(gateway, kill=True)
    during = ["auto", "legacy", "during"] * CONVERSATIONS
    assert sorted(answers) == sorted(["before", "held", *during, "after", "after"])
    assert b'HTTP/1.1" 503' not in (tmp_path / "old.log").read_bytes()


def handover_lines(name: str, upstreams: Sequence[str], port: int, handover: Path) -> str:
    """deployment.md's handover, the shell lines of its array ``name``, as printed but for its port, upstreams and
    ``PATH``: the test's."""
    [block] = [block for block in re.findall(r"```sh\n(.*?)```", UNITS, re.S) if block.startswith(f"{name}=(")]
    flags = shlex.split(re.findall(rf"^{name}=\((.*)\)$", block, re.M)[0])
    printed_port = flags[flags.index("--port") + 1]
    for printed, value in zip(flags, the_handover_gateway(upstreams, port, handover, name), strict=True):
        if printed not in (value, printed_port):
            block = block.replace(printed, value)
    return re.sub(rf"\b{printed_port}\b", str(port), block)  # in the flags, and the URL waited for


def in_bash(lines: str, log: Path) -> subprocess.Popen[bytes]:
    """``lines`` run by bash as a shell a user types them in would, ``mcp-sessions`` this environment's, what they
    write in ``log``."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("MCP_SESSIONS_", "LISTEN_"))}
    environ.update(MCP_SESSIONS_SECRET=SECRET, PYTHONPATH=PYTHONPATH, PATH=f"{INSTALLED.parent}:{environ['PATH']}")
    with open(log, "wb") as said:
        return subprocess.Popen(["bash", "-c", lines], env=environ, stdout=said, stderr=said, start_new_session=True)


@pytest.mark.parametrize("served", SERVICE)
async def test_the_handover_runs_as_written(tmp_path: Path, served: str) -> None:
    """deployment.md's handover of the lone gateway, and of the front, its shell lines run as printed (their port,
    upstreams and ``PATH`` the test's): the first gateway started and waited for, the next started, the first's end
    waited for: it ends (exit status 0) once the next listens on its socket, and the next serves on the port."""
    (tmp_path / "run").mkdir(mode=0o700)
    port = free_port()
    with contextlib.ExitStack() as stack:
        upstreams = [
            stack.enter_context(serve(upstream_server(f"{n}").streamable_http_app())) for n in REPLICAS[served]
        ]
        lines = handover_lines(
            HANDOVER[served], [url + "/mcp" for url in upstreams], port, tmp_path / "run" / "handover"
        )
        shell = in_bash(lines, tmp_path / "said")
        stack.callback(end_process, shell, kill=True)  # and the next gateway, in its process group
        assert await anyio.to_thread.run_sync(shell.wait, WITHIN) == 0, (tmp_path / "said").read_text()
        answers: list[str] = []
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="auto") as client:
            await echoed(answers, client, "after")
    said = (tmp_path / "said").read_text()
    assert answers == ["after"]
    assert said.count("the gateway started with --handover listens on its socket") == 1, said


async def calling(conversations: Conversations, url: str, state: Path, stop: anyio.Event) -> None:
    """A conversation of each of :data:`CLIENTS` on ``url``, each calling ``echo`` in turn, a model's pause apart,
    until ``stop``."""
    async with conversations.opened(url, state):
        while not stop.is_set():
            for kind in CLIENTS:
                said = await conversations.call(kind, "echo", {"message": kind})
                assert said in (kind, ""), said  # "": an error, counted
            await anyio.sleep(THINKING)


class Restarted:
    """The gateway or the front (``served``: deployment.md's units and handover flags for it) on ``upstreams``,
    restarted as ``restart`` says: ``handover``, the next gateway started with its flags; ``systemctl restart``,
    SIGTERM, and once it has stopped the next started on the socket held, as systemd's ``Restart=always`` does;
    ``SIGKILL``, and the next started at once on the socket held."""

    def __init__(self, served: str, restart: str, upstreams: list[str], directory: Path, own: list[str]) -> None:
        """``own``: the gateway's flags but ``--port`` and ``--handover`` instead of the docs' (``[]``: theirs)."""
        self.restart_by, self.directory = restart, directory
        self.held = listening(setting(SERVICE[served], "Requires"))
        port = self.held.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        if restart == "handover":
            self.held.close()  # the first gateway binds the port
            (directory / "run").mkdir(mode=0o700)
            self.flags = the_handover_gateway(upstreams, port, directory / "run" / "handover", HANDOVER[served])
        else:
            self.flags = the_units_gateway(upstreams, port, SERVICE[served])
        if own:
            handover = self.flags[self.flags.index("--handover") :][:2] if restart == "handover" else []
            self.flags = ["--port", str(port), *handover, *own]
        self.gateways: list[subprocess.Popen[bytes]] = []
        self.start()

    def start(self) -> None:
        """The next gateway (the first, at first)."""
        log = self.directory / f"gateway-{len(self.gateways)}.log"
        flags = (*self.flags, "--log-level", "info")
        if self.restart_by == "handover":
            self.gateways.append(started(*flags, log=log))
        else:
            self.gateways.append(activated(self.held, *flags, log=log))

    def said(self) -> str:
        return "".join(path.read_text() for path in sorted(self.directory.glob("gateway-*.log")))

    async def restart(self) -> None:
        """The restart, until the next gateway is ready."""
        old = self.gateways[-1]
        if self.restart_by == "handover":
            self.start()
            assert await anyio.to_thread.run_sync(old.wait, WITHIN) == 0, self.said()
        else:
            old.send_signal(signal.SIGKILL if self.restart_by == "SIGKILL" else signal.SIGTERM)
            await anyio.to_thread.run_sync(old.wait, WITHIN)
            self.start()
        await until_awaited(lambda: ready(self.gateways[-1], self.url), "the next gateway to be ready")

    def close(self) -> None:
        for gateway in self.gateways:
            end_process(gateway, kill=True)
        self.held.close()


@pytest.mark.parametrize("restart", ["handover", "systemctl restart", "SIGKILL"])
@pytest.mark.parametrize("served", ["gateway", "front"])
async def test_every_kind_of_client_calling_all_along_sees_no_error_across_a_restart(
    tmp_path: Path, served: str, restart: str
) -> None:
    """The lone gateway, and the front of two replicas, restarted under a conversation of each kind of client (the
    ``mcp`` SDK's of both eras, ``connect``, raw HTTP) that calls every 0.3 s: every call answered, none an error,
    counted. Without the socket outliving the gateway (passed by systemd, or handed over), a call that comes while
    none listens is refused (``ConnectError``), or the next gateway cannot bind the port the old one holds."""
    conversations, stop = Conversations(), anyio.Event()
    with contextlib.ExitStack() as stack:
        upstreams = [
            stack.enter_context(serve(upstream_server(f"{n}").streamable_http_app())) for n in REPLICAS[served]
        ]
        gateway = Restarted(served, restart, [url + "/mcp" for url in upstreams], tmp_path, [])
        stack.callback(gateway.close)
        await until_awaited(lambda: ready(gateway.gateways[0], gateway.url), "the first gateway to be ready")
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(calling, conversations, gateway.url + "/mcp", tmp_path / "connect", stop)
            await until_awaited(lambda: conversations.answered >= len(CLIENTS) or conversations.errors, "calls")
            await gateway.restart()
            after = conversations.answered
            await until_awaited(lambda: conversations.answered >= after + 2 * len(CLIENTS), "calls after it")
            stop.set()
    assert conversations.errors == [], (conversations.errors, gateway.said())
    assert conversations.answered >= 3 * len(CLIENTS), conversations.answered
    assert "Traceback" not in gateway.said(), gateway.said()


def called(kept: http.client.HTTPConnection, body: dict[str, Any], session: str | None) -> dict[str, Any] | str:
    """``body`` posted on the connection ``kept`` in the 2025 transport session ``session``: the answer's status,
    whether it closes the connection, its session and tool's text (else its JSON-RPC answer), or the error that came
    instead (the connection closed, or reset, unanswered)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    headers |= {"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"} if session else {}
    try:
        kept.request("POST", "/mcp", json.dumps(body), headers)
        response = kept.getresponse()
        text = response.read().decode()
    except (OSError, http.client.HTTPException) as exc:
        return repr(exc)
    data = [line.removeprefix("data:") for line in text.splitlines() if line.startswith("data:")]
    answer = json.loads(data[-1] if data else text)
    content = answer.get("result", {}).get("content")
    said = {"status": response.status, "closes": "close" in response.getheader("connection", "").lower()}
    return {**said, "session": response.getheader("mcp-session-id"), "text": content[0]["text"] if content else answer}


@pytest.mark.parametrize("restart", ["handover", "systemctl restart"])
async def test_a_connection_kept_alive_across_the_drain_has_its_next_call_answered_then_closed(
    tmp_path: Path, restart: str
) -> None:
    """A 2025 conversation's connection, kept alive and idle once the old ``--stdio`` gateway has no call left, its
    next call sent once the gateway has said it waits for it: answered by the conversation's process, the connection
    closed by the answer (the call after it is the next gateway's). Without the wait, uvicorn's stop closed it at
    once as the drain ended, and a call a client sent on it meanwhile was reset, unanswered (the ``ReadError`` that
    an SDK client or ``connect`` does not send again); and a drain that refused a new call once those in flight at
    its signal were answered refused it (503), where a connection closes with each answer."""
    stdio = ["--stdio", f"{sys.executable} -m e2e._plain_stdio", "--conversation-state", "disk", "--warm", "0"]
    stdio += ["--processes", "per-conversation", "--process-containment", "none", "--pass-env", "PYTHONPATH"]
    gateway = Restarted("gateway", restart, ["http://127.0.0.1:9/mcp"], tmp_path, stdio)
    try:
        await until_awaited(lambda: ready(gateway.gateways[0], gateway.url), "the first gateway to be ready")
        kept = http.client.HTTPConnection(gateway.url.removeprefix("http://"), timeout=WITHIN)
        try:
            opened = called(kept, legacy_request("initialize", INITIALIZE, id=0), None)
            assert isinstance(opened, dict), opened
            count = legacy_request("tools/call", {"name": "count", "arguments": {}})
            assert called(kept, count, opened["session"]) == {**opened, "text": "1"}
            old = gateway.gateways[0]
            if restart == "handover":
                gateway.start()
            else:
                old.send_signal(signal.SIGTERM)
            waits = b"connection(s) left open"
            log = tmp_path / "gateway-0.log"
            await until_awaited(lambda: waits in log.read_bytes() or old.poll() is not None, "the drain's end")
            expected = {**opened, "closes": True, "text": "2"}
            answered = called(kept, count, opened["session"])
            assert answered == expected, (answered, gateway.said())
        finally:
            kept.close()
        assert await anyio.to_thread.run_sync(old.wait, WITHIN) == (0 if restart == "handover" else -signal.SIGTERM)
    finally:
        gateway.close()
