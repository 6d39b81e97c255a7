"""Every ```python block of README.md and docs/*.md runs, and does what its page says.

tests/_docs.py's RUN_BY names the test of each block: this module, for all but docs/handles.md's
(tests/e2e/test_handles.py), docs/observability.md's (tests/e2e/test_observability_docs.py) and the Phoenix export
of that page (tests/e2e/test_viewers.py). Each snippet is exec'd as printed and what it builds is used, served for
real on 127.0.0.1 or called in process (Starlette's TestClient); a fragment gets only the names its page says are
the reader's own (``old_secret``, ``MyBackend``, ``MyTokenVerifier``...). Where a snippet names a file or a server
of the reader's (a PEM under /run/secrets, a Redis at 10.0.0.5, a database under /tmp, an endpoint on port 8000),
the test swaps that one literal for a real one of its own and says so.

Elsewhere: the curl walkthrough's answers (discover's capabilities, the token's claims, the echo, delete) are
tests/e2e/test_wire_modern.py's and test_attacks.py's cases; the SDK client's MCPError without a session, a cell of
tests/e2e/test_interop.py in both eras. What the options and store URLs refuse is tests/unit/test_config.py's and
tests/stores/test_urls.py's tables; a store's sharing and durability, tests/stores/test_sqlite.py's.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import json
import re
import secrets
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from examples.quickstart import build_app, build_server
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from _backends import closing_store as closing
from _docs import AS_WRITTEN, ROOT, RUN_BY, exec_snippet, one_with, python_snippets, snippet_with
from _mcp import (
    MCP_PATH,
    REQUIRED_MESSAGE,
    SESSION_KEY,
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    LegacyClient,
    ModernClient,
    RecordingApp,
    answer,
    jwt_claims,
    jwt_header,
    modern_headers,
    modern_request,
    session_meta,
    tool_text,
)
from _otel import ExchangeRecorder
from _redis import RedisServer
from _users import HeaderUser
from _waits import WITHIN
from conftest import SECRET, in_process, serve
from e2e._listen import NOTE, client, graceful_end
from mcp_sessions import InvalidToken, KeySet, MCPSessionMiddleware, SessionKey, SessionsConfig, get_session, stores
from mcp_sessions.client import HeldSession, HttpxSessionTransport, SessionTransport
from mcp_sessions.profiles import PROFILES
from mcp_sessions.stores import MemoryStore, RedisStore, SQLiteStore, store_from_url

pytestmark = pytest.mark.anyio


def run(snippet: str, namespace: dict[str, Any] | None = None, page: str = "docs") -> dict[str, Any]:
    return exec_snippet(snippet, page, namespace)


def swapped(snippet: str, old: str, new: str) -> str:
    """``snippet`` with the one literal ``old`` replaced (it must be there, once)."""
    assert snippet.count(old) == 1, old
    return snippet.replace(old, new)


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SESSIONS_SECRET", SECRET)


@pytest.fixture
def no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MCP_SESSIONS_SECRET", "MCP_SESSIONS_KEYS", "MCP_SESSIONS_DEV"):
        monkeypatch.delenv(name, raising=False)


# -- every block has a runner; the blocks with nothing of the reader's in them run as written ---------------------

PAGES = sorted(
    str(page.relative_to(ROOT))
    for page in [ROOT / "README.md", *ROOT.glob("docs/*.md")]
    if python_snippets(str(page.relative_to(ROOT)))
)


@pytest.mark.parametrize("page", PAGES)
def test_every_block_of_the_page_has_one_runner(page: str) -> None:
    """Each block holds exactly one of its page's texts in RUN_BY, and each named module runs that page's blocks."""
    snippets = python_snippets(page)
    assert page in RUN_BY, f"{page}'s Python blocks are run by no test: add them to RUN_BY in tests/_docs.py"
    assert sorted(snippets) == sorted(one_with(snippets, text) for text in RUN_BY[page])
    for module in set(RUN_BY[page].values()) - {AS_WRITTEN}:
        assert Path(page).name in (ROOT / "tests" / module).read_text(encoding="utf-8"), (page, module)


AS_WRITTEN_BLOCKS = [
    (page, text) for page, texts in RUN_BY.items() for text, module in texts.items() if module == AS_WRITTEN
]


@pytest.mark.parametrize(("page", "text"), AS_WRITTEN_BLOCKS)
def test_the_block_runs_as_written(page: str, text: str, secret: None) -> None:
    namespace = run(snippet_with(page, text), page=page)
    assert callable(namespace["app"])  # each builds the ASGI app its page goes on to serve


# -- the counter server: getting-started.md, index.md, README.md, and application-code.md's fastmcp tool ---------

COUNTER = 'app = MCPSessionMiddleware.from_env(mcp.streamable_http_app(), require_session_tools={"count"})'
APP_CODE = "docs/application-code.md"
DOCS_URL = "http://127.0.0.1:8000/mcp"  # the URL the client snippets hard-code or are given, as the page runs them


def counts(client: ModernClient | LegacyClient, tool: str, session: dict[str, Any]) -> str:
    return tool_text(client.call_tool(tool, session=session_meta(session))[1])


def counter_by_hand() -> Any:
    """getting-started.md's explicit form: ``server.py`` with its last line replaced, through the SDK's server."""
    page = "docs/getting-started.md"
    namespace = run(snippet_with(page, COUNTER).replace(COUNTER, ""), page=page)
    app = run(snippet_with(page, "StreamableHTTPASGIApp("), namespace, page=page)["app"]
    assert not isinstance(app, MCPSessionMiddleware)  # the app the reader built, the middleware inside it
    return app


def fastmcp_counter(middleware_given_to_fastmcp: bool) -> Any:
    """application-code.md's fastmcp tool; or with the prose's other way, ``mcp.http_app(path="/mcp",
    middleware=[...])``, in place of the snippet's last line."""
    snippet = snippet_with(APP_CODE, "from fastmcp import FastMCP")
    if middleware_given_to_fastmcp:
        text = (ROOT / APP_CODE).read_text(encoding="utf-8")
        [inline] = re.findall(r"`(mcp\.http_app\(path=\"/mcp\", middleware=.*?\)\])\)`", text, re.S)
        [last] = [line for line in snippet.splitlines() if line.startswith("app = ")]
        imports = "from starlette.middleware import Middleware\nfrom mcp_sessions import SessionsConfig\n"
        snippet = imports + snippet.replace(last, f"app = {inline})")
    return run(snippet, page=APP_CODE)["app"]


COUNTERS = [
    *(pytest.param(page, ModernClient, True, id=page) for page in ["docs/getting-started.md", "docs/index.md"]),
    pytest.param("README.md", ModernClient, True, id="README.md"),
    pytest.param(counter_by_hand, ModernClient, True, id="by-hand-2026-07-28"),
    pytest.param(counter_by_hand, LegacyClient, True, id="by-hand-2025"),
    pytest.param(lambda: fastmcp_counter(False), ModernClient, True, id="fastmcp"),
    # The inline form configures no require_session_tools: nothing to refuse.
    pytest.param(lambda: fastmcp_counter(True), ModernClient, False, id="fastmcp-middleware-given-to-fastmcp"),
]


@pytest.mark.parametrize(("app", "client_class", "requires_one"), COUNTERS)
def test_the_counter_server_counts_per_session_and_requires_one(
    app: str | Callable[[], Any], client_class: type[ModernClient | LegacyClient], requires_one: bool, secret: None
) -> None:
    """A page's ``server.py`` as printed (``app`` names the page), or built as a page says another way."""
    with in_process(run(snippet_with(app, COUNTER), page=app)["app"] if isinstance(app, str) else app()) as http:
        client = client_class(http, "")
        if isinstance(client, LegacyClient):
            client.initialize()  # the 2025 handshake: the server's transport session first
        _, refused = client.call_tool("count")
        first, second = client.create_session(), client.create_session()
        assert [counts(client, "count", s) for s in (first, first, second)] == ["1", "2", "1"]
    if requires_one:
        assert refused["error"] == {
            "code": SESSION_REQUIRED,
            "message": REQUIRED_MESSAGE,
            "data": {"create": "sessions/create"},
        }


# -- the client snippets of getting-started.md, against its own server.py -----------------------------------------


@pytest.fixture
def counter_server(secret: None) -> Iterator[tuple[str, ExchangeRecorder]]:
    """getting-started.md's ``server.py``, served, with what reaches it recorded; yields its MCP URL."""
    page = "docs/getting-started.md"
    recorded = ExchangeRecorder(run(snippet_with(page, "# server.py"), page=page)["app"])
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
    run(snippet, page=page)
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
    """The snippet hard-codes its URL: it runs with that URL replaced, textually, by the served one. It ends its
    conversation as it ends (``delete_on_close``): one left behind each run held a gateway's process (issue 101)."""
    page = "docs/getting-started.md"
    url, recorded = counter_server
    snippet = snippet_with(page, "SessionTransport(delete_on_close=True)")
    assert snippet.count(DOCS_URL) == 1
    capsys.readouterr()
    run(snippet.replace(DOCS_URL, url), page=page)
    assert capsys.readouterr().out == "{'result': 1}\n"
    methods = [body.get("method") for body in recorded.seen]
    assert "sessions/create" in methods
    assert methods.index("sessions/create") < methods.index("tools/call") < methods.index("sessions/delete")
    [(sent, call)] = recorded.find("tools/call")
    assert sent["mcp-session-id"] == call["params"]["_meta"][SESSION_KEY]["sessionId"]


# -- docs/application-code.md ---------------------------------------------------------------------------------------


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
    app = run(snippet_with(APP_CODE, "async def add_to_cart("), page=APP_CODE)["app"]
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


def reader_mcp() -> dict[str, Any]:
    """The page's ``mcp: your MCPServer``: the quickstart's, whose ``count`` keeps ``session.data["count"]``."""
    return {"mcp": build_server()}


def lifespan_from_the_starlette_snippet() -> str:
    """'The same lifespan as above': the Starlette snippet's own lines."""
    found: list[str] = re.findall(r"@asynccontextmanager\n.*?yield\n", snippet_with(APP_CODE, "Route("), re.S)
    [lifespan] = found
    return "from contextlib import asynccontextmanager\n\n" + lifespan


@pytest.mark.parametrize("text", ["Route(", "app = FastAPI("], ids=["starlette", "fastapi"])
def test_the_app_serves_mcp_and_a_route_that_reads_the_session(text: str, secret: None) -> None:
    """POST /mcp is the MCP endpoint, and GET /session reads the session the ``Mcp-Session-Id`` header names."""
    # FastAPI's "same lifespan as above"; the Starlette snippet defines its own, in place of it.
    namespace = run(lifespan_from_the_starlette_snippet(), reader_mcp(), page=APP_CODE)
    with in_process(run(snippet_with(APP_CODE, text), namespace, page=APP_CODE)["app"]) as http:
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


@pytest.mark.parametrize("text", ["Route(", "app = FastAPI("])
def test_a_missing_secret_fails_where_the_config_is_built(text: str, no_secret: None) -> None:
    namespace = run(lifespan_from_the_starlette_snippet(), reader_mcp(), page=APP_CODE)
    with pytest.raises(RuntimeError, match="MCP_SESSIONS_SECRET is not set"):
        run(snippet_with(APP_CODE, text), namespace, page=APP_CODE)


# The three pitfalls of "Four things to watch", each as the page describes it: an edit of the Starlette snippet.


def edited_starlette(edits: dict[str, str]) -> str:
    snippet = snippet_with(APP_CODE, "Route(")
    for old, new in edits.items():
        snippet = swapped(snippet, old, new)
    return snippet


def test_mounting_at_mcp_with_the_sdk_route_at_slash_redirects(secret: None) -> None:
    snippet = edited_starlette(
        {
            'Mount("/", app=mcp_app)': 'Mount("/mcp", app=mcp_app)',
            'streamable_http_path="/mcp"': 'streamable_http_path="/"',
        }
    )
    with in_process(run(snippet, reader_mcp(), page=APP_CODE)["app"]) as http:
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
    app = ExceptionLog(run(snippet, reader_mcp(), page=APP_CODE)["app"])
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
                with httpx.Client(timeout=WITHIN) as http:  # the socket queues them until uvicorn, started, accepts
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
    with in_process(run(code, page="docs/clients.md")["app"]) as http:
        client = ModernClient(http, "")
        counts = [
            tool_text(client.call_tool("count", meta={"vscode.conversationId": conversation})[1])
            for conversation in ("chat-1", "chat-1", "chat-2")
        ]
        _, refused = client.call_tool("count")
    assert counts == ["1", "2", "1"]
    assert refused["error"]["code"] == SESSION_REQUIRED


# -- configuration.md, deployment.md, security.md: their blocks, and what the reader's own names stand for ---------

OLD_SECRET = "old-secret-for-the-rotation-snippet-0123456789"
NEW_SECRET = "new-secret-for-the-rotation-snippet-0123456789"
HOST = "mcp.example.com"  # the host the snippets name in their transport security settings
CONFIGURATION = python_snippets("docs/configuration.md")
DEPLOYMENT = python_snippets("docs/deployment.md")
SECURITY = python_snippets("docs/security.md")
OPTIONS = one_with(CONFIGURATION, "adopt_transport_sessions=False,")
FROM_ENV_CONFIG = one_with(CONFIGURATION, "SessionsConfig.from_env(")
GUARD = one_with(CONFIGURATION, "MCPSessionMiddleware.from_env(dispatch)")
ROTATION = one_with(CONFIGURATION, "SessionKey.from_secret(old_secret)")
ES256 = one_with(CONFIGURATION, "SessionKey.from_private_key(")
SQLITE = one_with(CONFIGURATION, "SQLiteStore(")
REGISTER = one_with(CONFIGURATION, "register_store(")
REDIS = one_with(CONFIGURATION, "RedisStore(")
STORE_URLS = one_with(DEPLOYMENT, "store_from_url(")
SERVER_PY = one_with(DEPLOYMENT, 'MCPServer("counter")')
LISTEN = one_with(DEPLOYMENT, "SessionSubscriptionBus.from_url(")
AUTH_OUTSIDE = one_with(SECURITY, "Middleware(AuthenticationMiddleware")
SDK_AUTH = one_with(SECURITY, "token_verifier=verifier")
BY_HAND = one_with(DEPLOYMENT, "StreamableHTTPASGIApp(")


def mcp_app_as_above() -> ASGIApp:
    """The ``mcp_app`` that configuration.md's first snippet defines (a fresh one: an app serves one lifespan)."""
    # The snippet's own MCPSessionMiddleware is left out: it would place its session work inside mcp_app.
    app: ASGIApp = run(OPTIONS.split("\napp = MCPSessionMiddleware(")[0])["mcp_app"]
    return app


def error_code(message: dict[str, Any]) -> int:
    code: int = message["error"]["code"]
    return code


# -- configuration.md ---------------------------------------------------------------------------------


def test_the_options_block_shows_the_defaults_and_its_app_answers() -> None:
    """It passes every option, each with its default."""
    namespace = run(OPTIONS, page="docs/configuration.md")
    app = namespace["app"]
    assert isinstance(app, MCPSessionMiddleware)
    # "Every option is keyword-only", and each value the block shows is that option's default.
    parameters = inspect.signature(SessionsConfig).parameters
    assert {p.kind for p in parameters.values()} == {inspect.Parameter.KEYWORD_ONLY}
    [call] = [
        n
        for n in ast.walk(ast.parse(OPTIONS))
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "MCPSessionMiddleware"
    ]
    shown = {str(kw.arg): eval(compile(ast.Expression(kw.value), "options", "eval"), namespace) for kw in call.keywords}
    # secret=; keys=, its alternative (exactly one of the two), is in the comment beside it. Every option is a
    # keyword of SessionsConfig (tests/unit/test_docs_complete.py: its typed options are those keywords).
    assert set(shown) == set(parameters) - {"keys"}
    assert "# or keys=KeySet(" in OPTIONS
    del shown["secret"]  # the reader's own (the app above was built, so it is long enough)
    assert shown == {name: parameters[name].default for name in shown}
    with in_process(app) as http:
        client = ModernClient(http, "")
        session = client.create_session()
        response, listed = client.request("tools/list", session=session_meta(session))
        assert response.status_code == 200, listed
        assert listed["result"]["tools"] == [], listed


async def knows_no_method(request: Request) -> JSONResponse:
    """A server that knows no method: "method not found" to everything."""
    message = await request.json()
    return JSONResponse({"jsonrpc": "2.0", "id": message.get("id"), "error": {"code": -32601, "message": "no"}})


def test_the_checked_config_object_answers_at_its_path_and_raises_where_built() -> None:
    app = run(FROM_ENV_CONFIG, page="docs/configuration.md")["app"]
    assert isinstance(app, Starlette)
    with in_process(app) as http:
        refused = ModernClient(http, "").post(modern_request("sessions/create"))
        assert refused.status_code == 404  # no server at /mcp: the app's own answer, which the middleware asks for
        app.router.routes.append(Route("/mcp", knows_no_method, methods=["POST"]))  # a server, of no methods
        session = ModernClient(http, "").create_session()  # the middleware answers it once the server takes it
        assert jwt_claims(session["sessionId"])["iss"] == "mcp-sessions"
        elsewhere = ModernClient(http, "", path="/elsewhere").post({"jsonrpc": "2.0", "id": 1, "method": "x"})
        assert elsewhere.status_code == 404  # path="/mcp": other paths pass through, unread
    # "raises here if misconfigured": at from_env, before any app exists.
    with pytest.raises(RuntimeError, match=re.escape("secrets.token_urlsafe(32)")):
        run(swapped(FROM_ENV_CONFIG, '{"MCP_SESSIONS_DEV": "1"}', "{}"))
    with pytest.raises(ValueError, match="MCP_SESSIONS_TTL"):
        run(swapped(FROM_ENV_CONFIG, '{"MCP_SESSIONS_DEV": "1"}', '{"MCP_SESSIONS_DEV": "1", "MCP_SESSIONS_TTL": "0"}'))


def test_behind_a_dispatcher_the_server_refuses_sessions_create_as_tools_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SESSIONS_SECRET", SECRET)  # from_env reads it, as the page's table says
    app = run(GUARD, page="docs/configuration.md")["app"]
    with in_process(app) as http:
        client = ModernClient(http, "")
        response, created = client.request("sessions/create", host=HOST, origin="https://app.example.com")
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        session = session_meta(created["result"]["session"])
        response, listed = client.request("tools/list", session=session, host=HOST)
        assert response.status_code == 200, listed
        assert response.headers["content-type"] == "application/json", listed
        # json_response=True: both accept a client that takes JSON only (an SSE server answers 406).
        for body in (modern_request("sessions/create"), modern_request("tools/list", session=session)):
            json_only = client.post(body, {**modern_headers(body, host=HOST), "Accept": "application/json"})
            assert json_only.status_code == 200, json_only.text
            assert "result" in json_only.json(), json_only.text
        # Refused by the middleware (sessions/create) exactly as by the server (tools/list).
        for body in (modern_request("sessions/create"), modern_request("tools/list", session=session)):
            wrong_host = client.post(body, modern_headers(body, host="127.0.0.1"))
            assert (wrong_host.status_code, wrong_host.text) == (421, "Invalid Host header"), body
            foreign = client.post(body, modern_headers(body, host=HOST, origin="https://evil.example"))
            assert (foreign.status_code, foreign.text) == (403, "Invalid Origin header"), body


def test_rotation_step_two_verifies_the_old_key_and_signs_with_the_new() -> None:
    namespace = run(ROTATION, {"old_secret": OLD_SECRET, "new_secret": NEW_SECRET, "mcp_app": mcp_app_as_above()})
    assert namespace["app"].keys is namespace["keys"]
    # A session minted in step 1, when only the old key signed.
    step_one = KeySet([SessionKey.from_secret(OLD_SECRET)], issuer="https://mcp.example.com", audience=HOST)
    old_token, _ = step_one.mint_session_token(ttl=600)
    with in_process(namespace["app"]) as http:
        client = ModernClient(http, "")
        response, listed = client.request("tools/list", session=session_meta(old_token))
        assert response.status_code == 200, listed
        assert "result" in listed, listed  # the old key still verifies
        new_token = client.create_session()["sessionId"]
    assert jwt_header(new_token)["kid"] == SessionKey.from_secret(NEW_SECRET).kid  # the new key signs
    assert {k: jwt_claims(new_token)[k] for k in ("iss", "aud")} == {"iss": "https://mcp.example.com", "aud": HOST}
    # Step 3, KeySet([new]): the new key's sessions live on, the old key's end.
    step_three = KeySet([SessionKey.from_secret(NEW_SECRET)], issuer="https://mcp.example.com", audience=HOST)
    assert step_three.verify_session_token(new_token).session_id == jwt_claims(new_token)["sid"]
    with pytest.raises(InvalidToken):
        step_three.verify_session_token(old_token)


@pytest.mark.parametrize("kind", ["P-256", "Ed25519"])
def test_an_asymmetric_key_signs_and_its_public_key_alone_verifies(kind: str, tmp_path: Path) -> None:
    private = ec.generate_private_key(ec.SECP256R1()) if kind == "P-256" else ed25519.Ed25519PrivateKey.generate()
    pem = tmp_path / "mcp-sessions.pem"  # the reader's /run/secrets file
    pem.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    keys = run(swapped(ES256, '"/run/secrets/mcp-sessions-es256.pem"', repr(str(pem))))["keys"]
    assert keys.signer is not None
    assert keys.signer.algorithm == ("ES256" if kind == "P-256" else "EdDSA")
    with in_process(MCPSessionMiddleware(mcp_app_as_above(), keys=keys)) as http:
        token = ModernClient(http, "").create_session()["sessionId"]
    assert jwt_header(token)["kid"] == "es-2026-11"
    assert jwt_claims(token)["aud"] == HOST
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    gateway = KeySet([SessionKey.from_public_key(public_pem, kid="es-2026-11")], audience=HOST)
    assert gateway.verify_session_token(token).session_id == jwt_claims(token)["sid"]  # verifies ...
    with pytest.raises(ValueError, match="verify-only"):
        MCPSessionMiddleware(mcp_app_as_above(), keys=gateway)  # ... and cannot mint


def test_the_sqlite_store_is_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # "sessions.db" is relative to the working directory
    store = run(SQLITE, page="docs/configuration.md")["store"]
    assert isinstance(store, SQLiteStore)
    assert (tmp_path / "sessions.db").is_file()  # created if missing
    asyncio.run(store.aclose())


def test_a_registered_scheme_names_your_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stores, "_factories", dict(stores._factories))  # the registration ends with the test
    store = run(REGISTER, page="docs/configuration.md")["store"]
    assert isinstance(store, MemoryStore)
    with pytest.raises(ValueError, match="my-store://"):  # listed among the known schemes now
        store_from_url("nobody-registered-this://x")


def test_the_redis_store_as_printed_and_on_a_real_redis(redis: RedisServer) -> None:
    rotation = {"old_secret": OLD_SECRET, "new_secret": NEW_SECRET, "mcp_app": mcp_app_as_above()}
    names = {"mcp_app": mcp_app_as_above(), "keys": run(ROTATION, rotation)["keys"]}  # "mcp_app and keys as above"
    printed = run(REDIS, names, page="docs/configuration.md")  # connects on first use: builds without a Redis
    assert isinstance(printed["app"], MCPSessionMiddleware)
    assert printed["app"].store is printed["store"]
    assert isinstance(printed["store"], RedisStore)
    # The same snippet with the reader's Redis URL swapped for a real redis-server.
    names["mcp_app"] = mcp_app_as_above()
    real = run(swapped(REDIS, '"redis://:password@10.0.0.5:6379/0"', repr(redis.url)), names)
    with in_process(closing(real["app"], real["store"])) as http:
        client = ModernClient(http, "")
        session = session_meta(client.create_session())
        sid = jwt_claims(session["sessionId"])["sid"]
        assert "result" in client.request("tools/list", session=session)[1]
        assert client.request("sessions/delete", session=session)[1]["result"] == {"resultType": "complete"}
        assert redis.command("GET", f"mcp-sessions:{{{sid}}}:s") == b"$1\r\nr\r\n"  # the revocation is in Redis
        assert error_code(client.request("tools/list", session=session)[1]) == SESSION_NOT_FOUND


# -- deployment.md ------------------------------------------------------------------------------------


def test_store_urls_build_stores(tmp_path: Path) -> None:
    # The reader's /tmp directory becomes the test's own, still an absolute sqlite:/// URL.
    namespace = run(swapped(STORE_URLS, '"sqlite:///tmp/sessions.db"', repr(f"sqlite://{tmp_path}/sessions.db")))
    store, memory = namespace["store"], namespace["memory"]
    assert isinstance(store, SQLiteStore)
    assert store.path == tmp_path / "sessions.db"
    assert store.path.is_file()
    assert isinstance(memory, MemoryStore)
    assert memory.max_sessions == 50000
    asyncio.run(store.aclose())


def test_the_walkthrough_server_counts_across_replicas(
    redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Step 3's settings: a key file, the Redis URL, an idle timeout.
    (tmp_path / "keys").write_text("k2026a:" + secrets.token_urlsafe(32) + "\n")
    monkeypatch.setenv("MCP_SESSIONS_KEYS", f"@{tmp_path / 'keys'}")
    monkeypatch.setenv("MCP_SESSIONS_REDIS_URL", redis.url)
    monkeypatch.setenv("MCP_SESSIONS_IDLE_TTL", "1800")
    replicas = [run(SERVER_PY, page="docs/deployment.md")["app"] for _ in range(2)]
    with contextlib.ExitStack() as stack:
        https = [stack.enter_context(in_process(app)) for app in replicas]
        a, b = (ModernClient(http, "") for http in https)
        refused = a.post(modern_request("sessions/create"))
        assert (refused.status_code, refused.text) == (421, "Invalid Host header")  # only the host it names
        created = a.create_session(host=HOST)
        claims = jwt_claims(created["sessionId"])
        expires = datetime.fromisoformat(created["expiresAt"].replace("Z", "+00:00")).timestamp()
        assert expires == claims["iat"] + 1800 < claims["exp"]  # MCP_SESSIONS_IDLE_TTL=1800 reached the app
        session = session_meta(created)
        counts = [tool_text(client.call_tool("count", session=session, host=HOST)[1]) for client in (a, b, a)]
        assert counts == ["1", "2", "3"]  # whichever replica answers, the counter is the one in Redis
        assert redis.command("HGET", f"mcp-sessions:{{{claims['sid']}}}:d", "count") == b"$1\r\n3\r\n"
        # A 2025-era client, stateless: no initialize on this replica, the session travels in _meta.
        legacy = LegacyClient(https[1], "")
        assert tool_text(legacy.call_tool("count", session=session, host=HOST)[1]) == "4"
        assert error_code(b.call_tool("count", host=HOST)[1]) == SESSION_REQUIRED  # require_session_tools
        assert "result" in b.request("sessions/delete", session=session, host=HOST)[1]
        assert error_code(a.call_tool("count", session=session, host=HOST)[1]) == SESSION_NOT_FOUND


async def test_the_listen_example_scopes_events_to_the_session(monkeypatch: pytest.MonkeyPatch, secret: None) -> None:
    """In one process (``memory://``, as the snippet falls back to without ``MCP_SESSIONS_REDIS_URL``): ``edit_note``
    reaches the session's stream and no other, ``add_tool`` every stream, and a delete ends the session's stream
    gracefully. The two-replica version is tests/e2e/test_listen_replicas.py."""
    monkeypatch.delenv("MCP_SESSIONS_REDIS_URL", raising=False)
    app = run(LISTEN, page="docs/deployment.md")["app"]
    with serve(app) as base:
        async with client() as c:
            mine, other = await c.create(base), await c.create(base)
            streams = [await c.listen(base, "mine", mine), await c.listen(base, "other", other)]
            streams.append(await c.listen(base, "global"))
            assert await c.tool(base, "edit_note", {"name": "plan", "text": "v2"}, mine) == "saved"
            assert await c.tool(base, "add_tool", {}) == "announced"
            for stream in streams:
                await stream.wait("notifications/tools/list_changed")
            assert streams[0].events == [f"notifications/resources/updated {NOTE}", "notifications/tools/list_changed"]
            assert streams[1].events == streams[2].events == ["notifications/tools/list_changed"]
            await c.request(base, "sessions/delete", session=mine)
            async with asyncio.timeout(WITHIN):
                await streams[0].ended.wait()
            graceful_end(streams[0])
            assert not streams[1].ended.is_set()
            assert not streams[2].ended.is_set()


# -- security.md --------------------------------------------------------------------------------------


def readers_app() -> dict[str, Any]:
    """The names security.md's Starlette snippet leaves to the reader, with a tool that reports the session; its
    ``MyBackend``, whoever the X-User header names."""
    server = MCPServer("app")

    @server.tool()
    async def whoami() -> str:
        session = get_session()
        return "none" if session is None else session.id

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    return {"mcp_app": server.streamable_http_app(), "lifespan": lifespan, "MyBackend": HeaderUser, "secret": SECRET}


def test_app_authentication_binds_sessions_in_either_order() -> None:
    lines = AUTH_OUTSIDE.splitlines(keepends=True)
    [authentication] = [line for line in lines if "Middleware(AuthenticationMiddleware," in line]
    [sessions] = [line for line in lines if "Middleware(MCPSessionMiddleware," in line]
    reversed_order = swapped(AUTH_OUTSIDE, authentication + sessions, sessions + authentication)
    for snippet in (AUTH_OUTSIDE, reversed_order):
        app = run(snippet, readers_app(), page="docs/security.md")["app"]
        with in_process(app) as http:
            client = ModernClient(http, "")
            session = session_meta(client.create_session(x_user="alice"))
            assert "pbh" in jwt_claims(session["sessionId"])
            sid = jwt_claims(session["sessionId"])["sid"]
            assert tool_text(client.call_tool("whoami", session=session, x_user="alice")[1]) == sid
            assert error_code(client.call_tool("whoami", session=session, x_user="bob")[1]) == SESSION_NOT_FOUND
            assert error_code(client.call_tool("whoami", session=session)[1]) == SESSION_NOT_FOUND
            # "an unbound session is never usable once signed in"
            unbound = session_meta(client.create_session())
            assert error_code(client.call_tool("whoami", session=unbound, x_user="alice")[1]) == SESSION_NOT_FOUND


class MyTokenVerifier(TokenVerifier):
    """The reader's verifier: two bearer tokens, two users, issued for the snippet's resource."""

    async def verify_token(self, token: str) -> AccessToken | None:
        users = {"alice-token": "alice", "bob-token": "bob"}
        if token not in users:
            return None
        return AccessToken(token=token, client_id="c", scopes=[], subject=users[token], resource=f"https://{HOST}/mcp")


@pytest.mark.parametrize(
    ("snippet", "page"), [(SDK_AUTH, "docs/security.md"), (BY_HAND, "docs/deployment.md")], ids=["found", "by-hand"]
)
def test_the_sdk_bearer_auth_binds_sessions_with_no_hook(snippet: str, page: str, secret: None) -> None:
    """security.md's server, and deployment.md's built by hand from the SDK's public classes: the same answers."""
    app = run(snippet, {"MyTokenVerifier": MyTokenVerifier}, page=page)["app"]
    with in_process(app) as http:
        client = ModernClient(http, "")
        session = session_meta(client.create_session(authorization="Bearer alice-token"))
        assert "pbh" in jwt_claims(session["sessionId"])
        response, listed = client.request("tools/list", session=session, authorization="Bearer alice-token")
        assert response.status_code == 200, listed
        assert "result" in listed, listed
        response, refused_for_bob = client.request("tools/list", session=session, authorization="Bearer bob-token")
        assert (response.status_code, error_code(refused_for_bob)) == (200, SESSION_NOT_FOUND)
        # Without a bearer, sessions/create gets the SDK's 401 as tools/list does: test_inside_server, both forms.


# -- client.md, against the real quickstart over real HTTP ---------------------------------------------------------
#
# The snippets are written for an async context (top-level ``await`` and ``async with``, as in
# ``python -m asyncio``). Each is compiled unchanged with ``ast.PyCF_ALLOW_TOP_LEVEL_AWAIT`` and awaited in
# a namespace that supplies the names the page defines elsewhere (``url``, ``request``, ``headers``, the
# imports of the first snippet). One rewrite of the syntax tree keeps what a statement such as
# ``await client.call_tool("count", {})  # 1`` returns, by its line, so that the value can be checked
# against the comment on that line. Every other change is made where it is named: the SDK snippet also
# runs with its ``# or mode="legacy"``, the fastmcp snippet's ``...`` body becomes the test's calls, the
# explicit API's literal endpoint becomes the served one, and the host snippet's ``save`` stub is
# replaced, after it runs, by one that writes to a dict.

CLIENT = "docs/client.md"
# What the first snippet imports, for the fragments after it that use those names without importing them.
PAGE_IMPORTS = {"httpx2": httpx2, "Client": Client, "streamable_http_client": streamable_http_client}


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


async def run_awaited(snippet: str, **names: Any) -> tuple[dict[str, Any], dict[int, Any]]:
    """Run ``snippet`` as ``python -m asyncio`` would; its namespace, and each awaited statement's value by line."""
    shown: dict[int, Any] = {}

    def keep(line: int, value: Any) -> None:
        shown[line] = value

    tree = ast.fix_missing_locations(_KeepAwaited().visit(ast.parse(snippet)))
    code = compile(tree, CLIENT, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
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


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, RecordingApp]]:
    """The quickstart, recording each POST body that reaches it."""
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
    assert methods.count("tools/call") == tools, seen
    assert len(tokens) == 1, seen
    assert None not in tokens, seen
    [token] = tokens
    return str(token)


async def is_gone(url: str, token: str) -> bool:
    async with httpx.AsyncClient(timeout=10) as http:
        body = modern_request("tools/call", {"name": "count", "arguments": {}}, session=session_meta(token))
        refused = answer(await http.post(url, json=body, headers=modern_headers(body)))
    return bool(refused.get("error", {}).get("code") == SESSION_NOT_FOUND)


async def test_the_opening_snippet_counts_1_then_2_in_one_session(url: str, wire: RecordingApp) -> None:
    snippet = snippet_with(CLIENT, "# the only change")
    namespace, shown = await run_awaited(snippet, url=url)
    await namespace["http"].aclose()  # the snippet leaves its client open

    claimed = {n: int(m[1]) for n, line in enumerate(snippet.splitlines(), 1) if (m := re.search(r"#\s*(\d+):", line))}
    assert len(claimed) == 2
    assert {n: counted(result) for n, result in shown.items()} == claimed
    one_session_created_first(wire, tools=2)  # "creates a session first, then stamps it"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_each_client_sdk_prints_the_session_and_deletes_it_on_close(
    url: str, wire: RecordingApp, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    snippet = snippet_with(CLIENT, "SessionTransport(delete_on_close=True)")
    assert 'mode="auto"' in snippet
    assert '# or mode="legacy"' in snippet
    namespace, _ = await run_awaited(
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
    snippet = snippet_with(CLIENT, "httpx_client_factory=")
    body = "\n    ...\n"  # "..." stands for the conversation: the test's calls go there
    assert snippet.count(body) == 1
    seen: list[Any] = []

    async def conversation(client: Any) -> None:
        seen.extend([counted(await client.call_tool("count", {})) for _ in range(3)])
        await client.call_tool("set_mode", {"mode": "terse"})
        seen.append(counted(await client.call_tool("get_mode", {})))

    fragment = snippet.replace(body, "\n    await conversation(client)\n")
    namespace, _ = await run_awaited(fragment, url=url, conversation=conversation)

    assert seen == [1, 2, 3, "terse"]
    token = one_session_created_first(wire, tools=5)
    session = namespace["session"]
    assert isinstance(session, HeldSession)
    assert session.token == token
    assert session.state is not None  # the handle passed in holds the session


async def test_httpx_snippet_gets_a_session_on_plain_httpx(url: str, wire: RecordingApp) -> None:
    snippet = snippet_with(CLIENT, "HttpxSessionTransport()")
    request = modern_request("tools/call", {"name": "count", "arguments": {}})
    _, shown = await run_awaited(
        snippet,
        httpx=httpx,
        HttpxSessionTransport=HttpxSessionTransport,
        url=url,
        request=request,
        headers=modern_headers(request),
    )

    [response] = shown.values()
    assert isinstance(response, httpx.Response)
    assert response.status_code == 200
    message = answer(response)
    assert tool_text(message) == "1"  # the quickstart's count refuses a request without a session (-32044)
    token = one_session_created_first(wire, tools=1)
    assert message["result"]["_meta"][SESSION_KEY]["sessionId"] == token


async def test_the_explicit_api_creates_uses_and_deletes(
    url: str, wire: RecordingApp, capsys: pytest.CaptureFixture[str]
) -> None:
    snippet = snippet_with(CLIENT, "await shim.create(")
    literal = '"http://127.0.0.1:8000/mcp"'  # the page's endpoint; the test's server has its own port
    assert snippet.count(literal) == 1
    namespace, shown = await run_awaited(snippet.replace(literal, repr(url)), url=url, **PAGE_IMPORTS)

    session = namespace["session"]
    created = [body for body in wire.seen if body["method"] == "sessions/create"]
    assert [body["params"]["label"] for body in created] == ["trip to Lisbon"]  # and no lazy create
    token = one_session_created_first(wire, tools=1)
    sid, expires = capsys.readouterr().out.rstrip("\n").split(" ", 1)  # "inspect"
    assert sid == jwt_claims(token)["sid"]
    assert datetime.fromisoformat(expires) > datetime.now(UTC)  # an aware datetime, ahead
    assert counted(shown[line_with(snippet, "c.call_tool(")]) == 1  # "use: stamped with the session"
    delete_line = snippet.splitlines()[line_with(snippet, "shim.delete()") - 1]
    assert "# delete: True" in delete_line
    assert shown[line_with(snippet, "shim.delete()")] is True
    assert session is namespace["shim"].session
    assert session.token is None  # deleted and forgotten
    assert await is_gone(url, token)


async def test_the_host_snippet_keeps_a_conversation_across_restarts(url: str, wire: RecordingApp) -> None:
    snippet = snippet_with(CLIENT, "def save(")
    conversation = "trip to Lisbon"
    saved_files: dict[str, Any] = {}

    def save(conversation: str, session: HeldSession) -> None:  # the page's `save`, with the "..." written
        saved_files[conversation] = json.loads(json.dumps(session.to_dict()))

    async def host_run(saved: Any) -> list[int]:
        """One host process: the snippet builds the transport, then the conversation counts twice."""
        namespace, _ = await run_awaited(
            snippet,
            HeldSession=HeldSession,
            SessionTransport=SessionTransport,
            saved=saved,
            conversation=conversation,
        )
        namespace["save"] = save  # `on_change` looks `save` up when it runs
        async with (
            httpx2.AsyncClient(transport=namespace["shim"]) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            return [counted(await client.call_tool("count", {})) for _ in range(2)]

    assert await host_run(None) == [1, 2]
    first = saved_files[conversation]
    assert first["label"] == conversation
    assert first["sessionId"]

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


# -- profiles.md, and the server files the docs give readers to copy ---------------------------------------------


def test_the_profiles_snippet_builds_the_middleware_with_every_wire() -> None:
    app = run(snippet_with("docs/profiles.md", "MCPServer("), page="docs/profiles.md")["app"]
    assert isinstance(app, MCPSessionMiddleware)
    assert [p.name for p in app.config.profiles] == list(PROFILES)


def test_the_profiles_json_examples_are_json_and_every_wire_has_a_section() -> None:
    text = (ROOT / "docs" / "profiles.md").read_text()
    for block in re.findall(r"```json\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            json.loads(line)
    for name in PROFILES:
        assert f"## `{name}`" in text


SERVER_FILES = {
    "readme_server.py": ("README.md", "# server.py"),
    "deployment_server.py": ("docs/deployment.md", 'MCPServer("counter")'),
    "configuration_guard.py": ("docs/configuration.md", "MCPSessionMiddleware.from_env(dispatch)"),
}


def test_the_server_files_in_the_docs_type_check(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    """They type-check as written (mypy --strict)."""
    for name, (page, text) in SERVER_FILES.items():
        (tmp_path / name).write_text(snippet_with(page, text), encoding="utf-8")
    # mypy's incremental cache, kept between runs in pytest's: it re-checks what changed (the pages' files, the
    # package), and reads the SDK's and Starlette's types from the cache instead of analysing them again.
    cache = pytestconfig.cache.mkdir("docs-mypy") if pytestconfig.cache is not None else tmp_path / ".mypy_cache"
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), *sorted(SERVER_FILES)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
