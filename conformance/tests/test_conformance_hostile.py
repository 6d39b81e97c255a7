"""The conformance pack against hostile servers (issue 50): a careful client of a stranger.

Each server is real and on loopback: raw asyncio servers (tests/e2e/_hostile.py) that redirect to
another origin, answer with a gzip bomb, drip their headers or put control characters in every
string, and the quickstart (the real mcp SDK behind the middleware) with its event streams framed
by every line end the SSE grammar allows.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from examples.quickstart import build_app
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from conftest import SECRET, serve
from e2e._gateway import everything_server
from e2e._hostile import EVIL, Request, asked_for_no_coding, drip, forbidden, gzip_bomb, ran, raw_server, response
from e2e._pack import LEGACY, run_pack
from mcp_sessions._cli import main

CREDENTIAL = "credential-only-the-first-origin-may-see"
BOMB_DECODED = 512 << 20
"""A generous bound on the pack's peak memory: it was 1.1 GB decoding the bomb, and is about 80 MB."""


def answer(request: Request) -> tuple[int, dict[str, Any] | None]:
    """An MCP server in outline whose every string is :data:`EVIL`: a tool list, tool texts, errors."""
    message = request.message if isinstance(request.message, dict) else {}
    method, request_id = message.get("method"), message.get("id")
    tools = [{"name": name, "inputSchema": {"type": "object"}} for name in ("whoami", "count", EVIL)]
    results: dict[object, dict[str, Any]] = {
        "tools/list": {"tools": tools},
        "tools/call": {"content": [{"type": "text", "text": EVIL}]},
        "initialize": {"protocolVersion": LEGACY, "capabilities": {"experimental": {EVIL: {}}}, "serverInfo": {}},
    }
    if request_id is None and method is not None:
        return 202, None
    if method in results:
        return 200, {"jsonrpc": "2.0", "id": request_id, "result": results[method]}
    return 400, {"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32600, "message": EVIL, "data": EVIL}}


async def evil(request: Request, writer: asyncio.StreamWriter) -> None:
    status, body = answer(request)
    raw = b"" if body is None else json.dumps(body, ensure_ascii=False).encode()
    writer.write(response(status, raw, {"Content-Type": "application/json"}))


def run_raw(url: str, *args: str) -> tuple[int, str, list[str]]:
    """The pack in this process: its exit status, what it printed, and each checks.json as the file holds it."""
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as folder:
        code = main(["conformance", url, *args, "--json", folder], stdout=out, stderr=err, environ={})
        files = [path.read_text(encoding="utf-8") for path in Path(folder).glob("*/checks.json")]
    assert err.getvalue() == ""
    return code, out.getvalue(), files


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_origin_takes_neither_credentials_nor_bodies_there(status: int) -> None:
    async def elsewhere_answers(request: Request, writer: asyncio.StreamWriter) -> None:
        writer.write(response(200, b"{}", {"Content-Type": "application/json"}))

    with raw_server(elsewhere_answers) as elsewhere:

        async def redirect(request: Request, writer: asyncio.StreamWriter) -> None:
            writer.write(response(status, b"", {"Location": f"{elsewhere.url}/mcp"}))

        with raw_server(redirect) as server:
            headers = ["--header", f"Authorization: Bearer {CREDENTIAL}", "--header", f"X-Api-Key: {CREDENTIAL}"]
            run = run_pack(f"{server.url}/mcp", *headers)

    assert elsewhere.received == []
    assert server.received, "the pack asked the server it was given"
    assert run.code == 1
    assert f"HTTP {status}, a redirect to {elsewhere.url}/mcp" in run.out


@pytest.mark.parametrize(
    "wire", [["--wire", "draft"], ["--wire", "hosts", "--conventions"], []], ids=["draft", "hosts", "advertised"]
)
@pytest.mark.parametrize("era", ["2026-07-28", LEGACY])
def test_no_control_character_the_server_sent_reaches_the_terminal(era: str, wire: list[str]) -> None:
    with raw_server(evil) as server:
        code, out, files = run_raw(f"{server.url}/mcp", "--spec-version", era, *wire)

    assert forbidden(out) == []
    if not wire and era == LEGACY:  # it advertises no session wire: nothing is checked, and nothing fails
        assert (code, files) == (0, []), out
        return
    assert code == 1
    assert "Error:" in out
    # shown escaped, so a reader sees what the server sent: decoded by a check (the hosts' whoami), or as the JSON
    # text of its answer (which JSON escapes itself)
    assert ("\\x1b]0;pwned\\x07" if "hosts" in wire else "\\u001b]0;pwned\\u0007") in out, out
    for text in files:
        assert forbidden(text.replace("\n", "")) == []
        json.loads(text)  # the same JSON, the server's text in it as sent


def test_a_gzip_bomb_is_refused_before_it_is_decoded() -> None:
    """The bomb decodes to 512 MiB; the pack asks for no content coding and refuses the coded answer."""
    bomb = gzip_bomb(BOMB_DECODED)

    async def explode(request: Request, writer: asyncio.StreamWriter) -> None:
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip, gzip"}
        writer.write(response(200, bomb, headers))

    with raw_server(explode) as server:
        command = [sys.executable, "-m", "mcp_sessions", "conformance", f"{server.url}/mcp", "--wire", "draft"]
        code, printed = ran(command)

    assert len(bomb) < 4096
    assert code == 1, printed
    assert "coded 'gzip, gzip'" in printed, printed
    # Nothing was decoded: the command asked for no coding, and read none (a peak RSS, once asserted here, counts
    # the forking test process's memory too, so it said nothing of the command's).
    assert server.received and all(asked_for_no_coding(request) for request in server.received)


def test_headers_dripped_a_byte_at_a_time_end_at_the_deadline() -> None:
    """A byte every 0.2 s never trips a timeout between reads: the request's own deadline ends it."""

    async def dripping(request: Request, writer: asyncio.StreamWriter) -> None:
        await drip(writer, b"HTTP/1.1 200 OK\r\nX-Slow: " + b"z" * 600, 0.2)

    with raw_server(dripping) as server:
        run = run_pack(f"{server.url}/mcp", "--wire", "draft", "--request-timeout", "1")

    assert run.code == 1
    assert "no whole answer within 1 s" in run.out, run.out


def test_a_server_of_2025_only_is_named_as_one_with_its_own_answer() -> None:
    """server-everything (the TypeScript SDK) refuses a 2026-07-28 request: the pack says what it answered, and
    which era to ask for instead."""
    with everything_server() as url:
        run = run_pack(url, "--wire", "draft")

    assert run.code == 1
    [failed] = run.checks["sessions-draft"]
    assert failed["errorMessage"].startswith("the server advertises no capabilities"), failed
    assert "(the last answer: HTTP 400: {" in failed["errorMessage"], failed
    assert "run the pack with --spec-version 2025-11-25" in run.out, run.out


# The line ends of an event's lines, then of the blank line that ends it: every one the SSE grammar allows.
LINE_ENDS = {
    "LF": (b"\n", b"\n"),
    "CR": (b"\r", b"\r"),
    "CRLF": (b"\r\n", b"\r\n"),
    "LF-CRLF": (b"\n", b"\r\n"),
    "LF-CR": (b"\n", b"\r"),
    "CRLF-CR": (b"\r\n", b"\r"),
}
NOTE = b'data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"framed"}}'


def reframed(app: ASGIApp) -> ASGIApp:
    """``app`` at ``/<framing>/mcp``: each event stream's lines ended as the framing says and its events too (the
    SDK ends both with CRLF), a notification event first, and each event's last byte sent on its own."""

    async def framed(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        name, _, _ = scope["path"].lstrip("/").partition("/")
        line, blank = LINE_ENDS[name]
        sse = False

        async def send_framed(message: Message) -> None:
            nonlocal sse
            if message["type"] == "http.response.start":
                sse = dict(message["headers"]).get(b"content-type", b"").startswith(b"text/event-stream")
                await send(message)
                if sse:
                    await send({"type": "http.response.body", "body": NOTE + line + blank, "more_body": True})
                return
            body = message.get("body", b"")
            if not (sse and message["type"] == "http.response.body" and body):
                return await send(message)
            assert body.endswith(b"\r\n\r\n"), body
            body = (line + blank).join(event.replace(b"\r\n", line) for event in body[:-4].split(b"\r\n\r\n"))
            body += line + blank
            more = message.get("more_body", False)
            await send({"type": "http.response.body", "body": body[:-1], "more_body": True})
            await send({"type": "http.response.body", "body": body[-1:], "more_body": more})

        await app({**scope, "path": "/mcp", "raw_path": b"/mcp"}, receive, send_framed)

    return framed


@pytest.fixture(scope="module")
def quickstart_sse() -> Iterator[str]:
    """The quickstart (stateful, SSE: the SDK answers even ``initialize`` as an event stream), reframed."""
    environ = {"MCP_SESSIONS_SECRET": SECRET}
    with serve(reframed(build_app(json_response=False, stateless=False, environ=environ))) as base:
        yield base


@pytest.mark.parametrize("framing", list(LINE_ENDS))
def test_event_streams_with_every_line_end_read_as_their_events(quickstart_sse: str, framing: str) -> None:
    run = run_pack(f"{quickstart_sse}/{framing}/mcp", "--wire", "draft", "--spec-version", LEGACY)

    assert (run.code, run.failing()) == (0, set()), run.out
