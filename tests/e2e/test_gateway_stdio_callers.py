"""Whose a process of ``mcp-sessions gateway --stdio`` is, and what one caller can cost another: a real gateway
process in front of the tests' stdio server (it speaks 2026-07-28), users with tokens from a JWKS served on loopback
and, beside them, users an auth proxy names. Each test is a finding of issue 76 (its item in the test's docstring),
and fails without its fix.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from _mcp import (
    MODERN,
    SESSION_NOT_FOUND,
    create_session,
    era_session,
    legacy_request,
    modern_headers,
    modern_request,
    sdk_session_meta,
    session_meta,
)
from _redis import free_port, missing
from _waits import WITHIN
from conftest import SECRET
from e2e._gateway import InProcess, Process, gateway_in_process, gateway_process, legacy_initialize, result_of
from e2e._issuer import ISSUER, jwks, signed
from e2e._stdio import COUNT, SERVER, SERVER_PATH, stdio_gateway, text_of
from mcp_sessions import SessionsConfig
from mcp_sessions._gateway.auth._users import GatewayAuth
from mcp_sessions._gateway.sealed._cgroups import Bounds
from mcp_sessions._gateway.stdio import _admission

pytestmark = pytest.mark.anyio

STDIO_SERVER = shlex.join(SERVER)
CHILD_EXITED = -32603


def bearer(gateway: Process | InProcess, name: str) -> dict[str, str]:
    claims = {"iss": ISSUER, "aud": gateway.url(), "sub": name, "exp": int(time.time()) + 300}
    return {"Authorization": f"Bearer {signed(claims)}"}


@contextlib.contextmanager
def verifying(*arguments: str, process: bool = True) -> Iterator[Process | InProcess]:
    """A gateway that verifies tokens against the JWKS, with ``arguments``; its log at ``info``. In this process
    unless ``process`` (a test of its status port's)."""
    serving = gateway_process if process else gateway_in_process
    with jwks() as keys:
        auth = ("--auth-jwks", keys, "--auth-issuer", ISSUER, "--auth-audience", "{url}", "--log-level", "info")
        with serving([], "--stdio", STDIO_SERVER, *auth, *arguments, environ=SERVER_PATH) as gateway:
            yield gateway


@contextlib.asynccontextmanager
async def client_of(gateway: Process | InProcess, name: str) -> AsyncIterator[Client]:
    """The ``mcp`` SDK's client, as the user ``name`` (a token of hers)."""
    async with (
        httpx2.AsyncClient(headers=bearer(gateway, name), timeout=WITHIN) as http,
        Client(streamable_http_client(gateway.url(), http_client=http)) as client,
    ):
        yield client


async def count(client: Client, session: dict[str, Any]) -> str:
    return text_of(await client.call_tool("count", {}, meta=sdk_session_meta(session)))


async def ended(client: Client, session: dict[str, Any]) -> object:
    """What ``session``'s next call gets once its process ended: ``-32043``, at once (issue 94, item 5: until its
    session's revocation landed, ``-32603`` "has ended"); a result, were a new process to serve it."""
    try:
        return await count(client, session)
    except MCPError as exc:
        return exc.code


@pytest.mark.parametrize(
    ("ending", "bound"),
    [(("crash", {}), ()), (("allocate", {"mib": 400}), ("--process-memory", "200"))],
    ids=["a crash", "its memory bound"],
)
async def test_each_caller_gets_a_process_of_her_own_and_its_end_ends_her_conversations_alone(
    ending: tuple[str, dict[str, Any]], bound: tuple[str, ...]
) -> None:
    """76.4: ``--processes auto`` gave every caller of a 2026-07-28 server one shared process, so bob counted on from
    alice's count, and her call that ended it (a crash; 400 MiB past a bound of 200) was answered by a fresh process
    as if nothing had happened. Now each caller has a process of her own, counted once; its end ends her
    conversations ("Session not found", told once: her next session is served at once), not his; the lists the SDK's
    client sends, naming none, cost no process."""
    if bound and Bounds.found(1 << 30, None) is None:
        missing("this test needs a memory control group the gateway may create (v2 delegated, or v1 as root)")
    with verifying("--processes", "auto", *bound, process=False) as gateway:  # its answers and its log
        async with client_of(gateway, "alice") as alice, client_of(gateway, "bob") as bob:
            hers, his = await create_session(alice), await create_session(bob)
            counted = [await count(alice, hers), await count(alice, hers), await count(bob, his)]
            pids = [json.loads(text_of(await client.call_tool("whoami", {})))["pid"] for client in (alice, bob)]
            # Her process is hers to see, and counted against her limit: her own list shows it.
            async with httpx.AsyncClient(headers=bearer(gateway, "alice"), timeout=WITHIN) as http:
                listed = await http.get(gateway.url("/mcp/sessions"))
            with pytest.raises(MCPError) as ended_by:
                await alice.call_tool(*ending, meta=sdk_session_meta(hers))
            after = await ended(alice, hers)
            # told once: her next conversation is served at once (it was told "has ended ..., start a new one")
            renewed = await count(alice, await create_session(alice))
            his_after = await count(bob, his)
        logged = gateway.log().decode()

    assert counted == ["1", "2", "1"]
    assert [own["kind"] for own in listed.json()["conversations"]] == ["caller"], listed.text
    assert pids[0] != pids[1]
    assert ended_by.value.code == CHILD_EXITED
    assert "exited" in ended_by.value.message
    # The reason reaches the person who can act on it: the bound it reached, by name (issue 77, item 4).
    said = "exited (over its memory bound (--process-memory))" if bound else "exited (crash: "
    assert said in ended_by.value.message, ended_by.value.message
    assert after == SESSION_NOT_FOUND, after  # never a new process's "1"
    assert renewed == "1"
    assert his_after == "2"
    assert logged.count("serves the conversation") == 3, logged  # alice's, bob's, hers after: no list took one
    assert "the server speaks 2026-07-28: a process per caller" in logged, logged
    assert not bound or "over its memory bound (--process-memory)" in logged, logged


@pytest.fixture(scope="module")
def team() -> Iterator[tuple[Process, int]]:
    """A gateway whose users come by token or from a trusted auth proxy's header (``X-User``), at most one process
    each, its operator's view on a port of its own."""
    status_port = free_port()
    # A network of their own for the processes: a proxy trusted on loopback is not one they could be.
    proxied = ("--auth-principal-header", "X-User", "--forwarded-allow-ips", "127.0.0.1")
    contained = ("--process-containment", "bwrap", "--process-network", "none")
    limited = ("--max-processes-per-principal", "1", "--status-port", str(status_port))
    with verifying(*proxied, *contained, *limited) as gateway:
        assert isinstance(gateway, Process)
        yield gateway, status_port


def count_in(http: httpx.Client, url: str, session: str, headers: dict[str, str]) -> Any:
    body = modern_request("tools/call", {"name": "count", "arguments": {}}, session=session_meta(session))
    return result_of(http.post(url, json=body, headers=modern_headers(body, **headers)), 1)["result"]


def test_a_proxys_alice_and_a_tokens_alice_are_two_owners(team: tuple[Process, int]) -> None:
    """76.7: a user the proxy names "alice" listed and ended the conversations of the token's "alice": owners were
    compared by name. Now by who they are (how authenticated, and their id); the operator's view counts each, under
    the name they go by."""
    gateway, status_port = team
    url, by_token, by_proxy = gateway.url(), bearer(gateway, "alice"), {"X-User": "alice"}
    with httpx.Client(timeout=WITHIN) as http:
        for headers in (by_token, by_proxy):
            assert count_in(http, url, era_session(http, url, MODERN, **headers), headers)
        own = gateway.url("/mcp/sessions")
        tokens, proxys = (http.get(own, headers=headers).json()["conversations"] for headers in (by_token, by_proxy))
        ending = http.delete(f"{own}/{tokens[0]['conversation']}", headers=by_proxy)
        still = http.get(own, headers=by_token).json()["conversations"]
        status = http.get(f"http://127.0.0.1:{status_port}/status").json()

    assert len(tokens) == len(proxys) == 1
    assert tokens[0]["conversation"] != proxys[0]["conversation"]
    assert ending.status_code == 404
    assert [mine["conversation"] for mine in still] == [tokens[0]["conversation"]]
    assert [user for user in status["users"] if user["principal"] == "alice"] == [
        {"principal": "alice", "processes": 1, "limit": 1}
    ] * 2


def test_a_principal_in_the_log_is_escaped(team: tuple[Process, int]) -> None:
    """76.7: the line that says whose conversation was ended to make room wrote a token's ``sub`` as it came, so a
    ``sub`` could forge log lines and drive a terminal. Now it is escaped, as the operator's view shows it."""
    gateway, status_port = team
    forger = "mallory\x1b[2J\nINFO: forged line"
    with httpx.Client(timeout=WITHIN) as http:
        for _ in range(2):  # her first transport session's process is ended for the second's, logged
            headers = legacy_initialize(http, gateway.url(), bearer(gateway, forger))
            http.post(gateway.url(), json=legacy_request("tools/call", COUNT), headers=headers)
        users = http.get(f"http://127.0.0.1:{status_port}/status").json()["users"]
    logged = gateway.log().decode(errors="replace")

    assert "new conversation of mallory\\x1b[2J\\nINFO: forged line" in logged, logged
    assert "\x1b" not in logged
    assert "\nINFO: forged line" not in logged
    assert "mallory\\x1b[2J\\nINFO: forged line" in [user["principal"] for user in users]


def test_a_caller_at_her_limit_keeps_her_idle_conversation_when_the_create_limit_refuses_the_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """76.7: at ``--max-processes-per-principal``, her idle conversation was ended to make room, and the new one was
    then refused by ``MCP_SESSIONS_CREATE_LIMIT`` anyway: she lost it for nothing. Every refusal is checked first."""
    monkeypatch.setattr(_admission, "EVICT_AFTER", 0.0)  # idle at once: only the order of the checks matters
    config = SessionsConfig(secret=SECRET, create_limit=(1, 600))
    with stdio_gateway(SERVER, config, max_processes_per_principal=1) as url, httpx.Client(timeout=WITHIN) as http:
        kept = era_session(http, url, MODERN)  # the create limit's one operation
        first = count_in(http, url, kept, {})
        body = modern_request("tools/call", {"name": "count", "arguments": {}})  # names none: a process of its own
        refused = result_of(http.post(url, json=body, headers=modern_headers(body)), 1)["error"]
        body = modern_request("tools/call", {"name": "count", "arguments": {}}, session=session_meta(kept))
        again = result_of(http.post(url, json=body, headers=modern_headers(body)), 1)

    assert first["content"][0]["text"] == "1"
    assert refused["code"] == -32011, refused
    assert "MCP_SESSIONS_CREATE_LIMIT" in refused["message"], refused
    assert "result" in again, again
    assert again["result"]["content"][0]["text"] == "2", again


def test_a_host_conversations_first_request_spends_one_create_limit_operation() -> None:
    """76.7: a host's conversation spent two operations of ``MCP_SESSIONS_CREATE_LIMIT`` at its first request (its
    session's, its process's), so a limit of 2 let one conversation in. Now one each."""
    config = SessionsConfig(secret=SECRET, create_limit=(2, 600))
    with stdio_gateway(SERVER, config) as url, httpx.Client(timeout=WITHIN) as http:
        answers = []
        for conversation in ("chat-1", "chat-2", "chat-3"):
            body = modern_request("tools/call", COUNT, meta={"vscode.conversationId": conversation})
            answers.append(result_of(http.post(url, json=body, headers=modern_headers(body)), 1))

    assert [answer["result"]["content"][0]["text"] for answer in answers[:2]] == ["1", "1"], answers
    assert "error" in answers[2] or answers[2]["result"].get("isError"), answers[2]


def test_a_proxys_header_cannot_be_the_tokens_issuer() -> None:
    """76.7: the proxy's users are of the issuer its header names; a header named as the tokens' issuer (not a URL,
    which ``--auth-server`` allows) would make a proxy's "alice" and a token's one principal."""
    with pytest.raises(ValueError, match="--auth-principal-header and --auth-issuer must differ"):
        GatewayAuth(
            jwks_url="http://127.0.0.1:1/jwks",
            issuer="x-user",
            audience="https://gateway.example/mcp",
            principal_header="X-User",
            authorization_servers=["https://issuer.example"],
        )
