"""Affinity: three upstream replicas behind two gateways that never talk to each other.

Every request of a conversation (a data-layer session, a host's conversation id, a 2025-era
transport session) reaches the same replica, whichever gateway it goes through; a replica that
fails is taken out, its data-layer conversations move, and its transport sessions answer 404, as
the spec says of a transport session the server lost. Real uvicorn servers on 127.0.0.1: the
replicas are stateful ``MCPServer`` apps whose ``seen`` tool names the replica that answered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from _mcp import MODERN, legacy_request
from conftest import serve
from e2e._gateway import SECRET, created, legacy_initialize, replica_of, upstream_server
from e2e._gateway import seen_legacy as seen
from mcp_sessions import SessionsConfig, gateway_app
from mcp_sessions.stores import MemoryStore

SESSION_META = "io.modelcontextprotocol/session"
REPLICAS = ("r0", "r1", "r2")


class Deployment:
    """Three replicas, two gateways in front of all three (the same secret and store, nothing else shared)."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.stacks = {name: stack.enter_context(contextlib.ExitStack()) for name in REPLICAS}
        self.upstreams = {
            name: replica.enter_context(serve(upstream_server(name).streamable_http_app())) + "/mcp"
            for name, replica in self.stacks.items()
        }
        urls, store = list(self.upstreams.values()), MemoryStore()
        self.gateways = [
            stack.enter_context(serve(gateway_app(urls, config=SessionsConfig(secret=SECRET, store=store)))) + "/mcp"
            for _ in range(2)
        ]

    def stop(self, name: str) -> None:
        self.stacks[name].close()


@contextlib.contextmanager
def deployment() -> Iterator[Deployment]:
    with contextlib.ExitStack() as stack:
        yield Deployment(stack)


@pytest.fixture(scope="module")
def deployed() -> Iterator[Deployment]:
    with deployment() as running:
        yield running


def in_session(token: str) -> dict[str, Any]:
    return {SESSION_META: {"sessionId": token}}


@pytest.mark.parametrize(
    "conversation",
    [lambda http, url, n: in_session(created(http, url)), lambda http, url, n: {"vscode.conversationId": f"conv-{n}"}],
    ids=["session", "hosts-conversation"],
)
def test_a_conversation_reaches_one_replica_through_either_gateway(
    deployed: Deployment, http: httpx.Client, conversation: Any
) -> None:
    a, b = deployed.gateways
    for number in range(1, 4):
        meta = conversation(http, a, number)
        assert len({replica_of(http, gateway, meta) for gateway in (a, b, a, b)}) == 1


def test_conversations_spread_over_the_replicas(deployed: Deployment, http: httpx.Client) -> None:
    a, b = deployed.gateways
    chosen = set()
    # Rendezvous hashing on seeds from the replicas' URLs (ephemeral ports): a fixed 24 conversations missed a
    # replica in 2 runs of 10,000, so they are drawn until each replica has one (60 miss one in 10^10 runs).
    for number in range(60):
        meta = {"vscode.conversationId": f"spread-{number}"}
        here, there = replica_of(http, a, meta), replica_of(http, b, meta)
        assert here == there
        chosen.add(here)
        if chosen == set(REPLICAS):
            break
    assert chosen == set(REPLICAS)


def test_a_transport_session_stays_with_the_replica_that_issued_it(deployed: Deployment, http: httpx.Client) -> None:
    a, b = deployed.gateways
    for _ in range(3):
        headers = legacy_initialize(http, a)  # a new transport session: the least loaded replica
        assert len({seen(http, gateway, headers)["replica"] for gateway in (b, a, b)}) == 1


def test_a_replica_that_fails_is_taken_out_and_its_conversations_told_so(http: httpx.Client) -> None:
    with deployment() as running:
        a, b = running.gateways
        token = next(t for t in (created(http, a) for _ in range(40)) if replica_of(http, a, in_session(t)) == "r0")
        transport = next(
            h for h in (legacy_initialize(http, a) for _ in range(40)) if seen(http, a, h)["replica"] == "r0"
        )
        running.stop("r0")
        moved = {replica_of(http, gateway, in_session(token)) for gateway in (a, b, a)}
        assert len(moved) == 1
        assert moved != {"r0"}  # the data-layer session carries on, on one other replica
        call = legacy_request("tools/call", {"name": "seen", "arguments": {}}, id=3)
        for gateway in (a, b):
            lost = http.post(gateway, json=call, headers=transport)
            assert lost.status_code == 404
            assert lost.json()["error"]["message"] == "Session not found"
        assert seen(http, b, legacy_initialize(http, b))["replica"] in ("r1", "r2")  # a new one, elsewhere
        for number in range(6):  # no request fails: a replica that cannot be connected to is skipped
            assert replica_of(http, a, {"vscode.conversationId": f"after-{number}"}) in ("r1", "r2")


class Draining:
    """A replica whose gateway drains: every request refused for now, 503 with ``Retry-After`` and ``-32014``."""

    def __init__(self) -> None:
        self.refused = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.refused += 1
        body = b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32014, "message": "The gateway is restarting"}}'
        headers = [(b"content-type", b"application/json"), (b"retry-after", b"1")]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def test_a_replica_that_drains_sends_its_new_conversations_to_the_next(http: httpx.Client) -> None:
    """Issue 94, item 2: a replica that drains (its gateway stopping) refuses a new conversation with 503 and
    ``Retry-After``; the front sends that request to the next replica, as one it could not connect to, and the
    client never sees the refusal. Each conversation is drawn anew until one ranked the draining replica first."""
    draining = Draining()
    with serve(draining) as refusing, serve(upstream_server("r1").streamable_http_app()) as serving:
        urls = [refusing + "/mcp", serving + "/mcp"]
        with serve(gateway_app(urls, config=SessionsConfig(secret=SECRET, store=MemoryStore()))) as front:
            for number in range(60):  # as above: 60 miss it in 10^18 runs
                assert replica_of(http, front + "/mcp", {"vscode.conversationId": f"drained-{number}"}) == "r1"
                if draining.refused:
                    break
    assert draining.refused == 1


def test_the_modern_era_is_what_these_tests_speak() -> None:
    assert MODERN == "2026-07-28"
