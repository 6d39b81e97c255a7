"""Every Python snippet of docs/getting-started.md, docs/application-code.md, docs/clients.md, docs/index.md and
README.md's Quickstart runs as written, served for real on 127.0.0.1, and does what its page says.

The curl walkthrough's answers (discover's capabilities, the token's claims, the echo, delete) are
tests/e2e/test_wire_modern.py's and test_attacks.py's cases; the SDK client's MCPError without a session, a
cell of tests/e2e/test_interop.py in both eras.
"""

from __future__ import annotations

import ast
import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from examples.quickstart import build_server
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

from _docs import exec_snippet, one_with, python_snippets
from _mcp import (
    REQUIRED_MESSAGE,
    SESSION_KEY,
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    LegacyClient,
    ModernClient,
    jwt_claims,
    modern_request,
    session_meta,
    tool_text,
)
from _otel import ExchangeRecorder
from conftest import SECRET, in_process, serve
from mcp_sessions import MCPSessionMiddleware, get_session

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("docs/getting-started.md", "docs/application-code.md", "docs/index.md", "README.md")
SNIPPETS = {page: python_snippets(page) for page in PAGES}
COUNTER = 'app = MCPSessionMiddleware.from_env(mcp.streamable_http_app(), require_session_tools={"count"})'
DOCS_URL = "http://127.0.0.1:8000/mcp"  # the URL the client snippets hard-code or are given, as the page runs them


def snippet_with(page: str, text: str) -> str:
    return one_with(SNIPPETS[page], text)


def run(page: str, snippet: str, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    return exec_snippet(snippet, page, namespace)


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SESSIONS_SECRET", SECRET)


@pytest.fixture
def no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MCP_SESSIONS_SECRET", "MCP_SESSIONS_KEYS", "MCP_SESSIONS_DEV"):
        monkeypatch.delenv(name, raising=False)


def counts(client: ModernClient | LegacyClient, tool: str, session: dict[str, Any]) -> str:
    return tool_text(client.call_tool(tool, session=session_meta(session))[1])


# -- the counter server: getting-started.md, index.md, README.md ------------------------------------------------


@pytest.mark.parametrize("page", ["docs/getting-started.md", "docs/index.md", "README.md"])
def test_the_counter_server_counts_per_session_and_requires_one(page: str, secret: None) -> None:
    app = run(page, snippet_with(page, COUNTER))["app"]
    with in_process(app) as http:
        client = ModernClient(http, "")
        _, refused = client.call_tool("count")
        first, second = client.create_session(), client.create_session()
        assert [counts(client, "count", s) for s in (first, first, second)] == ["1", "2", "1"]
    assert refused["error"] == {
        "code": SESSION_REQUIRED,
        "message": REQUIRED_MESSAGE,
        "data": {"create": "sessions/create"},
    }


@pytest.mark.parametrize("client_class", [ModernClient, LegacyClient], ids=["2026-07-28", "2025"])
def test_the_counter_placed_at_the_endpoint_by_hand_counts_per_session(
    client_class: type[ModernClient | LegacyClient], secret: None
) -> None:
    """getting-started.md's explicit form: ``server.py`` with its last line replaced, through the SDK's server."""
    page = "docs/getting-started.md"
    server = snippet_with(page, COUNTER).replace(COUNTER, "")
    app = run(page, snippet_with(page, "StreamableHTTPASGIApp("), run(page, server))["app"]
    assert not isinstance(app, MCPSessionMiddleware)  # the app the reader built, the middleware inside it
    with in_process(app) as http:
        client = client_class(http, "")
        if isinstance(client, LegacyClient):
            client.initialize()  # the 2025 handshake: the server's transport session first
        _, refused = client.call_tool("count")
        first, second = client.create_session(), client.create_session()
        assert [counts(client, "count", s) for s in (first, first, second)] == ["1", "2", "1"]
    assert refused["error"]["code"] == SESSION_REQUIRED


# -- the client snippets of getting-started.md, against its own server.py -----------------------------------------


@pytest.fixture
def counter_server(secret: None) -> Iterator[tuple[str, ExchangeRecorder]]:
    """getting-started.md's ``server.py``, served, with what reaches it recorded; yields its MCP URL."""
    page = "docs/getting-started.md"
    recorded = ExchangeRecorder(run(page, snippet_with(page, "# server.py"))["app"])
    with serve(recorded) as base:
        yield base + "/mcp", recorded


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_sdk_client_counts_twice_then_deletes_its_session(
    mode: str,
    counter_server: tuple[str, ExchangeRecorder],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``python client.py URL``; in legacy mode with ``Client(url)`` edited as the page says, textually."""
    page = "docs/getting-started.md"
    url, recorded = counter_server
    snippet = snippet_with(page, "class CreateSession(")
    if mode == "legacy":
        assert snippet.count("Client(url)") == 1
        snippet = snippet.replace("Client(url)", 'Client(url, mode="legacy")')
    monkeypatch.setattr(sys, "argv", ["client.py", url])
    capsys.readouterr()
    run(page, snippet)
    assert capsys.readouterr().out == "count: {'result': 1}\ncount: {'result': 2}\n"
    [token] = {call["params"]["_meta"][SESSION_KEY]["sessionId"] for _, call in recorded.find("tools/call")}
    assert any(body.get("method") == "sessions/delete" for body in recorded.seen)
    with httpx.Client(timeout=10) as http:  # the snippet deleted its session
        _, gone = ModernClient(http, url.removesuffix("/mcp")).call_tool("count", session=session_meta(token))
    assert gone["error"]["code"] == SESSION_NOT_FOUND


def test_the_session_transport_client_counts_with_a_session_it_created(
    counter_server: tuple[str, ExchangeRecorder],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The snippet hard-codes its URL: it runs with that URL replaced, textually, by the served one."""
    page = "docs/getting-started.md"
    url, recorded = counter_server
    snippet = snippet_with(page, "SessionTransport()")
    assert snippet.count(DOCS_URL) == 1
    capsys.readouterr()
    run(page, snippet.replace(DOCS_URL, url))
    assert capsys.readouterr().out == "{'result': 1}\n"
    methods = [body.get("method") for body in recorded.seen]
    assert "sessions/create" in methods and methods.index("sessions/create") < methods.index("tools/call")
    [(sent, call)] = recorded.find("tools/call")
    assert sent["mcp-session-id"] == call["params"]["_meta"][SESSION_KEY]["sessionId"]


# -- docs/application-code.md ---------------------------------------------------------------------------------------

APP_CODE = "docs/application-code.md"


def test_the_state_and_data_fragment(secret: None) -> None:
    """The fragment runs in a tool, with ``session`` (from ``get_session()``) and ``item``, the reader's own."""
    fragment = compile(
        snippet_with(APP_CODE, '"mode": "focus"'), APP_CODE, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    )
    mcp = MCPServer("fragment")

    @mcp.tool()
    async def shop(item: str) -> str:
        session = get_session()
        assert session is not None
        await eval(fragment, {"session": session, "item": item})
        return json.dumps([await session.data.get("count"), await session.data.get("cart")])

    @mcp.tool()
    async def mode() -> str:
        session = get_session()
        assert session is not None
        return str(session.state.get("mode"))

    with in_process(MCPSessionMiddleware.from_env(mcp.streamable_http_app())) as http:
        client = ModernClient(http, "")
        session = client.create_session()
        _, first = client.call_tool("shop", {"item": "apple"}, session=session_meta(session))
        state = first["result"]["_meta"][SESSION_KEY]["state"]  # the response echoes the new signed state
        _, second = client.call_tool("shop", {"item": "pear"}, session=session_meta(session, state=state))
        modes = [counts(client, "mode", session)]
        modes.append(tool_text(client.call_tool("mode", session=session_meta(session, state=state))[1]))
    assert [json.loads(tool_text(answer)) for answer in (first, second)] == [[1, ["apple"]], [2, ["apple", "pear"]]]
    assert modes == ["None", "focus"]  # the state travels with the client


def test_the_mcpserver_tools_on_both_wires(secret: None) -> None:
    app = run(APP_CODE, snippet_with(APP_CODE, "async def add_to_cart("))["app"]
    with in_process(app) as http:
        modern, legacy = ModernClient(http, ""), LegacyClient(http, "")
        _, refused = modern.call_tool("add_to_cart", {"item": "apple"})
        session = modern.create_session()
        carts = [
            modern.call_tool("add_to_cart", {"item": item}, session=session_meta(session))[1]["result"]
            for item in ("apple", "pear")
        ]
        who = [counts(modern, "who", session), tool_text(modern.call_tool("who")[1])]
        legacy.initialize()
        legacy_session = legacy.create_session()
        who.append(counts(legacy, "who", legacy_session))
    assert refused["error"]["code"] == SESSION_REQUIRED
    assert [cart["structuredContent"] for cart in carts] == [{"result": ["apple"]}, {"result": ["apple", "pear"]}]
    sid, legacy_sid = (jwt_claims(s["sessionId"])["sid"] for s in (session, legacy_session))
    assert who == [sid, "no session", legacy_sid]


def fastmcp_counts(app: Any) -> tuple[list[str], dict[str, Any]]:
    with in_process(app) as http:
        client = ModernClient(http, "")
        _, without = client.call_tool("count")
        first, second = client.create_session(), client.create_session()
        return [counts(client, "count", s) for s in (first, first, second)], without


def test_the_fastmcp_tool(secret: None) -> None:
    app = run(APP_CODE, snippet_with(APP_CODE, "from fastmcp import FastMCP"))["app"]
    numbers, refused = fastmcp_counts(app)
    assert numbers == ["1", "2", "1"]
    assert refused["error"]["code"] == SESSION_REQUIRED


def test_the_fastmcp_tool_with_the_middleware_given_to_fastmcp(secret: None) -> None:
    """The prose's other way, ``mcp.http_app(path="/mcp", middleware=[...])``, in place of the snippet's last line."""
    text = (ROOT / APP_CODE).read_text(encoding="utf-8")
    [inline] = re.findall(r"`(mcp\.http_app\(path=\"/mcp\", middleware=.*?\)\])\)`", text, re.S)
    snippet = snippet_with(APP_CODE, "from fastmcp import FastMCP")
    [last] = [line for line in snippet.splitlines() if line.startswith("app = ")]
    imports = "from starlette.middleware import Middleware\nfrom mcp_sessions import SessionsConfig\n"
    app = run(APP_CODE, imports + snippet.replace(last, f"app = {inline})"))["app"]
    numbers, _ = fastmcp_counts(app)
    assert numbers == ["1", "2", "1"]


def reader_mcp() -> dict[str, Any]:
    """The page's ``mcp: your MCPServer``: the quickstart's, whose ``count`` keeps ``session.data["count"]``."""
    return {"mcp": build_server()}


def mounted_app_reads_the_session(app: Any) -> None:
    """POST /mcp is the MCP endpoint, and GET /session reads the session the ``Mcp-Session-Id`` header names."""
    with in_process(app) as http:
        client = ModernClient(http, "")
        session, other = client.create_session(), client.create_session()
        assert [counts(client, "count", session) for _ in range(2)] == ["1", "2"]

        def read(token: str | None) -> Any:
            return http.get("/session", headers={} if token is None else {"Mcp-Session-Id": token}).json()

        shown = [read(session["sessionId"]), read(other["sessionId"]), read(None), read("not.a.session")]
        client.request("sessions/delete", session=session_meta(session))
        shown.append(read(session["sessionId"]))
    sids = [jwt_claims(s["sessionId"])["sid"] for s in (session, other)]
    assert shown == [
        {"session": sids[0], "count": 2},
        {"session": sids[1], "count": 0},
        *[{"session": None}] * 3,  # anonymous, not a session, deleted
    ]


def test_the_starlette_app(secret: None) -> None:
    mounted_app_reads_the_session(run(APP_CODE, snippet_with(APP_CODE, "Route("), reader_mcp())["app"])


def lifespan_from_the_starlette_snippet() -> str:
    """'The same lifespan as above': the Starlette snippet's own lines."""
    found: list[str] = re.findall(r"@asynccontextmanager\n.*?yield\n", snippet_with(APP_CODE, "Route("), re.S)
    [lifespan] = found
    return "from contextlib import asynccontextmanager\n\n" + lifespan


def test_the_fastapi_app(secret: None) -> None:
    namespace = run(APP_CODE, lifespan_from_the_starlette_snippet(), reader_mcp())
    app = run(APP_CODE, snippet_with(APP_CODE, "app = FastAPI("), namespace)["app"]
    mounted_app_reads_the_session(app)


@pytest.mark.parametrize("text", ["Route(", "app = FastAPI("])
def test_a_missing_secret_fails_where_the_config_is_built(text: str, no_secret: None) -> None:
    namespace = run(APP_CODE, lifespan_from_the_starlette_snippet(), reader_mcp())
    with pytest.raises(RuntimeError, match="MCP_SESSIONS_SECRET is not set"):
        run(APP_CODE, snippet_with(APP_CODE, text), namespace)


# The three pitfalls of "Four things to watch", each as the page describes it: an edit of the Starlette snippet.


def edited_starlette(edits: dict[str, str]) -> str:
    snippet = snippet_with(APP_CODE, "Route(")
    for old, new in edits.items():
        assert snippet.count(old) == 1, old
        snippet = snippet.replace(old, new)
    return snippet


def test_mounting_at_mcp_with_the_sdk_route_at_slash_redirects(secret: None) -> None:
    snippet = edited_starlette(
        {
            'Mount("/", app=mcp_app)': 'Mount("/mcp", app=mcp_app)',
            'streamable_http_path="/mcp"': 'streamable_http_path="/"',
        }
    )
    with in_process(run(APP_CODE, snippet, reader_mcp())["app"]) as http:
        response = ModernClient(http, "").post(modern_request("tools/list"))
    assert response.status_code == 307
    assert response.headers["location"] == str(http.base_url.join("/mcp/"))


class ExceptionLog:
    """Records what ``app`` raises (Starlette sends its 500 first, then re-raises to the server)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.raised: list[BaseException] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            self.raised.append(exc)
            raise


def test_without_the_lifespan_every_mcp_request_fails(secret: None) -> None:
    snippet = edited_starlette({"    lifespan=lifespan,\n": ""})
    app = ExceptionLog(run(APP_CODE, snippet, reader_mcp())["app"])
    with in_process(app, raise_server_exceptions=False) as http:
        response = ModernClient(http, "").post(modern_request("tools/list"))
    assert response.status_code == 500
    assert [str(exc) for exc in app.raised] == ["Task group is not initialized. Make sure to use run()."]


def test_a_lazy_from_env_starts_then_answers_500_everywhere(no_secret: None, tmp_path: Path) -> None:
    """``uvicorn server:app`` as the page runs it (lifespan "auto"), in a process of its own, on a socket it inherits.

    The reader's ``mcp`` is prepended to the edited snippet, which ``server.py`` then holds.
    """
    snippet = edited_starlette(
        {
            'config = SessionsConfig.from_env(path="/mcp")': "",
            "Middleware(MCPSessionMiddleware, config=config)": 'Middleware(MCPSessionMiddleware.from_env, path="/mcp")',
        }
    )
    reader = 'from mcp.server.mcpserver import MCPServer\n\nmcp = MCPServer("shop")\n'
    (tmp_path / "server.py").write_text(reader + snippet, encoding="utf-8")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        command = [sys.executable, "-m", "uvicorn", "server:app", "--fd", str(sock.fileno())]
        with subprocess.Popen(
            command, cwd=tmp_path, pass_fds=[sock.fileno()], stderr=subprocess.PIPE, text=True
        ) as server:
            try:
                with httpx.Client(timeout=10) as http:  # the listening socket queues them until uvicorn accepts
                    statuses = [http.get(base + "/session").status_code, http.post(base + "/mcp").status_code]
            finally:
                server.terminate()
                try:
                    _, log = server.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    server.kill()
                    _, log = server.communicate()
    assert "Application startup complete" in log
    assert statuses == [500, 500]
    assert "MCP_SESSIONS_SECRET is not set" in log


def test_the_per_conversation_example_counts_per_conversation(secret: None) -> None:
    """docs/clients.md's example, as printed: a counter per host conversation, none without one."""
    [code] = python_snippets("docs/clients.md")
    with in_process(run("docs/clients.md", code)["app"]) as http:
        client = ModernClient(http, "")
        counts = [
            tool_text(client.call_tool("count", meta={"vscode.conversationId": conversation})[1])
            for conversation in ("chat-1", "chat-1", "chat-2")
        ]
        _, refused = client.call_tool("count")
    assert counts == ["1", "2", "1"]
    assert refused["error"]["code"] == SESSION_REQUIRED
