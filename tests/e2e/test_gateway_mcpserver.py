"""The gateway in front of ``MCPServer`` upstreams, both eras: their auth decides, they see the conversation.

Real uvicorn servers on 127.0.0.1 (the upstreams, and the gateway's app, ``gateway_app``), raw
HTTP and the ``mcp`` SDK's client with this project's session transport. The upstreams run no
session code: what they see of a session is what the gateway forwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from _mcp import LEGACY, MODERN, jwt_claims, legacy_request, messages, modern_headers, modern_request, sse_events
from _mcp import era_post as post
from _mcp import era_request as request
from _mcp import era_session as create
from _otel import recording_provider
from _redis import free_port
from _users import bearer_auth
from _waits import WITHIN, until
from conftest import serve
from e2e._gateway import JSON_SSE, SECRET, Disconnects, legacy_initialize, result_of, upstream_server
from mcp_sessions import SessionsConfig, gateway_app
from mcp_sessions.client import SessionTransport

SESSION_META = "io.modelcontextprotocol/session"
KEEPALIVE = 0.3


def gateway(upstream: str, **options: Any) -> Any:
    config = SessionsConfig(secret=SECRET, tracer_provider=options.pop("tracer_provider", None))
    return gateway_app([upstream], config=config, keepalive=KEEPALIVE, **options)


@pytest.fixture(scope="module")
def disconnects() -> Disconnects:
    return Disconnects(upstream_server("plain").streamable_http_app(stateless_http=False))


@pytest.fixture(scope="module")
def upstream(disconnects: Disconnects) -> Iterator[str]:
    """A stateful MCPServer (SSE answers), its disconnects counted: its MCP URL."""
    with serve(disconnects) as url:
        yield url + "/mcp"


@pytest.fixture(scope="module")
def plain(upstream: str) -> Iterator[str]:
    """The gateway in front of ``upstream``: its MCP URL."""
    with serve(gateway(upstream)) as url:
        yield url + "/mcp"


@pytest.fixture(scope="module")
def authed() -> Iterator[tuple[str, str]]:
    """An MCPServer behind the SDK's own bearer auth (JSON, stateless): the gateway's URL and the upstream's."""
    app = upstream_server("authed", **bearer_auth()).streamable_http_app(stateless_http=True, json_response=True)
    with serve(app) as upstream, serve(gateway(upstream + "/mcp")) as url:
        yield url + "/mcp", upstream + "/mcp"


def seen(http: httpx.Client, url: str, era: str, token: str | None, **headers: str) -> tuple[dict[str, Any], Any]:
    """What the upstream saw of a ``seen`` call (its headers), and the echo the client got."""
    meta = {} if token is None else {SESSION_META: {"sessionId": token}}
    response = post(
        http, url, era, request(era, "tools/call", {"name": "seen", "arguments": {}}, id=2, **meta), **headers
    )
    assert response.status_code == 200, response.text
    result = result_of(response, 2)["result"]
    return json.loads(result["content"][0]["text"]), result.get("_meta", {}).get(SESSION_META)


@pytest.mark.parametrize("era", [MODERN, LEGACY])
def test_the_upstreams_auth_decides_every_session_method(authed: tuple[str, str], http: httpx.Client, era: str) -> None:
    url, upstream = authed
    refused = post(http, url, era, request(era, "sessions/create"))
    direct = post(http, upstream, era, request(era, "tools/list"))
    assert (refused.status_code, refused.content) == (direct.status_code, direct.content) == (401, direct.content)
    assert refused.headers["www-authenticate"] == direct.headers["www-authenticate"]
    alice = {"Authorization": "Bearer alice-token"}
    token = create(http, url, era, **alice)
    assert seen(http, url, era, token, **alice)[1]["sessionId"] == token
    meta = {SESSION_META: {"sessionId": token}}
    echo = request(era, "tools/call", {"name": "echo", "arguments": {"message": "x"}}, id=3, **meta)
    bob = post(http, url, era, echo, Authorization="Bearer bob-token")
    assert result_of(bob, 3)["error"]["code"] == -32043  # bob is signed in, but it is alice's session
    forged = post(http, url, era, request(era, "sessions/delete", id=4, **meta), Authorization="Bearer mallory")
    assert forged.status_code == 401  # the upstream's refusal first, as for its own methods


def test_the_mcp_sdk_client_with_the_session_transport_both_modes(plain: str) -> None:
    async def run(mode: str) -> tuple[set[str], str | None]:
        shim = SessionTransport()
        async with (
            httpx2.AsyncClient(transport=shim, timeout=WITHIN) as client_http,
            Client(streamable_http_client(plain, http_client=client_http), mode=mode) as client,
        ):
            conversations = set()
            for _ in range(2):
                result = await client.call_tool("seen", {})
                saw = json.loads(result.content[0].text)  # type: ignore[union-attr]
                conversations.add(saw["headers"].get("baggage"))
            return conversations, shim.session.id

    for mode in ("auto", "legacy"):
        conversations, session_id = anyio.run(run, mode)
        assert session_id is not None
        assert conversations == {f"gen_ai.conversation.id={session_id}"}, mode


def test_the_upstream_sees_the_gateways_span_as_its_parent(upstream: str, http: httpx.Client) -> None:
    provider, exporter = recording_provider()
    with serve(gateway(upstream, tracer_provider=provider)) as base:
        url = base + "/mcp"
        token = create(http, url, MODERN)
        client_parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        saw, _ = seen(
            http, url, MODERN, token, traceparent=client_parent, baggage="tenant=acme,gen_ai.conversation.id=spoofed"
        )
    parent = saw["headers"]["traceparent"]
    spans = {format(s.context.span_id, "016x"): s for s in exporter.get_finished_spans() if s.context}
    assert parent.split("-")[1] == "0af7651916cd43dd8448eb211c80319c"  # the client's trace, continued
    assert parent.split("-")[2] in spans  # its parent is the gateway's span
    sid = jwt_claims(token)["sid"]
    attributes = spans[parent.split("-")[2]].attributes or {}
    assert attributes["gen_ai.conversation.id"] == attributes["session.id"] == sid  # telemetry per conversation
    assert saw["headers"]["baggage"] == f"tenant=acme,gen_ai.conversation.id={sid}"


def test_hop_by_hop_headers_stop_at_the_gateway_and_end_to_end_ones_go_on(plain: str, http: httpx.Client) -> None:
    token = create(http, plain, MODERN, Authorization="Bearer kept")  # the session is bound to that credential
    saw, _ = seen(
        http,
        plain,
        MODERN,
        token,
        Connection="keep-alive, x-hop",
        **{"X-Hop": "1", "TE": "trailers", "Keep-Alive": "timeout=5", "Proxy-Authorization": "Basic eA=="},
        **{"Last-Event-ID": "7", "Authorization": "Bearer kept", "X-Custom": "kept", "Mcp-Session-Id": token},
    )
    names = set(saw["headers"])
    assert not names & {"x-hop", "te", "keep-alive", "proxy-authorization"}
    assert {"authorization", "last-event-id", "x-custom", "mcp-method", "mcp-name", "mcp-protocol-version"} <= names
    assert "mcp-session-id" not in saw["headers"]  # a 2026-07-28 session header mirrors the token: the gateway's


def test_an_upstream_that_is_down_answers_at_once_and_says_when_to_retry(http: httpx.Client) -> None:
    """A refused connection is answered at once: the client's own timeout (10 s) is far below the connect's."""
    with serve(gateway(f"http://127.0.0.1:{free_port()}/mcp", connect_timeout=60.0)) as base:
        response = post(http, base + "/mcp", MODERN, request(MODERN, "tools/list", id=9))
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == -32014
    assert response.json()["id"] == 9


def test_an_upstream_that_does_not_answer_in_time_gets_504(http: httpx.Client) -> None:
    """The answer would come after 1.5 s, a 200: the 504 is the gateway's, after its first-byte timeout."""
    server = upstream_server("slow").streamable_http_app(stateless_http=True, json_response=True)
    with serve(server) as upstream, serve(gateway(upstream + "/mcp", first_byte_timeout=0.5)) as base:
        body = request(MODERN, "tools/call", {"name": "slow", "arguments": {"seconds": 1.5}}, id=5)
        response = post(http, base + "/mcp", MODERN, body)
    assert response.status_code == 504
    assert response.json()["error"]["code"] == -32014
    assert "retry-after" in response.headers


def test_events_are_relayed_as_they_come(plain: str, http: httpx.Client) -> None:
    """The tool answers after 60 s, its progress at once: the progress arrives within the client's 10 s."""
    headers = {"Mcp-Session-Id": legacy_initialize(http, plain)["Mcp-Session-Id"]}
    body = request(LEGACY, "tools/call", {"name": "slow", "arguments": {"seconds": 60}}, id=6, progressToken="p")
    sent = {**JSON_SSE, "MCP-Protocol-Version": LEGACY, **headers}
    with http.stream("POST", plain, json=body, headers=sent) as stream:
        first = next(
            json.loads(line[5:]) for line in stream.iter_lines() if line.startswith("data:") and line[5:].strip()
        )
    assert first["method"] == "notifications/progress"  # and the client leaves: the upstream's call is cancelled


@pytest.mark.parametrize("stream_kind", ["subscriptions/listen", "GET"])
def test_a_client_that_goes_away_closes_the_upstream_stream(
    plain: str, disconnects: Disconnects, http: httpx.Client, stream_kind: str
) -> None:
    if stream_kind == "GET":  # a 2025-era transport session's own stream
        headers = {**JSON_SSE, "Accept": "text/event-stream", "MCP-Protocol-Version": LEGACY}
        method, body = "GET", None
        headers["Mcp-Session-Id"] = legacy_initialize(http, plain)["Mcp-Session-Id"]
    else:
        body = modern_request("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, id="listen-1")
        method, headers = "POST", modern_headers(body)
    before = disconnects.count
    with http.stream(method, plain, json=body, headers=headers) as stream:
        assert stream.status_code == 200
        received = b""
        for chunk in stream.iter_raw():  # what the upstream sends first, then the gateway's keep-alives
            received += chunk
            if b": keep-alive\n\n" in received:
                break
    if stream_kind != "GET":
        assert json.loads(sse_events(received.decode())[0])["method"] == "notifications/subscriptions/acknowledged"
    until(lambda: disconnects.count > before, "the upstream did not see the client go")


def test_a_hosts_conversation_id_reaches_the_upstream_in_baggage(plain: str, http: httpx.Client) -> None:
    body = request(MODERN, "tools/call", {"name": "seen", "arguments": {}}, id=2, **{"vscode.conversationId": "c%9"})
    saw = json.loads(result_of(post(http, plain, MODERN, body), 2)["result"]["content"][0]["text"])
    assert saw["headers"]["baggage"] == "gen_ai.conversation.id=c%259"  # percent-encoded, as baggage wants


def test_other_paths_are_forwarded_too(authed: tuple[str, str], http: httpx.Client) -> None:
    """The OAuth metadata the upstream's 401 points to, fetched through the gateway."""
    url, upstream = authed
    challenge = post(http, url, MODERN, request(MODERN, "tools/list")).headers["www-authenticate"]
    path = httpx.URL(challenge.split('resource_metadata="')[1].split('"')[0]).path
    through, direct = http.get(url.removesuffix("/mcp") + path), http.get(upstream.removesuffix("/mcp") + path)
    assert through.status_code == direct.status_code == 200
    assert through.json() == direct.json()


def test_an_upstream_redirect_brings_the_client_back_through_the_gateway(http: httpx.Client) -> None:
    """An upstream whose endpoint is ``/mcp/`` (as mcp 1.x's was, up to 1.11) redirects ``/mcp`` there, on its own
    origin; the client gets the redirect as a path on the gateway's, follows it, and its session works there."""
    app = upstream_server("slash").streamable_http_app(streamable_http_path="/mcp/", json_response=True)
    with serve(app) as upstream, serve(gateway(upstream + "/mcp/")) as url:
        direct = http.post(upstream + "/mcp", json=request(MODERN, "sessions/create"))
        assert (direct.status_code, direct.headers["location"]) == (307, upstream + "/mcp/")
        redirected = post(http, url + "/mcp", MODERN, request(MODERN, "sessions/create"))
        assert (redirected.status_code, redirected.headers["location"]) == (307, "/mcp/")
        with httpx.Client(timeout=10, follow_redirects=True) as following:
            token = create(following, url + "/mcp", MODERN)
            upstream_saw, echo = seen(following, url + "/mcp", MODERN, token)
    assert echo["sessionId"] == token
    assert upstream_saw["headers"]["baggage"] == f"gen_ai.conversation.id={jwt_claims(token)['sid']}"


class BodyRecorder:
    """An upstream that records when each piece of a request body arrives, and answers ``ok``."""

    def __init__(self) -> None:
        self.arrivals: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        while True:
            message = await receive()
            self.arrivals.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


def test_a_request_body_streams_through_as_it_comes(http: httpx.Client) -> None:
    recorder = BodyRecorder()
    first_alone: list[bool] = []

    def body() -> Iterator[bytes]:
        yield b"first piece "
        # The second piece is written once the upstream has the first.
        until(lambda: b"first piece " in b"".join(recorder.arrivals), "the upstream did not get the first piece")
        first_alone.append(b"".join(recorder.arrivals) == b"first piece ")
        yield b"second piece"

    with serve(recorder) as upstream, serve(gateway(upstream + "/mcp")) as base:
        response = http.post(base + "/upload", content=body(), headers={"Content-Type": "application/octet-stream"})
    assert response.status_code == 200
    assert response.text == "ok"
    assert first_alone == [True]  # the first piece reached the upstream before the second was written
    assert b"".join(recorder.arrivals) == b"first piece second piece"


def test_an_adopted_transport_session_works_through_the_gateway(upstream: str, http: httpx.Client) -> None:
    """An adopted 2025-era transport session, on the 2025 wire."""
    config = SessionsConfig(secret=SECRET, adopt_transport_sessions=True)
    with serve(gateway_app([upstream], config=config)) as base:
        url = base + "/mcp"
        transport = legacy_initialize(http, url)["Mcp-Session-Id"]
        adopted = set()
        for number in (3, 4):  # no session named: the adopted transport session is the conversation
            plain_call = legacy_request("tools/call", {"name": "seen", "arguments": {}}, id=number)
            reply = post(http, url, LEGACY, plain_call, **{"Mcp-Session-Id": transport})
            adopted.add(json.loads(result_of(reply, number)["result"]["content"][0]["text"])["headers"]["baggage"])
    assert len(adopted) == 1
    assert transport.partition("~")[2] not in adopted.pop()  # a digest, never the raw id


def test_a_2026_session_header_is_never_taken_for_a_transport_session(plain: str, http: httpx.Client) -> None:
    """On 2026-07-28 ``Mcp-Session-Id`` mirrors the data-layer session: an unknown one gets -32043, not a 404."""
    meta = {SESSION_META: {"sessionId": "sess-unknown"}}
    body = modern_request("tools/call", {"name": "echo", "arguments": {"message": "x"}}, meta=meta)
    response = http.post(plain, json=body, headers={**modern_headers(body), "Mcp-Session-Id": "sess-unknown"})
    assert response.status_code != 404, response.text
    assert messages(response)[0]["error"]["code"] == -32043, response.text
