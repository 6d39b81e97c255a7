"""A lone gateway's restart no client sees (issue 112, item 1): the listening socket outlives the process.

Under socket activation systemd holds the socket and passes it to each gateway it starts (``LISTEN_FDS``,
``LISTEN_PID``); here the test holds it, as systemd would, and starts each gateway through ``ACTIVATED``, which puts
the socket at fd 3 and names its own pid, then execs the gateway, as systemd's ``ExecStart`` does.
"""

from __future__ import annotations

import contextlib
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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Final, Literal

import anyio
import httpx
import pytest
from anyio.abc import TaskGroup
from mcp import Client
from starlette.types import ASGIApp

from _redis import end_process, free_port
from _waits import WITHIN, until, until_awaited
from conftest import serve
from e2e._gateway import MAIN, PYTHONPATH, SECRET, said_as_root, upstream_server
from e2e._stdio import text_of

pytestmark = pytest.mark.anyio

ACTIVATED: Final = (
    "import os, sys; fd = int(sys.argv[1]); os.dup2(fd, 3); os.close(fd); "
    "os.environ.update(LISTEN_FDS='1', LISTEN_PID=str(os.getpid())); os.execv(sys.argv[2], sys.argv[2:])"
)
"""What systemd does between its fork and its exec: the socket at fd 3 (``SD_LISTEN_FDS_START``), and this pid."""
UNITS: Final = (MAIN / "docs/deployment.md").read_text()
CALLS: Final = 20  # a conversation's, each era's: half before the kill, half after it (served once the next accepts)
CONVERSATIONS: Final = 6  # new ones of each era while the old gateway drains: none may reach it


def unit(name: str) -> str:
    """deployment.md's unit ``name``, as printed."""
    [found] = re.findall(rf"```ini\n(# /etc/systemd/system/{re.escape(name)}:.*?)```", UNITS, re.S)
    return str(found)


def setting(name: str, key: str) -> str:
    """The value of ``key`` in deployment.md's unit ``name``."""
    [value] = re.findall(rf"^{key}=(.*)$", unit(name), re.M)
    return str(value)


def the_units_gateway(port: int, upstream: str) -> list[str]:
    """The flags of the service unit's ``ExecStart``, on the test's port and upstream where it names its own."""
    program, command, *flags = shlex.split(setting("mcp-sessions.service", "ExecStart"))
    assert (Path(program).name, command) == ("mcp-sessions", "gateway")
    host, _, printed = setting("mcp-sessions.socket", "ListenStream").rpartition(":")
    assert (flags[flags.index("--host") + 1], flags[flags.index("--port") + 1]) == (host, printed)
    served = {printed: str(port), flags[flags.index("--upstream") + 1]: upstream}
    return [served.get(flag, flag) for flag in flags]


def the_handover_gateway(port: int, upstream: str, handover: Path) -> list[str]:
    """The flags of deployment.md's handover, on the test's port, upstream and ``PATH`` where it names its own."""
    [line] = re.findall(r"^flags=\((.*--handover .*)\)$", UNITS, re.M)
    flags = shlex.split(line)
    printed = {flag: flags[flags.index(flag) + 1] for flag in ("--port", "--upstream", "--handover")}
    served = {printed["--port"]: str(port), printed["--upstream"]: upstream, printed["--handover"]: str(handover)}
    return [served.get(flag, flag) for flag in flags]


def activated(held: socket.socket, *gateway: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    """``mcp-sessions gateway`` with the socket ``held`` passed to it, as systemd passes a ``.socket`` unit's."""
    return started(*gateway, log=log, activating=held)


def started(*gateway: str, log: Path | None = None, activating: socket.socket | None = None) -> subprocess.Popen[bytes]:
    """``mcp-sessions gateway`` with flags ``gateway``, what it writes in ``log`` (else a pipe), and the socket
    ``activating`` passed to it where given."""
    command = said_as_root([sys.executable, "-m", "mcp_sessions", "gateway", *gateway])
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


@contextlib.contextmanager
def listening() -> Iterator[socket.socket]:
    """A loopback TCP socket, listening, as a ``.socket`` unit's ``ListenStream=127.0.0.1:PORT`` makes it."""
    with socket.create_server(("127.0.0.1", 0)) as held:
        yield held


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
        flags = (*the_units_gateway(held.getsockname()[1], upstream_url + "/mcp"), "--log-level", "warning")
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


def test_the_socket_activated_units_verify(tmp_path: Path) -> None:
    """deployment.md's ``mcp-sessions.socket`` and ``.service`` as printed, their ``ExecStart`` this environment's
    ``mcp-sessions``: ``systemd-analyze verify`` finds nothing to say of them."""
    verify = shutil.which("systemd-analyze")
    if verify is None:
        pytest.skip("systemd-analyze is not installed (the systemd package)")
    installed = str(Path(sys.executable).with_name("mcp-sessions"))
    for name in ("mcp-sessions.socket", "mcp-sessions.service"):
        (tmp_path / name).write_text(unit(name).replace("/usr/local/bin/mcp-sessions", installed))
    units = [str(tmp_path / "mcp-sessions.socket"), str(tmp_path / "mcp-sessions.service")]
    verified = subprocess.run([verify, "verify", *units], capture_output=True, text=True, timeout=WITHIN)
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
        flags = (*the_units_gateway(port, upstream_url + "/mcp"), "--log-level", "info")
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
        flags = (*the_handover_gateway(port, upstream_url + "/mcp", runtime / "handover"), "--log-level", "info")
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
