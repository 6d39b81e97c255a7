"""``mcp-sessions gateway --stdio``'s sealed processes hold nothing of the gateway's or the host's that they were not
given, and no more of what is shared than their bounds (issue 92, items 5 and 7): no descriptor of the gateway's, a
hostname of their own, no socket file of the host's under ``/run``, ptys of their own devpts, and socket buffers and
directories counted in their memory. A real gateway process, run as root, in front of the hostile server of
``e2e._sealed``.

What a test needs of the host it says through :func:`needs`: skipped without it, failed under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from _redis import free_port
from _uids import uids
from _waits import WITHIN, until, until_awaited
from e2e._gateway import Process, gateway_run
from e2e._sealed import UIDS, call, client, gateway, needs, shared, text
from mcp_sessions._gateway._process_flags import default_memory
from mcp_sessions._gateway.sealed._cgroups import BOUNDS_POLL
from mcp_sessions._gateway.sealed._network import TCP_BUFFERS
from mcp_sessions._gateway.sealed._sandbox import PTYS

CONTAINMENTS = ["bwrap", "unshare"]
STUB = "nameserver 127.0.0.53\noptions edns0\n"  # systemd-resolved's stub-resolv.conf
EGRESS = [(containment, "egress") for containment in CONTAINMENTS]  # the network --process-uids implies


@pytest.fixture(scope="module")
def sealed(server: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Process]:
    """A gateway under ``request.param``'s containment and network, a uid each for its processes (a range of the
    module's own), which the tests that need no gateway of their own share, one after another (pytest runs those of
    one parameter together), each with conversations of its own. It runs in a mount namespace of its own whose
    ``/etc`` is a copy of the host's in systemd-resolved's layout (``/etc/resolv.conf`` a link to a file under
    ``/run``, :data:`STUB`), which :func:`test_where_etc_resolv_conf_leads_under_run_a_process_still_reads_it` is
    about; what the others check holds whatever the host's ``/etc/resolv.conf`` is."""
    containment, network = request.param
    needs("root", containment)
    etc = tmp_path_factory.mktemp("sealed") / "etc"
    shutil.copytree("/etc", etc, symlinks=True)
    with tempfile.TemporaryDirectory(dir="/run") as run:
        stub = Path(run, "stub-resolv.conf")
        stub.write_text(STUB)
        stub.chmod(0o644)
        os.chmod(run, 0o755)
        (etc / "resolv.conf").unlink()
        (etc / "resolv.conf").symlink_to(stub)
        own_etc = ("unshare", "--mount", "--", "sh", "-c", 'mount --bind "$0" /etc && exec "$@"', str(etc))
        flags = ("--process-containment", containment, "--process-uids", uids(220, 16), "--process-network", network)
        room = ("--max-processes-per-principal", "16")  # the conversations the tests leave open, all one caller's
        with gateway(server, *flags, *room, prefix=own_etc) as process:
            yield process


@pytest.fixture
def process(sealed: Process, request: pytest.FixtureRequest) -> Iterator[Process]:
    """``sealed`` for one test: its log beside the test's failure."""
    with shared(sealed, request):
        yield sealed


@pytest.mark.parametrize("sealed", EGRESS, indirect=True, ids=CONTAINMENTS)
def test_a_process_holds_no_descriptor_of_the_gateways_and_has_a_hostname_of_its_own(process: Process) -> None:
    """The server's open descriptors are its stdin, stdout and stderr (and the one it lists them by): the memfd that
    held its environment (fd 14) reached it; its hostname is a neutral one of its own UTS namespace, not the host's;
    its network namespace's TCP buffers are the gateway's (:data:`TCP_BUFFERS`), not the host's."""
    mcp = client(process)
    session = mcp.create_session()
    held = json.loads(text(call(mcp, "fds", session)))
    hostname = text(call(mcp, "hostname", session))
    buffers = [text(call(mcp, "read", session, path=f"/proc/sys/net/ipv4/{name}")) for name in ("tcp_rmem", "tcp_wmem")]

    listing = [fd for fd, target in held.items() if target.endswith("/fd")]
    assert sorted(set(held) - set(listing), key=int) == ["0", "1", "2"], held
    assert hostname == "localhost" != socket.gethostname()
    assert [found.split() for found in buffers] == [given.split() for given in TCP_BUFFERS]


# A contained process's /dev, as bubblewrap's --dev makes it (and unshare's script): bubblewrap adds "core", a link.
DEV = {"null", "zero", "full", "random", "urandom", "tty", "ptmx", "fd", "stdin", "stdout", "stderr", "pts", "shm"}


@pytest.mark.parametrize(
    "sealed",
    [(containment, network) for containment in CONTAINMENTS for network in ("host", "egress")],
    indirect=True,
    ids="-".join,
)
@pytest.mark.parametrize("where", ["/run", "/dev"])
def test_a_process_reaches_no_socket_file_of_the_hosts(process: Process, where: str) -> None:
    """A read-only ``/`` does not refuse ``connect()``: a socket file of the host's under ``/run``, mode 0666,
    answered the process, and so would one in ``/dev`` (``/dev/log``, where a host has no systemd). ``/run`` is an
    empty tmpfs of its own (its ``/run/lock`` its own too), and ``/dev`` a tmpfs of its own with the host's
    harmless devices alone; the host's resolver configuration still reaches it (under egress, its namespace's), and
    its names resolve."""
    with tempfile.TemporaryDirectory(dir=where) as directory, socket.socket(socket.AF_UNIX) as listener:
        path = f"{directory}/open.sock"
        listener.bind(path)
        listener.listen()
        os.chmod(directory, 0o755)
        os.chmod(path, 0o666)
        mcp = client(process)
        session = mcp.create_session()  # its process starts now, with the socket file there
        reached = text(call(mcp, "unix", session, path=path))
        listed = json.loads(text(call(mcp, "listdir", session, path=where)))
        resolved = text(call(mcp, "resolve", session, host="localhost"))
        resolver = text(call(mcp, "read", session, path="/etc/resolv.conf"))

    assert reached == "denied: No such file or directory"
    assert os.path.basename(directory) not in listed
    if where == "/run":
        assert "lock" in listed
    else:
        assert set(listed) - {"core"} == DEV
    assert resolved in ("127.0.0.1", "::1"), resolver
    assert not resolver.startswith("denied"), resolver


@pytest.mark.parametrize("sealed", EGRESS, indirect=True, ids=CONTAINMENTS)
def test_a_process_opens_ptys_of_its_own_devpts_up_to_its_bound(process: Process) -> None:
    """One process opened 3,071 ptys (the host's pool of ptys for every devpts but its first: ``kernel.pty.max`` less
    ``kernel.pty.reserve``) and the next user's got ``ENOSPC``: each process's devpts is its own, of at most
    :data:`PTYS`: a process holding them all leaves another its whole share."""
    alice, bob = client(process), client(process)
    hers = text(call(alice, "ptys", alice.create_session()))
    his = text(call(bob, "ptys", bob.create_session()))

    assert hers == his == f"{PTYS} opened, then No space left on device"


def test_what_a_process_leaves_unread_in_its_sockets_counts_in_its_memory(server: str) -> None:
    """A process under ``--process-memory 150`` held 393 MiB unread in 5,727 loopback TCP connections of its own
    namespace while its group counted 48: cgroup v1 counts TCP buffers apart (``memory.kmem.tcp``), and the kernel
    charges each socket's first buffer of a queue past their bound (72 KiB a connection at the host's first receive
    buffer, 128 KiB). Now its namespace's first receive buffer is 32 KiB (24 KiB a connection), and the conversation
    ends once the kernel's count is past its share (a quarter of the bound), killed at once, as the kernel's OOM killer
    would end it: 9,000 connections under ``--process-memory 100`` reached 46-152 MiB of TCP buffers in 8 runs on a
    busy 2-core host (the kernel's count, read every 50 ms) before the gateway's poll (twice a second) saw them past
    it, and 204 on an idle one, which opens them faster; they held 648. How early the poll sees them is the machine's
    speed; what holds by construction is the share and 24 KiB a connection past it, for all 9,000 at most (236 MiB),
    which the host's first buffer (72 KiB a connection, 648 MiB) passes."""
    needs("root", "bwrap", "cgroup-memory")
    sealed = ("--process-containment", "bwrap", "--process-uids", UIDS, "--process-network", "none")
    with gateway(server, *sealed, "--process-memory", "100") as process:
        mcp = client(process)
        session = mcp.create_session()
        assert process.process is not None
        assert text(call(mcp, "read", session, path="/proc/sys/net/ipv4/tcp_rmem")).split() == TCP_BUFFERS[0].split()
        with tcp_peak(process.process.pid) as peak:
            # its answer: "held" where it opened them all before the poll saw them past (an idle host), else its end's
            call(mcp, "buffered", session, count=CONNECTIONS)
            until(lambda: "over its memory bound (--process-memory)" in process.output(), process.output)
        assert "error" in call(mcp, "read", session, path="/dev/null"), "its conversation ended"

    share = 25 << 20  # a quarter of --process-memory 100
    assert share < peak() < share + CONNECTIONS * (24 << 10), f"{peak() >> 20} MiB"


CONNECTIONS = 9000


@contextlib.contextmanager
def tcp_peak(gateway: int) -> Iterator[Callable[[], int]]:
    """The most TCP buffers the kernel counted (``memory.kmem.tcp.max_usage_in_bytes``) in the v1 groups of the
    ``gateway``'s processes meanwhile, read every 50 ms (once a group is removed its count is gone)."""
    from mcp_sessions._gateway.sealed._cgroups import Bounds

    cgroups = Bounds.found(64 << 20, None)
    assert cgroups is not None and cgroups.version == 1, "v2 counts TCP buffers in memory.current"
    peaks: list[int] = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            for group in cgroups.parents[0].glob(f"mcp-sessions-{gateway}-*"):
                with contextlib.suppress(OSError, ValueError):
                    peaks.append(int((group / "memory.kmem.tcp.max_usage_in_bytes").read_text()))

    watching = threading.Thread(target=watch)
    watching.start()
    try:
        yield lambda: max(peaks)
    finally:
        done.set()
        watching.join()


def test_by_default_a_conversations_directories_count_in_its_memory_bound(server: str) -> None:
    """With no --process-memory, the five tmpfs directories of one conversation pinned 1.25 GiB of the host's memory.
    Its default, under cgroup v1, is at least 512 MiB each (``ROOM``; half the host's memory shared by the processes
    that may run at once gave 59 MiB with ``--max-processes 200`` on a 24 GB host, under which a Python server on the
    ``mcp`` SDK was killed at its start), and half the host's memory for them together, the gateway's own group's
    (theirs are in it), both said in the startup line; what the process writes in its directories is memory of its
    control group's: it fills a third of its bound in ``/tmp``, and the other two thirds in ``/dev/shm`` are refused
    (or end the conversation), below the 512 MiB each directory may hold here. (A third, not a half: under cgroup v1
    a quarter of the bound is kept for its TCP buffers, and the interpreter's own pages count too.)"""
    needs("root", "bwrap", "cgroup-memory")
    from mcp_sessions._gateway.sealed._cgroups import Bounds

    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    bound = default_memory(201, together=True) >> 20  # the tests' gateway: --warm 0
    sealed = ("--process-containment", "bwrap", "--process-uids", UIDS, "--max-processes", "200")
    with gateway(server, *sealed, "--process-disk", "512") as process:  # egress: nothing of its network is charged
        assert bound == min(512, host // 4 >> 20)
        assert f"; {host // 2 >> 20} MiB together), memory {bound} MiB each" in process.output()
        mcp = client(process)
        session = mcp.create_session()
        assert process.process is not None
        cgroups = Bounds.found(64 << 20, None)
        assert cgroups is not None
        [own] = cgroups.parents[0].glob(f"mcp-sessions-{process.process.pid}-*-gateway")
        assert int((own / "memory.limit_in_bytes").read_text()) == host // 2 >> 12 << 12  # in pages
        assert [group.name for group in own.iterdir() if group.is_dir()]  # the conversation's, in it
        assert text(call(mcp, "fill", session, path="/tmp/third", mib=bound // 3)) == "filled"
        refused = call(mcp, "fill", session, path="/dev/shm/rest", mib=bound - bound // 3)
        if "error" in refused:  # the kernel's OOM killer ended it
            until(lambda: "over its memory bound (--process-memory)" in process.output(), process.output)
        else:
            assert text(refused).startswith("denied: "), refused


def test_a_server_its_memory_bound_kills_at_its_start_is_told_in_the_gateways_last_line() -> None:
    """A server the kernel killed at its start for its memory bound ended the gateway with "the server failed to
    initialize: Connection closed", the bound unsaid; the last line now says it, and the flag that raises it."""
    needs("cgroup-memory")
    server = f"{sys.executable} -c 'import json, sys; sys.stdin.readline(); bytearray(64 << 20)'"
    done = gateway_run("--port", str(free_port()), "--stdio", server, "--process-memory", "16")
    said = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert said[-1].startswith(f"mcp-sessions gateway: {server}: the server "), said[-1]
    assert "; it was killed over its memory bound, 16 MiB: raise --process-memory" in said[-1], said[-1]


@pytest.mark.parametrize(
    "sealed",
    [(containment, network) for containment in CONTAINMENTS for network in ("host", "egress")],
    indirect=True,
    ids="-".join,
)
def test_where_etc_resolv_conf_leads_under_run_a_process_still_reads_it(
    process: Process, request: pytest.FixtureRequest
) -> None:
    """systemd-resolved's layout: ``/etc/resolv.conf`` a link to a file under ``/run``, which a process's own
    ``/run`` hides. The gateway, in a mount namespace of its own where ``/etc`` is a copy with that link (the
    module's, :func:`sealed`), gives its processes the file the link leads to (under egress, their namespace's
    resolver configuration)."""
    _, network = request.node.callspec.params["sealed"]
    mcp = client(process)
    read = text(call(mcp, "read", mcp.create_session(), path="/etc/resolv.conf"))

    assert read.startswith("nameserver "), read
    assert (read == STUB) == (network == "host"), read


READY_GROUPS = (
    "import sys; from mcp_sessions._gateway.sealed._cgroups import Bounds, Cgroups; "
    "sys.stdout.write(str(Cgroups(Bounds.found(64 << 20, None)).create().dirs[0]))"
)
"""A gateway's first step with a control group (its first process's), in a process of its own: its run's group made
and the dead runs' removed; it prints the group it made, and ends, as a SIGKILLed gateway would, leaving it."""


def test_a_gateway_removes_the_groups_of_dead_gateways_alone_seen_from_any_pid_namespace() -> None:
    """A gateway removes the empty control groups that gateways killed before it left, as it starts. Its pid once
    told a dead gateway's groups from a live one's, and a gateway in a PID namespace of its own (``unshare --pid``,
    a container's) saw no other's pid: it removed the group another had just made for a process, whose start then
    failed ("Connection closed" at initialize). Now each gateway holds a lock on a group of its own while it lives."""
    needs("root", "cgroup-memory")
    from mcp_sessions._gateway.sealed._cgroups import Bounds, Cgroups

    isolated = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")
    dead = Path(subprocess.run([sys.executable, "-c", READY_GROUPS], capture_output=True, text=True, check=True).stdout)
    assert dead.is_dir()
    bounds = Bounds.found(64 << 20, None)
    assert bounds is not None
    cgroups = Cgroups(bounds)
    live = cgroups.create()  # this process's first: the dead run's groups removed; its own, empty, just made
    try:
        assert not dead.exists()
        assert not any(dead.parent.glob(f"{dead.name.rsplit('-', 1)[0]}-*"))
        done = subprocess.run([*isolated, sys.executable, "-c", READY_GROUPS], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert all(directory.is_dir() for directory in live.dirs)  # alive: another's pid namespace is no proof
    finally:
        live.remove()


def test_a_gateway_stopped_leaves_no_control_group(server: str) -> None:
    """A gateway's groups, its processes' and its own, are gone once it stops (SIGTERM): none waits for the next
    gateway's start. Idle meanwhile, its event loop's thread wakes for the watch of its processes' groups alone (one
    read of them all a tick, ``BOUNDS_POLL``), no longer for uvicorn's tick too, ten times a second (:func:`woken`,
    over a window of measure: ``IDLE``)."""
    needs("root", "bwrap", "cgroup-memory")
    from mcp_sessions._gateway.sealed._cgroups import Bounds

    cgroups = Bounds.found(64 << 20, None)
    assert cgroups is not None
    with gateway(server, "--process-containment", "bwrap", "--process-memory", "64") as process:
        assert process.process is not None
        pid = process.process.pid
        mcp = client(process)
        assert text(call(mcp, "whoami", mcp.create_session()))
        assert [group.name for group in cgroups.parents[0].glob(f"mcp-sessions-{pid}-*-gateway")]
        before = woken(pid)
        time.sleep(IDLE)
        assert woken(pid) - before < 4 * IDLE / BOUNDS_POLL, f"{woken(pid) - before} wakes in {IDLE} s"
    assert not [group.name for parent in cgroups.parents for group in parent.glob(f"mcp-sessions-{pid}-*")]


IDLE = 2.0


def woken(pid: int) -> int:
    """How often the thread ``pid`` has slept and woken (its voluntary context switches: the kernel's count)."""
    for line in Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/task/{pid}/status says no voluntary_ctxt_switches")


def test_processes_that_start_at_once_each_get_their_control_group() -> None:
    """A gateway's first processes (the revision probe, the warm ones) start at once, each in a thread of its own:
    the first readies the groups (its own group made and locked), the others wait for it; none is refused."""
    needs("root", "cgroup-memory")
    from concurrent.futures import ThreadPoolExecutor

    from mcp_sessions._gateway.sealed._cgroups import Bounds, Cgroups

    bounds = Bounds.found(64 << 20, None)
    assert bounds is not None
    cgroups = Cgroups(bounds)
    with ThreadPoolExecutor(8) as threads:
        groups = list(threads.map(lambda _: cgroups.create(), range(8)))
    try:
        assert len({group.dirs for group in groups}) == 8
        assert all(directory.is_dir() for group in groups for directory in group.dirs)
    finally:
        for group in groups:
            group.remove()
        cgroups.close()


def test_the_live_processes_groups_are_read_together_and_only_the_one_past_its_bound_is_woken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each process's watch hopped to a thread of its own every ``BOUNDS_POLL`` to read its group's files: an idle
    gateway cost 4.0 ms of CPU a second and 15.0 with 8 idle conversations (1.4 ms/s each; 200, ``--max-processes
    200``, over a quarter of a core doing nothing). Now the gateway's live groups are read together, in one thread
    hop a tick, by one of their watchers at a time (another reads on once it is gone), and only the one past its
    bound is woken: 8 groups, one of them a process's that forks past its pids bound."""
    needs("root", "cgroup-pids")
    import anyio
    import anyio.to_thread

    from mcp_sessions._gateway.sealed._cgroups import Bound, Bounds, Cgroups

    bounds = Bounds.found(None, 4)
    assert bounds is not None
    cgroups = Cgroups(bounds)
    groups = [cgroups.create() for _ in range(8)]
    hops: list[float] = []
    hop = anyio.to_thread.run_sync

    async def counted(function: Callable[[], object]) -> object:
        hops.append(anyio.current_time())
        return await hop(function)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    found: dict[int, Bound] = {}
    forks = f"echo $$ > {groups[5].procs[0]}; for i in 1 2 3 4 5 6; do sleep 60 & done; wait"

    async def watched() -> float:
        first = anyio.CancelScope()

        async def watch(index: int, scope: anyio.CancelScope | None = None) -> None:
            with scope or anyio.CancelScope():
                found[index] = await cgroups.reached(groups[index])

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch, 0, first)
            for index in range(1, 8):
                tasks.start_soon(watch, index)
            await until_awaited(lambda: len(hops) >= 3, "three ticks")
            first.cancel()  # the reader's process ended: another reads on
            ticked = len(hops)
            await until_awaited(lambda: len(hops) >= ticked + 2, "two ticks after the reader left")
            started = anyio.current_time()
            # its shell ends at its first fork refused ("Cannot fork"); its sleeps are killed with its group
            async with await anyio.open_process(["/bin/sh", "-c", forks], stdout=None, stderr=None):
                await until_awaited(lambda: 5 in found, "the group past its bound found")
                reacted = anyio.current_time() - started
            tasks.cancel_scope.cancel()
        return reacted

    try:
        reacted = anyio.run(watched)
        ticks = (hops[-1] - hops[0]) / BOUNDS_POLL
    finally:
        monkeypatch.undo()
        for group in groups:
            group.killed(WITHIN)
            group.remove()
        cgroups.close()
    assert found == {5: "pids"}
    assert len(hops) <= ticks + 3, f"{len(hops)} thread hops in {ticks:.1f} ticks, for 8 groups"
    assert reacted < BOUNDS_POLL + 1.0, f"{reacted:.2f} s"
