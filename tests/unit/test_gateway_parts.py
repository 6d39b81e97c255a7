"""The gateway's parts, in process: which replica, which headers, where a keep-alive may go, which hosts, what
a request caught by its 2025 session's end gets."""

from __future__ import annotations

import random
import string
import threading
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import anyio
import anyio.lowlevel
import httpx
import jwt
import pytest
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope

from conftest import SECRET, serve
from mcp_sessions import MCPSessionMiddleware, SessionsConfig, _middleware
from mcp_sessions._asgi import read_body
from mcp_sessions._gateway._front import HostCheck, RoutedPaths, trusted_proxies
from mcp_sessions._gateway.auth._users import JWKS_LIFESPAN, JwtVerifier
from mcp_sessions._gateway.http._proxy import client_headers
from mcp_sessions._gateway.http._replicas import Replicas, TransportIds
from mcp_sessions._gateway.stdio import _server as _stdio_server
from mcp_sessions._gateway.stdio._server import _TAG, _Declared, _Reopened, _sessions_config, _under_sessions
from mcp_sessions._session import RateLimit
from mcp_sessions._tokens import KeySet
from mcp_sessions._wire import jsonrpc
from mcp_sessions._wire.sse import between_events

if TYPE_CHECKING:
    from mcp_sessions._gateway.stdio._table import Table

URLS = ["http://10.0.0.1:3001/mcp", "http://10.0.0.2:3001/mcp", "http://10.0.0.3:3001/mcp"]
KEYS = KeySet.from_secret("gateway-parts-secret-gateway-parts-secret-0123")


def tagged(upstream_id: bytes) -> bytes:
    """A stand-in for the replica's signing: its tag in front (the signing is tests/unit/test_gateway_ids.py's)."""
    return b"0123abcd~" + upstream_id


def test_every_gateway_orders_a_conversations_replicas_alike_whatever_the_order_of_its_urls() -> None:
    one, other = Replicas(URLS, keys=KEYS, cooldown=10), Replicas(list(reversed(URLS)), keys=KEYS, cooldown=10)
    for number in range(50):
        key = f"conversation-{number}"
        assert [r.url for r in one.for_conversation(key)] == [r.url for r in other.for_conversation(key)]


def test_a_replica_out_of_service_moves_only_its_own_conversations() -> None:
    now = 100.0
    replicas = Replicas(URLS, keys=KEYS, cooldown=10, clock=lambda: now)
    keys = [f"k{number}" for number in range(60)]
    before = {key: replicas.for_conversation(key)[0].url for key in keys}
    assert set(before.values()) == set(URLS)
    down = replicas.all[0]
    replicas.failed(down)
    after = {key: replicas.for_conversation(key)[0].url for key in keys}
    assert all(after[key] == before[key] for key in keys if before[key] != down.url)
    assert all(after[key] != down.url for key in keys)
    assert replicas.for_conversation("k0")[-1] is down  # still tried, last: it may be back
    now += 11  # the cooldown is over: its conversations come back
    assert {key: replicas.for_conversation(key)[0].url for key in keys} == before


def test_a_conversation_served_elsewhere_while_its_replica_was_out_stays_there_once_it_returns() -> None:
    """Issue 101, why-item 3: a conversation another replica served while its own was out moved back as its own
    returned, to a replica that never served it (a second wave of -32043 after a rolling restart): it stays where it
    is served, until that one is out; the one that its own serves again is its own's, as before."""
    now = 100.0
    replicas = Replicas(URLS, keys=KEYS, cooldown=10, clock=lambda: now)
    down = replicas.all[0]
    keys = [key for key in (f"k{number}" for number in range(60)) if replicas.for_conversation(key)[0] is down]
    replicas.failed(down)
    serving = {key: replicas.for_conversation(key)[0] for key in keys}
    moved, unserved = keys[: len(keys) // 2], keys[len(keys) // 2 :]
    for key in moved:
        replicas.served(key, serving[key])
    now += 11  # back in service
    assert all(replicas.for_conversation(key)[0] is serving[key] for key in moved)
    assert all(replicas.for_conversation(key)[0] is down for key in unserved)  # never served elsewhere: its own
    replicas.failed(serving[moved[0]])  # where it stays is out: its own again, and remembered so once it answers
    assert replicas.for_conversation(moved[0])[0] is down
    replicas.served(moved[0], down)
    now += 11
    assert replicas.for_conversation(moved[0])[0] is down


@pytest.mark.parametrize(
    ("urls", "message"),
    [
        ([], "one upstream URL"),
        (["ftp://h/mcp"], "http:// or https://"),
        (["http://a/mcp", "http://b/other"], "same MCP endpoint path"),
        (["http://a/mcp?x=1"], "without a query"),
        (["http://user:secret@a/mcp"], "carries no credentials"),
    ],
)
def test_replica_urls_are_checked_at_start(urls: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Replicas(urls, keys=KEYS, cooldown=10)


def test_the_least_loaded_replica_comes_first() -> None:
    replicas = Replicas(URLS, keys=KEYS, cooldown=10)
    replicas.all[0].in_flight, replicas.all[1].in_flight, replicas.all[2].in_flight = 3, 0, 5
    assert replicas.least_loaded()[0] is replicas.all[1]


def test_the_response_loses_its_hop_by_hop_headers_and_its_transport_session_gets_the_tag() -> None:
    raw = [
        (b"Content-Type", b"text/event-stream"),
        (b"Connection", b"keep-alive, X-Upstream-Hop"),
        (b"X-Upstream-Hop", b"1"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Mcp-Session-Id", b"abc"),
        (b"WWW-Authenticate", b"Bearer realm=x"),
    ]
    assert client_headers(raw, tagged, "http://10.0.0.1:3001") == [
        (b"content-type", b"text/event-stream"),
        (b"mcp-session-id", b"0123abcd~abc"),
        (b"www-authenticate", b"Bearer realm=x"),
    ]
    assert client_headers(raw, lambda upstream_id: None, "http://10.0.0.1:3001") == [  # an id it cannot carry
        (b"content-type", b"text/event-stream"),
        (b"www-authenticate", b"Bearer realm=x"),
    ]


def test_a_location_httpx_would_not_relay_and_a_default_port_are_read_as_a_browser_reads_them() -> None:
    """The rest of the Location table is test_gateway_hostile_upstream.py's: httpx refuses these from an upstream."""
    for kept in (b"http://10.0.0.1:3001/\t/evil.example/x", b"http://10.0.0.1:3001.example/"):  # tab: //evil...
        assert client_headers([(b"location", kept)], tagged, "http://10.0.0.1:3001") == [(b"location", kept)]
    assert client_headers([(b"location", b"https://up.example:443/a")], tagged, "https://up.example") == [
        (b"location", b"/a")
    ]


@pytest.mark.parametrize(
    ("tail", "between"),
    [
        (b"\n\n", True),
        (b"\r\n\r\n", True),
        (b"\r\r", True),
        (b"\n\r\n", True),
        (b"x\r\n", False),
        (b"data", False),
        (b"a\n", False),
        (b"\n\r", True),
    ],
)
def test_a_keepalive_goes_only_between_two_events(tail: bytes, between: bool) -> None:
    assert between_events(tail) is between


def test_a_keepalive_never_splits_an_event_however_the_stream_is_cut() -> None:
    """Fed to an SSE parser, a stream with keep-alives wherever allowed gives the same events as without."""
    rng = random.Random(7)
    events = [f"data: {''.join(rng.choices(string.ascii_letters, k=5))}" for _ in range(20)]
    stream = "".join(event + rng.choice(["\n\n", "\r\n\r\n", "\ndata: more\n\n"]) for event in events).encode()
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(stream)), 15))
        out, tail, start = b"", b"\n\n", 0
        for cut in [*cuts, len(stream)]:
            if between_events(tail):
                out += b": keep-alive\n\n"
            chunk = stream[start:cut]
            out += chunk
            tail, start = (tail + chunk)[-4:], cut
        assert _data_of(out) == _data_of(stream)


def _data_of(stream: bytes) -> list[str]:
    """The data of each dispatched event, by the WHATWG rules (CR LF, LF or CR end a line)."""
    text = stream.decode().replace("\r\n", "\n").replace("\r", "\n")
    found: list[str] = []
    data: list[str] = []
    for line in text.split("\n"):
        if not line:
            if data:
                found.append("\n".join(data))
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
    return found


def test_the_gateways_door_is_the_sdks_rule() -> None:
    """A foreign Host's 421 is test_gateway.py's, through a gateway process."""
    origin = HostCheck(None, None).check([(b"host", b"localhost:1"), (b"origin", b"http://evil.example")])
    assert origin is not None
    assert origin.status == 403
    assert HostCheck([], []).check([(b"host", b"anything")]) is None
    assert HostCheck(["mcp.example.com"], []).check([(b"host", b"mcp.example.com")]) is None
    with pytest.raises(TypeError):
        HostCheck("mcp.example.com", None)


def test_the_endpoint_is_matched_as_a_lenient_server_routes_it() -> None:
    paths = RoutedPaths(["/mcp"])
    for path in ("/mcp", "/MCP", "/mcp/", "/Mcp;jsessionid=1", "/mcp;x/"):
        assert path in paths, path
    for path in ("/mcp/x", "/mcpx", "/", "/x/mcp"):
        assert path not in paths, path
    assert "/" in RoutedPaths(["/"])
    assert "/mcp/" in RoutedPaths(["/mcp/"])
    assert "/mcp" in RoutedPaths(["/mcp/"])


def test_trusted_proxies_are_uvicorns_and_nothing_else() -> None:
    assert trusted_proxies(None) == trusted_proxies("") == trusted_proxies([]) == []
    assert trusted_proxies(" 10.0.0.0/8, 192.0.2.1 ,::1") == ["10.0.0.0/8", "192.0.2.1", "::1"]
    assert trusted_proxies(["*", "10.0.0.1"]) == ["*"]
    for wrong in ("10.0.0.1/8", "proxy.example", "10.0.0"):
        with pytest.raises(ValueError, match="forwarded_allow_ips"):
            trusted_proxies(wrong)


def test_a_per_address_limit_counts_the_principal_and_the_address_both() -> None:
    limit = RateLimit(2, 600, per_address=True)
    one, other = {"client": ("192.0.2.1", 1)}, {"client": ("192.0.2.2", 1)}
    assert [limit.take_for(one, "a"), limit.take_for(one, "b")] == [0.0, 0.0]
    assert limit.take_for(one, "made-up") > 0  # the address has spent its two, whatever the credential
    assert limit.take_for(other, "c") == limit.take_for(other, "a") == 0.0  # a has one left, the other address two
    assert limit.take_for(other, "a") > 0  # a has spent its two, from whichever address
    alone = RateLimit(2, 600)  # the middleware's: the principal alone
    assert [alone.take_for(one, f"credential-{n}") for n in range(5)] == [0.0] * 5


@pytest.mark.anyio
async def test_a_token_whose_exp_has_a_fraction_is_verified_and_ends_at_its_whole_second() -> None:
    """RFC 7519's NumericDate may have a fraction; the SDK's ``AccessToken.expires_at`` takes whole seconds: it is
    the second the token expires in (never later), where pydantic raised a ValidationError, neither a verified token
    nor a refusal."""
    key = {"kty": "oct", "kid": "k1", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTAxMjM0NQ", "alg": "HS256"}
    exp = time.time() + 600.75
    token = jwt.encode({"sub": "u", "iss": "i", "aud": "a", "exp": exp}, jwt.PyJWK(key).key, "HS256", {"kid": "k1"})
    with serve(Starlette(routes=[Route("/jwks.json", lambda request: JSONResponse({"keys": [key]}))])) as url:
        verifier = JwtVerifier(url + "/jwks.json", issuer="i", audience="a")
        with anyio.fail_after(5):
            async with verifier.running():
                access = await verifier.verify(token)
    assert access.expires_at == int(exp)


@pytest.mark.anyio
async def test_a_stale_key_set_is_fetched_behind_the_request_in_a_task_of_the_lifespan() -> None:
    """The request that finds the set stale goes on with the key it has while the fetch, on a worker thread, runs
    in the lifespan's task group; the lifespan's end does not wait for a fetch still under way. The JWKS is served
    on loopback (its second fetch held until the test lets it go); the verifier's clock is the test's."""
    key = {"kty": "oct", "kid": "k1", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTAxMjM0NQ", "alg": "HS256"}
    token = jwt.encode(
        {"sub": "u", "iss": "i", "aud": "a", "exp": int(time.time()) + 600}, jwt.PyJWK(key).key, "HS256", {"kid": "k1"}
    )
    asked, released, fetches = threading.Event(), threading.Event(), []

    def keys(request: Request) -> JSONResponse:
        fetches.append(request)
        if len(fetches) > 1:  # the refresh: held until the test lets it go
            asked.set()
            released.wait(10)
        return JSONResponse({"keys": [key]})

    now = [0.0]
    with serve(Starlette(routes=[Route("/jwks.json", keys)])) as url:
        verifier = JwtVerifier(url + "/jwks.json", issuer="i", audience="a", clock=lambda: now[0])
        try:
            with anyio.fail_after(5):
                async with verifier.running():
                    assert verifier.state()["keys"] == 1
                    assert len(fetches) == 1
                    now[0] += JWKS_LIFESPAN + 1  # stale, its cooldown over
                    assert (await verifier.verify(token)).subject == "u"  # not held by the fetch it started
                    assert await anyio.to_thread.run_sync(asked.wait, 5), "the stale set was not fetched again"
                # The lifespan has ended; the fetch is still held.
                assert not released.is_set()
        finally:
            released.set()


def ending(ended: MCPError) -> Table:
    """The table as the guard of the SDK's transport asks it: a request's conversation claimed (none here), and a
    request in flight as its transport session ends told ``ended``."""

    async def claim(scope: Scope) -> None:
        return None

    return cast("Table", SimpleNamespace(claim=claim, unanswered=lambda raw, stopping: ended))


@pytest.mark.anyio
async def test_a_request_in_flight_as_its_transport_session_ends_gets_its_answer_or_the_error_of_the_end() -> None:
    """The ``mcp`` SDK's transport, as a 2025 session's end (its client's ``DELETE``, or the gateway's at the end of
    its process) lands at each step of a request in flight, ends the request's event stream with no answer, or
    leaves it unfinished (CI: ``httpx.RemoteProtocolError``); in the gateway, the request gets its conversation's
    end. The layers as the gateway has them (the sessions placed at the SDK's endpoint, in front of the guard of its
    transport); httpx's body in two messages, read whole by the sessions alone (and refused past ``max_body_size``)."""
    server = MCPServer("racing")
    unprotected = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    ended = MCPError(-32603, "the server process of this conversation has ended (exited)")
    config = _sessions_config(SessionsConfig(secret=SECRET, max_body_size=1000), None, replica=False)
    sdk = _under_sessions(server.streamable_http_app(transport_security=unprotected), ending(ended))
    app = MCPSessionMiddleware(sdk, config=config)

    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
    hello: dict[str, object] = {"protocolVersion": "2025-11-25", "capabilities": {}}
    hello["clientInfo"] = {"name": "racing", "version": "1"}
    found: list[object] = []

    async def ping(http: httpx.AsyncClient, session: dict[str, str]) -> None:
        answer = (await http.post("/mcp", json=jsonrpc.request(1, "ping"), headers=session)).text
        parsed = jsonrpc.loads(answer.partition("data: ")[2] or answer)
        found.append(parsed.get("result", parsed.get("error")))

    transport = httpx.ASGITransport(app)
    async with server.session_manager.run(), httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        for steps in range(12):  # the end after 0, 1, ... steps of the ping: after its answer by the last
            opened = await http.post("/mcp", json=jsonrpc.request(0, "initialize", hello), headers=headers)
            session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(ping, http, session)
                for _ in range(steps):
                    await anyio.lowlevel.checkpoint()
                await http.delete("/mcp", headers=session)
        large = await http.post("/mcp", json=jsonrpc.request(2, "ping", {"_": "x" * 1000}), headers=session)

    error, not_found = ended.error.model_dump(exclude_none=True), {"code": -32600, "message": "Session not found"}
    assert all(answer in ({}, error, not_found) for answer in found), found
    assert found[-1] == {}
    assert error in found
    assert large.status_code == 413
    assert "too large (limit 1000 bytes)" in large.json()["error"]["message"]


@pytest.mark.anyio
async def test_each_request_to_the_stdio_servers_transport_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard of the SDK's transport (its ids in flight, the answer of a call cut) reads the id the sessions parsed
    (``REQUEST_ID``), never the body: one parse of each body on its way, a 2025 transport session's request too (it
    was read whole and parsed again there: 2 MiB more held, and its parse, for each such request)."""
    server = MCPServer("once")
    unprotected = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    ended = MCPError(-32603, "the server process of this conversation has ended (exited)")
    config = _sessions_config(SessionsConfig(secret=SECRET), None, replica=False)
    sdk = _under_sessions(server.streamable_http_app(transport_security=unprotected), ending(ended))
    parsed: list[bytes | str] = []
    loads = jsonrpc.loads

    def counted(body: bytes | str, *, answer: bool = False) -> object:
        if not answer:  # a request's body (an answer's events are read as answers)
            parsed.append(body)
        return loads(body, answer=answer)

    monkeypatch.setattr(jsonrpc, "loads", counted)
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
    hello: dict[str, object] = {"protocolVersion": "2025-11-25", "capabilities": {}}
    hello["clientInfo"] = {"name": "once", "version": "1"}
    transport = httpx.ASGITransport(MCPSessionMiddleware(sdk, config=config))
    async with server.session_manager.run(), httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        opened = await http.post("/mcp", json=jsonrpc.request(0, "initialize", hello), headers=headers)
        session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
        del parsed[:]
        answer = await http.post("/mcp", json=jsonrpc.request("7", "ping"), headers=session)

    assert parsed == [jsonrpc.dumps(jsonrpc.request("7", "ping"))]
    assert loads(answer.text.partition("data: ")[2] or answer.text) == jsonrpc.result("7", {})


@pytest.mark.anyio
async def test_a_2025_request_under_disk_state_is_read_once_and_once_a_pass_when_reopened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under ``--conversation-state disk``, ``_Reopened`` stands in front of the SDK's app, whose route holds the
    sessions (placed at its endpoint): it keeps what they read, to send a request again in a transport session it
    opened after a 404, and reads no body itself (it read each 2025 POST whole first, a second 2 MiB held and
    copied for every such request). A request in a session the SDK has: its body read and parsed once; one the
    SDK no longer has: once in each pass through the sessions (the 404, then in the session opened for it, whose
    ``initialize`` and ``notifications/initialized`` are the reopening's own)."""
    server = MCPServer("reopened")
    unprotected = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    ended = MCPError(-32603, "the server process of this conversation has ended (exited)")
    config = _sessions_config(SessionsConfig(secret=SECRET), None, replica=False)
    sdk = _under_sessions(server.streamable_http_app(transport_security=unprotected), ending(ended))
    # "shared": no per-conversation count to keep; its config, for the bound on a body read whole
    children = cast("Table", SimpleNamespace(mode="shared", config=config))
    reads: list[bytes] = []
    parsed: list[bytes | str] = []
    loads = jsonrpc.loads

    async def read(receive: Receive, declared: bytes | None, limit: int) -> bytes | object | None:
        body = await read_body(receive, declared, limit)
        reads.append(body if type(body) is bytes else b"")
        return body

    def counted(body: bytes | str, *, answer: bool = False) -> object:
        if not answer:
            parsed.append(body)
        return loads(body, answer=answer)

    for module in (_middleware, _stdio_server):  # wherever a body would be read whole
        monkeypatch.setattr(module, "read_body", read, raising=False)
    monkeypatch.setattr(jsonrpc, "loads", counted)
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
    headers["content-type"] = "application/json"
    hello: dict[str, object] = {"protocolVersion": "2025-11-25", "capabilities": {}}
    hello["clientInfo"] = {"name": "once", "version": "1"}
    ping = jsonrpc.dumps(jsonrpc.request("7", "ping"))
    transport = httpx.ASGITransport(MCPSessionMiddleware(_Reopened(sdk, children, _Declared(config)), config=config))
    async with server.session_manager.run(), httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        opened = await http.post("/mcp", json=jsonrpc.request(0, "initialize", hello), headers=headers)
        session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
        del reads[:], parsed[:]
        answer = await http.post("/mcp", content=ping, headers=session)
        assert (reads, parsed) == ([ping], [ping])
        assert loads(answer.text.partition("data: ")[2] or answer.text) == jsonrpc.result("7", {})

        del reads[:], parsed[:]
        minted = TransportIds(config.keys).sign(_TAG, b"a1b2c3d4e5f60718293a4b5c6d7e8f90")  # before a restart
        assert minted is not None
        held = {**headers, "mcp-session-id": minted.decode()}
        answer = await http.post("/mcp", content=ping, headers=held)
        assert answer.status_code == 200 and answer.headers["mcp-session-id"] == held["mcp-session-id"]
        assert loads(answer.text.partition("data: ")[2] or answer.text) == jsonrpc.result("7", {})
    assert reads == parsed
    assert [body for body in reads if b'"ping"' in body] == [ping, ping]
