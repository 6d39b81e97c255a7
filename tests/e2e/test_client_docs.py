"""Every Python snippet of docs/client.md runs against the real quickstart over real HTTP, and does what the page says.

The snippets are written for an async context (top-level ``await`` and ``async with``, as in
``python -m asyncio``). Each is compiled unchanged with ``ast.PyCF_ALLOW_TOP_LEVEL_AWAIT`` and awaited in
a namespace that supplies the names the page defines elsewhere (``url``, ``request``, ``headers``, the
imports of the first snippet). One rewrite of the syntax tree keeps what a statement such as
``await client.call_tool("count", {})  # 1`` returns, by its line, so that the value can be checked
against the comment on that line. Every other change is made where it is named: the SDK snippet also
runs with its ``# or mode="legacy"``, the fastmcp snippet's ``...`` body becomes the test's calls, the
explicit API's literal endpoint becomes the served one, and the host snippet's ``save`` stub is
replaced, after it runs, by one that writes to a dict.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from examples.quickstart import build_app
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from _docs import one_with, python_snippets
from _mcp import (
    MCP_PATH,
    SESSION_KEY,
    SESSION_NOT_FOUND,
    RecordingApp,
    answer,
    jwt_claims,
    modern_headers,
    modern_request,
    session_meta,
    tool_text,
)
from conftest import SECRET, serve
from mcp_sessions.client import HeldSession, HttpxSessionTransport, SessionTransport

pytestmark = pytest.mark.anyio

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"
SNIPPETS = python_snippets("docs/client.md")
# What the first snippet imports, for the fragments after it that use those names without importing them.
PAGE_IMPORTS = {"httpx2": httpx2, "Client": Client, "streamable_http_client": streamable_http_client}


def snippet_with(text: str) -> str:
    return one_with(SNIPPETS, text)


def line_with(snippet: str, text: str) -> int:
    """The 1-based line number of the one line of ``snippet`` that contains ``text``."""
    [number] = [n for n, line in enumerate(snippet.splitlines(), 1) if text in line]
    return number


class _KeepAwaited(ast.NodeTransformer):
    """``await x`` as a statement becomes ``__shown__(line, await x)``: its value is kept, nothing else changes."""

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if not isinstance(node.value, ast.Await):
            return node
        call = ast.Call(ast.Name("__shown__", ast.Load()), [ast.Constant(node.lineno), node.value], [])
        return ast.copy_location(ast.Expr(ast.copy_location(call, node.value)), node)


async def run(snippet: str, **names: Any) -> tuple[dict[str, Any], dict[int, Any]]:
    """Run ``snippet`` as ``python -m asyncio`` would; its namespace, and each awaited statement's value by line."""
    shown: dict[int, Any] = {}

    def keep(line: int, value: Any) -> None:
        shown[line] = value

    tree = ast.fix_missing_locations(_KeepAwaited().visit(ast.parse(snippet)))
    code = compile(tree, str(DOC), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, Any] = {"__name__": "docs_snippet", "__shown__": keep, **names}
    pending = eval(code, namespace)  # a coroutine when the snippet awaits at top level
    if inspect.iscoroutine(pending):
        await pending
    return namespace, shown


def counted(result: Any) -> Any:
    return result.structured_content["result"]


def handle_shape(comment: str) -> re.Pattern[str]:
    """The ``HeldSession(...)`` of a comment as a pattern: a quoted value containing ``…`` stands for any value."""
    [shown] = re.findall(r"HeldSession\([^)]*\)", comment)
    return re.compile(re.escape(re.sub(r"'[^']*…'", "\0", shown)).replace("\0", "'[^']+'"))


# -- the server: the quickstart, recording each POST body that reaches it ------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, RecordingApp]]:
    recorder = RecordingApp(build_app(environ={"MCP_SESSIONS_SECRET": SECRET}))
    with serve(recorder) as base:
        yield base + MCP_PATH, recorder


@pytest.fixture
def url(server: tuple[str, RecordingApp]) -> str:
    server[1].clear()
    return server[0]


@pytest.fixture
def wire(server: tuple[str, RecordingApp]) -> RecordingApp:
    return server[1]


def calls(wire: RecordingApp) -> list[tuple[str, Any]]:
    """Each JSON-RPC request seen by the server: its method and the session it carried (``None`` if none)."""
    seen = []
    for body in wire.seen:
        params = body.get("params") if isinstance(body, dict) and "method" in body else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        session = meta.get(SESSION_KEY) if isinstance(meta, dict) else None
        seen.append((body["method"], session["sessionId"] if isinstance(session, dict) else None))
    return [(method, token) for method, token in seen if not method.startswith("notifications/")]


def one_session_created_first(wire: RecordingApp, tools: int) -> str:
    """Exactly one sessions/create, before any tool call; every tool call stamped with one token: that token."""
    seen = calls(wire)
    methods = [method for method, _ in seen]
    assert methods.count("sessions/create") == 1, methods
    assert methods.index("sessions/create") < methods.index("tools/call"), methods
    tokens = {token for method, token in seen if method == "tools/call"}
    assert methods.count("tools/call") == tools and len(tokens) == 1 and None not in tokens, seen
    [token] = tokens
    return str(token)


async def is_gone(url: str, token: str) -> bool:
    async with httpx.AsyncClient(timeout=10) as http:
        body = modern_request("tools/call", {"name": "count", "arguments": {}}, session=session_meta(token))
        refused = answer(await http.post(url, json=body, headers=modern_headers(body)))
    return bool(refused.get("error", {}).get("code") == SESSION_NOT_FOUND)


@asynccontextmanager
async def sdk_client(url: str, transport: httpx2.AsyncBaseTransport) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(transport=transport) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


# -- the tests ---------------------------------------------------------------------------------------------


async def test_the_opening_snippet_counts_1_then_2_in_one_session(url: str, wire: RecordingApp) -> None:
    snippet = snippet_with("# the only change")
    namespace, shown = await run(snippet, url=url)
    await namespace["http"].aclose()  # the snippet leaves its client open

    claimed = {n: int(m[1]) for n, line in enumerate(snippet.splitlines(), 1) if (m := re.search(r"#\s*(\d+):", line))}
    assert len(claimed) == 2
    assert {n: counted(result) for n, result in shown.items()} == claimed
    one_session_created_first(wire, tools=2)  # "creates a session first, then stamps it"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_each_client_sdk_prints_the_session_and_deletes_it_on_close(
    url: str, wire: RecordingApp, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    snippet = snippet_with("SessionTransport(delete_on_close=True)")
    assert 'mode="auto"' in snippet and '# or mode="legacy"' in snippet
    namespace, _ = await run(
        snippet.replace('mode="auto"', f'mode="{mode}"', 1), url=url, SessionTransport=SessionTransport, **PAGE_IMPORTS
    )

    printed = capsys.readouterr().out.splitlines()
    comments = [line.split("#", 1)[1] for line in snippet.splitlines() if line.lstrip().startswith("print(")]
    assert len(printed) == len(comments) == 2, printed
    for line, comment in zip(printed, comments, strict=True):
        assert handle_shape(comment).fullmatch(line), (line, comment)
    token = one_session_created_first(wire, tools=1)
    assert f"id={jwt_claims(token)['sid']!r}, " in printed[0]  # inside the block: the session in use
    assert namespace["shim"].session.token is None
    assert [method for method, _ in calls(wire)][-1] == "sessions/delete"
    assert await is_gone(url, token)  # "deleted on close"


async def test_fastmcp_client_shares_one_session_across_its_connections(url: str, wire: RecordingApp) -> None:
    snippet = snippet_with("httpx_client_factory=")
    body = "\n    ...\n"  # "..." stands for the conversation: the test's calls go there
    assert snippet.count(body) == 1
    seen: list[Any] = []

    async def conversation(client: Any) -> None:
        seen.extend([counted(await client.call_tool("count", {})) for _ in range(3)])
        await client.call_tool("set_mode", {"mode": "terse"})
        seen.append(counted(await client.call_tool("get_mode", {})))

    fragment = snippet.replace(body, "\n    await conversation(client)\n")
    namespace, _ = await run(fragment, url=url, conversation=conversation)

    assert seen == [1, 2, 3, "terse"]
    token = one_session_created_first(wire, tools=5)
    session = namespace["session"]
    assert isinstance(session, HeldSession)
    assert session.token == token and session.state is not None  # the handle passed in holds the session


async def test_httpx_snippet_gets_a_session_on_plain_httpx(url: str, wire: RecordingApp) -> None:
    snippet = snippet_with("HttpxSessionTransport()")
    request = modern_request("tools/call", {"name": "count", "arguments": {}})
    _, shown = await run(
        snippet,
        httpx=httpx,
        HttpxSessionTransport=HttpxSessionTransport,
        url=url,
        request=request,
        headers=modern_headers(request),
    )

    [response] = shown.values()
    assert isinstance(response, httpx.Response) and response.status_code == 200
    message = answer(response)
    assert tool_text(message) == "1"  # the quickstart's count refuses a request without a session (-32044)
    token = one_session_created_first(wire, tools=1)
    assert message["result"]["_meta"][SESSION_KEY]["sessionId"] == token


async def test_the_explicit_api_creates_uses_and_deletes(
    url: str, wire: RecordingApp, capsys: pytest.CaptureFixture[str]
) -> None:
    snippet = snippet_with("await shim.create(")
    literal = '"http://127.0.0.1:8000/mcp"'  # the page's endpoint; the test's server has its own port
    assert snippet.count(literal) == 1
    namespace, shown = await run(snippet.replace(literal, repr(url)), url=url, **PAGE_IMPORTS)

    session = namespace["session"]
    created = [body for body in wire.seen if body["method"] == "sessions/create"]
    assert [body["params"]["label"] for body in created] == ["trip to Lisbon"]  # and no lazy create
    token = one_session_created_first(wire, tools=1)
    sid, expires = capsys.readouterr().out.rstrip("\n").split(" ", 1)  # "inspect"
    assert sid == jwt_claims(token)["sid"]
    assert datetime.fromisoformat(expires) > datetime.now(UTC)  # an aware datetime, ahead
    assert counted(shown[line_with(snippet, "c.call_tool(")]) == 1  # "use: stamped with the session"
    delete_line = snippet.splitlines()[line_with(snippet, "shim.delete()") - 1]
    assert "# delete: True" in delete_line and shown[line_with(snippet, "shim.delete()")] is True
    assert session is namespace["shim"].session and session.token is None  # deleted and forgotten
    assert await is_gone(url, token)


async def test_the_host_snippet_keeps_a_conversation_across_restarts(url: str, wire: RecordingApp) -> None:
    snippet = snippet_with("def save(")
    conversation = "trip to Lisbon"
    saved_files: dict[str, Any] = {}

    def save(conversation: str, session: HeldSession) -> None:  # the page's `save`, with the "..." written
        saved_files[conversation] = json.loads(json.dumps(session.to_dict()))

    async def host_run(saved: Any) -> list[int]:
        """One host process: the snippet builds the transport, then the conversation counts twice."""
        namespace, _ = await run(
            snippet,
            HeldSession=HeldSession,
            SessionTransport=SessionTransport,
            saved=saved,
            conversation=conversation,
        )
        namespace["save"] = save  # `on_change` looks `save` up when it runs
        async with sdk_client(url, namespace["shim"]) as client:
            return [counted(await client.call_tool("count", {})) for _ in range(2)]

    assert await host_run(None) == [1, 2]
    first = saved_files[conversation]
    assert first["label"] == conversation and first["sessionId"]

    assert await host_run(first) == [3, 4]  # after a restart, the saved session goes on
    assert saved_files[conversation]["sessionId"] == first["sessionId"]

    gone = SessionTransport(session=HeldSession(first["sessionId"]))
    assert await gone.delete(url) is True
    await gone.aclose()
    assert await host_run(saved_files[conversation]) == [1, 2]  # recreate=True: replaced inside the same call
    assert saved_files[conversation]["sessionId"] != first["sessionId"]  # and the file followed
    assert [token for method, token in calls(wire) if method == "tools/call"][-2:] == [
        saved_files[conversation]["sessionId"]
    ] * 2
