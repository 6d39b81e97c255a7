"""Servers on older mcp SDKs behind the middleware (issue 37): the tests' own servers run mcp 2.3.

Each server runs as a subprocess in an environment of its own (``make test-all`` builds them;
``MCP_SERVER_VENVS`` names them): the oldest mcp 2 (2.0.0) with the oldest fastmcp 4 (4.0.0), and
the servers on PyPI that still pin ``mcp<2``: the newest mcp 1.x with fastmcp 3.x, mcp 1.26 with
fastmcp 2.14 (the last 2.x), and the oldest that works, mcp 1.9.4 with fastmcp 2.9 on Starlette 0.40
(this package's own floor). ``_versioned_server.py`` serves a ``count`` tool on the SDK's own server
(stateful) and on fastmcp's (stateful and stateless). On the 2025 wire, at the version the server
answers ``initialize`` with, its tool sees the session as on mcp 2.3. On the 2026-07-28 wire a
session is handed out exactly where the server serves that wire: mcp 2 servers count in it, and so
does mcp 1.9's stateless transport, which checks no protocol version; every other mcp 1.x server
refuses it, and a ``sessions/create`` gets the server's own answer. The clients follow redirects, as
the SDK's do: up to mcp 1.11, ``/mcp`` redirects to ``/mcp/``."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from _mcp import MCP_PATH, LegacyClient, ModernClient, modern_headers, modern_request, session_meta, tool_text
from conftest import SECRET
from e2e._versioned import VENVS, versioned_server
from mcp_sessions import MCPSessionMiddleware
from mcp_sessions._cli import main


@dataclass(frozen=True)
class Server:
    url: str
    kind: str
    mcp1: bool  # speaks the 2025 wire only


@pytest.fixture(
    scope="module",
    params=[(venv, kind) for venv in VENVS for kind in ["sdk", "fastmcp", "fastmcp-stateless"]],
    ids=lambda param: f"{Path(param[0]).name.removeprefix('.venv-')}-{param[1]}",
)
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """One server on an older mcp, killed when its tests end."""
    venv, kind = request.param
    with versioned_server(venv, SECRET, kind) as url:
        yield Server(url, kind, mcp1="mcp1" in Path(venv).name)


def test_a_tool_counts_in_its_session_on_the_2025_wire(server: Server) -> None:
    with httpx.Client(timeout=10, follow_redirects=True) as http:
        client = LegacyClient(http, server.url)
        client.initialize()
        stateful = server.kind != "fastmcp-stateless"
        assert (client.transport_session_id is not None) == stateful  # the server's own transport session
        session = session_meta(client.create_session())
        counts = [tool_text(client.call_tool("count", session=session)[1]) for _ in range(2)]
    assert counts == ["1", "2"]


def test_on_the_2026_wire_a_session_is_handed_out_where_the_server_serves_that_wire_and_counts(
    server: Server,
) -> None:
    """mcp 2 serves the 2026-07-28 wire. mcp 1.x refuses it, but for the stateless transport of mcp 1.9, which
    checks no protocol version and serves a 2026-07-28 request as a 2025 one: whichever the server does, a
    ``sessions/create`` gets the same, a session where the server serves the request (and it counts there), the
    server's own refusal where it refuses it."""
    listing, creating = modern_request("tools/list"), modern_request("sessions/create")
    with httpx.Client(timeout=10, follow_redirects=True) as http:
        listed = http.post(server.url + MCP_PATH, json=listing, headers=modern_headers(listing))
        if listed.status_code == 200:
            client = ModernClient(http, server.url)
            session = session_meta(client.create_session())
            counts = [tool_text(client.call_tool("count", session=session)[1]) for _ in range(2)]
            assert counts == ["1", "2"]
            return
        assert server.mcp1, listed.text  # mcp 2 serves the 2026-07-28 wire
        created = http.post(server.url + MCP_PATH, json=creating, headers=modern_headers(creating))
    assert (created.status_code, created.headers["content-type"], created.content) == (
        listed.status_code,
        listed.headers["content-type"],
        listed.content,
    )
    assert b"sessionId" not in created.content


def test_mcp_sessions_create_names_a_server_that_refuses_2026_and_legacy_opens_a_session_there(server: Server) -> None:
    """Issue 50: where the server refuses the 2026-07-28 request, ``create`` shows its answer, and suggests --legacy
    (which works) where that answer is a 2025-only server's (mcp 1.x: HTTP 400 "Bad Request: Missing session ID"
    or an unsupported protocol version). It follows no redirect: up to mcp 1.11 ``/mcp`` redirects to ``/mcp/``,
    which it names, and which works."""
    url = server.url + MCP_PATH
    code, said = _create(url, "--legacy")
    if code != 0 and "a redirect to" in said:
        assert f"the server answered HTTP 307: (no body)\n  a redirect to {url}/: create follows none" in said, said
        url += "/"
        code, said = _create(url, "--legacy")
    assert code == 0, said
    code, said = _create(url)
    if code != 0:  # mcp 1.9's stateful transport fails the request: HTTP 500, which says nothing of eras
        assert server.mcp1, said
        assert "the server answered HTTP " in said, said
        assert ("try again with --legacy" in said) == ("the server answered HTTP 400: {" in said), said


def _create(url: str, *args: str) -> tuple[int, str]:
    """``mcp-sessions create URL ARGS``: its exit status and what it said on standard error."""
    out, err = io.StringIO(), io.StringIO()
    return main(["create", url, *args], stdout=out, stderr=err, environ={}), err.getvalue()


@pytest.mark.anyio
async def test_a_server_that_refuses_a_2026_request_gives_its_own_answer_to_sessions_create() -> None:
    async def server(scope: Scope, receive: Receive, send: Send) -> None:
        await PlainTextResponse("the server's own answer", status_code=400)(scope, receive, send)

    middleware = MCPSessionMiddleware(server, secret=SECRET)  # asks the server first, which refuses
    body = modern_request("sessions/create")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=middleware), base_url="http://127.0.0.1") as http:
        response = await http.post(MCP_PATH, json=body, headers=modern_headers(body))
    assert (response.status_code, response.text) == (400, "the server's own answer")
