"""Each user's upstream token by ID-JAG (MCP's Enterprise-Managed Authorization): ``mcp-sessions gateway
--upstream-token id-jag`` and ``--process-env NAME=id-jag:ISSUER``, against loopback stand-ins (``_idjag``) of the
enterprise's identity provider and of the resource's own authorization server that check what
draft-ietf-oauth-identity-assertion-authz-grant and RFC 7523 require; the gateway's client at both by
``private_key_jwt``, with keys made by docs/gateway.md's ``openssl`` recipe, and no secret anywhere.

Real parts: the stand-ins' token endpoints on uvicorn, an ``MCPServer`` upstream that takes only its authorization
server's tokens for itself and names that server in its protected resource metadata, the tests' stdio server; the
gateway's command where its flags or its output are tested, else in process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import anyio
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from _mcp import CLIENT_CAPABILITIES_KEY, legacy_request, modern_headers, modern_request
from conftest import asgi_client, serve
from e2e._gateway import JSON_SSE, MAIN, SECRET, Process, gateway_in_process, gateway_process, main_run, result_of
from e2e._idjag import (
    ACCESS_TOKEN_TYPE,
    ID_JAG_JWT_TYPE,
    ID_JAG_TYPE,
    ID_TOKEN_TYPE,
    IdentityProvider,
    ResourceServer,
    key_file,
    serving,
    upstream,
)
from e2e._vendor import USER_HEADER
from mcp_sessions import SessionsConfig, gateway_app
from mcp_sessions._gateway._keys import private_key
from mcp_sessions._gateway.auth._client import ClientAuth, ClientAuthMethod
from mcp_sessions._gateway.auth._exchange import ExchangeRefused, Target, TokenExchange, UpstreamToken
from mcp_sessions._gateway.auth._users import GatewayAuth

pytestmark = pytest.mark.anyio

AT_IDP, AT_AS = "mcp-gateway", "mcp-gateway-at-tools"  # the recipe's client ids: at the identity provider, at the AS
RECIPE = "\n### An enterprise IdP to an upstream with its own authorization server: ID-JAG\n"
"""docs/gateway.md's section: its ``sh`` block makes the gateway's keys, its ``text`` block is the gateway's command."""
KEY_FILES = {AT_IDP: "idp-client.key", AT_AS: "tools-client.key"}
SEEN = modern_request("tools/call", {"name": "seen", "arguments": {}})
GETENV = modern_request("tools/call", {"name": "getenv", "arguments": {"name": "TOOLS_TOKEN"}})
SERVER = f"{sys.executable} -m e2e._plain_stdio"
API = "https://api.tools.example/"  # a stdio process's API: the resource its token is for
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
URL_CAPABLE: dict[str, Any] = {CLIENT_CAPABILITIES_KEY: {"elicitation": {"url": {}}}}
AUDIENCE = "http://gateway/mcp"  # the in-process gateway's: its users' tokens are for it


def recipe() -> str:
    return (MAIN / "docs" / "gateway.md").read_text().partition(RECIPE)[2].partition("\n## ")[0]


def made_keys(directory: Path) -> dict[str, Path]:
    """The gateway's two keys, made by the recipe's ``openssl`` commands as they are written, in ``directory``: their
    files (each public half beside it, ``.pub.pem``), by its client id at each server."""
    made = recipe().partition("```sh\n")[2].partition("```")[0]
    environ = {"PATH": os.environ["PATH"]}
    subprocess.run(["sh", "-ec", made], cwd=directory, check=True, capture_output=True, env=environ)
    return {client: directory / name for client, name in KEY_FILES.items()}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return made_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def servers(keys: dict[str, Path]) -> Iterator[tuple[IdentityProvider, ResourceServer]]:
    """The identity provider and the resource's authorization server, each knowing the gateway's client by the public
    half of its key alone; the identity provider's records name the gateway's client at the authorization server."""
    idp, resource_server = IdentityProvider(), ResourceServer()
    idp.clients[AT_IDP] = public_key(keys[AT_IDP])
    resource_server.clients[AT_AS] = public_key(keys[AT_AS])
    resource_server.identity_provider = idp
    with serving(idp), serving(resource_server):
        idp.records[(AT_IDP, resource_server.url)] = AT_AS
        yield idp, resource_server


def public_key(path: Path) -> Any:
    return serialization.load_pem_public_key(path.with_suffix(".pub.pem").read_bytes())


def keyed(keys: dict[str, Path]) -> tuple[str, ...]:
    """Both of the gateway's clients, by ``private_key_jwt``."""
    return (
        *("--exchange-client-id", AT_IDP, "--exchange-client-auth", "private_key_jwt"),
        *("--exchange-client-key-file", str(keys[AT_IDP])),
        *("--id-jag-client-id", AT_AS, "--id-jag-client-auth", "private_key_jwt"),
        *("--id-jag-client-key-file", str(keys[AT_AS])),
    )


def verifying(idp: IdentityProvider) -> tuple[str, ...]:
    """Users' tokens for the gateway's own URL, verified with the identity provider's keys (its issuer, the
    exchange's)."""
    return ("--auth-jwks", idp.url + "/jwks.json", "--auth-issuer", idp.url, "--auth-audience", "{url}")


@contextlib.contextmanager
def gateway(*arguments: str) -> Iterator[Process]:
    """``mcp-sessions gateway`` with ``arguments``, logging at debug, no client secret in its environment."""
    environ = {"PYTHONPATH": f"{MAIN}/middleware:{MAIN}/tests"}
    with gateway_process([], *arguments, "--log-level", "debug", environ=environ) as process:
        yield process


def call(url: str, token: str, body: dict[str, Any] = SEEN) -> httpx.Response:
    headers = {**modern_headers(body), "Authorization": f"Bearer {token}"}
    return httpx.post(url, json=body, headers=headers, timeout=30)


def seen_token(answer: httpx.Response) -> str:
    """The bearer token the upstream's ``seen`` tool was called with (the upstream had verified it)."""
    assert answer.status_code == 200, answer.text
    headers = json.loads(result_of(answer, SEEN["id"])["result"]["content"][0]["text"])["headers"]
    authorization: str = headers["authorization"]
    scheme, _, token = authorization.partition(" ")
    assert scheme == "Bearer"
    return token


def claims(token: str) -> dict[str, Any]:
    decoded: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return decoded


def secrets_in(output: str, *tokens: str) -> list[str]:
    """Of ``tokens`` and every JWT the output holds (an ID-JAG, an assertion, a token), those in ``output``."""
    return [token for token in (*tokens, *_JWT.findall(output)) if token in output]


def recipe_command(idp: IdentityProvider, mcp: str, keys: dict[str, Path]) -> list[str]:
    """The recipe's gateway command as written, its example servers and key files the tests' (without
    ``mcp-sessions gateway``)."""
    written = recipe().partition("```text\n")[2].partition("```")[0]
    command = shlex.split(written.replace("\\\n", " "))
    assert command[:2] == ["mcp-sessions", "gateway"]
    ours = {
        "https://tools.internal/mcp": mcp,
        "https://login.example.com/jwks": idp.url + "/jwks.json",
        "https://login.example.com": idp.url,
        "https://mcp.example.com/mcp": "{url}",
        "/etc/mcp-gateway/idp-client.key": str(keys[AT_IDP]),
        "/etc/mcp-gateway/tools-client.key": str(keys[AT_AS]),
    }
    return [ours.get(argument, argument) for argument in command[2:]]


def test_two_users_reach_the_upstream_each_with_its_own_token_of_its_authorization_server(
    servers: tuple[IdentityProvider, ResourceServer], keys: dict[str, Path]
) -> None:
    """docs/gateway.md's recipe, as written: the upstream names its authorization server in its metadata (RFC
    9728), which the gateway reads; each user's token is exchanged at the identity provider for an ID-JAG for that
    server and the upstream, which that server takes for a token of its own, for that user; kept, so that the next
    call asks neither server. The gateway authenticates to both by the recipe's keys alone, no secret anywhere. No
    token of any kind, nor an assertion, reaches its output."""
    idp, resource_server = servers
    with upstream(resource_server) as mcp, gateway(*recipe_command(idp, mcp, keys)) as front:
        alice, bob = (idp.login(user, front.url()) for user in ("alice", "bob"))
        assert call(mcp, alice).status_code == 401  # the upstream takes its authorization server's tokens alone
        asked, granted = len(idp.asked), len(resource_server.issued)
        for_alice = seen_token(call(front.url(), alice))
        assert seen_token(call(front.url(), alice)) == for_alice  # kept: neither server asked again
        for_bob = seen_token(call(front.url(), bob))
        output = front.stop().decode(errors="replace")
    assert len(idp.asked) == asked + 2 and len(resource_server.issued) == granted + 2
    assert resource_server.issued[-2:] == [for_alice, for_bob]
    for token, user in ((for_alice, "alice"), (for_bob, "bob")):
        assert claims(token)["iss"] == resource_server.url
        assert claims(token)["aud"] == mcp
        assert claims(token)["sub"] == user
        assert claims(token)["client_id"] == AT_AS
    exchange = idp.asked[-1]
    assert exchange["requested_token_type"] == ID_JAG_TYPE
    assert exchange["audience"] == resource_server.url  # the issuer the upstream's metadata named
    assert exchange["resource"] == mcp
    assert exchange["client_id"] == AT_IDP  # the client's own, with its assertion: no client id of the AS's
    assert resource_server.asked[-1]["client_id"] == AT_AS
    assert secrets_in(output, alice, bob, for_alice, for_bob) == []


async def test_the_id_jag_is_what_the_draft_says_and_used_once(
    servers: tuple[IdentityProvider, ResourceServer], keys: dict[str, Path]
) -> None:
    """What the stand-ins check, shown on the gateway's own requests: the ID-JAG the identity provider issues for
    the gateway's exchange has the draft's type and claims, and the resource's server takes it once (a replay is
    ``invalid_grant``); a client assertion is taken once too."""
    idp, resource_server = servers
    at_idp = ClientAuth("private_key_jwt", AT_IDP, key=private_key(str(keys[AT_IDP]), "-"))
    at_as = ClientAuth("private_key_jwt", AT_AS, key=private_key(str(keys[AT_AS]), "-"))
    alice = idp.login("alice", AUDIENCE)
    form = {"grant_type": "urn:ietf:params:oauth:grant-type:token-exchange", "subject_token": alice}
    form |= {"subject_token_type": "urn:ietf:params:oauth:token-type:access_token", "audience": resource_server.url}
    form |= {"requested_token_type": ID_JAG_TYPE, "resource": "https://tools.example/mcp", "scope": "tools.read"}
    async with httpx.AsyncClient(timeout=30) as http:
        answer = (await http.post(idp.url + "/token", data=form | at_idp.request(idp.url).data)).json()
        issued = answer["access_token"]
        grant = {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": issued}
        sent = at_as.request(resource_server.url)
        endpoint = resource_server.url + "/token"
        first = await http.post(endpoint, data=grant | sent.data)
        again = await http.post(endpoint, data=grant | at_as.request(resource_server.url).data)
        replayed = await http.post(endpoint, data=grant | sent.data)
        # an ID token as the subject: one issued to the client that asks, not to another (Okta's XAA)
        elsewhere = form | {"subject_token": idp.id_token("another-app", "alice"), "subject_token_type": ID_TOKEN_TYPE}
        not_its = await http.post(idp.url + "/token", data=elsewhere | at_idp.request(idp.url).data)
    assert (answer["issued_token_type"], answer["token_type"]) == (ID_JAG_TYPE, "N_A")
    assert jwt.get_unverified_header(issued)["typ"] == ID_JAG_JWT_TYPE
    read = jwt.decode(issued, idp.key.public_key(), ["RS256"], audience=resource_server.url, issuer=idp.url)
    assert set(read) == {"iss", "sub", "aud", "client_id", "jti", "iat", "exp", "resource", "scope"}
    assert (read["sub"], read["client_id"], read["resource"], read["scope"]) == (
        "alice",
        AT_AS,
        "https://tools.example/mcp",
        "tools.read",
    )
    assert read["exp"] - read["iat"] <= 300
    assert first.status_code == 200, first.text
    assert claims(first.json()["access_token"])["aud"] == "https://tools.example/mcp"
    assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")  # the ID-JAG again
    assert (replayed.status_code, replayed.json()["error"]) == (401, "invalid_client")  # the assertion again
    assert (not_its.status_code, not_its.json()["error"]) == (400, "invalid_grant")


async def test_one_user_s_concurrent_first_calls_make_one_exchange_and_one_grant(
    servers: tuple[IdentityProvider, ResourceServer], keys: dict[str, Path]
) -> None:
    """Through the gateway in process, its upstream's server given (``--id-jag-issuer`` and ``--exchange-resource``:
    no metadata read): eight first calls of one user wait for one exchange and one grant, whose token each of them
    carries to the upstream; another user's calls get their own."""
    idp, resource_server = servers
    with upstream(resource_server) as mcp:
        exchange = exchanging(idp, keys)
        auth = GatewayAuth(jwks_url=idp.url + "/jwks.json", issuer=idp.url, audience=AUDIENCE)
        token = UpstreamToken("id-jag", exchange, Target(resource_server.url, mcp))
        app = gateway_app([mcp], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=token)
        users = {user: idp.login(user, AUDIENCE) for user in ("alice", "bob")}
        asked, granted = len(idp.asked), len(resource_server.issued)
        answers: dict[str, list[httpx.Response]] = {user: [] for user in users}
        async with asgi_client(exchange.wrap(app)) as http:

            async def post(user: str) -> None:
                headers = {**modern_headers(SEEN), "Authorization": f"Bearer {users[user]}"}
                answers[user].append(await http.post("/mcp", json=SEEN, headers=headers))

            async with anyio.create_task_group() as tasks:
                for _ in range(8):
                    for user in users:
                        tasks.start_soon(post, user)
    assert (len(idp.asked), len(resource_server.issued)) == (asked + 2, granted + 2)
    seen = {user: {seen_token(answer) for answer in answers[user]} for user in users}
    assert all(len(tokens) == 1 for tokens in seen.values())  # one token for each user's eight calls
    assert set().union(*seen.values()) == set(resource_server.issued[-2:])
    assert {user: claims(next(iter(seen[user])))["sub"] for user in users} == {"alice": "alice", "bob": "bob"}


def exchanging(idp: IdentityProvider, keys: dict[str, Path], at_as: str = AT_AS, key: Any = None) -> TokenExchange:
    """The gateway's exchange at ``idp``, by its key there, and its ID-JAG client ``at_as`` (by its key, or
    ``key``)."""
    at_idp = ClientAuth("private_key_jwt", AT_IDP, key=private_key(str(keys[AT_IDP]), "-"))
    granted = ClientAuth("private_key_jwt", at_as, key=key or private_key(str(keys[AT_AS]), "-"))
    return TokenExchange(client=at_idp, issuer=idp.url, id_jag=granted)


@pytest.mark.parametrize(
    ("case", "status", "says"),
    [
        # the identity provider issues no ID-JAG for a server it has no record of for this client (invalid_target)
        ("unknown server", 403, "the identity provider will not issue this user's (invalid_target"),
        # the ID-JAG names the client the identity provider's records name, not the one that presents it
        ("another client", 401, "will not exchange this user's ID-JAG (invalid_grant"),
        # the resource's server does not know the gateway's key
        ("another key", 502, "refused the gateway (invalid_client"),
        # the resource's server cannot be reached
        ("unreachable", 502, "could not be reached"),
    ],
)
async def test_a_refusal_at_either_step_names_the_server_that_refused(
    servers: tuple[IdentityProvider, ResourceServer], keys: dict[str, Path], case: str, status: int, says: str
) -> None:
    """Through the gateway in process: one answer that names the server that refused and why (RFC 6750's fields on
    a 401 or 403), never the user's token; each user's concurrent first requests make one exchange and one grant."""
    idp, resource_server = servers
    issuer = resource_server.url
    if case == "unknown server":
        issuer = "https://elsewhere.example"
    elif case == "unreachable":
        with serving(ResourceServer()) as gone:
            issuer = gone
        idp.records[(AT_IDP, gone)] = AT_AS  # known to the identity provider, gone since
    at_as = "stranger" if case == "another client" else AT_AS
    if case == "another client":
        resource_server.clients["stranger"] = public_key(keys[AT_AS])
    key = ec.generate_private_key(ec.SECP256R1()) if case == "another key" else None
    exchange = exchanging(idp, keys, at_as, key)
    auth = GatewayAuth(jwks_url=idp.url + "/jwks.json", issuer=idp.url, audience=AUDIENCE)
    target = Target(issuer, "https://tools.example/mcp", id_jag=True)
    token = UpstreamToken("id-jag", exchange, target)
    app = gateway_app(["http://127.0.0.1:9/mcp"], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=token)
    alice = idp.login("alice", AUDIENCE)
    asked = len(idp.asked)
    answers: list[httpx.Response] = []
    async with asgi_client(exchange.wrap(app)) as http:

        async def post() -> None:
            headers = {**modern_headers(SEEN), "Authorization": f"Bearer {alice}"}
            answers.append(await http.post("/mcp", json=SEEN, headers=headers))

        async with anyio.create_task_group() as tasks:
            for _ in range(4):
                tasks.start_soon(post)
    assert len(idp.asked) == asked + 1  # one exchange for the four
    assert {answer.status_code for answer in answers} == {status}
    message = result_of(answers[0], SEEN["id"])["error"]["message"]
    assert says in message
    if case != "unknown server":
        assert f"the authorization server {issuer}" in message
    if status < 500:
        code = "invalid_token" if status == 401 else "insufficient_scope"
        assert answers[0].headers["www-authenticate"].startswith(f'Bearer error="{code}", error_description=')
    assert alice not in answers[0].text
    assert _JWT.findall(answers[0].text) == []


def _metadata(named: dict[str, Any] | None, status: int = 200) -> Starlette:
    """An upstream whose protected resource metadata (at its MCP path's) is ``named``, ``{url}`` in it its own MCP
    URL; none (404) for ``None``."""

    async def metadata(request: Request) -> Response:
        if named is None:
            return Response(status_code=404)
        url = str(request.base_url).rstrip("/") + "/mcp"
        return JSONResponse(json.loads(json.dumps(named).replace("{url}", url)), status)

    return Starlette(routes=[Route("/.well-known/oauth-protected-resource/mcp", metadata)])


@pytest.mark.parametrize(
    ("named", "says"),
    [
        (None, "names no protected resource metadata (RFC 9728): give --id-jag-issuer"),
        ({"resource": "https://elsewhere.example/mcp", "authorization_servers": ["https://as.example"]}, "another"),
        ({"resource": "{url}", "authorization_servers": []}, "names no authorization server: give --id-jag-issuer"),
        ({"resource": "{url}", "authorization_servers": ["file:///etc"]}, "names no http(s) authorization server"),
        ({"resource": "{url}", "authorization_servers": [{"no": "url"}]}, "names no authorization server"),
    ],
    ids=["none", "another resource", "no server", "not http", "not a string"],
)
async def test_an_upstream_s_metadata_that_names_no_server_for_it_is_a_502_naming_the_flag(
    servers: tuple[IdentityProvider, ResourceServer], keys: dict[str, Path], named: dict[str, Any] | None, says: str
) -> None:
    """The upstream's metadata (RFC 9728) is a stranger's too: none, one for another resource (§3.3), or one that
    lists no http(s) authorization server is the client's 502 that says which flag to give, and nothing is exchanged;
    the next request reads it again."""
    idp, _ = servers
    with serve(_metadata(named)) as base:
        exchange = exchanging(idp, keys)
        auth = GatewayAuth(jwks_url=idp.url + "/jwks.json", issuer=idp.url, audience=AUDIENCE)
        token = UpstreamToken("id-jag", exchange, Target(), upstream=base + "/mcp")
        app = gateway_app([base + "/mcp"], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=token)
        alice = idp.login("alice", AUDIENCE)
        asked = len(idp.asked)
        async with asgi_client(exchange.wrap(app)) as http:
            headers = {**modern_headers(SEEN), "Authorization": f"Bearer {alice}"}
            answers = [await http.post("/mcp", json=SEEN, headers=headers) for _ in range(2)]
    assert [answer.status_code for answer in answers] == [502, 502]
    message = result_of(answers[1], SEEN["id"])["error"]["message"]
    assert says in message
    assert len(idp.asked) == asked
    assert alice not in answers[1].text


def _naming_itself(received: list[tuple[str, str, bytes]]) -> Starlette:
    """An upstream whose protected resource metadata names itself as its authorization server, which serves that
    server's metadata and a token endpoint that takes anything: each request to it (``received``: its path, its
    ``Authorization``, its body)."""

    async def named(request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        if request.url.path.startswith("/.well-known/oauth-protected-resource"):
            return JSONResponse({"resource": base + "/mcp", "authorization_servers": [base]})
        return JSONResponse({"issuer": base, "token_endpoint": base + "/token"})

    async def token(request: Request) -> Response:
        received.append((request.url.path, request.headers.get("authorization", ""), await request.body()))
        return JSONResponse({"access_token": "taken", "token_type": "Bearer"})

    return Starlette(
        routes=[
            Route("/.well-known/oauth-protected-resource/mcp", named),
            Route("/.well-known/oauth-authorization-server", named),
            Route("/token", token, methods=["POST"]),
        ]
    )


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
@pytest.mark.parametrize("given", [False, True], ids=["issuer discovered", "issuer given"])
async def test_a_client_secret_goes_to_no_server_but_the_one_named_for_it(
    servers: tuple[IdentityProvider, ResourceServer], keys: dict[str, Path], method: ClientAuthMethod, given: bool
) -> None:
    """The gateway's client at the resource's server holds a secret named for that server; the upstream's metadata
    (RFC 9728) names another, itself. Its issuer read from there, the ID-JAG's grant is refused before it is sent,
    naming both servers (``ClientAuth``'s one rule); its issuer given (``--id-jag-issuer``), the metadata that names
    another is refused before anything is exchanged, naming both. Either way the other server receives no request
    for a token, and the secret is nowhere in the answer."""
    idp, resource_server = servers
    secret = "s3cr3t/of+the-real-server"
    received: list[tuple[str, str, bytes]] = []
    with serve(_naming_itself(received)) as base:
        idp.records[(AT_IDP, base)] = AT_AS  # the identity provider would issue an ID-JAG for it
        at_idp = ClientAuth("private_key_jwt", AT_IDP, key=private_key(str(keys[AT_IDP]), "-"))
        there = ClientAuth(method, AT_AS, secret=secret, servers=(resource_server.url,))
        exchange = TokenExchange(client=at_idp, issuer=idp.url, id_jag=there)
        auth = GatewayAuth(jwks_url=idp.url + "/jwks.json", issuer=idp.url, audience=AUDIENCE)
        target = Target(resource_server.url if given else None)
        token = UpstreamToken("id-jag", exchange, target, upstream=base + "/mcp")
        app = gateway_app([base + "/mcp"], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=token)
        alice = idp.login("alice", AUDIENCE)
        asked = len(idp.asked)
        async with asgi_client(exchange.wrap(app)) as http:
            headers = {**modern_headers(SEEN), "Authorization": f"Bearer {alice}"}
            answer = await http.post("/mcp", json=SEEN, headers=headers)
    assert received == []
    assert answer.status_code == 502
    message = result_of(answer, SEEN["id"])["error"]["message"]
    if given:
        assert f"names the authorization server {base}, not {resource_server.url} (--id-jag-issuer)" in message
        assert len(idp.asked) == asked  # nothing exchanged
    else:
        assert f"the gateway's client secret goes to {resource_server.url} alone, not to {base}" in message
    assert secret not in answer.text and quote_plus(secret) not in answer.text


@pytest.mark.parametrize(
    "answer",
    [
        {"access_token": "eyJh.eyJi.c2ln", "issued_token_type": ACCESS_TOKEN_TYPE, "token_type": "Bearer"},
        {"access_token": "eyJh.eyJi.", "issued_token_type": ID_JAG_TYPE, "token_type": "N_A"},  # unsigned
        {"access_token": "not a JWT", "issued_token_type": ID_JAG_TYPE, "token_type": "N_A"},
        {"issued_token_type": ID_JAG_TYPE, "token_type": "N_A"},
    ],
    ids=["an access token", "unsigned", "not a JWT", "none"],
)
async def test_an_identity_provider_that_issues_no_id_jag_is_a_502_and_nothing_goes_further(
    answer: dict[str, str],
) -> None:
    """An identity provider that answers the ID-JAG's exchange with something else (an access token of its own, an
    unsigned JWT, none): the gateway presents nothing to the resource's server, and says which server failed."""
    granted: list[str] = []

    async def token(request: Request) -> Response:
        granted.append(str(request.url))
        return JSONResponse(answer)

    stand_in = Starlette(routes=[Route("/token", token, methods=["POST"])])
    with serve(stand_in) as base:
        client = ClientAuth("client_secret_basic", "g", secret="s", servers=(base + "/token", base + "/as"))
        exchange = TokenExchange(client=client, token_endpoint=base + "/token", id_jag=client)
        try:
            with anyio.fail_after(30), pytest.raises(ExchangeRefused) as refused:
                await exchange.token("the-user-s-token", Target(base + "/as", id_jag=True))
        finally:
            await exchange.aclose()
    assert (refused.value.status, refused.value.description) == (502, "the identity provider issued no ID-JAG")
    assert granted == [base + "/token"]  # the exchange alone: no grant asked of the resource's server


def test_a_stdio_process_gets_its_user_s_token_of_the_api_s_authorization_server(
    servers: tuple[IdentityProvider, ResourceServer], keys: dict[str, Path]
) -> None:
    """``--process-env TOOLS_TOKEN=id-jag:ISSUER,resource=URI,scope=...`` with ``--id-jag-subject id_token``: each
    conversation's process gets its user's token of that server for that resource, by an ID-JAG exchanged for her
    ID token of the gateway's own login, which the stdio gateway asks her for by URL elicitation on its own sign-in
    routes (alice on 2026-07-28 at her call: an ``input_required`` result; bob on 2025-11-25 at his ``initialize``:
    -32042); her URL opened by bob keeps nothing for either; she lists and revokes her login at ``/oauth/grants``,
    and is asked again. No token of any kind reaches the output. (The access token as the subject:
    ``test_gateway_masks``.)"""
    idp, resource_server = servers
    spec = f"TOOLS_TOKEN=id-jag:{resource_server.url},resource={API},scope=tools.read"
    env = ("--process-env", spec, "--accept-shared-uid", "--id-jag-subject", "id_token", *logging_in(idp, keys))
    getenv = modern_request("tools/call", {"name": "getenv", "arguments": {"name": "TOOLS_TOKEN"}}, meta=URL_CAPABLE)
    begun = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}
    initialize = legacy_request("initialize", begun)
    given = {}
    # in process: its subject is the app's answers and its log; the process is the recipe's tests'
    flags = ("--stdio", SERVER, *env, *verifying(idp), *keyed(keys), "--log-level", "debug")
    with gateway_in_process([], *flags, environ={"PYTHONPATH": f"{MAIN}/middleware:{MAIN}/tests"}) as front:
        users = {user: idp.login(user, front.url()) for user in ("alice", "bob")}
        asked = result_of(call(front.url(), users["alice"], getenv), getenv["id"])["result"]
        assert asked["resultType"] == "input_required", asked
        (elicitation,) = asked["inputRequests"].values()
        # bob at the URL made for alice: the IdP signs him in, and his ID token is kept for no one (the URL spent)
        carried = signed_in("bob", elicitation["params"]["url"])
        assert carried.status_code == 403 and "made for another user" in carried.text
        asked = result_of(call(front.url(), users["alice"], getenv), getenv["id"])["result"]
        (elicitation,) = asked["inputRequests"].values()
        assert signed_in("alice", elicitation["params"]["url"]).status_code == 200
        legacy = {**JSON_SSE, "Authorization": f"Bearer {users['bob']}"}
        refused = result_of(httpx.post(front.url(), json=initialize, headers=legacy, timeout=30), 1)["error"]
        assert refused["code"] == -32042
        (elicitation,) = refused["data"]["elicitations"]
        assert signed_in("bob", elicitation["url"]).status_code == 200
        assert "result" in result_of(httpx.post(front.url(), json=initialize, headers=legacy, timeout=30), 1)
        for user, token in users.items():
            answer = call(front.url(), token, GETENV)
            assert answer.status_code == 200, answer.text
            given[user] = result_of(answer, GETENV["id"])["result"]["structuredContent"]["result"]
        exchanges = len(idp.asked)
        # her login, at /oauth/grants: listed (no token), then revoked; her next call is asked to sign in again
        grants = front.url().replace("/mcp", "/oauth/grants")
        mine = {"Authorization": f"Bearer {users['alice']}"}
        listed = httpx.get(grants, headers=mine, timeout=30)
        assert listed.json()["grants"][0]["authorization_server"] == idp.url, listed.text
        revoked = httpx.delete(grants, headers=mine, timeout=30).json()
        # the stand-in names no revocation endpoint: forgotten at the gateway, the IdP not told
        assert revoked == {"revoked": [{"authorization_server": idp.url, "notified": False}]}
        again = result_of(call(front.url(), users["alice"], getenv), getenv["id"])["result"]
        assert again["resultType"] == "input_required"
        output = front.stop().decode(errors="replace")
    assert len(idp.asked) == exchanges  # nothing exchanged for her once she revoked her login
    assert secrets_in(listed.text, *idp.id_tokens, *idp.refresh_tokens) == []
    assert idp.asked[-1]["scope"] == "tools.read" and idp.asked[-1]["resource"] == API
    assert idp.asked[-1]["subject_token_type"] == ID_TOKEN_TYPE
    for user, token in given.items():
        assert token in resource_server.issued
        assert (claims(token)["sub"], claims(token)["aud"], claims(token)["scope"]) == (user, API, "tools.read")
    assert secrets_in(output, *users.values(), *given.values(), *idp.id_tokens) == []


def logging_in(idp: IdentityProvider, keys: dict[str, Path]) -> tuple[str, ...]:
    """The gateway's own login at the identity provider: its client there, by its key (the exchange's: an ID token's
    ``aud`` must be the client that exchanges it)."""
    return (
        *("--login-issuer", idp.url, "--login-client-id", AT_IDP),
        *("--login-client-auth", "private_key_jwt", "--login-client-key-file", str(keys[AT_IDP])),
    )


def signed_in(user: str, url: str) -> httpx.Response:
    """``user``'s headless browser opens the sign-in ``url``, following every redirect (the IdP signs her in at
    once): the last page."""
    with httpx.Client(follow_redirects=True, headers={USER_HEADER: user}, timeout=30) as browser:
        return browser.get(url)


def test_the_subject_is_her_id_token_from_the_gateway_s_own_login_asked_for_by_url_elicitation(
    servers: tuple[IdentityProvider, ResourceServer], keys: dict[str, Path]
) -> None:
    """``--id-jag-subject id_token``, the recipe's gateway with its login at the identity provider (the same client,
    by its key): alice on 2026-07-28 (an ``input_required`` result carrying ``elicitation/create`` in URL mode) and
    bob on 2025-11-25 (``URLElicitationRequiredError``, -32042) are asked to sign in; each opens the URL, the IdP
    signs her in, the page says so; her retry reaches the upstream with her own token of its server, by an ID-JAG
    exchanged for her ID token (``subject_token_type`` id_token; the stand-in takes only one issued to the client
    that asks). Her ID token, once due, is refreshed with the IdP's refresh token, and the next call exchanges the
    new one. No token, nor the sign-in's code, reaches the output or a page."""
    idp, resource_server = servers
    login = ("--id-jag-subject", "id_token", *logging_in(idp, keys))
    capable = modern_request("tools/call", {"name": "seen", "arguments": {}}, meta=URL_CAPABLE)
    legacy = legacy_request("tools/call", {"name": "seen", "arguments": {}}, id=7)
    idp.id_lifetime = 4  # renewed 2 s after it was issued
    try:
        with upstream(resource_server) as mcp, gateway(*recipe_command(idp, mcp, keys), *login) as front:
            alice, bob = (idp.login(user, front.url()) for user in ("alice", "bob"))
            asked = result_of(call(front.url(), alice, capable), capable["id"])["result"]
            assert asked["resultType"] == "input_required", asked
            (elicitation,) = asked["inputRequests"].values()
            assert (elicitation["method"], elicitation["params"]["mode"]) == ("elicitation/create", "url")
            page = signed_in("alice", elicitation["params"]["url"])
            assert page.status_code == 200 and "You are signed in at" in page.text
            for_alice = seen_token(call(front.url(), alice))
            assert idp.asked[-1]["subject_token_type"] == ID_TOKEN_TYPE
            assert idp.asked[-1]["client_id"] == AT_IDP

            headers = {**JSON_SSE, "MCP-Protocol-Version": "2025-11-25", "Authorization": f"Bearer {bob}"}
            refused = result_of(httpx.post(front.url(), json=legacy, headers=headers, timeout=30), 7)["error"]
            assert refused["code"] == -32042
            (elicitation,) = refused["data"]["elicitations"]
            assert signed_in("bob", elicitation["url"]).status_code == 200
            answer = httpx.post(front.url(), json=legacy, headers=headers, timeout=30)
            for_bob = json.loads(result_of(answer, 7)["result"]["content"][0]["text"])["headers"]["authorization"]

            refreshes = idp.refreshes
            # renewed half way to its exp (of a whole second: 3 to 4 s ahead), so by 1 s before it; bob's is the
            # later, alice's due by then too
            due = claims(idp.id_tokens[-1])["exp"] - 1
            for _ in range(200):  # at most 4 s
                if time.time() > due:
                    break
                time.sleep(0.02)
            again = seen_token(call(front.url(), alice))
            output = front.stop().decode(errors="replace")
    finally:
        idp.id_lifetime = 600
    assert idp.refreshes == refreshes + 1  # hers, once: bob's waits for his next call
    assert again != for_alice and again in resource_server.issued
    for token, user in ((for_alice, "alice"), (again, "alice"), (for_bob.removeprefix("Bearer "), "bob")):
        assert (claims(token)["sub"], claims(token)["aud"], claims(token)["iss"]) == (user, mcp, resource_server.url)
    assert "code=" not in output
    assert secrets_in(output, alice, bob, for_alice, again, *idp.id_tokens, *idp.refresh_tokens) == []
    assert secrets_in(page.text, *idp.id_tokens) == []


def test_a_file_s_server_takes_its_subject_from_her_login_at_the_gateway_s_base(
    servers: tuple[IdentityProvider, ResourceServer], keys: dict[str, Path], tmp_path: Path
) -> None:
    """``id-jag-subject = "id_token"`` in a ``--config`` file's server (its ``login-*`` keys beside it, the exchange's
    client in ``[gateway]``), routed as the file routes it: alice's call at ``/servers/tools/mcp`` is asked to sign
    in at the gateway's base (``/oauth/authorize/ID``, where its one callback is), the IdP signs her in, and her
    retry reaches the upstream with her own token of its server, by an ID-JAG exchanged for her ID token;
    ``/oauth/grants`` at the base lists her login with its ``server``. No token reaches the log. (The flags' form:
    ``test_the_subject_is_her_id_token_from_the_gateway_s_own_login_asked_for_by_url_elicitation``.)"""
    idp, resource_server = servers
    capable = modern_request("tools/call", {"name": "seen", "arguments": {}}, meta=URL_CAPABLE)
    file = tmp_path / "team.toml"
    with upstream(resource_server) as mcp:
        file.write_text(
            f'[gateway]\nauth-jwks = "{idp.url}/jwks.json"\nauth-issuer = "{idp.url}"\n'
            f'exchange-client-id = "{AT_IDP}"\nexchange-client-auth = "private_key_jwt"\n'
            f'exchange-client-key-file = "{keys[AT_IDP]}"\n'
            f'[servers.tools]\nurl = "{mcp}"\nupstream-token = "id-jag"\nid-jag-subject = "id_token"\n'
            f'id-jag-client-id = "{AT_AS}"\nid-jag-client-auth = "private_key_jwt"\n'
            f'id-jag-client-key-file = "{keys[AT_AS]}"\n'
            f'login-issuer = "{idp.url}"\nlogin-client-id = "{AT_IDP}"\nlogin-client-auth = "private_key_jwt"\n'
            f'login-client-key-file = "{keys[AT_IDP]}"\n',
            encoding="utf-8",
        )
        # in process, from the file (configured_file): its subject is the app's answers and its log
        with gateway_in_process([], "--config", str(file), "--auth-audience", "{url}") as front:
            alice = idp.login("alice", front.url())
            served = front.url("/servers/tools/mcp")
            asked = result_of(call(served, alice, capable), capable["id"])["result"]
            assert asked["resultType"] == "input_required", asked
            (elicitation,) = asked["inputRequests"].values()
            assert elicitation["params"]["url"].startswith(front.url("/oauth/authorize/"))
            page = signed_in("alice", elicitation["params"]["url"])
            assert page.status_code == 200 and "You are signed in at" in page.text
            token = seen_token(call(served, alice))
            listed = httpx.get(front.url("/oauth/grants"), headers={"Authorization": f"Bearer {alice}"}, timeout=30)
            output = front.stop().decode(errors="replace")
    assert idp.asked[-1]["subject_token_type"] == ID_TOKEN_TYPE
    assert idp.asked[-1]["client_id"] == AT_IDP  # the stand-in takes an ID token issued to the client that asks
    assert (claims(token)["sub"], claims(token)["aud"], claims(token)["iss"]) == ("alice", mcp, resource_server.url)
    assert token in resource_server.issued
    assert [(grant["server"], grant["authorization_server"]) for grant in listed.json()["grants"]] == [
        ("tools", idp.url)
    ]
    assert secrets_in(output, alice, token, *idp.id_tokens, *idp.refresh_tokens) == []
    assert secrets_in(listed.text, *idp.id_tokens, *idp.refresh_tokens) == []


ISSUER = "https://tools-login.example"
UPSTREAM = "https://tools.example/mcp"
VERIFIED = ("--auth-jwks", "http://127.0.0.1:9/k", "--auth-issuer", "http://127.0.0.1:9", "--auth-audience", UPSTREAM)
AS_IDP = ("--exchange-client-id", "g", "--exchange-client-secret-file", "/etc/hostname")
AT_SERVER = ("--id-jag-client-id", "t", "--id-jag-client-secret-file", "/etc/hostname")
SHARED = ("--accept-shared-uid", "--process-containment", "none")
STDIO_GRANTING = ("--stdio", SERVER, *SHARED, "--process-env", f"T=id-jag:{ISSUER}", *VERIFIED, *AS_IDP, *AT_SERVER)
GRANTING = ("--upstream", UPSTREAM, "--upstream-token", "id-jag", "--id-jag-issuer", ISSUER, *VERIFIED, *AS_IDP)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (
            (*GRANTING, "--id-jag-subject", "id_token", *AT_SERVER),
            "--id-jag-subject id_token is an ID token of the gateway's own login: give --login-issuer and its client",
        ),
        (GRANTING, "--id-jag-client-id is missing"),
        ((*STDIO_GRANTING, "--id-jag-subject", "id_token"), "is an ID token of the gateway's own login: give --login"),
        ((*GRANTING, *AT_SERVER, "--exchange-audience", "a"), "give --id-jag-issuer, not --exchange-audience"),
        ((*GRANTING, *AT_SERVER, "--id-jag-client-secret", "s3cr3t-value"), "never a flag"),
        (("--upstream", UPSTREAM, *VERIFIED, *AT_SERVER), "--id-jag-client-id is for --upstream-token id-jag"),
        (
            (*STDIO_GRANTING, "--id-jag-issuer", ISSUER),
            "--id-jag-issuer names --upstream-token id-jag's server",
        ),
        (
            (
                "--stdio",
                SERVER,
                *SHARED,
                "--process-env",
                f"T=id-jag:{ISSUER},audience=x",
                *VERIFIED,
                *AS_IDP,
                *AT_SERVER,
            ),
            f"give id-jag:ISSUER[,resource=URI][,scope=SCOPE], not id-jag:'{ISSUER},audience=x'",
        ),
        (
            ("--stdio", SERVER, *SHARED, "--process-env", "T=id-jag:tools", *VERIFIED, *AS_IDP, *AT_SERVER),
            "'tools' is not an http(s) URL",
        ),
        (
            (*GRANTING, *AT_SERVER[:2], "--id-jag-client-auth", "private_key_jwt"),
            "give --id-jag-client-key-file",
        ),
    ],
)
def test_a_bad_id_jag_configuration_is_one_line_at_startup(arguments: tuple[str, ...], says: str) -> None:
    done = main_run("gateway", *arguments, environ={"MCP_SESSIONS_SECRET": SECRET})
    assert done.returncode == 2
    assert says in done.stderr
    assert done.stderr.count("\n") == 1
    assert "s3cr3t-value" not in done.stderr


@pytest.mark.parametrize("case", ["open", "encrypted", "public"])
def test_a_bad_key_file_of_the_id_jag_client_is_one_line_at_startup(case: str, tmp_path: Path) -> None:
    """The key of the gateway's client at the resource's server is read as the exchange's is (``_keys``)."""
    path = tmp_path / "client.key"
    public = key_file(path)
    key = private_key(str(path), "-")
    if case == "open":
        path.chmod(0o644)
    elif case == "encrypted":
        encryption = serialization.BestAvailableEncryption(b"pass phrase")
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))
    else:
        path.write_bytes(
            public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
    said = {
        "open": " is open to others (mode 644): chmod 600 it",
        "encrypted": "'s key is encrypted: the gateway takes it unencrypted",
        "public": " holds no PEM private key",
    }
    arguments = (*GRANTING, "--id-jag-client-id", "t", "--id-jag-client-auth", "private_key_jwt")
    done = main_run(
        "gateway", *arguments, "--id-jag-client-key-file", str(path), environ={"MCP_SESSIONS_SECRET": SECRET}
    )
    assert done.returncode == 2
    assert done.stderr == f"mcp-sessions gateway: --id-jag-client-key-file: {path}{said[case]}\n"
