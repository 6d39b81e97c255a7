"""``mcp-sessions gateway --stdio``'s processes contained: what they inherit, as whom they run, what they may hold,
and that nothing they start outlives them. A real gateway process in front of a hostile stdio server the tests write
(``SERVER``: JSON-RPC lines by hand, no SDK), reached by raw 2026-07-28 requests.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from _mcp import ModernClient, session_meta
from conftest import SECRET
from e2e._gateway import Process, rss_kib, started
from e2e._stdio import until

SERVER = r"""
import json, os, sys, time
def send(message): sys.stdout.write(json.dumps(message) + "\n"); sys.stdout.flush()
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
def read(path):
    try: return open(path).read()[:100]
    except OSError as exc: return f"denied: {exc.strerror}"
def whoami():
    uid = [line.split()[1] for line in open("/proc/self/status") if line.startswith("Uid:")][0]
    return json.dumps({"pid": os.getpid(), "uid": int(uid), "cwd": os.getcwd(), "environ": sorted(os.environ)})
def stall():
    print("stalled", file=sys.stderr, flush=True)
    time.sleep(600)
TOOLS = {"daemon": daemon, "read": read, "whoami": whoami, "stall": stall,
         "allocate": lambda mib: str(len(bytearray(mib << 20))),
         "big": lambda: "read"}
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message: continue
    method, params = message["method"], message.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "hostile", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": name, "inputSchema": {"type": "object"}} for name in TOOLS]}
    else:
        text = TOOLS[params["name"]](**params.get("arguments", {}))
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    send({"jsonrpc": "2.0", "id": message["id"], "result": result})
"""
WITHIN = 10.0
OPEN: list[httpx.Client] = []


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The hostile server's file, in a directory any user may read (the gateway may run as ``nobody``)."""
    with tempfile.TemporaryDirectory() as directory:
        os.chmod(directory, 0o755)
        path = Path(directory, "hostile.py")
        path.write_text(SERVER)
        path.chmod(0o644)
        yield f"/usr/bin/python3 {path}"


@contextlib.contextmanager
def gateway(
    server: str, *options: str, environ: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> Iterator[Process]:
    def command(port: int) -> tuple[list[str], dict[str, str]]:
        line = [*prefix, sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(port), "--log-level", "info"]
        return [*line, "--stdio", server, *options], environ or {"MCP_SESSIONS_SECRET": SECRET}

    process = started("mcp-sessions gateway --stdio", command)
    try:
        yield process
    finally:
        if process.process is not None:  # the gateway's own shutdown, which ends its processes (SIGKILL would not)
            process.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.process.wait(timeout=WITHIN)
        process.stop()
        while OPEN:
            OPEN.pop().close()


def client(process: Process, timeout: float = 30.0) -> ModernClient:
    """A client of the gateway's, closed with it."""
    OPEN.append(http := httpx.Client(timeout=timeout))
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


@pytest.mark.parametrize("containment", ["cgroup", "subreaper"])
def test_a_daemon_ends_with_its_conversation_and_with_the_gateway(server: str, containment: str) -> None:
    """A double-forked, setsid daemon: gone after its conversation's sessions/delete, and after the gateway's SIGTERM
    (the shared process's and another conversation's), under either containment (the log says which ran)."""
    marker = f"daemon-{uuid.uuid4().hex}"
    option = "auto" if containment == "cgroup" else "subreaper"
    with gateway(server, "--process-containment", option, "--sessionless", "shared") as process:
        ran = "a cgroup each" if containment == "cgroup" else "the gateway a child subreaper"
        if containment == "cgroup" and ran not in process.output():
            pytest.skip(f"the gateway may not create cgroups here: {process.output()[-300:]}")
        assert f"contained by {'' if containment == 'cgroup' else 'its process group, '}{ran}" in process.output()
        mcp = client(process)
        session = mcp.create_session()
        assert text(call(mcp, "daemon", session, marker=marker)) == "started"
        until(lambda: len(running(marker)) == 1)
        mcp.request("sessions/delete", session=session_meta(session))
        until(lambda: running(marker) == [])
        until(
            lambda: "server process" in process.output() and "ended (its session ended; exit code" in process.output()
        )
        text(call(mcp, "daemon", mcp.create_session(), marker=marker))
        text(call(mcp, "daemon", None, marker=marker))  # the shared process's (--sessionless shared)
        until(lambda: len(running(marker)) == 2)
        assert process.process is not None
        process.process.send_signal(signal.SIGTERM)
        process.process.wait(timeout=WITHIN)
        until(lambda: running(marker) == [], 2.0)  # their reaping may lag the gateway's end


def test_the_processes_of_a_killed_gateway_end_when_the_next_one_starts(server: str) -> None:
    """SIGKILL (the OOM killer's) gives the gateway no chance to end its processes: the next gateway to start in the
    same cgroup ends them, daemons too, and removes their cgroups."""
    marker = f"daemon-{uuid.uuid4().hex}"
    with gateway(server, "--sessionless", "shared") as process:  # the daemon's process lives on after its answer
        if "a cgroup each" not in process.output():
            pytest.skip(f"the gateway may not create cgroups here: {process.output()[-300:]}")
        text(call(client(process), "daemon", None, marker=marker))
        until(lambda: len(running(marker)) == 1)
        assert process.process is not None
        process.process.kill()
        process.process.wait(timeout=WITHIN)
        assert len(running(marker)) == 1
    with gateway(server):
        until(lambda: running(marker) == [])


def test_a_process_reads_neither_the_gateways_environment_nor_its_credentials(server: str) -> None:
    """The gateway and its process as one user without privilege (root without any capability, as any other user's
    processes are: the tests' interpreter is root's): the gateway's /proc/PID/environ is closed to the process (the
    gateway is non-dumpable), and no MCP_SESSIONS_* or OTLP header variable reaches the process's environment."""
    environ = {
        "MCP_SESSIONS_SECRET": SECRET,
        "OTEL_EXPORTER_OTLP_HEADERS": "a=b",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x",
    }
    prefix = ("setpriv", "--bounding-set=-all", "--inh-caps=-all")
    with gateway(server, "--sessionless", "shared", environ=environ, prefix=prefix) as process:  # one that lives on
        mcp = client(process)
        seen = json.loads(text(call(mcp, "whoami")))
        parent = int(Path(f"/proc/{seen['pid']}/stat").read_text().rpartition(")")[2].split()[1])
        assert text(call(mcp, "read", path=f"/proc/{parent}/environ")).startswith("denied")
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" in seen["environ"]
        assert [name for name in seen["environ"] if name.startswith(("MCP_SESSIONS_", "OTEL_EXPORTER_OTLP_H"))] == []


def test_process_user_and_cwd(server: str) -> None:
    """--process-user nobody: each process has that uid and cannot read the gateway's key file (mode 0600, root's);
    --process-cwd: a directory of its own per conversation, removed with its process."""
    if os.geteuid() != 0:
        pytest.skip("--process-user needs a gateway that runs as root")
    with tempfile.TemporaryDirectory() as directory:
        os.chmod(directory, 0o755)
        keys = Path(directory, "keys")
        keys.write_text(f"k1:{SECRET}\n")
        keys.chmod(0o600)
        template = f"{directory}/conversation-{{id}}"
        options = ("--process-user", "nobody", "--process-cwd", template)
        with gateway(server, *options, environ={"MCP_SESSIONS_KEYS": f"@{keys}"}) as process:
            mcp = client(process)
            session = mcp.create_session()
            seen = json.loads(text(call(mcp, "whoami", session)))
            assert seen["uid"] == 65534
            assert text(call(mcp, "read", session, path=str(keys))) == "denied: Permission denied"
            assert seen["cwd"].startswith(f"{directory}/conversation-")
            assert stat.S_IMODE(os.stat(seen["cwd"]).st_mode) == 0o700
            assert os.stat(seen["cwd"]).st_uid == 65534
            mcp.request("sessions/delete", session=session_meta(session))
            until(lambda: not Path(seen["cwd"]).exists())


def test_process_memory_ends_only_the_conversation_over_it(server: str) -> None:
    """--process-memory 200: a tool that allocates 1 GiB ends its own conversation with an error; another goes on."""
    with gateway(server, "--process-memory", "200") as process:
        mcp = client(process)
        greedy, other = mcp.create_session(), mcp.create_session()
        assert text(call(mcp, "allocate", other, mib=50)) == str(50 << 20)
        failed = call(mcp, "allocate", greedy, mib=1024)
        assert failed["error"]["code"] == -32603, failed
        assert "exited" in failed["error"]["message"]
        assert text(call(mcp, "allocate", other, mib=50)) == str(50 << 20)
        until(lambda: "ended (crash: " in process.output(), said=process.output)


def test_a_process_that_stops_reading_costs_a_bounded_memory_and_ends_as_a_crash(server: str) -> None:
    """A process that reads no more of its stdin, and 16 requests of 2 MiB whose callers leave: one line is being
    written, four wait (then dropped unwritten as their callers leave), the others get -32011 at once; the process
    is stopped as a crash once its line stays unread for 10 s. The gateway's RSS grows by less than 200 MiB (measured:
    +152; with a process that reads them all, +178: what 16 such requests cost the HTTP side at once; the old code
    held every line for the process: +259 for good). Every request reaches the one shared process (``--sessionless
    shared``), the one that stops reading."""
    with gateway(server, "--sessionless", "shared") as process:
        assert process.process is not None
        mcp, pid = client(process), process.process.pid
        stalled = threading.Thread(target=client(process, 60.0).call_tool, args=("stall",), daemon=True)
        stalled.start()
        until(lambda: "stalled" in process.output())
        before = rss_kib(pid)

        refused = []

        def abandoned() -> None:
            with contextlib.suppress(httpx.TimeoutException):  # in _meta: a call with arguments lists the tools first
                refused.append(client(process, 1.0).call_tool("big", {}, meta={"padding": "x" * (2 << 20)})[1])

        callers = [threading.Thread(target=abandoned) for _ in range(16)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(WITHIN)
        assert refused and {answer["error"]["code"] for answer in refused} == {-32011}, refused  # those past the 5
        until(lambda: "ended (crash: it left its stdin unread for 10 s" in process.output(), 20.0, process.output)
        grown = (rss_kib(pid) - before) >> 10
        assert grown < 200, f"the gateway's RSS grew by {grown} MiB"
        assert text(call(mcp, "read", path="/dev/null")) == ""  # a new shared process


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (("--stdio", "no-such-server-x"), "--stdio: no-such-server-x: no such command (or not executable)"),
        (
            ("--stdio", "true", "--process-cwd", "/tmp/x"),
            "--process-cwd needs '{id}' in it: each conversation gets a directory of its own",
        ),
        (
            ("--stdio", "true", "--process-user", "no-such-user-x"),
            "--process-user: no such user or group: no-such-user-x",
        ),
    ],
)
def test_a_startup_error_is_one_line_and_exit_status_2(options: tuple[str, ...], said: str) -> None:
    """A typo in --stdio (or a --process-* option) is one line that says it, and exit status 2: no traceback."""
    line = [sys.executable, "-m", "mcp_sessions", "gateway", "--port", "1", *options]
    environ = {**os.environ, "MCP_SESSIONS_SECRET": SECRET}
    # A fresh interpreter importing the gateway: 2 s alone, over 10 s beside the suite on 2 slow cores. 60 s guards
    # against a hang only, as the suite's other command-line runs do.
    done = subprocess.run(line, capture_output=True, text=True, env=environ, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (2, f"mcp-sessions gateway: {said}\n")
