"""A stand-in resolver on this host's loopback, and the gateway run where ``/etc/resolv.conf`` names it: the
names a test's processes resolve never leave the host (:func:`resolver`).

It answers a UDP query for a name it knows with that name's address (an ``A`` record for an IPv4 one, ``AAAA`` for an
IPv6 one: a rebinding answer as well as any), with no record for the other type, and ``NXDOMAIN`` for a name it does
not know: enough for glibc's ``getaddrinfo``. :func:`elsewhere` is an address of the world's, held by a network
namespace of the test's own: what a granted name may reach.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from mcp_sessions._gateway.sealed._network import local_addresses, resolvers

ADDRESSES = tuple(f"127.0.77.{last}" for last in range(1, 255))
"""Where a stand-in listens (port 53): the first of these addresses of loopback that no other stand-in has."""


def host_address() -> str:
    """This host's first IPv4 address other than loopback's: where a name a stand-in answers points, for an egress
    process (its own loopback is its namespace's) to find this host."""
    found = [str(net.network_address) for net in local_addresses() if net.version == 4 and not net.is_loopback]
    assert found, "this host has no IPv4 address but loopback's: egress has no way out to test"
    return found[0]


@contextlib.contextmanager
def elsewhere(count: int = 1, address: str = "", port: int = 0, serve: str = "") -> Iterator[tuple[str, list[int]]]:
    """An address of the world's (``11.77.0.0/16``: no range the gateway refuses; or ``address``) that only a network
    namespace of the test's own holds, joined to this host's by a veth pair (``ip netns``) and a route of this host's
    to it alone, so that nothing sent there leaves the host; ``count`` TCP listeners there (on ``port``, or each on a
    port of its own), for as long as the block runs: the address and their ports. ``serve``: the listeners' program
    if not :data:`_SERVE`'s (each connection accepted and closed), its ``serve(address, count, port)`` printing their
    ports."""
    ours = next(_NAMESPACES)
    name, device = f"mcp-sessions-test-{os.getpid()}-{ours}", f"mst{os.getpid()}-{ours}"[-15:]
    address = address or f"11.77.{os.getpid() % 250}.{ours % 250 + 2}"  # a run's own (a sibling run holds another)
    inside = ["ip", "-n", name]
    steps = [
        ["ip", "netns", "add", name],
        ["ip", "link", "add", device, "type", "veth", "peer", "name", "eth0", "netns", name],
        ["ip", "link", "set", device, "up"],
        ["ip", "route", "add", f"{address}/32", "dev", device],
        [*inside, "address", "add", f"{address}/32", "dev", "eth0"],
        [*inside, "link", "set", "eth0", "up"],
        [*inside, "route", "add", "default", "dev", "eth0"],
    ]
    listener = None
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True, text=True)
        serve = f"{serve or _SERVE}\nserve({address!r}, {count}, {port})"
        listener = subprocess.Popen(
            ["ip", "netns", "exec", name, sys.executable, "-c", serve], stdout=subprocess.PIPE, text=True
        )
        assert listener.stdout is not None
        yield address, [int(port) for port in listener.stdout.readline().split()]
    finally:
        if listener is not None:
            listener.kill()
            listener.communicate()
        subprocess.run(["ip", "link", "delete", device], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "delete", name], check=False, capture_output=True)


_NAMESPACES = itertools.count(1)
# The listeners in the namespace: their ports on stdout, then each connection accepted and closed.
_SERVE = """
import selectors, socket
def serve(address, count, port):
    servers = [socket.create_server((address, port)) for _ in range(count)]
    print(*[server.getsockname()[1] for server in servers], flush=True)
    chosen = selectors.DefaultSelector()
    for server in servers:
        chosen.register(server, selectors.EVENT_READ)
    while True:
        for key, _ in chosen.select():
            key.fileobj.accept()[0].close()
"""


def _asked(query: bytes) -> tuple[str, int]:
    """The name a query asks about, and where its question ends."""
    labels, at = [], 12
    while query[at]:
        labels.append(query[at + 1 : at + 1 + query[at]].decode().lower())
        at += 1 + query[at]
    return ".".join(labels), at


def _answer(query: bytes, names: dict[str, str]) -> bytes:
    (ident,) = struct.unpack("!H", query[:2])
    name, at = _asked(query)
    qtype = struct.unpack("!H", query[at + 1 : at + 3])[0]
    question = query[12 : at + 5]
    address = names.get(name)
    records = b""
    family, kind = (socket.AF_INET6, 28) if address is not None and ":" in address else (socket.AF_INET, 1)
    if address is not None and qtype == kind:  # A or AAAA
        packed = socket.inet_pton(family, address)
        records = struct.pack("!HHHIH", 0xC00C, kind, 1, 60, len(packed)) + packed
    flags = 0x8180 if address is not None else 0x8183  # a response, recursion available; NXDOMAIN when unknown
    return struct.pack("!HHHHHH", ident, flags, 1, 1 if records else 0, 0, 0) + question + records


def _bound(server: socket.socket, address: str) -> bool:
    """Whether ``server`` could take port 53 of ``address`` (another stand-in's, else)."""
    try:
        server.bind((address, 53))
    except OSError:
        return False
    return True


def _forwarded(query: bytes, upstream: str) -> bytes:
    """The host's resolver's answer to ``query`` (nothing if none comes within 10 s)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as asking:
        asking.settimeout(10)
        asking.sendto(query, (upstream, 53))
        with contextlib.suppress(OSError):
            return asking.recv(4096)
    return b""


@contextlib.contextmanager
def resolver(names: dict[str, str], *, forward: bool = False) -> Iterator[tuple[str, ...]]:
    """The stand-in, answering ``names`` (name: IPv4 address), for as long as the block runs; what to put before the
    gateway's command (``gateway(prefix=...)``) so that it reads a ``/etc/resolv.conf`` naming it (a
    mount namespace of the gateway's own). ``forward``: another name is asked of the host's own resolver (for a
    recipe that installs from the package index), else it does not exist."""
    upstream = next((str(each) for each in resolvers() if each.version == 4), None) if forward else None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server, tempfile.TemporaryDirectory() as directory:
        address = next(each for each in ADDRESSES if _bound(server, each))
        resolv = Path(directory, "resolv.conf")
        resolv.write_text(f"nameserver {address}\n")
        resolv.chmod(0o644)

        stop = threading.Event()

        def serve() -> None:
            with contextlib.suppress(OSError):
                while not stop.is_set():
                    query, peer = server.recvfrom(512)
                    with contextlib.suppress(IndexError, UnicodeDecodeError, struct.error):
                        if upstream is not None and _asked(query)[0] not in names:
                            server.sendto(_forwarded(query, upstream), peer)
                        else:
                            server.sendto(_answer(query, names), peer)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        bind = 'mount --bind "$0" /etc/resolv.conf && exec "$@"'
        try:
            yield ("unshare", "--mount", "--propagation", "private", "sh", "-c", bind, str(resolv))
        finally:
            stop.set()
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as waking:  # its wait for a query ends
                waking.sendto(b"", (address, 53))
            thread.join(timeout=10)
