"""``mcp-sessions create`` against hostile servers and servers of 2025-11-25 only (issue 50).

Real servers on loopback: server-everything (the TypeScript SDK, 2025-11-25 only), and raw asyncio
servers (tests/e2e/_hostile.py) that redirect to another origin, answer with a gzip bomb, drip their
headers, or put control characters in what the command prints.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from _mcp import hs_jws
from e2e._gateway import everything_server
from e2e._hostile import EVIL, Request, asked_for_no_coding, drip, forbidden, gzip_bomb, raw_server, response
from mcp_sessions._cli import main

CREDENTIAL = "credential-only-the-first-origin-may-see"


def run(*argv: str, environ: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err, environ=environ or {})
    return code, out.getvalue(), err.getvalue()


def test_a_server_of_2025_only_gets_its_own_answer_shown_and_legacy_suggested() -> None:
    with everything_server() as url:
        modern = run("create", url)
        legacy = run("create", url, "--legacy")

    code, out, err = modern
    assert (code, out) == (1, "")
    assert err.startswith("mcp-sessions create: the server refused sessions/create: Bad Request"), err
    assert "the server answered HTTP 400: {" in err
    assert "try again with --legacy" in err
    code, out, err = legacy  # the 2025 wire: the server answers, and has no sessions
    assert (code, out) == (1, "")
    assert "Method not found (-32601)" in err
    assert "--legacy" not in err


@pytest.mark.parametrize("status", [302, 307, 308])
def test_a_redirect_to_another_origin_takes_nothing_there(status: int, tmp_path: Path) -> None:
    """The credentials, from a variable and a file, reach the server the command was given, and only it."""
    key_file = tmp_path / "api-key"
    key_file.write_text(f"{CREDENTIAL}-key\n")
    credentials = ["--bearer-env", "TEAM_TOKEN", "--header", f"X-Api-Key=file:{key_file}"]

    async def elsewhere_answers(request: Request, writer: asyncio.StreamWriter) -> None:
        writer.write(response(200, b"{}", {"Content-Type": "application/json"}))

    with raw_server(elsewhere_answers) as elsewhere:

        async def redirect(request: Request, writer: asyncio.StreamWriter) -> None:
            writer.write(response(status, b"", {"Location": f"{elsewhere.url}/mcp"}))

        with raw_server(redirect) as server:
            code, out, err = run("create", f"{server.url}/mcp", *credentials, environ={"TEAM_TOKEN": CREDENTIAL})

    [asked] = server.received
    assert f"authorization: bearer {CREDENTIAL}\r\n".encode() in asked.head.lower()
    assert f"x-api-key: {CREDENTIAL}-key\r\n".encode() in asked.head.lower()
    assert elsewhere.received == []
    assert (code, out) == (1, "")
    assert f"the server answered HTTP {status}" in err
    assert f"a redirect to {elsewhere.url}/mcp: create follows none" in err


@pytest.mark.parametrize("refuse", [True, False], ids=["refused", "created"])
def test_no_control_character_the_server_sent_reaches_the_terminal(refuse: bool) -> None:
    async def evil(request: Request, writer: asyncio.StreamWriter) -> None:
        message = request.message
        if refuse:
            error = {"code": -32600, "message": EVIL}
            body = {"jsonrpc": "2.0", "id": "server-error", "error": error}
            writer.write(
                response(400, json.dumps(body, ensure_ascii=False).encode(), {"Content-Type": "application/json"})
            )
            return
        session = {"sessionId": hs_jws({"alg": "HS256"}, {"sid": EVIL, "exp": 4102444800}, b"", signature=b"signature")}
        body = {"jsonrpc": "2.0", "id": message["id"], "result": {"session": session}}
        writer.write(response(200, json.dumps(body).encode(), {"Content-Type": "application/json"}))

    with raw_server(evil) as server:
        code, out, err = run("create", f"{server.url}/mcp")

    assert code == (1 if refuse else 0), err
    assert forbidden(out) == forbidden(err) == []
    assert "\\x1b]0;pwned\\x07" in (err if refuse else out)  # shown escaped: a reader sees what the server sent


@pytest.mark.parametrize(
    ("body", "headers", "refusal"),
    [
        # Any coded answer is refused unread, whatever it would decode to: 16 MiB gzipped shows it as well as more.
        (gzip_bomb(16 << 20, layers=1), {"Content-Encoding": "gzip"}, "an answer coded 'gzip'"),
        (b" " * (2 << 20), {}, f"an answer over {1 << 20} bytes"),
    ],
    ids=["gzip-bomb", "over-1-MiB"],
)
def test_an_answer_past_the_bounds_is_refused_unread(body: bytes, headers: dict[str, str], refusal: str) -> None:
    async def answer(request: Request, writer: asyncio.StreamWriter) -> None:
        writer.write(response(200, body, {"Content-Type": "application/json", **headers}))

    with raw_server(answer) as server:
        code, out, err = run("create", f"{server.url}/mcp")

    assert (code, out) == (1, ""), err
    assert f"HTTP 200, {refusal}" in err, err
    assert server.received
    assert all(asked_for_no_coding(request) for request in server.received)


def test_headers_dripped_a_byte_at_a_time_end_at_the_deadline() -> None:
    async def dripping(request: Request, writer: asyncio.StreamWriter) -> None:
        await drip(writer, b"HTTP/1.1 200 OK\r\nX-Slow: " + b"z" * 600, 0.2)

    with raw_server(dripping) as server:
        code, out, err = run("create", f"{server.url}/mcp", "--request-timeout", "1")

    assert (code, out) == (1, "")
    assert "no whole answer within 1 s" in err, err
