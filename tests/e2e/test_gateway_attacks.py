"""Attacks on the gateway's request side (issue 50), through a real ``mcp-sessions gateway`` process (its
access log and its HTTP parser are what some tests attack) or, where only the app is, ``gateway_app`` in
process behind Starlette's ``TestClient`` (:func:`in_front`).

The upstream is an ``MCPServer`` wrapped in a :class:`Recorder` that keeps every request it received: its
method, target, headers and body. What the upstream saw is the proof: no token the gateway minted, no
request the gateway should have refused, no header the client forged. Malformed request lines and framing
that httpx would refuse to send go over raw sockets.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import Response as Answer
from starlette.routing import Route

from _mcp import LEGACY, MODERN, era_session, jwt_claims, legacy_request, messages, modern_headers
from _mcp import era_post as post
from _mcp import era_request as request
from _waits import WITHIN, Deadline, until
from conftest import in_process, serve
from e2e._gateway import (
    JSON_SSE,
    SECRET,
    Process,
    Recorder,
    everything_server,
    gateway_process,
    legacy_initialize,
    result_of,
    upstream_server,
)
from mcp_sessions import SessionsConfig, gateway_app

SESSION_META = "io.modelcontextprotocol/session"
FAKE_PARENT = "00000000000000000000000000000001"
CLIENT_PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
IN_PROCESS = "http://127.0.0.1:8000"
Response = httpx.Response | httpx2.Response  # Starlette's TestClient is built on httpx2


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    server = upstream_server("recorded")
    return Recorder(server.streamable_http_app(stateless_http=True, json_response=True))


@pytest.fixture(scope="module")
def upstream(recorder: Recorder) -> Iterator[str]:
    with serve(recorder) as url:
        yield url + "/mcp"


@pytest.fixture(scope="module")
def sink() -> Iterator[tuple[Recorder, int]]:
    """Another server on the loopback, where a forged target would send the gateway: what reached it, its port."""
    recorded = Recorder(upstream_server("sink").streamable_http_app(stateless_http=True))
    with serve(recorded) as url:
        yield recorded, httpx.URL(url).port or 0


@pytest.fixture(scope="module")
def gateway(upstream: str) -> Iterator[Process]:
    """The gateway as deployed: its access log on, no proxy trusted."""
    with gateway_process([upstream], "--log-level", "info") as process:
        yield process


def in_front(upstream: str, **options: Any) -> Any:
    """``gateway_app`` in front of ``upstream``, called in process from 127.0.0.1 (conftest's ``in_process``);
    ``options``: ``gateway_app``'s, ``config`` a dict of ``SessionsConfig``'s."""
    config = SessionsConfig(secret=SECRET, **options.pop("config", {}))
    return in_process(gateway_app([upstream], config=config, **options), client=("127.0.0.1", 50000))


@pytest.fixture(scope="module")
def trusting(upstream: str) -> Iterator[httpx.Client]:
    """A gateway that trusts the loopback as its proxy (``forwarded_allow_ips``)."""
    with in_front(upstream, forwarded_allow_ips="127.0.0.1") as client:
        yield client


def exchange(port: int, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """A raw HTTP/1.1 exchange: ``head`` (its lines, without the blank line), then ``body``; the status and
    everything that came back before the server closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=WITHIN) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode("latin-1") + b"\r\n\r\n" + body)
        received = b""
        closed = Deadline("the gateway did not close the connection")
        while chunk := sock.recv(65536):
            received += chunk
            closed.check()
    return int(received.split(b" ", 2)[1]), received


def seen_call(era: str, id: int = 2, meta: dict[str, Any] | None = None) -> Any:
    return request(era, "tools/call", {"name": "seen", "arguments": {}}, id=id, **(meta or {}))


# -- 1. request targets ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_line", "status"),
    [
        ("GET @127.0.0.1:{sink}/admin", 400),  # the upstream's address as userinfo: an SSRF
        ("GET @127.0.0.1:{sink}/mcp", 400),
        ("POST http://127.0.0.1:{sink}/mcp", 400),  # the absolute form
        ("GET http://127.0.0.1:{sink}/admin", 400),
        ("CONNECT 127.0.0.1:{sink}", 400),  # the authority form
        ("GET *", 400),
        ("POST *", 400),
        ("OPTIONS *", 200),  # the answer a server gives it
        ("OPTIONS *?x=1", 400),
        ("GET 0/x", 400),
        ("GET :{sink}/x", 400),
        ("GET mcp", 400),
        ("GET /mcp#fragment", 400),
        ("GET /mcp?b#c", 400),
        ("GET /mcp?a=\x01", 400),
    ],
)
def test_only_origin_form_targets_are_forwarded(
    gateway: Process, recorder: Recorder, sink: tuple[Recorder, int], request_line: str, status: int
) -> None:
    reached, sink_port = sink
    before, sunk = len(recorder.seen), len(reached.seen)
    line = request_line.format(sink=sink_port)
    got, answer = exchange(gateway.port, f"{line} HTTP/1.1\nHost: 127.0.0.1:{gateway.port}\nConnection: close")
    assert got == status, answer
    assert recorder.since(before) == []
    assert reached.since(sunk) == []  # nothing was forwarded anywhere


@pytest.mark.parametrize("target", ["/a/b%20c;p=1/?q=%2e%2e/x&r=@h:1", "/caf%C3%A9", "/a/...b/..c"])
def test_the_upstream_url_is_the_configured_origin_and_the_clients_path(
    gateway: Process, recorder: Recorder, target: str
) -> None:
    before = len(recorder.seen)
    got, answer = exchange(gateway.port, f"GET {target} HTTP/1.1\nHost: 127.0.0.1:{gateway.port}\nConnection: close")
    assert got == 404, answer  # the upstream's own answer
    [seen] = recorder.since(before)
    assert seen.target == target.encode()


# -- 2. paths two parsers read apart ----------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "forwarded"),
    [
        ("/x/../mcp", False),
        ("/./mcp", False),
        ("/x/%2e%2e/mcp", False),
        ("/x/.%2E/mcp", False),
        ("/x/%2E/../mcp", False),
        ("/mcp/.", False),
        ("//mcp", False),
        ("/x//../mcp", False),
        ("/x\\..\\mcp", False),
        ("/x%2f..%2fmcp", False),
        ("/x%5c..%5cmcp", False),
        ("/mcp%00", False),
        ("/mcp%0a", False),
        ("/m%zzcp", False),
        ("/mcp", True),  # the endpoint: the session pipeline refuses the forged session itself
        ("/MCP", True),  # what a lenient upstream routes to its endpoint: the pipeline judges it too
        ("/mcp/", True),
        ("/Mcp;jsessionid=1", True),
    ],
)
def test_a_forged_session_never_reaches_a_tool_by_another_spelling_of_the_path(
    gateway: Process, recorder: Recorder, path: str, forwarded: bool
) -> None:
    """The session pipeline judges every request the upstream could take for its endpoint's; a path that two
    parsers could read as two paths is refused before either reads it."""
    before = len(recorder.seen)
    body = json.dumps(seen_call(MODERN, meta={SESSION_META: {"sessionId": "a.forged.token"}}))
    head = "\n".join(
        [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{gateway.port}", "Connection: close"]
        + [f"{name}: {value}" for name, value in modern_headers(json.loads(body)).items()]
        + [f"Content-Length: {len(body)}"]
    )
    status, answer = exchange(gateway.port, head, body.encode())
    saw = recorder.since(before)
    assert all("tools/call" not in seen.methods() for seen in saw), answer  # the tool never ran
    if not forwarded:
        assert (status, saw) == (400, []), answer
    else:
        assert [seen.methods() for seen in saw] == [["mcp-sessions/probe"]]  # asked first, then judged
        assert status != 500
        assert b'"content"' not in answer


def test_a_lenient_upstream_gets_no_request_the_pipeline_did_not_judge() -> None:
    """server-everything's Express serves its endpoint in any case and with a trailing slash: a forged session
    there gets the gateway's -32043, as at the endpoint's own path, and the tool never runs."""
    with everything_server() as upstream, in_front(upstream) as client:
        for path in ("/mcp", "/MCP", "/mcp/"):
            url = IN_PROCESS + path
            later = legacy_initialize(client, url)
            forged = {SESSION_META: {"sessionId": "a.forged.token"}}
            body = legacy_request("tools/call", {"name": "echo", "arguments": {"message": "ran"}}, id=5, meta=forged)
            answer = messages(client.post(url, json=body, headers=later))
            assert answer[0]["error"]["code"] == -32043, (path, answer)


def test_a_body_the_pipeline_cannot_read_never_reaches_the_upstream() -> None:
    """server-everything (node) reads a byte that is not UTF-8 as U+FFFD: a forged session in such a body, which the
    pipeline did not read, ran the tool unjudged ("Echo: ..."). The gateway reads as strictly as any server may, and
    refuses what it cannot read: 400, -32700, nothing forwarded."""
    forged = {SESSION_META: {"sessionId": "a.forged.token"}}
    body = legacy_request("tools/call", {"name": "echo", "arguments": {"message": "@"}}, id=5, meta=forged)
    content = json.dumps(body).encode().replace(b'"@"', b'"ran\xff"')
    with everything_server() as upstream, in_front(upstream) as client:
        later = legacy_initialize(client, IN_PROCESS + "/mcp")
        answer = client.post(IN_PROCESS + "/mcp", content=content, headers=later)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == -32700


# -- 3. framing -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("framing", "body"),
    [
        ("Content-Length: 5\nTransfer-Encoding: chunked", b"2a\r\n" + b"x" * 42 + b"\r\n0\r\n\r\n"),
        ("Transfer-Encoding: chunked\nContent-Length: 5", b"5\r\nhello\r\n0\r\n\r\n"),
        ("Content-Length: 5\nContent-Length: 6", b"hello!"),
        ("Content-Length: 5, 6", b"hello!"),
        ("Content-Length: +5", b"hello"),
        ("Content-Length: -1", b"hello"),
        ("Transfer-Encoding: gzip, chunked", b"0\r\n\r\n"),
        ("Transfer-Encoding: chunked\nTransfer-Encoding: chunked", b"0\r\n\r\n"),
        ("Host: evil.example\nContent-Length: 5", b"hello"),  # a second Host
    ],
)
def test_ambiguous_framing_is_refused_before_anything_is_forwarded(
    gateway: Process, recorder: Recorder, framing: str, body: bytes
) -> None:
    before = len(recorder.seen)
    for path in ("/mcp", "/upload"):  # the session pipeline's path, and one streamed through
        head = f"POST {path} HTTP/1.1\nHost: 127.0.0.1:{gateway.port}\nContent-Type: application/json\n{framing}"
        status, answer = exchange(gateway.port, head + "\nConnection: close", body)
        assert status in (400, 501), answer  # 501: h11's own answer to a coding it does not know
        assert b"\r\nconnection: close\r\n" in answer.lower(), answer
    assert recorder.since(before) == []


@pytest.mark.parametrize("framing", ["Content-Length: {n}", "Transfer-Encoding: chunked", "Content-Length: {n}\n" * 2])
def test_a_body_reaches_the_upstream_framed_as_it_was_sent(gateway: Process, recorder: Recorder, framing: str) -> None:
    payload = b'{"upload": "' + b"y" * 3000 + b'"}'
    chunked = "chunked" in framing
    framed = b"%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload) if chunked else payload
    framing = framing.format(n=len(payload)).strip()  # twice the same length: one framing, taken
    before = len(recorder.seen)
    head = f"POST /upload HTTP/1.1\nHost: 127.0.0.1:{gateway.port}\nContent-Type: text/plain\n{framing}"
    status, _ = exchange(gateway.port, head + "\nConnection: close", framed)
    [seen] = recorder.since(before)
    assert status == 404
    assert seen.body == payload  # the body the client sent, whole, and nothing after it
    length, coding = seen.header("content-length"), seen.header("transfer-encoding")
    assert (length, coding) in ((str(len(payload)), None), (None, "chunked"))


# -- 5. forwarded headers --------------------------------------------------------------------

FORGED = {
    "X-Forwarded-For": "203.0.113.7",
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Host": "attacker.example",
    "X-Forwarded-Prefix": "/evil",
    "Forwarded": "for=203.0.113.7;host=attacker.example;proto=https",
    "X-Real-IP": "203.0.113.7",
}


@pytest.mark.parametrize("trusted", [False, True])
def test_forwarded_headers_reach_the_upstream_only_from_a_trusted_proxy(
    upstream: str, recorder: Recorder, http: httpx.Client, request: pytest.FixtureRequest, trusted: bool
) -> None:
    if trusted:
        client, base = request.getfixturevalue("trusting"), IN_PROCESS
    else:
        client, base = http, request.getfixturevalue("gateway").url("")
    before = len(recorder.seen)
    client.get(base + "/health", headers=FORGED)
    [seen] = recorder.since(before)
    assert seen.header("host") == httpx.URL(upstream).netloc.decode()  # the upstream's own Host, not the client's
    got = {name: seen.header(name.lower()) for name in FORGED}
    if trusted:  # what the proxy in front said, its own address last in X-Forwarded-For
        assert got == {**FORGED, "X-Forwarded-For": "203.0.113.7, 127.0.0.1"}
    else:  # the gateway's own: the peer, the scheme and the Host it was connected on
        assert got == {
            "X-Forwarded-For": "127.0.0.1",
            "X-Forwarded-Proto": "http",
            "X-Forwarded-Host": httpx.URL(base).netloc.decode(),
            "X-Forwarded-Prefix": None,
            "Forwarded": None,
            "X-Real-IP": None,
        }


def set_cookie(request: Request) -> Answer:
    """Every answer of the upstream sets a cookie, as a server's session cookie or a load balancer's does."""
    return Answer(headers={"set-cookie": "upstream-session=alices; Path=/"})


def test_an_upstreams_cookie_is_its_clients_alone_and_the_upstream_gets_only_what_the_client_sent() -> None:
    """The gateway keeps no cookie: Alice gets hers, and Bob's request, which carries none, reaches the
    upstream without it. Nor does the gateway add headers of its HTTP client's own (``User-Agent``,
    ``Accept-Encoding``, ``Connection``): the upstream gets the client's, and the forwarding headers."""
    recorded = Recorder(Starlette(routes=[Route("/health", set_cookie)]))
    with serve(recorded) as url, in_front(url + "/mcp") as client:
        assert client.get("/health").headers["set-cookie"] == "upstream-session=alices; Path=/"
        client.cookies.clear()
        client.headers.clear()  # Bob: no cookie, no header of his own
        assert client.get("/health").status_code == 200
    alice, bob = recorded.seen
    assert alice.header("cookie") is None
    assert bob.header("cookie") is None
    forwarding = {b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host"}
    assert {name for name, _ in bob.headers} == {b"host", *forwarding}


def test_an_upstream_that_compresses_still_answers_with_the_session_echo() -> None:
    """An upstream behind Starlette's ``GZipMiddleware`` (every answer compressed, however short): the probe
    and every request whose answer the gateway reads ask it for none (``Accept-Encoding: identity``), so a
    session is created and the answer carries its echo; a request whose answer it leaves alone keeps the
    client's ``Accept-Encoding``, and comes compressed."""
    app = upstream_server("compressing").streamable_http_app(stateless_http=True, json_response=True)
    recorded = Recorder(GZipMiddleware(app, minimum_size=0))
    with serve(recorded) as url, in_front(url + "/mcp") as http:
        token = era_session(http, "/mcp", MODERN)
        called = post(http, "/mcp", MODERN, seen_call(MODERN, meta={SESSION_META: {"sessionId": token}}))
        listed = post(http, "/mcp", MODERN, request(MODERN, "tools/list", id=3))
    assert called.headers.get("content-encoding") is None
    assert result_of(called, 2)["result"]["_meta"][SESSION_META]["sessionId"] == token
    assert listed.headers["content-encoding"] == "gzip"
    assert result_of(listed, 3)["result"]["tools"]
    asked = [seen.header("accept-encoding") for seen in recorded.seen]
    assert asked == ["identity", "identity", "gzip, deflate"]  # the probe, the call, the list as the client asked


# -- 9. the access log -----------------------------------------------------------------------


@pytest.mark.parametrize("target", ["/oauth/callback?code=SECRET-CODE-9f2&state=s", "/messages/?session_id=SECRET-SSE"])
def test_the_access_log_has_no_query_string(gateway: Process, http: httpx.Client, target: str) -> None:
    http.get(gateway.url(target))
    path = target.partition("?")[0]
    until(lambda: f'"GET {path} HTTP/1.1" 404' in gateway.output(), "the access log line, without its query")
    output = gateway.output()
    assert "SECRET" not in output


# -- 10. the create limit --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("varies", "trusted", "created"),
    [
        ("credential", False, 3),  # made-up credentials: one address, one budget
        ("forwarded-for", False, 3),  # a forged X-Forwarded-For names no other client
        ("forwarded-for", True, 8),  # a trusted proxy's clients are told apart by the address it forwards
        ("credential", True, 3),
    ],
)
def test_made_up_credentials_do_not_multiply_one_addresses_create_budget(
    upstream: str, varies: str, trusted: bool, created: int
) -> None:
    trusting = "127.0.0.1" if trusted else None
    with in_front(upstream, config={"create_limit": (3, 600)}, forwarded_allow_ips=trusting) as client:
        statuses = []
        for number in range(8):
            varied = {"Authorization": f"Bearer made-up-{number}"} if varies == "credential" else {}
            if varies == "forwarded-for":
                varied["X-Forwarded-For"] = f"198.51.100.{number}"
            statuses.append(
                post(client, IN_PROCESS + "/mcp", MODERN, request(MODERN, "sessions/create"), **varied).status_code
            )
    assert statuses.count(200) == created, statuses
    assert statuses.count(429) == 8 - created, statuses


# -- 12. no secret of the gateway's reaches the upstream ---------------------------------------


@pytest.mark.parametrize("era", [MODERN, LEGACY])
def test_no_token_the_gateway_minted_reaches_the_upstream(
    gateway: Process, recorder: Recorder, http: httpx.Client, era: str
) -> None:
    """Every way a client sends the gateway's tokens back (``_meta``, the session methods' params,
    ``Mcp-Session-Id``), forwarded or probed: the upstream gets none of their bytes, only the stable id."""
    url, before = gateway.url(), len(recorder.seen)
    token = era_session(http, url, era)
    sid = jwt_claims(token)["sid"]
    state = SessionsConfig(secret=SECRET).keys.sign_state(sid, {"step": 1})
    session = {"sessionId": token, "state": state}
    header = {"Mcp-Session-Id": token} if era == MODERN else {}
    called = post(http, url, era, seen_call(era, meta={SESSION_META: session}), **header)
    assert result_of(called, 2)["result"]["_meta"][SESSION_META]["sessionId"] == token
    secrets = [token, state]
    for method in ("GET", "DELETE"):  # ordinary requests with the header: passed through, without it
        headers = {**JSON_SSE, "MCP-Protocol-Version": era, "Mcp-Session-Id": token}
        with http.stream(method, url, headers=headers) as response:  # a GET may open an event stream: left at once
            assert response.status_code != 500
    deleted = post(http, url, era, request(era, "sessions/delete", id=12, **{SESSION_META: session}))
    assert deleted.status_code == 200, deleted.text
    gone = post(http, url, era, seen_call(era, id=13, meta={SESSION_META: session}), **header)  # -32043, probed first
    assert messages(gone)[0]["error"]["code"] == -32043
    saw = recorder.since(before)
    methods = [method for seen in saw for method in seen.methods()]
    assert methods.count("tools/call") >= 1
    assert methods.count("mcp-sessions/probe") >= 3  # what the proof covers
    assert {seen.method for seen in saw} >= {"GET", "DELETE", "POST"}
    for secret in secrets:
        assert not [seen.blob() for seen in saw if secret.encode() in seen.blob()]
    assert any(seen.header("baggage") == f"gen_ai.conversation.id={sid}" for seen in saw)  # the stable id goes


# -- 13. the probe's trace context -----------------------------------------------------------


@pytest.mark.parametrize("client_trace", [None, CLIENT_PARENT])
def test_a_probe_carries_no_trace_context_and_a_request_the_clients_own(
    gateway: Process, recorder: Recorder, http: httpx.Client, client_trace: str | None
) -> None:
    url, before = gateway.url(), len(recorder.seen)
    traced = {} if client_trace is None else {"traceparent": client_trace}
    token = era_session(http, url, MODERN, **traced)  # answered by the gateway, after a probe
    post(http, url, MODERN, seen_call(MODERN, meta={SESSION_META: {"sessionId": token}}), **traced)  # forwarded
    probe, call = recorder.since(before)
    assert probe.methods() == ["mcp-sessions/probe"]
    assert call.methods() == ["tools/call"]
    assert probe.header("traceparent") is None
    assert probe.header("tracestate") is None
    if client_trace is not None:  # the client's trace: as it came (the gateway records no span here), or continued
        assert (call.header("traceparent") or "").split("-")[1] == client_trace.split("-")[1]
    assert all(FAKE_PARENT.encode() not in seen.blob() for seen in (probe, call))
