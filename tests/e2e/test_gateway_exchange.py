"""Each user's upstream credentials exchanged (RFC 8693): ``mcp-sessions gateway --upstream-token exchange`` and
``--process-env NAME=exchange:AUDIENCE`` against a real authorization server, idpyoidc's (``_idpyoidc_server``),
on loopback.

Real parts throughout: idpyoidc's token endpoint and keys, an ``MCPServer`` upstream that verifies its audience with
those keys, the tests' stdio server; the gateway's command where its flags or output are tested, else in process.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import anyio
import anyio.abc
import httpx
import httpx2
import jwt
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from _mcp import create_session, modern_headers, modern_request, sdk_session_meta
from _redis import free_port
from _waits import WITHIN, Deadline
from conftest import asgi_client, serve
from e2e._authorization import APP, GATEWAY, login
from e2e._authorization import authorization_server as idpyoidc
from e2e._gateway import MAIN, SECRET, Process, gateway_process, main_run, result_of, upstream_server
from e2e._stdio import text_of
from mcp_sessions import SessionsConfig, gateway_app
from mcp_sessions._gateway.auth._exchange import ExchangeRefused, Target, TokenExchange, UpstreamToken
from mcp_sessions._gateway.auth._users import GatewayAuth

pytestmark = pytest.mark.anyio

UPSTREAM = "https://upstream.example/mcp"  # the upstream's audience, as the authorization server names it
LIFETIME = 30  # seconds an access token lives: an exchanged one is renewed at half that
SERVER = f"{sys.executable} -m e2e._plain_stdio"
EXCHANGE = ("--upstream-token", "exchange")
VERIFYING = ("--auth-jwks", "http://127.0.0.1:9/k", "--auth-issuer", "http://127.0.0.1:9", "--auth-audience", UPSTREAM)
AUDIENCE = "http://gateway/mcp"  # the in-process gateway's: its users' tokens are for it
SEEN = modern_request("tools/call", {"name": "seen", "arguments": {}})
GETENV = modern_request("tools/call", {"name": "getenv", "arguments": {"name": "UPSTREAM_TOKEN"}})


@pytest.fixture(scope="module")
def authorization_server() -> Iterator[Process]:
    """idpyoidc's authorization server (:func:`_authorization.authorization_server`)."""
    with idpyoidc(LIFETIME, [UPSTREAM]) as server:
        yield server


class AudienceVerifier:
    """The upstream's own check (the ``mcp`` SDK's ``TokenVerifier``): a JWT of the authorization server's keys,
    for the upstream's audience."""

    def __init__(self, issuer: str) -> None:
        self.issuer, self.keys = issuer, jwt.PyJWKClient(issuer + "/jwks.json")

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = self.keys.get_signing_key_from_jwt(token)
            claims = jwt.decode(token, key, algorithms=["RS256"], audience=UPSTREAM, issuer=self.issuer)
        except jwt.PyJWTError:
            return None
        return AccessToken(token=token, client_id=claims["client_id"], scopes=[], expires_at=claims["exp"])


@pytest.fixture(scope="module")
def upstream(authorization_server: Process) -> Iterator[str]:
    """An ``MCPServer`` that takes only tokens for its own audience: its MCP URL."""
    issuer = authorization_server.url("")
    auth = AuthSettings(  # the verifier checks the audience itself
        issuer_url=AnyHttpUrl(issuer), resource_server_url=AnyHttpUrl(UPSTREAM), validate_token_resource=False
    )
    server = upstream_server("upstream", token_verifier=AudienceVerifier(issuer), auth=auth)
    with serve(server.streamable_http_app(stateless_http=True, json_response=True)) as base:
        yield base + "/mcp"


def exchanging(authorization_server: Process, *extra: str) -> tuple[str, ...]:
    """A gateway's options: tokens for its own URL verified with the server's keys, and exchanged for ``UPSTREAM``
    by the gateway's client, its token endpoint read from the server's metadata (``extra`` after them)."""
    issuer = authorization_server.url("")
    verifying = ("--auth-jwks", issuer + "/jwks.json", "--auth-issuer", issuer, "--auth-audience", "{url}")
    return (*verifying, "--exchange-audience", UPSTREAM, "--exchange-client-id", GATEWAY[0], *extra)


@contextlib.contextmanager
def in_process(server: Process, upstream: str, *, exchanged: bool = True) -> Iterator[str]:
    """The gateway in process, as the command builds it: its MCP URL. Tokens for ``AUDIENCE`` verified with
    ``server``'s keys, and (``exchanged``) exchanged for ``UPSTREAM`` by a client closed as the app stops."""
    issuer = server.url("")
    exchange = TokenExchange(client_id=GATEWAY[0], client_secret=GATEWAY[1], issuer=issuer)
    auth = GatewayAuth(jwks_url=issuer + "/jwks.json", issuer=issuer, audience=AUDIENCE)
    token = UpstreamToken("exchange", exchange, Target(UPSTREAM)) if exchanged else None
    app = gateway_app([upstream], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=token)
    with serve(exchange.wrap(app)) as base:
        yield base + "/mcp"


@contextlib.contextmanager
def gateway(authorization_server: Process, *arguments: str) -> Iterator[Process]:
    """``mcp-sessions gateway`` with ``arguments``, its client secret in the environment, logging at debug, under
    ``opentelemetry-instrument`` with its spans (httpx's calls to the token endpoint among them) in its output."""
    environ = {"MCP_SESSIONS_EXCHANGE_CLIENT_SECRET": GATEWAY[1], "PYTHONPATH": f"{MAIN}/middleware:{MAIN}/tests"}
    environ |= {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"}
    environ["OTEL_LOGS_EXPORTER"] = "none"  # the distro's default, OTLP, is not in make test's environment
    program = [str(Path(sys.executable).parent / "opentelemetry-instrument"), sys.executable, "-m", "mcp_sessions"]
    with gateway_process([], *arguments, "--log-level", "debug", environ=environ, program=program) as process:
        yield process


def logged(process: Process) -> str:
    """All the process wrote, once it has ended (its spans exported at its exit)."""
    return process.stop().decode(errors="replace")


def revoke(authorization_server: Process, token: str) -> None:
    revoked = httpx.post(authorization_server.url("/revoke"), data={"token": token}, auth=APP)
    assert revoked.status_code == 200, revoked.text


def exchanges(authorization_server: Process) -> int:
    """How many token exchanges the authorization server's token endpoint was asked for."""
    count: int = httpx.get(authorization_server.url("/exchanges")).json()["exchanges"]
    return count


def call(url: str, token: str, body: dict[str, Any] = SEEN) -> httpx.Response:
    headers = {**modern_headers(body), **({"Authorization": f"Bearer {token}"} if token else {})}
    return httpx.post(url, json=body, headers=headers, timeout=30)


def seen_token(answer: httpx.Response) -> str:
    """The bearer token the upstream's ``seen`` tool was called with (the upstream had verified it)."""
    assert answer.status_code == 200, answer.text
    result = result_of(answer, SEEN["id"])["result"]
    authorization: str = json.loads(result["content"][0]["text"])["headers"]["authorization"]
    scheme, _, token = authorization.partition(" ")
    assert scheme == "Bearer"
    return token


def claims(token: str) -> dict[str, Any]:
    decoded: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return decoded


def test_the_upstream_sees_only_each_user_s_exchanged_token(authorization_server: Process, upstream: str) -> None:
    with gateway(authorization_server, "--upstream", upstream, *EXCHANGE, *exchanging(authorization_server)) as front:
        alice, bob = (login(authorization_server, user, front.url()) for user in ("alice", "bob"))
        assert call(upstream, alice).status_code == 401  # the upstream checks its audience: alice's is the gateway's
        for_alice = seen_token(call(front.url(), alice))
        assert for_alice != alice
        assert claims(for_alice)["aud"] == [UPSTREAM]
        assert claims(for_alice)["sub"] == claims(alice)["sub"]
        assert claims(for_alice)["client_id"] == GATEWAY[0]
        assert seen_token(call(front.url(), alice)) == for_alice  # cached until shortly before it expires
        for_bob = seen_token(call(front.url(), bob))
        assert for_bob != for_alice
        assert claims(for_bob)["sub"] == claims(bob)["sub"]
        assert call(front.url(), "").status_code == 401  # no token: the gateway's 401, nothing exchanged
        output = logged(front)
    assert '"name": "POST"' in output  # httpx's spans, the token endpoint's among them
    for token in (alice, bob, for_alice, for_bob, GATEWAY[1]):
        assert token not in output
        assert token[-20:] not in output


def test_an_exchanged_token_is_renewed_before_it_expires(authorization_server: Process, upstream: str) -> None:
    with in_process(authorization_server, upstream) as front:
        alice = login(authorization_server, "alice", AUDIENCE)
        first = seen_token(call(front, alice))
        lifetime = claims(first)["exp"] - time.time()
        renewal = Deadline("the exchanged token was not renewed")
        while (renewed := seen_token(call(front, alice))) == first:  # the upstream accepts each
            renewal.check()
            time.sleep(1)
        assert claims(renewed)["exp"] > claims(first)["exp"]
        assert claims(renewed)["aud"] == [UPSTREAM]
        assert time.time() < claims(first)["exp"]
        assert lifetime > 0  # renewed while the first still held


@pytest.mark.parametrize(
    ("extra", "status", "says"),
    [
        # The authorization server will not issue a token for that audience (invalid_target, RFC 8693 §2.2.2).
        (("--exchange-audience", "https://elsewhere.example/mcp"), 403, "invalid_target"),
        # Its token endpoint cannot be reached.
        (("--exchange-token-endpoint", f"http://127.0.0.1:{free_port()}/token"), 502, "could not be reached"),
        # The gateway's own client credentials are wrong (posted in the form, as client_secret_post).
        (
            ("--exchange-client-id", "stranger", "--exchange-client-auth", "client_secret_post"),
            502,
            "refused the gateway",
        ),
    ],
)
def test_a_refused_exchange_is_a_clear_error(
    authorization_server: Process, upstream: str, extra: tuple[str, ...], status: int, says: str
) -> None:
    with gateway(
        authorization_server, "--upstream", upstream, *EXCHANGE, *exchanging(authorization_server, *extra)
    ) as front:
        alice = login(authorization_server, "alice", front.url())
        answer = call(front.url(), alice)
        output = logged(front)
    assert answer.status_code == status, answer.text
    error = result_of(answer, SEEN["id"])["error"]
    assert says in error["message"]
    assert "token exchange" in error["message"]
    if status == 403:
        assert answer.headers["www-authenticate"].startswith('Bearer error="insufficient_scope", error_description=')
    assert alice not in answer.text
    assert alice not in output


def test_a_revoked_user_token_is_a_401(authorization_server: Process, upstream: str) -> None:
    """The gateway still verifies a revoked token's signature; the authorization server refuses to exchange it."""
    with in_process(authorization_server, upstream) as front:
        carol = login(authorization_server, "carol", AUDIENCE)
        revoke(authorization_server, carol)
        answer = call(front, carol)
    assert answer.status_code == 401, answer.text
    assert answer.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
    assert "will not exchange this token" in result_of(answer, SEEN["id"])["error"]["message"]


def test_a_stdio_process_gets_its_user_s_exchanged_token(authorization_server: Process, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(GATEWAY[1] + "\n")
    options = exchanging(authorization_server, "--exchange-client-secret-file", str(secret))
    # The exchange is this test's; one uid for both users' processes (test_gateway_stdio_containment's is a uid each)
    env = ("--process-env", f"UPSTREAM_TOKEN=exchange:{UPSTREAM}", "--accept-shared-uid")
    with gateway(authorization_server, "--stdio", SERVER, *env, *options) as front:
        alice = login(authorization_server, "alice", front.url())
        answer = call(front.url(), alice, GETENV)
        assert answer.status_code == 200, answer.text
        given = result_of(answer, GETENV["id"])["result"]["structuredContent"]["result"]
        output = logged(front)
    assert given != alice
    assert claims(given)["aud"] == [UPSTREAM]
    assert claims(given)["sub"] == claims(alice)["sub"]
    assert given not in output
    assert alice not in output


def test_the_upstream_gets_no_user_token_unless_asked(authorization_server: Process) -> None:
    """Without the exchange, a gateway that verifies tokens forwards none (MCP's security best practices forbid
    token passthrough); ``--upstream-token passthrough`` is the operator's explicit choice, and warned about."""
    issuer = authorization_server.url("")
    verifying = ("--auth-jwks", issuer + "/jwks.json", "--auth-issuer", issuer, "--auth-audience", "{url}")
    plain = upstream_server("plain").streamable_http_app(stateless_http=True, json_response=True)
    with serve(plain) as base, in_process(authorization_server, base + "/mcp", exchanged=False) as front:
        alice = login(authorization_server, "alice", AUDIENCE)
        answer = call(front, alice)
        headers = json.loads(result_of(answer, SEEN["id"])["result"]["content"][0]["text"])["headers"]
        assert "authorization" not in headers
        with gateway(
            authorization_server, "--upstream", base + "/mcp", *verifying, "--upstream-token", "passthrough"
        ) as passing:
            alice = login(authorization_server, "alice", passing.url())
            assert seen_token(call(passing.url(), alice)) == alice
            assert "--upstream-token passthrough" in logged(passing)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_stock_client_s_session_reaches_the_upstream_with_the_exchanged_token(
    authorization_server: Process, upstream: str, mode: str
) -> None:
    with in_process(authorization_server, upstream) as front:
        alice = login(authorization_server, "alice", AUDIENCE)
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {alice}"}, timeout=30) as http,
            Client(streamable_http_client(front, http_client=http), mode=mode) as client,
        ):
            session = await create_session(client)  # the gateway's probe of the upstream carries it too
            seen = json.loads(text_of(await client.call_tool("seen", {}, meta=sdk_session_meta(session))))
    token = seen["headers"]["authorization"].removeprefix("Bearer ")
    assert token != alice
    assert claims(token)["aud"] == [UPSTREAM]
    assert claims(token)["sub"] == claims(alice)["sub"]


async def test_one_user_s_concurrent_first_requests_make_one_exchange(
    authorization_server: Process, upstream: str
) -> None:
    """Through the gateway in process: the requests that miss while a user's exchange is under way wait for it, a
    refusal included (each gets it, and the next request asks again); the client is closed as the app stops."""
    issuer, audience = authorization_server.url(""), "http://127.0.0.1:8000/mcp"
    exchange = TokenExchange(client_id=GATEWAY[0], client_secret=GATEWAY[1], issuer=issuer)
    auth = GatewayAuth(jwks_url=issuer + "/jwks.json", issuer=issuer, audience=audience)
    token = UpstreamToken("exchange", exchange, Target(UPSTREAM))
    app = gateway_app([upstream], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=token)
    alice, carol = (login(authorization_server, user, audience) for user in ("alice", "carol"))
    revoke(authorization_server, carol)
    rounds: list[list[httpx.Response]] = []
    async with asgi_client(exchange.wrap(app)) as http:

        async def post(user: str) -> None:
            headers = {**modern_headers(SEEN), "Authorization": f"Bearer {user}"}
            rounds[-1].append(await http.post("/mcp", json=SEEN, headers=headers))

        for user, status in ((alice, 200), (carol, 401), (carol, 401)):
            before = exchanges(authorization_server)
            rounds.append([])
            async with anyio.create_task_group() as tasks:
                for _ in range(8):
                    tasks.start_soon(post, user)
            assert exchanges(authorization_server) == before + 1
            assert {a.status_code for a in rounds[-1]} == {status}
    assert len({seen_token(answer) for answer in rounds[0]}) == 1
    with pytest.raises(RuntimeError, match="closed"):  # its token endpoint asked for carol's, on a closed client
        await exchange.token(carol, Target(UPSTREAM))


async def _slow(request: Request) -> Response:
    await anyio.sleep(5)
    return JSONResponse({})


async def _cookie(request: Request) -> Response:
    """A token that says whether a cookie came with its request, and a cookie named for its user."""
    came = "with-cookie" if "cookie" in request.headers else "none"
    issued = JSONResponse({"access_token": came, "token_type": "Bearer"})
    issued.set_cookie("as-session", str((await request.form())["subject_token"]))
    return issued


async def _echo(request: Request) -> Response:
    """A refusal that repeats the credentials the gateway sent: its secret (in the form or the Basic header)."""
    sent = request.headers.get("authorization", "") + " " + str((await request.form()).get("client_secret"))
    return JSONResponse({"error": "invalid_client", "error_description": f"bad client: {sent}"}, 401)


TOKEN_ENDPOINT = Starlette(  # a token endpoint that answers what no authorization server should
    routes=[
        Route("/long", lambda request: Response(b'{"a": "' + b"x" * 100_000 + b'"}'), methods=["POST"]),
        Route("/slow", _slow, methods=["POST"]),
        Route(
            "/split", lambda r: JSONResponse({"access_token": "a\r\nX: y", "token_type": "Bearer"}), methods=["POST"]
        ),
        Route("/mac", lambda r: JSONResponse({"access_token": "abc", "token_type": "DPoP"}), methods=["POST"]),
        Route("/plain", lambda request: Response(b"Internal Server Error", 500), methods=["POST"]),
        Route("/echo", _echo, methods=["POST"]),
        Route("/cookie", _cookie, methods=["POST"]),
        Route("/.well-known/oauth-authorization-server", lambda r: JSONResponse({"issuer": "http://elsewhere"})),
    ]
)


@pytest.mark.parametrize("client_auth", ["client_secret_basic", "client_secret_post"])
async def test_the_client_secret_never_leaves_the_gateway(client_auth: str, caplog: pytest.LogCaptureFixture) -> None:
    """A token endpoint that repeats the gateway's client secret in its refusal: the client's answer says the
    endpoint refused, and neither it nor the log holds the secret, in any form the gateway sent it."""
    secret = "s3cr3t/echo+value"
    with serve(TOKEN_ENDPOINT) as base, caplog.at_level(logging.DEBUG):
        exchange = TokenExchange(
            client_id="g", client_secret=secret, token_endpoint=base + "/echo", client_auth=client_auth
        )
        try:
            with anyio.fail_after(WITHIN), pytest.raises(ExchangeRefused) as refused:
                await exchange.token("the-user-s-token", Target("aud"))
        finally:
            await exchange.aclose()
    said = refused.value.answer().body.decode() + refused.value.description + caplog.text
    assert refused.value.status == 502
    assert "refused the gateway (invalid_client)" in said
    sent = base64.b64encode(f"g:{quote_plus(secret)}".encode()).decode()
    assert not any(form in said for form in (secret, quote_plus(secret), sent))


async def test_no_cookie_of_one_users_exchange_goes_with_anothers() -> None:
    with serve(TOKEN_ENDPOINT) as base:
        exchange = TokenExchange(client_id="g", client_secret="s", token_endpoint=base + "/cookie")
        try:
            tokens = [await exchange.token(user, Target("aud")) for user in ("alice-token", "bob-token")]
        finally:
            await exchange.aclose()
    assert tokens == ["none", "none"]  # alice's answer set a cookie: on the previous client, bob's carried it


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/long", 502, "too long"),
        ("/slow", 504, "did not answer in time"),
        ("/split", 502, "no bearer token"),
        ("/mac", 502, "not a bearer's"),
        ("/plain", 502, "answered 500"),
        (None, 502, "names another issuer"),  # the metadata's issuer is not the one asked about (RFC 8414 §3.3)
    ],
)
async def test_a_token_endpoint_is_a_stranger(path: str | None, status: int, says: str) -> None:
    with serve(TOKEN_ENDPOINT) as base:
        endpoint = None if path is None else base + path
        exchange = TokenExchange(client_id="g", client_secret="s", token_endpoint=endpoint, issuer=base, timeout=2)
        try:
            with anyio.fail_after(WITHIN), pytest.raises(ExchangeRefused) as refused:
                await exchange.token("the-user-s-token", Target("aud"))
        finally:
            await exchange.aclose()
    assert refused.value.status == status
    assert says in refused.value.description
    assert "the-user-s-token" not in refused.value.answer().body.decode()


@pytest.mark.parametrize(
    ("reads", "says"),
    [
        (None, "could not be reached"),  # nothing listens: never connected (refused)
        (False, "closed the connection without an answer"),  # accepted and closed at once: the request meets a reset
        (True, "closed the connection without an answer"),  # closed once the request is read: the stream ends
    ],
)
async def test_a_token_endpoint_that_closes_the_connection_is_told_from_one_never_reached(
    reads: bool | None, says: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An authorization server that accepts the connection and closes it unanswered (idpyoidc's, for a user token
    expired within the gateway's leeway) was said to be one that "could not be reached", which sends an operator to
    the network: the gateway says what httpx knows, a connection made and closed, or one never made."""

    async def unanswered(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            request = b""
            while reads and not _whole(request):
                request += await stream.receive()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    endpoint = f"http://127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}/token"
    async with listener, anyio.create_task_group() as serving:
        if reads is None:
            await listener.aclose()
        else:
            serving.start_soon(listener.serve, unanswered)
        exchange = TokenExchange(client_id="g", client_secret="s", token_endpoint=endpoint)
        try:
            with anyio.fail_after(WITHIN), caplog.at_level(logging.WARNING), pytest.raises(ExchangeRefused) as refused:
                await exchange.token("the-user-s-token", Target("aud"))
        finally:
            await exchange.aclose()
            serving.cancel_scope.cancel()
    assert refused.value.status == 502
    assert refused.value.description == f"the authorization server {says}"
    [logged] = [record.getMessage() for record in caplog.records if record.name == "mcp_sessions.gateway"]
    assert logged.startswith(f"mcp-sessions gateway: 127.0.0.1 {says}: ")
    assert "the-user-s-token" not in logged + refused.value.answer().body.decode()


def _whole(request: bytes) -> bool:
    """Whether ``request`` holds a whole HTTP request: its head, and as many bytes of body as its length says."""
    head, ended, body = request.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length: *([0-9]+)", head)
    return bool(ended) and length is not None and len(body) >= int(length[1])


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (("--upstream", UPSTREAM, *EXCHANGE), "give --auth-jwks"),
        (("--stdio", SERVER, "--process-env", "T=exchange:aud", *VERIFYING), "needs the gateway's client id"),
        (("--upstream", UPSTREAM, *EXCHANGE, "--exchange-client-secret", "s3cr3t-value"), "never a flag"),
    ],
)
def test_a_bad_exchange_configuration_is_a_usage_error(arguments: tuple[str, ...], says: str) -> None:
    done = main_run("gateway", *arguments, environ={"MCP_SESSIONS_SECRET": SECRET})
    assert done.returncode == 2
    assert says in done.stderr
    assert "s3cr3t-value" not in done.stderr
