"""The client shim: ``SessionTransport`` (httpx2) and ``HttpxSessionTransport`` (httpx).

Two layers: the unmodified ``mcp`` SDK client through the shim against the real
quickstart over uvicorn (behaviour end to end), and a scripted server behind
``httpx2.MockTransport`` for what a real server does not do on demand (SSE
errors, hanging deletes, refused creates), with ``anyio.Event`` gates where
timing matters. No assertion depends on how long anything takes.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from examples.quickstart import build_app, build_server
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from starlette.middleware.gzip import GZipMiddleware

from _mcp import (
    LEGACY,
    MCP_PATH,
    MODERN,
    SESSION_KEY,
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    ModernClient,
    jwt_claims,
    modern_headers,
    modern_request,
)
from conftest import SECRET, serve
from mcp_sessions import MemoryStore, SessionStoreUnavailable
from mcp_sessions.client import HttpxSessionTransport, RetryPolicy, SessionError, SessionHandle, SessionTransport
from mcp_sessions.client._incoming import retry_after as _retry_after
from mcp_sessions.profiles import SPEC_SAFE_NOT_FOUND, SPEC_SAFE_REQUIRED

pytestmark = pytest.mark.anyio

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}
STORE_UNAVAILABLE = -32010
FAST = RetryPolicy(attempts=3, backoff=0.0, max_backoff=0.0, jitter=False)


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

    def methods(self) -> list[str]:
        return [e.body["method"] for e in self.posts() if isinstance(e.body, dict)]

    def creates(self) -> list[Exchange]:
        return [e for e in self.posts() if isinstance(e.body, dict) and e.body["method"] == "sessions/create"]


def sent_session(body: Any) -> Any:
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get(SESSION_KEY, "absent") if isinstance(meta, dict) else "absent"


class FlakyStore(MemoryStore):
    """A MemoryStore whose next ``fail`` calls to create or touch raise SessionStoreUnavailable."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = 0
        self.failed = 0

    def _maybe_fail(self) -> None:
        if self.fail > 0:
            self.fail -= 1
            self.failed += 1
            raise SessionStoreUnavailable("scripted outage")

    async def create(self, session_id: str, *, expires_at: float, now: float) -> None:
        self._maybe_fail()
        await super().create(session_id, expires_at=expires_at, now=now)

    async def touch(
        self, session_id: str, *, expires_at: float, now: float, idle_ttl: float | None, issued_at: float | None = None
    ) -> Any:
        self._maybe_fail()
        return await super().touch(session_id, expires_at=expires_at, now=now, idle_ttl=idle_ttl)


@dataclass
class Servers:
    json: str
    sse: str
    flaky: str
    bare: str
    gzip: str
    store: FlakyStore


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    store = FlakyStore()
    flaky_app = build_app(json_response=True, environ=ENVIRON, store=store, retry_after=0)
    bare_app = build_server().streamable_http_app(streamable_http_path=MCP_PATH, json_response=True)
    gzip_app = GZipMiddleware(build_app(json_response=True, environ=ENVIRON), minimum_size=1)
    with (
        serve(build_app(json_response=True, environ=ENVIRON)) as json_url,
        serve(build_app(json_response=False, environ=ENVIRON)) as sse_url,
        serve(flaky_app) as flaky_url,
        serve(bare_app) as bare_url,
        serve(gzip_app) as gzip_url,
    ):
        yield Servers(
            json_url + MCP_PATH,
            sse_url + MCP_PATH,
            flaky_url + MCP_PATH,
            bare_url + MCP_PATH,
            gzip_url + MCP_PATH,
            store=store,
        )


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
        httpx2.AsyncClient(transport=transport) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


async def count(client: Client, **kwargs: Any) -> Any:
    return (await client.call_tool("count", {}, **kwargs)).structured_content["result"]


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
    assert len(recorder.creates()) == 1
    token = shim.session.token
    for exchange in recorder.posts():
        method = exchange.body["method"]
        if method in ("initialize", "notifications/initialized", "server/discover", "sessions/create"):
            assert sent_session(exchange.body) == "absent", method
        else:
            assert sent_session(exchange.body)["sessionId"] == token, method
            assert exchange.headers["content-length"] == str(len(json.dumps(exchange.body, separators=(",", ":"))))


async def test_mcp_session_id_header_follows_the_era(servers: Servers, mode: str) -> None:
    recorder = Recorder()
    shim = SessionTransport(recorder)
    async with connect(servers.json, shim, mode) as client:
        await count(client)

    token = shim.session.token
    [create] = recorder.creates()
    stamped = [e for e in recorder.posts() if sent_session(e.body) != "absent"]
    assert stamped
    if mode == "auto":
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


async def test_parallel_first_requests_share_one_session(servers: Servers) -> None:
    recorder = Recorder()
    shim = SessionTransport(recorder)
    results: list[int] = []
    async with connect(servers.json, shim) as client:

        async def one() -> None:
            results.append(await count(client))

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(one)

    assert sorted(results) == [1, 2, 3, 4, 5]
    assert len(recorder.creates()) == 1


async def test_two_conversations_against_one_server_keep_their_own_counters(servers: Servers) -> None:
    pool = httpx2.AsyncHTTPTransport()  # one connection pool, shared: each shim leaves it open
    first, second = SessionTransport(pool, close_transport=False), SessionTransport(pool, close_transport=False)
    async with connect(servers.sse, first) as alice, connect(servers.sse, second) as bob:
        seen = [await count(alice), await count(bob), await count(alice), await count(alice), await count(bob)]
    await pool.aclose()

    assert seen == [1, 1, 2, 3, 2]
    assert first.session.id != second.session.id


async def test_a_saved_session_resumes_after_a_restart(servers: Servers) -> None:
    first = SessionTransport(session=SessionHandle(label="trip to Lisbon"))
    async with connect(servers.json, first) as client:
        await count(client)
        await count(client)
        await tool(client, "set_mode", mode="verbose")
    saved = json.loads(json.dumps(first.session.to_dict()))

    second = SessionTransport(session=SessionHandle.from_dict(saved))
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
    stale = SessionHandle(old, expires_at=datetime.now(UTC) - timedelta(seconds=1))

    shim = SessionTransport(recorder, session=stale)
    async with connect(servers.json, shim) as client:
        counted = await count(client)

    assert counted == 1
    assert shim.session.token not in (None, old)
    assert all(old not in json.dumps(e.body) for e in recorder.posts())


async def delete_behind_its_back(url: str, token: str) -> None:
    other = SessionTransport(session=SessionHandle(token))
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


async def test_delete_on_close_ends_the_session(servers: Servers, mode: str) -> None:
    shim = SessionTransport(delete_on_close=True)
    async with connect(servers.json, shim, mode) as client:
        await count(client)
        token = shim.session.token

    assert shim.session.token is None
    with httpx.Client() as http:
        _, refused = ModernClient(http, servers.json.removesuffix(MCP_PATH)).call_tool(
            "count", session={"sessionId": token}
        )
    assert refused["error"]["code"] == SESSION_NOT_FOUND


async def test_explicit_create_use_inspect_delete(servers: Servers) -> None:
    shim = SessionTransport(auto_create=False)
    session = await shim.create(servers.sse, headers={"X-Conversation": "c-1"})
    assert session is shim.session
    assert session.token is not None and session.expires_at is not None
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


async def test_gzip_answers_are_read(servers: Servers) -> None:
    recorder = Recorder()
    shim = SessionTransport(recorder)
    async with connect(servers.gzip, shim) as client:
        await tool(client, "set_mode", mode="gz")
        mode_seen = await tool(client, "get_mode")

    assert mode_seen == "gz"
    assert shim.session.state is not None
    assert any(e.response_headers.get("content-encoding") == "gzip" for e in recorder.posts())


async def test_the_httpx_flavour_with_a_hand_written_client(servers: Servers) -> None:
    shim = HttpxSessionTransport()
    async with httpx.AsyncClient(transport=shim) as http:

        async def call(name: str, **arguments: Any) -> Any:
            body = modern_request("tools/call", {"name": name, "arguments": arguments}, id=7)
            response = await http.post(servers.json, json=body, headers=modern_headers(body))
            return response.json()

        answers = [await call("count"), await call("count"), await call("set_mode", mode="m"), await call("get_mode")]

    assert [a["result"]["structuredContent"]["result"] for a in answers] == [1, 2, "m", "m"]
    echo = answers[-1]["result"]["_meta"][SESSION_KEY]
    assert echo["sessionId"] == shim.session.token
    assert echo["state"] == shim.session.state


async def test_an_async_on_change_hook_sees_every_change(servers: Servers) -> None:
    seen: list[dict[str, str]] = []

    async def save(session: SessionHandle) -> None:
        await anyio.lowlevel.checkpoint()
        seen.append(session.to_dict())

    shim = SessionTransport(on_change=save, delete_on_close=True)
    async with connect(servers.json, shim) as client:
        await count(client)
        await tool(client, "set_mode", mode="x")

    assert [sorted(s) for s in seen] == [["expiresAt", "sessionId"], ["expiresAt", "sessionId", "state"], []]


# -- a scripted server: what a real one does not do on demand -----------------------------------------------


Handler = Callable[[httpx2.Request, Any], Any]


class ScriptedServer:
    """A tiny MCP server with sessions behind httpx2.MockTransport; ``script`` may override any answer."""

    def __init__(self, script: Handler | None = None, *, advertise: bool = True) -> None:
        self.script = script
        self.advertise = advertise
        self.created = 0
        self.deleted: list[str] = []
        self.requests: list[tuple[httpx2.Headers, Any]] = []

    def token(self, n: int) -> str:
        return f"tok-{n}"

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.requests.append((request.headers, body))
        if self.script is not None:
            answer = self.script(request, body)
            if answer is not None:
                return await answer if not isinstance(answer, httpx2.Response) else answer
        if isinstance(body, list):
            return httpx2.Response(200, json=[self.result(m) for m in body if "id" in m])
        if "id" not in body:
            return httpx2.Response(202)
        return httpx2.Response(200, json=self.result(body))

    def result(self, message: dict[str, Any]) -> dict[str, Any]:
        method = message["method"]
        if method == "sessions/create":
            self.created += 1
            return rpc_result(message, {"session": {"sessionId": self.token(self.created), "expiresAt": FUTURE}})
        if method == "sessions/delete":
            self.deleted.append(sent_session(message)["sessionId"])
            return rpc_result(message, {})
        if method in ("server/discover", "initialize"):
            capabilities: dict[str, Any] = {"tools": {}}
            if self.advertise:
                capabilities["sessions"] = {}
            return rpc_result(message, {"capabilities": capabilities})
        session = sent_session(message)
        result: dict[str, Any] = {"content": []}
        if isinstance(session, dict):
            result["_meta"] = {SESSION_KEY: {**session, "state": f"state-{len(self.requests)}", "expiresAt": FUTURE}}
        return rpc_result(message, result)


FUTURE = "2099-01-01T00:00:00Z"


def rpc_result(message: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def rpc_error(message: dict[str, Any], code: int, text: str = "error", data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": text}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": message["id"], "error": error}


def sse(*messages: Any) -> bytes:
    return b"".join(b"event: message\ndata: " + json.dumps(m).encode() + b"\n\n" for m in messages)


def call(name: str = "count", /, id: Any = 1, **meta: Any) -> dict[str, Any]:
    body = modern_request("tools/call", {"name": name, "arguments": {}}, id=id, meta=meta or None)
    return body


async def post(
    shim: SessionTransport, body: Any, *, modern: bool = True, headers: dict[str, str] | None = None
) -> httpx2.Response:
    sent = modern_headers(body) if modern and isinstance(body, dict) else {"Content-Type": "application/json"}
    sent.update(headers or {})
    async with httpx2.AsyncClient(transport=shim) as http:
        return await http.post("http://mcp.test/mcp", json=body, headers=sent)


def scripted(server: ScriptedServer, **options: Any) -> SessionTransport:
    options.setdefault("retry", FAST)
    return SessionTransport(httpx2.MockTransport(server), **options)


STAMPING = [
    pytest.param(call(), {"sessionId": "tok-1", "state": "st"}, id="request"),
    pytest.param(
        modern_request("notifications/progress", {"progressToken": 1, "progress": 1}, id=None),
        {"sessionId": "tok-1", "state": "st"},
        id="notification",
    ),
    pytest.param({"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"sessionId": "tok-1", "state": "st"}, id="no params"),
    pytest.param(modern_request("sessions/create"), "absent", id="sessions/create"),
    pytest.param(modern_request("server/discover"), "absent", id="discover"),
    pytest.param({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, "absent", id="initialize"),
    pytest.param(call(**{SESSION_KEY: {"sessionId": "mine"}}), {"sessionId": "mine"}, id="own session"),
    pytest.param(call(**{SESSION_KEY: None}), None, id="explicit null opts out"),
    pytest.param({"jsonrpc": "2.0", "id": 1, "method": "x/y", "params": [1]}, "absent", id="positional params"),
]


@pytest.mark.parametrize(("body", "expected"), STAMPING)
async def test_what_gets_stamped(body: dict[str, Any], expected: Any) -> None:
    server = ScriptedServer()
    shim = scripted(server, session=SessionHandle("tok-1", state="st"))
    await post(shim, body)

    [(headers, seen)] = server.requests
    assert sent_session(seen) == expected
    assert headers["content-length"] == str(len(json.dumps(seen, separators=(",", ":"), ensure_ascii=False)))
    if expected != {"sessionId": "tok-1", "state": "st"}:
        assert seen == body  # not stamped: the caller's bytes, exactly
    else:  # everything else in _meta (the 2026-07-28 envelope) is kept
        other_meta = {k: v for k, v in seen["params"]["_meta"].items() if k != SESSION_KEY}
        assert other_meta == (body.get("params") or {}).get("_meta", {})


async def test_a_batch_gets_the_session_on_every_element_and_echoes_are_read() -> None:
    server = ScriptedServer()
    shim = scripted(server, session=SessionHandle("tok-1"))
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "count"}},
    ]
    response = await post(shim, batch, modern=False, headers={"Mcp-Session-Id": "transport-1"})

    [(headers, seen)] = server.requests
    assert [sent_session(m) for m in seen] == [{"sessionId": "tok-1"}] * 3
    assert headers["mcp-session-id"] == "transport-1"  # 2025-era: the server's transport session, untouched
    assert len(response.json()) == 2
    assert shim.session.state == "state-1"
    assert shim.session.expires_at == datetime(2099, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("modern", "own", "expected"),
    [
        (True, None, "tok-1"),
        (True, "mine", "mine"),
        (False, None, "transport-1"),
        (False, "mine", "transport-1"),
    ],
)
async def test_mcp_session_id_header(modern: bool, own: str | None, expected: str) -> None:
    server = ScriptedServer()
    shim = scripted(server, session=SessionHandle("tok-1"))
    body = call(**({SESSION_KEY: {"sessionId": own}} if own else {}))
    headers = {} if modern else {"Mcp-Session-Id": "transport-1", "Mcp-Protocol-Version": LEGACY}
    if modern:
        headers["Mcp-Session-Id"] = "stale"  # whatever was there, the header mirrors the session on 2026-07-28
    await post(shim, body, modern=modern, headers=headers)

    [(sent_headers, _)] = server.requests
    assert sent_headers.get_list("mcp-session-id") == [expected]


async def test_non_json_rpc_posts_pass_through_untouched() -> None:
    server = ScriptedServer(lambda request, body: httpx2.Response(200, json={"ok": True}))
    shim = scripted(server, session=SessionHandle("tok-1"))
    response = await post(shim, {"method": "card", "value": 1}, modern=False)

    assert response.json() == {"ok": True}
    assert server.requests[0][1] == {"method": "card", "value": 1}


async def test_accept_encoding_is_cut_to_what_the_shim_can_read() -> None:
    server = ScriptedServer()
    shim = scripted(server, session=SessionHandle("tok-1"))
    await post(shim, call(), headers={"Accept-Encoding": "br, gzip;q=0.9, zstd, deflate"})

    assert server.requests[0][0]["accept-encoding"] == "gzip;q=0.9, deflate"


async def test_a_gzip_json_echo_is_read_and_the_caller_gets_the_bytes_as_sent() -> None:
    def script(request: httpx2.Request, body: Any) -> httpx2.Response | None:
        if body["method"] != "tools/call":
            return None
        payload = json.dumps(ScriptedServer().result(body) | {"id": body["id"]}).encode()
        message = json.loads(payload)
        message["result"]["_meta"] = {SESSION_KEY: {"sessionId": "tok-1", "state": "zipped"}}
        compressed = gzip.compress(json.dumps(message).encode())
        return httpx2.Response(
            200, headers={"content-type": "application/json", "content-encoding": "gzip"}, content=compressed
        )

    shim = scripted(ScriptedServer(script), session=SessionHandle("tok-1"))
    response = await post(shim, call())

    assert response.json()["result"]["_meta"][SESSION_KEY]["state"] == "zipped"
    assert shim.session.state == "zipped"


async def test_sse_is_relayed_as_it_arrives_and_the_echo_read() -> None:
    release = anyio.Event()

    def script(request: httpx2.Request, body: Any) -> httpx2.Response | None:
        if body["method"] != "tools/call":
            return None

        async def stream() -> AsyncIterator[bytes]:
            yield sse({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})
            await release.wait()
            yield sse(ScriptedServer().result(body) | {"id": body["id"]})

        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

    shim = scripted(ScriptedServer(script), session=SessionHandle("tok-1"))
    body = call()
    lines: list[str] = []
    with anyio.fail_after(10):  # a deadlock guard, not a timing assertion
        async with (
            httpx2.AsyncClient(transport=shim) as http,
            http.stream("POST", "http://mcp.test/mcp", json=body, headers=modern_headers(body)) as response,
        ):
            stream_lines = response.aiter_lines()
            while (line := await anext(stream_lines)) != "":
                lines.append(line)
            assert "progress" in lines[-1]  # the first event arrived while the server still holds the rest
            assert shim.session.state is None
            release.set()
            lines += [line async for line in stream_lines]

    assert shim.session.state == "state-0"
    assert any("state-0" in line for line in lines)


async def test_a_caller_that_stops_reading_closes_the_servers_stream() -> None:
    closed = anyio.Event()

    def script(request: httpx2.Request, body: Any) -> httpx2.Response | None:
        if body["method"] != "tools/call":
            return None

        async def stream() -> AsyncIterator[bytes]:
            try:
                yield sse({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})
                await anyio.sleep_forever()
                yield b""
            finally:
                closed.set()

        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

    shim = scripted(ScriptedServer(script), session=SessionHandle("tok-1"))
    body = call()
    with anyio.fail_after(10):  # a deadlock guard
        async with (
            httpx2.AsyncClient(transport=shim) as http,
            http.stream("POST", "http://mcp.test/mcp", json=body, headers=modern_headers(body)) as response,
        ):
            lines = response.aiter_lines()
            assert [await anext(lines), await anext(lines)][1].startswith('data: {"jsonrpc"')
        await closed.wait()  # leaving the block closed the stream, through the shim, down to the server's side


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


@pytest.mark.parametrize("code", [STORE_UNAVAILABLE, SESSION_NOT_FOUND, SPEC_SAFE_NOT_FOUND])
async def test_an_error_as_the_first_sse_event_is_retried(code: int) -> None:
    attempts = []

    def script(request: httpx2.Request, body: Any) -> httpx2.Response | None:
        if body["method"] != "tools/call":
            return None
        attempts.append(sent_session(body)["sessionId"])
        if len(attempts) == 1:
            return httpx2.Response(
                200, headers={"content-type": "text/event-stream"}, content=sse(rpc_error(body, code))
            )
        return None

    server = ScriptedServer(script)
    shim = scripted(server, session=SessionHandle("tok-0"), recreate=True)
    response = await post(shim, call())

    assert "result" in json.loads(response.text)
    expected = ["tok-0", "tok-0"] if code == STORE_UNAVAILABLE else ["tok-0", "tok-1"]
    assert attempts == expected


async def test_an_sse_error_after_other_events_reaches_the_caller() -> None:
    def script(request: httpx2.Request, body: Any) -> httpx2.Response | None:
        if body["method"] != "tools/call":
            return None
        progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
        content = sse(progress, rpc_error(body, SESSION_NOT_FOUND, "Session not found"))
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=content)

    server = ScriptedServer(script)
    shim = scripted(server, session=SessionHandle("tok-0"), recreate=True)
    response = await post(shim, call())

    assert "Session not found" in response.text  # already streaming: not retried
    assert shim.session.token is None  # but the session is dropped
    assert server.created == 0


async def test_retry_after_is_honoured_and_the_deadline_bounds_the_retries() -> None:
    attempts = []
    past = format_datetime(datetime.now(UTC) - timedelta(minutes=1), usegmt=True)

    def script(request: httpx2.Request, body: Any) -> httpx2.Response | None:
        attempts.append(1)
        return httpx2.Response(503, headers={"retry-after": past}, json=rpc_error(body, STORE_UNAVAILABLE))

    shim = scripted(ScriptedServer(script), session=SessionHandle("tok-1"), retry=RetryPolicy(attempts=2))
    response = await post(shim, call())
    assert response.status_code == 503
    assert len(attempts) == 3

    attempts.clear()
    never = scripted(ScriptedServer(script), session=SessionHandle("tok-1"), retry=RetryPolicy(deadline=0.0))
    response = await post(never, call())
    assert response.status_code == 503
    assert response.json()["error"]["code"] == STORE_UNAVAILABLE
    assert len(attempts) == 1


def test_retry_after_parsing() -> None:
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert _retry_after("3") == 3.0
    assert _retry_after(None) is None
    assert _retry_after("soon") is None
    assert 0 < (_retry_after(soon) or 0) <= 30


def test_retry_policy() -> None:
    policy = RetryPolicy(backoff=1.0, max_backoff=3.0, jitter=False)
    assert [policy.delay(n) for n in range(4)] == [1.0, 2.0, 3.0, 3.0]
    assert policy.delay(5, retry_after=7.0) == 7.0
    jittered = RetryPolicy(backoff=2.0, max_backoff=2.0)
    assert all(1.0 <= jittered.delay(0) <= 2.0 for _ in range(50))
    for bad in ({"attempts": -1}, {"backoff": 5.0, "max_backoff": 1.0}, {"deadline": -1.0}):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)


async def test_a_refused_create_answers_the_callers_request() -> None:
    def script(request: httpx2.Request, body: Any) -> httpx2.Response | None:
        if body["method"] == "sessions/create":
            return httpx2.Response(400, json=rpc_error(body, -32602, "label too long"))
        return None

    server = ScriptedServer(script)
    shim = scripted(server)
    response = await post(shim, call(id="abc"))

    assert response.status_code == 400
    assert response.json() == {"jsonrpc": "2.0", "id": "abc", "error": {"code": -32602, "message": "label too long"}}
    assert [body["method"] for _, body in server.requests] == ["sessions/create"]


async def test_a_server_that_does_not_know_sessions_create_gets_the_request_sessionless() -> None:
    def script(request: httpx2.Request, body: Any) -> httpx2.Response | None:
        if body["method"] == "sessions/create":
            return httpx2.Response(404, json=rpc_error(body, -32601, "Method not found"))
        return None

    server = ScriptedServer(script)
    shim = scripted(server)
    first = await post(shim, call())
    second = await post(shim, call())

    assert "result" in first.json() and "result" in second.json()
    assert [body["method"] for _, body in server.requests] == ["sessions/create", "tools/call", "tools/call"]
    assert shim.supports_sessions is False


@pytest.mark.parametrize("code", [SESSION_REQUIRED, SPEC_SAFE_REQUIRED], ids=["seeds", "spec-safe"])
@pytest.mark.parametrize("auto_create", [True, False])
async def test_session_required_creates_one_and_retries_once(auto_create: bool, code: int) -> None:
    def script(request: httpx2.Request, body: Any) -> httpx2.Response | None:
        if body["method"] == "tools/call" and sent_session(body) == "absent":
            return httpx2.Response(200, json=rpc_error(body, code, "Session required"))
        return None

    server = ScriptedServer(script, advertise=False)  # the server did not advertise: no lazy create
    shim = scripted(server, auto_create=auto_create)
    await post(shim, modern_request("server/discover"))
    response = await post(shim, call())

    methods = [body["method"] for _, body in server.requests]
    if auto_create:
        assert "result" in response.json()
        assert methods == ["server/discover", "tools/call", "sessions/create", "tools/call"]
    else:
        assert response.json()["error"]["code"] == code
        assert methods == ["server/discover", "tools/call"]


async def test_concurrent_first_requests_wait_for_one_create() -> None:
    release = anyio.Event()

    async def slow_create(body: Any) -> httpx2.Response:
        await release.wait()
        return httpx2.Response(200, json=ScriptedServer().result(body))

    def script(request: httpx2.Request, body: Any) -> Any:
        return slow_create(body) if body["method"] == "sessions/create" else None

    server = ScriptedServer(script)
    shim = scripted(server)
    async with httpx2.AsyncClient(transport=shim) as http, anyio.create_task_group() as tg:
        for n in range(4):
            body = call(id=n)
            tg.start_soon(partial(http.post, "http://mcp.test/mcp", json=body, headers=modern_headers(body)))
        while len(server.requests) < 1:
            await anyio.lowlevel.checkpoint()
        for _ in range(20):
            await anyio.lowlevel.checkpoint()  # let the other three reach the lock
        release.set()

    creates = [body for _, body in server.requests if body["method"] == "sessions/create"]
    assert len(creates) == 1
    assert {sent_session(body)["sessionId"] for _, body in server.requests if body["method"] == "tools/call"} == {
        "tok-1"
    }


async def test_delete_on_close_is_bounded_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    never = anyio.Event()

    async def hang(body: Any) -> httpx2.Response:
        await never.wait()
        raise AssertionError("unreachable")

    def script(request: httpx2.Request, body: Any) -> Any:
        return hang(body) if body["method"] == "sessions/delete" else None

    caplog.set_level(logging.WARNING, "mcp_sessions.client")
    shim = scripted(ScriptedServer(script), delete_on_close=True, close_timeout=0.05)
    await post(shim, call())  # creates the session, and teaches the shim the endpoint
    assert shim.session.token == "tok-1"

    broken = scripted(
        ScriptedServer(lambda r, b: httpx2.Response(500) if b["method"] == "sessions/delete" else None),
        delete_on_close=True,
    )
    await post(broken, call())

    assert "no answer in 0.05 s" in caplog.text
    assert "could not delete session" in caplog.text
    assert "tok-1" not in caplog.text


async def test_an_on_change_hook_that_fails_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def boom(session: SessionHandle) -> None:
        raise RuntimeError("disk full")

    shim = scripted(ScriptedServer(), on_change=boom)
    response = await post(shim, call())

    assert "result" in response.json()
    assert "the on_change hook failed" in caplog.text


async def test_explicit_create_needs_an_endpoint() -> None:
    shim = scripted(ScriptedServer())
    with pytest.raises(ValueError, match="pass url="):
        await shim.create()
    created = await shim.create("http://mcp.test/mcp", protocol_version=LEGACY)
    assert created.token == "tok-1"
    assert await shim.delete() is True


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
    assert saved["trip"]["label"] == "trip" and saved["trip"]["sessionId"].startswith("eyJ")
    listed = turn("list")
    assert listed.count("active until") == 2 and "eyJ" not in listed
    assert turn("end", "trip") == "trip: deleted: True\n"
    assert list(json.loads(store.read_text())) == ["work"]


def test_the_host_example_demo(tmp_path: Path) -> None:
    from examples import host

    out = io.StringIO()
    assert host.main(["--store", str(tmp_path / "s.json"), "demo"], out=out) == 0
    assert "trip: count -> 3 (resumed)" in out.getvalue()
    assert "work: count -> 1 (new session: an expired session is never sent" in out.getvalue()


# -- the held session ------------------------------------------------------------------------------------------


def test_session_handle_round_trip_and_inspection() -> None:
    claims = {"sid": "abcdefghijklmnopqrstuvwx", "exp": 4_000_000_000}
    payload = json.dumps(claims).encode()
    import base64

    token = "eyJhbGciOiJIUzI1NiJ9." + base64.urlsafe_b64encode(payload).rstrip(b"=").decode() + ".sig"
    handle = SessionHandle(token, state="s", expires_at="2030-01-02T03:04:05Z", label="L")

    assert handle.id == "abcdefghijklmnopqrstuvwx"
    assert handle.claims == claims
    assert handle.active and not handle.expired()
    assert handle.meta() == {"sessionId": token, "state": "s"}
    assert token not in repr(handle) and "abcdefghijklmnopqrstuvwx" in repr(handle)
    assert handle.to_dict() == {"sessionId": token, "state": "s", "expiresAt": "2030-01-02T03:04:05Z", "label": "L"}
    again = SessionHandle.from_dict(handle.to_dict())
    assert again.to_dict() == handle.to_dict()
    assert SessionHandle.from_dict({"sessionId": "opaque", "expiresAt": "2030-01-02T03:04:05.250Z"}).id is None
    assert SessionHandle("t", expires_at=datetime(2000, 1, 1)).expired()

    handle.clear()
    assert handle.to_dict() == {"label": "L"} and not handle.active
    with pytest.raises(ValueError):
        handle.meta()
    for bad in ({"sessionId": 5}, {"expiresAt": "tomorrow"}, {"expiresAt": "2030-01-02T03:04:05"}):
        with pytest.raises((ValueError, TypeError)):
            SessionHandle.from_dict(bad)


def test_session_error_never_shows_the_token() -> None:
    error = SessionError(SESSION_NOT_FOUND, "Session not found", {"sessionId": "secret-token"})
    assert "secret-token" not in str(error) and "secret-token" not in repr(error)
    assert error.code == SESSION_NOT_FOUND


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
