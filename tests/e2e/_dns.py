"""A stand-in resolver on this host's loopback, and the gateway run where ``/etc/resolv.conf`` names it: the
names a test's processes resolve never leave the host (:func:`resolver`).

It answers a UDP query for a name it knows with that name's IPv4 address (an ``A`` record), with no record for
another type (``AAAA``), and ``NXDOMAIN`` for a name it does not know: enough for glibc's ``getaddrinfo``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

ADDRESS = "127.{}.{}.{}".format(*os.getpid().to_bytes(3, "big"))
"""Where the stand-in listens (port 53): an address of loopback of this process's own (its pid's), no other test's
nor another run's."""


def _answer(query: bytes, names: dict[str, str]) -> bytes:
    (ident,) = struct.unpack("!H", query[:2])
    labels, at = [], 12
    while query[at]:
        labels.append(query[at + 1 : at + 1 + query[at]].decode().lower())
        at += 1 + query[at]
    qtype = struct.unpack("!H", query[at + 1 : at + 3])[0]
    question = query[12 : at + 5]
    address = names.get(".".join(labels))
    records = b""
    if address is not None and qtype == 1:  # A
        records = struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) + socket.inet_aton(address)
    flags = 0x8180 if address is not None else 0x8183  # a response, recursion available; NXDOMAIN when unknown
    return struct.pack("!HHHHHH", ident, flags, 1, 1 if records else 0, 0, 0) + question + records


@contextlib.contextmanager
def resolver(names: dict[str, str]) -> Iterator[tuple[str, ...]]:
    """The stand-in, answering ``names`` (name: IPv4 address), for as long as the block runs; what to put before the
    gateway's command (``gateway(prefix=...)``) so that it, and pasta, read a ``/etc/resolv.conf`` naming it (a
    mount namespace of the gateway's own)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server, tempfile.TemporaryDirectory() as directory:
        server.bind((ADDRESS, 53))
        resolv = Path(directory, "resolv.conf")
        resolv.write_text(f"nameserver {ADDRESS}\n")
        resolv.chmod(0o644)

        stop = threading.Event()

        def serve() -> None:
            with contextlib.suppress(OSError):
                while not stop.is_set():
                    query, peer = server.recvfrom(512)
                    with contextlib.suppress(IndexError, UnicodeDecodeError, struct.error):
                        server.sendto(_answer(query, names), peer)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        bind = 'mount --bind "$0" /etc/resolv.conf && exec "$@"'
        try:
            yield ("unshare", "--mount", "--propagation", "private", "sh", "-c", bind, str(resolv))
        finally:
            stop.set()
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as waking:  # its wait for a query ends
                waking.sendto(b"", (ADDRESS, 53))
            thread.join(timeout=10)
