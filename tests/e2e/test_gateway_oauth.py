"""Each user's own grant at a vendor's server: ``mcp-sessions gateway --upstream-token oauth`` in front of a
vendor-shaped ``MCPServer`` behind its own authorization server, the team's IdP confirming who opens each sign-in
URL (``_vendor``'s stand-ins, on loopback), users signing in through URL elicitation with a headless browser
(httpx following every redirect, naming its user in a header the stand-ins sign in and consent for).

One gateway, as the command runs, for the module; each test signs in users of its own.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shlex
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import anyio
import httpx
import httpx2
import jwt
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from _authorities import stand_in_server
from _failing_stores import writes_paused
from _mcp import CLIENT_CAPABILITIES_KEY, ModernClient, legacy_request, modern_headers, modern_request
from _redis import free_port, redis_server
from _uids import uids
from _waits import until
from conftest import asgi_client, serve
from e2e import _masked, _sealed
from e2e._gateway import JSON_SSE, MAIN, SECRET, Process, gateway_process, main_run, result_of, started
from e2e._issuer import ISSUER, jwks, signed
from e2e._stdio import text_of
from e2e._vendor import USER_HEADER, Idp, Vendor, vendor_server
from mcp_sessions import KeySet, SessionsConfig, gateway_app
from mcp_sessions._gateway.auth import _kept
from mcp_sessions._gateway.auth._client import ClientAuth
from mcp_sessions._gateway.auth._kept import KeptGrants
from mcp_sessions._gateway.auth._oauth import CLIENT_PATH, Login, UpstreamGrants
from mcp_sessions._gateway.auth._users import GatewayAuth
from mcp_sessions.stores import MemoryStore, RedisStore, SessionStore

LOGIN = ("mcp-gateway-login", "gateway-secret")  # the gateway's client at the team's IdP (the docs' id)
OLD_KEY = "old:" + "o" * 32  # the sessions' key set (MCP_SESSIONS_KEYS), which seals the grants kept in the store
NEW_KEYS = "new:" + "n" * 32 + ",old:" + "o" * 32  # rotated: the new key signs, the old one still verifies
URL_CAPABLE: dict[str, Any] = {CLIENT_CAPABILITIES_KEY: {"elicitation": {"url": {}}}}
WHOAMI = {"name": "whoami", "arguments": {}}
SECTION = "\n## Each user's own account on a vendor's server\n"
"""docs/gateway.md's section whose commands the tests run as written, but for the example hosts and the secret."""
UPSTREAM_LINE = "MCP_SESSIONS_LOGIN_CLIENT_SECRET=... mcp-sessions gateway --upstream "
STDIO_LINE = "MCP_SESSIONS_LOGIN_CLIENT_SECRET=... mcp-sessions gateway --stdio "


def section() -> str:
    page: str = (MAIN / "docs" / "gateway.md").read_text(encoding="utf-8")
    return page.partition(SECTION)[2].partition("\n## ")[0]


def written_command(first: str, ours: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The section's gateway command that starts with ``first``, as a shell splits it: its variables (``...``, the
    secret, the test's) and its arguments after ``mcp-sessions gateway``, in each of which ``ours``' examples (the
    hosts, ports, uids) are the test's, the longest first."""
    [block] = [block for block in re.findall(r"```text\n(.*?)```", section(), re.S) if block.startswith(first)]
    words = shlex.split(block.replace("\\\n", " "))
    variables = {}
    while "=" in words[0]:
        name, _, value = words.pop(0).partition("=")
        variables[name] = LOGIN[1] if value == "..." else value
    assert words[:2] == ["mcp-sessions", "gateway"], words
    arguments = []
    for word in words[2:]:
        for example in sorted(ours, key=len, reverse=True):
            word = word.replace(example, ours[example])
        arguments.append(word)
    return variables, arguments


def shell_lines(first: str) -> str:
    """The section's ``sh`` block whose first line starts with ``first``."""
    [block] = [block for block in re.findall(r"```sh\n(.*?)```", section(), re.S) if block.startswith(first)]
    return str(block)


def operator_lines() -> str:
    return shell_lines("mcp-sessions grants --status ")


def run_written(lines: str, ours: dict[str, str], where: Path) -> subprocess.CompletedProcess[str]:
    """``lines`` run by ``sh -e`` in ``where``, each of ``ours``' words in them replaced (the example hosts and
    ports), this environment's ``mcp-sessions`` and ``curl`` on its ``PATH``."""
    for example, here in ours.items():
        lines = lines.replace(example, here)
    environ = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONPATH": f"{MAIN}/middleware"}
    return subprocess.run(["sh", "-ec", lines], cwd=where, env=environ, capture_output=True, text=True, timeout=60)


@dataclass
class Stand:
    """The stand-ins and the gateway in front of them (:meth:`restart` starts another on the same store: the default,
    an SQLite file in its state directory, ``state``)."""

    idp: Idp
    vendor: Vendor
    state: Path
    exits: contextlib.ExitStack
    gateway: Process = field(init=False)
    vendor_issuer: str = ""
    tls: tuple[str, str, str] = ("", "", "")  # an authority's file, and a certificate (chain, key) it signed
    status: str = ""

    def start(self, keys: str) -> str:
        """docs/gateway.md's gateway, as written but for its example hosts, with the key set ``keys``
        (``MCP_SESSIONS_KEYS``), on its default store (no ``MCP_SESSIONS_STORE``: in the state directory), under
        ``opentelemetry-instrument`` with its spans (httpx's calls to the servers among them) in its output; the one
        before stopped, this one on its port (its URL, the callback it registered and its users' audience, stay):
        all the one before wrote."""
        port = free_port()
        before = ""
        if hasattr(self, "gateway"):
            port = self.gateway.port
            before = self.gateway.stop().decode(errors="replace")
        url = f"http://127.0.0.1:{port}/mcp"
        ours = {
            "https://mcp.vendor.example/mcp": self.vendor.resource,
            "https://login.example.com/jwks": self.idp.url + "/jwks.json",
            "https://login.example.com": self.idp.url,
            "https://mcp.example.com/mcp": url,
        }
        variables, written = written_command(UPSTREAM_LINE, ours)  # docs/gateway.md's command, as written
        program = [str(Path(sys.executable).parent / "opentelemetry-instrument"), sys.executable, "-m", "mcp_sessions"]
        status_port = free_port()  # the operator's view of the users' grants
        self.status = f"http://127.0.0.1:{status_port}"
        line = [*program, "gateway", "--port", str(port), "--log-level", "debug", "--status-port", str(status_port)]
        environ = {**variables, "MCP_SESSIONS_KEYS": keys, "STATE_DIRECTORY": str(self.state)}
        environ |= {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"}
        self.gateway = Process("mcp-sessions gateway", [*line, *written], environ, port)
        self.exits.callback(self.gateway.stop)
        return before


@pytest.fixture(scope="module")
def stand(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stand]:
    idp = Idp(clients=dict([LOGIN]))
    tls = stand_in_server(tmp_path_factory.mktemp("tls"), ["127.0.0.1", "localhost"])
    # the vendor takes Client ID Metadata Documents: a gateway at an http URL still registers (RFC 7591)
    vendor = Vendor(documents=ssl.create_default_context(cafile=tls[0]), iss=True)
    state = tmp_path_factory.mktemp("oauth")
    with contextlib.ExitStack() as exits:
        idp.url = exits.enter_context(serve(idp.app()))
        vendor_url = exits.enter_context(serve(vendor.app()))
        vendor.resource = exits.enter_context(serve(vendor_server(vendor, vendor_url))) + "/mcp"
        built = Stand(idp, vendor, state, exits, vendor_issuer=vendor_url, tls=tls)
        built.start(OLD_KEY)
        yield built


def modern_call(stand: Stand, user: str, meta: dict[str, Any] | None = URL_CAPABLE, **params: Any) -> dict[str, Any]:
    """``whoami`` as ``user``, on 2026-07-28 (declaring URL elicitation unless ``meta`` says otherwise): the answer."""
    body = modern_request("tools/call", {**WHOAMI, **params}, meta=meta)
    token = stand.idp.token_for(user, stand.gateway.url())
    response = httpx.post(
        stand.gateway.url(), json=body, headers={**modern_headers(body), "Authorization": f"Bearer {token}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    return result_of(response, body["id"])


def legacy_call(stand: Stand, user: str) -> dict[str, Any]:
    """``whoami`` as ``user``, on 2025-11-25: the answer."""
    body = legacy_request("tools/call", WHOAMI, id=7)
    token = stand.idp.token_for(user, stand.gateway.url())
    headers = {**JSON_SSE, "MCP-Protocol-Version": "2025-11-25", "Authorization": f"Bearer {token}"}
    response = httpx.post(stand.gateway.url(), json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return result_of(response, 7)


def asked_url(answer: dict[str, Any]) -> str:
    """The sign-in URL a 2026-07-28 ``input_required`` result asks the client to open."""
    result = answer["result"]
    assert result["resultType"] == "input_required", answer
    (asked,) = result["inputRequests"].values()
    assert asked["method"] == "elicitation/create" and asked["params"]["mode"] == "url"
    url: str = asked["params"]["url"]
    return url


def whoami(answer: dict[str, Any]) -> dict[str, str]:
    seen: dict[str, str] = json.loads(answer["result"]["content"][0]["text"])
    return seen


def browser(user: str) -> httpx.Client:
    """A headless browser of ``user``'s: it follows every redirect and keeps cookies."""
    return httpx.Client(follow_redirects=True, headers={USER_HEADER: user}, timeout=30)


def signed_in(user: str, url: str) -> httpx.Response:
    with browser(user) as http:
        return http.get(url)


def test_two_users_sign_in_once_through_url_elicitation_and_reach_the_vendor_as_themselves(stand: Stand) -> None:
    """alice on 2026-07-28 (an ``input_required`` result carrying ``elicitation/create`` in URL mode) and bob on
    2025-11-25 (``URLElicitationRequiredError``, -32042) each open the URL the gateway gave, sign in at the IdP,
    consent at the vendor; their retries reach the vendor's server with a token the vendor issued to each. The
    gateway registered once (RFC 7591) for both; no token of theirs is in its output, nor in a page."""
    registered = stand.vendor.counts["registrations"]
    url = asked_url(modern_call(stand, "alice"))
    assert urlsplit(url).path.startswith("/oauth/authorize/")
    assert asked_url(modern_call(stand, "alice")) == url  # a retry before she signed in: the same URL
    assert httpx.get(url).status_code == 302  # a link preview's fetch: it spends nothing
    done = signed_in("alice", url)
    assert done.status_code == 200, done.text
    assert "You are signed in to" in done.text
    assert httpx.get(url).status_code == 404  # spent by her grant
    retried = modern_call(stand, "alice", inputResponses={"sign-in": {"action": "accept"}})
    alice = whoami(retried)
    assert alice["sub"] == "alice"

    legacy = legacy_call(stand, "bob")
    assert legacy["error"]["code"] == -32042
    (elicitation,) = legacy["error"]["data"]["elicitations"]
    assert elicitation["mode"] == "url" and elicitation["url"] in legacy["error"]["message"]
    assert signed_in("bob", elicitation["url"]).status_code == 200
    bob = whoami(legacy_call(stand, "bob"))
    assert bob["sub"] == "bob"
    assert whoami(modern_call(stand, "alice"))["token"] == alice["token"]  # kept: no sign-in, no refresh
    assert stand.vendor.counts["registrations"] - registered <= 1

    output = stand.gateway.log().decode(errors="replace")
    assert "granted access at" in output
    assert "code=" not in output  # the callback's query, kept out of the access log
    for token in (alice["token"], bob["token"], *stand.vendor.refreshes):
        assert token not in output
        assert token not in done.text


def test_a_stdio_process_gets_its_user_s_own_token_at_an_authorization_server(stand: Stand, tmp_path: Path) -> None:
    """``--process-env VENDOR_TOKEN=oauth:ISSUER,resource=URI``: each conversation's process gets its user's own
    access token at the vendor's authorization server, which she grants once through the stdio gateway's own
    sign-in routes (URL elicitation, the team's IdP login first, then the vendor's consent); two users, each her own
    token. A second variable at another vendor's server is asked for in turn, each URL and callback going to the
    sign-in that made it; ``/oauth/grants`` lists both. No token reaches the gateway's output.

    The operator's view, at the status port (``mcp-sessions grants --status URL``): every user's grants, who, the
    server, when granted and when each expires, no token; bob's grant at the vendor revoked by name there (at the
    vendor, RFC 7009, and in the gateway: his next call asks him again, alice's goes on); docs/gateway.md's
    operator lines, as written but for the port, then list what is left and revoke alice's two; bob's own command
    revokes his last. The status path at the clients' port says where it is; a revocation naming no one is a usage
    error, and a 400 at the port."""
    other = Vendor(resource="https://api.other.example/")
    getenv = modern_request("tools/call", {"name": "getenv", "arguments": {"name": "VENDOR_TOKEN"}}, meta=URL_CAPABLE)
    status_port = free_port()
    with serve(other.app()) as other_issuer:
        options = (
            *("--stdio", f"{sys.executable} -m e2e._plain_stdio", "--accept-shared-uid", "--log-level", "debug"),
            *("--auth-jwks", stand.idp.url + "/jwks.json", "--auth-issuer", stand.idp.url, "--auth-audience", "{url}"),
            *("--login-issuer", stand.idp.url, "--login-client-id", LOGIN[0]),
            *("--process-env", f"VENDOR_TOKEN=oauth:{stand.vendor_issuer},resource={stand.vendor.resource}"),
            *("--process-env", f"OTHER_TOKEN=oauth:{other_issuer},resource={other.resource}"),
            *("--status-port", str(status_port)),
        )
        environ = {"PYTHONPATH": f"{MAIN}/middleware:{MAIN}/tests", "MCP_SESSIONS_LOGIN_CLIENT_SECRET": LOGIN[1]}
        given = {}
        with gateway_process([], *options, environ=environ) as front:
            bearers = {user: stand.idp.token_for(user, front.url()) for user in ("alice", "bob")}

            def getenv_as(user: str) -> dict[str, Any]:
                headers = {**modern_headers(getenv), "Authorization": f"Bearer {bearers[user]}"}
                return result_of(httpx.post(front.url(), json=getenv, headers=headers, timeout=30), getenv["id"])

            def counts() -> tuple[int, int]:
                return stand.vendor.counts["revocations"], other.counts["revocations"]

            for user in ("alice", "bob"):
                for _ in range(2):  # one sign-in for each server
                    done = signed_in(user, asked_url(getenv_as(user)))
                    assert done.status_code == 200 and "You are signed in to" in done.text, done.text
                given[user] = getenv_as(user)["result"]["structuredContent"]["result"]
            mine = {"Authorization": f"Bearer {bearers['bob']}"}
            listed = httpx.get(front.url().replace("/mcp", "/oauth/grants"), headers=mine, timeout=30).json()
            operator = ("grants", "--status", f"http://127.0.0.1:{status_port}")
            everyone = main_run(*operator, "--json")
            as_bob = {"TOKEN": bearers["bob"]}
            own = main_run("grants", front.url(), "--bearer-env", "TOKEN", environ=as_bob)
            at_clients = httpx.get(front.url().replace("/mcp", "/status/grants"), headers=mine, timeout=30)
            nameless = main_run(*operator, "--revoke")
            unnamed = httpx.delete(f"http://127.0.0.1:{status_port}/status/grants", timeout=30)
            before = counts()
            revoked = main_run(*operator, "--revoke", "--principal", "bob", "--server", stand.vendor_issuer)
            by_name = counts()
            bob_again = getenv_as("bob")
            alice_still = getenv_as("alice")["result"]["structuredContent"]["result"]
            written = run_written(operator_lines(), {"8001": str(status_port)}, tmp_path)
            by_docs = counts()
            alice_again = getenv_as("alice")
            own_revoked = main_run("grants", front.url(), "--revoke", "--bearer-env", "TOKEN", environ=as_bob)
            left = main_run(*operator, "--json").stdout
            output = front.stop().decode(errors="replace")
    assert {grant["authorization_server"] for grant in listed["grants"]} == {stand.vendor_issuer, other_issuer}
    assert other.counts["codes"] == 2
    for user, token in given.items():
        assert token in stand.vendor.issued
        assert (claims_of(token)["sub"], claims_of(token)["aud"]) == (user, stand.vendor.resource)
        assert token not in output
    assert [token for token in other.issued if token in output] == []
    assert "code=" not in output
    # the operator's view: all four grants, no token
    assert everyone.returncode == 0, everyone.stderr
    shown = json.loads(everyone.stdout)["grants"]
    servers = {stand.vendor_issuer: stand.vendor.resource, other_issuer: other.resource}
    assert sorted((grant["principal"], grant["authorization_server"], grant["resource"]) for grant in shown) == sorted(
        (user, server, resource) for user in ("alice", "bob") for server, resource in servers.items()
    )
    assert all(grant["issuer"] == stand.idp.url for grant in shown)
    assert all(grant["granted_at"] < time.time() < grant["expires_at"] for grant in shown)
    assert own.returncode == 0 and own.stdout.count("\n") == 3, own.stdout
    assert own.stdout.startswith("AUTHORIZATION SERVER  "), own.stdout
    for printed in (everyone.stdout, own.stdout, written.stdout):
        assert [token for token in [*stand.vendor.issued, *other.issued] if token in printed] == []
    assert at_clients.status_code == 404 and "--status-port" in at_clients.json()["error"]
    assert nameless.returncode == 2 and "--principal" in nameless.stderr
    assert unnamed.status_code == 400 and "principal" in unnamed.json()["error"]
    # bob's grant at the vendor revoked by the operator: at the vendor, and here; alice's goes on
    assert revoked.returncode == 0 and revoked.stdout == f"revoked bob's grant at {stand.vendor_issuer}\n"
    assert by_name == (before[0] + 1, before[1])
    assert asked_url(bob_again).startswith(front.url("/oauth/authorize/"))
    assert alice_still == given["alice"]
    # the docs' lines: the three grants left listed, alice's two revoked, at each vendor; she is asked again
    assert written.returncode == 0, written.stderr
    heading, *rows, first, second = written.stdout.splitlines()
    assert heading.startswith("PRINCIPAL  AUTHORIZATION SERVER  "), written.stdout
    assert heading.split()[3:] == ["RESOURCE", "SCOPE", "GRANTED", "EXPIRES"], written.stdout
    left_then = [("alice", stand.vendor_issuer, stand.vendor.resource), ("alice", other_issuer, other.resource)]
    left_then.append(("bob", other_issuer, other.resource))
    assert [tuple(row.split()[:3]) for row in rows] == sorted(left_then)
    assert [first, second] == [f"revoked alice's grant at {server}" for server in (stand.vendor_issuer, other_issuer)]
    assert by_docs == (by_name[0] + 1, by_name[1] + 1)
    assert asked_url(alice_again).startswith(front.url("/oauth/authorize/"))
    # bob's own: his last, at the other vendor; none left
    assert own_revoked.stdout == f"revoked the grant at {other_issuer}\n", own_revoked.stderr
    assert (stand.vendor.counts["revocations"], other.counts["revocations"]) == (by_docs[0], by_docs[1] + 1)
    assert json.loads(left) == {"grants": []}


def test_the_docs_stdio_command_signs_her_in_and_her_masked_token_reaches_the_api(stand: Stand, tmp_path: Path) -> None:
    """docs/gateway.md's stdio command, as written but for its hosts (the API's ``_masked``'s stand-in, at its port),
    its server (``_masked``'s, which a process of another uid runs), its uids and its status port: alice's first call
    asks her to sign in (URL elicitation); the headless browser signs her in at the IdP and consents at the vendor's
    authorization server (a ``_vendor`` stand-in for the API); her conversation's process then holds the placeholder
    alone, and its ``curl`` reaches the API through the masking proxy with her own token of the vendor's. The
    section's operator lines then list her grant and revoke it at the vendor. (As first written it was refused at
    startup: ``--process-env`` without ``--process-uids``.)"""
    status_port = free_port()
    with _masked.stand_in() as api, contextlib.ExitStack() as stack:
        vendor = Vendor(resource=f"https://{_masked.NAMES[0]}:{api.ports[0]}/")
        ours = {
            "npx -y @vendor/mcp-server": f"/usr/bin/python3 {api.server}",
            "https://login.example.com/jwks": stand.idp.url + "/jwks.json",
            "https://login.example.com": stand.idp.url,
            "https://mcp.example.com/mcp": "{url}",
            "https://auth.vendor.example": stack.enter_context(serve(vendor.app())),
            "api.vendor.example": f"{_masked.NAMES[0]}:{api.ports[0]}",
            "61000-61999": uids(424, 4),
            "8001": str(status_port),
        }
        variables, (stdio, server, *written) = written_command(STDIO_LINE, ours)
        assert stdio == "--stdio", written
        environ = {**variables, "MCP_SESSIONS_SECRET": SECRET, "SSL_CERT_FILE": api.authority}
        front = stack.enter_context(_sealed.gateway(server, *written, environ=environ, prefix=api.prefix))
        bearer = {"Authorization": f"Bearer {stand.idp.token_for('alice', front.url())}"}
        mcp = ModernClient(stack.enter_context(httpx.Client(timeout=60, headers=bearer)), front.url(""))
        env = {"name": "env", "arguments": {"variable": "VENDOR_TOKEN"}}
        getenv = modern_request("tools/call", env, meta=URL_CAPABLE)
        url = asked_url(result_of(mcp.post(getenv), getenv["id"]))
        done = signed_in("alice", url)
        session = mcp.create_session()
        placeholder = _sealed.text(_sealed.call(mcp, "env", session, variable="VENDOR_TOKEN"))
        token = _masked.bearer_sent(mcp, session, api, placeholder)
        found = _masked.searched(mcp, session, token)
        operated = run_written(operator_lines(), {"8001": str(status_port)}, tmp_path)
        output = front.log().decode(errors="replace")
    assert url.startswith(front.url("/oauth/authorize/"))
    assert done.status_code == 200 and "You are signed in to" in done.text, done.text
    assert token in vendor.issued and placeholder != token
    assert (claims_of(token)["sub"], claims_of(token)["aud"]) == ("alice", vendor.resource)
    assert found == []  # not in its environment, its memory, nor its files
    assert operated.returncode == 0, operated.stderr
    heading, row, revoked = operated.stdout.splitlines()
    assert heading.split() == ["PRINCIPAL", "AUTHORIZATION", "SERVER", "RESOURCE", "SCOPE", "GRANTED", "EXPIRES"], (
        operated.stdout
    )
    assert row.split()[:3] == ["alice", ours["https://auth.vendor.example"], vendor.resource]
    assert revoked == f"revoked alice's grant at {ours['https://auth.vendor.example']}"
    assert vendor.counts["revocations"] == 1
    assert [each for each in vendor.issued if each in output or each in operated.stdout] == []


@pytest.mark.anyio
async def test_a_stock_client_follows_the_sign_in_url(stand: Stand) -> None:
    """The ``mcp`` SDK's own client. On 2026-07-28 (the version adopted, as a client that knows the server does):
    its call's ``input_required`` result goes to its elicitation callback, which opens the URL in the headless
    browser and accepts, and the SDK's retry is answered by the vendor, as the user. On 2025-11-25: the handshake,
    which the upstream takes only with her token, fails with ``URLElicitationRequiredError`` (the SDK's
    ``MCPError`` -32042, the URL in its data); once she has opened it, the client connects and calls."""

    @contextlib.asynccontextmanager
    async def connected(user: str, mode: str, elicit: Any = None) -> AsyncIterator[Client]:
        bearer = stand.idp.token_for(user, stand.gateway.url())
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=30) as http:
            transport = streamable_http_client(stand.gateway.url(), http_client=http)
            async with Client(transport, mode=mode, elicitation_callback=elicit) as client:
                yield client

    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> mcp_types.ElicitResult:
        asked.append(params.url)
        page = await anyio.to_thread.run_sync(signed_in, "olga", params.url)
        assert page.status_code == 200, page.text
        return mcp_types.ElicitResult(action="accept")

    async with connected("olga", "2026-07-28", elicit) as client:
        result = await client.call_tool("whoami", {})
    assert json.loads(text_of(result))["sub"] == "olga"
    assert len(asked) == 1

    with pytest.raises(Exception) as raised:  # the SDK's MCPError, in its task groups
        async with connected("pia", "legacy"):
            pass
    (error,) = _leaves(raised.value)
    assert isinstance(error, MCPError) and error.code == -32042
    (elicitation,) = error.data["elicitations"]
    assert signed_in("pia", elicitation["url"]).status_code == 200
    async with connected("pia", "legacy") as client:
        result = await client.call_tool("whoami", {})
    assert json.loads(text_of(result))["sub"] == "pia"


def _leaves(error: BaseException) -> list[BaseException]:
    """The errors an exception group holds, however nested; an error alone is its own."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def test_an_https_gateway_is_its_client_by_its_metadata_document(stand: Stand) -> None:
    """A gateway at an https URL (in process, its certificate of the test's authority), in front of the vendor,
    whose server says it takes Client ID Metadata Documents: its client id there is its document's URL (MCP's
    order: a client given, then the document, then DCR), which it serves, no secret in it, to any GET. The vendor
    fetches it over https, verified against the test's authority, finds its ``client_id`` its own URL and the
    callback among its redirect URIs; the user signs in, and her retry reaches the vendor as herself (her token
    refreshed by that client too), no one registered. The same document fetched under another name
    (``localhost``) names another client id: the vendor refuses it, and grants nothing. The module's gateway
    (http) registered as before."""
    port = free_port()
    base = f"https://127.0.0.1:{port}"
    callback = base + "/oauth/callback"
    login = Login(stand.idp.url, ClientAuth("client_secret_basic", *LOGIN, servers=(stand.idp.url,)))
    grants = UpstreamGrants(upstream=stand.vendor.resource, callback=callback, login=login)
    auth = GatewayAuth(jwks_url=stand.idp.url + "/jwks.json", issuer=stand.idp.url, audience=base + "/mcp")
    app = gateway_app([stand.vendor.resource], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=grants)
    trust = ssl.create_default_context(cafile=stand.tls[0])
    registered = stand.vendor.counts["registrations"]
    body = modern_request("tools/call", WHOAMI, meta=URL_CAPABLE)
    headers = {**modern_headers(body), "Authorization": f"Bearer {stand.idp.token_for('uma', base + '/mcp')}"}
    with serve(app, port=port, tls=stand.tls[1:]), httpx.Client(verify=trust, timeout=30) as http:
        document = http.get(base + CLIENT_PATH)
        assert document.status_code == 200 and document.headers["content-type"] == "application/json"
        assert document.json() == {
            "client_id": base + CLIENT_PATH,
            "client_name": "mcp-sessions gateway",
            "redirect_uris": [callback],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
        assert http.post(base + CLIENT_PATH).status_code == 405
        url = asked_url(result_of(http.post(base + "/mcp", json=body, headers=headers), body["id"]))
        with httpx.Client(verify=trust, follow_redirects=True, headers={USER_HEADER: "uma"}, timeout=30) as web:
            done = web.get(url)
        assert done.status_code == 200, done.text
        retried = result_of(http.post(base + "/mcp", json=body, headers=headers), body["id"])
        assert whoami(retried)["sub"] == "uma"
        stand.vendor.refused.add(whoami(retried)["token"])  # refreshed, by the client the grant is of: the URL
        refreshed = whoami(result_of(http.post(base + "/mcp", json=body, headers=headers), body["id"]))
        assert refreshed["sub"] == "uma" and refreshed["token"] != whoami(retried)["token"]
        assert stand.vendor.fetched == [base + CLIENT_PATH] and stand.vendor.misfits == []
        assert stand.vendor.counts["registrations"] == registered
        elsewhere = f"https://localhost:{port}{CLIENT_PATH}"
        asked = {"client_id": elsewhere, "redirect_uri": callback, "response_type": "code", "state": "s"}
        refused = httpx.get(stand.vendor_issuer + "/authorize", params=asked, headers={USER_HEADER: "uma"})
        assert refused.status_code == 400 and stand.vendor.misfits == ["client_id"]
    others = set(stand.vendor.clients_of.values()) - {base + CLIENT_PATH}
    assert all(client.startswith("vc-") for client in others)  # the other gateways' (http): registered


def signing_in_file(stand: Stand, port: int, other: tuple[str, str], tools: str = "") -> str:
    """A team file of two servers that sign their users in, the gateway at ``port``: ``vendor``, the vendor's
    server (``upstream-token = "oauth"``), and ``tools``, the tests' stdio server whose ``OTHER_TOKEN`` is its
    user's grant at ``other`` (its issuer and resource), with ``tools``' extra lines."""
    login = f'login-issuer = "{stand.idp.url}"\nlogin-client-id = "{LOGIN[0]}"\n'
    pythonpath = f"{MAIN}/middleware:{MAIN}/tests"
    return (
        f'[gateway]\nauth-jwks = "{stand.idp.url}/jwks.json"\nauth-issuer = "{stand.idp.url}"\n'
        f'auth-audience = "http://127.0.0.1:{port}/"\nshutdown-timeout = 3\n'
        f'[servers.vendor]\nurl = "{stand.vendor.resource}"\nupstream-token = "oauth"\n{login}'
        f"[servers.tools]\nstdio = {json.dumps(f'{sys.executable} -m e2e._plain_stdio')}\n"
        f'process-containment = "none"\naccept-shared-uid = true\nprocesses = "per-conversation"\nwarm = 0\n'
        f'env = {{ PYTHONPATH = "{pythonpath}" }}\n{login}'
        f'process-env = ["OTHER_TOKEN=oauth:{other[0]},resource={other[1]}"]\n{tools}'
    )


def test_a_team_file_s_servers_sign_their_users_in_at_the_gateway_s_base_across_a_reload(
    stand: Stand, tmp_path: Path
) -> None:
    """``--config`` with two servers whose users sign in: the vendor's (``upstream-token = "oauth"``) and a stdio
        one with an ``oauth:`` variable at another vendor's server. Each server's sign-in URL is the gateway's own
        (``/oauth/authorize/ID`` at its base, where its one callback is), and each URL and callback reaches the
        server whose sign-in made it: jo reaches the vendor as herself, and her process gets her token at the other.
        A SIGHUP that replaces the stdio server keeps the vendor's sign-in under way (kai's URL, given before it,
        grants after it) and jo's grant at the other (in the store: no sign-in again); ``/oauth/grants`` at the base
        lists her grants at both servers, each with its ``server``, and the operator's ``/status/grants`` every user's,
    where revoking kai's leaves jo's. No token in the gateway's output."""
    other = Vendor(resource="https://api.other.example/")
    getenv = modern_request("tools/call", {"name": "getenv", "arguments": {"name": "OTHER_TOKEN"}}, meta=URL_CAPABLE)
    call = modern_request("tools/call", WHOAMI, meta=URL_CAPABLE)
    file = tmp_path / "team.toml"
    status_port = free_port()  # the operator's view of every server's grants
    with serve(other.app()) as other_issuer:

        def command(port: int) -> tuple[list[str], dict[str, str]]:
            file.write_text(signing_in_file(stand, port, (other_issuer, other.resource)), encoding="utf-8")
            line = [sys.executable, "-m", "mcp_sessions", "gateway", "--config", str(file), "--port", str(port)]
            line += ["--status-port", str(status_port)]
            environ = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_LOGIN_CLIENT_SECRET": LOGIN[1]}
            environ["MCP_SESSIONS_STORE"] = f"sqlite:///{tmp_path / 'store.db'}"
            return [*line, "--log-level", "info"], environ

        gateway = started("mcp-sessions gateway --config team.toml", command)
        try:
            base = f"http://127.0.0.1:{gateway.port}"

            def asked(user: str, server: str, body: dict[str, Any]) -> dict[str, Any]:
                token = stand.idp.token_for(user, base + "/")
                headers = {**modern_headers(body), "Authorization": f"Bearer {token}"}
                answer = httpx.post(f"{base}/servers/{server}/mcp", json=body, headers=headers, timeout=30)
                return result_of(answer, body["id"])

            for server, body in (("vendor", call), ("tools", getenv)):
                url = asked_url(asked("jo", server, body))
                assert url.startswith(base + "/oauth/authorize/"), url
                done = signed_in("jo", url)
                assert done.status_code == 200 and "You are signed in to" in done.text, done.text
            assert whoami(asked("jo", "vendor", call))["sub"] == "jo"
            given = asked("jo", "tools", getenv)["result"]["structuredContent"]["result"]
            assert claims_of(given)["sub"] == "jo" and given in other.issued

            waiting = asked_url(asked("kai", "vendor", call))
            before = len(gateway.log())
            file.write_text(
                signing_in_file(stand, gateway.port, (other_issuer, other.resource), "process-idle = 120\n"),
                encoding="utf-8",
            )
            assert gateway.process is not None
            gateway.process.send_signal(signal.SIGHUP)
            until(lambda: b"reloaded" in gateway.log()[before:], "the reload's line")
            assert b"draining tools" in gateway.log()[before:]
            assert signed_in("kai", waiting).status_code == 200
            assert whoami(asked("kai", "vendor", call))["sub"] == "kai"
            codes = other.counts["codes"]
            assert asked("jo", "tools", getenv)["result"]["structuredContent"]["result"] == given
            assert other.counts["codes"] == codes

            mine = {"Authorization": f"Bearer {stand.idp.token_for('jo', base + '/')}"}
            listed = httpx.get(base + "/oauth/grants", headers=mine, timeout=30).json()
            assert httpx.get(base + "/oauth/grants", timeout=30).status_code == 401
            operator = f"http://127.0.0.1:{status_port}/status/grants"
            every = httpx.get(operator, timeout=30).json()["grants"]
            shown = main_run("grants", "--status", f"http://127.0.0.1:{status_port}")
            as_jo = {"TOKEN": stand.idp.token_for("jo", base + "/")}
            own = main_run("grants", base + "/servers/vendor/mcp", "--bearer-env", "TOKEN", environ=as_jo)
            assert httpx.get(base + "/status/grants", timeout=30).status_code == 404  # not at the clients' door
            revoked = httpx.delete(operator, params={"principal": "kai"}, timeout=30).json()["revoked"]
            after = httpx.get(operator, timeout=30).json()["grants"]
        finally:
            output = gateway.stop().decode(errors="replace")
    assert {(grant["server"], grant["authorization_server"]) for grant in listed["grants"]} == {
        ("vendor", stand.vendor_issuer),
        ("tools", other_issuer),
    }
    assert {(grant["principal"], grant["server"]) for grant in every} == {
        ("jo", "vendor"),
        ("jo", "tools"),
        ("kai", "vendor"),
    }
    # the tables name each grant's server of the file first, as the JSON does
    heading, *rows = shown.stdout.splitlines()
    assert heading.startswith("SERVER  PRINCIPAL  AUTHORIZATION SERVER  "), shown.stdout
    assert sorted(tuple(row.split()[:3]) for row in rows) == [
        ("tools", "jo", other_issuer),
        ("vendor", "jo", stand.vendor_issuer),
        ("vendor", "kai", stand.vendor_issuer),
    ]
    heading, *rows = own.stdout.splitlines()
    assert heading.startswith("SERVER  AUTHORIZATION SERVER  "), own.stdout
    assert sorted(tuple(row.split()[:2]) for row in rows) == [("tools", other_issuer), ("vendor", stand.vendor_issuer)]
    assert [(each["principal"], each["server"], each["authorization_server"]) for each in revoked] == [
        ("kai", "vendor", stand.vendor_issuer)
    ]
    assert {(grant["principal"], grant["server"]) for grant in after} == {("jo", "vendor"), ("jo", "tools")}
    for token in (*stand.vendor.issued, *other.issued):
        assert token not in output


def test_a_code_of_one_server_sent_back_through_another_s_sign_in_is_redeemed_nowhere(
    stand: Stand, tmp_path: Path
) -> None:
    """The mix-up (RFC 9700 §4.4.2): ``--config`` with an honest vendor's server and an attacker's, both behind
    their own authorization servers, the honest one naming itself nowhere (no ``iss``). zoe, signed in at the
    honest one, is asked to sign in at the attacker's: its authorization server sends her browser on to the honest
    one's, with the gateway's client there, the redirect URI registered for it, and the attacker's flow's ``state``
    and PKCE challenge. The honest server's code comes back at its own callback, not the attacker's: a page says so
    (escaped, no code in it), and the code and the verifier are never posted to the attacker's token endpoint."""
    honest = Vendor()
    posted: list[dict[str, str]] = []

    def attacker() -> Starlette:
        async def metadata(request: Request) -> Response:
            base = str(request.base_url).rstrip("/")
            endpoints = {name: f"{base}/{name}" for name in ("authorize", "token", "register")}
            return JSONResponse(
                {
                    "issuer": base,
                    "authorization_endpoint": endpoints["authorize"],
                    "token_endpoint": endpoints["token"],
                    "registration_endpoint": endpoints["register"],
                    "code_challenge_methods_supported": ["S256"],
                }
            )

        async def register(request: Request) -> Response:
            return JSONResponse({**(await request.json()), "client_id": "evil", "token_endpoint_auth_method": "none"})

        async def authorize(request: Request) -> Response:
            (client_id, (redirect_uri, *_)), *_ = honest.clients.items()  # the gateway's client there, as seen
            query = request.query_params
            forged = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri}
            forged |= {"state": query["state"], "code_challenge": query["code_challenge"]}
            forged |= {"code_challenge_method": "S256", "resource": honest.resource}
            return Response(status_code=302, headers={"location": f"{honest_issuer}/authorize?{urlencode(forged)}"})

        async def token(request: Request) -> Response:
            posted.append(dict((await request.form()).items()))  # type: ignore[arg-type]
            return JSONResponse({"error": "invalid_grant"}, 400)

        routes = [Route("/.well-known/oauth-authorization-server", metadata), Route("/authorize", authorize)]
        routes += [Route("/register", register, methods=["POST"]), Route("/token", token, methods=["POST"])]
        return Starlette(routes=routes)

    evil = Vendor()
    with contextlib.ExitStack() as up:
        honest_issuer = up.enter_context(serve(honest.app()))
        honest.resource = up.enter_context(serve(vendor_server(honest, honest_issuer))) + "/mcp"
        evil_issuer = up.enter_context(serve(attacker()))
        evil.resource = up.enter_context(serve(vendor_server(evil, evil_issuer))) + "/mcp"

        with oauth_servers(stand, tmp_path, {"honest": honest.resource, "evil": evil.resource}) as asked:
            assert signed_in("zoe", asked_url(asked("zoe", "honest"))).status_code == 200
            codes = dict(honest.codes)
            mixed = signed_in("zoe", asked_url(asked("zoe", "evil")))
    assert mixed.status_code == 400, mixed.text
    assert "came back at another server&#x27;s address than the one asked: nothing was granted" in mixed.text
    (code,) = set(honest.codes) - set(codes)  # issued to zoe's browser, redeemed by no one
    assert code not in mixed.text
    assert posted == []


@contextlib.contextmanager
def oauth_servers(stand: Stand, where: Path, servers: dict[str, str]) -> Iterator[Any]:
    """A gateway of a ``--config`` file whose servers (name to URL) each sign their users in at their upstream's
    authorization server (``upstream-token = "oauth"``), on one SQLite store: ``asked(user, server)``, the answer
    to ``whoami`` called there as ``user``."""
    login = f'upstream-token = "oauth"\nlogin-issuer = "{stand.idp.url}"\nlogin-client-id = "{LOGIN[0]}"\n'
    call = modern_request("tools/call", WHOAMI, meta=URL_CAPABLE)

    def command(port: int) -> tuple[list[str], dict[str, str]]:
        lines = [f'[gateway]\nauth-jwks = "{stand.idp.url}/jwks.json"\nauth-issuer = "{stand.idp.url}"\n']
        lines.append(f'auth-audience = "http://127.0.0.1:{port}/"\n')
        lines += [f'[servers.{name}]\nurl = "{url}"\n{login}' for name, url in servers.items()]
        (where / "team.toml").write_text("".join(lines), encoding="utf-8")
        line = [sys.executable, "-m", "mcp_sessions", "gateway", "--config", str(where / "team.toml")]
        environ = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_LOGIN_CLIENT_SECRET": LOGIN[1]}
        return [*line, "--port", str(port)], environ | {"MCP_SESSIONS_STORE": f"sqlite:///{where / 'store.db'}"}

    gateway = started("mcp-sessions gateway --config team.toml", command)
    base = f"http://127.0.0.1:{gateway.port}"

    def asked(user: str, server: str) -> dict[str, Any]:
        headers = {**modern_headers(call), "Authorization": f"Bearer {stand.idp.token_for(user, base + '/')}"}
        return result_of(httpx.post(f"{base}/servers/{server}/mcp", json=call, headers=headers, timeout=30), call["id"])

    try:
        yield asked
    finally:
        gateway.stop()


def test_two_servers_at_one_authorization_server_are_two_grants_each_for_its_own_resource(
    stand: Stand, tmp_path: Path
) -> None:
    """RFC 8707: two servers of a file behind one authorization server. amy signed in at ``a`` is asked to sign in
    at ``b`` too (a grant of its own, kept apart in the store they share); every authorization, code and refresh
    request names its server's resource; ``b`` is never sent the token issued for ``a``, and each answers her with
    a token for itself."""
    vendor = Vendor(lifetime=0)  # each call refreshes
    b_port = free_port()
    b_resource = f"http://127.0.0.1:{b_port}/mcp"
    vendor.others.append(b_resource)
    with contextlib.ExitStack() as up:
        issuer = up.enter_context(serve(vendor.app()))
        vendor.resource = up.enter_context(serve(vendor_server(vendor, issuer))) + "/mcp"
        up.enter_context(serve(vendor_server(vendor, issuer, b_resource), port=b_port))
        with oauth_servers(stand, tmp_path, {"a": vendor.resource, "b": b_resource}) as asked:
            assert signed_in("amy", asked_url(asked("amy", "a"))).status_code == 200
            for_a = [whoami(asked("amy", "a"))["token"] for _ in range(2)]
            assert signed_in("amy", asked_url(asked("amy", "b"))).status_code == 200
            for_b = [whoami(asked("amy", "b"))["token"] for _ in range(2)]
            again = whoami(asked("amy", "a"))["token"]
    assert [claims_of(token)["aud"] for token in (*for_a, again)] == [vendor.resource] * 3
    assert [claims_of(token)["aud"] for token in for_b] == [b_resource] * 2
    assert not set(vendor.presented[b_resource]) & set(vendor.presented[vendor.resource]) - {""}  # "": the probes
    assert vendor.counts["codes"] == 2
    kinds = [kind for kind, _ in vendor.targets]
    assert kinds.count("authorize") == 2 and kinds.count("refresh_token") >= 4, vendor.targets
    assert all(resource in (vendor.resource, b_resource) for _, resource in vendor.targets), vendor.targets


def test_a_token_whose_audience_is_another_resource_is_never_sent(stand: Stand) -> None:
    """The vendor's server issues quinn a token whose ``aud`` is another server's, though the gateway asked for its
    own resource: the page says so, nothing is kept, the vendor's server is sent nothing, and her next call asks her
    to sign in again."""
    stand.vendor.audience = "https://elsewhere.example/mcp"
    try:
        sent = stand.vendor.presented.setdefault(stand.vendor.resource, [])
        done = signed_in("quinn", asked_url(modern_call(stand, "quinn")))
        assert done.status_code == 502 and "issued no usable token" in done.text, done.text
        assert asked_url(modern_call(stand, "quinn"))
        assert not {claims_of(token)["sub"] for token in sent if token} & {"quinn"}
    finally:
        stand.vendor.audience = None


def test_a_client_without_url_elicitation_gets_the_url_in_an_error(stand: Stand) -> None:
    """A 2026-07-28 client that declares no URL elicitation: the missing capability's error (-32021), the URL in
    its message."""
    answer = modern_call(stand, "carol", meta={})
    error = answer["error"]
    assert error["code"] == -32021
    assert error["data"]["url"] in error["message"]


def test_a_sign_in_url_completed_by_another_user_grants_nothing(stand: Stand) -> None:
    """dave's URL opened by erin, who signs in at the IdP as herself: a page that says so, and nothing granted to
    either (the URL is spent: dave's retry gets a new one)."""
    url = asked_url(modern_call(stand, "dave"))
    opened = signed_in("erin", url)
    assert opened.status_code == 403
    assert "made for another user" in opened.text
    again = asked_url(modern_call(stand, "dave"))
    assert again != url
    assert signed_in("dave", url).status_code == 404  # spent
    assert modern_call(stand, "erin", meta={})["error"]["code"] == -32021  # erin has no grant either


def test_a_replayed_tampered_or_carried_state_grants_nothing(stand: Stand) -> None:
    """frank's flow walked one redirect at a time. The IdP's answer carried to another browser (no cookie of the
    flow's) grants nothing, and spends that state: frank's own use of it then grants nothing either. In his next
    flow a tampered ``state`` grants nothing and spends nothing; his own callback goes on to a grant, and replaying
    either leg's callback then grants nothing."""

    def to_callback(http: httpx.Client) -> str:
        to_idp = http.get(asked_url(modern_call(stand, "frank")))
        assert to_idp.status_code == 302
        back = http.get(to_idp.headers["location"])  # the IdP signs frank in, and sends him back
        location: str = back.headers["location"]
        return location

    with browser("frank") as http:
        http.follow_redirects = False
        callback = to_callback(http)
        with browser("frank") as other:
            carried = other.get(callback)
        assert carried.status_code == 400 and "another browser" in carried.text
        assert http.get(callback).status_code == 400
        callback = to_callback(http)
        query = dict(parse_qsl(urlsplit(callback).query))
        tampered = {**query, "state": query["state"][:-2] + ("AA" if query["state"][-2:] != "AA" else "BB")}
        spoiled = http.get(callback.partition("?")[0] + "?" + urlencode(tampered))
        assert spoiled.status_code == 400 and "nothing was granted" in spoiled.text
        http.follow_redirects = True
        done = http.get(callback)
        assert done.status_code == 200, done.text
        assert http.get(callback).status_code == 400  # the login's leg replayed
        assert http.get(str(done.url)).status_code == 400  # the vendor's leg replayed
    assert whoami(modern_call(stand, "frank"))["sub"] == "frank"


def test_a_callback_without_the_iss_its_server_says_it_sends_grants_nothing(stand: Stand) -> None:
    """The vendor's metadata says it names itself in its answers (RFC 9207): its answer to paul's browser with its
    ``iss`` taken out (a code injected, or sent on by another server) is a page that says so, the code redeemed
    nowhere; the same answer whole, in his next flow, grants."""
    with browser("paul") as http:
        http.follow_redirects = False
        to_idp = http.get(asked_url(modern_call(stand, "paul")))
        to_vendor = http.get(http.get(to_idp.headers["location"]).headers["location"])
        callback = http.get(to_vendor.headers["location"]).headers["location"]
        query = dict(parse_qsl(urlsplit(callback).query))
        assert query.pop("iss") == stand.vendor_issuer
        codes = stand.vendor.counts["codes"]
        unnamed = http.get(callback.partition("?")[0] + "?" + urlencode(query))
        assert unnamed.status_code == 400, unnamed.text
        assert "does not name the server it comes from: nothing was granted" in unnamed.text
        assert stand.vendor.counts["codes"] == codes and query["code"] in stand.vendor.codes
    assert signed_in("paul", asked_url(modern_call(stand, "paul"))).status_code == 200
    assert whoami(modern_call(stand, "paul"))["sub"] == "paul"


def test_a_refused_consent_grants_nothing_and_asks_again(stand: Stand) -> None:
    """leo declines at the vendor's consent: the last page says the sign-in was refused (escaped, the server's
    ``error`` alone), and his next call asks him again."""
    stand.vendor.declining.add("leo")
    refused = signed_in("leo", asked_url(modern_call(stand, "leo")))
    assert refused.status_code == 403
    assert "The sign-in was refused (access_denied): nothing was granted." in refused.text
    assert asked_url(modern_call(stand, "leo"))


@pytest.mark.parametrize(
    ("method", "path", "status", "says"),
    [
        ("GET", "/oauth/authorize/made-up", 404, "unknown, used or expired"),
        ("GET", "/oauth/authorize/" + "x" * 5000, 404, "unknown, used or expired"),
        ("GET", "/oauth/callback", 400, "unknown, used or expired"),
        ("GET", "/oauth/callback?state=%3Cscript%3E&code=c", 400, "unknown, used or expired"),
        ("POST", "/oauth/callback?state=s&code=c", 405, "opened, not posted to"),
        ("GET", "/oauth/grants", 401, ""),
    ],
)
def test_a_browser_s_bad_request_is_a_page_that_says_so(
    stand: Stand, method: str, path: str, status: int, says: str
) -> None:
    answer = httpx.request(method, stand.gateway.url(path), timeout=30)
    assert answer.status_code == status
    assert says in answer.text
    assert "<script>" not in answer.text


def test_a_token_the_upstream_refuses_is_refreshed_or_asked_again_never_its_401(stand: Stand) -> None:
    """rosa's access token refused by the vendor's server (its grant still good): her call goes once more with a
    refreshed token and is answered. Her grant revoked at the vendor (she removed the app there): her call is
    answered with her sign-in URL, not the upstream's 401, whose metadata would send her client to the vendor."""
    assert signed_in("rosa", asked_url(modern_call(stand, "rosa"))).status_code == 200
    first = whoami(modern_call(stand, "rosa"))["token"]
    stand.vendor.refused.add(first)
    again = whoami(modern_call(stand, "rosa"))["token"]
    assert again != first
    (grant,) = {claims_of(again)["gid"]}
    stand.vendor.grants[grant] = None
    assert asked_url(modern_call(stand, "rosa")).startswith(stand.gateway.url("/oauth/authorize/"))


def test_a_refresh_answered_past_the_bound_is_a_502_that_says_so(stand: Stand) -> None:
    """The vendor's token endpoint answering vera's refresh with 100 kB (a hostile server's long answer): the
    gateway stops reading at 64 KiB and her call is a 502 that says the answer is too long. The refresh token that
    answer rotated in was never read: the old one, seen again, ends her grant at the vendor, and she is asked to
    sign in again."""
    assert signed_in("vera", asked_url(modern_call(stand, "vera"))).status_code == 200
    first = whoami(modern_call(stand, "vera"))["token"]
    stand.vendor.refused.add(first)
    body = modern_request("tools/call", WHOAMI, meta=URL_CAPABLE)
    headers = {**modern_headers(body), "Authorization": f"Bearer {stand.idp.token_for('vera', stand.gateway.url())}"}
    stand.vendor.padding = 100_000
    try:
        answer = httpx.post(stand.gateway.url(), json=body, headers=headers, timeout=30)
    finally:
        stand.vendor.padding = 0
    assert answer.status_code == 502
    assert answer.json()["error"]["message"] == _failed("a server's answer is too long")
    assert asked_url(modern_call(stand, "vera")).startswith(stand.gateway.url("/oauth/authorize/"))


def claims_of(token: str) -> dict[str, Any]:
    decoded: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return decoded


@pytest.mark.anyio
async def test_one_refresh_in_flight_and_a_revoked_grant_asks_again(stand: Stand) -> None:
    """grace's tokens say they expire at once (``expires_in`` 0): each call refreshes (the vendor rotates the
    refresh token), 8 calls at once refresh once; an old refresh token sent again revokes her grant at the vendor,
    and her next call asks her to sign in again rather than failing."""
    stand.vendor.lifetime = 0
    try:
        assert signed_in("grace", asked_url(modern_call(stand, "grace"))).status_code == 200
        first = whoami(modern_call(stand, "grace"))["token"]
        before = stand.vendor.counts["refreshes"]
        second = whoami(modern_call(stand, "grace"))["token"]
        assert stand.vendor.counts["refreshes"] == before + 1
        assert second != first
        before = stand.vendor.counts["refreshes"]
        seen: list[str] = []

        async def call() -> None:
            answer = await anyio.to_thread.run_sync(modern_call, stand, "grace")
            seen.append(whoami(answer)["sub"])

        async with anyio.create_task_group() as group:
            for _ in range(8):
                group.start_soon(call)
        assert seen == ["grace"] * 8
        refreshed = stand.vendor.counts["refreshes"] - before
        assert 1 <= refreshed < 8  # one in flight at a time: calls that came during one took its token
        old = next(token for token, grant in stand.vendor.refreshes.items() if _is_old(stand.vendor, token, grant))
        token_endpoint = _vendor_token_endpoint(stand)
        client_id = stand.vendor.clients_of[stand.vendor.refreshes[old]]  # the gateway's, as a thief would send
        form = {"grant_type": "refresh_token", "refresh_token": old, "client_id": client_id}
        reused = await anyio.to_thread.run_sync(lambda: httpx.post(token_endpoint, data=form))
        assert reused.status_code == 400
        answer = modern_call(stand, "grace")
        assert asked_url(answer).startswith(stand.gateway.url("/oauth/authorize/"))
    finally:
        stand.vendor.lifetime = 300


def _is_old(vendor: Vendor, token: str, grant: str) -> bool:
    record = vendor.grants.get(grant)
    return record is not None and record[0] == "grace" and record[1] != token


def _vendor_token_endpoint(stand: Stand) -> str:
    issuer = httpx.get(stand.vendor.resource.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")).json()
    return str(issuer["authorization_servers"][0]) + "/token"


def test_a_user_lists_and_revokes_her_own_grant(stand: Stand) -> None:
    """judy's ``GET /oauth/grants`` (with her bearer token) lists her grant at the vendor's server, no token in it;
    another user's lists none, a request without a token gets 401; her ``DELETE`` at another server revokes
    nothing, at the vendor's (``?server=``) revokes it there (RFC 7009) and here, and her next call asks her to
    sign in again."""
    assert signed_in("judy", asked_url(modern_call(stand, "judy"))).status_code == 200
    token = whoami(modern_call(stand, "judy"))["token"]

    def grants(user: str, method: str = "GET", server: str | None = None) -> httpx.Response:
        bearer = stand.idp.token_for(user, stand.gateway.url())
        headers = {"Authorization": f"Bearer {bearer}"} if user else {}
        params = {} if server is None else {"server": server}
        return httpx.request(method, stand.gateway.url("/oauth/grants"), headers=headers, params=params, timeout=30)

    listed = grants("judy")
    assert listed.status_code == 200, listed.text
    (grant,) = listed.json()["grants"]
    assert grant["resource"] == stand.vendor.resource and grant["refreshes"] is True
    assert token not in listed.text and "vr-" not in listed.text
    assert grants("kim").json() == {"grants": []}
    assert grants("").status_code == 401
    revocations = stand.vendor.counts["revocations"]
    assert grants("judy", "DELETE", server="https://elsewhere.example").json() == {"revoked": []}  # not hers there
    assert [kept["authorization_server"] for kept in grants("judy").json()["grants"]] == [grant["authorization_server"]]
    revoked = grants("judy", "DELETE", server=stand.vendor_issuer)
    told = {"authorization_server": grant["authorization_server"], "notified": True}
    assert revoked.status_code == 200 and revoked.json()["revoked"] == [told]
    assert stand.vendor.counts["revocations"] == revocations + 1
    assert grants("judy").json() == {"grants": []}
    assert asked_url(modern_call(stand, "judy")).startswith(stand.gateway.url("/oauth/authorize/"))


def test_the_docs_lines_list_and_revoke_her_grant_as_written(stand: Stand, tmp_path: Path) -> None:
    """docs/gateway.md's ``curl`` and ``mcp-sessions grants`` lines, as written but for the gateway's host (her token
    in ``alice.jwt``, as they read it): her grant listed as JSON, then as a table (the server, the resource, the
    scope asked, when granted and when it expires), revoked by the command (at the vendor too), the ``DELETE``
    then finding none left; no token printed, and her next call asks her to sign in again."""
    assert signed_in("liz", asked_url(modern_call(stand, "liz"))).status_code == 200
    (tmp_path / "alice.jwt").write_text(stand.idp.token_for("liz", stand.gateway.url()))
    revocations = stand.vendor.counts["revocations"]
    lines = shell_lines("curl -s ")
    done = run_written(lines, {"https://mcp.example.com": stand.gateway.url("")}, tmp_path)
    assert done.returncode == 0, done.stderr
    listed, heading, row, revoked, deleted = done.stdout.splitlines()
    (grant,) = json.loads(listed)["grants"]
    assert (grant["authorization_server"], grant["resource"], grant["scope"]) == (
        stand.vendor_issuer,
        stand.vendor.resource,
        "mcp",  # the upstream's metadata's scopes_supported, asked and granted
    )
    assert grant["granted_at"] < time.time() < grant["expires_at"] and grant["refreshes"] is True
    assert heading.startswith("AUTHORIZATION SERVER  ")
    assert heading.split()[2:] == ["RESOURCE", "SCOPE", "GRANTED", "EXPIRES"]
    granted = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(grant["granted_at"]))
    assert row.split()[:3] == [stand.vendor_issuer, stand.vendor.resource, "mcp"] and granted in row
    assert revoked == f"revoked the grant at {stand.vendor_issuer}"
    assert json.loads(deleted) == {"revoked": []}
    assert stand.vendor.counts["revocations"] == revocations + 1
    assert [token for token in stand.vendor.issued if token in done.stdout] == []
    assert asked_url(modern_call(stand, "liz")).startswith(stand.gateway.url("/oauth/authorize/"))


class Hostile:
    """An upstream and its authorization server in one app, each answer as ``case`` has it (see the test)."""

    def __init__(self) -> None:
        self.case = ""
        self.released = anyio.Event()

    def app(self) -> Starlette:
        async def mcp(request: Request) -> Response:
            if self.case == "no metadata":
                return Response(status_code=401)
            metadata = str(request.base_url) + ".well-known/oauth-protected-resource/mcp"
            if self.case == "metadata elsewhere":  # a port of this host's that the gateway must not be sent to
                metadata = "http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp"
            return Response(status_code=401, headers={"WWW-Authenticate": f'Bearer resource_metadata="{metadata}"'})

        async def resource(request: Request) -> Response:
            base = str(request.base_url).rstrip("/")
            if self.case in ("no metadata", "metadata elsewhere"):
                return Response(status_code=404)
            if self.case == "slow":
                await self.released.wait()
            if self.case == "too long":
                return Response(b"{" + b" " * (1024 * 1024) + b"}", media_type="application/json")
            if self.case == "cut":  # ends its connection within the body it began
                return StreamingResponse(_cut(), media_type="application/json")
            if self.case == "not json":
                return Response(b"<html>", media_type="text/html")
            named = "https://elsewhere.example/mcp" if self.case == "another resource" else base + "/mcp"
            return JSONResponse({"resource": named, "authorization_servers": [base]})

        async def server(request: Request) -> Response:
            base = str(request.base_url).rstrip("/")
            metadata: dict[str, object] = {
                "issuer": base,
                "authorization_endpoint": base + "/a",
                "token_endpoint": base + "/t",
            }
            if self.case == "another issuer":
                metadata["issuer"] = "https://elsewhere.example"
            if self.case == "a line break":  # would split the Location header the browser is sent
                metadata["authorization_endpoint"] = base + "/a\r\nSet-Cookie: x=y"
            if self.case != "no S256":
                metadata["code_challenge_methods_supported"] = ["S256"]
            return JSONResponse(metadata)

        return Starlette(
            routes=[
                Route("/mcp", mcp, methods=["GET", "POST"]),
                Route("/.well-known/oauth-protected-resource/mcp", resource),
                Route("/.well-known/oauth-authorization-server", server),
            ]
        )


@pytest.mark.anyio
async def test_an_upstream_found_wrong_is_a_clear_error_never_a_500_or_a_hang(stand: Stand) -> None:
    """The gateway in process in front of an upstream whose discovery goes wrong, one way after another (a failure
    is not kept: each request finds anew): each a JSON-RPC error with 502 (or 504 for a server that does not
    answer within the gateway's timeout) that says what was wrong. A ``resource_metadata`` on another origin is not
    fetched (the gateway would say it could not be reached); a server that ends its answer halfway closed the
    connection (it was reached)."""
    hostile = Hostile()
    audience = "http://127.0.0.1:8000/mcp"
    with serve(hostile.app()) as base:
        login = Login(stand.idp.url, ClientAuth("client_secret_basic", *LOGIN, servers=(stand.idp.url,)))
        grants = UpstreamGrants(
            upstream=base + "/mcp", callback="http://127.0.0.1:8000/oauth/callback", login=login, timeout=0.5
        )
        auth = GatewayAuth(jwks_url=stand.idp.url + "/jwks.json", issuer=stand.idp.url, audience=audience)
        app = gateway_app([base + "/mcp"], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=grants)
        body = modern_request("tools/call", WHOAMI, meta=URL_CAPABLE)
        bearer = stand.idp.token_for("max", audience)
        headers = {**modern_headers(body), "Authorization": f"Bearer {bearer}"}
        found = {}
        async with asgi_client(app) as client:
            for case in (
                "no metadata",
                "metadata elsewhere",
                "not json",
                "another resource",
                "no S256",
                "another issuer",
                "a line break",
                "too long",
                "cut",
                "slow",
            ):
                hostile.case = case
                answer = await client.post("/mcp", json=body, headers=headers)
                found[case] = (answer.status_code, answer.json()["error"]["message"])
            hostile.released.set()
    assert found == {
        "no metadata": (502, _failed("the upstream names no protected resource metadata (RFC 9728)")),
        "metadata elsewhere": (502, _failed("the upstream names no protected resource metadata (RFC 9728)")),
        "not json": (502, _failed("the upstream names no protected resource metadata (RFC 9728)")),
        "another resource": (502, _failed("the upstream's resource metadata names another resource")),
        "no S256": (502, _failed("the upstream's authorization server does not say it takes PKCE's S256")),
        "another issuer": (502, _failed("an authorization server's metadata names another issuer")),
        "a line break": (502, _failed("an authorization server's metadata names no authorization_endpoint")),
        "too long": (502, _failed("the upstream's answer is too long")),
        "cut": (502, _failed("the upstream closed the connection without an answer")),
        "slow": (504, _failed("the upstream did not answer in time")),
    }


@pytest.mark.anyio
async def test_the_vendor_s_server_given_is_the_one_the_upstream_must_name() -> None:
    """``--oauth-issuer`` names the vendor's authorization server, for which the gateway's client holds a secret:
    an upstream whose metadata (RFC 9728) names another (itself) is the client's 502 naming both, and the server it
    named is asked nothing (neither its metadata nor its endpoints: no user is sent there, no secret)."""
    named = "https://vendor-login.example"
    client = ClientAuth("client_secret_basic", "vendor-client", secret="s3cr3t-value", servers=(named,))
    login = Login("http://127.0.0.1:9", ClientAuth("client_secret_basic", *LOGIN, servers=("http://127.0.0.1:9",)))
    audience = "http://127.0.0.1:8000/mcp"
    asked: list[str] = []
    hostile = Hostile().app()

    async def recorded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            asked.append(scope["path"])
        await hostile(scope, receive, send)

    with serve(recorded) as base, jwks() as keys:
        callback = "http://127.0.0.1:8000/oauth/callback"
        grants = UpstreamGrants(upstream=base + "/mcp", callback=callback, login=login, client=client, issuer=named)
        auth = GatewayAuth(jwks_url=keys, issuer=ISSUER, audience=audience)
        app = gateway_app([base + "/mcp"], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=grants)
        body = modern_request("tools/call", WHOAMI, meta=URL_CAPABLE)
        bearer = signed({"iss": ISSUER, "aud": audience, "sub": "max", "exp": time.time() + 600})
        headers = {**modern_headers(body), "Authorization": f"Bearer {bearer}"}
        async with asgi_client(app) as http:
            answer = await http.post("/mcp", json=body, headers=headers)
    said = f"the upstream's resource metadata names the authorization server {base}, not {named} (--oauth-issuer)"
    assert (answer.status_code, answer.json()["error"]["message"]) == (502, _failed(said))
    assert asked == ["/mcp", "/.well-known/oauth-protected-resource/mcp"]
    assert "s3cr3t-value" not in answer.text


async def _cut() -> AsyncIterator[bytes]:
    yield b"{"
    raise ConnectionAbortedError("the answer ends here")  # uvicorn closes the connection within the chunked body


def _failed(reason: str) -> str:
    return f"The upstream's authorization failed: {reason}"


@pytest.mark.anyio
async def test_two_replicas_on_one_store_refresh_in_turn_without_ending_the_grant(stand: Stand) -> None:
    """Two gateways in process on one store and key set (replicas behind one URL), the vendor's tokens expiring at
    once, so that each call refreshes: calls through either in turn reach the vendor as the user, each replica
    refreshing with the refresh token the other rotated in, and the client the first registered (sending the old
    token would have the vendor revoke her grant); one registration for both."""
    first, second = replicas(stand)
    headers = {**modern_headers(REPLICAS_CALL), "Authorization": f"Bearer {stand.idp.token_for('tess', AUDIENCE)}"}
    registrations = stand.vendor.counts["registrations"]
    stand.vendor.lifetime = 0
    try:
        async with asgi_client(first) as one, asgi_client(second) as other:
            await signed_in_through(first, one, "tess", headers)
            refreshes = stand.vendor.counts["refreshes"]
            for client in (other, one, other, one):
                answer = (await client.post("/mcp", json=REPLICAS_CALL, headers=headers)).json()
                assert whoami(answer)["sub"] == "tess", answer
    finally:
        stand.vendor.lifetime = 300
    assert stand.vendor.counts["refreshes"] == refreshes + 4
    assert stand.vendor.counts["registrations"] == registrations + 1


@pytest.mark.anyio
async def test_two_replicas_refreshing_one_grant_at_once_refresh_it_once(stand: Stand) -> None:
    """uma's calls through two replicas at once, her token due for a refresh on both: one replica takes the lease
    on her grant in the store and refreshes; the other finds the token it kept there. One refresh at the vendor;
    without the lease both would send the same refresh token, and the vendor end her grant."""
    store = Watched()
    first, second = replicas(stand, store)
    headers = {**modern_headers(REPLICAS_CALL), "Authorization": f"Bearer {stand.idp.token_for('uma', AUDIENCE)}"}
    stand.vendor.lifetime = 0
    seen: list[str] = []
    try:
        async with asgi_client(first) as one, asgi_client(second) as other:
            await signed_in_through(first, one, "uma", headers)  # her first token due at once, the next not
            stand.vendor.lifetime = 300
            refreshes = stand.vendor.counts["refreshes"]
            stand.vendor.holding = holding = threading.Event()

            async def call(client: httpx.AsyncClient) -> None:
                answer = (await client.post("/mcp", json=REPLICAS_CALL, headers=headers)).json()
                seen.append(whoami(answer)["sub"])

            async with anyio.create_task_group() as group:
                group.start_soon(call, one)
                group.start_soon(call, other)
                # the vendor holds the first refresh until both replicas have asked for the lease (without one,
                # both refreshes would arrive there, and this wait end in a failure)
                with anyio.fail_after(10):
                    await store.both_asked.wait()
                holding.set()
    finally:
        stand.vendor.lifetime = 300
        stand.vendor.holding = None
    assert seen == ["uma", "uma"]
    assert stand.vendor.counts["refreshes"] == refreshes + 1


@pytest.mark.anyio
async def test_a_grant_revoked_through_one_replica_is_never_sent_by_another(stand: Stand) -> None:
    """Two replicas on one redis-server, each its own client of it: val's grant, used through both, revoked through
    the first (``DELETE /oauth/grants``): the second's next call asks her to sign in again, and her revoked token is
    not sent to the vendor's server again (the second held it in memory, and sent it until a refresh was due)."""
    headers = {**modern_headers(REPLICAS_CALL), "Authorization": f"Bearer {stand.idp.token_for('val', AUDIENCE)}"}
    with redis_server() as redis:
        stores = RedisStore(redis.url), RedisStore(redis.url)
        first, second = replicas(stand, *stores)
        try:
            async with asgi_client(first) as one, asgi_client(second) as other:
                await signed_in_through(first, one, "val", headers)
                for client in (one, other):
                    answer = (await client.post("/mcp", json=REPLICAS_CALL, headers=headers)).json()
                    assert whoami(answer)["sub"] == "val", answer
                revoked = await one.delete("/oauth/grants", headers=headers)
                assert [each["notified"] for each in revoked.json()["revoked"]] == [True], revoked.text
                sent = len(stand.vendor.presented[stand.vendor.resource])
                answer = (await other.post("/mcp", json=REPLICAS_CALL, headers=headers)).json()
        finally:
            for store in stores:
                await store.aclose()
    assert asked_url(answer).startswith("http://127.0.0.1:8000/oauth/authorize/")
    assert stand.vendor.presented[stand.vendor.resource][sent:] == []


@pytest.mark.anyio
async def test_a_refresh_one_replica_waits_to_lease_reads_the_grant_the_other_rotated(stand: Stand) -> None:
    """wes's token due on two replicas on one redis-server: the first asks for the lease on his grant and is held
    there while the second refreshes it whole (the vendor rotating his refresh token); then the first goes on. It
    reads the grant under the lease, finds it refreshed, and refreshes nothing: the vendor is sent each refresh
    token once, and his grant lives. (Read before the lease, the grant held the refresh token rotated out since,
    which the vendor answers by revoking the whole grant.)"""
    headers = {**modern_headers(REPLICAS_CALL), "Authorization": f"Bearer {stand.idp.token_for('wes', AUDIENCE)}"}
    seen: list[dict[str, Any]] = []
    with redis_server() as redis:
        stores = Held(redis.url), RedisStore(redis.url)
        first, second = replicas(stand, *stores)
        stand.vendor.lifetime = 0
        try:
            async with asgi_client(first) as one, asgi_client(second) as other:
                await signed_in_through(first, one, "wes", headers)  # his first token due at once, the next not
                stand.vendor.lifetime = 300
                refreshes = stand.vendor.counts["refreshes"]

                async def through_first() -> None:
                    seen.append((await one.post("/mcp", json=REPLICAS_CALL, headers=headers)).json())

                async with anyio.create_task_group() as group:
                    group.start_soon(through_first)
                    with anyio.fail_after(10):
                        await stores[0].asking.wait()
                    seen.append((await other.post("/mcp", json=REPLICAS_CALL, headers=headers)).json())
                    stores[0].go.set()
        finally:
            stand.vendor.lifetime = 300
            for store in stores:
                await store.aclose()
    assert [whoami(answer)["sub"] for answer in seen] == ["wes", "wes"], seen
    assert stand.vendor.counts["refreshes"] == refreshes + 1


class Held(RedisStore):
    """A replica's client of the redis-server whose first lease asked for (``_kept``'s ``refreshing`` field) says
    so (``asking``) and waits for ``go``."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.asking = anyio.Event()
        self.go = anyio.Event()

    async def update(self, session_id: str, key: str, fn: Any, *, expires_at: float, default: object = None) -> Any:
        if key == "refreshing" and not self.asking.is_set():
            self.asking.set()
            await self.go.wait()
        return await super().update(session_id, key, fn, expires_at=expires_at, default=default)


@pytest.mark.anyio
async def test_a_grant_refreshed_while_the_store_stalls_is_told_to_retry(stand: Stand) -> None:
    """110.4: vic's token due for a refresh while the replicas' Redis holds writes (its lease on her grant, the
    store's atomic update, outlives the store's timeout): her call gets the retryable -32010 with HTTP 503 and
    ``Retry-After``, as every store failure of the gateway, where it was -32014 ("the upstream's authorization
    failed"); once Redis writes again, the same call is refreshed and served."""
    with redis_server() as server:
        store = RedisStore(server.url)
        first, _ = replicas(stand, store)
        headers = {**modern_headers(REPLICAS_CALL), "Authorization": f"Bearer {stand.idp.token_for('vic', AUDIENCE)}"}
        stand.vendor.lifetime = 0
        try:
            async with asgi_client(first) as one:
                await signed_in_through(first, one, "vic", headers)  # her first token due at once, the next not
                stand.vendor.lifetime = 300
                with writes_paused(server):
                    stalled = await one.post("/mcp", json=REPLICAS_CALL, headers=headers)
                served = (await one.post("/mcp", json=REPLICAS_CALL, headers=headers)).json()
        finally:
            stand.vendor.lifetime = 300
            await store.aclose()
    assert (stalled.status_code, stalled.headers.get("retry-after")) == (503, "1"), stalled.text
    assert stalled.json()["error"] == {"code": -32010, "message": "Session store unavailable, retry later"}
    assert whoami(served)["sub"] == "vic", served


class Watched(MemoryStore):
    """The replicas' store, which says when two leases have been asked for (``_kept``'s ``refreshing`` field)."""

    def __init__(self) -> None:
        super().__init__()
        self.leases = 0
        self.both_asked = anyio.Event()

    async def update(self, session_id: str, key: str, fn: Any, *, expires_at: float, default: object = None) -> Any:
        updated = await super().update(session_id, key, fn, expires_at=expires_at, default=default)
        if key == "refreshing" and isinstance(updated, list):  # a lease asked for (a release stores None)
            self.leases += 1
            if self.leases == 2:
                self.both_asked.set()
        return updated


AUDIENCE = "http://127.0.0.1:8000/mcp"  # the in-process replicas' (asgi_client's base URL)
REPLICAS_CALL = modern_request("tools/call", WHOAMI, meta=URL_CAPABLE)


def replicas(stand: Stand, store: SessionStore | None = None, second: SessionStore | None = None) -> tuple[Any, Any]:
    """Two gateways in process in front of the vendor, on one store (``store``, else a new one; the second's through
    ``second`` where given, another client of it) and one key set (each its own sessions)."""
    store = MemoryStore() if store is None else store
    keys = KeySet.from_secret("r" * 32)

    def replica(store: SessionStore) -> Any:
        login = Login(stand.idp.url, ClientAuth("client_secret_basic", *LOGIN, servers=(stand.idp.url,)))
        callback = "http://127.0.0.1:8000/oauth/callback"
        grants = UpstreamGrants(
            upstream=stand.vendor.resource, callback=callback, login=login, kept=KeptGrants(store, keys)
        )
        auth = GatewayAuth(jwks_url=stand.idp.url + "/jwks.json", issuer=stand.idp.url, audience=AUDIENCE)
        config = SessionsConfig(secret=SECRET)
        return gateway_app([stand.vendor.resource], config=config, auth=auth, upstream_token=grants)

    return replica(store), replica(second or store)


async def signed_in_through(app: Any, client: httpx.AsyncClient, user: str, headers: dict[str, str]) -> None:
    """``user``'s sign-in through the replica ``app``: its URL, followed by a browser that reaches it in process."""
    url = asked_url((await client.post("/mcp", json=REPLICAS_CALL, headers=headers)).json())
    mounts = {"http://127.0.0.1:8000": httpx.ASGITransport(app)}
    async with httpx.AsyncClient(mounts=mounts, follow_redirects=True, headers={USER_HEADER: user}) as web:
        assert (await web.get(url)).status_code == 200


@pytest.mark.anyio
async def test_a_grant_is_refreshed_once_due_on_the_sign_in_s_clock(stand: Stand) -> None:
    """uma's access token (the vendor says it lives 300 s) is sent as it is until :data:`_oauth.RENEW_BEFORE`
    seconds before it expires, then refreshed once: the sign-in's clock (given as the gateway is built) is moved
    there, not waited for."""
    ahead = 0.0
    login = Login(stand.idp.url, ClientAuth("client_secret_basic", *LOGIN, servers=(stand.idp.url,)))
    grants = UpstreamGrants(
        upstream=stand.vendor.resource,
        callback="http://127.0.0.1:8000/oauth/callback",
        login=login,
        clock=lambda: time.time() + ahead,
    )
    auth = GatewayAuth(jwks_url=stand.idp.url + "/jwks.json", issuer=stand.idp.url, audience=AUDIENCE)
    app = gateway_app([stand.vendor.resource], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=grants)
    headers = {**modern_headers(REPLICAS_CALL), "Authorization": f"Bearer {stand.idp.token_for('uma', AUDIENCE)}"}
    async with asgi_client(app) as client:
        await signed_in_through(app, client, "uma", headers)

        async def token() -> str:
            return whoami((await client.post("/mcp", json=REPLICAS_CALL, headers=headers)).json())["token"]

        first = await token()
        refreshes = stand.vendor.counts["refreshes"]
        ahead = stand.vendor.lifetime - 30 - 5  # not yet due
        assert await token() == first
        assert stand.vendor.counts["refreshes"] == refreshes
        ahead = stand.vendor.lifetime - 30 + 1  # due, before it expires
        renewed = await token()
        assert renewed != first and await token() == renewed
        assert stand.vendor.counts["refreshes"] == refreshes + 1


@pytest.mark.anyio
async def test_the_sign_in_s_answers_to_a_browser_carry_their_headers_and_cookie(stand: Stand) -> None:
    """What a browser is answered at an https gateway's sign-in routes (in process): the sign-in URL's 302 to the
    IdP binds the flow by a cookie that is ``HttpOnly``, ``Secure``, ``SameSite=Lax``, on ``/oauth/`` alone, for
    10 minutes, and the answer is never cached and sends no Referer on; each page (an unknown link, a callback
    posted to) says what happened, never cached, never framed, no Referer; the user's grants and the Client ID
    Metadata Document are JSON, the grants never cached, the document for five minutes, read with GET or HEAD."""
    base = "https://gateway.example"
    login = Login(stand.idp.url, ClientAuth("client_secret_basic", *LOGIN, servers=(stand.idp.url,)))
    grants = UpstreamGrants(upstream=stand.vendor.resource, callback=base + "/oauth/callback", login=login)
    auth = GatewayAuth(jwks_url=stand.idp.url + "/jwks.json", issuer=stand.idp.url, audience=AUDIENCE)
    app = gateway_app([stand.vendor.resource], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=grants)
    headers = {**modern_headers(REPLICAS_CALL), "Authorization": f"Bearer {stand.idp.token_for('ann', AUDIENCE)}"}
    page_headers = {
        "content-type": "text/html; charset=utf-8",
        "cache-control": "no-store",
        "referrer-policy": "no-referrer",
        "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
    }
    async with asgi_client(app) as client, httpx.AsyncClient(transport=httpx.ASGITransport(app)) as web:
        url = asked_url((await client.post("/mcp", json=REPLICAS_CALL, headers=headers)).json())
        assert url.startswith(base + "/oauth/authorize/")
        to_idp = await web.get(url, headers={USER_HEADER: "ann"})
        assert to_idp.status_code == 302 and to_idp.headers["location"].startswith(stand.idp.url + "/")
        assert to_idp.headers["cache-control"] == "no-store" and to_idp.headers["referrer-policy"] == "no-referrer"
        assert to_idp.headers["content-length"] == "0"
        (cookie,) = to_idp.headers.get_list("set-cookie")
        named, _, said = cookie.partition(";")
        name, _, binding = named.partition("=")
        assert re.fullmatch(r"mcp_sessions_sign_in-[0-9a-f]{16}", name) and len(binding) >= 43
        attributes = {
            part.strip().partition("=")[0].lower(): part.strip().partition("=")[2] for part in said.split(";")
        }
        assert attributes == {
            "httponly": "",
            "secure": "",
            "samesite": attributes["samesite"],
            "path": "/oauth/",
            "max-age": "600",
        }
        assert attributes["samesite"].lower() == "lax"
        async with httpx.AsyncClient(headers={USER_HEADER: "ann"}) as idp:
            callback = (await idp.get(to_idp.headers["location"])).headers["location"]
        forged = f"{name}=\u00e9{binding[1:]}".encode("latin-1")  # another browser's, not ASCII: refused, no 500
        carried = await web.get(callback, headers={b"cookie": forged})
        assert carried.status_code == 400 and "started in another browser" in carried.text
        for method, path, status, says in [
            ("GET", "/oauth/authorize/made-up", 404, "This sign-in link is unknown, used or expired."),
            ("POST", "/oauth/callback?state=s&code=c", 405, "This page is opened, not posted to."),
            ("GET", "/oauth/callback?state=s&code=c", 400, "This sign-in is unknown, used or expired: nothing"),
        ]:
            page = await web.request(method, base + path)
            assert (page.status_code, {name: page.headers[name] for name in page_headers}) == (status, page_headers)
            assert page.text.startswith("<!doctype html><meta charset=utf-8><title>Sign-in</title><p>")
            assert says in page.text and page.headers["content-length"] == str(len(page.content))
        listed = await client.get("/oauth/grants", headers={"Authorization": headers["Authorization"]})
        assert (listed.status_code, listed.json()) == (200, {"grants": []})
        assert listed.headers["content-type"] == "application/json" and listed.headers["cache-control"] == "no-store"
        for method in ("GET", "HEAD"):
            document = await web.request(method, base + CLIENT_PATH)
            assert document.status_code == 200 and document.headers["content-type"] == "application/json"
            assert document.headers["cache-control"] == "public, max-age=300"
        assert json.loads(document.headers["content-length"]) == len((await web.get(base + CLIENT_PATH)).content)
        posted = await web.post(base + CLIENT_PATH)
        assert posted.status_code == 405 and posted.headers["cache-control"] == "no-store"
        assert posted.json() == {"error": "the client's metadata document is read with GET"}


def test_a_restarted_gateway_keeps_each_grant_sealed_in_its_store(stand: Stand) -> None:
    """ivy signs in, the gateway stops, and one with the key set rotated (the old key kept as a verifier) starts on
    the same store, the default (an SQLite file in the state directory: it was memory, and a restart signed every
    user out, issue 112): her call reaches the vendor as herself with no sign-in and no new code, and her token
    refreshed there goes with the client the first registered (the vendor binds a refresh token to its client),
    registered again by no one. The store's file
    holds neither of her tokens, nor her name; the first gateway's output, its spans exported at its exit, neither
    token. The restarted gateway's operator lists her grant (the store's index, sealed under the old key), before
    she has called, and revokes it: at the vendor, and in the store, so that her next call asks her again."""
    assert signed_in("ivy", asked_url(modern_call(stand, "ivy"))).status_code == 200
    token = whoami(modern_call(stand, "ivy"))["token"]
    codes = stand.vendor.counts["codes"]
    output = stand.start(NEW_KEYS)
    assert '"name": "POST"' in output  # httpx's spans, the token endpoint's among them
    listed = main_run("grants", "--status", stand.status, "--principal", "ivy", "--json")
    assert listed.returncode == 0, listed.stderr
    (grant,) = json.loads(listed.stdout)["grants"]
    assert (grant["authorization_server"], grant["resource"]) == (stand.vendor_issuer, stand.vendor.resource)
    processes = httpx.get(stand.status + "/status", timeout=30)  # an --upstream's listener: the grants alone
    assert processes.status_code == 404 and "runs no process" in processes.json()["error"]
    after = whoami(modern_call(stand, "ivy"))
    assert after == {"sub": "ivy", "token": token}
    assert stand.vendor.counts["codes"] == codes
    registrations = stand.vendor.counts["registrations"]
    stand.vendor.refused.add(token)  # refreshed now, by the client registered before the restart (its grant's)
    assert whoami(modern_call(stand, "ivy"))["sub"] == "ivy"
    assert stand.vendor.counts["registrations"] == registrations
    kept = b"".join(path.read_bytes() for path in (stand.state / "store").iterdir())
    refresh = [token for token, grant in stand.vendor.refreshes.items() if _holder(stand.vendor, grant) == "ivy"]
    assert refresh
    for secret in stand.vendor.issued:  # every user's so far
        assert secret not in output
        assert secret.encode() not in kept
        assert secret[-16:].encode() not in kept
    # her name nowhere but by chance inside a sealed value's base64 (3 letters of 64: 1 in 262,144 at each place)
    assert b"ivy" not in re.sub(rb'"(?:nonce|sealed)":"[A-Za-z0-9_=-]*"', b"", kept)
    revocations = stand.vendor.counts["revocations"]
    revoked = main_run("grants", "--status", stand.status, "--revoke", "--principal", "ivy")
    assert revoked.stdout == f"revoked ivy's grant at {stand.vendor_issuer}\n", revoked.stderr
    assert stand.vendor.counts["revocations"] == revocations + 1
    everyone = json.loads(main_run("grants", "--status", stand.status, "--json").stdout)["grants"]
    assert "ivy" not in [entry["principal"] for entry in everyone]
    assert asked_url(modern_call(stand, "ivy")).startswith(stand.gateway.url("/oauth/authorize/"))


def test_a_gateway_restarted_with_its_upstream_down_lists_its_grants_and_revokes_them_in_itself(
    stand: Stand, tmp_path: Path
) -> None:
    """uma signs in at a vendor of the test's own, whose server and authorization server then go down, and the
    gateway restarts on the same store: its operator lists her grant from the store's index, as JSON and as a table
    (no server asked: it once answered the upstream's 502), and revokes it in the gateway, whose line says the
    vendor was not told (and its log why); nothing is left to list."""
    vendor = Vendor()
    with contextlib.ExitStack() as exits:
        with contextlib.ExitStack() as upstream:
            issuer = upstream.enter_context(serve(vendor.app()))
            vendor.resource = upstream.enter_context(serve(vendor_server(vendor, issuer))) + "/mcp"
            down = Stand(stand.idp, vendor, tmp_path / "store.db", exits, vendor_issuer=issuer)
            down.start(OLD_KEY)
            assert signed_in("uma", asked_url(modern_call(down, "uma"))).status_code == 200
            assert whoami(modern_call(down, "uma"))["sub"] == "uma"
        down.start(OLD_KEY)  # the vendor's two servers stopped: nothing listens at their ports
        operator = ("grants", "--status", down.status)
        listed = main_run(*operator, "--json")
        shown = main_run(*operator)
        revoked = main_run(*operator, "--revoke", "--principal", "uma")
        left = main_run(*operator, "--json")
        output = down.gateway.stop().decode(errors="replace")
    assert listed.returncode == 0, listed.stderr
    (grant,) = json.loads(listed.stdout)["grants"]
    assert (grant["principal"], grant["authorization_server"], grant["resource"]) == ("uma", issuer, vendor.resource)
    assert shown.stdout.splitlines()[1].split()[:3] == ["uma", issuer, vendor.resource], shown.stdout
    assert revoked.returncode == 0, revoked.stderr
    said = f"revoked uma's grant at {issuer}, in the gateway only: the server was not told (revoke it there too)\n"
    assert revoked.stdout == said
    assert vendor.counts["revocations"] == 0
    assert json.loads(left.stdout) == {"grants": []}
    assert f"a grant at {issuer} forgotten here, the server not told: " in output
    for token in vendor.issued:
        assert token not in output


@pytest.mark.anyio
async def test_the_grants_index_is_sealed_follows_the_grants_and_drops_an_entry_past_its_time() -> None:
    """``KeptGrants``' index, what the operator's view lists: an entry for each grant saved, sealed (neither her
    name nor a token among the store's values), gone as its grant is forgotten; one past its time (its grant's
    record expired with it, unforgotten) is not listed, and is dropped from the store as it is read."""
    store = MemoryStore()
    kept = KeptGrants(store, KeySet.from_secret("r" * 32))
    about: dict[str, object] = {"issuer": "https://idp.example", "principal": "nina", "authorization_server": "as"}
    await kept.save("nina-at-as", "access-of-nina", "refresh-of-nina", math.inf, about)
    await kept.save("olga-at-as", "access-of-olga", None, math.inf, about | {"principal": "olga"})
    assert sorted(str(entry["principal"]) for entry in await kept.listed()) == ["nina", "olga"]
    stored = json.dumps(await store.items(_kept._INDEX)) + json.dumps(await store.items(_kept.record("nina-at-as")))
    assert [word for word in ("nina", "olga", "access-of", "refresh-of") if word in stored] == []
    await kept.forget("olga-at-as")
    assert [entry["principal"] for entry in await kept.listed()] == ["nina"]
    past: list[object] = [about | {"principal": "pia", "until": time.time() - 1}]
    await kept._write(_kept._INDEX, past, field=_kept.record("pia-at-as"))  # as a grant's entry a day past KEPT_FOR
    assert len(await store.items(_kept._INDEX)) == 2
    assert [entry["principal"] for entry in await kept.listed()] == ["nina"]
    assert list(await store.items(_kept._INDEX)) == [_kept.record("nina-at-as")]


def _holder(vendor: Vendor, grant: str) -> str | None:
    record = vendor.grants.get(grant)
    return None if record is None else record[0]


UPSTREAM = "https://vendor.example/mcp"
VERIFYING = ("--auth-jwks", "http://127.0.0.1:9/k", "--auth-issuer", "http://127.0.0.1:9", "--auth-audience")
OAUTH = ("--upstream", UPSTREAM, "--upstream-token", "oauth")
LOGGING_IN = ("--login-issuer", "http://127.0.0.1:9", "--login-client-id", "g")
STDIO = ("--stdio", "true", "--accept-shared-uid", "--process-containment", "none")
VENDOR_ENV = ("--process-env", "V=oauth:https://as.example,resource=https://api.example/")


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ((*OAUTH, *LOGGING_IN), "--upstream-token oauth keeps each user's grant: give --auth-jwks"),
        ((*OAUTH, *VERIFYING, "https://gw.example/mcp"), "give --login-issuer and its client"),
        (
            (*OAUTH, "--auth-principal-header", "x-user", *LOGGING_IN),
            "needs the gateway's own URL: give --oauth-callback",
        ),
        ((*OAUTH, *VERIFYING, "https://gw.example/mcp", *LOGGING_IN[:2]), "give --login-issuer and its client"),
        (
            (*OAUTH, *VERIFYING, "https://gw.example/mcp", *LOGGING_IN, "--oauth-callback", "https://gw.example/cb"),
            "the gateway's sign-in callback is its /oauth/callback",
        ),
        (
            (*OAUTH, *VERIFYING, "https://gw.example/mcp", *LOGGING_IN, "--login-client-secret", "s3cr3t-value"),
            "never a flag",
        ),
        (
            (*OAUTH, *VERIFYING, "https://gw.example/mcp", *LOGGING_IN, "--oauth-client-secret-file", "/etc/hostname"),
            "give --oauth-client-id",
        ),
        ((*STDIO, *VENDOR_ENV, *VERIFYING, "https://gw.example/mcp"), "oauth: confirms who opens a sign-in URL: give"),
        ((*STDIO, *VENDOR_ENV, *LOGGING_IN), "--process-env NAME=oauth: keeps each user's grant: give --auth-jwks"),
        (
            (*STDIO, "--process-env", "V=oauth:https://as.example,audience=x", *VERIFYING, "https://g/", *LOGGING_IN),
            "give oauth:ISSUER[,resource=URI][,scope=SCOPE], not oauth:'https://as.example,audience=x'",
        ),
        (
            (*STDIO, *VENDOR_ENV, "--process-env", "W=oauth:https://as.example", *VERIFYING, "https://gw/mcp"),
            "one NAME=oauth: variable per authorization server",
        ),
    ],
)
def test_a_bad_oauth_configuration_is_a_usage_error(arguments: tuple[str, ...], says: str) -> None:
    """Each a line on stderr, exit status 2; the login client's secret from its variable, never from a flag."""
    environ = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_LOGIN_CLIENT_SECRET": "s3cr3t-value"}
    done = main_run("gateway", *arguments, environ=environ)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert done.stderr.count("\n") == 1
    assert "s3cr3t-value" not in done.stderr
