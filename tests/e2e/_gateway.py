"""What the gateway tests run for real: server-everything (node), the TypeScript SDK client, the conformance suite,
``mcp-sessions gateway`` as a command, and an ``MCPServer`` upstream that says what it saw of each request.

The node packages come from ``scripts/system-deps.sh`` (pinned, in ``.cache/``). Without them the tests that
need them skip, and under CI (``CI`` set) they fail: ``_redis.missing``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import io
import json
import logging
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar, cast

import anyio
import httpx
import httpx2
from mcp.server.mcpserver import Context, MCPServer
from starlette.testclient import TestClient
from starlette.types import Message, Receive, Scope, Send

from _mcp import MODERN, era_session, legacy_request, messages, modern_headers, modern_request, replaying
from _redis import end_process, free_port, missing, only_skips, until_listening
from conftest import serve
from mcp_sessions import get_session
from mcp_sessions._cli import main
from mcp_sessions._gateway._cli import _app, _install, _running, add_arguments, configured, configured_file

MAIN = Path(__file__).resolve().parents[2]
CACHE = MAIN / ".cache"
# What the tests' own processes import: the checkout's package, the tests' modules, and the run's (its census).
PYTHONPATH = os.pathsep.join(filter(None, [f"{MAIN}/middleware", f"{MAIN}/tests", os.environ.get("PYTHONPATH")]))
EVERYTHING = CACHE / "everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
TS_SDK = CACHE / "everything/node_modules/@modelcontextprotocol/sdk/dist/esm"
NODE22 = CACHE / "node22/node_modules/node/bin/node"
CONFORMANCE = CACHE / "conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"
# The pinned MCP Inspector's CLI, as the node packages above; MCP_SESSIONS_INSPECTOR_CLI overrides where it is.
INSPECTOR_CLI = os.environ.get("MCP_SESSIONS_INSPECTOR_CLI") or str(
    CACHE / "inspector/node_modules/@modelcontextprotocol/inspector/clients/cli/build/index.js"
)
JSON_SSE = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
SECRET = "gateway-test-secret-gateway-test-secret-0123"
G = TypeVar("G", "Process", "InProcess")
INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


def installed(path: Path, what: str) -> Path:
    """``path``, which ``scripts/system-deps.sh`` installs; skips the test without it (fails it under CI)."""
    __tracebackhide__ = only_skips
    if not path.exists():
        missing(f"{what} is not installed ({path.relative_to(MAIN)}): run scripts/system-deps.sh")
    return path


@contextlib.contextmanager
def readable_directory(prefix: str) -> Iterator[Path]:
    """A new directory every user may read (mode 0755), which a contained process sees as the host does: not under
    /tmp, /var/tmp, /dev/shm or /run/lock, each process's own under bwrap or unshare (the gateway's default), but
    under /var/lib as root (else in the checkout, the tests' user's)."""
    parent = Path("/var/lib") if os.geteuid() == 0 else MAIN
    with tempfile.TemporaryDirectory(prefix=prefix, dir=parent) as directory:
        os.chmod(directory, 0o755)
        yield Path(directory)


@contextlib.contextmanager
def for_every_uid(path: Path, tree: Path | None = None) -> Iterator[Path]:
    """``path``, a file of the checkout that processes of other uids run (``--process-uids``), where they can read it:
    itself, else (in a clone under /root, mode 0700, say) in a copy of ``tree`` (its own directory by default; hard
    links where they can be) in a directory every user may read."""
    if all(d.stat().st_mode & stat.S_IXOTH for d in path.parents) and path.stat().st_mode & stat.S_IROTH:
        yield path
        return
    tree = tree or path.parent
    with readable_directory("mcp-sessions-checkout-") as directory:
        linked_tree(str(tree), directory / tree.name)
        yield directory / tree.name / path.relative_to(tree)


@contextlib.contextmanager
def checkout_every_uid_imports(prefix: str) -> Iterator[tuple[Path, str]]:
    """A new :func:`readable_directory`, and the ``PYTHONPATH`` with which a process of any uid (the gateway run as a
    user, or as a container's root) imports this checkout's package and its dependencies (:func:`for_every_uid`)."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    with (
        readable_directory(prefix) as top,
        for_every_uid(MAIN / "middleware/mcp_sessions/__init__.py", MAIN / "middleware") as ours,
        for_every_uid(purelib / "mcp/__init__.py", purelib) as theirs,
    ):
        yield top, f"{ours.parents[1]}:{theirs.parents[1]}"


def python_every_uid_runs() -> str:
    """This interpreter where a process of any uid can run it, by its path and the binary's, else the system's of its
    minor version: one under a 0700 home (pyenv's, or a virtual environment's in a clone under /root) is no other
    uid's to run, and ``--process-uids`` processes run their server as their own uid. Skipped (failed under CI) in
    one line where there is none."""
    __tracebackhide__ = only_skips
    paths = (Path(sys.executable), Path(sys.executable).resolve())
    if all(os.stat(up).st_mode & stat.S_IXOTH for path in paths for up in path.parents):
        return sys.executable
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.access(system, os.X_OK):
        missing(
            f"{sys.executable} is not the processes' own uids' to run, and there is no {system}: install one they may"
        )
    return system


def linked_tree(source: str, destination: Path) -> None:
    """The tree ``source`` at ``destination`` too, its files hard links (copies across file systems): where other uids
    may read them, though not in ``source`` (a clone under /root, mode 0700)."""

    def link(file: str, to: str) -> None:
        try:
            os.link(file, to)
        except OSError:
            shutil.copy2(file, to)

    shutil.copytree(source, destination, copy_function=link, dirs_exist_ok=True)


def node() -> str:
    __tracebackhide__ = only_skips
    binary = shutil.which("node")
    if binary is None:
        missing("node is not installed: run scripts/system-deps.sh")
        raise AssertionError("unreachable")
    return binary


def said_as_root(line: Sequence[str]) -> list[str]:
    """``line``, and where it starts a gateway of stdio servers (``--stdio``, ``--config``) as root, what the tests'
    gateways say to run their processes as root, as they did before a gateway refused it unless told so
    (``--accept-root-processes``): each test that seals its processes gives ``--process-uids`` (or ``--process-user``)
    itself, and the refusal's test starts its gateway with neither."""
    gateway = "gateway" in line and ("--stdio" in line or "--config" in line)
    if gateway and os.geteuid() == 0 and "--accept-root-processes" not in line:
        return [*line, "--accept-root-processes"]
    return list(line)


class Process:
    """A server process on a free loopback port, its output in a file; stopped (killed if it must be) by ``stop``."""

    def __init__(self, name: str, command: Sequence[str], environ: Mapping[str, str], port: int) -> None:
        self.name, self.port = name, port
        self._log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        inherited = {key: value for key, value in os.environ.items() if not key.startswith("MCP_SESSIONS_")}
        self.process: subprocess.Popen[bytes] | None = subprocess.Popen(
            said_as_root(command),
            cwd=MAIN,
            env={**inherited, **environ},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a group of its own, which end_process ends
        )
        try:
            until_listening(self.process, port, name, self.output)  # RuntimeError if it exits: started() tries again
        except BaseException:  # never listening, or the test stopped meanwhile (pytest-timeout): nothing left
            self.stop()
            raise

    def url(self, path: str = "/mcp") -> str:
        """The URL of ``path`` on this process's port."""
        return f"http://127.0.0.1:{self.port}{path}"

    def log(self) -> bytes:
        """Everything the process wrote so far, stdout and stderr."""
        self._log.seek(0)
        return self._log.read()

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]

    def stop(self) -> bytes:
        """End the process (SIGTERM: it flushes what it buffers; SIGKILL if it must); all it wrote (none the second
        time)."""
        process, self.process = self.process, None
        if process is not None:
            end_process(process)
        written = b"" if self._log.closed else self.log()
        self._log.close()
        return written


@contextlib.contextmanager
def everything_server() -> Iterator[str]:
    """``@modelcontextprotocol/server-everything`` (streamable HTTP, 2025-11-25) on a free port: its MCP URL."""
    script = installed(EVERYTHING, "@modelcontextprotocol/server-everything")
    server = started("server-everything", lambda port: ([node(), str(script), "streamableHttp"], {"PORT": str(port)}))
    try:
        yield f"http://127.0.0.1:{server.port}/mcp"
    finally:
        server.stop()


@contextlib.contextmanager
def gateway_process(
    upstreams: Sequence[str],
    *arguments: str,
    environ: Mapping[str, str] | None = None,
    program: Sequence[str] = (sys.executable, "-m", "mcp_sessions"),
) -> Iterator[Process]:
    """``mcp-sessions gateway --upstream …`` as its own process (``program``: ``opentelemetry-instrument
    mcp-sessions`` say), its port and its output (``--log-level`` in ``arguments`` overrides ``warning``;
    ``{url}`` in them is its own MCP URL)."""
    environ = {"MCP_SESSIONS_SECRET": SECRET, **(environ or {})}
    arguments = _as_tests_run(arguments)

    def command(port: int) -> tuple[list[str], Mapping[str, str]]:
        line = [*program, "gateway", "--port", str(port), "--log-level", "warning"]
        given = [argument.replace("{url}", f"http://127.0.0.1:{port}/mcp") for argument in arguments]
        return [*line, *(item for url in upstreams for item in ("--upstream", url)), *given], environ

    with _logged_on_failure(started("mcp-sessions gateway", command)) as gateway:
        yield gateway


def _as_tests_run(arguments: Sequence[str]) -> tuple[str, ...]:
    """``arguments``, and with ``--stdio`` what the tests' servers need where a test gives none of its own: the
    tests' modules and files passed on (they import the one and write the other), a process per conversation, none
    started ahead (but by the pool's own tests), and no containment: their pids tell processes apart, and pytest's
    tmp_path is where they leave files for the test (under the default, each would be pid 2 in a /tmp of its own)."""
    if "--stdio" not in arguments:
        return tuple(arguments)
    defaults = {"--processes": "per-conversation", "--warm": "0", "--process-containment": "none"}
    unset = [item for flag, value in defaults.items() if flag not in arguments for item in (flag, value)]
    return (*arguments, "--pass-env", "PYTHONPATH", "--pass-env", "STDIO_TEST_FILES", *unset)


@contextlib.contextmanager
def _logged_on_failure(gateway: G) -> Iterator[G]:
    """``gateway``, its log printed beside a failure (in pytest's captured stdout), stopped at the end."""
    try:
        yield gateway
    except BaseException:
        print(f"the gateway's log:\n{gateway.output()}")
        raise
    finally:
        gateway.stop()


class InProcess:
    """A gateway built and served in this process (``gateway_in_process``): what a test of its answers reads of a
    ``Process``, its port, its URLs and its log; ``stop`` ends it as the command ends (its lifespan's end: its
    processes stopped, their last lines logged) and gives all it logged."""

    def __init__(self, port: int, stack: contextlib.ExitStack, logged: io.StringIO) -> None:
        self.port, self._stack, self._logged = port, stack, logged

    def url(self, path: str = "/mcp") -> str:
        """The URL of ``path`` on this gateway's port."""
        return f"http://127.0.0.1:{self.port}{path}"

    def log(self) -> bytes:
        """Everything the gateway logged so far."""
        return self._logged.getvalue().encode()

    def output(self) -> str:
        return self._logged.getvalue()[-4000:]

    def stop(self) -> bytes:
        """End the gateway (once; again does nothing): all it logged."""
        self._stack.close()
        return self.log()


@contextlib.contextmanager
def gateway_in_process(
    upstreams: Sequence[str], *arguments: str, environ: Mapping[str, str] | None = None
) -> Iterator[InProcess | Process]:
    """``gateway_process``'s gateway without a process of its own, for a test whose subject is the app's answers and
    log, not the process: its flags parsed by the command's parser, then ``configured`` (``configured_file`` with
    ``--config``) and ``_app`` as ``run`` calls them, its sandboxes installed and closed as ``run`` does (the
    gateway's own seal, ``seal_gateway``, is the process's: not this test process's), served by uvicorn in a thread
    on a free loopback port (``serve``). Its log (``mcp_sessions``' loggers at ``--log-level``, ``warning`` unless
    given, from its configuration on) is what ``stop`` gives. A new interpreter cost 0.75 CPU-seconds, ``import
    mcp`` 0.64 of them. Its own process all the same (``gateway_process``) where its processes' bounds are cgroup
    v2's: that gateway moves itself into a group of its own, which would keep this test process."""
    given = _as_tests_run(arguments)
    for tries in range(3, 0, -1):  # again on another port if the first was taken meanwhile, as started() does
        try:
            gateway = _served([*(item for url in upstreams for item in ("--upstream", url)), *given], environ)
            break
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or tries == 1:
                raise
    if gateway is None:
        with gateway_process(upstreams, *arguments, environ=environ) as process:
            yield process
        return
    with _logged_on_failure(gateway) as served:
        yield served


def _served(arguments: Sequence[str], environ: Mapping[str, str] | None) -> InProcess | None:
    """:func:`gateway_in_process`'s gateway on a free port, serving; None where its bounds are cgroup v2's."""
    port = free_port()
    line = ["--port", str(port), "--log-level", "warning"]
    line += [argument.replace("{url}", f"http://127.0.0.1:{port}/mcp") for argument in arguments]
    line = said_as_root(["gateway", *line])[1:]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(line)
    args.command_line = line  # main's: the flags given, which a --config file's yield to
    inherited = {key: value for key, value in os.environ.items() if not key.startswith("MCP_SESSIONS_")}
    given = {**inherited, "MCP_SESSIONS_SECRET": SECRET, **(environ or {})}
    logged = io.StringIO()
    handler = logging.StreamHandler(logged)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    logger = logging.getLogger("mcp_sessions")
    with contextlib.ExitStack() as stack:
        stack.callback(logger.setLevel, logger.level)
        stack.callback(logger.removeHandler, handler)
        logger.addHandler(handler)
        logger.setLevel(args.log_level.upper())
        config = configured(args, given) if args.config is None else configured_file(args, given)
        if any(each.sandbox and each.sandbox.bounds and each.sandbox.bounds.version == 2 for each in config.each):
            return None
        app, sandbox = _app(config)
        running = _running(app, sandbox)

        @stack.callback
        def release() -> None:
            for made in running():
                made.close()

        _install(running())
        stack.enter_context(serve(app, port=port))
        return InProcess(port, stack.pop_all(), logged)


def gateway_run(*arguments: str, within: float = 90) -> subprocess.CompletedProcess[str]:
    """``mcp-sessions gateway ARGUMENTS`` as its own process, run to its end (a gateway that fails to start ends by
    itself) within ``within`` seconds: its exit status and its output."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith("MCP_SESSIONS_")}
    line = said_as_root([sys.executable, "-m", "mcp_sessions", "gateway", *arguments])
    environ["MCP_SESSIONS_SECRET"] = SECRET
    return subprocess.run(line, capture_output=True, text=True, env=environ, timeout=within, check=False)


def stopped_as_it_starts(*arguments: str, within: float = 90) -> tuple[int, str, float]:
    """``mcp-sessions gateway ARGUMENTS`` as its own process, sent SIGTERM once uvicorn says "Waiting for application
    startup" (the app's start begins: uvicorn hears signals from then): its exit status, what it said after the
    signal, and how long (seconds) it took to end, within ``within``; nothing of its session left."""
    line = said_as_root([sys.executable, "-m", "mcp_sessions", "gateway", *arguments])
    environ = {**os.environ, "MCP_SESSIONS_SECRET": SECRET}
    with subprocess.Popen(line, env=environ, stderr=subprocess.PIPE, text=True, start_new_session=True) as gateway:
        try:
            assert gateway.stderr is not None
            said = ""
            while "Waiting for application startup" not in said:
                said = gateway.stderr.readline()
                assert said, "the gateway ended before its app's start"
            gateway.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            left = gateway.communicate(timeout=within)[1]
            return gateway.returncode, left, time.monotonic() - sent
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(gateway.pid, signal.SIGKILL)


def main_run(
    *arguments: str, environ: Mapping[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """``mcp-sessions ARGUMENTS`` run by ``main`` in this process, in ``environ`` alone but for the test's state
    directory (conftest's ``STATE_DIRECTORY``): its exit status, its output."""
    out, err = io.StringIO(), io.StringIO()
    given = {"STATE_DIRECTORY": os.environ["STATE_DIRECTORY"], **(environ or {})}
    status = main(said_as_root(arguments), stdin=io.StringIO(stdin), stdout=out, stderr=err, environ=given)
    return subprocess.CompletedProcess(arguments, status, out.getvalue(), err.getvalue())


def started(name: str, command: Callable[[int], tuple[list[str], Mapping[str, str]]], tries: int = 3) -> Process:
    """``command`` for a free port, started; again on another port if the first was taken meanwhile (by
    another test worker: a free port is free only until someone binds it)."""
    for _ in range(tries - 1):
        port = free_port()
        with contextlib.suppress(RuntimeError):
            return Process(name, *command(port), port)
    port = free_port()
    return Process(name, *command(port), port)


def accepted_option(pid: int, port: int, level: int, option: int) -> int:
    """Socket option ``option`` of a connection process ``pid`` accepted on ``port``, read on the process's own
    socket: a connection to that port is made, answered (a request the server reads and answers, so that its end is
    accepted and held open), found in the process's table of sockets by its peer's port, and taken from it with
    ``pidfd_getfd`` (Linux 5.6; the tests' processes are their children, which they may trace)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert client.recv(1), "the server closed the connection without an answer"
        peer = client.getsockname()[1]
        local = f"0100007F:{port:04X}"
        remote = f"0100007F:{peer:04X}"
        with open(f"/proc/{pid}/net/tcp", encoding="ascii") as table:
            [inode] = [row.split()[9] for row in table if row.split()[1:3] == [local, remote]]
        fds = Path(f"/proc/{pid}/fd")
        [fd] = [int(entry.name) for entry in fds.iterdir() if os.readlink(entry) == f"socket:[{inode}]"]
        pidfd = os.pidfd_open(pid)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            taken = libc.syscall(438, pidfd, fd, 0)  # SYS_pidfd_getfd, one number on every architecture
            assert taken >= 0, os.strerror(ctypes.get_errno())
        finally:
            os.close(pidfd)
        with socket.socket(fileno=taken) as accepted:
            return accepted.getsockopt(level, option)


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """Process ``pid``'s resident memory in KiB (``VmHWM``: its peak), as Linux counts it."""
    status = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith(field + ":"))


def run_node(source: str, *arguments: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``source`` (an ES module) run by node beside the TypeScript SDK, which node resolves its imports from."""
    __tracebackhide__ = only_skips
    sdk = installed(TS_SDK, "@modelcontextprotocol/sdk")
    script = sdk.parents[4] / f"script-{uuid.uuid4().hex}.mjs"  # in .cache/everything, beside node_modules
    script.write_text(source, encoding="utf-8")
    try:
        command = [node(), str(script), *arguments]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        script.unlink()


def run_recipe(url: str, timeout: float) -> dict[str, Any]:
    """docs/gateway.md's TypeScript SDK recipe, run as written against the gateway at ``url``: what it saw."""
    [recipe] = re.findall(r"```js\n(.*?)```", (MAIN / "docs" / "gateway.md").read_text(encoding="utf-8"), re.S)
    done = run_node(recipe, url, timeout=timeout)
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout)
    assert seen["tools"] > 0
    assert seen["text"] == "Echo: hello"
    assert seen["echo"] == seen["session"]  # the session the gateway echoed is the one the recipe created
    return seen


def upstream_server(name: str, **options: Any) -> MCPServer:
    """An ``MCPServer`` whose tools say what the upstream saw: which replica, which headers."""
    server = MCPServer(name, **options)

    @server.tool()
    async def seen(ctx: Context) -> str:
        """This replica's name, and the request's headers as the upstream got them."""
        request = ctx.request_context.request
        headers = {} if request is None else dict(request.headers)
        return json.dumps({"replica": name, "headers": headers, "session": get_session() is not None})

    @server.tool()
    async def echo(message: str) -> str:
        """The message."""
        return message

    @server.tool()
    async def slow(seconds: float, ctx: Context) -> str:
        """A progress notification at once, then the answer after ``seconds``."""
        await ctx.report_progress(1, 2)
        await anyio.sleep(seconds)
        return "done"

    return server


class Disconnects:
    """An ASGI wrapper that counts the ``http.disconnect`` messages its app receives (a client that went away)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.count = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def watched() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.count += 1
            return message

        await self.app(scope, watched if scope["type"] == "http" else receive, send)


def result_of(response: httpx.Response | httpx2.Response, request_id: object) -> dict[str, Any]:
    """The message that answers ``request_id``."""
    return next(m for m in messages(cast(httpx.Response, response)) if m.get("id") == request_id)


def legacy_initialize(
    http: httpx.Client | TestClient,
    url: str,
    headers: Mapping[str, str] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """A 2025-11-25 handshake (``meta`` in its ``params._meta``); the headers every later request of it sends (its
    transport session's among them)."""
    body = legacy_request("initialize", INITIALIZE, id=0, meta=meta)
    response = http.post(url, json=body, headers={**JSON_SSE, **(headers or {})})
    assert response.status_code == 200, response.text
    later = {**JSON_SSE, **(headers or {}), "MCP-Protocol-Version": "2025-11-25"}
    if (session_id := response.headers.get("mcp-session-id")) is not None:
        later["Mcp-Session-Id"] = session_id
    initialized = http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=later)
    assert initialized.status_code == 202, initialized.text
    return later


def seen_legacy(http: httpx.Client, url: str, headers: Mapping[str, str], meta: Mapping[str, Any] | None = None) -> Any:
    """What the replica that answered a 2025-era ``seen`` call saw: its name, the headers it got."""
    body = legacy_request("tools/call", {"name": "seen", "arguments": {}}, id=3, meta=meta)
    response = http.post(url, json=body, headers=headers)
    assert response.status_code == 200, response.text
    return json.loads(result_of(response, 3)["result"]["content"][0]["text"])


def created(http: httpx.Client, url: str) -> str:
    """A new session's token, from a 2026-07-28 ``sessions/create``."""
    return era_session(http, url, MODERN)


def replica_of(http: httpx.Client, url: str, meta: Mapping[str, Any] | None = None) -> str:
    """The upstream replica that answers a 2026-07-28 ``seen`` call with ``meta`` (a session, a host's conversation)."""
    body = modern_request("tools/call", {"name": "seen", "arguments": {}}, id=2, meta=meta)
    response = http.post(url, json=body, headers=modern_headers(body))
    assert response.status_code == 200, response.text
    name: str = json.loads(result_of(response, 2)["result"]["content"][0]["text"])["replica"]
    return name


@dataclass
class Seen:
    """One request as the upstream received it."""

    method: str
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v.decode("latin-1") for k, v in self.headers if k == name.encode()), None)

    def methods(self) -> list[str]:
        """The JSON-RPC methods of the body, if it is JSON-RPC."""
        try:
            parsed = json.loads(self.body)
        except ValueError:
            return []
        messages = parsed if isinstance(parsed, list) else [parsed]
        return [m["method"] for m in messages if isinstance(m, dict) and isinstance(m.get("method"), str)]

    def blob(self) -> bytes:
        """Everything the upstream got of this request, in one piece to search."""
        return b"\n".join([self.target, *(name + b": " + value for name, value in self.headers), self.body])


class Recorder:
    """An upstream that keeps every request it gets, read whole, then lets ``app`` answer it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[Seen] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False) and message["type"] == "http.request"
        query = scope.get("query_string", b"")
        target = scope.get("raw_path", b"") + (b"?" + query if query else b"")
        self.seen.append(Seen(scope["method"], target, list(scope["headers"]), body))
        await self.app(scope, replaying({"type": "http.request", "body": body, "more_body": False}, receive), send)

    def since(self, count: int) -> list[Seen]:
        return self.seen[count:]


SPEC_VERSION = "2025-11-25"  # cumulative: every server scenario of the 2025 era
Outcomes = dict[tuple[str, str], list[str]]


def run_suite(url: str, out: Path, spec_version: str = SPEC_VERSION) -> Outcomes:
    """Every check of every server scenario, by (scenario, check id): its statuses, in order."""
    __tracebackhide__ = only_skips
    node, suite = installed(NODE22, "Node 22 (the node@22 package)"), installed(CONFORMANCE, "the conformance suite")
    done = subprocess.run(
        [str(node), str(suite), "server", "--url", url, "--spec-version", spec_version, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    outcomes: Outcomes = {}
    for checks in sorted(out.glob("*/checks.json")):
        scenario = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", checks.parent.name)
        for check in json.loads(checks.read_text()):
            outcomes.setdefault((scenario, check["id"]), []).append(check["status"])
    assert outcomes, done.stdout + done.stderr
    return outcomes
