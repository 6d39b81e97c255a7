"""The interop matrix: real MCP clients x real MCP servers, over real HTTP, and docs/interop.md made from it.

Every cell runs a scenario against a server on uvicorn (127.0.0.1) and records
what it observed, step by step. ``test_cell`` fails for a cell that does not
behave as its row and column promise, and ``test_docs_interop_md_is_generated_from_this_run``
fails when the committed ``docs/interop.md`` differs from what this run
renders; ``python scripts/update_docs.py`` regenerates it.

The whole matrix runs once per test run (cells concurrently, servers shared),
so selecting one cell still runs all of them: the document always describes a
complete run. Rendering is deterministic: fixed order, no timings, no dates.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import pytest
from examples import fastapi_app, fastmcp_app, starlette_app
from examples.quickstart import SESSION_TOOLS
from examples.quickstart import build_app as build_quickstart
from fastmcp import Client as FastMCPClient
from fastmcp import Context as FastMCPContext
from fastmcp.client.transports import StreamableHttpTransport
from mcp import Client as SDKClient
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import McpHttpClientFactory
from mcp.shared.exceptions import MCPError

from _docs import assert_generated
from _hosts import HOSTS
from _mcp import MCP_PATH, SESSION_KEY, SESSION_NOT_FOUND, SESSION_REQUIRED, sdk_meta
from _waits import WITHIN
from conftest import SECRET, serve
from mcp_sessions import MCPSessionMiddleware, get_session
from mcp_sessions.client import HeldSession, SessionTransport

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}
# The opt-ins for clients that never call sessions/create: adopted transport sessions, per-conversation data.
OPTED_IN = {**ENVIRON, "MCP_SESSIONS_ADOPT_TRANSPORT": "1", "MCP_SESSIONS_CONVERSATION_DATA": "anonymous"}
DOC = Path(__file__).resolve().parents[2] / "docs" / "interop.md"
# After it, the page is written by hand (the conformance pack against other people's servers, which
# test_conformance_thirdparty.py checks): the matrix is compared, and regenerated, above it only.
BY_HAND = "\n<!-- Written by hand from here on, checked by conformance/tests/test_conformance_thirdparty.py. -->\n"
CELL_TIMEOUT = 60.0  # a hang guard for one cell, never an expectation about speed
CELLS_AT_ONCE = 12  # the cells run at once: the servers and clients share this process (and its GIL)
COUNTDOWN = 2
ALL_PROGRESS = [(float(i + 1), float(COUNTDOWN), f"{COUNTDOWN - i - 1} to go") for i in range(COUNTDOWN)]


# -- the servers --------------------------------------------------------------------------------------------


def fastmcp_server(*, environ: Mapping[str, str]) -> MCPSessionMiddleware:
    """examples/fastmcp_app.py's server, plus the quickstart's other scenario tools written for fastmcp."""
    server = fastmcp_app.build_server()

    @server.tool
    async def set_mode(mode: str) -> str:
        session = get_session()
        assert session is not None
        session.state = {**session.state, "mode": mode}
        return mode

    @server.tool
    async def get_mode() -> str:
        session = get_session()
        assert session is not None
        return str(session.state.get("mode", "unset"))

    @server.tool
    async def countdown(n: int, ctx: FastMCPContext) -> str:
        for i in range(n):
            await ctx.report_progress(i + 1, n, f"{n - i - 1} to go")
            await anyio.sleep(0.2)
        return "done"

    return MCPSessionMiddleware.from_env(
        server.http_app(path=MCP_PATH), environ=environ, require_session_tools=SESSION_TOOLS
    )


@dataclass(frozen=True)
class ServerKind:
    key: str
    title: str
    build: Callable[..., Any]  # called with environ=
    streams: bool  # whether it can stream progress notifications (SSE responses)
    stateful: bool = True  # whether its 2025-era path mints a transport session


SERVERS = [
    *(
        ServerKind(
            f"qs-{state}-{responses.lower()}",
            f"quickstart `MCPServer`, {state}, {responses} responses",
            partial(build_quickstart, json_response=responses == "JSON", stateless=state == "stateless"),
            streams=responses == "SSE",
            stateful=state == "stateful",
        )
        for state in ("stateful", "stateless")
        for responses in ("JSON", "SSE")
    ),
    ServerKind(
        "fastmcp", "fastmcp `FastMCP` (`examples/fastmcp_app.py`), SSE responses (its default)", fastmcp_server, True
    ),
    ServerKind("fastapi", "FastAPI app (`examples/fastapi_app.py`), SSE responses", fastapi_app.build_app, True),
    ServerKind(
        "starlette", "Starlette app (`examples/starlette_app.py`), SSE responses", starlette_app.build_app, True
    ),
]


# -- the clients ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientKind:
    key: str
    title: str
    library: str  # "sdk" or "fastmcp"
    mode: str  # "auto" (2026-07-28, discover) or "legacy" (initialize handshake)
    shim: bool


LIBRARIES = {"sdk": "`mcp` SDK `Client`", "fastmcp": "fastmcp `Client`"}
ERAS = {"auto": "auto (2026-07-28)", "legacy": "legacy (2025-11-25 handshake)"}
CLIENTS = [
    ClientKind(f"{library}-{mode}-{'shim' if shim else 'bare'}", title, library, mode, shim)
    for shim in (True, False)
    for library, name in LIBRARIES.items()
    for mode, era in ERAS.items()
    for title in [f"{name}, {era}, {'through `SessionTransport`' if shim else 'unchanged, no shim'}"]
]


class Recording(httpx2.AsyncBaseTransport):
    """The inner transport of a shim: counts the sessions/create it sends and records the era of each POST."""

    def __init__(self, log: list[tuple[str, str | None]]) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.log = log

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST":
            body = await request.aread()
            method = "sessions/create" if b'"method":"sessions/create"' in body else "other"
            self.log.append((method, request.headers.get("mcp-protocol-version")))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


Progress = list[tuple[float, float | None, str | None]]


@dataclass
class Conversation:
    """One connected client, whatever its library: call a tool, optionally through a shim."""

    call: Callable[..., Awaitable[Any]]
    shims: list[SessionTransport]
    log: list[tuple[str, str | None]]


@asynccontextmanager
async def connect(kind: ClientKind, url: str) -> AsyncIterator[Conversation]:
    log: list[tuple[str, str | None]] = []
    shims: list[SessionTransport] = []
    handle = HeldSession()  # one conversation: every connection the client opens shares it

    def shim() -> SessionTransport:
        transport = SessionTransport(Recording(log), session=handle)
        shims.append(transport)
        return transport

    async with AsyncExitStack() as stack:
        target: Any = url
        if kind.library == "sdk":
            if kind.shim:
                http = await stack.enter_async_context(httpx2.AsyncClient(transport=shim(), timeout=WITHIN))
                target = streamable_http_client(url, http_client=http)
            sdk = await stack.enter_async_context(SDKClient(target, mode=kind.mode))

            async def call(name: str, arguments: dict[str, Any], meta: Any = None, progress: Any = None) -> Any:
                result = await sdk.call_tool(name, arguments, meta=meta, progress_callback=progress)
                return (result.structured_content or {})["result"]

        else:
            if kind.shim:

                def factory(**kwargs: Any) -> httpx2.AsyncClient:
                    return httpx2.AsyncClient(transport=shim(), **kwargs)

                # fastmcp calls the factory with keywords only, follow_redirects among them, which the SDK's
                # McpHttpClientFactory protocol does not name; fastmcp's docs ask for **kwargs, as here.
                target = StreamableHttpTransport(url, httpx_client_factory=cast(McpHttpClientFactory, factory))
            fastmcp = await stack.enter_async_context(
                FastMCPClient(target, mode=kind.mode, timeout=WITHIN, init_timeout=WITHIN)
            )

            async def call(name: str, arguments: dict[str, Any], meta: Any = None, progress: Any = None) -> Any:
                result = await fastmcp.call_tool(name, arguments, meta=meta, progress_handler=progress)
                return (result.structured_content or {})["result"]

        yield Conversation(call, shims, log)


@dataclass(frozen=True)
class StockKind:
    """A client with no shim and no change, against the servers with the opt-ins: stock, or shaped as a host."""

    key: str
    library: str
    mode: str
    host: str | None = None  # None: a stock client; else how it names its conversations (a row of _hosts.HOSTS)
    shape: str = ""  # the host's shape, as the page says it

    @property
    def title(self) -> str:
        if self.host is None:
            return f"{LIBRARIES[self.library]}, {ERAS[self.mode]}, stock"
        return f"{LIBRARIES[self.library]}, {self.mode}, {self.shape}"


STOCK_CLIENTS = [
    StockKind("sdk-legacy-stock", "sdk", "legacy"),
    StockKind("fastmcp-legacy-stock", "fastmcp", "legacy"),
    StockKind("sdk-auto-stock", "sdk", "auto"),
    StockKind("sdk-chatgpt", "sdk", "legacy", "chatgpt", 'ChatGPT-shaped (`_meta["openai/session"]`)'),
    StockKind("sdk-vscode", "sdk", "auto", "vscode", 'VS Code-shaped (`_meta["vscode.conversationId"]`)'),
    StockKind("sdk-goose", "sdk", "legacy", "goose-header", "Goose-shaped (`agent-session-id` header)"),
    StockKind(
        "sdk-codex",
        "sdk",
        "auto",
        "codex-turn",
        'Codex-shaped (`_meta["x-codex-turn-metadata"]`: one `session_id`, a `thread_id` per conversation, a new '
        "`turn_id` per call)",
    ),
    StockKind("fastmcp-codex", "fastmcp", "legacy", "codex-thread-id", 'Codex-shaped (`_meta["threadId"]` alone)'),
    StockKind(
        "sdk-baggage",
        "sdk",
        "auto",
        "baggage-header",
        "baggage-carrying (`gen_ai.conversation.id` in the `baggage` header)",
    ),
]


@asynccontextmanager
async def connect_stock(kind: StockKind, url: str, conversation: str) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """One unchanged client; ``call(name)`` sends the host's conversation id the way that host does."""

    def shaped() -> tuple[dict[str, Any], dict[str, Any]]:  # called per call: a Codex turn is new each time
        return ({}, {}) if kind.host is None else HOSTS[kind.host][1](conversation)

    async with AsyncExitStack() as stack:
        if kind.library == "sdk":
            target: Any = url
            if headers := {name.replace("_", "-"): value for name, value in shaped()[1].items()}:
                http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=WITHIN))
                target = streamable_http_client(url, http_client=http)
            sdk = await stack.enter_async_context(SDKClient(target, mode=kind.mode))

            async def call(name: str) -> Any:
                meta = shaped()[0]
                result = await sdk.call_tool(name, {}, meta=sdk_meta(meta) if meta else None)
                return (result.structured_content or {})["result"]

        else:
            fastmcp = await stack.enter_async_context(
                FastMCPClient(url, mode=kind.mode, timeout=WITHIN, init_timeout=WITHIN)
            )

            async def call(name: str) -> Any:
                result = await fastmcp.call_tool(name, {}, meta=shaped()[0] or None)
                return (result.structured_content or {})["result"]

        yield call


# -- the scenarios -----------------------------------------------------------------------------------------


@dataclass
class Step:
    name: str
    observed: str
    ok: bool
    note: str | None = None


@dataclass
class Cell:
    client: ClientKind | StockKind
    server: ServerKind
    steps: list[Step] = field(default_factory=list)
    era: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(step.ok for step in self.steps)

    @property
    def notes(self) -> list[str]:
        return [f"{step.name}: {step.note}" for step in self.steps if step.note]

    def check(self, name: str, observed: Any, expected: Any, note: str | None = None) -> None:
        """Record a step: ``observed`` against ``expected``; ``note`` explains a passing step's limits."""
        text = observed if isinstance(observed, str) else ", ".join(map(str, observed[:2]))
        ok = observed == expected
        self.steps.append(Step(name, text, ok, note if ok else f"expected {expected!r}, observed {observed!r}"))


async def refused_code(call: Awaitable[Any]) -> str:
    try:
        value = await call
    except MCPError as exc:
        return str(exc.code)
    return f"not refused ({value!r})"


JSON_PROGRESS_NOTE = (
    "no progress events: a server in JSON response mode answers with one JSON body and never sends "
    "the notifications; the result and the session are unaffected"
)


async def session_scenario(cell: Cell, url: str) -> None:
    """create, count twice, state round trip, countdown with progress, delete, refused afterwards."""
    assert isinstance(cell.client, ClientKind)  # run_cell gives stock clients their own scenario
    async with connect(cell.client, url) as conversation:
        call = conversation.call
        cell.check("count twice", [await call("count", {}), await call("count", {})], [1, 2])
        creates = sum(1 for method, _ in conversation.log if method == "sessions/create")
        cell.era = next((era for method, era in conversation.log if method == "other" and era), None) or "2025-era"
        cell.check("create", f"{creates} sessions/create, on the first call", "1 sessions/create, on the first call")
        await call("set_mode", {"mode": "terse"})
        cell.check("state round trip", await call("get_mode", {}), "terse")
        progress: Progress = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total, message))

        done = await call("countdown", {"n": COUNTDOWN}, progress=on_progress)
        expected = ALL_PROGRESS if cell.server.streams else []
        cell.check(
            "countdown with progress",
            [done, f"{len(progress)} of {COUNTDOWN} progress events", progress],
            ["done", f"{len(expected)} of {COUNTDOWN} progress events", expected],
            None if cell.server.streams else JSON_PROGRESS_NOTE,
        )
        shim = conversation.shims[-1]
        token = shim.session.token
        cell.check("delete", "deleted" if await shim.delete() else "not deleted", "deleted")
        stale = {SESSION_KEY: {"sessionId": token}}
        cell.check("refused after delete", await refused_code(call("count", {}, meta=stale)), str(SESSION_NOT_FOUND))


async def sessionless_scenario(cell: Cell, url: str) -> None:
    """Without the shim: the middleware is invisible until a tool needs a session."""
    assert isinstance(cell.client, ClientKind)  # run_cell gives stock clients their own scenario
    async with connect(cell.client, url) as conversation:
        call = conversation.call
        cell.check("sessionless tool", await call("whoami", {}), "none")
        cell.check("session-required tool", await refused_code(call("count", {})), str(SESSION_REQUIRED))
        cell.check("again, same answer", await refused_code(call("count", {})), str(SESSION_REQUIRED))


async def counted(call: Callable[[str], Awaitable[Any]]) -> str:
    try:
        return str(await call("count"))
    except MCPError as exc:
        return str(exc.code)


async def stock_scenario(cell: Cell, url: str) -> None:
    """Two conversations (two connections, or two host ids), no sessions/create: one counter each."""
    kind = cell.client
    assert isinstance(kind, StockKind)
    async with (
        # Ids of this cell's own: two kinds shaped as one host share that host's conversations on a server.
        connect_stock(kind, url, f"{kind.key}-conversation-a") as first,
        connect_stock(kind, url, f"{kind.key}-conversation-b") as second,
    ):
        observed = [await counted(first), await counted(first), await counted(second)]
    if kind.host is not None or (kind.mode == "legacy" and cell.server.stateful):
        cell.check("one counter per conversation", observed, ["1", "2", "1"])
    else:
        why = (
            "stateless: no transport session to adopt"
            if kind.mode == "legacy"
            else "no transport session on 2026-07-28"
        )
        cell.check("one counter per conversation", observed, [str(SESSION_REQUIRED)] * 3, why)


async def run_cell(cell: Cell, url: str, cells_at_once: anyio.CapacityLimiter) -> None:
    if isinstance(cell.client, StockKind):
        scenario = stock_scenario
    else:
        scenario = session_scenario if cell.client.shim else sessionless_scenario
    try:
        async with cells_at_once:  # the guard starts with its turn: the cells waiting for theirs are not its time
            with anyio.fail_after(CELL_TIMEOUT):
                await scenario(cell, url)
    except Exception as exc:
        while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:  # say what failed, not where it was
            exc = exc.exceptions[0]
        cell.steps.append(Step("error", f"{type(exc).__name__}: {exc}"[:200], False))


async def run_matrix(urls: dict[str, str], opted_urls: dict[str, str]) -> dict[tuple[str, str], Cell]:
    cells = {(c.key, s.key): Cell(c, s) for c in CLIENTS for s in SERVERS}
    stock = {(c.key, s.key): Cell(c, s) for c in STOCK_CLIENTS for s in SERVERS}
    cells_at_once = anyio.CapacityLimiter(CELLS_AT_ONCE)
    async with anyio.create_task_group() as tg:
        for (_, server_key), cell in cells.items():
            tg.start_soon(run_cell, cell, urls[server_key], cells_at_once)
        for (_, server_key), cell in stock.items():
            tg.start_soon(run_cell, cell, opted_urls[server_key], cells_at_once)
    return cells | stock


@pytest.fixture(scope="module")
def matrix() -> Iterator[dict[tuple[str, str], Cell]]:
    with ExitStack() as stack:
        urls = {s.key: stack.enter_context(serve(s.build(environ=ENVIRON))) + MCP_PATH for s in SERVERS}
        opted = {s.key: stack.enter_context(serve(s.build(environ=OPTED_IN))) + MCP_PATH for s in SERVERS}
        yield anyio.run(run_matrix, urls, opted)


# -- the document ------------------------------------------------------------------------------------------------


SESSION_STEPS = [
    "count twice: the first `count` creates the session lazily; the counter answers 1, then 2",
    "create: exactly one `sessions/create` was sent, by the shim, on the first call",
    'state round trip: `set_mode("terse")`, then `get_mode()` answers `terse` (signed client-held state, '
    "carried from the echo to the next request)",
    f"countdown with progress: `countdown(n={COUNTDOWN})` answers `done`, and the progress callback received every "
    "event the server streamed",
    "delete: `SessionTransport.delete()` sends `sessions/delete`",
    "refused after delete: a request naming the deleted session is refused with `-32043`",
]
SESSIONLESS_STEPS = [
    "sessionless tool: `whoami` works and answers `none` (no session)",
    "session-required tool: `count` is refused with `-32044` (session required), answered by the middleware",
    "again, same answer: nothing is left behind by the refusal",
]


def render(cells: dict[tuple[str, str], Cell]) -> str:
    # Only what the test dependencies pin (mcp>=2.3,<2.4 and fastmcp==4.2.3): a fresh clone that resolves a
    # newer uvicorn or Python renders the same page.
    mcp_minor = ".".join(version("mcp").split(".")[:2])
    out = [
        "# Interop matrix",
        "",
        "<!-- Generated by tests/e2e/test_interop.py from a real run, but for its last section: do not edit",
        "     by hand. Regenerate with python scripts/update_docs.py -->",
        "",
        "Real clients against real servers, over real HTTP (uvicorn on 127.0.0.1), in one test run. The",
        "test fails if a cell stops behaving as below, or if this page differs from what the run produced.",
        "",
        f"Tested with the `mcp` SDK {mcp_minor}.x and fastmcp {version('fastmcp')}, the versions the test",
        "dependencies pin.",
        "",
        "Servers (columns), each behind `MCPSessionMiddleware` with the quickstart's tools:",
        "",
    ]
    out += [f"{n}. {server.title}" for n, server in enumerate(SERVERS, start=1)]
    out += [
        "",
        "Stateful or stateless changes only the 2025-era path (the server's `mcp-session-id` transport",
        "session); the 2026-07-28 wire has no transport session. The data-layer session is the same in both.",
    ]
    out += ["", "How a client gets the shim, without a change to the client's code:", ""]
    out += [
        "- `mcp` SDK: `Client(streamable_http_client(url, http_client=httpx2.AsyncClient("
        "transport=SessionTransport())), mode=...)`.",
        "- fastmcp: `Client(StreamableHttpTransport(url, httpx_client_factory=lambda **kw: httpx2.AsyncClient("
        "transport=SessionTransport(session=handle), **kw)), mode=...)`. fastmcp 4.2 builds its HTTP client "
        "through that factory, so its client needs no other change (one `HeldSession` per conversation keeps the "
        "session across the connections fastmcp opens).",
        "",
    ]
    notes: dict[str, int] = {}
    header = [
        "| client | " + " | ".join(str(n) for n in range(1, len(SERVERS) + 1)) + " |",
        "| --- |" + " --- |" * len(SERVERS),
    ]

    def row(client: ClientKind | StockKind) -> str:
        """A client's row: each cell's verdict, with its era or what it counted, and its notes (numbered as met)."""
        texts = []
        for server in SERVERS:
            cell = cells[client.key, server.key]
            text = "pass" if cell.ok else "**FAIL**"
            if isinstance(client, StockKind):
                text += " (counts)" if cell.steps and cell.steps[0].observed.startswith("1") else " (-32044)"
            elif cell.era:  # only a shim's session scenario records one
                text += f" ({cell.era})"
            marks = sorted({notes.setdefault(note, len(notes) + 1) for note in cell.notes})
            texts.append(text + "".join(f" [{m}]" for m in marks))
        return f"| {client.title} | " + " | ".join(texts) + " |"

    for title, shim, steps in (
        ("Through the shim: the session scenario", True, SESSION_STEPS),
        ("Without the shim: sessionless clients keep working", False, SESSIONLESS_STEPS),
    ):
        out += [f"## {title}", "", "Each cell runs, in order:", ""]
        out += [f"{n}. {step}" for n, step in enumerate(steps, start=1)]
        out += ["", *header, *(row(client) for client in CLIENTS if client.shim is shim), ""]
    out += [
        "## Without the shim, with the opt-ins: stock clients and host-shaped clients",
        "",
        "The same servers, started with `MCP_SESSIONS_ADOPT_TRANSPORT=1` and",
        "`MCP_SESSIONS_CONVERSATION_DATA=anonymous` (see [clients.md](clients.md)). No client sends",
        "`sessions/create`. Each cell opens two conversations (a stock client: two connections; a host-shaped",
        "client: two conversation ids, sent as that host sends them) and counts 1, 2 in the first and 1 in the",
        "second; where nothing names a conversation, `count` is refused with `-32044` in each.",
        "",
        *header,
        *map(row, STOCK_CLIENTS),
        "",
    ]
    out += ["## Notes", ""]
    out += [f"{n}. {note}" for note, n in notes.items()] or ["None."]
    failing = [cell for cell in cells.values() if not cell.ok]
    out += ["", "## Gaps", ""]
    if failing:
        for cell in failing:
            bad = "; ".join(f"{s.name}: {s.observed} ({s.note})" for s in cell.steps if not s.ok)
            out.append(f"- {cell.client.title} x {cell.server.title}: {bad}")
    else:
        out += [
            "None: every cell passes. Limits that are not failures of a cell: in JSON response mode a server",
            "never sends progress notifications (note above), and the shim retries a streamed (SSE) answer",
            "only when the error is its first event (see [client.md](client.md#errors-and-retries)).",
        ]
    return "\n".join(out) + "\n"


# -- the tests --------------------------------------------------------------------------------------------------


EVERY_CLIENT: list[ClientKind | StockKind] = [*CLIENTS, *STOCK_CLIENTS]


@pytest.mark.parametrize("server", SERVERS, ids=[s.key for s in SERVERS])
@pytest.mark.parametrize("client", EVERY_CLIENT, ids=[c.key for c in EVERY_CLIENT])
def test_cell(matrix: dict[tuple[str, str], Cell], client: ClientKind | StockKind, server: ServerKind) -> None:
    cell = matrix[client.key, server.key]
    assert cell.ok, "\n".join(f"{s.name}: {s.observed} ({'ok' if s.ok else s.note})" for s in cell.steps)


def test_docs_interop_md_is_generated_from_this_run(matrix: dict[tuple[str, str], Cell]) -> None:
    assert_generated(DOC, render(matrix), "", BY_HAND)
