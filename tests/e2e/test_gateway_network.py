"""What of the network ``mcp-sessions gateway --stdio``'s processes reach (``--process-network``), and the operator's
view off it (``--status-socket``). A real gateway process, run as root with a uid per process (``--process-uids``),
in front of ``_hostile_stdio`` run by the system's python as those uids, whose ``connect`` tool tries a TCP
connection and says how it went.

Every connection a test asks of a process is to a loopback address: the kernel's refusals of the metadata address
and of the private ranges are shown by its own listing of the gateway's table (``nft list table``), never by
traffic there.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import ipaddress
import itertools
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
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from _mcp import legacy_request
from _redis import free_port, missing, only_skips
from _uids import members, uids
from _waits import WITHIN, until
from conftest import SECRET
from e2e import _sealed
from e2e._dns import elsewhere, host_address, resolver
from e2e._gateway import (
    Process,
    for_every_uid,
    gateway_run,
    legacy_initialize,
    main_run,
    readable_directory,
    result_of,
)
from mcp_sessions._gateway.sealed._network import (
    GATEWAY,
    NO_ROUTE,
    PROCESS_FLOWS,
    PROCESSES,
    EgressRules,
    egress_rules,
    resolvers,
)
from mcp_sessions._gateway.stdio._modes import default_max_processes

UIDS = uids(0, 100)
"""The gateways of this file's tests: a gateway's rules hold for the uids its processes hold, none else's."""
SHARED_UIDS = uids(50, 50)
""":func:`granting`'s, which it holds while the module runs: the half of :data:`UIDS` that the tests of overlapping
ranges (its first six) never reach."""
HOSTILE = Path(__file__).with_name("_hostile_stdio.py")
PER_CONVERSATION = ("--processes", "per-conversation")
SERVER = f"/usr/bin/python3 {HOSTILE}"
PROXY = ("--auth-principal-header", "X-Forwarded-User", "--forwarded-allow-ips", "127.0.0.1")
"""An auth proxy on this host's loopback, trusted to name the user."""
IDS = itertools.count(1)


def needs_root_and_nft() -> None:
    __tracebackhide__ = only_skips
    if os.geteuid() != 0:
        missing("this test needs root: the gateway gives each process a uid of its own")
    if shutil.which("nft") is None:
        missing("nft is not installed (Debian: apt-get install nftables; scripts/system-deps.sh)")


@contextlib.contextmanager
def gateway(*options: str) -> Iterator[Process]:
    """The gateway command in front of the hostile server (from where its processes' uids can read it), a process
    per conversation, none started ahead; its own shutdown at the end, which deletes its table."""
    with for_every_uid(HOSTILE) as path, _sealed.gateway(f"/usr/bin/python3 {path}", *PER_CONVERSATION, *options) as up:
        yield up


@contextlib.contextmanager
def listening(host: str = "127.0.0.1") -> Iterator[int]:
    """A TCP listener of the test's own (a local Redis, say) on ``host``: its port."""
    with socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET) as server:
        yield server.getsockname()[1]


def tried(http: httpx.Client, gateway: Process, session: dict[str, str], host: str, port: int) -> str:
    """What the process of ``session`` got when it connected to ``host:port``."""
    request_id = next(IDS)  # each its own: an id is the session's until its request is done with
    body = legacy_request("tools/call", {"name": "connect", "arguments": {"host": host, "port": port}}, id=request_id)
    answer = result_of(http.post(gateway.url(), json=body, headers=session), request_id)
    assert "result" in answer, answer
    found: str = answer["result"]["content"][0]["text"]
    return found


def there(interface: str) -> bool:
    """Whether this host's network namespace has the interface ``interface``."""
    try:
        socket.if_nametoindex(interface)
    except OSError:
        return False
    return True


def table(name: str) -> subprocess.CompletedProcess[str]:
    """The kernel's listing of the table ``name``."""
    return subprocess.run(["nft", "list", "table", "inet", name], capture_output=True, text=True)


def table_of(gateway: Process) -> str:
    """The name of ``gateway``'s table, as its startup line says it (in its whole log: a shared gateway's startup
    may be far back)."""
    said = gateway.log().decode(errors="replace")
    found = re.search(r"network egress \(nft table inet (mcp_sessions_[0-9a-f]{12})\)", said)
    assert found is not None, gateway.output()
    return found[1]


def startup_line(gateway: subprocess.Popen[str]) -> str:
    """The gateway's line that states its network (or uvicorn's "Started", where it says none), read from its
    stderr; a gateway that never says either is killed at ``WITHIN``, which ends the wait."""
    assert gateway.stderr is not None
    timer = threading.Timer(WITHIN, gateway.kill)
    timer.start()
    try:
        return next((each for each in gateway.stderr if "network egress" in each or "Started" in each), "")
    finally:
        timer.cancel()


@pytest.fixture(scope="module")
def granting() -> Iterator[tuple[Process, int, int, int]]:
    """A gateway behind an auth proxy on loopback, a uid each (egress), its status on a port of this host's, and two
    ports of this host's loopback granted (``--process-allow-net``), one IPv4, one IPv6: the gateway, its status
    port and the granted ports. The tests of what a process reaches share it, a conversation each."""
    needs_root_and_nft()
    status = free_port()
    with listening() as granted, listening("::1") as granted6:
        allowed = ("--process-allow-net", f"127.0.0.1:{granted}", "--process-allow-net", f"[::1]:{granted6}")
        with gateway(*PROXY, "--process-uids", SHARED_UIDS, "--status-port", str(status), *allowed) as process:
            yield process, status, granted, granted6


def test_a_process_reaches_neither_the_gateway_nor_its_status_nor_a_local_service(
    granting: tuple[Process, int, int, int], request: pytest.FixtureRequest
) -> None:
    """Behind an auth proxy on loopback, bob's process (the default network with --process-uids: egress, a network
    namespace of its own) cannot connect to the gateway from the proxy's address (to name carol, list her
    conversations and end one), nor to the operator's status port, nor to a service of this host's (a Redis, say):
    not on its own loopback (its namespace's), not at this host's loopback through its gateway, not at
    this host's address."""
    process, status, *_ = granting
    with listening("0.0.0.0") as service, _sealed.shared(process, request), httpx.Client(timeout=30) as http:
        bob = legacy_initialize(http, process.url(), {"X-Forwarded-User": "bob"})
        targets = {
            f"{what} at {host}": (host, port)
            for host in ("127.0.0.1", "::1", GATEWAY, host_address())
            for what, port in (("gateway", process.port), ("status", status), ("service", service))
        }
        # At once (the server answers each call on a thread of its own).
        with concurrent.futures.ThreadPoolExecutor(len(targets)) as each:
            tries = {name: each.submit(tried, http, process, bob, *target) for name, target in targets.items()}
            seen = {name: attempt.result() for name, attempt in tries.items()}
        said = process.log().decode(errors="replace")  # whole: the shared gateway's startup may be far back
    # Its own loopback refuses at once, and so do the kernel's rules what the kernel forwards; it has no IPv6 at all.
    refused = {name: "refused: Connection refused" for name in seen}
    refused.update({name: "refused: Cannot assign requested address" for name in seen if name.endswith(" at ::1")})
    assert seen == refused, seen
    # The startup line names the network once, as the kernel's rules hold it.
    # Its bounds: its default memory where the host gives a control group, else none.
    assert re.search(r"a uid each, bounds [^,]*(, memory \d+ MiB each)?, network egress \(nft table inet ", said)


@pytest.fixture(scope="module", params=["bwrap", "unshare"])
def egress(request: pytest.FixtureRequest) -> Iterator[tuple[str, Process]]:
    """A gateway in front of the sealed tests' hostile server (``_sealed.hostile``) under ``request.param``'s
    containment, a uid each (egress), 256 MiB each (a control group each), and that containment: the tests of what an
    egress process's network holds share it, a conversation each."""
    needs_root_and_nft()
    _sealed.needs(request.param, "cgroup-memory")
    options = ("--process-uids", SHARED_UIDS, "--process-memory", "256", "--process-containment", request.param)
    with _sealed.hostile() as server, _sealed.gateway(server, *options) as process:
        yield request.param, process


@pytest.mark.parametrize("egress", ["bwrap"], indirect=True)  # the default containment, where bubblewrap works
def test_an_egress_process_has_a_network_namespace_of_its_own(
    egress: tuple[str, Process], request: pytest.FixtureRequest
) -> None:
    """Under egress a process shares nothing of this host's network namespace: not a host service's abstract Unix
    socket (containerd's shim's hole), not the host's ``/proc/net`` (its listening ports), not its loopback ports
    (a port the process holds, a restarting service of the host's still binds)."""
    name = f"mcp-sessions-test-{os.urandom(6).hex()}"
    with contextlib.ExitStack() as stack:
        host_unix = stack.enter_context(socket.socket(socket.AF_UNIX))
        host_unix.bind("\0" + name)
        host_unix.listen()
        service = stack.enter_context(listening())
        process = stack.enter_context(_sealed.shared(egress[1], request))
        mcp = _sealed.client(process)
        session = mcp.create_session()
        wanted = free_port()
        seen = {
            "abstract": _sealed.text(_sealed.call(mcp, "abstract", session, address=name)),
            "its /proc/net": json.loads(_sealed.text(_sealed.call(mcp, "listening", session))),
            "held": _sealed.text(_sealed.call(mcp, "hold", session, port=wanted)),
        }
        with socket.create_server(("127.0.0.1", wanted)):  # the host's own, while the process holds its own
            pass
    assert seen["abstract"] == "denied: Connection refused"
    assert service not in seen["its /proc/net"], seen
    assert process.port not in seen["its /proc/net"], seen
    assert seen["held"] == "bound"


def in_its_namespace(uid: int) -> int:
    """The pid of a process of ``uid``'s in a network namespace other than the host's: the server's, or a helper's."""
    host = os.readlink("/proc/self/ns/net")
    return next(pid for pid in _sealed.of_uid(uid) if os.readlink(f"/proc/{pid}/ns/net") != host)


def status_of(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {name: value.strip() for name, _, value in (line.partition(":") for line in lines)}


def sharing(pid: int) -> set[int]:
    """The host's processes in ``pid``'s control groups or network namespace (its helpers', the holder's)."""
    found = set()
    for each in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            same_groups = (each / "cgroup").read_text() == Path(f"/proc/{pid}/cgroup").read_text()
            if same_groups or os.readlink(each / "ns/net") == os.readlink(f"/proc/{pid}/ns/net"):
                found.add(int(each.name))
    return found


def ports_of(uid: int) -> list[str]:
    """The host's TCP and UDP sockets of ``uid`` (``/proc/net``): none is a process's, under egress."""
    found = []
    for kind in ("tcp", "udp", "tcp6", "udp6"):
        rows = [line.split() for line in Path(f"/proc/net/{kind}").read_text().splitlines()[1:]]
        found += [f"{kind} {row[1]}" for row in rows if int(row[7]) == uid]
    return found


def interfaces(prefix: str = "mcs") -> set[str]:
    """The host's interfaces named ``prefix<N>``: the processes' host ends."""
    listed = json.loads(subprocess.check_output(["ip", "-j", "link", "show"]))
    return {each["ifname"] for each in listed if each["ifname"].removeprefix(prefix).isdigit()}


def addresses_of(pid: int) -> set[str]:
    """The global addresses of ``pid``'s network namespace."""
    shown = ["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "-j", "address", "show", "scope", "global"]
    listed = json.loads(subprocess.check_output(shown))
    return {each["local"] for link in listed for each in link.get("addr_info", []) if "local" in each}


def test_an_egress_process_s_network_has_no_helper_binds_nothing_on_the_host_and_is_refused_at_once(
    egress: tuple[str, Process], request: pytest.FixtureRequest
) -> None:
    """After a call, no process of an egress process's uid, of its control group or of its network namespace (the
    holder's) holds a capability: the kernel forwards for it, no helper does. Nothing is bound on the host for it:
    no socket of its uid's there, and the TCP and UDP ports it bound and the port it sends a datagram from are the
    host's still; a datagram to that port of the host's never reaches it (the namespace's own rules drop it, and
    count it). A connection its rules refuse is refused at once (the kernel's answer reaches it), and its address is
    its own (of PROCESSES), not the host's."""
    containment = egress[0]
    tcp, udp, closed = free_port(), free_port(), free_port()
    with _sealed.shared(egress[1], request) as process:
        mcp = _sealed.client(process)
        session = mcp.create_session()
        uid = json.loads(_sealed.text(_sealed.call(mcp, "whoami", session)))["uid"]
        bound = [
            _sealed.text(_sealed.call(mcp, tool, session, port=port)) for tool, port in (("hold", tcp), ("udp", udp))
        ]
        server_pid = in_its_namespace(uid)
        sent = _sealed.text(_sealed.call(mcp, "send", session, port=udp, host=GATEWAY, to=9))
        started = time.monotonic()
        refused = _sealed.text(_sealed.call(mcp, "connect", session, host=GATEWAY, port=closed))
        took = time.monotonic() - started
        held = ports_of(uid)
        with socket.create_server(("127.0.0.1", tcp)), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
            taken.bind(("127.0.0.1", udp))  # the host's own: the process's ports are its namespace's alone
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as intruder:
            intruder.sendto(b"in", (next(iter(addresses_of(server_pid))), udp))
        rules = ["nsenter", f"--net=/proc/{server_pid}/ns/net", "nft", "list", "table", "inet", "mcp_sessions"]
        dropped = re.compile(r"counter packets [1-9]\d* bytes \d+ drop")
        until(lambda: dropped.search(subprocess.run(rules, capture_output=True, text=True).stdout), "the drop")
        received = _sealed.text(_sealed.call(mcp, "received", session, port=udp))
        statuses = {pid: status_of(pid) for pid in {*sharing(server_pid), *_sealed.of_uid(uid)}}
        addresses = addresses_of(server_pid)
    assert bound == ["bound", "bound"]
    assert sent.startswith("denied: ") or sent == "sent", sent  # refused by the host's rules: this host's port 9
    assert (refused, took < 1.0) == ("denied: Connection refused", True), (refused, took)
    assert held == [], held
    assert received == "nothing"
    assert len(statuses) >= 2, statuses  # the server, its helpers and the holder
    capable = {pid: (status["Name"], status["CapEff"]) for pid, status in statuses.items() if int(status["CapEff"], 16)}
    # under unshare, the containment's own: root's shell that waits for the PID namespace's first process (no helper
    # of its network's, and the server's uid cannot signal it)
    firsts = [status for status in statuses.values() if status["NSpid"].split()[-1] == "1"]
    waiting = {pid for pid in capable if containment == "unshare" and any(f["PPid"] == str(pid) for f in firsts)}
    assert {pid: capable[pid] for pid in capable.keys() - waiting} == {}, capable
    assert len(waiting) <= 1, capable
    assert len(addresses) == 1, addresses
    assert ipaddress.ip_address(addresses.pop()) in PROCESSES  # its own, not the host's


# Run in an egress process (the hostile server's ``run``): ``count`` datagrams, one to each port of ``world`` from 1 on
# (each a new flow the host forwards and masquerades: a conntrack entry of the host's for 30 s); then ``connects`` TCP
# connections its rules refuse (this host's port at its gateway), each one's outcome and time. JSON on stdout.
_FLOWS_AND_REFUSALS = """
import json, socket, sys, time
world, count, gateway, closed, connects = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sending:
    for port in range(1, count + 1):
        sending.sendto(b"flow", (world, port))
refused = []
for _ in range(connects):
    started = time.monotonic()
    try:
        socket.create_connection((gateway, closed), 10).close()
        said = "connected"
    except OSError as exc:
        said = exc.strerror
    refused.append((said, round(time.monotonic() - started, 3)))
print(json.dumps(refused))
"""
# Run as root in a process's network namespace (nsenter): a datagram from ``source`` (another's address: the kernel lets
# root send from it, IP_TRANSPARENT), then one from the process's own address, to ``host:port``.
_SPOOFED = """
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
for source, said in ((sys.argv[3], b"spoofed"), (sys.argv[4], b"its own")):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sending:
        sending.setsockopt(socket.SOL_IP, 19, 1)  # IP_TRANSPARENT
        sending.bind((source, 0))
        sending.sendto(said, (host, port))
"""


def tracked(address: str, to: str) -> int:
    """The host's conntrack entries of the flows from ``address`` (a process's) to ``to``."""
    lines = Path("/proc/net/nf_conntrack").read_text().splitlines()
    return sum(f" src={address} dst={to} " in line for line in lines)


def counted(listing: str, comment: str) -> int:
    """The packets the counter of the rule of ``comment`` has seen, as ``nft list table``'s ``listing`` shows it."""
    found = re.search(rf'counter packets (\d+) bytes \d+ \S+(?: \S+)* comment "{re.escape(comment)}"', listing)
    assert found is not None, listing
    return int(found[1])


def test_an_egress_process_holds_its_own_flows_and_address_alone_and_no_ipv6() -> None:
    """What the veth link leaves a process of the host's shared tables, as a container's would: its new flows (a
    datagram to each of 2 x PROCESS_FLOWS ports of the world's, each a conntrack entry of the host's) hold at most
    PROCESS_FLOWS entries of the host's table, the rest refused and counted by the gateway's table, and none is left
    once it ends (its link deleted at the gateway's stop: conntrack deletes them, where each would stay 30 s); a
    datagram it sends from another's address (root in its namespace, as a lost CAP_NET_RAW would let it) is dropped
    before conntrack sees it, counted, and the one from its own address reaches a granted port; it has no IPv6 (no
    address: not ``::1``, not a link-local one); and twenty refused connections in a row are each refused at once (a
    TCP reset: no ICMP rate limit holds one back a second)."""
    needs_root_and_nft()
    closed = free_port()
    with contextlib.ExitStack() as stack:
        world, _ = stack.enter_context(elsewhere())
        granted = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        granted.bind(("127.0.0.1", 0))
        granted.settimeout(WITHIN)
        port = granted.getsockname()[1]
        server = stack.enter_context(_sealed.hostile())
        options = ("--process-uids", UIDS, "--process-allow-net", f"127.0.0.1:{port}")
        with _sealed.gateway(server, *options) as process:
            mcp = _sealed.client(process)
            session = mcp.create_session()
            uid = json.loads(_sealed.text(_sealed.call(mcp, "whoami", session)))["uid"]
            pid = in_its_namespace(uid)
            (address,) = addresses_of(pid)
            other = str(PROCESSES[-2] if address != str(PROCESSES[-2]) else PROCESSES[-3])
            inside = ["nsenter", f"--net=/proc/{pid}/ns/net"]
            spoofing = [*inside, sys.executable, "-c", _SPOOFED, GATEWAY, str(port), other, address]
            subprocess.run(spoofing, check=True, capture_output=True, timeout=WITHIN)
            first = granted.recv(100)
            ipv6 = json.loads(_sealed.text(_sealed.call(mcp, "run", session, argv=["cat", "/proc/net/if_inet6"])))
            loopback6 = _sealed.text(_sealed.call(mcp, "connect", session, host="::1", port=closed))
            flows = ["/usr/bin/python3", "-c", _FLOWS_AND_REFUSALS, world, str(2 * PROCESS_FLOWS), GATEWAY, str(closed)]
            ran = json.loads(_sealed.text(_sealed.call(mcp, "run", session, argv=[*flows, "20"])))
            held = tracked(address, world)
            listing = table(table_of(process)).stdout
        # the gateway stopped, its process's link deleted with it; the world's namespace still there (its
        # device's end would delete the entries masqueraded through it)
        left = tracked(address, world)
    assert first == b"its own"
    assert counted(listing, "not the process's own address") == 1, listing
    assert (ipv6["returncode"], ipv6["stdout"]) == (0, ""), ipv6
    assert loopback6 == "denied: Cannot assign requested address", loopback6
    assert ran["returncode"] == 0, ran
    refused = json.loads(ran["stdout"])
    assert {said for said, _ in refused} == {"Connection refused"}, refused
    assert max(took for _, took in refused) < 0.5, refused
    assert PROCESS_FLOWS - 10 <= held <= PROCESS_FLOWS, held
    assert counted(listing, "a process's flows past its bound") >= PROCESS_FLOWS, listing
    assert left == 0, left  # deleted with its link (each would have stayed 30 s)


def links_of(name: str) -> set[str]:
    """The host ends in the set ``links`` of the table ``name``: its processes'."""
    listed = ["nft", "-j", "list", "set", "inet", name, "links"]
    done = subprocess.run(listed, capture_output=True, text=True, check=True)
    found = [entry["set"] for entry in json.loads(done.stdout)["nftables"] if "set" in entry]
    return set(found[0].get("elem", []))


def routed_to(interface: str) -> set[str]:
    """The destinations of the host's routes by ``interface``: its process's address."""
    return {
        route["dst"] for route in json.loads(subprocess.check_output(["ip", "-j", "route", "show", "dev", interface]))
    }


def test_two_gateways_give_distinct_addresses_and_each_pair_goes_with_its_process_or_its_gateway() -> None:
    """Two gateways at once, on overlapping uid ranges: each process has a host end and an address of its own, and
    reaches the world (a namespace of the test's own, by a route of this host's). A conversation's end deletes its
    pair, its route and its set's element; a gateway's SIGKILL its processes' pairs (they go with the namespaces).
    The killed gateway's table judges nothing of a live gateway's while it stays: the other's next conversation, on a
    uid the killed one's processes had (its pair's name), reaches the port its gateway grants (the killed one's rules
    refuse it), and the killed table's sets ``uids`` and ``links`` hold none of its; and it goes with a third
    gateway's start, though a process of its range runs (as on a team's host, whose gateways share one), whose
    process, on the other uid the killed one's had, reaches that grant too."""
    needs_root_and_nft()
    first = members(UIDS)[0]
    before = interfaces()
    with contextlib.ExitStack() as stack:
        world, (port,) = stack.enter_context(elsewhere())
        granted = stack.enter_context(listening())
        grant = ("--process-allow-net", f"127.0.0.1:{granted}")
        http = stack.enter_context(httpx.Client(timeout=30))
        a = stack.enter_context(gateway("--process-uids", f"{first}-{first + 3}", *grant))
        b = stack.enter_context(gateway("--process-uids", f"{first + 1}-{first + 5}"))
        sessions = [legacy_initialize(http, each.url()) for each in (a, b)]
        reached = [tried(http, each, session, world, port) for each, session in zip((a, b), sessions, strict=True)]
        tables = table_of(a), table_of(b)
        links = [links_of(name) for name in tables]
        addresses = {interface: routed_to(interface) for interface in links[0] | links[1]}
        assert http.delete(a.url(), headers=sessions[0]).status_code in (200, 204)
        until(lambda: len(links_of(tables[0])) == len(links[0]) - 1, "a's conversation's host end out of its set")
        ended = links[0] - links_of(tables[0])
        left = interfaces() - before
        assert b.process is not None
        os.killpg(b.process.pid, signal.SIGKILL)
        b.process.wait(timeout=WITHIN)
        until(lambda: not (interfaces() - before) & links[1], "b's pairs gone with its namespaces")
        again = legacy_initialize(http, a.url())
        after_kill = {"a's": tried(http, a, again, GATEWAY, granted)}  # on first + 3, b's conversation's uid
        killed_sets, live_links = (held(tables[1]), links_of(tables[1])), links_of(tables[0])
        server = stack.enter_context(_sealed.hostile())
        third = ("--process-uids", f"{first + 1}-{first + 1}", "--sessionless", "shared", *grant)  # b's shared one's
        c = stack.enter_context(_sealed.gateway(server, *third))
        gone = table(tables[1]).returncode  # at c's start: no host end of its is there, a process of its range runs
        after_kill["c's"] = _sealed.text(_sealed.call(_sealed.client(c), "connect", host=GATEWAY, port=granted))
        uids_held = [held(tables[0]), held(table_of(c))]
    assert after_kill == {"a's": "connected", "c's": "connected"}, after_kill
    assert len(links[1] & live_links) == 1, (links[1], live_links)  # a's new conversation's host end: b's name
    assert killed_sets == ([], links[1] - live_links), killed_sets  # a's uid and host end out of b's sets
    assert gone != 0
    assert uids_held == [[first, first + 3], [first + 1]], uids_held
    assert reached == ["connected", "connected"], reached
    assert len(links[0]) == len(links[1]) == 2 and not links[0] & links[1], links  # a shared process, a conversation's
    assert all(len(routes) == 1 for routes in addresses.values()), addresses
    assert len({route for routes in addresses.values() for route in routes}) == 4, addresses
    assert not ended & left, (ended, left)  # its pair deleted, its route with it


def test_a_host_without_a_default_route_is_said_once_at_startup() -> None:
    """A gateway on a host with no default route (a network namespace of the test's own: its loopback alone) says so
    once, after its startup line, and starts; no veth pair is made, where it could reach nothing: such a process has
    its own loopback alone (:func:`routed` is false there, as it is true here)."""
    needs_root_and_nft()
    alone = ("unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh")
    asked = "from mcp_sessions._gateway.sealed._network import routed; print(routed())"
    seen = [
        subprocess.run([*prefix, sys.executable, "-c", asked], capture_output=True, text=True).stdout
        for prefix in ((), alone)
    ]
    command = [*alone, sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(free_port()), "--stdio", SERVER]
    environ = {**os.environ, "MCP_SESSIONS_SECRET": SECRET}
    gateway = subprocess.Popen(
        [*command, "--process-uids", UIDS, "--log-level", "info"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environ,
    )
    said = []
    try:
        assert gateway.stdout is not None
        for line in gateway.stdout:  # to the line after the startup line (the test's timeout bounds it)
            said.append(line)
            if len(said) > 1 and "each process:" in said[-2]:
                break
    finally:
        gateway.terminate()
        gateway.communicate(timeout=WITHIN)
    assert seen == ["True\n", "False\n"]
    assert said[-1].partition(" ")[2] == f"WARNING: mcp-sessions gateway: {NO_ROUTE}\n", said  # after its time


def test_a_host_that_refuses_a_user_namespace_is_said_at_startup_in_one_line() -> None:
    """Each egress process's network is made in a user namespace of its own: a host that allows none (a user
    namespace of the test's own whose ``user.max_user_namespaces`` is 0, where the gateway is root) fails the
    gateway's start in one line that says what to do, not every process's start."""
    needs_root_and_nft()
    _sealed.needs("bwrap")
    none_allowed = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'
    line = [
        "unshare",
        "--user",
        "--map-root-user",
        "sh",
        "-c",
        none_allowed,
        "sh",
        sys.executable,
        "-m",
        "mcp_sessions",
    ]
    line += ["gateway", "--port", str(free_port()), "--stdio", SERVER, "--process-uids", UIDS]
    environ = {**os.environ, "MCP_SESSIONS_SECRET": SECRET}
    done = subprocess.run([*line, "--process-containment", "bwrap"], capture_output=True, text=True, env=environ)
    said = (
        "--process-network egress: each process's network is made in a user namespace of its own, which this host "
        "refuses (unshare: unshare failed: No space left on device): allow one (sysctl user.max_user_namespaces), "
        "or --process-network none"
    )
    assert (done.returncode, done.stderr) == (2, f"mcp-sessions gateway: {said}\n")


def test_a_host_whose_routes_overlap_the_processes_addresses_is_refused_in_one_line() -> None:
    """A host with an address (so a route) in the processes' range (a network namespace of the test's own) would have
    it shadowed by a process's: the gateway refuses to start, in one line that names the overlap."""
    needs_root_and_nft()
    _sealed.needs("bwrap")
    address = PROCESSES[7]
    own = f'ip link set lo up && ip address add {address}/32 dev lo && exec "$@"'
    line = ["unshare", "--net", "sh", "-c", own, "sh", sys.executable, "-m", "mcp_sessions", "gateway"]
    line += ["--port", str(free_port()), "--stdio", SERVER, "--process-uids", UIDS, "--process-containment", "bwrap"]
    done = subprocess.run(line, capture_output=True, text=True, env={**os.environ, "MCP_SESSIONS_SECRET": SECRET})
    said = (
        f"--process-network egress: the processes' addresses, {PROCESSES}, overlap this host's route to {address} "
        "(dev lo), which they would shadow: remove it, or --process-network none"
    )
    assert (done.returncode, done.stderr) == (2, f"mcp-sessions gateway: {said}\n")


def test_a_host_chain_that_drops_by_policy_is_said_at_startup() -> None:
    """A host whose own forward chain drops by policy (Docker's ``FORWARD`` through iptables-nft, in a network namespace
    of the test's own) drops every ``egress`` process's packets, whatever the gateway's table accepts: its startup
    line names the chain and what it must accept."""
    needs_root_and_nft()
    _sealed.needs("bwrap")
    chain = "add chain ip filter FORWARD { type filter hook forward priority 0; policy drop; }"
    own = f'ip link set lo up && nft add table ip filter && nft "{chain}" && exec "$@"'
    line = ["unshare", "--net", "sh", "-c", own, "sh", sys.executable, "-m", "mcp_sessions", "gateway"]
    line += ["--port", str(free_port()), "--log-level", "info", "--stdio", SERVER, "--process-uids", UIDS]
    environ = {**os.environ, "MCP_SESSIONS_SECRET": SECRET}
    wanted = "the host's chains ip filter FORWARD drop by policy what they do not accept: a process reaches nothing "
    wanted += 'through them until they accept iifname "mcs*" (docs/security.md)'
    with subprocess.Popen(line, stderr=subprocess.PIPE, text=True, env=environ) as gateway:
        try:
            said = startup_line(gateway)
        finally:
            gateway.terminate()
    assert wanted in said, said


def test_a_host_routes_for_its_processes_alone_where_a_gateway_turned_its_forwarding_on() -> None:
    """A host (a network namespace of the test's own) whose uplink's IPv4 forwarding is off (set so: a new namespace
    takes this host's, on where Docker or podman runs), with a neighbour on that link (another namespace) that routes
    the host's other network through it: the gateway turns the uplink's forwarding on (its processes' replies arrive
    there), and the host routes nothing for the neighbour for it: its datagram is dropped in the table every gateway
    shares, and counted; the table stays after the gateway's stop, as the forwarding does, so that a gateway started
    later (which finds the forwarding on, and turns nothing on) leaves the host as guarded. A process's replies pass it
    (every test here that reaches the world's address)."""
    needs_root_and_nft()
    _sealed.needs("bwrap")
    host, neighbour = (f"mcp-sessions-test-{os.getpid()}-{role}" for role in ("host", "neighbour"))
    in_host, in_neighbour = ["ip", "-n", host], ["ip", "-n", neighbour]
    steps = [
        ["ip", "netns", "add", host],
        ["ip", "netns", "add", neighbour],
        ["ip", "netns", "exec", host, "sysctl", "-qw", "net.ipv4.conf.all.forwarding=0"],  # its interfaces' default too
        [*in_host, "link", "add", "up0", "type", "veth", "peer", "name", "eth0", "netns", neighbour],
        [*in_host, "address", "add", "11.78.0.1/24", "dev", "up0"],
        [*in_host, "link", "add", "inner0", "type", "veth", "peer", "name", "inner1"],
        [*in_host, "address", "add", "11.79.0.1/24", "dev", "inner0"],
        *([*in_host, "link", "set", each, "up"] for each in ("lo", "up0", "inner0", "inner1")),
        [*in_host, "route", "add", "default", "via", "11.78.0.2"],
        [*in_neighbour, "address", "add", "11.78.0.2/24", "dev", "eth0"],
        [*in_neighbour, "link", "set", "eth0", "up"],
        [*in_neighbour, "route", "add", "11.79.0.0/24", "via", "11.78.0.1"],
        # what the host routes to its other network for the neighbour, counted as it leaves
        [
            "ip",
            "netns",
            "exec",
            host,
            "nft",
            "add table inet seen; add chain inet seen out { type filter hook "
            'postrouting priority 0; }; add rule inet seen out oifname "inner0" udp dport 9 counter',
        ],
    ]
    sending = ["ip", "netns", "exec", neighbour, sys.executable, "-c"]
    sending.append("import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('11.79.0.2', 9))")
    listed = ["ip", "netns", "exec", host, "nft", "list", "ruleset"]

    def seen() -> tuple[int, int]:
        """The datagrams routed to the host's other network, and those the shared table dropped."""
        listing = subprocess.run(listed, capture_output=True, text=True, check=True).stdout
        routed = re.search(r'oifname "inner0" udp dport 9 counter packets (\d+)', listing)
        dropped = re.search(r'counter packets (\d+) bytes \d+ drop comment "routed for no process"', listing)
        return int(routed[1]) if routed else 0, int(dropped[1]) if dropped else 0

    line = ["ip", "netns", "exec", host, sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(free_port())]
    line += ["--log-level", "info", "--stdio", SERVER, "--process-uids", UIDS, "--process-containment", "bwrap"]
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True, text=True)
        asked = ["ip", "netns", "exec", host, "cat", "/proc/sys/net/ipv4/conf/up0/forwarding"]
        before = subprocess.run(asked, capture_output=True, text=True, check=True).stdout
        environ = {**os.environ, "MCP_SESSIONS_SECRET": SECRET}
        with subprocess.Popen(line, stderr=subprocess.PIPE, text=True, env=environ) as gateway:
            said = startup_line(gateway)
            subprocess.run(sending, check=True, timeout=WITHIN)
            while_up = until(lambda: (counts := seen()) != (0, 0) and counts, "the datagram routed or dropped")
            gateway.terminate()
        subprocess.run(sending, check=True, timeout=WITHIN)
        stopped = until(lambda: (counts := seen()) != while_up and counts, "the next datagram routed or dropped")
        after = subprocess.run(asked, capture_output=True, text=True, check=True).stdout
    finally:
        for each in (host, neighbour):
            subprocess.run(["ip", "netns", "delete", each], check=False, capture_output=True)
    assert (before, after) == ("0\n", "1\n")
    assert "up0 (turned on)" in said, said
    assert (while_up, stopped) == ((0, 1), (0, 2))


def test_a_process_reaches_the_ports_granted_and_the_kernel_lists_what_it_refuses(
    granting: tuple[Process, int, int, int], request: pytest.FixtureRequest
) -> None:
    """``--process-allow-net 127.0.0.1:PORT`` (and ``[::1]:PORT``): that port of this host's loopback connects, at
    the namespace's gateway; no other port there, and not its own loopback's. ``nft list table`` shows the exceptions
    first, then port 53 to the host's resolvers alone, then this host, its broadcasts, the link-local, the private,
    transition and reserved ranges refused."""
    process, _, granted, granted6 = granting
    with listening() as other, _sealed.shared(process, request), httpx.Client(timeout=30) as http:
        listing = table(table_of(process)).stdout
        session = legacy_initialize(http, process.url(), {"X-Forwarded-User": "alice"})  # whom the proxy names
        seen = {
            "granted": tried(http, process, session, GATEWAY, granted),
            "another port": tried(http, process, session, GATEWAY, other),
            "its own loopback": tried(http, process, session, "127.0.0.1", granted),
        }
    assert (seen["granted"], seen["its own loopback"]) == ("connected", "refused: Connection refused")
    assert seen["another port"] == "refused: Connection refused", seen  # the kernel's refusal, at once
    dns = "meta l4proto { tcp, udp } th dport 53"
    dns_rules = []
    for family, version in (("ip", 4), ("ip6", 6)):
        if found := [str(each) for each in resolvers() if each.version == version]:
            each = found[0] if len(found) == 1 else f"{{ {', '.join(found)} }}"
            dns_rules.append(f"{family} daddr {each} {dns} accept")
    expected = [
        f"ip daddr 127.0.0.1 meta l4proto {{ tcp, udp }} th dport {granted} accept",
        f"ip6 daddr ::1 meta l4proto {{ tcp, udp }} th dport {granted6} accept",
        *dns_rules,
        f"{dns} goto refuse",
        "fib daddr type local goto refuse",
        "fib daddr type broadcast goto refuse",
        "ip daddr { 100.100.100.200, 168.63.129.16, 169.254.169.254, 169.254.170.2 } goto refuse",
        "ip6 daddr fd00:ec2::254 goto refuse",
        "ip daddr { 169.254.0.0/16, 224.0.0.0/4, 255.255.255.255 } goto refuse",
        "ip6 daddr { fe80::/10, ff00::/8 } goto refuse",
        "ip daddr { 0.0.0.0/8, 10.0.0.0/8, 100.64.0.0/10, 172.16.0.0/12, 192.168.0.0/16 } goto refuse",
        "ip6 daddr fc00::/7 goto refuse",
        "ip6 daddr { 64:ff9b::/96, 64:ff9b:1::/48, 2001::/32, 2002::/16, fec0::/10 } goto refuse",
        "ip daddr { 192.0.0.0/24, 192.0.2.0/24, 198.18.0.0/15, 198.51.100.0/24, 203.0.113.0/24, 240.0.0.0/4 }",
        "ip6 daddr 2001:db8::/32 goto refuse",
    ]
    chains = chains_of(listing)
    assert len(chains["egress"]) == len(expected), listing
    for rule, start in zip(chains["egress"], expected, strict=True):
        assert rule.startswith(start), listing  # the kernel's words, then its reject's kind and the comment
    # one definition, jumped to from where a process's packets arrive, and from its uid's sockets (the proxy's)
    assert chains["output"][-1] == "meta skuid @uids jump egress", listing
    assert chains["forward"][-1] == chains["input"][-1] == "iifname @links jump egress", listing


def chains_of(listing: str) -> dict[str, list[str]]:
    """Each chain of ``nft list table``'s ``listing``, by name: its rules, as the kernel lists them."""
    chains: dict[str, list[str]] = {}
    rules: list[str] = []
    for line in (each.strip() for each in listing.splitlines()):
        if line.startswith("chain "):
            rules = chains.setdefault(line.split()[1], [])
        elif line and line != "}" and not line.startswith("type "):
            rules.append(line)
    return chains


def held(name: str) -> list[int]:
    """The uids in the set ``uids`` of the table ``name``: those its rules hold for."""
    listed = ["nft", "-j", "list", "set", "inet", name, "uids"]
    done = subprocess.run(listed, capture_output=True, text=True, check=True)
    found = [entry["set"] for entry in json.loads(done.stdout)["nftables"] if "set" in entry]
    return sorted(found[0].get("elem", []))


def test_gateways_with_overlapping_uid_ranges_each_grant_their_own_processes_alone() -> None:
    """Two gateways of one host, given overlapping ``--process-uids`` ranges and each granting a port of its own: a
    process of each, both on uids of the overlap, reaches its own gateway's grant and not the other's (each table's
    rules hold for the uids its gateway holds, never for its whole range); a uid given back leaves its set."""
    needs_root_and_nft()
    first = members(UIDS)[0]
    with listening() as port_a, listening() as port_b, httpx.Client(timeout=30) as http:
        grant_a = ("--process-uids", f"{first}-{first + 3}", "--process-allow-net", f"127.0.0.1:{port_a}")
        grant_b = ("--process-uids", f"{first + 1}-{first + 5}", "--process-allow-net", f"127.0.0.1:{port_b}")
        with gateway(*grant_a) as a, gateway(*grant_b) as b:
            tables = table_of(a), table_of(b)
            shared = [held(name) for name in tables]  # each gateway's shared process, started with it
            on_a = legacy_initialize(http, a.url())
            assert tried(http, a, on_a, GATEWAY, port_a) == "connected"  # its process runs, on a uid of a's
            on_b = legacy_initialize(http, b.url())
            targets = {
                "a's to a's grant": (a, on_a, port_a),
                "b's to b's grant": (b, on_b, port_b),
                "a's to b's grant": (a, on_a, port_b),
                "b's to a's grant": (b, on_b, port_a),
            }
            # At once (the server answers each call on a thread of its own).
            with concurrent.futures.ThreadPoolExecutor(len(targets)) as each:
                tries = {
                    name: each.submit(tried, http, up, session, GATEWAY, port)
                    for name, (up, session, port) in targets.items()
                }
                seen = {name: attempt.result() for name, attempt in tries.items()}
            sets = [held(name) for name in tables]
            assert http.delete(a.url(), headers=on_a).status_code in (200, 204)
            until(lambda: held(tables[0]) == shared[0], "a's uid out of its set once its process ended")
            assert held(tables[1]) == sets[1]
    # the conversations' processes on first + 2 and first + 3: each in the other's range too
    assert (shared, sets) == ([[first], [first + 1]], [[first, first + 2], [first + 1, first + 3]])
    assert (seen["a's to a's grant"], seen["b's to b's grant"]) == ("connected", "connected"), seen
    assert seen["a's to b's grant"] == "refused: Connection refused", seen  # the kernel's refusal, at once
    assert seen["b's to a's grant"] == "refused: Connection refused", seen


def test_a_gateway_deletes_only_the_tables_of_gateways_that_are_gone_once_their_links_are() -> None:
    """Two gateways at once, one in a PID namespace of its own (a pid read across namespaces proves nothing): each
    its own table, and one's stop leaves the other's. A SIGKILLed gateway's table stays while a host end of its set
    ``links`` is there (a process that outlived it: here an interface of the test's own of that name), and goes with
    the next start once none is, though a process of its uid range runs (on a host whose gateways share a range, one
    always does); a table whose owner cannot be proven gone (no lock file) is left alone. A SIGTERM deletes a
    gateway's own."""
    needs_root_and_nft()
    # Another checkout's gateways (their rule: a table goes once no process of its uids runs) leave it while the
    # survivor below runs; and two runs' copies of this test, one at a time.
    lock = open("/run/mcp-sessions/test-pid-namespace.lock", "w")  # noqa: SIM115 - closed below
    fcntl.flock(lock, fcntl.LOCK_EX)  # the other run's copy ends within its own timeout
    unproven = f"mcp_sessions_unproven_{os.getpid()}"  # no lock file: an older gateway's, another program's
    subprocess.run(["nft", "add", "table", "inet", unproven], check=True)
    uid = int(UIDS.split("-")[0]) + 99  # a process of its uids that outlives the killed gateway (the test's own)
    survivor = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "600"])
    outlived = f"mst{os.getpid()}-o"[-15:]  # a host end that outlives its gateway, as a surviving process's would
    try:  # running before the kill: no gateway of this host, another run's neither, may take the table for gone
        until(lambda: survivor.pid in _sealed.of_uid(uid), "the survivor to run as its uid")
        with _sealed.hostile() as server:
            prefix = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")
            with _sealed.gateway(server, "--process-uids", UIDS, prefix=prefix) as killed:
                with _sealed.gateway(server, "--process-uids", UIDS) as first:
                    tables = table_of(first), table_of(killed)
                    assert tables[0] != tables[1]
                    assert [table(name).returncode for name in tables] == [0, 0]
                assert [table(name).returncode for name in tables] == [1, 0]  # the first's stop left the other's
                pair = ["ip", "link", "add", outlived, "type", "veth", "peer", "name", f"{outlived[:-1]}p"]
                subprocess.run(pair, check=True)
                subprocess.run(["nft", "add", "element", "inet", tables[1], "links", f'{{ "{outlived}" }}'], check=True)
                assert killed.process is not None  # SIGKILLed, the gateway with its PID namespace (unshare ignores
                os.killpg(killed.process.pid, signal.SIGKILL)  # the SIGTERM the block's end would send it)
                killed.process.wait(timeout=WITHIN)
            assert table(tables[1]).returncode == 0  # killed: its table is left
            with _sealed.gateway(server, "--process-uids", UIDS) as following:
                assert table(tables[1]).returncode == 0, "kept while a host end of its links is there"
                assert table(table_of(following)).returncode == 0
            subprocess.run(["ip", "link", "delete", outlived], check=True)
            # the kernel frees a killed process's namespace, and its veth pair, after the process is gone (later on a
            # busy host): "none is" is awaited, not assumed
            until(lambda: not any(map(there, links_of(tables[1]))), "the killed gateway's host ends to go")
            with _sealed.gateway(server, "--process-uids", UIDS):
                assert table(tables[1]).returncode != 0, "deleted once none is, a process of its range running"
                assert table(unproven).returncode == 0, "no lock file: not proven gone"
            assert survivor.poll() is None
    finally:
        survivor.kill()
        survivor.wait(timeout=WITHIN)
        subprocess.run(["ip", "link", "delete", outlived], check=False, capture_output=True)
        subprocess.run(["nft", "delete", "table", "inet", unproven], check=False)
        lock.close()


def test_names_resolve_with_no_flag_and_a_granted_name_is_reached() -> None:
    """Under egress a process resolves names through the host's resolver with no flag (a stand-in on loopback,
    the gateway run where /etc/resolv.conf names it), and ``--process-allow-host NAME:PORT`` grants that port at
    the addresses the gateway resolves NAME to (here an address of the world's, in a namespace of the test's own,
    which egress reaches anyway: what a name grants beyond the world's is by number alone, as the next test shows)."""
    needs_root_and_nft()
    with contextlib.ExitStack() as stack:
        world, (granted,) = stack.enter_context(elsewhere())
        prefix = stack.enter_context(resolver({"service.test": world}))
        server = stack.enter_context(_sealed.hostile())
        options = ("--process-uids", UIDS, "--process-allow-host", f"service.test:{granted}")
        process = stack.enter_context(_sealed.gateway(server, *options, prefix=prefix))
        mcp = _sealed.client(process)
        session = mcp.create_session()
        seen = {
            "resolved": _sealed.text(_sealed.call(mcp, "resolve", session, host="service.test")),
            "unknown": _sealed.text(_sealed.call(mcp, "resolve", session, host="nowhere.test")),
            "granted": _sealed.text(_sealed.call(mcp, "connect", session, host="service.test", port=granted)),
        }
        listing = table(table_of(process)).stdout
    assert seen["resolved"] == world
    assert seen["unknown"].startswith("denied: ")  # the stand-in's NXDOMAIN
    assert seen["granted"] == "connected"
    assert f"{world} . {granted} timeout 10m" in listing  # the name's address, in its set for 600 s


REBINDING = {
    "metadata.test": ("169.254.169.254", "the clouds' metadata and platform services"),
    "wireserver.test": ("168.63.129.16", "the clouds' metadata and platform services"),
    "loopback.test": ("127.0.0.1", "this host's own"),
    "mapped.test": ("::ffff:127.0.0.1", "this host's own"),
    "loopback6.test": ("::1", "this host's own"),
    "private.test": ("10.1.2.3", "private ranges"),
    "nat64.test": ("64:ff9b::a9fe:a9fe", "transition ranges (NAT64, 6to4, Teredo, site-local)"),
    "reserved.test": ("240.0.0.1", "reserved and documentation ranges"),
}
"""Rebinding answers: a name of the world's that resolves to what a process may not reach by its number."""
STILL_REFUSED = {
    "metadata.private.test": ("169.254.169.254", "the clouds' metadata and platform services"),
    "alibaba.private.test": ("100.100.100.200", "the clouds' metadata and platform services"),
    "ec2.private.test": ("fd00:ec2::254", "the clouds' metadata and platform services"),
    "loopback.private.test": ("127.0.0.1", "this host's own"),
    "link.private.test": (
        "169.254.7.7",
        "link-local, multicast and broadcast (the cloud's metadata address, mDNS, DHCP)",
    ),
    "multicast.private.test": (
        "224.0.0.251",
        "link-local, multicast and broadcast (the cloud's metadata address, mDNS, DHCP)",
    ),
    "this-network.private.test": ("0.0.0.1", "private ranges"),
    "reserved.private.test": ("240.0.0.1", "reserved and documentation ranges"),
}
"""What a name granted with its private answers (``--process-allow-private-host``) still may not answer."""


def test_a_name_never_grants_what_its_number_would_not() -> None:
    """A granted name whose answer is the metadata address, Azure's WireServer, this host's loopback (as IPv4, as
    ``::1``, IPv4-mapped), this host's own address, a private, transition or reserved address is not granted: its set
    holds none of them, the log says each once with why, and a process that connects to this host's address by such a
    name (a listener there) is refused; unless ``--process-allow-net`` grants that address and port by its number.
    ``--process-allow-private-host`` grants a name's private answer (a private address that a network namespace of
    the test's own holds: the process connects, the startup line says so), and none of :data:`STILL_REFUSED`: the
    metadata addresses (those within the private ranges too), loopback, the link, this network, reserved ones."""
    needs_root_and_nft()
    address = host_address()
    with contextlib.ExitStack() as stack:
        refused, allowed = stack.enter_context(listening(address)), stack.enter_context(listening(address))
        wiki, (internal,) = stack.enter_context(elsewhere(address=f"10.77.{os.getpid() % 250}.2"))
        names = {name: answer for name, (answer, _) in {**REBINDING, **STILL_REFUSED}.items()}
        others = {"own.test": address, "allowed.test": address, "wiki.private.test": wiki, "own.private.test": address}
        prefix = stack.enter_context(resolver({**names, **others}))
        server = stack.enter_context(_sealed.hostile())
        still = [*STILL_REFUSED, "own.private.test"]
        granted = [
            *(f"--process-allow-host={name}:{refused}" for name in [*REBINDING, "own.test"]),
            *("--process-allow-host", f"allowed.test:{allowed}", "--process-allow-net", f"{address}:{allowed}"),
            *(f"--process-allow-private-host={name}:{refused}" for name in still),
            *("--process-allow-private-host", f"wiki.private.test:{internal}"),
        ]
        process = stack.enter_context(_sealed.gateway(server, "--process-uids", UIDS, *granted, prefix=prefix))
        mcp = _sealed.client(process)
        session = mcp.create_session()
        seen = {
            "own": _sealed.text(_sealed.call(mcp, "connect", session, host="own.test", port=refused)),
            "allowed": _sealed.text(_sealed.call(mcp, "connect", session, host="allowed.test", port=allowed)),
            "own, private": _sealed.text(_sealed.call(mcp, "connect", session, host="own.private.test", port=refused)),
            "wiki": _sealed.text(_sealed.call(mcp, "connect", session, host="wiki.private.test", port=internal)),
        }
        listing = table(table_of(process)).stdout
        said = process.log().decode()  # whole: its lines of refused answers fill more than output()'s tail
    assert seen["own"].startswith("denied: "), seen
    assert seen["own, private"].startswith("denied: "), seen
    assert seen["allowed"] == "connected", seen
    assert seen["wiki"] == "connected", seen
    assert re.findall(r"([^\s{,]+) \. \d+ timeout", listing) == [wiki], listing  # the private answer alone
    private = f"; the private answers of {', '.join(f'{name}:{refused}' for name in still)}, wiki.private.test:"
    assert f"{private}{internal} granted too (--process-allow-private-host)" in said, said
    answers = [*REBINDING.items(), ("own.test", (address, "this host's own"))]
    for name, (answer, why) in [*answers, *STILL_REFUSED.items(), ("own.private.test", (address, "this host's own"))]:
        flag = "--process-allow-private-host" if name.endswith(".private.test") else "--process-allow-host"
        line = f"{flag} {name}: its answer {ipaddress.ip_address(answer)} is not granted ({why})"
        assert said.count(line) == 1, (line, said)
    assert "allowed.test: its answer" not in said
    assert "wiki.private.test: its answer" not in said


def test_a_refused_answer_is_said_once_not_at_every_refresh(caplog: pytest.LogCaptureFixture) -> None:
    """The gateway's table, in process, for a name this host resolves itself (``localhost``: its loopback, from
    /etc/hosts): resolved again and again, its answers are said once each, and never granted."""
    needs_root_and_nft()
    policy = egress_rules("egress", members(UIDS)[0], (), (), 1, ("localhost:443",))
    assert policy is not None
    rules = EgressRules(policy)
    caplog.set_level(logging.WARNING, "mcp_sessions.gateway")
    rules.install()
    try:
        rules.refresh()
        rules.refresh()
        listing = table(rules.table).stdout
    finally:
        rules.remove()
    said = [record.getMessage() for record in caplog.records]
    line = "--process-allow-host localhost: its answer 127.0.0.1 is not granted (this host's own): --process-allow-net"
    assert any(each.startswith(line) for each in said), said
    assert len(said) == len(set(said)), said  # each answer (::1 too, where /etc/hosts has it) once
    assert re.search(r"set hostports\d \{[^}]*elements", listing) is None, listing  # its sets hold no address


def test_the_status_socket_serves_the_status_and_gateway_status_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "operator" / "status.sock"
    with gateway("--status-socket", str(path)) as process, httpx.Client(timeout=30) as http:
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700  # made so
        counted = legacy_request("tools/call", {"name": "count", "arguments": {}})
        http.post(process.url(), json=counted, headers=legacy_initialize(http, process.url()))  # its process starts
        seen = json.loads(main_run("gateway", "status", "--status-socket", str(path), "--json").stdout)
        shown = main_run("gateway", "status", "--status-socket", str(path))
    assert "transport-session" in [each["kind"] for each in seen["processes"]]
    assert seen["total"] == {"processes": 1, "limit": default_max_processes()}  # this host's memory's
    assert (shown.returncode, shown.stderr) == (0, "")
    assert f"processes: 1 of {default_max_processes()} (--max-processes)" in shown.stdout
    assert not path.exists()  # removed as the gateway stopped

    path.parent.chmod(0o711)
    done = gateway_run("--port", str(free_port()), "--stdio", SERVER, "--status-socket", str(path), within=60)
    assert (done.returncode, done.stderr) == (
        2,
        f"mcp-sessions gateway: --status-socket: {path.parent} must be a directory of the gateway's user that no one "
        f"else may enter (mode 0700): it is mode 711, owned by uid {os.geteuid()}\n",
    )


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (
            ("--process-network", "egress"),
            "--process-network egress is the kernel's rules on the processes' own uid: give --process-uids "
            "FIRST-LAST, or a --process-user other than the gateway's",
        ),
        (
            PROXY,
            "--forwarded-allow-ips 127.0.0.1: processes on the host's network (--process-network host) connect from "
            "that address and would pass for the proxy: give --process-uids (egress), or --process-network none",
        ),
        (
            ("--forwarded-allow-ips", "*", "--process-uids", UIDS, "--process-network", "host"),
            "--forwarded-allow-ips *: processes on the host's network (--process-network host) connect from "
            "that address and would pass for the proxy: give --process-uids (egress), or --process-network none",
        ),
        (
            ("--process-allow-net", "10.0.0.0/33"),
            "--process-allow-net takes CIDR[:PORT] (10.0.0.0/8, 127.0.0.1:6379, [::1]:8080): '10.0.0.0/33': "
            "'10.0.0.0/33' does not appear to be an IPv4 or IPv6 network",
        ),
        (
            ("--process-allow-host", "wiki.internal"),
            "--process-allow-host wiki.internal: a name is granted for one port: give it (wiki.internal:443, say)",
        ),
        (
            ("--process-allow-private-host", "wiki.internal"),
            "--process-allow-private-host wiki.internal: a name is granted for one port: give it (wiki.internal:443, "
            "say)",
        ),
        (
            ("--process-allow-private-host", "wiki.internal:443"),
            "--process-allow-private-host makes exceptions to --process-network egress, not to host",
        ),
        (
            ("--process-allow-net", "127.0.0.1:70000"),
            "--process-allow-net: '127.0.0.1:70000': a port is a number from 1 to 65535",
        ),
        (
            ("--process-allow-net", "127.0.0.0/8", "--process-uids", UIDS, *PROXY),
            "--process-allow-net 127.0.0.0/8: the gateway's own port, from 127.0.0.1, which it trusts",
        ),
    ],
    ids=[
        "egress-without-uids",
        "host-behind-a-local-proxy",
        "host-trusting-all",
        "cidr",
        "name-without-port",
        "private-name-without-port",
        "private-name-without-egress",
        "port",
        "own-port",
    ],
)
def test_a_network_that_cannot_hold_is_one_line_and_exit_status_2(options: tuple[str, ...], said: str) -> None:
    if "--process-uids" in options:
        needs_root_and_nft()
    # by main in this process: its exit status and output as the command gives them, refused before the port is bound
    done = main_run(
        "gateway", "--port", str(free_port()), "--stdio", SERVER, *options, environ={"MCP_SESSIONS_SECRET": SECRET}
    )
    assert (done.returncode, done.stderr) == (2, f"mcp-sessions gateway: {said}\n")


@pytest.mark.parametrize(
    "flag",
    [
        "--status-socket=/run/s",
        "--process-network=none",
        "--process-allow-net=10.0.0.0/8",
        "--process-allow-host=wiki.internal:443",
        "--process-allow-private-host=wiki.internal:443",
    ],
)
def test_an_upstream_s_gateway_refuses_the_processes_flags_in_one_line(flag: str) -> None:
    done = main_run("gateway", "--upstream", "http://[::1]:1/mcp", flag, environ={"MCP_SESSIONS_SECRET": "s" * 32})
    said = "--status-socket, --process-network and its grants are for --stdio processes; an --upstream has none"
    assert (done.returncode, done.stderr) == (2, f"mcp-sessions gateway: {said}\n")


def test_under_host_a_process_reaches_a_local_service() -> None:
    """What the rules take away: the same process, on the host's network, connects to a loopback service."""
    needs_root_and_nft()
    with listening() as service, gateway("--process-uids", UIDS, "--process-network", "host") as process:
        with httpx.Client(timeout=30) as http:
            session = legacy_initialize(http, process.url())
            assert tried(http, process, session, "127.0.0.1", service) == "connected"
        assert "network host" in process.output()


def test_a_file_other_uids_cannot_read_runs_from_a_copy_they_can() -> None:
    """The tests whose processes run as uids of their own from the checkout pass in a clone other uids cannot read (a
    clone under /root, mode 0700, say): such a file runs from a copy where every user may read it (issue 87)."""
    needs_root_and_nft()
    with readable_directory("mcp-sessions-checkout-") as directory:
        private = directory / "home"  # above the checkout, as /root is
        private.mkdir(mode=0o700)
        server = private / "clone" / "server.py"
        server.parent.mkdir(mode=0o755)
        server.write_text("print('read')")
        server.chmod(0o644)
        with for_every_uid(server) as found:
            nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", str(found)]
            assert subprocess.run(nobody, capture_output=True, text=True, check=False).stdout == "read\n"
        private.chmod(0o755)
        with for_every_uid(server) as found:
            assert found == server
