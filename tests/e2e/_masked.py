"""What the tests of masked credentials (``--process-env-mask``) share: a stand-in HTTPS API with a certificate
authority of its own (:func:`stand_in_authority`, :data:`API`: each request's method, target, headers (and their
SHA-256, which no scrub knows) and body's size echoed back as JSON (but at ``/unechoed``: ``{}``), every
``Authorization`` it got listed at ``/seen``, echoed in pieces that cut it at ``/split``, cut inside it at ``/cut``
and gzip'd at ``/coded``, a ``git`` fetch asked for its credential; a second port answers plain HTTP), and a
hostile stdio server (:data:`SERVER`) whose tools run a command in the process (``run``) and search everything it
can read of itself for a value (``search``: its environment, its memory through ``/proc/self/mem``, and the files of
its home, ``/tmp`` and the gateway's certificates; the value asked in two halves, so that the asking puts it whole
nowhere). :func:`stand_in` runs both for a test, the API at an address of the world's (``_dns``), and
:func:`bearer_sent`, :func:`ran`, :func:`searched` and :func:`seen` ask them."""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from _authorities import stand_in_server
from _mcp import ModernClient
from _redis import missing
from e2e._dns import elsewhere, resolver
from e2e._gateway import readable_directory
from e2e._sealed import ANSWERING, call, needs, text

NAMES = ("api.test", "other.test")
"""The stand-in API's names: the first masked, the second not (the same server, reached by an opaque tunnel)."""
API = r"""
import gzip, hashlib, http.server, json, socketserver, ssl, sys, threading
SEEN = []
class Server(http.server.ThreadingHTTPServer):
    # not HTTPServer's bind, whose getfqdn of the address waits 10 s on DNS that no one answers in the namespace
    server_bind = socketserver.TCPServer.server_bind
class Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # a connection kept alive, as an API's is
    def answer(self):
        SEEN.append(self.headers.get("Authorization", ""))
        size = len(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        echoed = {"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "size": size}
        # what it got, in a form no scrub knows: the echo beside it is what the process may see
        digests = {name.lower(): hashlib.sha256(value.encode()).hexdigest() for name, value in self.headers.items()}
        echoed["sha256"] = digests
        body = json.dumps(echoed).encode()
        if self.path.startswith(("/split", "/cut", "/coded")):
            return self.echo(self.headers.get("Authorization", "").encode())
        if self.path == "/seen":
            body = json.dumps(SEEN).encode()
        elif self.path == "/unechoed":
            body = b"{}"
        if "/info/refs" in self.path and "Authorization" not in self.headers:  # git sends its credential when asked
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="stand-in"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def echo(self, got):
        # the Authorization got, in a header and in a body written in pieces that cut it (each a TLS record of
        # its own): framed by its length, chunked, or by the connection's close (/split?close); /cut closes 20
        # bytes into the value, its length saying more; /coded is gzip'd whatever was asked
        body = b'{"echo": "' + got + b'"}'
        framing = self.path.partition("?")[2] or "length"
        self.send_response(200)
        self.send_header("X-Echo", got.decode())
        if self.path == "/coded":
            body = gzip.compress(body)
            self.send_header("Content-Encoding", "gzip")
        if framing == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
        elif framing == "close":
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        at = len(b'{"echo": "Bearer ')
        pieces = [body[:at + 20]] if self.path == "/cut" else [body[:at + 3], body[at + 3:at + 20], body[at + 20:]]
        for piece in pieces:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if framing == "chunked" else piece)
        if framing == "chunked":
            self.wfile.write(b"0\r\n\r\n")
        self.close_connection = self.close_connection or self.path == "/cut"
    do_GET = do_POST = do_TRACE = answer
    def log_message(self, *args): pass
def serve(address, count, port):
    secure, plain = Server((address, port), Echo), Server((address, port), Echo)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(CHAIN, KEY)
    secure.socket = context.wrap_socket(secure.socket, server_side=True)
    print(secure.server_address[1], plain.server_address[1], flush=True)
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    secure.serve_forever()
"""
SERVER = (
    r"""
import json, os, re, subprocess, sys
def run(argv, input=""):
    try:
        done = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as exc:
        return json.dumps({"status": "timeout", "out": str(exc.stdout), "err": str(exc.stderr)})
    return json.dumps({"status": done.returncode, "out": done.stdout, "err": done.stderr[-2000:]})
def within(head, tail, text):
    at = text.find(head)
    while at >= 0:
        if text.startswith(tail, at + len(head)): return True
        at = text.find(head, at + 1)
    return False
def memory(head, tail):
    found = 0
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            start, end = (int(part, 16) for part in line.split()[0].split("-"))
            if "r" not in line.split()[1]: continue
            try:
                mem.seek(start)
                found += within(head, tail, mem.read(end - start))
            except (OSError, ValueError, OverflowError): pass
    return found
def search(head, tail):
    # the value asked in two halves, never whole in what this process was sent
    head, tail, where = head.encode(), tail.encode(), []
    if any(within(head, tail, each) for each in os.environb.values()): where.append("environ")
    if memory(head, tail): where.append("memory")
    for top in (os.environ.get("HOME", "/"), "/tmp", "/run/mcp-sessions-ca"):
        for root, _, files in os.walk(top):
            for name in files:
                try:
                    if within(head, tail, open(os.path.join(root, name), "rb").read()):
                        where.append(os.path.join(root, name))
                except OSError: pass
    return json.dumps(where)
TOOLS = {"run": run, "search": search, "env": lambda variable: os.environ.get(variable, "")}
"""
    + ANSWERING
)


def stand_in_authority(directory: Path) -> tuple[str, str]:
    """A certificate authority of the stand-in API's own and its server's certificate for :data:`NAMES`, written
    in ``directory``: the authority's file (the gateway's ``SSL_CERT_FILE``), and :data:`API` with its files named."""
    authority, chain, key = stand_in_server(directory, NAMES)
    return authority, f"CHAIN, KEY = {chain!r}, {key!r}\n{API}"


@dataclass(frozen=True)
class StandIn:
    """The stand-in API (its address and TLS and plain ports, its authority's file), the hostile server's file,
    and what runs the gateway in the stand-in resolver's world."""

    world: str
    ports: list[int]
    authority: str
    server: Path
    prefix: tuple[str, ...]


@contextlib.contextmanager
def stand_in() -> Iterator[StandIn]:
    """The stand-in API at an address of the world's, :data:`NAMES` resolved to it for a gateway run with its
    ``prefix``, and :data:`SERVER` in a directory every user may read: skipped without root, bubblewrap or nft."""
    needs("root", "bwrap")
    if not Path("/usr/sbin/nft").exists() and not Path("/usr/bin/nft").exists():
        missing("nft is not installed (scripts/system-deps.sh)")
    with contextlib.ExitStack() as stack:
        certs = stack.enter_context(readable_directory("mcp-sessions-api-"))
        authority, program = stand_in_authority(certs)
        world, ports = stack.enter_context(elsewhere(serve=program))
        prefix = stack.enter_context(resolver(dict.fromkeys(NAMES, world)))
        server = certs / "hostile.py"
        server.write_text(SERVER)
        server.chmod(0o644)
        yield StandIn(world, ports, authority, server, prefix)


def ran(mcp: ModernClient, session: dict[str, Any], *argv: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(text(call(mcp, "run", session, argv=list(argv))))
    return found


def searched(mcp: ModernClient, session: dict[str, Any], value: str) -> list[str]:
    """Where the process found ``value``, searched before any answer of the API's that echoes what it got (all but
    ``/unechoed``'s)."""
    half = len(value) // 2
    found = text(call(mcp, "search", session, head=value[:half], tail=value[half:]))
    return list(json.loads(found))


def seen(world: str, secure: int, authority: str) -> list[str]:
    """Every ``Authorization`` the stand-in API (at ``world``, its TLS port ``secure``) got, asked from this host (its
    route to the test's namespace)."""
    context = ssl.create_default_context(cafile=authority)
    context.check_hostname = False
    found: list[str] = httpx.get(f"https://{world}:{secure}/seen", verify=context, timeout=30).json()
    return found


def bearer_sent(mcp: ModernClient, session: dict[str, Any], api: StandIn, placeholder: str) -> str:
    """The bearer token the API got as the process's ``curl`` sent it ``placeholder`` (at ``/unechoed``: its answer
    to the process echoes none of it), read from this host."""
    curl = ("curl", "-sS", "-H", f"Authorization: Bearer {placeholder}", f"https://{NAMES[0]}:{api.ports[0]}/unechoed")
    done = ran(mcp, session, *curl)
    assert done["out"] == "{}", done
    got = [each for each in seen(api.world, api.ports[0], api.authority) if each.startswith("Bearer ")]
    return got[-1].removeprefix("Bearer ")
