"""Affinity by transport session id: only ids the gateway signed are routed, and a reconnect finds its conversation.

Two stateful ``MCPServer`` replicas behind two gateways with the same keys, and one gateway with other keys.
Each replica records the ``Mcp-Session-Id`` of every request it gets: an id the gateway did not sign (forged
on a replica's public tag, altered, cut, extended, another deployment's) answers the SDK's 404 "Session not
found" and reaches no replica; a genuine one reaches the replica that issued it, with that replica's own id,
through either gateway. A 2025-era client that names its conversation (a data-layer session, a host's
conversation id) in a new ``initialize`` opens its new transport session on the conversation's replica.
Real uvicorn servers on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest

from _mcp import legacy_request
from conftest import serve
from e2e._gateway import SECRET, Recorder, created, legacy_initialize, replica_of, upstream_server
from e2e._gateway import seen_legacy as seen
from mcp_sessions import SessionsConfig, gateway_app
from mcp_sessions.stores import MemoryStore

OTHER_SECRET = "another-deployment-secret-another-deployment-0"
SESSION_META = "io.modelcontextprotocol/session"
REPLICAS = ("r0", "r1")


class Deployment:
    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.recorded = {name: Recorder(upstream_server(name).streamable_http_app()) for name in REPLICAS}
        self.upstreams = {name: stack.enter_context(serve(app)) + "/mcp" for name, app in self.recorded.items()}
        urls, store = list(self.upstreams.values()), MemoryStore()
        self.gateways = [
            stack.enter_context(serve(gateway_app(urls, config=SessionsConfig(secret=SECRET, store=store)))) + "/mcp"
            for _ in range(2)
        ]
        other = gateway_app(urls, config=SessionsConfig(secret=OTHER_SECRET, store=MemoryStore()))
        self.other = stack.enter_context(serve(other)) + "/mcp"

    def tag(self, name: str) -> str:
        """A replica's public tag: eight hex digits of the SHA-256 of its URL, as anyone may compute it."""
        return hashlib.sha256(self.upstreams[name].encode()).hexdigest()[:8]

    def received(self) -> list[str | None]:
        """The ``Mcp-Session-Id`` of every request a replica got (``None``: none)."""
        return [seen.header("mcp-session-id") for recorded in self.recorded.values() for seen in recorded.seen]


@pytest.fixture(scope="module")
def deployed() -> Iterator[Deployment]:
    with contextlib.ExitStack() as stack:
        yield Deployment(stack)


def assert_lost(deployed: Deployment, http: httpx.Client, url: str, headers: Mapping[str, str]) -> None:
    """Every request with the id answers 404 "Session not found", and no replica gets any request for it."""
    before = len(deployed.received())
    call = legacy_request("tools/call", {"name": "seen", "arguments": {}}, id=3)
    for response in (
        http.post(url, json=call, headers=headers),
        http.get(url, headers={**headers, "Accept": "text/event-stream"}),
        http.delete(url, headers=headers),
    ):
        assert response.status_code == 404, response.text
        assert response.json()["error"]["message"] == "Session not found"
    assert len(deployed.received()) == before


def with_id(headers: Mapping[str, str], session_id: str) -> dict[str, str]:
    return {**headers, "Mcp-Session-Id": session_id}


def test_a_genuine_id_reaches_its_replica_through_either_gateway_with_the_replicas_own_id(
    deployed: Deployment, http: httpx.Client
) -> None:
    a, b = deployed.gateways
    for _ in range(4):
        headers = legacy_initialize(http, a)
        tag, upstream_id, mac = headers["Mcp-Session-Id"].split("~")
        assert len(mac) == 22
        assert "." not in headers["Mcp-Session-Id"]
        answers = [seen(http, gateway, headers) for gateway in (a, b, a, b)]
        assert {answer["replica"] for answer in answers} == {next(n for n in REPLICAS if deployed.tag(n) == tag)}
        assert {answer["headers"]["mcp-session-id"] for answer in answers} == {upstream_id}


def test_a_forged_id_on_a_replicas_public_tag_is_lost_and_never_forwarded(
    deployed: Deployment, http: httpx.Client
) -> None:
    a, _ = deployed.gateways
    headers = legacy_initialize(http, a)
    genuine_upstream_id = headers["Mcp-Session-Id"].split("~")[1]
    for name in REPLICAS:
        tag = deployed.tag(name)
        for forged in (f"{tag}~anything", f"{tag}~{genuine_upstream_id}", f"{tag}~anything~{'A' * 22}", f"{tag}~"):
            assert_lost(deployed, http, a, with_id(headers, forged))
    assert not {"anything", f"{deployed.tag('r0')}~anything"} & set(deployed.received())


def test_an_altered_cut_or_extended_id_is_lost_and_never_forwarded(deployed: Deployment, http: httpx.Client) -> None:
    a, b = deployed.gateways
    headers = legacy_initialize(http, a)
    genuine = headers["Mcp-Session-Id"]
    tag, upstream_id, mac = genuine.split("~")
    other_tag = next(deployed.tag(name) for name in REPLICAS if deployed.tag(name) != tag)
    flipped = "B" if mac[0] != "B" else "C"
    for altered in (
        f"{other_tag}~{upstream_id}~{mac}",  # pointed at the other replica
        f"{tag}~{upstream_id[:-1]}0~{mac}" if upstream_id[-1] != "0" else f"{tag}~{upstream_id[:-1]}1~{mac}",
        f"{tag}~{upstream_id}~{flipped}{mac[1:]}",
        genuine[:-1],  # cut
        genuine[: -len(mac) - 1],  # the MAC left out
        genuine + "A",  # extended
        upstream_id,  # the replica's own id, bare
        f"0123abcd~{upstream_id}~{mac}",  # a tag of no replica here
        "x" * 300,  # over the bound
    ):
        for gateway in (a, b):
            assert_lost(deployed, http, gateway, with_id(headers, altered))
    assert seen(http, b, headers)["headers"]["mcp-session-id"] == upstream_id  # the genuine one still works


def test_another_deployments_gateway_accepts_none_of_these_ids(deployed: Deployment, http: httpx.Client) -> None:
    a, _ = deployed.gateways
    headers = legacy_initialize(http, a)
    assert_lost(deployed, http, deployed.other, headers)
    assert seen(http, a, headers)["replica"] in REPLICAS


def test_no_transport_session_id_reaches_the_gateways_logs(
    deployed: Deployment, http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    a, b = deployed.gateways
    headers = legacy_initialize(http, a)
    seen(http, b, headers)
    assert_lost(deployed, http, a, with_id(headers, headers["Mcp-Session-Id"] + "A"))
    gateway_lines = [r.getMessage() for r in caplog.records if r.name.startswith(("mcp_sessions", "httpx"))]
    for part in (headers["Mcp-Session-Id"], *headers["Mcp-Session-Id"].split("~")[1:]):
        assert not any(part in line for line in gateway_lines)


@pytest.mark.parametrize(
    "conversation",
    [
        lambda http, url: {SESSION_META: {"sessionId": created(http, url)}},
        lambda http, url: {"vscode.conversationId": "c-7"},
    ],
    ids=["data-layer-session", "host-conversation"],
)
def test_a_reconnect_that_names_its_conversation_opens_its_transport_session_on_the_conversations_replica(
    deployed: Deployment, http: httpx.Client, conversation: Any
) -> None:
    a, b = deployed.gateways
    meta = conversation(http, a)
    home = replica_of(http, a, meta)
    for gateway in (a, b, a, b, a, b):  # each: a new handshake, as a client that reconnects
        headers = legacy_initialize(http, gateway, meta=meta)
        assert seen(http, gateway, headers, meta)["replica"] == home


def test_a_transport_session_keeps_its_replica_whatever_conversation_its_requests_name(
    deployed: Deployment, http: httpx.Client
) -> None:
    a, _ = deployed.gateways
    meta = {SESSION_META: {"sessionId": created(http, a)}}
    home = replica_of(http, a, meta)
    # A handshake that names no conversation goes to the least loaded replica: one of them is not home.
    elsewhere = next(h for h in (legacy_initialize(http, a) for _ in range(40)) if seen(http, a, h)["replica"] != home)
    assert {seen(http, a, elsewhere, meta)["replica"] for _ in range(3)} != {home}
