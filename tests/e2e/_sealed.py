"""What the tests of the gateway's sealed processes share (test_gateway_stdio_containment.py and the others): a
hostile stdio server (``SERVER``: JSON-RPC lines by hand, no SDK) whose tools do what a user's process may try, a real
``mcp-sessions gateway`` process in front of it, run as root, and clients of two users with JWKS-signed tokens.

What a test needs of the host (root, bubblewrap, util-linux's ``unshare``, a writable memory or pids control group) it
says through :func:`needs`: skipped without it, failed under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from _mcp import ModernClient, session_meta
from _redis import missing, only_skips
from _syscalls import TRY
from _uids import uids
from _waits import WITHIN
from conftest import SECRET
from e2e._gateway import Process, readable_directory, started
from e2e._issuer import ISSUER, signed

ANSWERING: Final = r"""
def send(message): sys.stdout.write(json.dumps(message) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message: continue
    method, params = message["method"], message.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "hostile", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": name, "inputSchema": {"type": "object"}} for name in TOOLS]}
    elif method == "tools/call":
        text = TOOLS[params["name"]](**params.get("arguments", {}))
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    else:  # server/discover: a 2025-11-25 server's answer
        send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "Method not found"}})
        continue
    send({"jsonrpc": "2.0", "id": message["id"], "result": result})
"""
"""The hostile servers' answering loop, over their ``TOOLS`` (each imports ``json`` and ``sys``): a server's
``initialize``, its tools listed and called, ``-32601`` for the rest."""
SERVER = (
    r"""
import ctypes, json, os, signal, socket, subprocess, sys, time
"""
    + TRY
    + r"""
def daemon(marker):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2): os.dup2(null, fd)
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", marker])
        os._exit(0)
    os.wait()
    return "started"
def tried(action):
    try: return action()
    except OSError as exc: return f"denied: {exc.strerror}"
def ptrace(pid):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, pid, 0, 0) == 0: return "attached"
    return f"denied: {os.strerror(ctypes.get_errno())}"
def fork(count, mib=0):
    started = 0
    for _ in range(count):
        try: pid = os.fork()
        except OSError as exc: return f"{started} started, then {exc.strerror}"
        if pid == 0: held = bytearray(mib << 20); time.sleep(600); os._exit(0)
        started += 1
    return f"{started} started"
def whoami():
    pids = [pid for pid in os.listdir("/proc") if pid.isdigit()]
    return json.dumps({"pid": os.getpid(), "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
                       "cwd": os.getcwd(), "environ": dict(os.environ), "pids": pids})
def loopback():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        socket.create_connection(listener.getsockname(), 5).close()
    return "connected"
def spin():
    if os.fork() == 0:
        while True: pass
    return "spinning"
def stall():
    print("stalled", file=sys.stderr, flush=True)
    time.sleep(600)
def resolve(host):
    try: return sorted({found[4][0] for found in socket.getaddrinfo(host, 80, proto=socket.IPPROTO_TCP)})[0]
    except OSError as exc: return f"denied: {exc}"
def abstract(name):
    with socket.socket(socket.AF_UNIX) as unix: unix.connect("\0" + name)
    return "connected"
def listening():
    lines = [line.split() for line in open("/proc/net/tcp").readlines()[1:]]
    return json.dumps(sorted({int(line[1].split(":")[1], 16) for line in lines if line[3] == "0A"}))
def tun():
    import fcntl, struct
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000 | 0x40000000):  # CLONE_NEWUSER | CLONE_NEWNET: where it would hold CAP_NET_ADMIN
        return f"denied: {os.strerror(ctypes.get_errno())}"
    fcntl.ioctl(os.open("/dev/net/tun", os.O_RDWR), 0x400454CA, struct.pack("16sH", b"its-own", 1))  # TUNSETIFF, TUN
    return "made"
def key(number, serial):
    libc = ctypes.CDLL(None, use_errno=True)
    size = libc.syscall(ctypes.c_long(number), ctypes.c_long(11), ctypes.c_long(serial), None, ctypes.c_long(0))
    return f"read {size} bytes" if size >= 0 else f"denied: {os.strerror(ctypes.get_errno())}"
HELD = []
UDP = {}
def udp(port):
    UDP[port] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    UDP[port].bind(("0.0.0.0", port))
    UDP[port].setblocking(False)
    return "bound"
def received(port):
    try: return UDP[port].recv(100).decode()
    except BlockingIOError: return "nothing"
def deep(path, depth):
    here = os.getcwd()
    os.chdir(path)
    for _ in range(depth): os.mkdir("d"); os.chdir("d")
    os.chdir(here)
    return "made"
TOOLS = {"daemon": daemon, "deep": deep, "whoami": whoami, "stall": stall, "ptrace": ptrace, "fork": fork,
         "read": lambda path: tried(lambda: open(path).read()[:100]),
         "listdir": lambda path: tried(lambda: json.dumps(os.listdir(path))),
         "write": lambda path: tried(lambda: str(open(path, "w").write("mine"))),
         "mkdir": lambda path: tried(lambda: os.mkdir(path) or os.chmod(path, 0o777) or "made"),
         "hangup": lambda: os.close(1) or time.sleep(600),
         "userns": lambda: "made" if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0
                           else f"denied: {os.strerror(ctypes.get_errno())}",
         "fill": lambda path, mib: tried(lambda: fill(path, mib)),
         "remount": lambda: tried(lambda: ctypes.CDLL(None, use_errno=True).mount(None, b"/", None, 32, None) == 0
                                  and "remounted" or os.strerror(ctypes.get_errno())),
         "chmod": lambda path, mode: tried(lambda: os.chmod(path, mode) or "changed"),
         "signal": lambda pid, sig: tried(lambda: os.kill(pid, sig) or "sent"),
         "allocate": lambda mib: str(len(bytearray(mib << 20))),
         "mode": lambda path: tried(lambda: oct(os.stat(path).st_mode & 0o7777)),
         "connect": lambda port, host="127.0.0.1": tried(lambda: socket.create_connection((host, port), 5).close()
                                                         or "connected"),
         "loopback": loopback, "spin": spin, "resolve": resolve, "listening": listening,
         "abstract": lambda address: tried(lambda: abstract(address)),
         "hold": lambda port: tried(lambda: HELD.append(socket.create_server(("127.0.0.1", port))) or "bound"),
         "syscalls": lambda calls: syscalls(calls), "tun": lambda: tried(tun), "key": key,
         "run": lambda argv: json.dumps(vars(subprocess.run(argv, capture_output=True, text=True, check=False))),
         "udp": lambda port: tried(lambda: udp(port)), "received": received,
         "send": lambda port, host, to: tried(lambda: UDP[port].sendto(b"out", (host, to)) and "sent"),
         "big": lambda: "read"}
def fds():
    return json.dumps({fd: os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                       if os.path.exists(f"/proc/self/fd/{fd}")})
def fill(path, mib):
    with open(path, "wb") as file:
        for _ in range(mib): file.write(bytes(1 << 20))  # a MiB at a time: its own memory stays small
    return "filled"
def ptys():
    held, failed = [], None
    while failed is None:
        try: held.append(os.openpty())
        except OSError as exc: failed = exc.strerror
    HELD.extend(held)  # until the process ends
    return f"{len(held)} opened, then {failed}"
def unix(path):
    with socket.socket(socket.AF_UNIX) as unix: unix.connect(path)
    return "connected"
def buffered(count):
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with socket.create_server(("127.0.0.1", 0), backlog=count) as listener:
        for _ in range(count):
            sender = socket.create_connection(listener.getsockname(), 5)
            HELD.extend((sender, listener.accept()[0]))
            sender.setblocking(False)
            try:
                while True: sender.send(bytes(1 << 16))
            except BlockingIOError: pass
    return "held"
TOOLS.update({"fds": fds, "hostname": socket.gethostname, "ptys": ptys, "buffered": buffered,
              "unix": lambda path: tried(lambda: unix(path))})
"""
    + ANSWERING
)
OPEN: list[httpx.Client] = []
UIDS = uids(100, 100)
SECRETS = {"alice": "alice-s-secret-0001", "bob": "bob-s-secret-0002"}
PRIVATE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")  # a contained process's own
AUTH = (
    "--auth-jwks",
    "http://127.0.0.1:1/k",
    "--auth-issuer",
    "https://i.example",
    "--auth-audience",
    "https://a.example",
)
"""Flags of a gateway's authentication for the tests of its startup: a JWKS no fetch reaches (port 1)."""


def needs(*features: str) -> None:
    """Skip the test without a host feature it needs (fail it under CI): ``root``, ``bwrap``, ``unshare``, or a
    control group the gateway may create, ``cgroup-memory``, ``cgroup-pids`` or ``cgroup-cpu`` (v2 delegated, or v1
    writable)."""
    __tracebackhide__ = only_skips
    for feature in features:
        if feature == "root" and os.geteuid() != 0:
            missing("this test needs root: the gateway gives each process a uid of its own")
        if feature in ("bwrap", "unshare") and shutil.which(feature) is None:
            missing(
                f"{feature} is not installed (Debian: apt-get install bubblewrap util-linux; scripts/system-deps.sh)"
            )
        if feature.startswith("cgroup-") and not _cgroup_writable(feature.removeprefix("cgroup-")):
            missing(f"this test needs a {feature.removeprefix('cgroup-')} control group the gateway may create")


def _cgroup_writable(controller: str) -> bool:
    from mcp_sessions._gateway.sealed._cgroups import Bounds

    bounds = {"memory": (1 << 30, None, None), "pids": (None, 64, None), "cpu": (None, None, 0.5)}[controller]
    return Bounds.found(*bounds) is not None


@contextlib.contextmanager
def hostile() -> Iterator[str]:
    """The hostile server's command, its file in a directory any user may read (its processes run as other users) and
    a contained process sees (not its own /tmp)."""
    with readable_directory("mcp-sessions-hostile-") as directory:
        path = Path(directory, "hostile.py")
        path.write_text(SERVER)
        path.chmod(0o644)
        yield f"/usr/bin/python3 {path}"


@contextlib.contextmanager
def gateway(
    server: str, *options: str, environ: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> Iterator[Process]:
    """The gateway command in front of ``server`` (``{url}`` in ``options``: its own MCP URL)."""

    def command(port: int) -> tuple[list[str], dict[str, str]]:
        line = [*prefix, sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(port), "--log-level", "info"]
        given = [option.replace("{url}", f"http://127.0.0.1:{port}/mcp") for option in options]
        warm = () if "--warm" in options else ("--warm", "0")  # every process a test starts is one it uses
        return [*line, "--stdio", server, *given, *warm], environ or {"MCP_SESSIONS_SECRET": SECRET}

    process = started("mcp-sessions gateway --stdio", command)
    try:
        yield process
    except BaseException:
        print(f"the gateway's log:\n{process.output()}")  # beside the failure, in pytest's captured stdout
        raise
    finally:
        if process.process is not None:  # the gateway's own shutdown, which ends its processes (SIGKILL would not)
            process.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.process.wait(timeout=WITHIN)
        process.stop()
        while OPEN:
            OPEN.pop().close()


@contextlib.contextmanager
def shared(process: Process, request: pytest.FixtureRequest) -> Iterator[Process]:
    """``process``, a gateway a module's tests share (a module-scoped fixture's), for the test of ``request``: its log
    printed beside the test's failure, as :func:`gateway` prints its own, and the test's clients closed after it."""
    failed, opened = request.session.testsfailed, len(OPEN)
    try:
        yield process
    finally:
        if request.session.testsfailed > failed:  # the test's call failed: its report is made before its teardown
            print(f"the gateway's log:\n{process.output()}")
        while len(OPEN) > opened:
            OPEN.pop().close()


def team(jwks: str) -> tuple[str, ...]:
    """The options of the docs' team recipe: tokens from ``jwks``, each user's secret in their own processes, a uid
    of its own for each process."""
    verifying = ("--auth-jwks", jwks, "--auth-issuer", ISSUER, "--auth-audience", "{url}")
    return (*verifying, "--process-env", "USER_SECRET=header:X-Secret", "--process-uids", UIDS)


def client(process: Process, timeout: float = 30.0, user: str | None = None) -> ModernClient:
    """A client of the gateway's (``user``'s: their token and secret), closed with it."""
    headers = {}
    if user is not None:
        claims = {"iss": ISSUER, "aud": f"http://127.0.0.1:{process.port}/mcp", "sub": user}
        token = signed({**claims, "exp": int(time.time()) + 600})
        headers = {"Authorization": f"Bearer {token}", "X-Secret": SECRETS[user]}
    OPEN.append(http := httpx.Client(timeout=timeout, headers=headers))
    return ModernClient(http, f"http://127.0.0.1:{process.port}")


def call(mcp: ModernClient, name: str, session: dict[str, Any] | None = None, **arguments: Any) -> dict[str, Any]:
    _, message = mcp.call_tool(name, arguments, session=None if session is None else session_meta(session))
    return message


def text(message: dict[str, Any]) -> str:
    assert "result" in message, message
    found: str = message["result"]["content"][0]["text"]
    return found


def running(marker: str) -> list[int]:
    """The pids of live (not zombie) processes whose argv holds ``marker``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if marker.encode() in cmdline.read_bytes():
                state = (cmdline.parent / "stat").read_text().rpartition(")")[2].split()[0]
                if state != "Z":
                    found.append(int(cmdline.parent.name))
    return found


def of_uid(uid: int) -> list[int]:
    """The pids of the host's processes whose real uid is ``uid`` (as the host sees them, outside any namespace)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError):
            if f"\nUid:\t{uid}\t" in status.read_text():
                found.append(int(status.parent.name))
    return found
