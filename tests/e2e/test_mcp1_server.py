"""mcp 1.x servers behind the middleware: servers on PyPI that still pin ``mcp<2`` (issue 37).

mcp 1.x speaks the 2025 wire only. Each server runs as a subprocess in an mcp 1.x environment of
its own (``make test`` builds them; ``MCP1_VENVS`` names them): the newest mcp 1.x with fastmcp
3.x, and the oldest the docs name, mcp 1.26 with fastmcp 2.14. In each, ``_mcp1_server.py``
serves a ``count`` tool three ways: mcp 1.x's own ``FastMCP`` (stateful), fastmcp's (stateful)
and fastmcp's stateless one. On the 2025 wire its tool sees the session as an mcp 2 tool does; a
2026-07-28 ``sessions/create`` gets no session, but the server's own answer to a 2026-07-28
request.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from _mcp import MCP_PATH, LegacyClient, modern_headers, modern_request, session_meta, tool_text
from _redis import end_process, missing
from conftest import SECRET
from mcp_sessions import MCPSessionMiddleware

MAIN = Path(__file__).resolve().parents[2]
SERVER = Path(__file__).with_name("_mcp1_server.py")
START_TIMEOUT = 30.0
VENVS = os.environ.get("MCP1_VENVS", f"{MAIN}/.venv-mcp1-newest {MAIN}/.venv-mcp1-floor").split()
KINDS = ["sdk", "fastmcp", "fastmcp-stateless"]


@pytest.fixture(
    scope="module",
    params=[(venv, kind) for venv in VENVS for kind in KINDS],
    ids=lambda param: f"{Path(param[0]).name.removeprefix('.venv-')}-{param[1]}",
)
def mcp1(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """One mcp 1.x server's base URL and kind, killed when its tests end."""
    venv, kind = request.param
    python = Path(venv) / "bin" / "python"
    if not python.exists():
        missing(f"{python} is missing: `make {venv}/.installed` builds that mcp 1.x environment")
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: nobody reads stderr while the server runs
        process = subprocess.Popen([python, SERVER, SECRET, kind], cwd=MAIN, stdout=subprocess.PIPE, stderr=log)
        try:
            port = _listening_port(process, log)
            yield f"http://127.0.0.1:{port}", kind
        finally:
            end_process(process)
            assert process.stdout is not None
            process.stdout.close()


def _listening_port(process: subprocess.Popen[bytes], log: IO[bytes]) -> int:
    """The port the server printed, once it accepts connections (after its lifespan started)."""
    assert process.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT
    port: int | None = None
    while time.monotonic() < deadline and process.poll() is None:
        if port is None:
            if select.select([process.stdout], [], [], 0.1)[0] and (line := process.stdout.readline()):
                port = int(line)
            continue
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            time.sleep(0.02)
        else:
            return port
    log.seek(0)
    output = log.read().decode(errors="replace")[-4000:]
    raise RuntimeError(
        f"the mcp 1.x server (exit code {process.poll()}) did not listen within {START_TIMEOUT} s:\n{output}"
    )


def test_a_tool_counts_in_its_session_on_the_2025_wire(mcp1: tuple[str, str]) -> None:
    url, kind = mcp1
    with httpx.Client(timeout=10) as http:
        client = LegacyClient(http, url)
        client.initialize()
        stateful = kind != "fastmcp-stateless"
        assert (client.transport_session_id is not None) == stateful  # the server's own transport session
        session = session_meta(client.create_session())
        counts = [tool_text(client.call_tool("count", session=session)[1]) for _ in range(2)]
    assert counts == ["1", "2"]


def test_a_2026_sessions_create_gets_the_servers_own_answer(mcp1: tuple[str, str]) -> None:
    url = mcp1[0]
    listing, creating = modern_request("tools/list"), modern_request("sessions/create")
    with httpx.Client(timeout=10) as http:
        listed = http.post(url + MCP_PATH, json=listing, headers=modern_headers(listing))
        created = http.post(url + MCP_PATH, json=creating, headers=modern_headers(creating))
    assert listed.status_code >= 400, listed.text  # mcp 1.x serves no 2026-07-28 request
    assert (created.status_code, created.headers["content-type"], created.content) == (
        listed.status_code,
        listed.headers["content-type"],
        listed.content,
    )
    assert b"sessionId" not in created.content


@pytest.mark.anyio
async def test_a_server_that_refuses_a_2026_request_gives_its_own_answer_to_sessions_create() -> None:
    async def server(scope: Scope, receive: Receive, send: Send) -> None:
        await PlainTextResponse("the server's own answer", status_code=400)(scope, receive, send)

    middleware = MCPSessionMiddleware(server, secret=SECRET)  # asks the server first, which refuses
    body = modern_request("sessions/create")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=middleware), base_url="http://127.0.0.1") as http:
        response = await http.post(MCP_PATH, json=body, headers=modern_headers(body))
    assert (response.status_code, response.text) == (400, "the server's own answer")
