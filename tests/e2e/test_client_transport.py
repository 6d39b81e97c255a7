"""The client shim: ``SessionTransport`` (httpx2) and ``HttpxSessionTransport`` (httpx).

The unmodified ``mcp`` SDK client through the shim against the real quickstart
over uvicorn (behaviour end to end: the SDK's own client against a served app,
its 2025-era stream included), and the examples. What a real server does not do
on demand is ``tests/unit/test_client_scripted.py``; ``delete_on_close``, in both eras, is docs/client.md's
snippet (tests/e2e/test_docs.py). No assertion depends on how long anything takes.
"""

from __future__ import annotations

import io
import json
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from examples.quickstart import build_app, build_server
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from _client import FAST, STORE_UNAVAILABLE, sent_session
from _mcp import LEGACY, MCP_PATH, MODERN, SESSION_NOT_FOUND, SESSION_REQUIRED, jwt_claims
from _waits import WITHIN
from conftest import SECRET, serve
from mcp_sessions.client import HeldSession, RetryPolicy, SessionError, SessionTransport
from mcp_sessions.stores import MemoryStore, SessionStoreUnavailable

pytestmark = pytest.mark.anyio

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}


# -- helpers ------------------------------------------------------------------------------------------


@dataclass
class Exchange:
    method: str
    headers: dict[str, str]
    body: Any
    status: int = 0
    response_headers: dict[str, str] = field(default_factory=dict)  # filled in when the answer arrives


class Recorder(httpx2.AsyncBaseTransport):
    """The inner transport, recording what the shim sends (and the answer's status and headers)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.inner = inner or httpx2.AsyncHTTPTransport()
        self.sent: list[Exchange] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        raw = await request.aread()
        exchange = Exchange(request.method, dict(request.headers), json.loads(raw) if raw else None)
        self.sent.append(exchange)
        response = await self.inner.handle_async_request(request)
        exchange.status, exchange.response_headers = response.status_code, dict(response.headers)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()

    def posts(self) -> list[Exchange]:
        return [e for e in self.sent if e.method == "POST"]

    def creates(self) -> list[Exchange]:
        return [e for e in self.posts() if isinstance(e.body, dict) and e.body["method"] == "sessions/create"]


class FlakyStore(MemoryStore):
    """A MemoryStore whose next ``fail`` calls to touch raise SessionStoreUnavailable."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = 0
        self.failed = 0

    async def touch(
        self, session_id: str, *, expires_at: float, now: float, idle_ttl: float | None, issued_at: float | None = None
    ) -> Any:
        if self.fail > 0:
            self.fail -= 1
            self.failed += 1
            raise SessionStoreUnavailable("scripted outage")
        return await super().touch(session_id, expires_at=expires_at, now=now, idle_ttl=idle_ttl)


@dataclass
class Servers:
    json: str
    sse: str
    flaky: str
    bare: str
    store: FlakyStore


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    store = FlakyStore()
    flaky_app = build_app(json_response=True, environ=ENVIRON, store=store, retry_after=0)
    bare_app = build_server().streamable_http_app(streamable_http_path=MCP_PATH, json_response=True)
    with (
        serve(build_app(json_response=True, environ=ENVIRON)) as json_url,
        serve(build_app(json_response=False, environ=ENVIRON)) as sse_url,
        serve(flaky_app) as flaky_url,
        serve(bare_app) as bare_url,
    ):
        yield Servers(json_url + MCP_PATH, sse_url + MCP_PATH, flaky_url + MCP_PATH, bare_url + MCP_PATH, store)


@pytest.fixture(params=["json", "sse"])
def url(request: pytest.FixtureRequest, servers: Servers) -> str:
    value: str = getattr(servers, request.param)
    return value


@pytest.fixture(params=["auto", "legacy"])
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@asynccontextmanager
async def connect(url: str, transport: httpx2.AsyncBaseTransport, mode: str = "auto") -> AsyncIterator[Client]:
    """The SDK client as an agent builds it, except for the transport of its HTTP client."""
    async with (
        httpx2.AsyncClient(transport=transport, timeout=WITHIN) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


async def count(client: Client) -> Any:
    return (await client.call_tool("count", {})).structured_content["result"]


async def tool(client: Client, name: str, **arguments: Any) -> Any:
    return (await client.call_tool(name, arguments)).structured_content["result"]


# -- the SDK client, unmodified, against the real quickstart ------------------------------------------------


async def test_an_unmodified_sdk_client_gets_a_session(url: str, mode: str) -> None:
    recorder = Recorder()
    shim = SessionTransport(recorder)
    async with connect(url, shim, mode) as client:
        counts = [await count(client), await count(client)]
        await tool(client, "set_mode", mode="terse")
        mode_seen = await tool(client, "get_mode")
        whoami = await tool(client, "whoami")

    assert counts == [1, 2]
    assert mode_seen == "terse"
    assert whoami == shim.session.id == jwt_claims(shim.session.token or "")["sid"]
    assert shim.supports_sessions is True
    [create] = recorder.creates()
    token = shim.session.token
    for exchange in recorder.posts():
        method = exchange.body["method"]
        if method in ("initialize", "notifications/initialized", "server/discover", "sessions/create"):
            assert sent_session(exchange.body) == "absent", method
        else:
            assert sent_session(exchange.body)["sessionId"] == token, method
            assert exchange.headers["content-length"] == str(len(json.dumps(exchange.body, separators=(",", ":"))))
    stamped = [e for e in recorder.posts() if sent_session(e.body) != "absent"]
    assert stamped
    if mode == "auto":  # the Mcp-Session-Id header follows the era
        assert create.headers["mcp-protocol-version"] == MODERN
        assert create.headers["mcp-method"] == "sessions/create"
        assert "mcp-session-id" not in create.headers
        assert create.body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == MODERN
        assert all(e.headers["mcp-session-id"] == token for e in stamped)
    else:
        # 2025-era: the header is the server's transport session, forwarded untouched, even on the create.
        transport_session = next(e.response_headers["mcp-session-id"] for e in recorder.posts() if e.status == 200)
        assert transport_session != token
        assert create.headers["mcp-session-id"] == transport_session
        assert create.headers["mcp-protocol-version"] == LEGACY
        assert "mcp-method" not in create.headers
        assert all(e.headers["mcp-session-id"] == transport_session for e in stamped)


async def test_two_conversations_against_one_server_keep_their_own_counters(servers: Servers) -> None:
    pool = httpx2.AsyncHTTPTransport()  # one connection pool, shared: each shim leaves it open
    first, second = SessionTransport(pool, close_transport=False), SessionTransport(pool, close_transport=False)
    async with connect(servers.sse, first) as alice, connect(servers.sse, second) as bob:
        seen = [await count(alice), await count(bob), await count(alice), await count(alice), await count(bob)]
    await pool.aclose()

    assert seen == [1, 1, 2, 3, 2]
    assert first.session.id != second.session.id


async def test_a_saved_session_resumes_after_a_restart(servers: Servers) -> None:
    first = SessionTransport(session=HeldSession(label="trip to Lisbon"))
    async with connect(servers.json, first) as client:
        await count(client)
        await count(client)
        await tool(client, "set_mode", mode="verbose")
    saved = json.loads(json.dumps(first.session.to_dict()))

    second = SessionTransport(session=HeldSession.from_dict(saved))
    async with connect(servers.json, second, mode="legacy") as client:
        counted = await count(client)
        mode_seen = await tool(client, "get_mode")

    assert saved["label"] == "trip to Lisbon"
    assert counted == 3
    assert mode_seen == "verbose"
    assert second.session.token == saved["sessionId"]


async def test_a_locally_expired_session_is_never_sent(servers: Servers) -> None:
    recorder = Recorder()
    first = SessionTransport()
    async with connect(servers.json, first) as client:
        await count(client)
    old = first.session.token
    assert old is not None
    stale = HeldSession(old, expires_at=datetime.now(UTC) - timedelta(seconds=1))

    shim = SessionTransport(recorder, session=stale)
    async with connect(servers.json, shim) as client:
        counted = await count(client)

    assert counted == 1
    assert shim.session.token not in (None, old)
    assert all(old not in json.dumps(e.body) for e in recorder.posts())


async def delete_behind_its_back(url: str, token: str) -> None:
    other = SessionTransport(session=HeldSession(token))
    assert await other.delete(url) is True
    await other.aclose()


async def test_a_gone_session_is_dropped_and_the_caller_told(servers: Servers, mode: str) -> None:
    changes: list[str | None] = []
    shim = SessionTransport(on_change=lambda session: changes.append(session.id))
    async with connect(servers.json, shim, mode) as client:
        await count(client)
        old = shim.session.token
        assert old is not None
        await delete_behind_its_back(servers.json, old)
        with pytest.raises(MCPError) as raised:
            await count(client)
        assert shim.session.token is None
        counted_again = await count(client)  # the next request creates a new one

    assert raised.value.code == SESSION_NOT_FOUND
    assert counted_again == 1
    assert shim.session.token not in (None, old)
    assert changes == [jwt_claims(old)["sid"], None, shim.session.id]


async def test_recreate_replaces_a_gone_session_and_retries_once(servers: Servers, mode: str) -> None:
    recorder = Recorder()
    shim = SessionTransport(recorder, recreate=True)
    async with connect(servers.json, shim, mode) as client:
        await count(client)
        await count(client)
        old = shim.session.token
        assert old is not None
        await delete_behind_its_back(servers.json, old)
        recorder.sent.clear()
        counted = await count(client)

    assert counted == 1  # a new session: the server-side counter starts again
    assert shim.session.token not in (None, old)
    calls = [e for e in recorder.posts() if e.body["method"] in ("tools/call", "sessions/create")]
    assert [(e.body["method"], sent_session(e.body)) for e in calls] == [
        ("tools/call", {"sessionId": old}),
        ("sessions/create", "absent"),
        ("tools/call", {"sessionId": shim.session.token}),
    ]


async def test_a_busy_store_is_retried_until_it_answers(servers: Servers) -> None:
    recorder = Recorder()
    shim = SessionTransport(recorder, retry=FAST)
    async with connect(servers.flaky, shim) as client:
        servers.store.fail, servers.store.failed = 2, 0
        first = await count(client)  # creating stores nothing: the first tools/call meets the outage
        servers.store.fail = 2
        second = await count(client)  # and so does the second

    assert [first, second] == [1, 2]
    assert servers.store.failed == 4
    assert [e.status for e in recorder.creates()] == [200]
    calls = [e for e in recorder.posts() if isinstance(e.body, dict) and e.body.get("method") == "tools/call"]
    assert [e.status for e in calls] == [503, 503, 200, 503, 503, 200]
    assert calls[0].response_headers["retry-after"] == "0"


async def test_a_busy_store_past_the_retry_budget_reaches_the_caller(servers: Servers) -> None:
    shim = SessionTransport(retry=RetryPolicy(attempts=1, backoff=0.0, max_backoff=0.0))
    async with connect(servers.flaky, shim) as client:
        await count(client)
        servers.store.fail, servers.store.failed = 5, 0
        with pytest.raises(MCPError) as raised:
            await count(client)
        servers.store.fail = 0

    assert raised.value.code == STORE_UNAVAILABLE
    assert servers.store.failed == 2  # the try and one retry
    assert shim.session.token is not None  # retryable: the session is kept


async def test_explicit_create_use_inspect_delete(servers: Servers) -> None:
    shim = SessionTransport(auto_create=False)
    session = await shim.create(servers.sse, headers={"X-Conversation": "c-1"})
    assert session is shim.session
    assert session.token is not None
    assert session.expires_at is not None
    assert session.id == jwt_claims(session.token)["sid"]
    assert session.expires_at > datetime.now(UTC)
    assert session.token not in repr(session)

    async with connect(servers.sse, shim) as client:
        counted = [await count(client), await count(client)]
        deleted = await shim.delete()
        deleted_again = await shim.delete()
        with pytest.raises(MCPError) as raised:
            await count(client)  # auto_create=False: no new session, and count requires one

    assert counted == [1, 2]
    assert (deleted, deleted_again) == (True, False)
    assert raised.value.code == SESSION_REQUIRED


async def test_a_server_without_sessions_keeps_working(servers: Servers, mode: str) -> None:
    recorder = Recorder()
    shim = SessionTransport(recorder)
    async with connect(servers.bare, shim, mode) as client:
        whoami = await tool(client, "whoami")
        tools = await client.list_tools()
        assert recorder.creates() == []  # the server did not advertise sessions: none was asked for
        with pytest.raises(SessionError) as raised:
            await shim.create()

    assert whoami == "none"
    assert [t.name for t in tools.tools][:2] == ["count", "whoami"]
    assert shim.supports_sessions is False
    assert raised.value.code == -32601
    with pytest.raises(RuntimeError, match="closed"):
        await shim.create()


async def test_an_async_on_change_hook_sees_every_change(servers: Servers) -> None:
    seen: list[dict[str, str]] = []

    async def save(session: HeldSession) -> None:
        await anyio.lowlevel.checkpoint()
        seen.append(session.to_dict())

    shim = SessionTransport(on_change=save, delete_on_close=True)
    async with connect(servers.json, shim) as client:
        await count(client)
        await tool(client, "set_mode", mode="x")

    assert [sorted(s) for s in seen] == [["expiresAt", "sessionId"], ["expiresAt", "sessionId", "state"], []]


async def test_a_call_cancelled_mid_stream_leaves_the_conversation_usable(servers: Servers, mode: str) -> None:
    shim = SessionTransport()
    started = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:  # ProgressFnT's names
        started.set()

    async with connect(servers.sse, shim, mode) as client:
        await count(client)
        with anyio.CancelScope() as scope:

            async def cancel_when_started() -> None:
                await started.wait()
                scope.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_when_started)
                await client.call_tool("countdown", {"n": 50}, progress_callback=on_progress)
        assert scope.cancelled_caught
        after = await count(client)

    assert after == 2


# -- the examples -------------------------------------------------------------------------------------------


def test_the_two_conversations_example(servers: Servers) -> None:
    from examples import client as example

    out = io.StringIO()
    assert example.main(["--url", servers.sse], out=out) == 0
    text = out.getvalue()
    assert "expected" not in text
    assert "both sessions deleted on close: True" in text
    assert "eyJ" not in text  # ids only, never a token


def test_the_host_example_resumes_a_saved_session_across_runs(servers: Servers, tmp_path: Path) -> None:
    from examples import host

    store = tmp_path / "sessions.json"

    def turn(*argv: str) -> str:
        out = io.StringIO()
        assert host.main(["--url", servers.json, "--store", str(store), *argv], out=out) == 0
        return out.getvalue()

    assert turn("chat", "trip") == "trip: count -> 1 (new session)\n"
    assert stat.S_IMODE(store.stat().st_mode) == 0o600  # it holds bearer tokens
    assert turn("chat", "trip") == "trip: count -> 2 (resumed)\n"
    assert turn("chat", "work") == "work: count -> 1 (new session)\n"
    saved = json.loads(store.read_text())
    assert saved["trip"]["label"] == "trip"
    assert saved["trip"]["sessionId"].startswith("eyJ")
    listed = turn("list")
    assert listed.count("active until") == 2
    assert "eyJ" not in listed
    assert turn("end", "trip") == "trip: deleted: True\n"
    assert list(json.loads(store.read_text())) == ["work"]


def test_the_host_example_demo(tmp_path: Path) -> None:
    from examples import host

    out = io.StringIO()
    assert host.main(["--store", str(tmp_path / "s.json"), "demo"], out=out) == 0
    assert "trip: count -> 3 (resumed)" in out.getvalue()
    assert "work: count -> 1 (new session: an expired session is never sent" in out.getvalue()


@pytest.mark.parametrize(
    ("blocked", "works", "fails"),
    [("httpx2", "HttpxSessionTransport", "SessionTransport"), ("httpx", "SessionTransport", "HttpxSessionTransport")],
)
def test_each_transport_needs_only_its_own_http_library(blocked: str, works: str, fails: str) -> None:
    script = f"""
import sys
sys.modules[{blocked!r}] = None  # as if not installed
import mcp_sessions.client as client
assert {blocked!r} not in [m for m in sys.modules if sys.modules[m] is not None]
getattr(client, {works!r})()
try:
    getattr(client, {fails!r})
except ImportError as exc:
    assert "pip install {blocked}" in str(exc), exc
else:
    raise SystemExit("no ImportError")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
