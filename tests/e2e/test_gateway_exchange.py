"""Each user's upstream credentials exchanged (RFC 8693): ``mcp-sessions gateway --upstream-token exchange`` and
``--process-env NAME=exchange:AUDIENCE`` against a real authorization server, idpyoidc's (``_idpyoidc_server``),
on loopback; the gateway's client there by its secret, or by its key (``private_key_jwt``, a key made by
docs/gateway.md's ``openssl`` recipe).

Real parts throughout: idpyoidc's token endpoint and keys, an ``MCPServer`` upstream that verifies its audience with
those keys, the tests' stdio server; the gateway's command where its flags or output are tested, else in process.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import anyio
import anyio.abc
import httpx
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, rsa
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
from _waits import WITHIN
from conftest import asgi_client, serve
from e2e._authorization import APP, GATEWAY, login
from e2e._authorization import authorization_server as idpyoidc
from e2e._gateway import MAIN, SECRET, Process, gateway_process, main_run, result_of, upstream_server
from e2e._stdio import text_of
from mcp_sessions import SessionsConfig, gateway_app
from mcp_sessions._gateway._keys import private_key
from mcp_sessions._gateway.auth._client import ASSERTION_JWT_TYPE, ASSERTION_TYPE, ClientAuth, ClientAuthMethod
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


def secret_client(server: str) -> ClientAuth:
    """The gateway's client at idpyoidc's ``server``, by its secret."""
    return ClientAuth("client_secret_basic", *GATEWAY, servers=(server,))


def stranger(server: str) -> ClientAuth:
    """The gateway's client at a stand-in ``server`` (its token endpoint) that checks no client."""
    return ClientAuth("client_secret_basic", "g", secret="s", servers=(server,))


KEYED = ("mcp-gateway", "gateway-2026")  # docs/gateway.md's client id and key id, by private_key_jwt
RSA_KEYED = "rsa-gateway"  # a client by an RSA key of the tests' own
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
GETENV = modern_request("tools/call", {"name": "getenv", "arguments": {"name": "UPSTREAM_TOKEN"}})


@pytest.fixture(scope="module")
def client_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The gateway's keys, each in a file of mode 0600: docs/gateway.md's (``gateway.key``, made by its commands as
    they are written, its public half beside it) and an RSA key of 2048 bits; by client id."""
    files = tmp_path_factory.mktemp("client-keys")
    section = (MAIN / "docs" / "gateway.md").read_text().partition("\n### The gateway's client by its key")[2]
    made = section.partition("```sh\n")[2].partition("```")[0]
    subprocess.run(["sh", "-ec", made], cwd=files, check=True, capture_output=True, env={"PATH": os.environ["PATH"]})
    rsa_key = written(rsa.generate_private_key(public_exponent=65537, key_size=2048), files / "rsa.key")
    return {KEYED[0]: files / "gateway.key", RSA_KEYED: rsa_key}


@pytest.fixture(scope="module")
def authorization_server(client_keys: dict[str, Path]) -> Iterator[Process]:
    """idpyoidc's authorization server (:func:`_authorization.authorization_server`), which knows the keyed clients
    by their public keys alone (docs/gateway.md's from the ``gateway.pub.pem`` its recipe made, with its key id)."""
    public = serialization.load_pem_public_key((client_keys[KEYED[0]].parent / "gateway.pub.pem").read_bytes())
    keys = {KEYED[0]: jwk(public) | {"kid": KEYED[1]}, RSA_KEYED: jwk(private_key(str(client_keys[RSA_KEYED]), "-"))}
    with idpyoidc(LIFETIME, [UPSTREAM], keys) as server:
        yield server


def written(key: Any, path: Path, encryption: Any = None) -> Path:
    """``key`` in a PEM file ``path`` of mode 0600 (encrypted with ``encryption`` if given)."""
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        encryption or serialization.NoEncryption(),
    )
    path.write_bytes(pem)
    path.chmod(0o600)
    return path


def jwk(key: Any) -> dict[str, str]:
    """The public JWK of ``key`` (a private or public RSA or EC key), as an authorization server registers it."""
    public = key.public_key() if hasattr(key, "private_bytes") else key
    algorithm = jwt.algorithms.RSAAlgorithm if isinstance(public, rsa.RSAPublicKey) else jwt.algorithms.ECAlgorithm
    found: dict[str, str] = algorithm.to_jwk(public, as_dict=True)
    found.pop("key_ops", None)  # PyJWT's, which cryptojwt takes or "use", not both
    return found | {"use": "sig"}


def assertions_in(text: str) -> list[str]:
    """The client assertions in ``text``: its JWTs whose header says ``client-authentication+jwt``."""
    found = []
    for token in _JWT.findall(text):
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            continue
        if header.get("typ") == ASSERTION_JWT_TYPE:
            found.append(token)
    return found


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
def in_process(
    server: Process, upstream: str, *, exchanged: bool = True, clock: Callable[[], float] = time.time
) -> Iterator[str]:
    """The gateway in process, as the command builds it: its MCP URL. Tokens for ``AUDIENCE`` verified with
    ``server``'s keys, and (``exchanged``) exchanged for ``UPSTREAM`` by a client closed as the app stops, its
    issued tokens renewed on ``clock``."""
    issuer = server.url("")
    exchange = TokenExchange(client=secret_client(issuer), issuer=issuer, clock=clock)
    auth = GatewayAuth(jwks_url=issuer + "/jwks.json", issuer=issuer, audience=AUDIENCE)
    token = UpstreamToken("exchange", exchange, Target(UPSTREAM)) if exchanged else None
    app = gateway_app([upstream], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=token)
    with serve(exchange.wrap(app)) as base:
        yield base + "/mcp"


@contextlib.contextmanager
def gateway(authorization_server: Process, *arguments: str, secret: bool = True) -> Iterator[Process]:
    """``mcp-sessions gateway`` with ``arguments``, its client secret in the environment (unless not ``secret``),
    logging at debug, under ``opentelemetry-instrument`` with its spans (httpx's calls to the token endpoint among
    them) in its output."""
    environ = {"PYTHONPATH": f"{MAIN}/middleware:{MAIN}/tests"}
    if secret:
        environ["MCP_SESSIONS_EXCHANGE_CLIENT_SECRET"] = GATEWAY[1]
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


def test_the_gateway_authenticates_by_its_key_alone(
    authorization_server: Process, upstream: str, client_keys: dict[str, Path]
) -> None:
    """docs/gateway.md's recipe: ``private_key_jwt`` with the key its ``openssl`` commands made, no secret anywhere
    (idpyoidc knows this client by its public key alone, and checks each assertion's signature, ``aud``, ``exp`` and
    ``jti``: two users' exchanges, each with an assertion of its own). Neither an assertion nor the key reaches the
    gateway's output, its spans included."""
    keyed = (
        "--exchange-client-id",
        KEYED[0],
        "--exchange-client-auth",
        "private_key_jwt",
        "--exchange-client-key-file",
        str(client_keys[KEYED[0]]),
        "--exchange-client-key-id",
        KEYED[1],
    )
    options = ("--upstream", upstream, *EXCHANGE, *exchanging(authorization_server, *keyed))
    before = exchanges(authorization_server)
    with gateway(authorization_server, *options, secret=False) as front:
        alice, bob = (login(authorization_server, user, front.url()) for user in ("alice", "bob"))
        for_alice, for_bob = (seen_token(call(front.url(), user)) for user in (alice, bob))
        output = logged(front)
    assert exchanges(authorization_server) == before + 2
    assert claims(for_alice)["client_id"] == claims(for_bob)["client_id"] == KEYED[0]
    assert claims(for_alice)["aud"] == claims(for_bob)["aud"] == [UPSTREAM]
    assert claims(for_bob)["sub"] == claims(bob)["sub"]
    key = client_keys[KEYED[0]].read_text()
    assert key.splitlines()[1] not in output
    assert assertions_in(output) == []
    for token in (alice, bob, for_alice, for_bob):
        assert token not in output


async def test_the_authorization_server_takes_each_assertion_once_for_itself_alone(
    authorization_server: Process, client_keys: dict[str, Path]
) -> None:
    """What the stand-in checks of RFC 7523, shown: an assertion of the gateway's is taken once (its ``jti`` then
    seen), for the server's issuer or its token endpoint, and refused for another audience, signed by another key,
    or expired. The RSA client's exchange, at a token endpoint given (its assertion's ``aud``), is taken too."""
    issuer, endpoint = authorization_server.url(""), authorization_server.url("/token")
    client = ClientAuth("private_key_jwt", KEYED[0], key=private_key(str(client_keys[KEYED[0]]), "-"), key_id=KEYED[1])
    stranger = ClientAuth("private_key_jwt", KEYED[0], key=ec.generate_private_key(ec.SECP256R1()), key_id=KEYED[1])
    alice = login(authorization_server, "alice", AUDIENCE)
    form = {"grant_type": "urn:ietf:params:oauth:grant-type:token-exchange", "subject_token": alice}
    form |= {"subject_token_type": "urn:ietf:params:oauth:token-type:access_token", "audience": UPSTREAM}

    def exchanged(assertion: str) -> int:
        sent = {"client_id": KEYED[0], "client_assertion_type": ASSERTION_TYPE, "client_assertion": assertion}
        return httpx.post(endpoint, data=form | sent, timeout=30).status_code

    once = client.assertion(issuer)
    now = int(time.time())
    expired = {"iss": KEYED[0], "sub": KEYED[0], "aud": issuer, "jti": "expired", "iat": now - 120, "exp": now - 60}
    assert client.key is not None
    outcome = {
        "once": exchanged(once),
        "again": exchanged(once),
        "the token endpoint": exchanged(client.assertion(endpoint)),
        "another server": exchanged(client.assertion("https://elsewhere.example")),
        "another key": exchanged(stranger.assertion(issuer)),
        "expired": exchanged(jwt.encode(expired, client.key, "ES256", {"kid": KEYED[1], "typ": ASSERTION_JWT_TYPE})),
    }
    assert outcome == {
        "once": 200,
        "again": 401,
        "the token endpoint": 200,
        "another server": 401,
        "another key": 401,
        "expired": 401,
    }
    rsa_client = ClientAuth.given("-", "private_key_jwt", RSA_KEYED, key_file=str(client_keys[RSA_KEYED]))
    exchange = TokenExchange(client=rsa_client, token_endpoint=endpoint)
    try:
        issued = await exchange.token(alice, Target(UPSTREAM))
    finally:
        await exchange.aclose()
    assert claims(issued)["client_id"] == RSA_KEYED


def test_an_exchanged_token_is_renewed_before_it_expires(authorization_server: Process, upstream: str) -> None:
    """The exchanged token is used until half its life (of :data:`LIFETIME` seconds) is past, then exchanged anew
    while it still holds: the gateway's clock is moved there, not waited for."""
    ahead = 0.0
    with in_process(authorization_server, upstream, clock=lambda: time.time() + ahead) as front:
        alice = login(authorization_server, "alice", AUDIENCE)
        first = seen_token(call(front, alice))
        lifetime = claims(first)["exp"] - time.time()
        ahead = LIFETIME / 2 - 2  # not yet due
        assert seen_token(call(front, alice)) == first
        ahead = LIFETIME / 2 + 1  # due: renewed before it expires
        renewed = seen_token(call(front, alice))  # the upstream accepts each
        assert renewed != first
        assert claims(renewed)["exp"] >= claims(first)["exp"]
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
    exchange = TokenExchange(client=secret_client(issuer), issuer=issuer)
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
    """A refusal that repeats the credentials the gateway sent: its secret (in the form or the Basic header), or its
    assertion."""
    form = await request.form()
    sent = f"{request.headers.get('authorization', '')} {form.get('client_secret')} {form.get('client_assertion')}"
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


@pytest.mark.parametrize("client_auth", ["client_secret_basic", "client_secret_post", "private_key_jwt"])
async def test_the_client_secret_never_leaves_the_gateway(
    client_auth: ClientAuthMethod, caplog: pytest.LogCaptureFixture
) -> None:
    """A token endpoint that repeats the gateway's client secret, or its assertion, in its refusal: the client's
    answer says the endpoint refused, and neither it nor the log holds the secret, in any form the gateway sent it,
    nor the assertion."""
    secret = "s3cr3t/echo+value"
    with serve(TOKEN_ENDPOINT) as base, caplog.at_level(logging.DEBUG):
        if client_auth == "private_key_jwt":
            client = ClientAuth(client_auth, "g", key=ec.generate_private_key(ec.SECP256R1()))
        else:
            client = ClientAuth(client_auth, "g", secret=secret, servers=(base + "/echo",))
        exchange = TokenExchange(client=client, token_endpoint=base + "/echo")
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
    assert assertions_in(said) == []


@pytest.mark.parametrize(
    ("key", "algorithm"),
    [
        (lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256"),
        (lambda: ec.generate_private_key(ec.SECP256R1()), "ES256"),
        (lambda: ec.generate_private_key(ec.SECP384R1()), "ES384"),
        (lambda: ec.generate_private_key(ec.SECP521R1()), "ES512"),
    ],
    ids=["rsa", "p-256", "p-384", "p-521"],
)
def test_an_assertion_names_its_client_and_its_server_and_is_signed_by_the_key(
    key: Any, algorithm: str, tmp_path: Path
) -> None:
    """RFC 7523 §3's claims, read back with PyJWT and the public key: ``iss`` and ``sub`` the client, ``aud`` the
    one server asked for, a ``jti`` of its own each time, ``exp`` 60 s after ``iat``; the algorithm by the key, the
    explicit type, the key id; the form sends no secret."""
    made = key()
    client = ClientAuth.given(
        "--exchange-client",
        "private_key_jwt",
        "mcp-gateway",
        key_file=str(written(made, tmp_path / "client.key")),
        key_id="k1",
    )
    first, second = (client.request("https://idp.example") for _ in range(2))
    assert first.headers == {}
    assert set(first.data) == {"client_id", "client_assertion_type", "client_assertion"}
    assert (first.data["client_id"], first.data["client_assertion_type"]) == ("mcp-gateway", ASSERTION_TYPE)
    assert first.sent == (first.data["client_assertion"],)
    assertion = first.data["client_assertion"]
    read = jwt.decode(
        assertion,
        made.public_key(),
        [algorithm],
        audience="https://idp.example",
        issuer="mcp-gateway",
        options={"require": ["exp", "iat", "jti", "sub"]},
    )
    assert read["sub"] == "mcp-gateway"
    assert read["aud"] == "https://idp.example"  # one string, not a list (rfc7523bis)
    assert read["exp"] - read["iat"] == 60
    assert abs(read["iat"] - time.time()) < 5
    assert jwt.get_unverified_header(assertion) == {"alg": algorithm, "typ": ASSERTION_JWT_TYPE, "kid": "k1"}
    again = jwt.decode(second.data["client_assertion"], made.public_key(), [algorithm], audience="https://idp.example")
    assert again["jti"] != read["jti"]
    assert "k1" in repr(client)
    assert "PRIVATE" not in repr(client) and "key=" not in repr(client)


async def _seen_assertion(request: Request) -> Response:
    """A token whose value says whom the request's assertion named: ``issuer`` (this stand-in's own URL), or
    ``endpoint`` (its token endpoint's), else ``other``."""
    audience = jwt.decode(str((await request.form())["client_assertion"]), options={"verify_signature": False})["aud"]
    base = str(request.base_url).rstrip("/")
    named = {base: "issuer", base + "/token": "endpoint"}.get(audience, "other")
    return JSONResponse({"access_token": named, "token_type": "Bearer"})


async def _own_metadata(request: Request) -> Response:
    base = str(request.base_url).rstrip("/")
    return JSONResponse({"issuer": base, "token_endpoint": base + "/token"})


ASSERTED = Starlette(  # an authorization server that says whom each assertion named
    routes=[
        Route("/token", _seen_assertion, methods=["POST"]),
        Route("/.well-known/oauth-authorization-server", _own_metadata),
    ]
)


async def test_an_assertion_names_the_issuer_whose_metadata_named_the_endpoint_else_the_endpoint() -> None:
    """``aud`` is the issuer when the gateway read the token endpoint from its metadata (rfc7523bis), the token
    endpoint when it was given (with or without an issuer beside it, as ``--auth-issuer`` always is)."""
    client = ClientAuth("private_key_jwt", "g", key=ec.generate_private_key(ec.SECP256R1()))
    named = []
    with serve(ASSERTED) as base:
        for endpoint, issuer in ((None, base), (base + "/token", None), (base + "/token", base)):
            exchange = TokenExchange(client=client, token_endpoint=endpoint, issuer=issuer)
            try:
                named.append(await exchange.token("the-user-s-token", Target("aud")))
            finally:
                await exchange.aclose()
    assert named == ["issuer", "endpoint", "endpoint"]


async def test_no_cookie_of_one_users_exchange_goes_with_anothers() -> None:
    with serve(TOKEN_ENDPOINT) as base:
        exchange = TokenExchange(client=stranger(base + "/cookie"), token_endpoint=base + "/cookie")
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
        exchange = TokenExchange(client=stranger(endpoint or base), token_endpoint=endpoint, issuer=base, timeout=2)
        try:
            with anyio.fail_after(WITHIN), pytest.raises(ExchangeRefused) as refused:
                await exchange.token("the-user-s-token", Target("aud"))
        finally:
            await exchange.aclose()
    assert refused.value.status == status
    assert says in refused.value.description
    assert "the-user-s-token" not in refused.value.answer().body.decode()


async def test_a_token_endpoints_answer_is_bounded_as_it_decodes() -> None:
    """A token endpoint whose answer is a kilobyte on the wire and a megabyte as it decodes (gzip, which the HTTP
    client decodes as told): the gateway stops reading at 64 KiB of it decoded, as it does a plain answer's."""
    token = b'{"access_token": "' + b"x" * 1_000_000 + b'", "token_type": "Bearer"}'
    deflated = Response(gzip.compress(token), headers={"content-encoding": "gzip"}, media_type="application/json")
    with serve(Starlette(routes=[Route("/token", lambda request: deflated, methods=["POST"])])) as base:
        exchange = TokenExchange(client=stranger(base + "/token"), token_endpoint=base + "/token")
        try:
            with anyio.fail_after(WITHIN), pytest.raises(ExchangeRefused) as refused:
                await exchange.token("the-user-s-token", Target("aud"))
        finally:
            await exchange.aclose()
    assert (refused.value.status, refused.value.description) == (502, "the authorization server's answer is too long")


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
        exchange = TokenExchange(client=stranger(endpoint), token_endpoint=endpoint)
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


KEYED_OPTIONS = (
    *("--upstream", UPSTREAM, *EXCHANGE, *VERIFYING, "--exchange-audience", "a", "--exchange-client-id", "g"),
    *("--exchange-client-auth", "private_key_jwt"),
)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (("--upstream", UPSTREAM, *EXCHANGE), "give --auth-jwks"),
        (("--stdio", SERVER, "--process-env", "T=exchange:aud", *VERIFYING), "needs the gateway's client id"),
        (("--upstream", UPSTREAM, *EXCHANGE, "--exchange-client-secret", "s3cr3t-value"), "never a flag"),
        # private_key_jwt sends no secret, and a secret method signs nothing: either given with the other's file.
        ((*KEYED_OPTIONS, "--exchange-client-secret-file", "/etc/hostname"), "private_key_jwt sends no secret"),
        ((*KEYED_OPTIONS[:-2], "--exchange-client-key-file", "/k"), "are private_key_jwt's, not client_secret_basic's"),
        (KEYED_OPTIONS, "give --exchange-client-key-file"),
    ],
)
def test_a_bad_exchange_configuration_is_a_usage_error(arguments: tuple[str, ...], says: str) -> None:
    done = main_run("gateway", *arguments, environ={"MCP_SESSIONS_SECRET": SECRET})
    assert done.returncode == 2
    assert says in done.stderr
    assert "s3cr3t-value" not in done.stderr


def _certificate(key: Any) -> bytes:
    """A self-signed certificate of ``key``'s, PEM: what an operator may give in place of the key."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mcp-gateway")])
    now = datetime.datetime.now(datetime.UTC)
    built = x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
    built = built.serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
    return built.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


KEYS_REFUSED = {  # what is in the key file, and what the one line says of it
    "open": " is open to others (mode 644): chmod 600 it",
    "encrypted": "'s key is encrypted: the gateway takes it unencrypted",
    "certificate": " holds no PEM private key",
    "public": " holds no PEM private key",
    "dsa": "'s key is neither RSA nor EC",
    "ed448": "'s key is neither RSA nor EC",
    "rsa-1024": "'s key has 1024 bits: RS256 takes 2048 or more (RFC 7518 §3.3)",
    "secp256k1": "'s key is on the curve secp256k1: private_key_jwt signs with P-256, P-384 or P-521",
    "missing": " cannot be read (No such file or directory)",
}


@pytest.mark.parametrize("case", list(KEYS_REFUSED))
def test_a_key_the_gateway_cannot_sign_with_is_one_line_at_startup(case: str, tmp_path: Path) -> None:
    """A key file refused as ``--process-env-mask-ca``'s is (one reading, ``_keys``), and one it cannot sign an
    assertion with: one line naming the flag and the file, exit status 2, never a byte of the key."""
    path = tmp_path / "client.key"
    key: Any = ec.generate_private_key(ec.SECP256R1())
    if case == "dsa":
        key = dsa.generate_private_key(2048)
    elif case == "ed448":
        key = ed448.Ed448PrivateKey.generate()
    elif case == "rsa-1024":
        key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    elif case == "secp256k1":
        key = ec.generate_private_key(ec.SECP256K1())
    written(key, path, serialization.BestAvailableEncryption(b"pass phrase") if case == "encrypted" else None)
    secret = path.read_text().splitlines()[1]
    if case == "open":
        path.chmod(0o644)
    elif case == "certificate":
        path.write_bytes(_certificate(key))
    elif case == "public":
        path.write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
    elif case == "missing":
        path.unlink()
    keyed = ("--exchange-client-auth", "private_key_jwt", "--exchange-client-key-file", str(path))
    arguments = ("--upstream", UPSTREAM, *EXCHANGE, *VERIFYING, "--exchange-audience", "a", "--exchange-client-id", "g")
    done = main_run("gateway", *arguments, *keyed, environ={"MCP_SESSIONS_SECRET": SECRET})
    assert done.returncode == 2
    assert done.stderr == f"mcp-sessions gateway: --exchange-client-key-file: {path}{KEYS_REFUSED[case]}\n"
    assert secret not in done.stderr
