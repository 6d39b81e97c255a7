"""``mcp-sessions gateway`` in front of a server in another language: ``@modelcontextprotocol/server-everything``.

The TypeScript reference server (streamable HTTP, 2025-11-25 only, a transport session per client)
runs from npm under node; the gateway runs as the command a user types, configured by
``MCP_SESSIONS_*``; the clients are raw HTTP, the TypeScript SDK's own client (node) and the ``mcp``
SDK's client with this project's session transport. Nothing is imitated: every answer that is not
a session's comes from server-everything.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from _mcp import LEGACY, era_session, legacy_request
from _waits import WITHIN, Deadline
from e2e._gateway import (
    INITIALIZE,
    JSON_SSE,
    MAIN,
    everything_server,
    gateway_in_process,
    legacy_initialize,
    result_of,
    run_recipe,
)
from mcp_sessions.client import SessionTransport

SESSION_META = "io.modelcontextprotocol/session"
MODERN = "2026-07-28"
KEEPALIVE = 0.3


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with everything_server() as url:
        yield url


@pytest.fixture(scope="module")
def gateway(upstream: str) -> Iterator[str]:
    # in process, served in a thread as the command serves it: what these tests ask is the app's answers
    with gateway_in_process([upstream], "--keepalive", str(KEEPALIVE)) as gateway:
        yield gateway.url()


def echo(message: str, session: str | None, request_id: int = 2) -> dict[str, Any]:
    named = None if session is None else {"sessionId": session}
    return legacy_request(
        "tools/call", {"name": "echo", "arguments": {"message": message}}, id=request_id, session=named
    )


def test_a_stock_2025_client_gets_sessions_in_front_of_server_everything(gateway: str, http: httpx.Client) -> None:
    headers = legacy_initialize(http, gateway)
    assert headers["Mcp-Session-Id"].count("~") == 2  # the replica's tag, server-everything's own id, the MAC
    token = era_session(http, gateway, LEGACY, **headers)

    answered = http.post(gateway, json=echo("hi", token), headers=headers)
    result = result_of(answered, 2)["result"]
    assert result["content"][0]["text"] == "Echo: hi"  # server-everything's own answer
    assert result["_meta"][SESSION_META]["sessionId"] == token  # the echo, spliced into its SSE event

    forged = http.post(gateway, json=echo("hi", token[:-4] + "AAAA", 3), headers=headers)
    assert result_of(forged, 3)["error"]["code"] == -32043
    without = result_of(http.post(gateway, json=echo("plain", None, 4), headers=headers), 4)
    assert without["result"]["content"][0]["text"] == "Echo: plain"
    assert SESSION_META not in without["result"].get("_meta", {})


def test_the_initialize_result_advertises_sessions(gateway: str, http: httpx.Client) -> None:
    body = legacy_request("initialize", INITIALIZE, id=0)
    capabilities = result_of(http.post(gateway, json=body, headers=JSON_SSE), 0)["result"]["capabilities"]
    assert capabilities["sessions"] == {}
    assert capabilities["experimental"]["sessions"] == {}
    assert capabilities["tools"] == {"listChanged": True}  # server-everything's own, kept


@pytest.mark.parametrize(
    ("version", "in_transport_session", "message"),
    [
        ("2025-11-25", False, "Bad Request: Server not initialized"),  # every method but initialize is refused
        (MODERN, False, "Bad Request: Server not initialized"),  # a 2026-07-28 client sends no initialize
        (MODERN, True, "Bad Request: Unsupported protocol version: 2026-07-28"),  # (docs/gateway.md says both)
    ],
)
def test_no_session_is_handed_out_where_the_upstream_refuses_its_own_methods(
    gateway: str, http: httpx.Client, version: str, in_transport_session: bool, message: str
) -> None:
    """server-everything speaks 2025-11-25 only, in a transport session: sessions/create gets its refusal."""
    headers = legacy_initialize(http, gateway) if in_transport_session else JSON_SSE
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    params = {"_meta": meta} if version == MODERN else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "sessions/create", "params": params}
    modern = {**headers, "MCP-Protocol-Version": version, "Mcp-Method": "sessions/create"}
    refused = http.post(gateway, json=body, headers=modern)
    listed = http.post(gateway, json={**body, "method": "tools/list"}, headers={**modern, "Mcp-Method": "tools/list"})
    assert refused.status_code == listed.status_code == 400
    assert refused.json() == listed.json()  # server-everything's own words, for its own method as for ours
    assert refused.json()["error"]["code"] == -32000
    assert refused.json()["error"]["message"].startswith(message)
    assert message in " ".join((MAIN / "docs/gateway.md").read_text(encoding="utf-8").split())


def test_a_foreign_host_is_refused_for_every_request_alike(gateway: str, http: httpx.Client) -> None:
    headers = legacy_initialize(http, gateway)
    foreign = {**headers, "Host": "evil.example:80"}
    for body in ({"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}, echo("x", None)):
        refused = http.post(gateway, json=body, headers=foreign)
        assert (refused.status_code, refused.text) == (421, "Invalid Host header")
    assert http.get(gateway, headers={**foreign, "Accept": "text/event-stream"}).status_code == 421


def test_a_transport_session_the_upstream_ended_is_gone(gateway: str, http: httpx.Client) -> None:
    """Ids the gateway did not sign: test_gateway_affinity.py."""
    headers = legacy_initialize(http, gateway)
    ended = http.delete(gateway, headers=headers)
    assert ended.status_code == 200
    after = http.post(gateway, json=echo("x", None), headers=headers)
    assert after.status_code == 400  # server-everything's own answer for a session it ended, as it sent it
    assert "No valid session ID" in after.text


def test_an_idle_event_stream_gets_keepalive_comments(gateway: str, http: httpx.Client) -> None:
    headers = legacy_initialize(http, gateway)
    received = b""
    deadline = Deadline("the idle stream did not get two keep-alive comments")
    with http.stream("GET", gateway, headers={**headers, "Accept": "text/event-stream"}) as stream:
        assert stream.status_code == 200
        for chunk in stream.iter_raw():
            received += chunk
            if received.count(b": keep-alive\n\n") >= 2:
                break
            deadline.check()
    assert received.count(b": keep-alive\n\n") >= 2, received


def test_the_typescript_sdk_client_gets_a_session(gateway: str) -> None:
    """The recipe of docs/gateway.md, run as written."""
    assert run_recipe(gateway, timeout=30)["transport"].count("~") == 2


def test_the_mcp_sdk_client_with_the_session_transport(gateway: str) -> None:
    async def run() -> tuple[str, str | None]:
        shim = SessionTransport(delete_on_close=True)
        async with (
            httpx2.AsyncClient(transport=shim, timeout=WITHIN) as http,
            Client(streamable_http_client(gateway, http_client=http), mode="legacy") as client,
        ):
            result = await client.call_tool("echo", {"message": "through"})
            text = result.content[0].text  # type: ignore[union-attr]
            return text, shim.session.id

    text, session_id = anyio.run(run)
    assert text == "Echo: through"
    assert session_id  # created by the transport at the gateway, echoed by it on server-everything's result
