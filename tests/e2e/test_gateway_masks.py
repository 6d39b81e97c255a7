"""Masked credentials (``--process-env-mask``, issue 95): a real gateway as root, a uid per process under egress, a
hostile server (``_masked.SERVER``) whose clients (curl, git, Python's httpx and urllib, Node 22's own ``fetch``,
inside the process) reach a stand-in HTTPS API (``_masked.API``, its own certificate authority, at an address of the
world's in a network namespace of the test's own, its names answered by the tests' stand-in resolver) through the
gateway's proxy."""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import http.server
import importlib
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from _authorities import taken_leaf
from _mcp import CLIENT_CAPABILITIES_KEY, ModernClient, modern_request
from _redis import missing
from _uids import members, uids
from _waits import WITHIN, until
from conftest import SECRET, serve
from e2e import _idjag, _masked, _sealed, _vendor
from e2e._authorization import GATEWAY, authorization_server, login
from e2e._gateway import CACHE, NODE22, for_every_uid, installed, main_run
from e2e._masked import NAMES, StandIn, bearer_sent, ran, searched, seen
from mcp_sessions._gateway._node import node_without_proxy
from mcp_sessions._gateway.sealed._edge import ASKING_PER_ADDRESS, TUNNELS, _socket_as
from mcp_sessions._gateway.sealed._masks import SHARED, Authority

UIDS, OPERATED_UIDS = uids(400, 20), uids(440, 8)
SECTION = "Credentials that never enter the process"
"""docs/gateway.md's section, whose ``sh`` block makes the operator's authority."""
TOKEN = "ghp_" + "Re4lT0kenValue" * 2 + "0123456789"  # a GitHub token's shape: 40 characters
API, OTHER = NAMES
NETRC = f"machine {API}\nlogin x-access-token\npassword ${{API_TOKEN}}\n"
"""``--process-file``'s template of the ``masked`` gateway: a ``.netrc`` for the API."""
HTTPX_IMPORTS = ("httpx", "httpcore", "h11", "anyio", "sniffio", "idna", "certifi")
"""What this checkout's httpx imports to make a request (pure Python), which the host's Python runs in a process."""
HTTPX = """import httpx, os, sys
print(httpx.get(sys.argv[1], headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]}, timeout=30).text)"""
POST = """headers = {"Authorization": "Bearer " + os.environ["API_TOKEN"]}
print(httpx.post(sys.argv[1], content=bytes(4 << 20), headers=headers, timeout=60).text)"""
URLLIB = """import os, sys, urllib.request
asked = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]})
print(urllib.request.urlopen(asked, timeout=30).read().decode())"""
FETCH = """fetch(process.argv[1], {headers: {Authorization: "Bearer " + process.env.API_TOKEN}})
.then((answer) => answer.text()).then(console.log)"""
"""Node's own fetch, as a client writes it: no agent, no proxy named (NODE_USE_ENV_PROXY, which the gateway sets)."""


@dataclass(frozen=True)
class Masked:
    """A client of the gateway's (with the token), a conversation of its, and the stand-in API: its TLS and plain
    ports, its address, and its certificate authority's file."""

    mcp: ModernClient
    session: dict[str, Any]
    secure: int
    plain: int
    world: str
    authority: str
    node: str


@pytest.fixture(scope="module")
def stand_in() -> Iterator[StandIn]:
    with _masked.stand_in() as api:
        yield api


@contextlib.contextmanager
def masked_gateway(api: StandIn, uids: str, *options: str) -> Iterator[Masked]:
    """A gateway masking ``API_TOKEN`` with ``options`` (its ``--process-env-mask`` among them), its processes'
    uids ``uids``: its client with the token, and a conversation of its."""
    given = ("--processes", "per-conversation", "--process-uids", uids, "--process-env", "API_TOKEN=header:X-Token")
    environ = {"MCP_SESSIONS_SECRET": SECRET, "SSL_CERT_FILE": api.authority}
    with contextlib.ExitStack() as stack:
        command = f"/usr/bin/python3 {api.server}"
        process = stack.enter_context(_sealed.gateway(command, *given, *options, environ=environ, prefix=api.prefix))
        http = stack.enter_context(httpx.Client(timeout=60, headers={"X-Token": TOKEN}))
        node = stack.enter_context(for_every_uid(installed(NODE22, "Node 22"), CACHE / "node22"))
        mcp = ModernClient(http, f"http://127.0.0.1:{process.port}")
        yield Masked(mcp, mcp.create_session(), api.ports[0], api.ports[1], api.world, api.authority, str(node))


@pytest.fixture(scope="module")
def python() -> Iterator[tuple[str, ...]]:
    """The host's Python (a uid of the process's runs it, not the venv's), with this checkout's httpx where that uid
    reads it: in place, else linked into a directory every user may read. From a fresh clone under a 0700 home (the
    venv is no other uid's) a process's ``import httpx`` failed, and with it two tests (issue 100, item 10)."""
    with contextlib.ExitStack() as stack:
        files = [Path(importlib.import_module(name).__file__ or name) for name in HTTPX_IMPORTS]
        found = [stack.enter_context(for_every_uid(file, file.parent)) for file in files]
        path = os.pathsep.join(dict.fromkeys(str(file.parent.parent) for file in found))
        yield ("env", f"PYTHONPATH={path}", "/usr/bin/python3")


@pytest.fixture(scope="module")
def masked(stand_in: StandIn, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Masked]:
    """The gateway's client with the token, a conversation of its, and the stand-in API; its value goes in
    ``X-Api-Key`` too, and its process has a ``~/.netrc`` for the API (``--process-file``)."""
    mask = f"API_TOKEN={API}:{stand_in.ports[0]},header=X-Api-Key"
    template = tmp_path_factory.mktemp("process-file") / "netrc"
    template.write_text(NETRC)
    files = ("--process-file", f"~/.netrc={template}")
    with masked_gateway(stand_in, UIDS, "--process-env-mask", mask, *files) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def operated(stand_in: StandIn, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Masked, Path]]:
    """A gateway with the operator's authority (``--process-env-mask-ca``), made by docs/gateway.md's command as
    it is written, in a directory of root's alone, whose mask opts the API's plain HTTP port in too
    (``http://HOST:PORT``); and that directory."""
    files = tmp_path_factory.mktemp("operator-ca")
    section = (Path(__file__).parents[2] / "docs" / "gateway.md").read_text().partition(f"\n### {SECTION}\n")[2]
    made = section.partition("```sh\n")[2].partition("```")[0]
    environ = {"PATH": os.environ["PATH"], "MASKED_HOST": API}
    subprocess.run(["sh", "-ec", made], cwd=files, check=True, capture_output=True, env=environ)
    options = ("--process-env-mask", f"API_TOKEN={API}:{stand_in.ports[0]},http://{API}:{stand_in.ports[1]}")
    with masked_gateway(
        stand_in, OPERATED_UIDS, *options, "--process-env-mask-ca", f"{files}/ca.pem,{files}/ca.key"
    ) as gateway:
        yield gateway, files


def echoed(mcp: ModernClient, session: dict[str, Any], *argv: str) -> dict[str, Any]:
    """What the stand-in API echoed of the request ``argv`` made (its method, its target as ``path``, its headers,
    lower-cased, as the process got them: the value scrubbed), and what it got (``got``: each header's SHA-256)."""
    done = ran(mcp, session, *argv)
    assert done["status"] == 0, done
    answer = json.loads(done["out"])
    headers = {name.lower(): value for name, value in answer["headers"].items()}
    return {"method": answer["method"], "path": answer["path"], **headers, "got": answer["sha256"]}


def digest(text: str) -> str:
    """A header's value as the stand-in API says it got it (:func:`echoed`'s ``got``)."""
    return hashlib.sha256(text.encode()).hexdigest()


def basic(pair: str) -> str:
    return "Basic " + base64.b64encode(pair.encode()).decode()


def test_each_client_reaches_the_api_with_the_value_and_the_process_holds_the_placeholder_alone(
    masked: Masked, python: tuple[str, ...]
) -> None:
    mcp, session, secure = masked.mcp, masked.session, masked.secure
    placeholder = _sealed.text(_sealed.call(mcp, "env", session, variable="API_TOKEN"))
    found = {"token": searched(mcp, session, TOKEN), "placeholder": searched(mcp, session, placeholder)}
    url = f"https://{API}:{secure}/"
    bearer = f"Authorization: Bearer {placeholder}"
    each = {
        "curl": echoed(mcp, session, "curl", "-sS", "-H", bearer, url),
        "httpx": echoed(mcp, session, *python, "-c", HTTPX, url),
        "urllib": echoed(mcp, session, "/usr/bin/python3", "-c", URLLIB, url),
        "node fetch": echoed(mcp, session, masked.node, "-e", FETCH, url),
    }
    paired = echoed(mcp, session, "curl", "-sS", "-u", f"x-access-token:{placeholder}", url)
    assert placeholder != TOKEN
    assert len(placeholder) == len(TOKEN)
    assert placeholder[3] == "_"
    # the API got the value; its echo of it reached the process as the placeholder (issue 103)
    assert {client: echo["got"]["authorization"] for client, echo in each.items()} == dict.fromkeys(
        each, digest(f"Bearer {TOKEN}")
    )
    assert {client: echo["authorization"] for client, echo in each.items()} == dict.fromkeys(
        each, f"Bearer {placeholder}"
    )
    assert paired["got"]["authorization"] == digest(basic(f"x-access-token:{TOKEN}"))
    assert paired["authorization"] == basic(f"x-access-token:{placeholder}")  # the pair's base64 as sent, scrubbed
    assert found["token"] == []  # not in its environment, its memory, nor its files
    assert "environ" in found["placeholder"]
    assert "memory" in found["placeholder"]  # where the search looks


def test_a_process_file_holds_the_placeholder_and_curl_netrc_reaches_the_api_with_the_value(masked: Masked) -> None:
    """``--process-file ~/.netrc=TEMPLATE`` (issue 103): the process's own ``.netrc``, 0600, its uid's, holds the
    masked value's placeholder, never the value; ``curl --netrc`` sends it as a Basic pair, in which the proxy puts
    the value."""
    mcp, session = masked.mcp, masked.session
    placeholder = _sealed.text(_sealed.call(mcp, "env", session, variable="API_TOKEN"))
    read = ran(mcp, session, "sh", "-c", 'cat "$HOME/.netrc" && stat -c "%a %u" "$HOME/.netrc" && id -u')
    uid = read["out"].rsplit("\n", 2)[1]
    assert read["out"] == NETRC.replace("${API_TOKEN}", placeholder) + f"600 {uid}\n{uid}\n", read
    paired = echoed(mcp, session, "curl", "-sS", "--netrc", f"https://{API}:{masked.secure}/")
    assert paired["got"]["authorization"] == digest(basic(f"x-access-token:{TOKEN}"))


def test_the_value_goes_in_the_credential_s_headers_alone(masked: Masked) -> None:
    """``Authorization`` and the header the mask names (``header=X-Api-Key``) get the value; the placeholder in
    another header or the target stays one (the proxy once swapped it in every header: one an API echoes back or
    logs among them)."""
    mcp, session = masked.mcp, masked.session
    placeholder = _sealed.text(_sealed.call(mcp, "env", session, variable="API_TOKEN"))
    headers = [f"{name}: {prefix}{placeholder}" for name, prefix in CARRIED.items()]
    url = f"https://{API}:{masked.secure}/?key={placeholder}"
    got = echoed(mcp, session, "curl", "-sS", *(each for header in headers for each in ("-H", header)), url)
    assert {name.lower(): got["got"][name.lower()] for name in CARRIED} == {
        "authorization": digest(f"Bearer {TOKEN}"),
        "x-api-key": digest(TOKEN),
        "x-other": digest(placeholder),
        "cookie": digest(f"session={placeholder}"),
    }
    assert got["path"] == f"/?key={placeholder}"


CARRIED = {"Authorization": "Bearer ", "X-Api-Key": "", "X-Other": "", "Cookie": "session="}


def test_a_request_in_a_masked_tunnel_that_names_another_site_is_refused_and_never_reaches_it(
    masked: Masked,
) -> None:
    """In the tunnel to the masked host (``CONNECT api.test:PORT``), a request naming another site the same front
    serves (the stand-in API serves both names) by its ``Host``, its absolute target, its TLS server name, or as the
    second request of a kept-alive tunnel, is refused (421, and the connection closed; the server name's at its
    handshake) and never reaches the API: it got the value in 4 of 4 shapes. What goes on has an origin-form target
    and the tunnel's ``Host``."""
    mcp, session, secure = masked.mcp, masked.session, masked.secure
    before = seen(masked.world, secure, masked.authority).count(f"Bearer {TOKEN}")
    done = ran(mcp, session, "/usr/bin/python3", "-c", MISDIRECTED, API, OTHER, str(secure))
    after = seen(masked.world, secure, masked.authority).count(f"Bearer {TOKEN}")
    mine = f"{API}:{secure}"
    assert json.loads(done["out"]) == {
        "host": 421,
        "absolute": 421,
        "server name": "refused",
        "kept-alive": [["/", mine], 421],
        "origin form": ["/x?y", mine],
    }, done
    assert after - before == 2  # the kept-alive tunnel's first request and the last: none of the refused


MISDIRECTED = r"""
import base64, http.client, json, os, socket, ssl, sys, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
credential = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
api, other, port = sys.argv[1:4]
mine, theirs = f"{api}:{port}", f"{other}:{port}"
loose = ssl.create_default_context()  # a hostile client's: it verifies nothing
loose.check_hostname, loose.verify_mode = False, ssl.CERT_NONE
def tunnel(name):
    raw = socket.create_connection((proxy.hostname, proxy.port), timeout=30)
    raw.sendall(f"CONNECT {mine} HTTP/1.1\r\nHost: {mine}\r\nProxy-Authorization: Basic {credential}\r\n\r\n".encode())
    assert raw.recv(4096).startswith(b"HTTP/1.1 200"), "no tunnel"
    return loose.wrap_socket(raw, server_hostname=name)
def asked(tls, target, host):
    key = os.environ["API_TOKEN"]
    tls.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
    answer = http.client.HTTPResponse(tls)
    answer.begin()
    body = answer.read()
    if answer.status != 200:
        return answer.status
    echoed = json.loads(body)
    return [echoed["path"], {name.lower(): value for name, value in echoed["headers"].items()}["host"]]
def named(name):
    try:
        return asked(tunnel(name), "/", mine)
    except ssl.SSLError:  # the handshake ended: no request was made
        return "refused"
kept = tunnel(api)
print(json.dumps({
    "host": asked(tunnel(api), "/", theirs),
    "absolute": asked(tunnel(api), f"https://{theirs}/", mine),
    "server name": named(other),
    "kept-alive": [asked(kept, "/", mine), asked(kept, "/", theirs)],
    "origin form": asked(tunnel(api), f"https://{mine}/x?y", mine),
}))
"""


def test_a_masked_host_s_echo_of_the_value_reaches_the_process_as_the_placeholder_and_a_cut_one_never(
    masked: Masked,
) -> None:
    """Issue 103: the API echoes the ``Authorization`` it got in a header and in a body written in pieces that cut
    the value (each a TLS record: the proxy's reads end inside it), framed by its length, chunked, or by the
    connection's close: curl, Python's urllib and Node's fetch get the placeholder in both, where they got the
    value. An answer cut 20 bytes into the value ends the connection with the body up to the value's first byte
    (curl's 18, a partial answer), where those 20 bytes went on; one gzip'd although the proxy asked for
    ``identity`` (which curl's ``--compressed`` asking gets instead) is refused, 502."""
    mcp, session = masked.mcp, masked.session
    placeholder = _sealed.text(_sealed.call(mcp, "env", session, variable="API_TOKEN"))
    url, bearer = f"https://{API}:{masked.secure}", f"Authorization: Bearer {placeholder}"
    curl = ("curl", "-sS", "-H", bearer)
    heads = {framing: ran(mcp, session, *curl, "-D", "-", f"{url}/split?{framing}") for framing in FRAMINGS}
    clients = {
        "urllib": ran(mcp, session, "/usr/bin/python3", "-c", URLLIB_ECHO, f"{url}/split?chunked"),
        "node fetch": ran(mcp, session, masked.node, "-e", FETCH_ECHO, f"{url}/split?chunked"),
    }
    cut = ran(mcp, session, *curl, f"{url}/cut")
    coded = ran(mcp, session, *curl, "-o", "/dev/null", "-w", "%{http_code}", f"{url}/coded")
    asked = echoed(mcp, session, *curl, "--compressed", f"{url}/")
    body = f'{{"echo": "Bearer {placeholder}"}}'
    shown = {framing: done["out"].rpartition("\n\n")[::2] for framing, done in heads.items()}  # text: \r\n is \n
    assert {framing: (f"x-echo: Bearer {placeholder}\n" in head, rest) for framing, (head, rest) in shown.items()} == {
        framing: (True, body) for framing in FRAMINGS
    }, heads
    assert {client: done["out"] for client, done in clients.items()} == dict.fromkeys(
        clients, f"Bearer {placeholder}\n{body}\n"
    )
    assert (cut["status"], cut["out"]) == (18, '{"echo": "Bearer '), cut
    assert coded["out"] == "502", coded
    assert asked["accept-encoding"] == "identity"
    assert TOKEN[:8] not in json.dumps([heads, clients, cut, coded])


FRAMINGS = ("length", "chunked", "close")
URLLIB_ECHO = """import os, sys, urllib.request
asked = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]})
answer = urllib.request.urlopen(asked, timeout=30)
print(answer.headers["X-Echo"]); print(answer.read().decode())"""
FETCH_ECHO = """fetch(process.argv[1], {headers: {Authorization: "Bearer " + process.env.API_TOKEN}})
.then(async (answer) => console.log(answer.headers.get("x-echo") + "\\n" + await answer.text()))"""


def test_a_body_streams_through_with_the_value_in_the_head(masked: Masked, python: tuple[str, ...]) -> None:
    """A POST of 4 MiB through the proxy: the body arrives whole, the head with the value."""
    post = "\n".join((HTTPX.split("\n")[0], POST))
    done = ran(masked.mcp, masked.session, *python, "-c", post, f"https://{API}:{masked.secure}/upload")
    answer = json.loads(done["out"])
    assert (answer["size"], answer["sha256"]["authorization"]) == (4 << 20, digest(f"Bearer {TOKEN}")), done


def test_git_over_https_reaches_the_api_with_the_value_in_its_basic_credential(
    masked: Masked,
) -> None:
    """``git`` sends its URL's credential as ``Authorization: Basic`` once the server asks (401): decoded, swapped,
    encoded again. What the API got is read from this host, never through the process."""
    mcp, session, secure = masked.mcp, masked.session, masked.secure
    placeholder = _sealed.text(_sealed.call(mcp, "env", session, variable="API_TOKEN"))
    remote = f"https://x-access-token:{placeholder}@{API}:{secure}/team/repo.git"
    ran(mcp, session, "git", "-c", "credential.helper=", "ls-remote", remote)  # no repository there: it fails after
    got = [each for each in seen(masked.world, masked.secure, masked.authority) if each.startswith("Basic ")]
    assert f"x-access-token:{TOKEN}" in [base64.b64decode(each.removeprefix("Basic ")).decode() for each in got]


def test_the_placeholder_stays_one_to_another_host_over_plain_http_and_a_direct_connection_is_refused(
    masked: Masked,
) -> None:
    mcp, session, secure, plain = masked.mcp, masked.session, masked.secure, masked.plain
    placeholder = _sealed.text(_sealed.call(mcp, "env", session, variable="API_TOKEN"))
    bearer = f"Authorization: Bearer {placeholder}"
    proxy = _sealed.text(_sealed.call(mcp, "env", session, variable="HTTPS_PROXY"))
    # an opaque tunnel (curl's --proxytunnel) to another host's port: the masked host's is refused (the next test)
    other = echoed(mcp, session, "curl", "-sS", "-p", "-x", proxy, "-H", bearer, f"http://{OTHER}:{plain}/")
    over_plain = echoed(mcp, session, "curl", "-sS", "-H", bearer, f"http://{API}:{plain}/")
    around = ("--noproxy", "*", "--connect-timeout", "3")
    direct = ran(mcp, session, "curl", "-sS", *around, "-H", bearer, f"https://{API}:{secure}/")
    assert other["authorization"] == over_plain["authorization"] == f"Bearer {placeholder}"
    # the kernel's refusal, at once: curl's "could not connect", never its timeout
    assert direct["status"] == 7, direct


def test_an_opaque_tunnel_is_judged_by_the_process_s_own_rules(masked: Masked) -> None:
    """The proxy's opaque tunnel is a socket of the process's uid, which its rules judge as they judge its own
    connections, and no other check is made: a ``CONNECT`` to this host's loopback, where a server of the test's
    listens (``fib daddr type local``), is the kernel's 502, and the server is never reached. A ``CONNECT`` to
    another name on the masked host's address and port (a CDN's, shared) is tunnelled and reaches it, with the
    placeholder as it was sent (issue 103): the masked hosts' refusal is by address, and passes over the tunnel's
    socket (its mark), while the masked name's own address and port stay refused to the process directly (the test
    before). Before the mark, that ``CONNECT`` was a 502 too."""
    mcp, session = masked.mcp, masked.session
    with socket.create_server(("127.0.0.1", 0)) as local:
        url = f"https://127.0.0.1:{local.getsockname()[1]}/"
        loopback = ran(mcp, session, "curl", "-sS", "--noproxy", "", "-o", "/dev/null", url)  # NO_PROXY lists it
        local.setblocking(False)
        with pytest.raises(BlockingIOError):
            local.accept()
    assert "CONNECT tunnel failed, response 502" in loopback["err"], loopback
    placeholder = _sealed.text(_sealed.call(mcp, "env", session, variable="API_TOKEN"))
    bearer = f"Authorization: Bearer {placeholder}"
    # -k: the stand-in's own authority is not the process's; what is shown is that the tunnel reaches it
    other = echoed(mcp, session, "curl", "-sS", "-k", "-H", bearer, f"https://{OTHER}:{masked.secure}/")
    assert other["host"] == f"{OTHER}:{masked.secure}"
    assert other["authorization"] == f"Bearer {placeholder}"  # an opaque tunnel: nothing swapped in it
    around = ("--noproxy", "*", "--connect-timeout", "3")
    direct = ran(mcp, session, "curl", "-sS", "-k", *around, f"https://{OTHER}:{masked.secure}/")
    assert direct["status"] == 7, direct  # the shared address and port, directly: refused, by address


def test_a_socket_made_as_a_uid_is_that_uid_s_and_the_gateway_s_other_threads_never_act_as_it() -> None:
    """The filesystem uid a tunnel's socket is made under is its worker thread's alone: meanwhile the other threads
    (the event loop's here) keep the gateway's, and the worker's is the gateway's again after."""
    _sealed.needs("root")
    uid = members(uids(490, 1))[0]
    owners, restored, stop = set(), set(), threading.Event()

    def make() -> None:
        while not stop.is_set():
            with _socket_as(uid, socket.AF_INET) as made:
                owners.add(os.fstat(made.fileno()).st_uid)
            restored.add(_fsuid())

    worker = threading.Thread(target=make)
    worker.start()
    try:
        seen = {_fsuid() for _ in range(2000)}
    finally:
        stop.set()
        worker.join(timeout=30)
    assert (owners, restored, seen) == ({uid}, {0}, {0})


def _fsuid() -> int:
    """The calling thread's filesystem uid (the fourth of ``Uid:``)."""
    with open("/proc/thread-self/status") as status:
        return int(next(line for line in status if line.startswith("Uid:")).split()[4])


def test_a_malformed_or_huge_request_is_refused_and_the_next_is_served(
    masked: Masked,
) -> None:
    mcp, session, secure = masked.mcp, masked.session, masked.secure
    url = f"https://{API}:{secure}/"
    status = ("-sS", "-o", "/dev/null", "-w", "%{http_code}")
    trace = ran(mcp, session, "curl", *status, "-X", "TRACE", url)
    huge = ran(mcp, session, "curl", *status, "-H", f"X-Huge: {'a' * 70000}", url)
    proxy = _sealed.text(_sealed.call(mcp, "env", session, variable="HTTPS_PROXY"))
    forged = ran(mcp, session, "curl", *status, "--proxy", re.sub(r":[^:@/]+@", ":forged@", proxy), url)
    many = ran(mcp, session, "/usr/bin/python3", "-c", HOLDING.format(host=API, port=secure, count=TUNNELS + 1))
    idle = ran(mcp, session, "/usr/bin/python3", "-c", IDLE.format(count=ASKING_PER_ADDRESS + 1))
    assert trace["out"] == "405"
    assert huge["out"] in ("431", "400")
    assert "CONNECT tunnel failed, response 407" in forged["err"], forged  # no live process's password
    assert many["out"].split() == [str(TUNNELS), "429"], many  # the gateway's sockets a process may hold: bounded
    assert idle["out"].split() == ["open", "closed"], idle  # and those before a password, from accept
    assert echoed(mcp, session, "curl", "-sS", url)["method"] == "GET"  # its tunnels closed, counted no more


HOLDING = """
import base64, os, socket, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
credential = base64.b64encode(f"{{proxy.username}}:{{proxy.password}}".encode()).decode()
held, codes = [], []
for _ in range({count}):
    tunnel = socket.create_connection((proxy.hostname, proxy.port), timeout=30)
    tunnel.sendall(b"CONNECT {host}:{port} HTTP/1.1\\r\\nHost: {host}:{port}\\r\\nProxy-Authorization: Basic "
                   + credential.encode() + b"\\r\\n\\r\\n")
    codes.append(tunnel.recv(64).split()[1].decode())
    held.append(tunnel)
print(codes.count("200"), codes[-1])
"""


IDLE = """
import os, socket, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
held = [socket.create_connection((proxy.hostname, proxy.port), timeout=30) for _ in range({count})]
held[0].setblocking(False)
try:
    first = "closed" if held[0].recv(64) == b"" else "answered"
except BlockingIOError:
    first = "open"
try:
    last = "closed" if held[-1].recv(64) == b"" else "answered"
except ConnectionResetError:
    last = "closed"
print(first, last)
"""
"""A process's connections to the proxy, idle, one past the bound of an address's: the first held, the last closed
as it is accepted (its read ends at once, never at its 30 s timeout)."""


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (
            ("--process-env-mask", "API_TOKEN=api.test"),
            "--process-env-mask API_TOKEN: no --process-env API_TOKEN=SOURCE gives it",
        ),
        (
            ("--process-env", "API_TOKEN=header:X-Token", "--process-env-mask", "API_TOKEN=api.test"),
            "--process-env-mask needs --process-network egress (with --process-uids): the rules that send the "
            "process to the gateway's proxy, not host",
        ),
        (
            ("--process-env-mask-ca", "/etc/ssl/mine.pem"),
            "--process-env-mask-ca signs the certificates of --process-env-mask's hosts: give both",
        ),
    ],
    ids=["not-given", "no-egress", "authority-alone"],
)
def test_a_mask_the_gateway_cannot_keep_is_one_line_and_exit_status_2(options: tuple[str, ...], said: str) -> None:
    # by main in this process, as the command runs it: refused as its flags are read, before it binds; on a port
    # taken, so that a mask let through ends in another line at once, not in a gateway serving in the test's process
    environ = {"PATH": os.environ["PATH"], "MCP_SESSIONS_SECRET": SECRET}
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        done = main_run("gateway", "--port", port, "--stdio", "/bin/cat", *options, environ=environ)
    assert (done.returncode, done.stderr) == (2, f"mcp-sessions gateway: {said}\n")


def test_the_sandbox_s_policy_is_a_value_and_what_runs_it_is_built_from_it_each_time(tmp_path: Path) -> None:
    """Issue 102 item 3: the configuration holds what the operator asked, compared by value (two read from the same
    flags are equal), and nothing that runs: the uid pool, the control groups, the egress table and the masked
    credentials' proxy are each sandbox's own, built from the policy (``Sandbox``), as the app is made, so that a
    server of a ``--config`` file (or its reload) never shares another's. The proxy's port, known once it is bound,
    is granted in that sandbox's own egress table, and its certificates in that sandbox's grants."""
    _sealed.needs("root", "bwrap")
    from mcp_sessions._gateway._cli import add_arguments, configured
    from mcp_sessions._gateway.sealed._sandbox import Sandbox

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = parser.parse_args(
        [
            *("--stdio", "/bin/cat", "--processes", "per-conversation", "--process-containment", "bwrap"),
            *("--process-uids", UIDS, "--process-env", "API_TOKEN=header:X-Token"),
            *("--process-env-mask", f"API_TOKEN={API}", "--process-state", str(tmp_path)),
        ]
    )
    policy, again = (configured(flags, {"MCP_SESSIONS_SECRET": SECRET}).sandbox for _ in range(2))
    assert policy is not None and again is not None
    assert (policy, hash(policy)) == (again, hash(again))
    assert policy.egress is not None and policy.egress.proxy is None  # the port is the running proxy's
    made = [Sandbox(policy), Sandbox(policy)]
    try:
        one, other = made
        assert one.edge is not None and other.edge is not None and one.egress is not None and other.egress is not None
        assert one.edge.masks.port != other.edge.masks.port
        assert (one.egress.policy.proxy, other.egress.policy.proxy) == (one.edge.masks.port, other.edge.masks.port)
        assert one.egress.table != other.egress.table
        assert one.uids is not None and other.uids is not None and one.uids is not other.uids
        assert one.grants == (*policy.grants, one.edge.masks.grant)
        assert one.said == f"{policy.said}, {one.egress.said}"
    finally:
        for sandbox in made:
            sandbox.close()
    assert not os.path.exists(one.edge.masks.authority.shared)  # its certificates gone with it


def test_the_operator_s_authority_signs_what_the_process_sees_and_its_key_is_nowhere_in_the_process(
    operated: tuple[Masked, Path],
) -> None:
    """The process's clients verify the masked host against the operator's certificate (``ca.pem``, alone: curl's
    ``--cacert``) and the value arrives; the process has that certificate and not a byte of its key."""
    (masked, files), url = operated, f"https://{API}:{operated[0].secure}/"
    mcp, session = masked.mcp, masked.session
    placeholder = _sealed.text(_sealed.call(mcp, "env", session, variable="API_TOKEN"))
    key = "".join((files / "ca.key").read_text().splitlines()[1:-1])
    found = searched(mcp, session, key[:48])
    given = ran(mcp, session, "cat", "/run/mcp-sessions-ca/ca.pem")["out"]
    bearer = f"Authorization: Bearer {placeholder}"
    alone = echoed(mcp, session, "curl", "-sS", "--cacert", "/run/mcp-sessions-ca/ca.pem", "-H", bearer, url)
    urllib = echoed(mcp, session, "/usr/bin/python3", "-c", URLLIB, url)
    assert given == (files / "ca.pem").read_text()
    assert alone["got"]["authorization"] == urllib["got"]["authorization"] == digest(f"Bearer {TOKEN}")
    assert found == []


def test_the_recipe_s_authority_vouches_for_its_host_alone(operated: tuple[Masked, Path]) -> None:
    """docs/gateway.md's ``openssl`` recipe constrains names and addresses both: a leaf its key signs for the
    masked host is taken, one for a subdomain, an address, or another name is refused (OpenSSL, Python's ``ssl``)."""
    _, files = operated
    authority = Authority.given(f"{files}/ca.pem,{files}/ca.key")
    try:
        pem = (files / "ca.pem").read_text()
        hosts = (API, f"sub.{API}", "10.0.0.1", "::1", OTHER)
        outcome = {host: taken_leaf(pem, authority.context(host), host) for host in hosts}
    finally:
        authority.close()
    assert outcome == {API: True, f"sub.{API}": False, "10.0.0.1": False, "::1": False, OTHER: False}


def test_plain_http_gets_the_value_where_its_credential_opts_that_host_in_alone(
    operated: tuple[Masked, Path],
) -> None:
    """``http://HOST:PORT`` among a mask's hosts: the process's ``HTTP_PROXY`` names the proxy, which puts the value
    in a plain request to that host and port (curl, urllib); another name of its address and port is reached through
    the proxy with the placeholder as it was sent (issue 103: the masked hosts' refusal, by address, passes over the
    proxy's socket; before, it was a 502), and the masked name's address and port are refused directly. Without it
    (the other gateway's), no ``HTTP_PROXY``, nothing swapped."""
    masked, _ = operated
    mcp, session, plain = masked.mcp, masked.session, masked.plain
    placeholder = _sealed.text(_sealed.call(mcp, "env", session, variable="API_TOKEN"))
    bearer = f"Authorization: Bearer {placeholder}"
    opted = echoed(mcp, session, "curl", "-sS", "-H", bearer, f"http://{API}:{plain}/")
    urllib = echoed(mcp, session, "/usr/bin/python3", "-c", URLLIB, f"http://{API}:{plain}/")
    other = echoed(mcp, session, "curl", "-sS", "-H", bearer, f"http://{OTHER}:{plain}/")
    around = ("--noproxy", "*", "--connect-timeout", "3")
    direct = ran(mcp, session, "curl", "-sS", *around, "-H", bearer, f"http://{API}:{plain}/")
    assert opted["got"]["authorization"] == urllib["got"]["authorization"] == digest(f"Bearer {TOKEN}")
    assert opted["authorization"] == f"Bearer {placeholder}"  # plain HTTP's answer is scrubbed too
    assert (other["host"], other["authorization"]) == (f"{OTHER}:{plain}", f"Bearer {placeholder}")
    assert direct["status"] in (7, 28), direct


def test_a_malformed_plain_request_is_refused_and_the_next_is_served(operated: tuple[Masked, Path]) -> None:
    masked, _ = operated
    mcp, session, url = masked.mcp, masked.session, f"http://{API}:{masked.plain}/"
    status = ("-sS", "-o", "/dev/null", "-w", "%{http_code}")
    trace = ran(mcp, session, "curl", *status, "-X", "TRACE", url)
    broken = ran(mcp, session, "/usr/bin/python3", "-c", RAW.format(target="http://[broken/"))
    relative = ran(mcp, session, "/usr/bin/python3", "-c", RAW.format(target="/relative"))
    assert (trace["out"], broken["out"].strip(), relative["out"].strip()) == ("405", "400", "405")
    assert echoed(mcp, session, "curl", "-sS", url)["method"] == "GET"


RAW = """
import base64, os, socket, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
credential = base64.b64encode(f"{{proxy.username}}:{{proxy.password}}".encode())
with socket.create_connection((proxy.hostname, proxy.port), timeout=30) as raw:
    raw.sendall(b"GET {target} HTTP/1.1\\r\\nHost: x\\r\\nProxy-Authorization: Basic " + credential + b"\\r\\n\\r\\n")
    print(raw.recv(64).split()[1].decode())
"""


def test_without_the_opt_in_a_process_has_no_http_proxy(masked: Masked) -> None:
    assert _sealed.text(_sealed.call(masked.mcp, "env", masked.session, variable="HTTP_PROXY")) == ""


NODE = """const [host, port, servername] = process.argv.slice(1)
require("https").get({host, port: +port, servername: servername || undefined},
  (answer) => console.log(answer.statusCode)).on("error", (error) => { console.log(error.code); process.exit(1) })"""
"""Node's https, which reads ``NODE_EXTRA_CA_CERTS`` (``servername``: the name it verifies, its address aside)."""


def verified(client: str, host: str, port: int, ca: str) -> bool:
    """Whether ``client`` verified the certificate a server on ``port`` shows for ``host`` against ``ca``."""
    named = not host[0].isdigit()
    address = "127.0.0.1" if named else host
    if client == "python":
        context = ssl.create_default_context(cafile=ca)
        try:
            with (
                socket.create_connection((address, port), timeout=30) as raw,
                context.wrap_socket(raw, server_hostname=host),
            ):
                return True
        except ssl.SSLCertVerificationError:
            return False
    resolve = f"{host}:{port}:{address}"
    argv = {
        "curl": ["curl", "-sS", "--cacert", ca, "--resolve", resolve, f"https://{host}:{port}/"],
        "node": ["node", "-e", NODE, address, str(port), host if named else ""],
        "git": ["git", "-c", f"http.curloptResolve={resolve}", "ls-remote", f"https://{host}:{port}/team/repo.git"],
    }[client]
    environ = {"PATH": os.environ["PATH"], "NODE_EXTRA_CA_CERTS": ca, "GIT_SSL_CAINFO": ca, "HOME": "/nonexistent"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=environ)
    # each reached the server: an answer (501, the server's to any request), or a refusal of its certificate
    answered = {"curl": done.returncode == 0, "node": done.stdout.strip() == "501", "git": "error: 501" in done.stderr}
    refused = {"curl": done.returncode == 60, "node": "ECONN" not in done.stdout, "git": "certificate" in done.stderr}
    assert answered[client] or refused[client], done
    return answered[client]


@pytest.mark.parametrize("client", ["python", "curl", "node", "git"])
def test_the_made_authority_vouches_for_the_masked_hosts_alone(client: str, tmp_path: Path) -> None:
    """Its certificate permits the masked hosts' names and addresses alone (RFC 5280 name constraints): each client
    a process runs (OpenSSL's Python, curl and Node; git's GnuTLS) takes its leaf for a masked host and refuses one
    it signed for any other, a subdomain of a masked name, an address where only names are masked, or a name where
    only addresses are, so even the gateway's own authority vouches for nothing else."""
    _sealed.needs("root")
    masks = {"both": {"api.test", "127.0.0.9"}, "names": {"api.test"}, "addresses": {"127.0.0.9"}}
    asked: dict[str, tuple[str, ...]] = {"both": ("api.test", "127.0.0.9", "other.test", "127.0.0.8", "sub.api.test")}
    asked |= {"names": ("api.test", "127.0.0.9"), "addresses": ("127.0.0.9", "api.test")}
    outcome = {}
    for kind, hosts in masks.items():
        authority = Authority.made(hosts)
        ca = tmp_path / f"{kind}.pem"  # a copy the test holds: /run/mcp-sessions is every gateway's of this host
        ca.write_bytes(Path(authority.shared, "ca.pem").read_bytes())
        authority.close()
        for host in asked[kind]:
            with serving(authority.context(host), "127.0.0.1" if host[0].isalpha() else host) as port:
                outcome[kind, host] = verified(client, host, port, str(ca))
    assert [each for each, taken in outcome.items() if taken] == [
        ("both", "api.test"),
        ("both", "127.0.0.9"),
        ("names", "api.test"),
        ("addresses", "127.0.0.9"),
    ]


@contextlib.contextmanager
def serving(context: ssl.SSLContext, address: str) -> Iterator[int]:
    """An HTTPS server on ``address`` showing ``context``'s certificate (each request answered 501): its port."""
    server = http.server.ThreadingHTTPServer((address, 0), http.server.BaseHTTPRequestHandler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


URL_CAPABLE: dict[str, Any] = {CLIENT_CAPABILITIES_KEY: {"elicitation": {"url": {}}}}
EXCHANGED = "https://api.test/"  # the audience the gateway exchanges a user's token for: the stand-in API
LIFETIME = 16  # seconds a token of the authorization server lives: an exchanged one is renewed after 8


def test_an_exchanged_token_renewed_mid_conversation_reaches_the_api_and_the_process_never_sees_it(
    stand_in: StandIn,
) -> None:
    """``exchange:`` masked, against idpyoidc (its tokens living 16 s): the gateway exchanges the user's token as the
    conversation starts, and again as that one nears its end; the API gets the renewed value through the proxy on the
    next request of the same conversation, while the process's placeholder stays what it was and neither value is
    anywhere in it."""
    ports = stand_in.ports
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(authorization_server(LIFETIME, [EXCHANGED]))
        issuer = server.url("")
        options = (
            *("--auth-jwks", f"{issuer}/jwks.json", "--auth-issuer", issuer, "--auth-audience", "{url}"),
            *("--exchange-audience", EXCHANGED, "--exchange-client-id", GATEWAY[0]),
            *("--processes", "per-conversation", "--process-uids", uids(492, 4)),
            *("--process-env", f"API_TOKEN=exchange:{EXCHANGED}", "--process-env-mask", f"API_TOKEN={API}:{ports[0]}"),
        )
        environ = {"MCP_SESSIONS_SECRET": SECRET, "SSL_CERT_FILE": stand_in.authority}
        environ["MCP_SESSIONS_EXCHANGE_CLIENT_SECRET"] = GATEWAY[1]
        command = f"/usr/bin/python3 {stand_in.server}"
        front = stack.enter_context(_sealed.gateway(command, *options, environ=environ, prefix=stand_in.prefix))
        alice = login(server, "alice", f"http://127.0.0.1:{front.port}/mcp")
        http = stack.enter_context(httpx.Client(timeout=60, headers={"Authorization": f"Bearer {alice}"}))
        mcp = ModernClient(http, f"http://127.0.0.1:{front.port}")
        session = mcp.create_session()
        placeholder = _sealed.text(_sealed.call(mcp, "env", session, variable="API_TOKEN"))

        def got() -> str:
            return bearer_sent(mcp, session, stand_in, placeholder)

        exchanged = time.monotonic()  # at the latest: the gateway exchanged it as the conversation started
        first = got()

        def renewed() -> str | None:
            last = got()
            return last if last != first else None

        # the gateway renews it at half the life idpyoidc gave it (its expires_in; its exp claim says 60 s): asked for
        # from then, with no loop of the process's requests before
        until(lambda: time.monotonic() >= exchanged + LIFETIME / 2, "the renewal's time", within=LIFETIME)

        second = until(renewed, "the API got no renewed token", within=LIFETIME * 2)
        kept = _sealed.text(_sealed.call(mcp, "env", session, variable="API_TOKEN"))
        found = {value: searched(mcp, session, value) for value in (first, second)}
    (before, after), user = (jwt.decode(each, options={"verify_signature": False}) for each in (first, second)), alice
    assert kept == placeholder
    assert placeholder not in (first, second)
    assert before["aud"] == after["aud"] == [EXCHANGED]
    assert after["exp"] > before["exp"]
    assert before["sub"] == after["sub"] == jwt.decode(user, options={"verify_signature": False})["sub"]
    assert found == {first: [], second: []}  # neither value in its environment, its memory, nor its files


def test_a_masked_id_jag_token_reaches_the_api_and_the_process_holds_the_placeholder(
    stand_in: StandIn, tmp_path: Path
) -> None:
    """``id-jag:`` masked, against the ID-JAG stand-ins (``_idjag``): the gateway exchanges the user's token at the
    identity provider for an ID-JAG, and that at the API's authorization server for its token for the API, by its
    keys at both; the process holds a placeholder of that token's shape, and the API gets the token through the
    proxy, found nowhere in the process. Beside it, ``oauth:`` masked, against ``_vendor``'s authorization server:
    the user grants the gateway access there once (URL elicitation, her login at the identity provider first), and
    her own token of that server reaches the API through the proxy, the process holding its placeholder."""
    ports = stand_in.ports
    vendor = _vendor.Vendor(resource=EXCHANGED)
    idp, api_server = _idjag.IdentityProvider(), _idjag.ResourceServer()
    idp.clients["gateway"] = _idjag.key_file(tmp_path / "idp.key")
    api_server.clients["gateway-at-api"] = _idjag.key_file(tmp_path / "api.key")
    api_server.identity_provider = idp
    with contextlib.ExitStack() as stack:
        stack.enter_context(_idjag.serving(idp))
        stack.enter_context(_idjag.serving(api_server))
        vendor_url = stack.enter_context(serve(vendor.app()))
        idp.records[("gateway", api_server.url)] = "gateway-at-api"
        options = (
            *("--auth-jwks", f"{idp.url}/jwks.json", "--auth-issuer", idp.url, "--auth-audience", "{url}"),
            *("--exchange-client-id", "gateway", "--exchange-client-auth", "private_key_jwt"),
            *("--exchange-client-key-file", str(tmp_path / "idp.key")),
            *("--id-jag-client-id", "gateway-at-api", "--id-jag-client-auth", "private_key_jwt"),
            *("--id-jag-client-key-file", str(tmp_path / "api.key")),
            *("--processes", "per-conversation", "--process-uids", uids(498, 2)),
            *("--process-env", f"API_TOKEN=id-jag:{api_server.url},resource={EXCHANGED}"),
            *("--process-env-mask", f"API_TOKEN={API}:{ports[0]}"),
            *("--login-issuer", idp.url, "--login-client-id", "gateway", "--login-client-auth", "private_key_jwt"),
            *("--login-client-key-file", str(tmp_path / "idp.key")),
            *("--process-env", f"VENDOR_TOKEN=oauth:{vendor_url},resource={EXCHANGED}"),
            *("--process-env-mask", f"VENDOR_TOKEN={API}:{ports[0]}"),
        )
        environ = {"MCP_SESSIONS_SECRET": SECRET, "SSL_CERT_FILE": stand_in.authority}
        command = f"/usr/bin/python3 {stand_in.server}"
        front = stack.enter_context(_sealed.gateway(command, *options, environ=environ, prefix=stand_in.prefix))
        alice = idp.login("alice", f"http://127.0.0.1:{front.port}/mcp")
        http = stack.enter_context(httpx.Client(timeout=60, headers={"Authorization": f"Bearer {alice}"}))
        mcp = ModernClient(http, f"http://127.0.0.1:{front.port}")
        asked = mcp.post(modern_request("tools/call", {"name": "env", "arguments": {}}, meta=URL_CAPABLE)).json()
        (sign_in,) = asked["result"]["inputRequests"].values()
        with httpx.Client(follow_redirects=True, headers={_vendor.USER_HEADER: "alice"}, timeout=60) as browser:
            assert "You are signed in to" in browser.get(sign_in["params"]["url"]).text
        session = mcp.create_session()
        tokens = []
        for variable in ("API_TOKEN", "VENDOR_TOKEN"):
            placeholder = _sealed.text(_sealed.call(mcp, "env", session, variable=variable))
            tokens.append((placeholder, bearer_sent(mcp, session, stand_in, placeholder)))
        found = [searched(mcp, session, token) for _, token in tokens]
    (placeholder, token), (vendor_placeholder, vendor_token) = tokens
    assert vendor_token in vendor.issued and vendor_placeholder != vendor_token
    assert jwt.decode(vendor_token, options={"verify_signature": False})["sub"] == "alice"
    assert api_server.issued == [token]  # the API's authorization server's, for alice, by one ID-JAG
    assert placeholder != token and len(placeholder) == len(token)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert (claims["iss"], claims["sub"], claims["aud"]) == (api_server.url, "alice", EXCHANGED)
    assert found == [[], []]  # neither in its environment, its memory, nor its files


def test_a_killed_gateway_s_certificates_are_removed_as_the_next_gateway_starts() -> None:
    """A SIGKILLed gateway leaves its certificates' directory (nothing of it runs); the next gateway's start removes
    it (no one holds its lock), and a gateway's own stop removes its own."""
    _sealed.needs("root", "bwrap")
    options = (
        *("--process-uids", uids(496, 2), "--process-env", "API_TOKEN=header:X-Token"),
        *("--process-env-mask", "API_TOKEN=api.test"),
    )
    with _sealed.hostile() as server:
        with _sealed.gateway(server, *options) as killed:
            assert killed.process is not None
            left = certificates_of(killed.process.pid)
            killed.process.kill()
            killed.process.wait(timeout=WITHIN)
        kept = os.path.isfile(f"{left}/ca.pem")
        with _sealed.gateway(server, *options) as following:
            assert following.process is not None
            own = certificates_of(following.process.pid)
            removed = not os.path.exists(left)
        assert (kept, removed, own != left, os.path.exists(own)) == (True, True, True, False)


def certificates_of(pid: int) -> str:
    """The directory of a gateway's certificates: the one it holds open (its lock)."""
    held = {os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir() if os.readlink(fd).startswith(SHARED)}
    (found,) = (each for each in held if os.path.basename(each).startswith("ca-"))
    return found


@pytest.mark.parametrize(
    ("program", "node", "told"),
    [("node", "host", True), ("npx", "host", True), ("node", "22", False), ("python3", "host", False)],
)
def test_the_startup_says_when_the_servers_node_reads_no_proxy(program: str, node: str, told: bool) -> None:
    """Issue 101, item 8: under Node 20, ``fetch`` ignores ``HTTPS_PROXY`` (``NODE_USE_ENV_PROXY`` came in 22.21 and
    24.5), so a masked host is out of its reach, and nothing said so. With masks, the startup warns where the
    server's command is ``node`` or ``npx`` whose ``node`` (the processes' ``PATH``'s) is older: the host's Node 20
    is told, the tests' Node 22.23 and another program are not."""
    binary = shutil.which("node") if node == "host" else str(installed(NODE22, "node 22"))
    if binary is None:
        missing("node is not installed: run scripts/system-deps.sh")
    environ = {"PATH": f"{Path(binary).parent}{os.pathsep}{os.defpath}"}
    said = node_without_proxy([program, "server.js"], environ)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    assert (said is not None) == told, said
    assert said is None or said.startswith(f"the server's Node is {version} ({binary}): its own fetch ignores"), said
