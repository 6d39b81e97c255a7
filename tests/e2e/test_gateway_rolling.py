"""A rolling restart of the replicas recipe (docs/gateway.md, "Past one machine"): its front and its two stdio
replicas on one Redis, the replicas as the recipe runs them, each stopped by SIGTERM and started again on its port,
one after the other, as docs/deployment.md's loop does, under a steady stream of 2026-07-28 and 2025-11-25
conversations whose calls are in flight (and a held one on each replica as it is signalled).

No call that started fails; a request refused is refused with a retryable answer (503 with ``Retry-After``), which
the client sends again; a conversation whose process ended with its replica is told so once (``-32043``; a 2025
transport session: 404, the spec's "initialize again") and goes on in a new one. Where the server keeps its state on
disk (``--conversation-state disk``), none is told anything: each goes on in a new process, on the other replica
while its own is down, and back on its own once it returns (a 2025 transport session too, opened again there).

And the front's side of a stop, made certain: a stopping server closes its idle kept-alive connections, and a request
the front sent on one as it closed it comes back with nothing; the front sends it once more on a connection of its
own. A stand-in upstream (``_hostile.raw_server``) closes a connection as the next request on it comes. And a request
the front sent on a new connection as the server stopped (accepted, not yet read, closed: a reset) was never read:
it goes to the other replica, or, with none, is refused retryably (``_hostile.resetting_server``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from _mcp import legacy_request, messages, modern_headers, modern_request
from _redis import RedisServer, free_port
from _waits import until_awaited
from conftest import in_process
from e2e._clients import CLIENTS, Conversations
from e2e._gateway import INITIALIZE, JSON_SSE, PYTHONPATH, SECRET, Process, readable_directory
from e2e._hostile import Request, raw_server, resetting_server
from mcp_sessions import SessionsConfig, gateway_app

pytestmark = pytest.mark.anyio

SERVER = f"{sys.executable} -m e2e._plain_stdio"
SESSION_NOT_FOUND = -32043
WORKERS = 2  # conversations at once, of each era
CALL = {"name": "sleep", "arguments": {"seconds": 0.2}}  # long enough to be in flight as a replica is signalled
# A conversation's pause between two calls, as a host's model takes between two tool calls (back to back, a
# conversation's next call is refused once the replica's signalled calls are answered: test_gateway_drain.py).
THINKING = 0.3


def replica_on(port: int, files: Path, store: str, state: str = "process") -> Process:
    """A replica as the recipe runs it (its flags, its environment), the tests' server its command, which writes
    ``held`` in ``files`` (granted to it, read-write), on ``port``; its server's conversations' state kept as
    ``state`` says (``--conversation-state``)."""
    environ = {
        "MCP_SESSIONS_SECRET": SECRET,
        "MCP_SESSIONS_CONVERSATION_DATA": "anonymous",
        "MCP_SESSIONS_REDIS_URL": store,
        "MCP_SESSIONS_REDIS_TIMEOUT": "2.0",  # a loaded two-core machine can hold a reply back past 0.5 s
        "PYTHONPATH": PYTHONPATH,
        "STDIO_TEST_FILES": str(files),
    }
    recipe = ["--processes", "per-conversation", "--forwarded-allow-ips", "127.0.0.1", "--process-network", "none"]
    tests = ["--process-mount", f"{files}:{files}:rw", "--pass-env", "PYTHONPATH", "--pass-env", "STDIO_TEST_FILES"]
    tests += ["--warm", "0", "--max-processes", "64", "--max-processes-per-principal", "64"]
    tests += ["--log-level", "info", "--shutdown-timeout", "60", "--conversation-state", state]
    gateway = [sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(port)]
    return Process(f"replica on {port}", [*gateway, "--stdio", SERVER, *recipe, *tests], environ, port)


def front_of(urls: list[str]) -> Process:
    """The recipe's front: a gateway with an ``--upstream`` for each replica; a replica it could not reach is tried
    again at its next request (``--failure-cooldown 0``), so that a returned one is back in service at once."""
    port = free_port()
    upstreams = [item for url in urls for item in ("--upstream", url)]
    command = [sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(port), *upstreams, "--log-level", "info"]
    command += ["--failure-cooldown", "0"]
    return Process("front", command, {"MCP_SESSIONS_SECRET": SECRET}, port)


@dataclass
class Tally:
    """What the conversations saw."""

    answered: int = 0
    told: int = 0  # conversations told once that their process ended, then opened again
    retried: int = 0  # requests refused with a retryable answer, and sent again
    failures: list[str] = field(default_factory=list)


async def sent(http: httpx.AsyncClient, url: str, body: Any, headers: dict[str, str], tally: Tally) -> httpx.Response:
    """``body`` posted, and posted again as a 503 with ``Retry-After`` asks (after what it says, as a client does)."""
    while True:
        response = await http.post(url, json=body, headers=headers)
        if response.status_code != 503 or "retry-after" not in response.headers:
            return response
        tally.retried += 1
        await anyio.sleep(float(response.headers["retry-after"]))


def outcome(response: httpx.Response) -> dict[str, Any]:
    """The answer's one message with an id, or what the response was instead."""
    try:
        return next(message for message in messages(response) if "id" in message)
    except (AssertionError, StopIteration, ValueError):
        return {"status": response.status_code, "text": response.text[:300]}


async def modern_conversations(http: httpx.AsyncClient, url: str, tally: Tally, stop: anyio.Event) -> None:
    """2026-07-28 conversations, one after the other: a session, then calls in it until it is told it ended."""
    while not stop.is_set():
        create = modern_request("sessions/create")
        created = outcome(await sent(http, url, create, modern_headers(create), tally))
        if "result" not in created:
            tally.failures.append(f"sessions/create: {created}")
            return
        session = {"sessionId": created["result"]["session"]["sessionId"]}
        calls = 0
        while not stop.is_set():
            body = modern_request("tools/call", CALL, id=calls + 1, session=session)
            response = await sent(http, url, body, modern_headers(body), tally)
            answer = outcome(response)
            if "result" in answer and answer["result"]["content"][0]["text"] == "slept":
                tally.answered, calls = tally.answered + 1, calls + 1
                await anyio.sleep(THINKING)
            elif calls and answer.get("error", {}).get("code") == SESSION_NOT_FOUND:
                tally.told += 1  # told once: the next call is a new conversation's
                break
            else:
                tally.failures.append(f"2026-07-28 call {calls + 1}: {response.status_code} {response.text[:300]!r}")
                return


async def legacy_conversations(http: httpx.AsyncClient, url: str, tally: Tally, stop: anyio.Event) -> None:
    """2025-11-25 transport sessions, one after the other: a handshake, then calls until its session is not found."""
    while not stop.is_set():
        initialize = legacy_request("initialize", INITIALIZE, id=0)
        opened = await sent(http, url, initialize, JSON_SSE, tally)
        if "result" not in outcome(opened) or "mcp-session-id" not in opened.headers:
            tally.failures.append(f"initialize: {outcome(opened)}")
            return
        headers = {**JSON_SSE, "MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        initialized = await sent(http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers, tally)
        if initialized.status_code != 202:
            tally.failures.append(f"notifications/initialized: {initialized.status_code} {initialized.text[:300]}")
            return
        calls = 0
        while not stop.is_set():
            body = legacy_request("tools/call", CALL, id=calls + 1)
            response = await sent(http, url, body, headers, tally)
            answer = outcome(response)
            if "result" in answer and answer["result"]["content"][0]["text"] == "slept":
                tally.answered, calls = tally.answered + 1, calls + 1
                await anyio.sleep(THINKING)
            elif calls and response.status_code == 404:
                tally.told += 1  # its replica stopped: a new transport session
                break
            else:
                tally.failures.append(f"2025-11-25 call {calls + 1}: {response.status_code} {response.text[:300]!r}")
                return


def placed_on(urls: list[str], n: int) -> str:
    """A host's conversation id the front's ranking (rendezvous, by the replicas' URLs) sends to replica ``n``."""
    from mcp_sessions import KeySet
    from mcp_sessions._gateway.http._replicas import Replicas

    ranking = Replicas(urls, keys=KeySet.from_secret(SECRET), cooldown=0)
    while ranking.for_conversation(conversation := os.urandom(8).hex())[0] is not ranking.all[n]:
        pass
    return conversation


async def held_call(http: httpx.AsyncClient, url: str, conversation: str, answers: list[str]) -> None:
    """A 2026-07-28 ``hold`` in a host's conversation (``baggage``), which answers once the test says ``go``."""
    body = modern_request("tools/call", {"name": "hold", "arguments": {}})
    headers = {**modern_headers(body), "baggage": f"gen_ai.conversation.id={conversation}"}
    answer = outcome(await http.post(url, json=body, headers=headers))
    answers.append(answer["result"]["content"][0]["text"] if "result" in answer else str(answer))


async def moved_call(http: httpx.AsyncClient, url: str, conversation: str) -> str:
    """A 2026-07-28 call in a host's conversation (``baggage``): its text, or what came instead."""
    body = modern_request("tools/call", CALL)
    headers = {**modern_headers(body), "baggage": f"gen_ai.conversation.id={conversation}"}
    answer = outcome(await http.post(url, json=body, headers=headers))
    return str(answer["result"]["content"][0]["text"]) if "result" in answer else str(answer)


async def drained(replica: Process, files: Path) -> str:
    """``replica`` stopped by SIGTERM once the held call has reached its process, and stopped as the signal says once
    that call is answered: what it logged."""
    await until_awaited(lambda: (files / "held").exists(), "the held call to reach its process")
    process = replica.process
    assert process is not None
    process.send_signal(signal.SIGTERM)
    await until_awaited(lambda: b"draining" in replica.log(), "the drain to begin")
    (files / "go").touch()
    await until_awaited(lambda: process.poll() is not None, "the drained replica to stop")
    assert process.returncode == -signal.SIGTERM
    (files / "held").unlink()
    (files / "go").unlink()  # the next replica's held call holds
    return replica.stop().decode(errors="replace")


async def every_client(conversations: Conversations, url: str, stop: anyio.Event) -> None:
    """A conversation of each of :data:`CLIENTS` through the front (the ``mcp`` SDK's clients of both eras, ``connect``,
    raw HTTP), each calling the server's counter in turn, a model's pause apart, until ``stop``."""
    with tempfile.TemporaryDirectory() as state:
        async with conversations.opened(url, Path(state)):
            while not stop.is_set():
                for kind in CLIENTS:
                    await conversations.call(kind, "count", {})
                await anyio.sleep(THINKING)


async def is_ready(http: httpx.AsyncClient, url: str) -> bool:
    return (await http.get(url)).status_code == 200


@pytest.mark.timeout(300)
@pytest.mark.parametrize("state", ["process", "disk"])
async def test_a_rolling_restart_of_two_replicas_loses_no_call(redis: RedisServer, state: str) -> None:
    """Issue 94, item 3; and issue 101, item 2: with the state on disk, no conversation is told its process ended."""
    tally, stop, held, said, moved = Tally(), anyio.Event(), list[str](), list[str](), list[str]()
    clients = Conversations()  # with the state on disk: every kind of client, connect's included, told nothing
    with readable_directory("mcp-sessions-rolling-") as files:
        replicas = [replica_on(free_port(), files, redis.url, state) for _ in range(2)]
        urls = [replica.url() for replica in replicas]
        front = front_of(urls)
        try:
            async with httpx.AsyncClient(timeout=120) as http, anyio.create_task_group() as tasks:
                for _ in range(WORKERS):
                    tasks.start_soon(modern_conversations, http, front.url(), tally, stop)
                    tasks.start_soon(legacy_conversations, http, front.url(), tally, stop)
                if state == "disk":
                    tasks.start_soon(every_client, clients, front.url(), stop)
                await until_awaited(lambda: tally.answered >= 10 or tally.failures, "the conversations' calls")
                for n, replica in enumerate(replicas):
                    tasks.start_soon(held_call, http, front.url(), placed_on(urls, n), held)
                    said.append(await drained(replica, files))
                    # opened while its replica is down: on the other one, where it stays once its own returns
                    opened_meanwhile = placed_on(urls, n)
                    moved.append(await moved_call(http, front.url(), opened_meanwhile))
                    replicas[n] = await anyio.to_thread.run_sync(replica_on, replica.port, files, redis.url, state)
                    ready = replicas[n].url("/readyz")
                    await until_awaited(partial(is_ready, http, ready), "the new replica to be ready")
                    moved.append(await moved_call(http, front.url(), opened_meanwhile))
                served = tally.answered
                await until_awaited(lambda: tally.answered >= served + 10 or tally.failures, "calls after the restarts")
                stop.set()
        finally:
            for process in (front, *replicas):
                said.append(process.stop().decode(errors="replace"))
    assert tally.failures == [], (tally, said)
    assert held == ["held", "held"], held
    assert moved == ["slept"] * 4, moved  # no second wave: it was never told anything
    in_flight = re.findall(r"draining: .*; (\d+) call\(s\) in flight may end", "".join(said[:2]))
    assert len(in_flight) == 2, said[:2]
    assert all(int(count) > 0 for count in in_flight), said[:2]  # each with calls in flight
    if state == "process":
        assert tally.told > 0, tally  # the stopped replicas' conversations, opened again
    else:
        assert tally.told == 0, tally  # each went on: none was told its process ended
        assert clients.errors == [], (clients.errors, said)
        assert clients.answered >= 2 * len(CLIENTS), clients.answered
    assert "Traceback" not in "".join(said), said


DROPPED = 13
"""The id of a request the stand-in reads and drops, as a server that fails while it answers."""


async def closes_when_reused(request: Request, writer: asyncio.StreamWriter) -> None:
    """The stand-in's answer (its result: the id), the connection kept alive; closed as the next request on it comes,
    as a stopping server closes an idle connection (uvicorn, Node). The request it drops (:data:`DROPPED`): none."""
    request_id = request.message["id"]
    if request_id == DROPPED:
        return None
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"id": request_id}}).encode()
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    writer.write(body)
    await writer.drain()
    assert request.reader is not None
    await request.reader.read(1)  # the next request's first byte: the connection closed with the rest unread


def test_a_request_on_a_kept_alive_connection_the_upstream_closed_unanswered_is_sent_again() -> None:
    """A request that went on a kept-alive connection the upstream closed before a byte of its answer is sent once
    more, on a connection of its own, and answered; one on a connection of its own that the upstream closed
    unanswered is not (the upstream may have run it): 502, the upstream asked once."""
    with raw_server(closes_when_reused) as upstream:
        app = gateway_app([upstream.url + "/mcp"], config=SessionsConfig(secret=SECRET))
        with in_process(app) as http:
            answers = [http.post("/mcp", json=legacy_request("ping", id=n), headers=JSON_SSE) for n in (1, 2)]
            assert [answer.json()["result"] for answer in answers] == [{"id": 1}, {"id": 2}]
            asked = [request.message["id"] for request in upstream.received]
            assert asked == [1, 2], asked  # the second's first sending, dropped unread, is not a request read
            dropped = http.post("/mcp", json=legacy_request("ping", id=DROPPED), headers=JSON_SSE)
            assert dropped.status_code == 502, dropped.text
            asked = [request.message["id"] for request in upstream.received]
            assert asked == [1, 2, DROPPED], asked


def test_a_request_a_stopping_replica_reset_unread_goes_to_the_other_one() -> None:
    """A request on a connection of its own that the replica reset before a byte of its answer (closed with the
    request unread, as a stopping server closes a connection it accepted but has not read from) was never run: it goes
    to the other replica, which answers it; with no other, it is refused for now (503, ``Retry-After``, ``-32014``),
    which a client sends again. Not 502, "may have run": the load-dependent flake of the rolling restart above."""
    with resetting_server() as stopping, raw_server(closes_when_reused) as other:
        urls = [stopping.url + "/mcp", other.url + "/mcp"]
        app = gateway_app(urls, config=SessionsConfig(secret=SECRET))
        with in_process(app) as http:
            baggage = f"gen_ai.conversation.id={placed_on(urls, 0)}"
            answer = http.post("/mcp", json=legacy_request("ping", id=1), headers={**JSON_SSE, "baggage": baggage})
            assert answer.status_code == 200, answer.text
            assert answer.json()["result"] == {"id": 1}
            assert stopping.resets == 1  # its own replica first
        with in_process(gateway_app(urls[:1], config=SessionsConfig(secret=SECRET))) as http:
            refused = http.post("/mcp", json=legacy_request("ping", id=2), headers=JSON_SSE)
            assert refused.status_code == 503, refused.text
            assert "retry-after" in refused.headers
            assert refused.json()["error"]["code"] == -32014, refused.text
            assert refused.json()["id"] == 2
            assert stopping.resets == 2  # asked once
