"""A server's tools by policy (issue 101, item 4; docs/gateway.md, "Tools by policy"): ``--tool-allow`` and
``--tool-deny`` by a claim of each caller's verified token, in front of a real upstream (``--upstream``) and of real
stdio processes (``--stdio``), through the ``mcp`` SDK's client of either era and raw 2025 requests: each caller lists
her tools alone, a call of another is ``-32602`` naming the policy and never reaches the server (which records every
call it runs), a batch does not get around it, and a bad policy is a one-line usage error."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import jwt
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from _mcp import legacy_request, messages, modern_headers, modern_request
from _redis import free_port, listens
from _waits import WITHIN, until
from conftest import serve
from e2e._gateway import MAIN, SECRET, Recorder, everything_server, legacy_initialize, main_run, readable_directory
from e2e._issuer import ISSUER, KEY, jwks
from e2e._stdio import ENVIRON, SERVER, stdio_gateway, text_of
from mcp_sessions import SessionsConfig, gateway_app
from mcp_sessions._gateway.auth._tools import ToolPolicy
from mcp_sessions._gateway.auth._users import GatewayAuth

pytestmark = pytest.mark.anyio

AUDIENCE = "http://gateway.example/mcp"
TOOLS = ["read_file", "write_file", "search", "drop_table"]
# Engineers call every tool, readers read and search; contractors write nothing, and no one drops a table.
ALLOW = ["groups=eng:*", "roles=reader:read_*,search"]
DENY = ["groups=contractors:write_*", "*:drop_*"]
CALLERS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "alice": ({"groups": ["eng", "contractors"]}, ["read_file", "search"]),  # deny over allow, a list claim
    "bob": ({"roles": "reader"}, ["read_file", "search"]),  # a string claim
    "carol": ({"groups": ["eng"]}, ["read_file", "write_file", "search"]),
    "dave": ({}, []),  # allow rules exist, and none names him
}


def token(user: str, **claims: Any) -> str:
    now = int(time.time())
    payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": user, "exp": now + 300, **claims}
    return jwt.encode(payload, KEY, algorithm="RS256", headers={"kid": "k1"})


def bearer(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(user, **CALLERS[user][0])}"}


def recording_server(called: list[str]) -> MCPServer:
    """An upstream whose every tool records its name as it runs."""
    server = MCPServer("team-tools")
    for name in TOOLS:

        def run(name: str = name) -> str:
            called.append(name)
            return name

        server.add_tool(run, name=name)
    return server


class Upstream:
    """The gateway's MCP URL in front of the recording server, the calls the server ran and what it received."""

    def __init__(self, url: str, called: list[str], recorder: Recorder) -> None:
        self.url, self.called, self.recorder = url, called, recorder


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    called: list[str] = []
    policy = ToolPolicy.from_specs(ALLOW, DENY)
    recorder = Recorder(recording_server(called).streamable_http_app())
    with jwks() as keys, serve(recorder) as base:
        auth = GatewayAuth(jwks_url=keys, issuer=ISSUER, audience=AUDIENCE)
        app = gateway_app([base + "/mcp"], config=SessionsConfig(secret=SECRET), auth=auth, tools=policy)
        with serve(app) as front:
            yield Upstream(front + "/mcp", called, recorder)


@asynccontextmanager
async def connected(url: str, user: str, mode: str = "auto") -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=bearer(user), timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


@pytest.mark.parametrize("mode", ["auto", "legacy"], ids=["2026-07-28", "2025"])
async def test_each_caller_lists_and_calls_her_tools_alone(upstream: Upstream, mode: str) -> None:
    upstream.called.clear()
    for user, (_, hers) in CALLERS.items():
        async with connected(upstream.url, user, mode) as client:
            assert [tool.name for tool in (await client.list_tools()).tools] == hers, user
            for tool in TOOLS:
                if tool in hers:
                    assert text_of(await client.call_tool(tool, {})) == tool
                    continue
                with pytest.raises(MCPError) as refused:
                    await client.call_tool(tool, {})
                assert refused.value.code == -32602, (user, tool)
                assert "the gateway's tool policy" in refused.value.message
    assert upstream.called == [tool for _, hers in CALLERS.values() for tool in hers]  # no refused call ran


def test_a_2025_batch_and_an_event_stream_get_around_nothing(upstream: Upstream) -> None:
    upstream.called.clear()
    with httpx.Client(timeout=30) as http:
        headers = legacy_initialize(http, upstream.url, bearer("alice"))
        listed = http.post(upstream.url, json=legacy_request("tools/list", id=7), headers=headers)
        batch = [legacy_request("tools/call", {"name": "read_file"}, id=1)]
        batch.append(legacy_request("tools/call", {"name": "write_file"}, id=2))
        refused = http.post(upstream.url, json=batch, headers=headers)
    assert listed.headers["content-type"].startswith("text/event-stream")  # the SDK's 2025 answer: a stream
    [answer] = [message for message in messages(listed) if message.get("id") == 7]
    assert [tool["name"] for tool in answer["result"]["tools"]] == ["read_file", "search"]
    assert [(answer["id"], answer["error"]["code"]) for answer in refused.json()] == [(1, -32600), (2, -32602)]
    assert upstream.called == []


MARK = b"unread-7f3a"  # in every body below: the upstream received none
NOT_UTF8 = b'"' + MARK + b'\xff"'  # a Node or Go server reads the byte as U+FFFD
DEEP = b"[" * 3000 + b'"' + MARK + b'"' + b"]" * 3000
# bob (roles=reader) may call read_file and search: drop_table is no one's.
CALL = {"method": "tools/call", "params": {"name": "drop_table", "arguments": {"note": "@"}}}
LIST = {"method": "tools/list", "params": {"cursor": "@"}}
TRICKS: dict[str, tuple[list[dict[str, Any]], bytes]] = {
    "call-not-utf8": ([CALL], NOT_UTF8),
    "call-nested-3000": ([CALL], DEEP),
    "list-not-utf8": ([LIST], NOT_UTF8),
    "list-nested-3000": ([LIST], DEEP),
    "batch-not-utf8": ([{"method": "tools/list"}, CALL], NOT_UTF8),
}


@pytest.mark.parametrize("era", ["2026-07-28", "2025"])
@pytest.mark.parametrize("trick", TRICKS)
def test_a_body_the_policy_cannot_read_is_refused_and_never_forwarded(upstream: Upstream, trick: str, era: str) -> None:
    """A byte that is not UTF-8 (a Node or Go server reads it as U+FFFD, and ran the call), or a nesting past the
    reader's limit (Python's decoder ran out of recursion), in a call of a tool not bob's or a tools/list: 400,
    -32700, and the upstream never receives it."""
    shape, note = TRICKS[trick]
    made = modern_request if era == "2026-07-28" else legacy_request
    elements = [made(element["method"], element.get("params"), id=n) for n, element in enumerate(shape)]
    content = json.dumps(elements if len(elements) > 1 else elements[0]).encode().replace(b'"@"', note)
    with httpx.Client(timeout=30) as http:
        if era == "2026-07-28":
            headers = modern_headers(elements[0]) | bearer("bob")
        else:  # its era in its transport session
            headers = legacy_initialize(http, upstream.url, bearer("bob"))
        answer = http.post(upstream.url, content=content, headers={**headers, "Content-Type": "application/json"})
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, -32700), answer.text
    assert not [seen.body for seen in upstream.recorder.seen if MARK in seen.body]
    assert "drop_table" not in upstream.called


@pytest.mark.parametrize("method", ["tools/call", "tools/list"])
def test_a_node_upstream_never_reads_bob_s_unreadable_body(method: str) -> None:
    """The finding as met: server-everything (node, the TypeScript SDK) reads a byte that is not UTF-8 as U+FFFD. In
    bob's call of its echo, a tool not his, it ran the call ("Echo: ..."); in his tools/list, it listed echo."""
    params = {"name": "echo", "arguments": {"message": "@"}} if method == "tools/call" else {"cursor": "@"}
    content = json.dumps(legacy_request(method, params, id=1)).encode().replace(b'"@"', NOT_UTF8)
    with everything_server() as url, jwks() as keys:
        auth = GatewayAuth(jwks_url=keys, issuer=ISSUER, audience=AUDIENCE)
        tools = ToolPolicy.from_specs(ALLOW, DENY)
        app = gateway_app([url], config=SessionsConfig(secret=SECRET), auth=auth, tools=tools)
        with serve(app) as front, httpx.Client(timeout=30) as http:
            headers = legacy_initialize(http, front + "/mcp", bearer("bob"))
            answer = http.post(front + "/mcp", content=content, headers=headers)
            listed = http.post(front + "/mcp", json=legacy_request("tools/list", id=2), headers=headers)
    assert answer.status_code == 400, answer.text
    # A stream that opens with an event of empty data (server-everything's first) is read on: his tools, none here.
    assert [message["result"]["tools"] for message in messages(listed) if message.get("id") == 2] == [[]]
    assert answer.json()["error"]["code"] == -32700
    assert b"echo" not in answer.content.lower()


def stranger(answer: bytes, content_type: str) -> Starlette:
    """An upstream that answers every POST with ``answer``, as ``content_type``, whatever it was asked."""

    async def answered(request: Request) -> Response:
        return Response(answer, media_type=content_type)

    return Starlette(routes=[Route("/mcp", answered, methods=["POST"])])


LISTED = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "read_file"}, {"name": "drop_table", "note": "@"}]}}
UNREAD_LISTS = {
    "not-utf8": json.dumps(LISTED).encode().replace(b'"@"', NOT_UTF8),
    "nested-3000": json.dumps(LISTED).encode().replace(b'"@"', DEEP),
}


@pytest.mark.parametrize("era", ["2026-07-28", "2025"])
@pytest.mark.parametrize("content_type", ["application/json", "text/event-stream"])
@pytest.mark.parametrize("unread", UNREAD_LISTS)
def test_a_tools_list_answer_the_policy_cannot_read_is_never_passed(unread: str, content_type: str, era: str) -> None:
    """An upstream's answer to bob's tools/list that holds a byte that is not UTF-8, or a nesting past the reader's
    limit: a JSON answer is a 502 (-32603), a stream ends with that error; neither lists drop_table."""
    answer = UNREAD_LISTS[unread]
    if content_type == "text/event-stream":
        answer = b"event: message\r\ndata: " + answer + b"\r\n\r\n"
    policy = ToolPolicy.from_specs(ALLOW, DENY)
    request = (modern_request if era == "2026-07-28" else legacy_request)("tools/list", id=1)
    headers = modern_headers(request) if era == "2026-07-28" else {"MCP-Protocol-Version": "2025-11-25"}
    headers |= {"Accept": "application/json, text/event-stream"} | bearer("bob")
    with jwks() as keys, serve(stranger(answer, content_type)) as base:
        auth = GatewayAuth(jwks_url=keys, issuer=ISSUER, audience=AUDIENCE)
        app = gateway_app([base + "/mcp"], config=SessionsConfig(secret=SECRET), auth=auth, tools=policy)
        with serve(app) as front, httpx.Client(timeout=30) as http:
            listed = http.post(front + "/mcp", json=request, headers=headers)
    assert b"drop_table" not in listed.content
    if content_type == "application/json":
        assert listed.status_code == 502, listed.text
    [error] = messages(listed)
    assert error["error"]["code"] == -32603, listed.text


async def test_a_stdio_server_s_process_never_gets_a_refused_call(tmp_path: Path) -> None:
    """The tests' stdio server, whose ``keep`` writes its line to a file: alice's is refused and writes nothing."""
    policy = ToolPolicy.from_specs(["groups=eng:*"], ["groups=contractors:keep,spawn,crash"])
    environ = {**ENVIRON, "STDIO_TEST_FILES": str(tmp_path)}
    with jwks() as keys:
        auth = GatewayAuth(jwks_url=keys, issuer=ISSUER, audience=AUDIENCE)
        with stdio_gateway(SERVER, environ=environ, auth=auth, tools=policy) as url:
            async with connected(url, "alice") as alice:
                listed = [tool.name for tool in (await alice.list_tools()).tools]
                with pytest.raises(MCPError) as refused:
                    await alice.call_tool("keep", {"line": "alice's"})
                assert text_of(await alice.call_tool("count", {})) == "1"
            kept_by = os.listdir(tmp_path)
            async with connected(url, "carol") as carol:
                assert text_of(await carol.call_tool("keep", {"line": "carol's"})) == "carol's\n"
    assert "keep" not in listed and {"whoami", "count"} <= set(listed), listed
    assert refused.value.code == -32602
    assert kept_by == []  # alice's process never ran it
    assert len(os.listdir(tmp_path)) == 1  # carol's, which her call wrote


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--tool-allow", "groups=eng:*"], "name callers by claims of the tokens the gateway verifies"),
        (["--tool-deny", "*:x", "--auth-principal-header", "X-User"], "give --auth-jwks"),
        (["--tool-allow", "groups:read_*", *("--auth-jwks", "http://127.0.0.1:9/k", "--auth-issuer", ISSUER)], "CLAIM"),
        (["--tool-deny", "*:a b", *("--auth-jwks", "http://127.0.0.1:9/k", "--auth-issuer", ISSUER)], "no space"),
    ],
)
def test_a_bad_policy_is_refused_at_startup_in_one_line(flags: list[str], said: str) -> None:
    audience = ["--auth-audience", AUDIENCE] if "--auth-jwks" in flags else []
    environ = {"MCP_SESSIONS_SECRET": SECRET}
    done = main_run("gateway", "--upstream", "http://127.0.0.1:9/mcp", *flags, *audience, environ=environ)
    assert done.returncode == 2, done
    assert said in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_the_docs_recipe_runs_as_written() -> None:
    """docs/gateway.md's "Tools by policy", its blocks as written but for their ports (8000, 9000), the pip line and,
    as root, ``--accept-root-processes``, in a directory its processes see as the host does (not under /tmp): its
    output is the page's."""
    section = (MAIN / "docs/gateway.md").read_text(encoding="utf-8").split("## Tools by policy")[1].split("\n## ")[0]
    start, use = re.findall(r"```sh\n(.*?)```", section, re.S)
    [shown] = re.findall(r"```text\n(.*?)```", section, re.S)
    port, jwks_port = free_port(), free_port()
    ports = {"8000": str(port), "9000": str(jwks_port)}
    start, use = (re.sub("8000|9000", lambda m: ports[m[0]], block) for block in (start, use))
    start = "\n".join(line for line in start.splitlines() if not line.startswith("pip install")) + "\nwait\n"
    if os.geteuid() == 0:  # a user's recipe: as root, its processes too, said so (else the gateway refuses to start)
        start = start.replace("mcp-sessions gateway --stdio", "mcp-sessions gateway --accept-root-processes --stdio")
    environ = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    with readable_directory("mcp-sessions-tools-") as directory:
        started = subprocess.Popen(["bash", "-c", start], cwd=directory, env=environ, start_new_session=True)
        try:

            def listening() -> bool:
                assert started.poll() is None, "the recipe's gateway exited"
                return (directory / "carol.jwt").exists() and listens(port, started.pid)

            until(listening, "the recipe's gateway listening")
            done = subprocess.run(
                ["bash", "-c", use], cwd=directory, env=environ, capture_output=True, text=True, timeout=120
            )
        finally:
            os.killpg(started.pid, signal.SIGTERM)  # the stand-in and the gateway, which stops its processes
            started.wait(timeout=WITHIN)
    assert done.stdout == shown, done.stderr[-2000:]
