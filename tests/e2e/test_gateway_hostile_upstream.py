"""``mcp-sessions gateway`` in front of a hostile upstream: what it sends back, and how long the gateway holds on.

The upstream is a raw asyncio HTTP/1.1 server (``_hostile.raw_server``), in a thread of the test process, that
answers as a stranger might: a ``Location`` whose path reads as another host, a body without end, a 64 MiB
JSON answer, an event whose line never ends, a probe answered by an event stream that never carries the
answer. It says what it saw: each request it got (by its ``X-Tag`` header), and each connection the gateway
closed under it (a write that failed, or the end of what it reads). The gateway is the real command where its memory
or its SIGTERM is the point, else in process (the probe's).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import threading
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from _mcp import messages, modern_headers, modern_request, session_meta
from _waits import WITHIN, until
from conftest import SECRET, serve
from e2e._gateway import InProcess, Process, created, gateway_in_process, gateway_process, rss_kib
from e2e._hostile import Request, raw_server
from mcp_sessions import SessionsConfig, gateway_app
from mcp_sessions._gateway._serving import CUT

MIB = 1024 * 1024
MAX_RESPONSE_SIZE = 8 * MIB  # the documented default
HUGE = 64 * MIB


class HostileUpstream:
    """The hostile server's answers (see the module), for :func:`raw_server`; ``origin`` is where it listens."""

    def __init__(self) -> None:
        self.opened: defaultdict[str, threading.Event] = defaultdict(threading.Event)
        """By tag: the upstream has the request (and has begun its answer, if it gives one)."""
        self.closed: defaultdict[str, threading.Event] = defaultdict(threading.Event)
        """By tag: the gateway closed the connection while the upstream still had something to send or wait for."""
        self.sent: defaultdict[str, int] = defaultdict(int)
        self.origin = ""

    async def answer(self, request: Request, writer: asyncio.StreamWriter) -> None:
        lines = request.head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        tag = next((line[6:].strip() for line in lines if line.lower().startswith("x-tag:")), "")
        path, _, query = target.partition("?")
        reader = request.reader
        if method == "POST":
            message = request.message
            if message.get("method") == "mcp-sessions/probe":
                if path.startswith("/silent/"):  # an event stream that never carries the answer
                    return await self._hold(tag, reader, writer, b"200 OK", b"text/event-stream", b": waiting\n\n")
                error = {"code": -32601, "message": "Method not found"}
                return await self._json(writer, {"jsonrpc": "2.0", "id": message["id"], "error": error})
            path = "/" + message["params"]["name"]
            request_id = json.dumps(message["id"]).encode()
        if path == "/redirect":  # ?to=: where the redirect points
            location = unquote(query.removeprefix("to=")).encode()
            writer.write(b"HTTP/1.1 302 Found\r\nLocation: " + location + b"\r\nContent-Location: " + location)
            return await self._drained(writer, b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        if path == "/held":  # the headers never come
            return await self._hold(tag, reader, writer, None, b"", b"")
        if path == "/accepted":  # a 202 whose (empty) body never ends
            return await self._hold(tag, reader, writer, b"202 Accepted", b"application/json", b"")
        if path == "/huge-json":  # 64 MiB of JSON, as fast as it is taken
            opening = b'{"jsonrpc":"2.0","id":' + request_id + b',"result":{"content":[{"type":"text","text":"'
            closing = b'"}]}}'
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % HUGE
            text = b"a" * (HUGE - len(opening) - len(closing))
            return await self._stream(tag, writer, head, opening, _chunks(text, MIB), closing)
        kinds = {
            "/endless": (b"text/plain", b"", b"x" * 65536, 0.0),
            "/events": (b"text/event-stream", b"", b'data: {"jsonrpc":"2.0","method":"n"}\n\n' * 256, 0.0),
            "/endless-line": (b"text/event-stream", b"data: ", b"x" * 65536, 0.0),
            "/trickle-json": (b"application/json", b'{"jsonrpc":"2.0","id":1,"result":{"pad":"', b"a" * 1024, 0.02),
        }
        content_type, opening, chunk, pause = kinds[path]
        head = b"HTTP/1.1 200 OK\r\nContent-Type: " + content_type + b"\r\nConnection: close\r\n\r\n"
        await self._stream(tag, writer, head, opening, _forever(chunk, pause), b"")

    async def _json(self, writer: Any, payload: Any) -> None:
        body = json.dumps(payload).encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        await self._drained(writer, head + b"Connection: close\r\n\r\n" + body)

    async def _drained(self, writer: Any, data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    async def _stream(self, tag: str, writer: Any, head: bytes, opening: bytes, chunks: Any, closing: bytes) -> None:
        """Write the answer, counting what went; a write that fails is the gateway gone: ``closed``."""
        try:
            await self._drained(writer, head + opening)
            self.opened[tag].set()
            async for chunk in chunks:
                await self._drained(writer, chunk)
                self.sent[tag] += len(chunk)
            await self._drained(writer, closing)
        except ConnectionError:
            self.closed[tag].set()
            raise

    async def _hold(
        self, tag: str, reader: Any, writer: Any, status: bytes | None, content_type: bytes, first: bytes
    ) -> None:
        """Start an answer (or none) that never goes on; the end of what the gateway sends is it gone."""
        if status is not None:
            head = b"HTTP/1.1 " + status + b"\r\nContent-Type: " + content_type + b"\r\nConnection: close\r\n\r\n"
            await self._drained(writer, head + first)
        self.opened[tag].set()
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass
        self.closed[tag].set()
        raise ConnectionError("the gateway closed the connection")


async def _chunks(data: bytes, size: int) -> Any:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def _forever(chunk: bytes, pause: float) -> Any:
    while True:
        yield chunk
        if pause:
            await asyncio.sleep(pause)  # the upstream's pace, not a wait of the test's


@pytest.fixture(scope="module")
def upstream() -> Iterator[HostileUpstream]:
    hostile = HostileUpstream()
    with raw_server(hostile.answer) as server:
        hostile.origin = server.url
        yield hostile


@pytest.fixture(scope="module")
def front(upstream: HostileUpstream) -> Iterator[InProcess | Process]:
    """The gateway in process, from the command's flags, on a real uvicorn in a thread (a raw client's socket
    matters): its tests ask what it answers and when it closes its upstream connection, not the process."""
    with gateway_in_process([upstream.origin + "/mcp"]) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def session(front: InProcess | Process) -> str:
    with httpx.Client(timeout=10) as http:
        return created(http, front.url())


def tool_call(name: str, session: str | None, request_id: int = 7) -> dict[str, Any]:
    return modern_request(
        "tools/call", {"name": name, "arguments": {}}, id=request_id, session=session and session_meta(session)
    )


# -- Location ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("to", "sent"),
    [
        ("{origin}/mcp/", "/mcp/"),  # the upstream's own origin: a path on the gateway's
        ("HTTP://{host}/mcp/?a=1", "/mcp/?a=1"),  # scheme and host in any case
        ("{origin}", "/"),
        ("{origin}/%09/x", "/%09/x"),
        ("{origin}/a\\b", "/a\\b"),
        ("{origin}/%2F%2Fevil.example/x", "/%2F%2Fevil.example/x"),  # a path: browsers decode none
        ("/mcp/", "/mcp/"),
        ("{origin}1/mcp/", "{origin}1/mcp/"),  # the same digits first, then another
        ("https://login.example/authorize", "https://login.example/authorize"),  # elsewhere: as it came
        # A path a browser reads as another host stays the upstream's absolute URL (more: test_gateway_parts).
        ("{origin}//evil.example/x", "{origin}//evil.example/x"),
        ("{origin}/\\evil.example/x", "{origin}/\\evil.example/x"),
        ("http://user@{host}/x", "http://user@{host}/x"),  # credentials: not the origin's URL
        ("http://127.0.0.1:99999/x", "http://127.0.0.1:99999/x"),  # a port that is no port
    ],
)
def test_a_location_on_the_upstreams_origin_becomes_a_path_on_the_gateways(
    upstream: HostileUpstream, front: InProcess | Process, http: httpx.Client, to: str, sent: str
) -> None:
    names = {"origin": upstream.origin, "host": upstream.origin.removeprefix("http://")}
    response = http.get(front.url("/redirect"), params={"to": to.format(**names)})
    assert response.status_code == 302
    assert response.headers["location"] == response.headers["content-location"] == sent.format(**names)


# -- a client that goes away ------------------------------------------------------------------------------------


def raw_request(port: int, tag: str, method: str, path: str, body: dict[str, Any] | None = None) -> bytes:
    """The request's bytes, as a client sends them (a raw socket can leave at any moment)."""
    fields = {"Host": f"127.0.0.1:{port}", "X-Tag": tag}
    content = b""
    if body is not None:
        content = json.dumps(body).encode()
        fields.update(modern_headers(body))
        fields["Content-Length"] = str(len(content))
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    return f"{method} {path} HTTP/1.1\r\n{head}\r\n".encode() + content


@pytest.mark.parametrize(
    ("kind", "method", "path", "tool", "in_session"),
    [
        ("plain", "GET", "/endless", None, False),
        ("events", "GET", "/events", None, False),
        ("accepted", "GET", "/accepted", None, False),
        ("headers-never-come", "GET", "/held", None, False),
        ("json", "POST", "/mcp", "trickle-json", False),
        ("json-in-session", "POST", "/mcp", "trickle-json", True),
        ("events-in-session", "POST", "/mcp", "events", True),
    ],
)
def test_a_client_that_goes_away_closes_the_upstream_connection(
    upstream: HostileUpstream,
    front: InProcess | Process,
    session: str,
    kind: str,
    method: str,
    path: str,
    tool: str | None,
    in_session: bool,
) -> None:
    tag = f"gone-{kind}"
    body = None if tool is None else tool_call(tool, session if in_session else None)
    with socket.create_connection(("127.0.0.1", front.port), timeout=WITHIN) as client:
        client.sendall(raw_request(front.port, tag, method, path, body))
        until(upstream.opened[tag].is_set, "the upstream's answer")
    until(upstream.closed[tag].is_set, f"the upstream seeing the client go ({kind})")
    print(f"{kind}: the upstream sent {upstream.sent[tag] / MIB:.2f} MiB before the gateway closed its connection")


def test_sigterm_stops_the_gateway_while_an_answer_streams(upstream: HostileUpstream, http: httpx.Client) -> None:
    """A stream is cut where it is; a call whose answer had not started as the drain ended, which its server may
    have run, is told so (502, ``-32603``, ``data.mayHaveRun``), never 503 with ``Retry-After`` and "send the
    request again", which a client or a front did (issue 101, item 7)."""
    tag = "sigterm"
    held = tool_call("held", None)
    with (
        gateway_process([upstream.origin + "/mcp"], "--shutdown-timeout", "0.5") as process,
        http.stream("GET", process.url("/endless"), headers={"X-Tag": tag}) as response,
        ThreadPoolExecutor(1) as pool,
    ):
        assert response.status_code == 200
        assert process.process is not None
        next(response.iter_raw())
        headers = {**modern_headers(held), "X-Tag": "sigterm-held"}
        cut = pool.submit(http.post, process.url(), json=held, headers=headers)
        until(upstream.opened["sigterm-held"].is_set, "the call to reach the upstream")
        running = process.process
        running.send_signal(signal.SIGTERM)
        until(lambda: running.poll() is not None, "the gateway's exit")
        told = cut.result(WITHIN)
    until(upstream.closed[tag].is_set, "the upstream seeing the gateway go")
    assert (told.status_code, told.headers.get("retry-after")) == (502, None), told.text
    error = {"code": -32603, "message": CUT, "data": {"reason": "gateway_stopped", "mayHaveRun": True}}
    assert told.json() == {"jsonrpc": "2.0", "id": None, "error": error}


# -- bounded memory ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "status", "content_type"),
    [("huge-json", 502, "application/json"), ("endless-line", 200, "text/event-stream")],  # 64 MiB; a line without end
)
def test_an_answer_past_the_bound_is_refused_and_its_upstream_connection_closed(
    upstream: HostileUpstream,
    front: InProcess | Process,
    session: str,
    http: httpx.Client,
    tool: str,
    status: int,
    content_type: str,
) -> None:
    pid = front.process.pid if isinstance(front, Process) and front.process is not None else os.getpid()
    before = rss_kib(pid)  # for the record only
    body = tool_call(tool, session, 8)
    response = http.post(front.url(), json=body, headers={**modern_headers(body), "X-Tag": tool})
    after = rss_kib(pid)
    assert response.status_code == status
    assert response.headers["content-type"].startswith(content_type)
    error = {"code": -32603, "message": f"Response too large (limit {MAX_RESPONSE_SIZE} bytes)"}
    assert messages(response) == [{"jsonrpc": "2.0", "id": 8, "error": error}]
    until(upstream.closed[tool].is_set, "the upstream seeing its answer refused")
    assert upstream.sent[tool] < HUGE
    print(f"{tool}: gateway RSS {before >> 10} -> {after >> 10} MiB, peak {rss_kib(pid, 'VmHWM') >> 10}")


# -- the probe --------------------------------------------------------------------------------------------------


def silent(upstream: HostileUpstream, probe_timeout: str) -> contextlib.AbstractContextManager[str]:
    """The gateway in process, on a real uvicorn (its client's socket matters), in front of the upstream whose probe
    is never answered, with ``MCP_SESSIONS_PROBE_TIMEOUT`` as the command reads it: its base URL."""
    environ = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_PROBE_TIMEOUT": probe_timeout}
    return serve(gateway_app([upstream.origin + "/silent/mcp"], config=SessionsConfig.from_env(environ=environ)))


def test_a_probe_never_answered_ends_at_its_deadline_and_closes_its_upstream_stream(
    upstream: HostileUpstream, http: httpx.Client
) -> None:
    with silent(upstream, "1") as base:
        body = modern_request("sessions/create", id=3)
        response = http.post(base + "/silent/mcp", json=body, headers={**modern_headers(body), "X-Tag": "late"})
        assert response.status_code == 504
        assert response.headers["retry-after"] == "1"
        error = {"code": -32014, "message": "The server did not answer in time"}
        assert response.json() == {"jsonrpc": "2.0", "id": 3, "error": error}
        until(upstream.closed["late"].is_set, "the upstream seeing the probe end")


def test_a_client_that_leaves_while_the_probe_waits_ends_the_probe(upstream: HostileUpstream) -> None:
    with silent(upstream, "600") as base:
        body, port = modern_request("sessions/create", id=4), httpx.URL(base).port or 0
        with socket.create_connection(("127.0.0.1", port), timeout=WITHIN) as client:
            client.sendall(raw_request(port, "left", "POST", "/silent/mcp", body))
            until(upstream.opened["left"].is_set, "the probe reaching the upstream")
        until(upstream.closed["left"].is_set, "the upstream seeing the probe end with its client")
