"""Many users on one ``mcp-sessions gateway --stdio``: bearer tokens verified at the gateway, each user's own
credentials in their own process, and a front in front of stdio replicas (docs/gateway.md, "one gateway for a team");
every refusal saying why, and an authorization server that fails stalling no one.

The gateway's command where a test is about it (its flags, its log, its spans under ``opentelemetry-instrument``,
its exit status), else its app in process; the tests' stdio server, a JWKS on loopback, RS256 tokens from PyJWT.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import anyio
import anyio.to_thread
import httpx
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client
from mcp.client.extension import ClientExtension, advertise
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from _mcp import (
    SESSION_NOT_FOUND,
    aiter_messages,
    create_session,
    jwt_claims,
    legacy_request,
    modern_headers,
    modern_request,
    sdk_session_meta,
    tool_text,
)
from _redis import RedisServer, free_port, listens
from _uids import uids
from _waits import WITHIN, until, until_awaited
from conftest import asgi_client, in_process, serve
from e2e._gateway import (
    INSPECTOR_CLI,
    JSON_SSE,
    MAIN,
    PYTHONPATH,
    SECRET,
    InProcess,
    Process,
    created,
    gateway_in_process,
    gateway_process,
    installed,
    legacy_initialize,
    linked_tree,
    main_run,
    node,
    python_every_uid_runs,
    readable_directory,
    result_of,
    upstream_server,
)
from e2e._issuer import ISSUER, KEY, KEYS, jwks
from e2e._stdio import stdio_gateway, text_of
from mcp_sessions import SessionsConfig, gateway_app
from mcp_sessions._gateway.auth import _users
from mcp_sessions._gateway.auth._expiry import LIFETIME
from mcp_sessions._gateway.auth._users import GatewayAuth
from mcp_sessions._gateway.sealed._sandbox import SandboxPolicy

pytestmark = pytest.mark.anyio

OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
COOLDOWN = 30.0  # the shortest time between two fetches of the JWKS (PyJWT's, and the gateway's)
SERVER = f"{sys.executable} -m e2e._plain_stdio"
INSTRUMENT = Path(sys.executable).parent / "opentelemetry-instrument"
DISCOVER = modern_request("server/discover")
# Each user's own, in their process; its processes share the tests' uid (a uid each: test_gateway_stdio_containment).
GITHUB_TOKEN = ("--process-env", "GITHUB_TOKEN=header:X-GitHub-Token", "--accept-shared-uid")
SPANS_TO_LOG = {
    "OTEL_TRACES_EXPORTER": "console",
    "OTEL_BSP_SCHEDULE_DELAY": "100",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
}


@contextlib.contextmanager
def gateway(*arguments: str, environ: dict[str, str] | None = None, instrumented: bool = False) -> Iterator[Process]:
    """``mcp-sessions gateway`` with ``arguments`` (``{url}`` in them: its own MCP URL); ``instrumented``: under
    ``opentelemetry-instrument``, its spans printed to its output."""
    program = [*([str(INSTRUMENT)] if instrumented else []), sys.executable, "-m", "mcp_sessions"]
    environ = {**SPANS_TO_LOG, **(environ or {})}
    with gateway_process([], "--log-level", "info", *arguments, environ=environ, program=program) as process:
        yield process


class Jwks:
    """An authorization server's JWKS that a test takes down (``up.clear()``): then it answers no fetch (the gateway's
    times out) until it is up again; each fetch recorded, whether it found the server down, and the last one's time."""

    def __init__(self) -> None:
        self.up = threading.Event()
        self.up.set()
        self.fetches: list[bool] = []
        self.last = 0.0

    async def keys(self, request: Request) -> Response:
        self.fetches.append(not self.up.is_set())
        self.last = time.monotonic()
        if self.fetches[-1]:
            await anyio.to_thread.run_sync(self.up.wait, 10)
            return Response(status_code=503)
        return JSONResponse(KEYS)


TEAM_KEYS = Jwks()  # the team's, which the last test takes down


@pytest.fixture(scope="module")
def team_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the team's processes say a ``hold`` runs, and wait to be let go (the tests' server)."""
    return tmp_path_factory.mktemp("team")


@pytest.fixture(scope="module")
def team(team_files: Path) -> Iterator[Process]:
    """One gateway for a team: tokens from the JWKS, a leeway of 10 s, GITHUB_TOKEN from each X-GitHub-Token."""
    environ = {"PYTHONPATH": PYTHONPATH, "GITHUB_TOKEN": "the-gateway-s-own", "STDIO_TEST_FILES": str(team_files)}
    flags = ("--stdio", SERVER, "--auth-leeway", "10", *GITHUB_TOKEN)
    with (
        serve(Starlette(routes=[Route("/jwks.json", TEAM_KEYS.keys)])) as keys,
        gateway(*flags, *verifying(keys + "/jwks.json"), environ=environ, instrumented=True) as team,
    ):
        yield team


def verifying(keys: str) -> tuple[str, ...]:
    """The options of a gateway that verifies bearer tokens signed by the JWKS at ``keys``, for its own URL."""
    return ("--auth-jwks", keys, "--auth-issuer", ISSUER, "--auth-audience", "{url}")


def token(user: str = "alice", *, key: Any = KEY, algorithm: str = "RS256", kid: str = "k1", **changed: Any) -> str:
    """A token of ``user``'s; ``exp``, ``nbf`` and ``iat`` in ``changed`` are seconds from now."""
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": None, "sub": user, "exp": 300, **changed}
    claims.update({name: now + claims[name] for name in ("exp", "nbf", "iat") if name in claims})
    return jwt.encode(claims, key, algorithm=algorithm, headers={"kid": kid})


def for_gateway(process: Process | InProcess, user: str = "alice", **changed: Any) -> str:
    return token(user, aud=changed.pop("aud", process.url()), **changed)


def test_no_token_gets_401_naming_the_metadata_which_is_served(team: Process) -> None:
    url = team.url()
    answer = httpx.post(url, json=DISCOVER, headers=modern_headers(DISCOVER))
    assert answer.status_code == 401
    metadata_url = f"http://127.0.0.1:{team.port}/.well-known/oauth-protected-resource/mcp"
    # No error code for a request without credentials (RFC 6750, section 3.1).
    assert answer.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}"'
    assert answer.json() == {"error_description": "a bearer token is required"}
    metadata = httpx.get(metadata_url)
    assert metadata.status_code == 200
    assert metadata.json()["resource"] == url
    assert metadata.json()["authorization_servers"] == [ISSUER + "/"]


@pytest.mark.parametrize(
    ("changed", "why"),
    [
        ({"iss": "https://another-issuer.example"}, "the token is from another issuer (iss)"),
        ({"aud": "https://another-server.example/mcp"}, "the token is for another audience (aud)"),
        ({"exp": -120}, "the token has expired (exp)"),  # past the leeway, even the default 60 s
        ({"nbf": 120}, "the token is not valid yet (nbf or iat in the future)"),
        ({"iat": 120}, "the token is not valid yet (nbf or iat in the future)"),
        ({"algorithm": "none", "key": None}, "the token's algorithm (alg) is not its key's"),
        ({"key": OTHER_KEY}, "the token's signature does not verify"),
        ({"kid": "k2"}, "the token's key (kid) is not one of the authorization server's"),
        ({"sub": None}, "the token has no sub claim"),
        ({"sub": ""}, "the token's sub claim names no one"),
    ],
    ids=[
        "issuer",
        "audience",
        "expired",
        "nbf-ahead",
        "iat-ahead",
        "alg-none",
        "another-key",
        "unknown-kid",
        "no-subject",
        "empty-subject",
    ],
)
def test_a_bad_token_gets_401_saying_why(team: Process, changed: dict[str, Any], why: str) -> None:
    bad = for_gateway(team, **changed)
    headers = {**modern_headers(DISCOVER), "Authorization": f"Bearer {bad}"}
    for _ in range(2):
        answer = httpx.post(team.url(), json=DISCOVER, headers=headers)
        assert answer.status_code == 401, answer.text
        challenge = answer.headers["www-authenticate"]
        assert challenge.startswith(f'Bearer error="invalid_token", error_description="{why}", resource_metadata=')
        assert answer.json() == {"error": "invalid_token", "error_description": why}
    signature = bad.rpartition(".")[2] or bad.partition(".")[0]
    assert signature not in challenge
    assert signature not in answer.text  # never the token, nor a part of it
    log = team.log()
    assert log.count(f"401 to 127.0.0.1: {why}".encode()) == 1, log[-3000:]  # once per reason and caller
    assert signature.encode() not in log


@pytest.mark.parametrize("changed", [{"iat": 5}, {"nbf": 5}, {"exp": -5}], ids=["iat-ahead", "nbf-ahead", "exp-behind"])
def test_a_clock_a_few_seconds_off_is_no_refusal(team: Process, changed: dict[str, Any]) -> None:
    """A token from an authorization server whose clock is a few seconds ahead (or the gateway's behind)."""
    headers = {"Authorization": f"Bearer {for_gateway(team, **changed)}", "X-GitHub-Token": "ghp_skewed"}
    answer = httpx.post(team.url(), json=DISCOVER, headers={**modern_headers(DISCOVER), **headers}, timeout=30)
    assert answer.status_code == 200, answer.text


def test_a_jwks_that_cannot_be_fetched_is_one_warning_at_startup_and_every_401_says_so() -> None:
    keys = f"http://127.0.0.1:{free_port()}/jwks.json"  # nothing listens there
    # in process: the warning is the app's, as it starts (its key set's first fetch), and the 401 its answer
    flags = ("--upstream", "http://127.0.0.1:9/mcp", *verifying(keys), "--log-level", "info")
    with gateway_in_process([], *flags) as front:
        lines = [line for line in front.log().splitlines() if b"JWKS" in line]
        assert len(lines) == 1, lines
        assert lines[0].startswith(b"WARNING: "), lines
        assert keys.encode() in lines[0], lines
        bearer = {"Authorization": f"Bearer {for_gateway(front)}"}
        answer = httpx.post(front.url(), json=DISCOVER, headers={**modern_headers(DISCOVER), **bearer})
        assert answer.status_code == 401
        why = "the authorization server's keys (JWKS) cannot be fetched"
        assert f'error="invalid_token", error_description="{why}"' in answer.headers["www-authenticate"]


async def whoami(request: Request) -> PlainTextResponse:
    return PlainTextResponse(request.user.display_name)


async def unanswered(request: Request) -> Response:
    await anyio.sleep(WITHIN)  # cancelled long before, at the token's deadline
    return Response()


async def test_the_key_set_s_state_and_a_leeway_of_its_own() -> None:
    """In process: the key set fetched as the app starts, its state for an operator's view; ``leeway``."""
    audience = "http://127.0.0.1:8000/mcp"
    with jwks() as keys:
        auth = GatewayAuth(jwks_url=keys, issuer=ISSUER, audience=audience, leeway=10)
        routes = [Route("/mcp", whoami, methods=["POST"]), Route("/unanswered", unanswered, methods=["POST"])]
        app = auth.wrap(Starlette(routes=routes))
        before = time.time()
        async with asgi_client(app) as http:
            assert auth.verifier is not None
            state = auth.verifier.state()
            assert state["jwks"] == keys
            assert state["keys"] == 1
            assert state["error"] is None
            assert isinstance(state["fetched_at"], float)
            assert before <= state["fetched_at"] <= time.time()
            cases: list[tuple[dict[str, Any], str]] = [
                ({}, "alice"),
                ({"iat": 5}, "alice"),
                ({"iat": 30}, "the token is not valid yet (nbf or iat in the future)"),
                ({"exp": -30}, "the token has expired (exp)"),
            ]
            for changed, answered in cases:
                answer = await http.post("/mcp", headers={"Authorization": f"Bearer {token(aud=audience, **changed)}"})
                assert (answer.text if answer.status_code == 200 else answer.json()["error_description"]) == answered
            # Its answer not started at exp plus the leeway (here in about 2 s): the 401 of an expired token.
            late = await http.post("/unanswered", headers={"Authorization": f"Bearer {token(aud=audience, exp=-8)}"})
            why = 'Bearer error="invalid_token", error_description="the token has expired (exp)"'
            assert late.status_code == 401, late.text
            assert late.headers["www-authenticate"].startswith(why), late.text
    unreachable = GatewayAuth(jwks_url=keys, issuer=ISSUER, audience=audience)  # the JWKS server has stopped
    async with asgi_client(unreachable.wrap(Starlette())):
        assert unreachable.verifier is not None
        state = unreachable.verifier.state()
        assert state["keys"] == 0
        assert state["fetched_at"] is None
        assert state["error"]
        assert isinstance(state["attempted_at"], float)


@pytest.mark.parametrize(
    ("argument", "environ"),
    [(("--auth-leeway", "-1"), {}), ((), {"MCP_SESSIONS_AUTH_LEEWAY": "a minute"})],
    ids=["negative", "not-a-number"],
)
def test_a_bad_leeway_is_a_usage_error(argument: tuple[str, ...], environ: dict[str, str]) -> None:
    # by main in this process: its exit status and output as the command gives them, refused before the port is bound
    arguments = ("--upstream", "http://127.0.0.1:9/mcp", *verifying("http://127.0.0.1:9/jwks.json"), *argument)
    done = main_run("gateway", *arguments, environ={"MCP_SESSIONS_SECRET": SECRET, **environ})
    assert done.returncode == 2, done.stderr
    assert "--auth-leeway takes a number of seconds" in done.stderr, done.stderr


@contextlib.asynccontextmanager
async def user(team: Process, name: str, github: str | None, mode: str = "auto") -> Any:
    """The ``mcp`` SDK's client as ``name``, with a bearer token and ``github`` as X-GitHub-Token."""
    headers = {"Authorization": f"Bearer {for_gateway(team, name)}"}
    if github is not None:
        headers["X-GitHub-Token"] = github
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(team.url(), http_client=http), mode=mode) as client,
    ):
        yield client, http


async def getenv(client: Client, session: dict[str, Any] | None = None) -> str:
    meta = None if session is None else sdk_session_meta(session)
    return text_of(await client.call_tool("getenv", {"name": "GITHUB_TOKEN"}, meta=meta))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_each_user_s_process_has_their_own_credential(team: Process, mode: str) -> None:
    secrets = {"alice": f"ghp_alice_{mode}_0123456789", "bob": f"ghp_bob_{mode}_0123456789"}
    async with (
        user(team, "alice", secrets["alice"], mode) as (alice, alice_http),
        user(team, "bob", secrets["bob"], mode) as (bob, bob_http),
    ):
        mine, theirs = await create_session(alice), await create_session(bob)
        assert await getenv(alice, mine) == secrets["alice"]
        assert await getenv(bob, theirs) == secrets["bob"]
        assert await getenv(alice) == secrets["alice"]  # no session: alice's own process, not the gateway's value

        with pytest.raises(MCPError) as refused:  # alice's token, bob's session id: not bob's process
            await getenv(alice, theirs)
        assert refused.value.error.code == SESSION_NOT_FOUND
        assert secrets["bob"] not in str(refused.value)

        bob_http.headers["X-GitHub-Token"] = "ghp_changed_mid_conversation"
        with pytest.raises(MCPError, match="other values of x-github-token"):
            await getenv(bob, theirs)
        del alice_http.headers["X-GitHub-Token"]
        with pytest.raises(MCPError, match="must carry it"):  # a 2025 client's create starts no process: a call
            await (getenv(alice, mine) if mode == "legacy" else create_session(alice))
        alice_http.headers["X-GitHub-Token"] = secrets["alice"]
        assert await getenv(alice, mine) == secrets["alice"]  # the conversation goes on with its own value

    await until_awaited(lambda: b'"session.id"' in team.log(), "the spans, exported")
    log = team.log()
    for secret in [*secrets.values(), "ghp_changed_mid_conversation"]:
        assert secret.encode() not in log


def test_a_users_token_reaches_no_other_users_transport_session_or_conversation(
    team: Process, team_files: Path
) -> None:
    """Bob, with Alice's 2025 transport session id or her host conversation id, never reaches her process: her
    transport session is one he does not have (404), even while a request of hers with his request's id is in flight
    (CI: the guard of ids in flight answered him first, "a request with this id is in progress")."""

    def as_user(name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {for_gateway(team, name)}", "X-GitHub-Token": f"ghp_{name}"}

    def getenv_as(http: httpx.Client, headers: dict[str, str], meta: dict[str, Any] | None = None) -> Any:
        arguments = {"name": "getenv", "arguments": {"name": "GITHUB_TOKEN"}}
        if "Mcp-Session-Id" in headers:  # 2025-11-25
            body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": arguments}
            return http.post(team.url(), json=body, headers={**JSON_SSE, **headers})
        body = modern_request("tools/call", arguments, id=1, meta=meta)
        return http.post(team.url(), json=body, headers={**modern_headers(body), **headers})

    with httpx.Client(timeout=30) as http:
        alices = legacy_initialize(http, team.url(), as_user("alice"))
        assert text_of_answer(getenv_as(http, alices)) == "ghp_alice"
        stolen = getenv_as(http, {**alices, **as_user("bob")})
        assert stolen.status_code == 404, stolen.text
        assert "ghp_alice" not in stolen.text, stolen.text
        hold = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "hold", "arguments": {}}}
        with httpx.Client(timeout=30) as hers, ThreadPoolExecutor(1) as pool:
            held = pool.submit(hers.post, team.url(), json=hold, headers={**JSON_SSE, **alices})
            until(lambda: (team_files / "held").exists(), team.output)
            stolen = getenv_as(http, {**alices, **as_user("bob")})
            (team_files / "go").touch()
            assert text_of_answer(held.result()) == "held"
        assert stolen.status_code == 404, stolen.text
        assert "ghp_alice" not in stolen.text, stolen.text
        assert alices["Mcp-Session-Id"][:16].encode() not in team.log()  # a bearer value: in no log line

        chat = {"vscode.conversationId": "chat-1"}
        assert text_of_answer(getenv_as(http, as_user("alice"), chat)) == "ghp_alice"
        assert text_of_answer(getenv_as(http, as_user("bob"), chat)) == "ghp_bob"  # his own process, by her id
        assert text_of_answer(getenv_as(http, as_user("alice"), chat)) == "ghp_alice"


def text_of_answer(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    found: str = result_of(response, 1)["result"]["content"][0]["text"]
    return found


def test_the_principal_header_counts_from_a_trusted_proxy_alone() -> None:
    auth = GatewayAuth(principal_header="X-Forwarded-User")
    contained = SandboxPolicy("bwrap", network="none")  # on the host's network, a process would pass for the proxy
    with (
        stdio_gateway(auth=auth, forwarded_allow_ips="127.0.0.1", sandbox=contained) as url,
        httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=30) as around,
    ):
        named = {**modern_headers(DISCOVER), "X-Forwarded-User": "alice"}
        assert httpx.post(url, json=DISCOVER, headers=named).status_code == 200  # from the proxy
        assert around.post(url, json=DISCOVER, headers=named).status_code == 401  # from anyone else
        assert httpx.post(url, json=DISCOVER, headers=modern_headers(DISCOVER)).status_code == 401


def test_in_front_of_an_upstream_the_token_is_checked_and_not_forwarded() -> None:
    """In process, as the command builds it (``--upstream`` and ``--auth-*``), in front of a real upstream."""
    upstream = upstream_server("behind").streamable_http_app(stateless_http=True, json_response=True)
    audience = "http://127.0.0.1:8000/mcp"  # in_process's own URL
    with jwks() as keys, serve(upstream) as base:
        auth = GatewayAuth(jwks_url=keys, issuer=ISSUER, audience=audience)
        app = gateway_app([base + "/mcp"], config=SessionsConfig(secret=SECRET), auth=auth)
        with in_process(app) as front:
            body = modern_request("tools/call", {"name": "seen", "arguments": {}})
            assert front.post("/mcp", json=body, headers=modern_headers(body)).status_code == 401
            bearer = f"Bearer {token(aud=audience)}"
            answer = front.post("/mcp", json=body, headers={**modern_headers(body), "Authorization": bearer})
    seen = json.loads(result_of(answer, body["id"])["result"]["content"][0]["text"])
    assert "authorization" not in seen["headers"]  # issued for the gateway: no passthrough (_exchange)


async def listened(url: str, bearer: str, *extensions: ClientExtension) -> BaseException | None:
    """How a ``subscriptions/listen`` stream the SDK's client opened with ``bearer`` ended: the error it lost."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), extensions=list(extensions)) as client,
    ):
        with pytest.raises(SubscriptionLost) as lost:
            async with client.listen(tools_list_changed=True) as events:
                async for _ in events:
                    pass
    return lost.value.__cause__


async def test_every_stream_ends_with_its_token_at_exp() -> None:
    """Issue 77, item 9 (docs/gateway.md, "streams end with their token"), leeway 0: a listen stream ends with the
    SEP's AuthorizationEnded for a client that declares it, else as a disconnect; a long call's and a 2025 GET
    stream end cleanly (each after the gateway cancelled the request's app); a long-lived token's stream goes on."""
    upstream, audience = upstream_server("behind").streamable_http_app(), "http://gateway/mcp"
    with jwks() as keys, serve(upstream) as base:
        auth = GatewayAuth(jwks_url=keys, issuer=ISSUER, audience=audience, leeway=0)
        with serve(gateway_app([base + "/mcp"], config=SessionsConfig(secret=SECRET), auth=auth)) as front:
            url, short, got = front + "/mcp", token(aud=audience, exp=4), dict[str, Any]()
            bearer = {"Authorization": f"Bearer {short}"}
            with httpx.Client() as http:
                legacy = legacy_initialize(http, url, bearer)
            call = modern_request(
                "tools/call", {"name": "slow", "arguments": {"seconds": 60}}, meta={"progressToken": 1}
            )

            async def read(name: str, method: str, headers: dict[str, str], body: Any = None) -> None:
                async with (
                    httpx.AsyncClient(timeout=30) as http,
                    http.stream(method, url, headers=headers, json=body) as r,
                ):
                    got[name] = (r.status_code, [m async for m in aiter_messages(r.aiter_lines())], time.time())

            async def listen(name: str, bearer: str, *extensions: ClientExtension) -> None:
                got[name] = (await listened(url, bearer, *extensions), time.time())

            async with anyio.create_task_group() as streams:
                streams.start_soon(listen, "long-lived", token(aud=audience))
                with anyio.fail_after(WITHIN):
                    async with anyio.create_task_group() as ending:
                        ending.start_soon(listen, "sep", short, advertise(LIFETIME))
                        ending.start_soon(listen, "2026-07-28", short)
                        ending.start_soon(read, "call", "POST", {**modern_headers(call), **bearer}, call)
                        ending.start_soon(read, "get", "GET", {**legacy, "Accept": "text/event-stream"})
                assert "long-lived" not in got
                streams.cancel_scope.cancel()
    assert all(ended >= jwt_claims(short)["exp"] for *_, ended in got.values()), got
    sep, legacy_listen = got["sep"][0], got["2026-07-28"][0]
    assert isinstance(sep, MCPError), sep
    assert (sep.code, sep.data) == (-32028, {"reason": "token_expiry"}), sep
    assert isinstance(legacy_listen, MCPError), legacy_listen
    assert legacy_listen.code != -32028, legacy_listen
    assert got["call"][:2] == (200, [{"jsonrpc": "2.0", "method": "notifications/progress", "params": ANY}])
    assert got["get"][:2] == (200, [])


async def test_a_stdio_gateways_listen_stream_ends_with_its_token_too() -> None:
    with jwks() as keys, anyio.fail_after(WITHIN):
        auth = GatewayAuth(jwks_url=keys, issuer=ISSUER, audience="http://gateway/mcp", leeway=0)
        with stdio_gateway(auth=auth) as url:
            ended = await listened(url, token(aud="http://gateway/mcp", exp=4), advertise(LIFETIME))
    assert isinstance(ended, MCPError), ended
    assert (ended.code, ended.data) == (-32028, {"reason": "token_expiry"}), ended


def test_the_mcp_inspector_cli_with_a_bearer_token(team: Process) -> None:
    inspector = installed(Path(INSPECTOR_CLI), "the MCP Inspector").resolve()  # run by its own path: not a link
    command = [node(), str(inspector), "--cli", team.url(), "--transport", "http", "--method", "tools/call"]
    command += ["--tool-name", "getenv", "--tool-arg", "name=GITHUB_TOKEN"]
    bearer = ["--header", f"Authorization: Bearer {for_gateway(team, 'carol')}"]
    bearer += ["--header", "X-GitHub-Token: ghp_carol_inspector"]  # its transport session's process: carol's own
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode != 0
    assert "auth_required" in refused.stderr  # the 401 sends it to OAuth
    done = subprocess.run([*command, *bearer], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["structuredContent"]["result"] == "ghp_carol_inspector"


@pytest.fixture
def readable_tmp() -> Iterator[Path]:
    """A directory any user may read: the team recipe's processes run as uids of their own, in a /tmp of their own
    (``--process-containment bwrap``) that does not hold it."""
    with readable_directory("mcp-sessions-team-") as directory:
        yield directory


@pytest.mark.timeout(600)  # a gateway, the Inspector thrice, create twice: its second block 120 s+ beside two runs
def test_the_team_recipe_runs_as_written(readable_tmp: Path) -> None:
    """docs/gateway.md's "one gateway for a team", its first two blocks as written but for their ports (8000, 8001,
    9000) and uids, the pip line and npx (the Inspector of .cache); as root, each process a uid of its own
    (server-memory's block: test_gateway_stdio_containment)."""
    tmp_path = readable_tmp
    inspector = installed(Path(INSPECTOR_CLI), "the MCP Inspector").resolve()
    section = (MAIN / "docs/gateway.md").read_text(encoding="utf-8").split("## One gateway for a team")[1]
    start, use, *_ = re.findall(r"```sh\n(.*?)```", section.split("### Past one machine")[0], re.S)
    port, jwks_port, status_port = free_port(), free_port(), free_port()
    ports = {"8000": port, "9000": jwks_port, "8001": status_port, "61000-61999": uids(300, 100)}  # this run's
    start, use = (re.sub("|".join(ports), lambda m: str(ports[m[0]]), block) for block in (start, use))
    start = "\n".join(line for line in start.splitlines() if not line.startswith("pip install")) + "\nwait\n"
    use = use.replace("npx @modelcontextprotocol/inspector@2.12.0", f"node {inspector}")
    environ = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    environ["PYTHONPATH"] = f"{MAIN / 'middleware'}:{environ.get('PYTHONPATH', '')}"
    if (python := python_every_uid_runs()) != sys.executable:
        # The processes' uids run their server themselves: `command -v python` finds a virtual environment of one they
        # can run, with this one's packages, linked there (this one's may be in a clone under /root, mode 0700).
        subprocess.run([python, "-m", "venv", "--without-pip", tmp_path / "venv"], check=True, timeout=60)
        [packages] = (tmp_path / "venv/lib").glob("*/site-packages")
        linked_tree(sysconfig.get_paths()["purelib"], packages)
        environ["PATH"] = f"{tmp_path / 'venv/bin'}:{environ['PATH']}"
    started_ = subprocess.Popen(["bash", "-c", start], cwd=tmp_path, env=environ, start_new_session=True)
    try:

        def started() -> bool:
            assert started_.poll() is None, "the recipe's gateway exited"
            return (tmp_path / "bob.jwt").exists() and listens(port, started_.pid)  # its group's

        until(started, "the recipe's gateway listening")
        done = subprocess.run(
            ["bash", "-c", use], cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=480, check=False
        )
    finally:
        os.killpg(started_.pid, signal.SIGTERM)  # the JWKS server and the gateway, which stops its processes
        started_.wait(timeout=WITHIN)
    metadata = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
    assert f'resource_metadata="{metadata}"' in done.stdout, done.stderr[-2000:]
    assert '"text": "0001"' in done.stdout
    assert '"text": "0002"' in done.stdout
    assert "Session not found: the session ended or is not this caller's" in done.stdout + done.stderr
    assert done.stdout.startswith("404\n"), done.stdout  # the stand-in serves its JWKS alone
    assert 'error_description="the token has expired (exp)"' in done.stdout, done.stdout  # a token it minted expired


@pytest.mark.parametrize("source", ["GITHUB_TOKEN=cookie:x", "MCP_SESSION_ID=header:x", "GITHUB_TOKEN"])
def test_a_bad_process_env_is_a_usage_error(source: str) -> None:
    done = main_run("gateway", "--stdio", SERVER, "--process-env", source, environ={"MCP_SESSIONS_SECRET": SECRET})
    assert done.returncode == 2
    assert "--process-env" in done.stderr


# -- past one machine: a front and two stdio replicas ----------------------------------------------------------


def answer_to(http: httpx.Client, url: str, tool: str, session: str | None = None, baggage: str | None = None) -> Any:
    """The answer to a 2026-07-28 tools/call of ``tool``, in ``session`` (the front's) or ``baggage``'s conversation."""
    meta = None if session is None else {"sessionId": session}
    body = modern_request("tools/call", {"name": tool, "arguments": {}}, session=meta)
    headers = modern_headers(body) if baggage is None else {**modern_headers(body), "baggage": baggage}
    return result_of(http.post(url, json=body, headers=headers), body["id"])


def call(http: httpx.Client, url: str, tool: str, session: str | None = None, baggage: str | None = None) -> Any:
    """Its result's text, parsed."""
    answer = answer_to(http, url, tool, session, baggage)
    assert "result" in answer, answer
    return json.loads(answer["result"]["content"][0]["text"])


def host_pid(whoami: dict[str, Any]) -> int:
    """The host's pid of the process that answered ``whoami`` (in its PID namespace it is pid 2): found by the
    MCP_SESSION_ID its environment holds, which only the server's does (never its wrappers')."""
    marker = f"MCP_SESSION_ID={whoami['session']}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if marker in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
    return min(found)


def ancestors(pid: int) -> Iterator[int]:
    """The processes ``pid`` was started under, its parent first, up to the host's init."""
    while pid > 1:
        pid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        yield pid


@pytest.mark.parametrize("instrumented", [False, True], ids=["plain", "instrumented"])
def test_a_front_and_two_stdio_replicas(instrumented: bool, redis: RedisServer) -> None:
    environ = {
        "PYTHONPATH": PYTHONPATH,
        "MCP_SESSIONS_CONVERSATION_DATA": "anonymous",
        "MCP_SESSIONS_REDIS_URL": redis.url,
        "MCP_SESSIONS_REDIS_TIMEOUT": "2.0",  # a loaded two-core machine can hold a reply back past 0.5 s
        "MCP_SESSIONS_REDIS_CONNECT_TIMEOUT": "2.0",  # and a connect past 0.25 s
    }
    # No process on the host's network: it would connect from the front's address.
    behind_front = ("--forwarded-allow-ips", "127.0.0.1", "--process-containment", "bwrap", "--process-network", "none")
    one_caller = ("--max-processes", "32", "--max-processes-per-principal", "32")  # all 127.0.0.1's: 20, anywhere
    with contextlib.ExitStack() as stack:
        replicas = [
            stack.enter_context(gateway("--stdio", SERVER, *behind_front, *one_caller, environ=environ))
            for _ in range(2)
        ]
        urls = [replica.url() for replica in replicas]
        if instrumented:  # the command, its httpx instrumented too: the baggage it sends is still the front's
            front = gateway(*(f"--upstream={upstream}" for upstream in urls), instrumented=True)
            url = stack.enter_context(front).url()
        else:  # in process: its app, as the command builds it
            url = stack.enter_context(serve(gateway_app(urls, config=SessionsConfig(secret=SECRET)))) + "/mcp"
        # The front connects from 127.0.0.1; a client that goes around it, from 127.0.0.2.
        around = stack.enter_context(httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=30))
        http = stack.enter_context(httpx.Client(timeout=30))
        legacy_call = legacy_request("tools/call", {"name": "whoami", "arguments": {}})
        ids = [created(http, url) for _ in range(2)]
        # Four conversations the front names: two sessions', and two hosts' in baggage. The hosts' ids are fixed,
        # one that the front's own ranking (rendezvous, by the replicas' URLs) sends to each replica, so that
        # both serve one on every run; named per run of the test, as the store outlives one.
        from mcp_sessions import KeySet
        from mcp_sessions._gateway.http._replicas import Replicas

        ranking = Replicas(urls, keys=KeySet.from_secret(SECRET), cooldown=0)
        candidates = [f"conversation-{instrumented}-{n}" for n in range(64)]
        placed = [next(c for c in candidates if ranking.for_conversation(c)[0] is ranking.all[n]) for n in (0, 1)]
        hosts = [f"gen_ai.conversation.id={conversation}" for conversation in placed]
        named = [{"session": sid} for sid in ids] + [{"baggage": baggage} for baggage in hosts]
        first = [host_pid(call(http, url, "whoami", **conversation)) for conversation in named]
        for conversation, pid in zip(named, first, strict=True):
            assert [call(http, url, "count", **conversation) for _ in range(2)] == [1, 2]
            assert host_pid(call(http, url, "whoami", **conversation)) == pid  # one process for all of it
        # A 2025 transport session per host's conversation, opened on its replica: a process of its own.
        transports = [legacy_initialize(http, url, {"baggage": baggage}) for baggage in hosts]
        first += [
            host_pid(json.loads(tool_text(result_of(http.post(url, json=legacy_call, headers=t), 1))))
            for t in transports
        ]
        pids = {replica.process.pid: replica for replica in replicas if replica.process is not None}
        on_replica = [pids[next(up for up in ancestors(pid) if up in pids)] for pid in first]
        assert on_replica[2:4] == replicas  # the front's ranking, kept

        victim = named[0]["session"]
        baggage = f"gen_ai.conversation.id={jwt_claims(victim)['sid']}"
        replica = on_replica[0].url()
        assert host_pid(call(around, replica, "whoami", baggage=baggage)) != first[0]  # around the front: no
        assert host_pid(call(http, replica, "whoami", baggage=baggage)) == first[0]  # from the front's address

        stopped = on_replica[0]
        other = next(replica for replica in replicas if replica is not stopped).url()
        own = created(http, stopped.url())  # a data-layer session of the replica itself (a plain balancer's)
        stopped.stop()
        for n, conversation in enumerate(named):
            if on_replica[n] is not stopped:  # the other replica's conversations go on, untouched
                assert call(http, url, "count", **conversation) == 3
                assert host_pid(call(http, url, "whoami", **conversation)) == first[n]
            else:  # the stopped replica's are over: never a new process, as if it were the same conversation
                error = answer_to(http, url, "whoami", **conversation)["error"]
                assert (error["code"], error["message"][:17]) == (SESSION_NOT_FOUND, "Session not found"), error
        for n, transport in enumerate(transports, start=4):
            answer = http.post(url, json=legacy_call, headers=transport)
            assert answer.status_code == (404 if on_replica[n] is stopped else 200), answer.text
        gone = answer_to(http, other, "whoami", own)["error"]  # its process was on the stopped replica
        assert gone["code"] == SESSION_NOT_FOUND, gone
        assert gone["message"].startswith("Session not found"), gone
        delete = modern_request("sessions/delete", session={"sessionId": own})
        assert "result" in result_of(http.post(other, json=delete, headers=modern_headers(delete)), 1)
        for conversation in (
            {"session": created(http, url)},
            {"baggage": f"gen_ai.conversation.id={os.urandom(8).hex()}"},
        ):
            pid = host_pid(call(http, url, "whoami", **conversation))
            assert pids[next(up for up in ancestors(pid) if up in pids)] is not stopped  # new ones start


async def test_a_token_verified_before_is_held_only_while_it_lives_and_its_key_is_the_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In process: a token verified once is not verified again at each request (``VERIFIED_KEPT``), yet it is
    refused as any other once it has expired, or once the key set, fetched again, no longer holds the key that
    verified it: another key under its ``kid``, or none."""
    audience = "http://127.0.0.1:8000/mcp"
    listed = {"keys": KEYS["keys"]}  # what the JWKS lists: the test rotates the key out
    routes = [Route("/jwks.json", lambda request: JSONResponse(listed))]
    with serve(Starlette(routes=routes)) as base:
        auth = GatewayAuth(jwks_url=base + "/jwks.json", issuer=ISSUER, audience=audience, leeway=0)
        async with asgi_client(auth.wrap(Starlette(routes=[Route("/mcp", whoami, methods=["POST"])]))) as http:

            async def asked(bearer: str) -> str:
                answer = await http.post("/mcp", headers={"Authorization": f"Bearer {bearer}"})
                return answer.text if answer.status_code == 200 else answer.json()["error_description"]

            brief, kept = token(aud=audience, exp=3), token(aud=audience)
            assert [await asked(brief), await asked(kept), await asked(kept)] == ["alice"] * 3
            ends = jwt.decode(brief, options={"verify_signature": False})["exp"]
            await until_awaited(lambda: time.time() >= ends, "the brief token's expiry")
            assert await asked(brief) == "the token has expired (exp)"
            # Stale at once, and fetched again at any time: behind the requests, each going on with the key held,
            # the set is fetched again, and lists another key under the kept token's kid, then another kid.
            monkeypatch.setattr(_users, "JWKS_LIFESPAN", 0.0)
            monkeypatch.setattr(_users, "JWKS_COOLDOWN", 0.0)

            async def refused_once_fetched(why: str) -> None:
                async def refused() -> bool:
                    return await asked(kept) == why

                await until_awaited(refused, f"the kept token refused: {why}")

            other = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(OTHER_KEY.public_key()))
            listed["keys"] = [{**other, "kid": "k1"}]
            await refused_once_fetched("the token's signature does not verify")
            listed["keys"] = [{**other, "kid": "k2"}]
            await refused_once_fetched("the token's key (kid) is not one of the authorization server's")


# -- last in the module, on the team's gateway: its last fetch's cooldown passed as the other tests ran ---------


async def test_made_up_kids_in_a_jwks_outage_stall_no_one_and_cost_one_fetch_a_cooldown(team: Process) -> None:
    """Finding 4 of issue 65: a stranger's tokens with made-up ``kid``s, two a second while the JWKS does not
    answer, neither slow down the users whose keys the gateway knows nor turn into a fetch each."""
    dave = {**modern_headers(DISCOVER), "X-GitHub-Token": "ghp_dave"}
    async with httpx.AsyncClient(headers=dave, timeout=30) as http:

        async def post(bearer: str) -> httpx.Response:
            return await http.post(team.url(), json=DISCOVER, headers={"Authorization": f"Bearer {bearer}"})

        valid = for_gateway(team, "dave")
        assert (await post(valid)).status_code == 200
        assert (await post(for_gateway(team, "dave", iat=5))).status_code == 200  # --auth-leeway: 10 s, not 60
        ahead = await post(for_gateway(team, "dave", iat=30))
        assert ahead.status_code == 401
        assert "not valid yet" in ahead.json()["error_description"]
        TEAM_KEYS.up.clear()
        try:
            await anyio.sleep(max(0.0, TEAM_KEYS.last + COOLDOWN + 1 - time.monotonic()))  # its rest, if any
            refused: list[httpx.Response] = []

            async def stranger(n: int) -> None:
                refused.append(await post(for_gateway(team, kid=f"made-up-{n}")))

            async with anyio.create_task_group() as strangers:
                for n in range(16):  # two a second for 8 s, and the users' requests meanwhile
                    strangers.start_soon(stranger, n)
                    for _ in range(2):
                        await anyio.sleep(0.25)
                        with anyio.move_on_after(2.5) as waited:  # about 0.02 s; behind PyJWT's lock, its 5 s fetch
                            assert (await post(valid)).status_code == 200
                        assert not waited.cancelled_caught, "a user's request waited for the JWKS"
        finally:
            TEAM_KEYS.up.set()
    assert len(refused) == 16
    assert all(answer.status_code == 401 for answer in refused)
    assert TEAM_KEYS.fetches.count(True) == 1, TEAM_KEYS.fetches  # the first made-up kid's, failed
