"""``mcp-sessions gateway --stdio``'s processes sealed from each other and from the gateway: as whom each runs, what it
sees and inherits, what it may hold, and that nothing it starts outlives it. A real gateway process, run as root
(``--process-uids``, ``--process-containment``), in front of a hostile stdio server the tests write
(``e2e._sealed.SERVER``: JSON-RPC lines by hand, no SDK), reached by raw 2026-07-28 requests of two users with
JWKS-signed tokens.

What a test needs of the host (root, bubblewrap, util-linux's ``unshare``, a writable memory, pids or cpu control group)
it says through :func:`needs`: skipped without it, failed under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
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
from _uids import members, uids
from _waits import WITHIN, until
from conftest import SECRET
from e2e._gateway import (
    CACHE,
    Process,
    for_every_uid,
    installed,
    main_run,
    node,
    readable_directory,
    rss_kib,
    said_as_root,
)
from e2e._sealed import AUTH, PRIVATE, SECRETS, UIDS, call, client, gateway, needs, of_uid, running, shared, team, text
from e2e._stdio import stdio_gateway
from mcp_sessions._gateway.sealed._sandbox import SandboxPolicy

NETRC = "machine api.test\n  login me\n  password ${USER_SECRET}\n"
"""A ``--process-file`` template: a ``.netrc`` (curl's, git's) for the user's own secret."""


@pytest.mark.parametrize("containment", ["bwrap", "unshare"])
def test_a_users_process_cannot_reach_anothers(server: str, jwks: str, containment: str) -> None:
    """Two users, a uid each (``--process-uids``): a hostile tool in bob's process cannot read alice's environment
    (her secret), signal or ptrace her process, or list, read or write her directory; each sees exactly the
    allow-list of the gateway's environment; and under bwrap or unshare, no other process at all."""
    needs("root", containment)
    environ = {
        "MCP_SESSIONS_SECRET": SECRET,
        "OTEL_EXPORTER_OTLP_HEADERS": "a=b",
        "USER_SECRET": "the-gateway-s-own",
        "PASSED": "yes",
        "NOT_PASSED": "no",
    }
    with tempfile.TemporaryDirectory() as directory:
        os.chmod(directory, 0o711)  # on the way to the processes' directories
        cwd = f"{directory}/conversations/{{id}}"
        Path(directory, "netrc").write_text(NETRC)
        Path(directory, "key.json").write_text('{"key": "${USER_SECRET}", "cost": "$$5"}')
        options = (*team(jwks), "--process-containment", containment, "--process-cwd", cwd, "--pass-env", "PASSED")
        files = (
            "--process-file",
            f"~/.netrc={directory}/netrc",
            "--process-file",
            f"/tmp/sa/key.json={directory}/key.json",
        )
        with gateway(server, *options, *files, environ=environ) as process:
            assert f"each process: containment {containment}, a uid each" in process.output()
            alice, bob = client(process, user="alice"), client(process, user="bob")
            hers, his = alice.create_session(), bob.create_session()
            she, he = (json.loads(text(call(mcp, "whoami", session))) for mcp, session in ((alice, hers), (bob, his)))
            assert she["uid"] != he["uid"]
            assert {she["uid"], he["uid"]} <= set(members(UIDS))
            assert (she["gid"], set(she["groups"]) - {she["gid"]}) == (she["uid"], set())
            assert she["environ"]["USER_SECRET"] == SECRETS["alice"]
            # --process-file: each her own, from her request's value, 0600, her uid's (issue 103)
            for mcp, session, seen, user in ((alice, hers, she, "alice"), (bob, his, he, "bob")):
                netrc = f"{seen['cwd']}/.netrc"
                assert text(call(mcp, "read", session, path=netrc)) == NETRC.replace("${USER_SECRET}", SECRETS[user])
                key = text(call(mcp, "read", session, path="/tmp/sa/key.json"))
                assert json.loads(key) == {"key": SECRETS[user], "cost": "$5"}
                stat = json.loads(
                    text(call(mcp, "run", session, argv=["stat", "-c", "%a %u", netrc, "/tmp/sa/key.json"]))
                )
                assert stat["stdout"].split("\n")[:2] == [f"600 {seen['uid']}"] * 2, stat
            inherited = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"} & set(os.environ)
            allowed = inherited | {"HOME", "TMPDIR", "PASSED", "USER_SECRET", "MCP_SESSION_ID"}
            # Set in the process by python3's C locale coercion (PEP 538); no shell's SHLVL nor PWD (issue 100's 10).
            own = {"LC_CTYPE"}
            assert set(he["environ"]) - own == allowed, he["environ"]
            assert (he["environ"]["HOME"], he["environ"]["TMPDIR"]) == (he["cwd"], f"{he['cwd']}/tmp")
            parent = Path(she["cwd"]).parent
            assert not Path(she["cwd"]).exists()  # her home is her namespace's alone: nothing of it on the host
            assert text(call(alice, "write", hers, path=f"{she['cwd']}/notes")) == "4"
            [pid] = [pid for pid in of_uid(she["uid"]) if b"hostile" in Path(f"/proc/{pid}/cmdline").read_bytes()]
            tried = {
                "environ": text(call(bob, "read", his, path=f"/proc/{pid}/environ")),
                "signal": text(call(bob, "signal", his, pid=pid, sig=signal.SIGSTOP)),
                "ptrace": text(call(bob, "ptrace", his, pid=pid)),
                "list": text(call(bob, "listdir", his, path=str(parent))),
                "list hers": text(call(bob, "listdir", his, path=she["cwd"])),
                "read": text(call(bob, "read", his, path=f"{she['cwd']}/notes")),
                "write": text(call(bob, "write", his, path=f"{she['cwd']}/planted")),
            }
            outside = {"environ": "No such file or directory", "signal": "No such process", "ptrace": "No such process"}
            # A /tmp of its own, where her directory is not.
            outside |= dict.fromkeys(("list hers", "read", "write"), "No such file or directory")
            for what, said in tried.items():
                expected = outside.get(what, "Permission denied")
                assert said in (f"denied: {expected}", "denied: Operation not permitted"), (what, said)
            assert SECRETS["alice"] not in json.dumps(tried)
            assert len(he["pids"]) <= 2, he["pids"]  # a /proc of its own: its own processes (bwrap's init, the server)
            # its seccomp filters (under either containment): no user namespace, where its uid would be root
            assert text(call(bob, "userns", his)) == "denied: Operation not permitted"
            assert text(call(alice, "read", hers, path=f"{she['cwd']}/notes")) == "mine"  # she goes on, unstopped
            left = [f"/tmp/left-by-{uuid.uuid4().hex}", f"/dev/shm/left-by-{uuid.uuid4().hex}"]
            assert [text(call(bob, "write", his, path=path)) for path in left] == ["4", "4"]
            bob.request("sessions/delete", session=session_meta(his))  # his uid's files go before the uid is reused
            until(lambda: not any(Path(path).exists() for path in left), process.output)


@pytest.mark.parametrize("containment", ["bwrap", "unshare"])
def test_root_runs_no_helper_a_user_chose_and_no_helper_reads_a_users_variable(
    server: str, jwks: str, containment: str
) -> None:
    """A user's ``PATH`` (``--process-env PATH=header:X-Path``) leads to programs named as every helper that starts a
    process: none runs, each helper is the one found at startup, and every wrapper of the server runs with root's
    fixed environment; the user's variables reach the server alone. Nor does the gateway's own environment (its
    secret, a marker) reach a program root runs: each helper found on the gateway's ``PATH`` records what it was
    given, then runs the real one (what runs in a namespace cannot write there, and records nothing)."""
    needs("root", containment)
    with readable_directory("mcp-sessions-path-") as planted, readable_directory("mcp-sessions-seen-") as recording:
        for name in ("bwrap", "unshare", "setpriv", "prlimit", "mount", "mkdir", "ln", "ip", "sh", "env"):
            Path(planted, name).write_text(f"#!/bin/sh\ntouch {planted}/ran-{name}\n")
            Path(planted, name).chmod(0o755)
        for name in ("bwrap", "unshare", "setpriv", "prlimit", "nsenter", "ip", "nft", "conntrack", "rm"):
            if (real := shutil.which(name)) is not None:
                Path(recording, name).write_text(
                    f'#!/bin/sh\n{{ env >"{recording}/{name}.$$"; }} 2>/dev/null\nexec {real} "$@"\n'
                )
                Path(recording, name).chmod(0o755)
        environ = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_TEST_MARKER": "1"}
        environ["PATH"] = f"{recording}:{os.environ['PATH']}"
        options = (*team(jwks), "--process-env", "PATH=header:X-Path", "--process-containment", containment)
        with gateway(server, *options, "--process-pids", "64", environ=environ) as process:
            alice = client(process, user="alice")
            alice.http.headers["X-Path"] = f"{planted}:/usr/bin:/bin"
            seen = json.loads(text(call(alice, "whoami", alice.create_session())))
            lines = {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid in running(server.split()[1])}
            servers = (b"/usr/bin/python3", os.fsencode(sys.executable))  # the hostile ones, and the gateway
            wrappers = [pid for pid, line in lines.items() if not line.startswith(servers)]
            environs = [Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") for pid in wrappers]
        recorded = {path.name: path.read_text() for path in recording.glob("*.*")}  # the links' too, closed at its end
    assert (seen["environ"]["PATH"], seen["environ"]["USER_SECRET"]) == (f"{planted}:/usr/bin:/bin", SECRETS["alice"])
    assert environs
    assert all(b"PATH=/usr/sbin:/usr/bin:/sbin:/bin" in environ for environ in environs)
    assert {name.split(b"=")[0] for environ in environs for name in environ if name} <= {b"PATH", b"PWD"}  # bwrap's
    assert not list(planted.glob("ran-*"))
    # setpriv: the processes' uid checked at startup; ip, nft, nsenter, conntrack: egress, each process's network
    assert {containment, "setpriv", "ip", "nft", "nsenter", "conntrack"} <= {name.split(".")[0] for name in recorded}
    given = sorted(name for name, said in recorded.items() if "MCP_SESSIONS_" in said or SECRET in said)
    assert given == []  # their names alone: what they were given holds the gateway's secret
    assert [name for name, said in recorded.items() if "PATH=/usr/sbin:/usr/bin:/sbin:/bin\n" not in said] == []


@pytest.fixture(scope="module")
def bounded(server: str, jwks: str) -> Iterator[Process]:
    """A gateway under bwrap given both bounds, --process-pids 20 and --process-memory 200: each case of
    :func:`test_a_conversation_past_its_bound_ends_alone` goes past one and stays within the other."""
    needs("root", "bwrap", "cgroup-pids", "cgroup-memory")
    with gateway(
        server, *team(jwks), "--process-containment", "bwrap", "--process-pids", "20", "--process-memory", "200"
    ) as process:
        yield process


@pytest.mark.parametrize(
    ("greed", "reason"),
    [
        (("fork", {"count": 50}), "over its process bound (--process-pids)"),
        (("fork", {"count": 4, "mib": 100}), "over its memory bound (--process-memory)"),
    ],
    ids=["pids", "memory"],
)
def test_a_conversation_past_its_bound_ends_alone(
    bounded: Process, request: pytest.FixtureRequest, greed: tuple[str, dict[str, Any]], reason: str
) -> None:
    """Bounds per conversation, all its processes together (a control group each): bob's conversation that forks
    past --process-pids, or holds past --process-memory in four processes of 100 MiB each (under a bound of 200), ends
    with its reason in the log; alice's goes on."""
    with shared(bounded, request) as process:
        alice, bob = client(process, user="alice"), client(process, user="bob")
        hers, his = alice.create_session(), bob.create_session()
        assert text(call(alice, "fork", hers, count=3)) == "3 started"
        name, arguments = greed
        call(bob, name, his, **arguments)
        until(lambda: f"ended ({reason}; exit code" in process.output(), process.output)
        assert text(call(alice, "allocate", hers, mib=50)) == str(50 << 20)
        assert text(call(alice, "fork", hers, count=3)) == "3 started"
        assert "error" in call(bob, "whoami", his)  # his conversation has ended, with its process
        for mcp, session in ((alice, hers), (bob, his)):  # the other case's room: its processes end with the test
            mcp.request("sessions/delete", session=session_meta(session))


@pytest.mark.parametrize("containment", ["bwrap", "unshare"])
def test_a_daemon_ends_with_its_conversation_and_with_the_gateway(server: str, containment: str) -> None:
    """A double-forked, setsid daemon: gone after its conversation's sessions/delete, and after the gateway's SIGTERM
    (the shared process's and another conversation's): ended with its PID namespace (bwrap, unshare)."""
    needs("root", containment)
    marker = f"daemon-{uuid.uuid4().hex}"
    sealed = ("--process-containment", containment, "--process-uids", UIDS)
    with gateway(server, *sealed, "--sessionless", "shared") as process:
        mcp = client(process)
        a_daemon_ends_with_its_session(mcp, marker)
        until(lambda: "ended (its session ended; exit code" in process.output(), process.output)
        text(call(mcp, "daemon", mcp.create_session(), marker=marker))
        text(call(mcp, "daemon", None, marker=marker))  # the shared process's (--sessionless shared)
        until(lambda: len(running(marker)) == 2, "two daemons")
        assert process.process is not None
        process.process.send_signal(signal.SIGTERM)
        process.process.wait(timeout=WITHIN)
        until(lambda: running(marker) == [], "the daemons to end")  # their reaping may lag the gateway's end


@pytest.fixture(scope="module", params=["bwrap", "unshare"])
def by_default(server: str, request: pytest.FixtureRequest) -> Iterator[tuple[str, Process]]:
    """A gateway given no --process-containment (for unshare: a PATH without bwrap), and its choice; tests share it."""
    needs("root", request.param)
    with readable_directory("mcp-sessions-path-") as directory:  # not in /tmp: the tools run in the namespace too
        environ = {"MCP_SESSIONS_SECRET": SECRET}
        if request.param == "unshare":  # the tools the gateway runs, bubblewrap not among them
            for tool in ("sh", "bash", "env", "unshare", "setpriv", "prlimit", "mount", "mkdir", "ln", "ip"):
                Path(directory, tool).symlink_to(shutil.which(tool) or tool)
            environ["PATH"] = str(directory)
        with gateway(server, environ=environ) as process:
            yield request.param, process


def test_by_default_a_daemon_ends_with_its_conversation(by_default: tuple[str, Process]) -> None:
    """No --process-containment: bubblewrap where it works, else util-linux's unshare (here: a PATH without bwrap),
    said in the startup line; a double-forked, setsid daemon ends with its conversation's sessions/delete. The
    process, root as the gateway is, has no capability: the host's files stay read-only to it."""
    containment, process = by_default
    assert f"each process: containment {containment} (auto), the gateway's uid" in process.output()
    assert text(call(client(process), "remount")) == "Operation not permitted"
    a_daemon_ends_with_its_session(client(process), f"daemon-{uuid.uuid4().hex}")


def a_daemon_ends_with_its_session(mcp: ModernClient, marker: str) -> None:
    """A double-forked, setsid daemon of a new session's process: running, then gone after its sessions/delete."""
    session = mcp.create_session()
    assert text(call(mcp, "daemon", session, marker=marker)) == "started"
    until(lambda: len(running(marker)) == 1, "the daemon")
    mcp.request("sessions/delete", session=session_meta(session))
    until(lambda: running(marker) == [], "the daemon to end")


@pytest.fixture(scope="module")
def sealed_off(server: str, by_default: tuple[str, Process]) -> Iterator[tuple[str, Process]]:
    """A gateway under ``by_default``'s containment, a uid each, --process-disk 8 and --process-network none, and that
    containment: the tests of what a sealed process may write and reach share it (a conversation each)."""
    containment, _ = by_default
    sealed = ("--process-containment", containment, "--process-uids", UIDS, "--process-disk", "8")
    with gateway(server, *sealed, "--process-network", "none") as process:
        yield containment, process


def test_a_contained_process_writes_only_its_own_bounded_directories_and_sees_no_control_groups(
    sealed_off: tuple[str, Process], request: pytest.FixtureRequest
) -> None:
    """Under bwrap or unshare, the host's files are read-only to a process (a directory any uid may write, too), and
    its home and /tmp, /var/tmp, /dev/shm and /run/lock are its own (an empty tmpfs each, --process-disk at most; mode
    1777 but its home, 0700: test_gateway_grants.py): it reads no file the host, or another conversation, has there,
    and the host never sees what it writes there (its home, under /tmp, stays an empty mount point); /sys/fs/cgroup
    is empty (else it lists every conversation's control group)."""
    planted = {path: f"{path}/planted-{uuid.uuid4().hex}" for path in PRIVATE if Path(path).is_dir()}
    left = f"/tmp/left-{uuid.uuid4().hex}"
    try:
        for path in planted.values():
            Path(path).write_text("the host's")
            os.chmod(path, 0o644)
        with readable_directory("mcp-sessions-shared-") as shared_, shared(sealed_off[1], request) as process:
            shared_.chmod(0o1777)
            mcp = client(process)
            session = mcp.create_session()  # its process starts now, with the host's files planted
            seen = json.loads(text(call(mcp, "whoami", session)))
            assert seen["cwd"].startswith(f"{tempfile.gettempdir()}/mcp-sessions/"), seen["cwd"]
            for directory, path in planted.items():
                assert text(call(mcp, "read", session, path=path)) == "denied: No such file or directory", path
                assert text(call(mcp, "mode", session, path=directory)) == "0o1777", directory
            assert text(call(mcp, "write", session, path=left)) == "4"
            assert not Path(left).exists()
            assert text(call(mcp, "write", session, path=f"{shared_}/mine")) == "denied: Read-only file system"
            assert text(call(mcp, "listdir", session, path="/sys/fs/cgroup")) == "[]"
            assert text(call(mcp, "write", session, path=f"{seen['cwd']}/notes")) == "4"
            assert not Path(seen["cwd"]).exists()  # its home is its namespace's alone: nothing of it on the host
            for directory in (seen["cwd"], "/tmp", "/dev/shm"):
                assert (
                    text(call(mcp, "fill", session, path=f"{directory}/big", mib=9))
                    == "denied: No space left on device"
                )
    finally:
        for path in [*planted.values(), left]:
            Path(path).unlink(missing_ok=True)


@pytest.mark.parametrize("containment", ["bwrap", "unshare", "none"])
def test_a_server_that_closes_its_stdout_is_ended_and_its_call_answered_at_once(server: str, containment: str) -> None:
    """Its stdout closed, a server is ended as a crash and the call in flight gets -32603 at once: under bubblewrap
    too, whose own two processes held the pipe's write end, and under unshare, whose waiting parent did, so that the
    call was never answered. The gateway in process: its command is not the point."""
    needs(*([containment] if containment != "none" else []))
    contained = SandboxPolicy(containment)  # type: ignore[arg-type]  # one of the three
    with stdio_gateway(server.split(), sandbox=contained) as url, httpx.Client(timeout=30) as http:
        mcp = ModernClient(http, url, path="")
        answer = call(mcp, "hangup", mcp.create_session())
        assert answer["error"]["code"] == -32603, answer


def test_network_none_leaves_a_process_its_own_loopback_only(
    by_default: tuple[str, Process], sealed_off: tuple[str, Process], request: pytest.FixtureRequest
) -> None:
    """--process-network none: a network namespace of its own (the kernel's): the process cannot connect to a port
    the host listens on (the host's network can), and has a loopback of its own, up, to listen and connect on."""
    containment, on_the_hosts = by_default
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        assert text(call(client(on_the_hosts), "connect", port=port)) == "connected"  # the host's network
        listener.accept()[0].close()
        with shared(sealed_off[1], request) as process:
            started = process.log().decode(errors="replace")  # whole: the shared gateway's startup may be far back
            said = f"each process: containment {containment}, a uid each, bounds "  # its default memory, or none
            assert said in started
            assert ", network none" in started
            mcp = client(process)
            assert text(call(mcp, "connect", port=port)).startswith("denied: ")
            assert text(call(mcp, "loopback")) == "connected"
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing of the process's reached it
            listener.accept()


def test_a_conversations_processes_together_get_at_most_their_cpu_bound(server: str) -> None:
    """--process-cpu 0.5: two busy loops of one conversation get half a core together, no more: the kernel throttles
    its control group (cpu.stat's nr_throttled: the periods it used up its quota in, 50 ms of each 100 ms), and
    the CPU time its processes used is within the quota of the periods they ran. On a machine too busy to give
    them half a core (a load of 8 on 2 cores), nothing is throttled: then 200 periods (20 s) of their running
    stand in for the throttling, and what they used is held to the quota all the same."""
    needs("root", "cgroup-cpu")
    with gateway(server, "--process-cpu", "0.5") as process:
        mcp = client(process)
        session = mcp.create_session()
        seen = json.loads(text(call(mcp, "whoami", session)))
        # Any of its processes (bubblewrap's, the server): the control group is the conversation's.
        group = cpu_group(min(with_environ(f"MCP_SESSION_ID={seen['environ']['MCP_SESSION_ID']}")))
        quota = (group / "cpu.max").read_text().split() if (group / "cpu.max").exists() else None
        assert quota == ["50000", "100000"] or (group / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert [text(call(mcp, "spin", session)) for _ in range(2)] == ["spinning", "spinning"]

        def throttled_or_ran() -> bool:  # the kernel held them to the quota, or they ran 20 s without needing it
            stat = cpu_stat(group)
            return stat["nr_throttled"] >= 10 or stat["nr_periods"] >= 200

        until(throttled_or_ran, lambda: f"10 periods throttled, or 200 run: {cpu_stat(group)}")
        ticks = sum(used(int(member)) for member in (group / "cgroup.procs").read_text().split())
        stat = cpu_stat(group)
        # Used / clock ticks (100 a second) against 50 ms a period, within a tick's error.
        assert ticks / os.sysconf("SC_CLK_TCK") <= 1.2 * (stat["nr_periods"] + 2) * 0.05, (ticks, stat)


def with_environ(marker: str) -> list[int]:
    """The pids of the host's processes whose environment holds ``marker``."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if marker.encode() in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
    return found


def cpu_group(pid: int) -> Path:
    """The control group the gateway made for ``pid`` that bounds its CPU: in v1's cpu hierarchy, else in v2."""
    from mcp_sessions._gateway.sealed._cgroups import own

    for group in (own("cpu", pid), own("", pid)):
        if group is not None and group.name.startswith("mcp-sessions-"):
            return group
    raise AssertionError(
        f"no control group of the gateway's bounds {pid}'s CPU: {Path(f'/proc/{pid}/cgroup').read_text()}"
    )


def cpu_stat(group: Path) -> dict[str, int]:
    return {
        name: int(value) for name, value in (line.split() for line in (group / "cpu.stat").read_text().splitlines())
    }


def used(pid: int) -> int:
    """The clock ticks of CPU ``pid`` used (user and system): 0 for one gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def test_two_gateways_given_one_range_never_share_a_uid_nor_end_each_others_processes(server: str) -> None:
    """Gateways of one host given one ``--process-uids`` range (the tests' workers, or an operator's slip): a uid is
    one gateway's at a time (a lock each), so the end of one's conversation, which kills what is left of its uid,
    ends nothing of the other's (on four test workers, the team recipe's gateway lost its processes to another's)."""
    needs("root")
    shared = uids(200, 4)
    sealed = ("--process-uids", shared, "--sessionless", "shared")  # each: the shared process and one
    with gateway(server, *sealed) as first, gateway(server, *sealed) as second:
        one, two = client(first), client(second)
        mine, theirs = one.create_session(), two.create_session()
        me, they = (json.loads(text(call(mcp, "whoami", session))) for mcp, session in ((one, mine), (two, theirs)))
        assert me["uid"] != they["uid"]
        assert {me["uid"], they["uid"]} <= set(members(shared))
        one.request("sessions/delete", session=session_meta(mine))
        until(lambda: of_uid(me["uid"]) == [], "the ended conversation's uid to run nothing")
        assert json.loads(text(call(two, "whoami", theirs)))["pid"] == they["pid"]  # the other's lives on


@pytest.mark.parametrize("containment", ["bwrap", "unshare"])
def test_the_processes_of_a_killed_gateway_end_with_it(server: str, containment: str) -> None:
    """SIGKILL (the OOM killer's) gives the gateway no chance to end its processes: each PID namespace's parent dies
    with the gateway (bwrap's --die-with-parent, setpriv's --pdeathsig), and its daemons with it."""
    needs("root", containment)
    marker = f"daemon-{uuid.uuid4().hex}"
    with gateway(server, "--sessionless", "shared", "--process-containment", containment) as process:
        text(call(client(process), "daemon", None, marker=marker))
        until(lambda: len(running(marker)) == 1, "the daemon")
        assert process.process is not None
        process.process.kill()
        process.process.wait(timeout=WITHIN)
        until(lambda: running(marker) == [], "the daemon to end")


def test_as_a_containers_first_process_the_gateway_reaps_what_bubblewrap_leaves(server: str) -> None:
    """A container without an init: the gateway is its PID 1 (here in a PID namespace of unshare's), which adopts
    every process whose parent ended. bubblewrap leaves its namespace's first process so, at the containment's
    trial, the revision probe and each conversation's end: the gateway reaps them. Else each would stay a zombie
    for good, a pid held, and its group would keep each end waiting for its SIGKILL grace."""
    needs("root", "bwrap")
    prefix = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")  # the gateway dies with unshare
    with gateway(server, "--process-containment", "bwrap", prefix=prefix) as process:
        mcp = client(process)
        for _ in range(3):
            session = mcp.create_session()
            text(call(mcp, "whoami", session))
            mcp.request("sessions/delete", session=session_meta(session))
        until(lambda: process.output().count("ended (its session ended;") == 3, process.output)
        assert process.process is not None
        [(first, _)] = children(process.process.pid)  # unshare's one child: the gateway, PID 1 in its namespace
        assert [pid for pid, state in children(first) if state == "Z"] == []
        os.kill(first, signal.SIGTERM)  # the gateway's own shutdown: unshare passes no signal on
        process.process.wait(timeout=WITHIN)


def test_as_a_containers_first_process_without_a_namespace_the_gateway_says_to_run_an_init(server: str) -> None:
    """Under --process-containment none, a daemon a server left comes to a PID-1 gateway when it ends, and only an
    init reaps it: the startup says so, to whoever starts the container."""
    needs("root")
    prefix = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")
    with gateway(server, "--process-containment", "none", prefix=prefix) as process:
        until(lambda: "PID 1 without an init" in process.output(), process.output)
        assert "run the container with one (docker run --init)" in process.output()
        assert process.process is not None
        [(first, _)] = children(process.process.pid)
        os.kill(first, signal.SIGTERM)
        process.process.wait(timeout=WITHIN)


def children(parent: int) -> list[tuple[int, str]]:
    """The pid and state (``Z``: a zombie, ended and not reaped) of each process whose parent is ``parent``."""
    found = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            state, ppid = stat_file.read_text().rpartition(")")[2].split()[:2]
            if int(ppid) == parent:
                found.append((int(stat_file.parent.name), state))
    return found


def test_a_process_reads_neither_the_gateways_environment_nor_its_credentials(server: str) -> None:
    """The gateway and its process as one user without privilege (root without any capability, as any other user's
    processes are: the tests' interpreter is root's): the gateway's /proc/PID/environ is closed to the process (the
    gateway is non-dumpable), and of the gateway's environment only the allow-list reaches the process."""
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
        own = {"LC_CTYPE"}  # python3's (PEP 538)
        assert set(seen["environ"]) - own <= {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}, seen["environ"]


def test_process_user_and_cwd(server: str) -> None:
    """--process-user nobody: each process has that uid and cannot read the gateway's key file (mode 0600, root's);
    --process-cwd: a directory of its own per conversation, its HOME, removed with its process."""
    needs("root")
    with readable_directory("mcp-sessions-keys-") as directory:  # where a contained process sees the file
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
            assert seen["environ"]["HOME"] == seen["cwd"]
            assert stat.S_IMODE(os.stat(seen["cwd"]).st_mode) == 0o700
            assert os.stat(seen["cwd"]).st_uid == 65534
            mcp.request("sessions/delete", session=session_meta(session))
            until(lambda: not Path(seen["cwd"]).exists(), "the conversation's directory removed")


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
        until(lambda: "stalled" in process.output(), process.output)
        before = rss_kib(pid)

        refused = []

        def abandoned() -> None:
            # The callers leave after 5 s: those refused are answered first (within 0.2 s here, idle; a 1 s wait once
            # saw none answered in a full make test), and the four waiting are dropped before the process's 10 s end.
            with contextlib.suppress(httpx.TimeoutException):  # in _meta: a call with arguments lists the tools first
                refused.append(client(process, 5.0).call_tool("big", {}, meta={"padding": "x" * (2 << 20)})[1])

        callers = [threading.Thread(target=abandoned) for _ in range(16)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(WITHIN)
        assert refused, refused
        assert {answer["error"]["code"] for answer in refused} == {-32011}, refused  # those past the 5
        until(lambda: "ended (crash: it left its stdin unread for 10 s" in process.output(), process.output)
        grown = (rss_kib(pid) - before) >> 10
        assert grown < 200, f"the gateway's RSS grew by {grown} MiB"
        assert text(call(mcp, "read", path="/dev/null")) == ""  # a new shared process


EGRESS = ("--process-network", "egress")


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (("--stdio", "no-such-server-x"), "--stdio: no-such-server-x: no such command (or not executable)"),
        (
            ("--stdio", "true", "--process-cwd", "/tmp/x"),
            "--process-cwd needs '{id}' in its last part: each conversation gets a directory of its own",
        ),
        (
            ("--stdio", "true", "--process-user", "no-such-user-x"),
            "--process-user: no such user or group: no-such-user-x",
        ),
        (
            ("--stdio", "true", *AUTH, "--process-env", "A=header:X-A"),
            "--process-env puts each user's secrets in processes that share one uid and can read each other's: "
            "give --process-uids FIRST-LAST (a uid per process), or --accept-shared-uid to accept that",
        ),
        (("--stdio", "true", "--process-uids", "5"), "--process-uids takes FIRST-LAST, two uids above 0: not '5'"),
        (
            ("--stdio", "true", "--process-uids", "1-10"),
            "--process-uids: the range is the gateway's alone, but daemon (1) is a user here",
        ),
        (
            ("--stdio", "true", "--process-uids", UIDS, "--process-cwd", "/usr/{id}"),  # their mount points there
            "--process-cwd: /usr must be the gateway's and not listable by others (mode 0711): it is mode 755, "
            "owned by uid 0",
        ),
        (
            ("--stdio", "true", "--pass-env", "MCP_SESSIONS_SECRET"),
            "--pass-env: the gateway's MCP_SESSION* variables are its own",
        ),
        (
            ("--stdio", "true", "--pass-env", "A-B"),  # the last helper exports it to the server
            "--pass-env: 'A-B' is not a variable name a process may be given",
        ),
        (
            ("--stdio", "true", "--pass-env", "LD_PRELOAD"),
            "--pass-env: 'LD_PRELOAD' tells the dynamic loader what to load, and root's helpers run it",
        ),
        (
            ("--stdio", "true", *AUTH, "--accept-shared-uid", "--process-env", "GCONV_PATH=header:X-A"),
            "--process-env: GCONV_PATH tells the dynamic loader what to load: never a user's",
        ),
        (
            ("--stdio", "/bin/true", "--process-containment", "bwrap"),
            "--process-containment bwrap: bwrap is not installed",
        ),
        (
            ("--stdio", "true", "--process-containment", "none", "--process-network", "none"),
            "--process-network none needs bwrap or unshare (--process-containment)",
        ),
        (
            ("--stdio", "true", "--process-user", "nobody", "--process-containment", "none", *EGRESS),
            "--process-network egress needs a containment, bwrap or unshare: its own network",
        ),
        (
            ("--stdio", "/bin/true", "--process-network", "none"),
            "--process-network none needs bwrap or unshare, and neither works here: bwrap: bwrap is not installed",
        ),
        (("--stdio", "true", "--process-cpu", "0"), "--process-cpu takes a number of cores, at least 0.01"),
        (
            ("--stdio", "true", "--process-uids", "61000-61001", "--process-containment", "none"),
            "--process-uids needs a containment, bwrap or unshare: a uid that shares the host's processes and "
            "directories cannot be cleared reliably before it is given to the next user",
        ),
    ],
)
def test_a_startup_error_is_one_line_and_exit_status_2(options: tuple[str, ...], said: str) -> None:
    """A typo in --stdio (or a --process-* option) is one line that says it, and exit status 2: no traceback. Run by
    ``main`` in the test's process (its exit status and output as the command gives them; each is refused before the
    gateway binds its port), where a fresh interpreter cost 0.3 to 1 CPU-second a case; a host without bwrap in a
    command of its own, as the gateway finds its tools once a process."""
    if "--process-uids" in options or "--process-user" in options:
        needs("root")
    line = ["gateway", "--port", "1", *options]
    environ = {**os.environ, "MCP_SESSIONS_SECRET": SECRET}
    if "/bin/true" in options:  # a host without bwrap: a PATH without it
        environ["PATH"] = "/nonexistent"
        # 60 s guards against a hang only, as the suite's other command-line runs do.
        command = said_as_root([sys.executable, "-m", "mcp_sessions", *line])
        done = subprocess.run(command, capture_output=True, text=True, env=environ, timeout=60, check=False)
    else:
        done = main_run(*line, environ=environ)
    assert (done.returncode, done.stderr) == (2, f"mcp-sessions gateway: {said}\n")


@pytest.mark.parametrize(
    ("target", "template", "extra", "said"),
    [
        (
            "/etc/netrc",
            "x",
            (),
            "--process-file /etc/netrc: TARGET is ~/PATH (the process's home) or /tmp/PATH, its own, with no '.', '..'",
        ),
        (
            "~/../etc/netrc",
            "x",
            (),
            "--process-file ~/../etc/netrc: TARGET is ~/PATH (the process's home) or "
            "/tmp/PATH, its own, with no '.', '..'",
        ),
        ("~/.netrc", None, (), "--process-file ~/.netrc: {template} cannot be read: No such file or directory"),
        (
            "~/.netrc",
            "password ${B}",
            (),
            "--process-file ~/.netrc: {template} names ${B}, which no --process-env gives",
        ),
        (
            "~/.netrc",
            "costs $5",
            (),
            "--process-file ~/.netrc: {template}: a '$' that starts no ${NAME} (write $$ for a '$')",
        ),
        (
            "~/.netrc",
            "x",
            ("--process-containment", "none"),
            "--process-file needs a containment, bwrap or unshare: "
            "its file is written in the process's own home or /tmp, a tmpfs of its namespace",
        ),
    ],
    ids=["elsewhere", "dot-dot", "unreadable", "not-given", "not-a-template", "uncontained"],
)
def test_a_process_file_the_gateway_cannot_write_is_one_line_and_exit_status_2(
    tmp_path: Path, target: str, template: str | None, extra: tuple[str, ...], said: str
) -> None:
    """``--process-file`` (issue 103): a TARGET out of the process's own directories, a template that cannot be
    read, names a variable no ``--process-env`` gives or is no template, or no containment to write it in: one line,
    exit status 2, before any process starts."""
    needs("bwrap")
    path = tmp_path / "template"
    if template is not None:
        path.write_text(template)
    line = ["gateway", "--port", "1", "--stdio", "true", "--process-env", "A=header:X-A", *extra]
    done = main_run(*line, "--process-file", f"{target}={path}", environ={**os.environ, "MCP_SESSIONS_SECRET": SECRET})
    assert (done.returncode, done.stderr) == (2, f"mcp-sessions gateway: {said.replace('{template}', str(path))}\n")


def test_what_a_contained_process_would_not_find_under_tmp_is_said_at_startup() -> None:
    """A server file under /tmp, where each contained process has its own, empty: one line, exit status 2 (it was
    "can't open file" at the first request); the gateway started from under /tmp: a warning that its processes
    start in /."""
    needs("bwrap")
    with tempfile.NamedTemporaryFile(suffix=".py") as script, socket.create_server(("127.0.0.1", 0)) as taken:
        line = ["gateway", "--process-containment", "bwrap", "--stdio"]
        environ = {**os.environ, "MCP_SESSIONS_SECRET": SECRET}
        done = main_run(*line, f"/usr/bin/python3 {script.name}", environ=environ)  # refused at once, in this process
        port = str(taken.getsockname()[1])  # in use: the gateway stops there, after what it says of its processes
        command = said_as_root([sys.executable, "-m", "mcp_sessions", *line, "true", "--port", port])  # its own cwd
        started = subprocess.run(command, env=environ, cwd="/tmp", capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (
        2,
        f"mcp-sessions gateway: --stdio: {script.name} is under /tmp, which each contained process has of its "
        "own, empty: put it in a directory every process's user may read, or give --process-containment none\n",
    )
    assert started.returncode == 2
    assert "the processes start in /, not in the gateway's working directory" in (started.stderr)


def test_a_containment_the_host_no_longer_gives_fails_the_request_that_would_start_a_process(server: str) -> None:
    """bwrap gone after startup (uninstalled from where the gateway found it): the request that would start a process
    gets -32603 saying so; nothing starts without it."""
    needs("bwrap")
    with readable_directory("mcp-sessions-path-") as directory:  # the helpers that run in the namespace see it
        shutil.copy(shutil.which("bwrap") or "bwrap", directory)
        # root's without a capability; its devpts; the last (bash, then env)
        for helper in ("setpriv", "unshare", "mount", "bash", "env"):
            Path(directory, helper).symlink_to(shutil.which(helper) or helper)
        environ = {"MCP_SESSIONS_SECRET": SECRET, "PATH": str(directory)}
        options = ("--process-containment", "bwrap")
        with gateway(server, *options, environ=environ) as process:
            assert text(call(client(process), "whoami")).startswith("{")  # the shared process, under bwrap
            Path(directory, "bwrap").unlink()
            _, answer = client(process).request("sessions/create")
            assert answer["error"]["code"] == -32603, answer
            assert "--process-containment bwrap: bwrap is not installed" in answer["error"]["message"]


MEMORY = CACHE / "memory/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
PLAN = {"entities": [{"name": "alice-s-plan", "entityType": "plan", "observations": ["launch on Friday"]}]}


def test_server_memory_behind_the_team_recipe_never_shows_alices_graph_to_bob(jwks: str) -> None:
    """docs/gateway.md's team recipe in front of @modelcontextprotocol/server-memory, whose graph is one file under
    its install directory: run plain, each process's write there is refused (the host's files are read-only to
    it), never another user's graph; with the recipe's MEMORY_FILE_PATH in the process's own HOME, alice's graph is
    hers alone."""
    needs("root")
    memory = installed(MEMORY, "@modelcontextprotocol/server-memory")
    with for_every_uid(memory, CACHE / "memory") as index:  # its package's tree, where the processes' uids read it
        recipe = f'sh -c "MEMORY_FILE_PATH=$HOME/memory.jsonl exec {node()} {index}"'  # $HOME: the process's own
        for command in (f"{node()} {index}", recipe):
            with gateway(command, *team(jwks)) as process:
                alice, bob = client(process, user="alice"), client(process, user="bob")
                hers, his = alice.create_session(), bob.create_session()
                created = json.dumps(call(alice, "create_entities", hers, **PLAN))
                graphs = [json.dumps(call(mcp, "read_graph", session)) for mcp, session in ((alice, hers), (bob, his))]
                assert "alice-s-plan" not in graphs[1]
                assert "alice-s-plan" not in json.dumps(call(bob, "read_graph"))
                if command == recipe:
                    assert "alice-s-plan" in graphs[0], (created, graphs[0])
                else:
                    assert "read-only file system" in created.lower(), created
                    assert not index.with_name("memory.jsonl").exists()
