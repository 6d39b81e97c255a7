"""``mcp-sessions gateway --stdio`` under attack: a real gateway process in front of hostile stdio servers.

Each section is one kind of hostile peer; each test is one finding of issue 57 (its number in the test's name or
docstring), and fails without its fix.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from _mcp import messages, modern_headers, modern_request, session_meta
from _waits import WITHIN, until
from e2e._gateway import Process, created, gateway_process, legacy_initialize, result_of, rss_kib
from e2e._stdio import SERVER_PATH
from mcp_sessions.profiles import PROFILES, SESSION_META_KEY, SessionCarrier

pytestmark = pytest.mark.anyio


def wait_for_output(process: Process, text: str) -> None:
    """Until the gateway's log has ``text`` (bounded)."""
    until(lambda: text in process.output(), process.output)


def call(
    http: httpx.Client, url: str, tool: str, session: str | None = None, meta: dict[str, Any] | None = None, **more: Any
) -> dict[str, Any]:
    """A 2026-07-28 ``tools/call`` of the hostile server's ``tool``, ``more`` in its params: its JSON-RPC answer."""
    named = None if session is None else session_meta(session)
    body = modern_request("tools/call", {"name": tool, "arguments": {}, **more}, id=5, session=named, meta=meta)
    response = http.post(url, json=body, headers=modern_headers(body), timeout=WITHIN)
    assert response.status_code == 200, response.text
    return result_of(response, 5)


# -- issue 57.5, 57.7-57.11, 57.13: what a hostile server (_hostile_stdio.py) writes, and ids that read alike ------


WIRES = list(PROFILES)  # every built-in wire (the draft alone since the strawman and SEP-1364 went)


@pytest.fixture(scope="module")
def hostile() -> Iterator[Process]:
    """The gateway in front of ``_hostile_stdio``, every session wire on, an ``MCP_SESSION_ID`` of its own; a request
    that names no conversation reaches the shared process."""
    server = f"{sys.executable} -m e2e._hostile_stdio"
    environ = {**SERVER_PATH, "MCP_SESSIONS_PROFILES": ",".join(WIRES), "MCP_SESSION_ID": "the-gateways-own"}
    limits = ("--max-processes", "64", "--max-processes-per-principal", "64")  # the module's tests share it
    with gateway_process(
        [], "--stdio", server, *limits, "--sessionless", "shared", "--log-level", "info", environ=environ
    ) as process:
        yield process


@pytest.fixture
def url(hostile: Process) -> str:
    return f"http://127.0.0.1:{hostile.port}/mcp"


@pytest.mark.parametrize("wire", WIRES)
def test_no_wires_session_member_reaches_the_process(url: str, wire: str) -> None:
    """57.7: a request naming its session on any enabled wire reaches the process without that member."""
    with httpx.Client() as http:
        token = created(http, url)
        member = PROFILES[wire].carrier
        assert isinstance(member, SessionCarrier)
        named = {member.meta_key: {member.id_member: token}}
        seen = json.loads(call(http, url, "seen", meta=named)["result"]["content"][0]["text"])

    assert member.meta_key not in seen["meta"], seen
    assert seen["session"] not in (None, "the-gateways-own")  # it reached its conversation's process, its own id


def test_the_shared_process_has_no_mcp_session_id(url: str, http: httpx.Client) -> None:
    """57.11: the gateway's own ``MCP_SESSION_ID`` is not passed on: the shared process has none."""
    seen = json.loads(call(http, url, "seen")["result"]["content"][0]["text"])
    assert seen["session"] is None


def test_a_process_cannot_forge_the_session_echo(url: str, http: httpx.Client) -> None:
    """57.10: a process's ``io.modelcontextprotocol/*`` keys in its result's ``_meta`` never reach a client."""
    meta = call(http, url, "forge")["result"]["_meta"]
    assert "io.modelcontextprotocol/session" not in meta
    assert meta["mine"] == 1


def test_a_processs_own_input_required_is_no_round_of_the_gateways(url: str) -> None:
    """57.8: a result of the process's in the gateway's round members is its answer, complete; none is parked (more
    than the conversation's 16 parked calls go by)."""
    with httpx.Client() as http:
        token = created(http, url)
        answers = [call(http, url, "rounds", token)["result"] for _ in range(17)]

    for answer in answers:
        assert answer["resultType"] == "complete"
        assert answer["content"][0]["text"] == "mine"
        assert "inputRequests" not in answer
        assert "requestState" not in answer


def test_what_a_process_asks_just_before_its_answer_reaches_the_client_first(hostile: Process, url: str) -> None:
    """A process that asks its client and answers the call in one write, not waiting (server-filesystem asks its roots
    so): a 2026-07-28 client is asked first, and its answer reaches the process; the answer used to end the call
    first, and the process got "the client gave no answer"."""
    with httpx.Client() as http:
        token = created(http, url)  # its process outlives the call: it has the time to say what it got
        asked = call(http, url, "ask_then_answer", token)["result"]
        [(key, question)] = asked["inputRequests"].items()
        accept = {key: {"action": "accept", "content": {}}}
        answered = call(http, url, "ask_then_answer", token, requestState=asked["requestState"], inputResponses=accept)
    wait_for_output(hostile, 'q got {"action": "accept"')

    assert asked["resultType"] == "input_required"
    assert question["method"] == "elicitation/create"
    assert answered["result"]["content"][0]["text"] == "soon"


def test_a_notification_method_is_escaped_in_the_log(hostile: Process, url: str) -> None:
    """57.9: the method of a notification that is not MCP's reaches the log escaped: no forged line, no ESC."""
    with httpx.Client() as http:
        token = created(http, url)
        assert call(http, url, "inject", token)["result"]["content"][0]["text"] == "injected"
    wait_for_output(hostile, "not MCP's")

    log = hostile.output()
    assert "\x1b" not in log
    assert "\nCRITICAL:root:forged" not in log
    assert "evil\\nCRITICAL:root:forged \\x1b[31mred" in log


async def test_a_flood_of_notifications_to_a_client_that_reads_nothing_is_bounded(hostile: Process, url: str) -> None:
    """57.5: 20,000 log notifications of 1 KiB into a call whose client reads nothing: the gateway's memory stays
    bounded (what the client cannot take is dropped, and counted in one log line), and the answer still comes."""
    assert hostile.process is not None
    pid = hostile.process.pid
    async with httpx.AsyncClient(timeout=WITHIN) as http:
        body = modern_request("sessions/create")
        response = await http.post(url, json=body, headers=modern_headers(body))
        token = result_of(response, 1)["result"]["session"]["sessionId"]
        params = {"name": "flood", "arguments": {"count": 20_000}}
        body = modern_request("tools/call", params, id=9, session=session_meta(token))
        before = rss_kib(pid)
        async with http.stream("POST", url, json=body, headers=modern_headers(body)) as response:
            await anyio.to_thread.run_sync(wait_for_output, hostile, "flooded")  # all written: none read yet
            grown = rss_kib(pid) - before
            text = (await response.aread()).decode()
    received = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]

    assert grown < 64 * 1024, f"the gateway grew {grown // 1024} MiB"  # unbounded, it grew ~249 MiB
    wait_for_output(hostile, "notifications dropped")
    assert received[-1]["id"] == 9
    assert received[-1]["result"]["content"][0]["text"] == "flooded"  # never dropped
    assert len(received) < 20_000
    assert hostile.output().count("notifications dropped") == 1


async def test_ids_7_and_quoted_7_in_one_transport_session_neither_cross_nor_hang(hostile: Process, url: str) -> None:
    """57.13: the ``mcp`` SDK's transport keys a transport session's requests in flight by ``str(id)``; the second
    of ``7`` and ``"7"`` gets a JSON-RPC error while the first is in flight, and the first its own answer."""
    with httpx.Client(timeout=WITHIN) as handshake:
        headers = legacy_initialize(handshake, url)

    def slow(request_id: int | str, tag: str, seconds: float) -> dict[str, Any]:
        params = {"name": "slow", "arguments": {"tag": tag, "seconds": seconds}}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    answers: dict[str, list[dict[str, Any]]] = {}

    async def post(http: httpx.AsyncClient, body: dict[str, Any]) -> None:
        answers[body["params"]["arguments"]["tag"]] = messages(await http.post(url, json=body, headers=headers))

    async with httpx.AsyncClient(timeout=WITHIN) as http, anyio.create_task_group() as tasks:
        tasks.start_soon(post, http, slow(7, "first", 1.0))
        await anyio.to_thread.run_sync(wait_for_output, hostile, "slow first started")
        with anyio.fail_after(WITHIN):  # never a hang
            await post(http, slow("7", "second", 0.0))

    [second], first = answers["second"], answers["first"]
    assert second["id"] == "7", second
    assert second["error"]["code"] == -32600, second
    assert [(m["id"], m["result"]["content"][0]["text"]) for m in first if "result" in m] == [(7, "first")]


async def test_a_flood_of_notifications_tied_to_no_request_is_bounded(hostile: Process, url: str) -> None:
    """57.5: 20,000 log notifications of 1 KiB after the answer, for the GET stream of a 2025 client that reads
    nothing of it: the gateway's memory stays bounded."""
    assert hostile.process is not None
    pid = hostile.process.pid
    with httpx.Client(timeout=WITHIN) as handshake:
        headers = legacy_initialize(handshake, url)
    async with httpx.AsyncClient(timeout=WITHIN, headers=headers) as http:
        create = {"jsonrpc": "2.0", "id": 1, "method": "sessions/create"}
        token = result_of(await http.post(url, json=create), 1)["result"]["session"]["sessionId"]
        meta = {SESSION_META_KEY: {"sessionId": token}}
        params = {"name": "flood_later", "arguments": {"count": 20_000}, "_meta": meta}
        body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
        async with http.stream("GET", url, headers={"Accept": "text/event-stream"}) as stream:
            assert stream.status_code == 200
            before = rss_kib(pid)
            answer = result_of(await http.post(url, json=body), 2)
            assert answer["result"]["content"][0]["text"] == "soon"
            await anyio.to_thread.run_sync(wait_for_output, hostile, "flooded later")  # all written: none read
            grown = rss_kib(pid) - before

    assert grown < 64 * 1024, f"the gateway grew {grown // 1024} MiB"
