"""``mcp-sessions gateway --stdio`` and the clients that exist: every client's conversation gets a process of its own.

A stock 2025 client (its transport session), a 2026-07-28 host naming its conversation (``vscode.conversationId``),
the TypeScript SDK's client; each pair of clients of one kind never shares a process or what it keeps (a counter, a
file per process); the limits per caller; an ended conversation refused, never moved to another process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import signal
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp_types import RequestParamsMeta

from _mcp import create_session, legacy_request, modern_headers, modern_request, sdk_session_meta
from _waits import WITHIN, until
from e2e._gateway import created, gateway_process, legacy_initialize, result_of, run_node
from e2e._stdio import ENVIRON, SERVER, SERVER_PATH, filesystem, gone, own_children, stdio_gateway, text_of
from mcp_sessions.profiles import SESSION_META_KEY

pytestmark = pytest.mark.anyio

TS_CLIENT = """
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
const [url, tag] = process.argv.slice(2);
const client = new Client({ name: "ts", version: "1" });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const seen = [];
for (let i = 0; i < 3; i++) {
  const kept = await client.callTool({ name: "keep", arguments: { line: tag } });
  const who = await client.callTool({ name: "whoami", arguments: {} });
  seen.push({ kept: kept.content[0].text, who: JSON.parse(who.content[0].text) });
}
console.log(JSON.stringify(seen));
await client.close();
"""


def gateway(files: Path, command: Sequence[str] = SERVER, **options: Any) -> contextlib.AbstractContextManager[str]:
    """The stdio gateway in front of the tests' server (or ``command``), its processes' files in ``files``; its URL."""
    return stdio_gateway(command, environ={**ENVIRON, "STDIO_TEST_FILES": str(files)}, **options)


def call(http: httpx.Client, url: str, tool: str, arguments: dict[str, Any], headers: dict[str, str]) -> Any:
    """A raw ``tools/call``: its result, or its error."""
    if "Mcp-Session-Id" in headers:  # a 2025 transport session's
        body = legacy_request("tools/call", {"name": tool, "arguments": arguments})
    else:  # a 2026-07-28 request: its host conversation's id, its data-layer session's token, or neither
        conversation, token = headers.get("x-conversation"), headers.get("x-session")
        meta = {} if conversation is None else {"vscode.conversationId": conversation}
        session = None if token is None else {"sessionId": token}
        body = modern_request("tools/call", {"name": tool, "arguments": arguments}, meta=meta, session=session)
        headers = {**modern_headers(body), **{k: v for k, v in headers.items() if not k.startswith("x-")}}
    answer = result_of(http.post(url, json=body, headers=headers), 1)
    return answer.get("result", answer.get("error"))


async def used_by(kind: str, url: str, tag: str) -> list[tuple[int, str]]:
    """Three calls of one client of ``kind``: what each saw (the process's pid, and its file's lines)."""
    if kind == "typescript":
        done = await anyio.to_thread.run_sync(partial(run_node, TS_CLIENT, url, tag, timeout=60))
        assert done.returncode == 0, done.stderr
        return [(seen["who"]["pid"], seen["kept"]) for seen in json.loads(done.stdout)]
    if kind == "2025 client":
        async with Client(url, mode="legacy") as client:
            return [
                (
                    json.loads(text_of(await client.call_tool("whoami", {})))["pid"],
                    text_of(await client.call_tool("keep", {"line": tag})),
                )
                for _ in range(3)
            ]
    with httpx.Client(timeout=30) as http:  # a 2026-07-28 host naming its conversation
        headers = {"x-conversation": f"chat-{tag}"}
        return [
            (
                json.loads(call(http, url, "whoami", {}, headers)["content"][0]["text"])["pid"],
                call(http, url, "keep", {"line": tag}, headers)["content"][0]["text"],
            )
            for _ in range(3)
        ]


def opened(kind: str, http: httpx.Client, url: str, name: str) -> dict[str, str]:
    """A new conversation of ``kind``: what its requests carry (for :func:`call`)."""
    if kind == "2025 client":
        return legacy_initialize(http, url)
    return {"x-session": created(http, url)} if kind == "data-layer session" else {"x-conversation": name}


def ping(http: httpx.Client, url: str, headers: dict[str, str]) -> int:
    return http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers).status_code


@pytest.mark.parametrize("kind", ["2025 client", "typescript", "2026 host conversation"])
async def test_two_clients_of_a_kind_never_share_a_process(kind: str, tmp_path: Path) -> None:
    with gateway(tmp_path) as url:
        first, second = await used_by(kind, url, "first"), await used_by(kind, url, "second")

    for seen, tag in ((first, "first"), (second, "second")):
        assert len({pid for pid, _ in seen}) == 1  # one client's calls all reach one process
        assert seen[-1][1] == f"{tag}\n" * 3  # its file holds its own lines only
    assert first[0][0] != second[0][0]


def test_a_conversation_id_sent_by_another_caller_reaches_another_process(tmp_path: Path) -> None:
    """A host's conversation id is a name, not a secret: bound to its caller (here the client address, which uvicorn
    takes from X-Forwarded-For of 127.0.0.1, a proxy it trusts by default), another caller naming it gets a process of
    its own."""
    with gateway(tmp_path) as url, httpx.Client(timeout=30) as http:
        counts = [
            call(http, url, "count", {}, {"x-conversation": "chat-1", "X-Forwarded-For": address})["content"][0]["text"]
            for address in ("10.0.0.1", "10.0.0.2", "10.0.0.1")
        ]
    assert counts == ["1", "1", "2"]


def test_one_process_for_everyone_is_told_each_callers_conversation_apart(tmp_path: Path) -> None:
    """``--processes shared``: each request names its conversation in ``_meta``, bound to its caller as a process of
    its own is. A host's conversation id was named not at all, so a server that keeps a value per conversation kept
    one for two callers naming one ``vscode.conversationId``."""
    with (
        gateway(tmp_path, [sys.executable, "-m", "e2e._hostile_stdio"], processes="shared") as url,
        httpx.Client() as http,
    ):
        seen = [
            call(http, url, "seen", {}, {"x-conversation": "chat-1", "X-Forwarded-For": address})["content"][0]["text"]
            for address in ("10.0.0.1", "10.0.0.2", "10.0.0.1")
        ]
    named = [json.loads(each)["meta"][SESSION_META_KEY]["sessionId"] for each in seen]
    assert named[0] == named[2] != named[1]


def test_a_caller_at_its_limit_is_refused_and_other_callers_are_not(tmp_path: Path) -> None:
    """Two processes per caller: a third host conversation of one address is refused (naming the limit), and so is
    the first call of its 2025 transport session (its ``initialize`` starts no process), while another address
    starts one; a third 2025 transport session's first call evicts that caller's idle ones first."""
    with (
        gateway(tmp_path, max_processes_per_principal=2) as url,  # the client address from uvicorn, as above
        httpx.Client(timeout=30) as http,
    ):
        a, b = {"X-Forwarded-For": "10.0.0.1"}, {"X-Forwarded-For": "10.0.0.2"}
        for name in ("one", "two"):
            assert "content" in call(http, url, "count", {}, {**a, "x-conversation": name})
        refused = call(http, url, "count", {}, {**a, "x-conversation": "three"})
        refused_transport = call(http, url, "count", {}, legacy_initialize(http, url, a))  # a has no idle one to end
        other = call(http, url, "count", {}, {**b, "x-conversation": "three"})
        transports = [legacy_initialize(http, url, b) for _ in range(3)]  # b has one process: two are evicted
        firsts = [call(http, url, "count", {}, transport) for transport in transports]
        # the first ends a moment after the next one started
        until(lambda: ping(http, url, transports[0]) == 404, "the first transport session to end")

    assert refused["code"] == -32011
    assert "--max-processes-per-principal" in refused["message"]
    assert refused["data"] == {"retryAfter": 1}
    assert refused_transport == refused
    assert other["content"][0]["text"] == "1"
    assert [first["content"][0]["text"] for first in firsts] == ["1"] * 3


def test_a_crashed_conversation_is_refused_never_moved(tmp_path: Path) -> None:
    """A host conversation whose process is gone gets an error naming its end; a 2025 transport session's ends (404),
    and its client initializes a new one, with a new process."""
    with gateway(tmp_path) as url, httpx.Client(timeout=30) as http:
        host = {"x-conversation": "chat-crash"}
        call(http, url, "crash", {}, host)
        later = call(http, url, "count", {}, host)
        transport = legacy_initialize(http, url)
        call(http, url, "crash", {}, transport)
        until(lambda: ping(http, url, transport) == 404, "the transport session to end")
        again = call(http, url, "count", {}, legacy_initialize(http, url))

    assert later["code"] == -32603
    assert "conversation has ended (crash: " in later["message"]
    assert again["content"][0]["text"] == "1"


def elicit(
    http: httpx.Client, url: str, meta: dict[str, Any], state: str | None = None, key: str | None = None
) -> dict[str, Any]:
    """A raw 2026-07-28 ``tools/call`` of ``elicit``; with ``state``, the retry that answers ``key``."""
    params: dict[str, Any] = {"name": "elicit", "arguments": {"question": "?"}}
    if state is not None:
        params |= {"requestState": state, "inputResponses": {key: {"action": "accept", "content": {"answer": "yes"}}}}
    body = modern_request("tools/call", params, meta=meta)
    answer: dict[str, Any] = result_of(http.post(url, json=body, headers=modern_headers(body)), 1)
    found: dict[str, Any] = answer["result"] if "result" in answer else answer["error"]
    return found


def test_a_request_that_names_nothing_gets_a_process_no_other_request_used(tmp_path: Path) -> None:
    """``sessionless="per-request"``: each such request its own process (taken from those started ahead); one that
    asks its client is answered ``input_required``, and its retry reaches the same process, once, with the gateway's
    own ``requestState``: a replayed, forged, or another conversation's state is refused."""
    with gateway(tmp_path, sessionless="per-request") as url, httpx.Client(timeout=30) as http:
        seen = [json.loads(call(http, url, "whoami", {}, {})["content"][0]["text"]) for _ in range(4)]
        counts = [call(http, url, "count", {}, {})["content"][0]["text"] for _ in range(2)]
        asked = elicit(http, url, {})
        [key] = asked["inputRequests"]
        host = elicit(http, url, {"vscode.conversationId": "chat-elicit"})
        crossed = elicit(http, url, {"vscode.conversationId": "chat-elicit"}, asked["requestState"], key)
        forged = elicit(http, url, {}, "forged-state", key)
        other_way = elicit(http, url, {}, host["requestState"], key)
        answered = elicit(http, url, {}, asked["requestState"], key)
        replayed = elicit(http, url, {}, asked["requestState"], key)

    assert len({found["pid"] for found in seen}) == len({found["session"] for found in seen} - {None}) == 4
    assert counts == ["1", "1"]
    assert asked["resultType"] == "input_required"
    assert host["resultType"] == "input_required"
    for refused in (crossed, forged, other_way, replayed):
        assert refused["code"] == -32602
        assert "requestState names no request waiting" in refused["message"]
    assert answered["content"][0]["text"] == "accept: yes"


@pytest.fixture(scope="module")
def asking_url() -> Iterator[str]:
    """The gateway in front of the tests' server, which asks its client: its URL, for the module."""
    with stdio_gateway() as url:
        yield url


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_elicitation_reaches_a_stock_client_with_no_session_in_both_eras(asking_url: str, mode: str) -> None:
    async def elicitation(context: Any, params: Any) -> Any:
        return types.ElicitResult(action="accept", content={"answer": "yes"})

    async with Client(asking_url, mode=mode, elicitation_callback=elicitation) as client:
        assert text_of(await client.call_tool("elicit", {"question": "?"})) == "accept: yes"


def test_sigterm_ends_the_processes_of_every_kind_of_conversation() -> None:
    """The gateway as its own process: a 2025 transport session's, a host conversation's, a data-layer session's,
    a request's own retained for its input (the hostile server's, which asks its client without the SDK's start), and
    those started ahead; none is left after its SIGTERM."""
    hostile = f"{sys.executable} -m e2e._hostile_stdio"
    flags = ("--max-processes-per-principal", "8", "--warm", "2")  # one address opens them all
    own = ("--sessionless", "per-request")  # a request that names none: a process of its own
    with (
        gateway_process([], "--stdio", hostile, *flags, *own, environ=SERVER_PATH) as process,
        httpx.Client(timeout=30) as http,
    ):
        assert process.process is not None
        url = process.url()
        call(http, url, "seen", {}, legacy_initialize(http, url))
        call(http, url, "seen", {}, {"x-conversation": "chat-term"})
        call(http, url, "seen", {}, {"x-session": created(http, url)})
        assert call(http, url, "ask_then_answer", {}, {})["resultType"] == "input_required"
        # the shared process, two ahead (each one taken is replaced once its request's answer is sent), the four above
        parent = process.process.pid
        pids = until(lambda: now if len(now := own_children(parent=parent)) >= 7 else None, "seven processes")
        process.process.send_signal(signal.SIGTERM)
        process.process.wait(timeout=WITHIN)
        until(lambda: all(gone(pid) for pid in pids), "every process to end")


def test_ctrl_c_stops_the_gateway_quietly_and_a_call_in_flight_is_told_why() -> None:
    """Ctrl-C on a foreground gateway (SIGINT): it stops as uvicorn's own command does, exit status 0 and no traceback
    (it printed a ``KeyboardInterrupt``'s, 25 lines, after a clean stop); a 2025 client's call in flight, unanswered
    at ``--shutdown-timeout``, is told that the stop cut it and that it may have run (``-32603``: it read "(ended)",
    then "the gateway is shutting down", then ``-32014`` "send the request again"), and the drain's end says what it
    cut as INFO, never uvicorn's ERROR."""
    hostile = f"{sys.executable} -m e2e._hostile_stdio"
    with (
        # a drain of a second, not the default's 30 s: the call is cut all the same
        gateway_process(
            [], "--stdio", hostile, "--log-level", "info", "--shutdown-timeout", "1", environ=SERVER_PATH
        ) as process,
        httpx.Client(timeout=60) as http,
        ThreadPoolExecutor(1) as pool,
    ):
        assert process.process is not None
        headers = legacy_initialize(http, process.url())
        in_flight = pool.submit(call, http, process.url(), "slow", {"tag": "late", "seconds": 600}, headers)
        until(lambda: b"slow late started" in process.log(), "the call to reach its process")
        process.process.send_signal(signal.SIGINT)
        status = process.process.wait(timeout=60)
        error, said = in_flight.result(timeout=60), process.log().decode()

    assert status == 0, said
    assert "Traceback" not in said, said
    assert "KeyboardInterrupt" not in said, said
    assert "ERROR" not in said, said
    assert "1 call(s) still in flight" in said, said
    assert error["code"] == -32603, error
    assert error["message"].startswith("The gateway stopped while the call ran: it may have run"), error
    assert error["data"]["mayHaveRun"] is True, error


def test_a_requests_own_process_is_replaced_and_stopped_once_its_answer_is_sent(tmp_path: Path) -> None:
    """No process starts while a request that names no conversation is being answered (a start takes a core for
    most of a second): the pool is refilled, and the answered process stopped, once the answer is sent."""
    with (
        gateway(tmp_path, warm=2, sessionless="per-request") as url,
        httpx.Client(timeout=30) as http,
        ThreadPoolExecutor(1) as pool,
    ):
        ours = partial(own_children, f"STDIO_TEST_FILES={tmp_path}")  # this gateway's processes alone
        before = until(lambda: now if len(now := ours()) == 3 else None, "the shared process and two started ahead")
        held = pool.submit(call, http, url, "hold", {}, {})
        until((tmp_path / "held").exists, "the call to hold")
        during = ours()
        (tmp_path / "go").touch()
        assert held.result()["content"][0]["text"] == "held"
        until(lambda: len(now := ours()) == 3 and not now <= before, "a process started in place of the one taken")
    assert during == before  # the request's process was one of those started ahead, and none started since


def test_a_2026_call_with_arguments_takes_one_process(tmp_path: Path) -> None:
    """The SDK checks a 2026-07-28 ``tools/call``'s ``Mcp-Param`` headers against the tools' schemas: the gateway
    gives it the shared process's, so no ``tools/list`` takes a process of its own first."""
    with gateway(tmp_path, warm=2, sessionless="per-request") as url, httpx.Client(timeout=30) as http:
        ours = partial(own_children, f"STDIO_TEST_FILES={tmp_path}")  # this gateway's processes alone
        before = until(lambda: now if len(now := ours()) == 3 else None, "the shared process and two started ahead")
        assert call(http, url, "keep", {"line": "x"}, {})["content"][0]["text"] == "x\n"
        after = until(lambda: now if len(now := ours()) == 3 and now != before else None, "the process replaced")
        assert len(after & before) == 2  # one of the two started ahead was taken


@pytest.mark.parametrize("kind", ["2025 client", "data-layer session", "2026 host conversation"])
def test_a_new_conversation_takes_a_process_started_before_it(kind: str, tmp_path: Path) -> None:
    """No new conversation waits for a process to start: it takes one started ahead (running before the
    conversation's first request, its ``initialize`` or ``sessions/create``, was sent), and another is started in its
    place; two conversations never share a process, nor its ``MCP_SESSION_ID`` (the process's own id)."""
    with gateway(tmp_path, warm=2) as url, httpx.Client(timeout=30) as http:
        ours = partial(own_children, f"STDIO_TEST_FILES={tmp_path}")  # this gateway's processes alone
        seen: list[dict[str, Any]] = []
        for name in ("one", "two"):
            # the shared process, two ahead, and the conversations
            before = until(lambda: now if len(now := ours()) == 3 + len(seen) else None, "those processes")
            seen.append(json.loads(call(http, url, "whoami", {}, opened(kind, http, url, name))["content"][0]["text"]))
            assert seen[-1]["pid"] in before

    assert len({found["pid"] for found in seen}) == len({found["session"] for found in seen} - {None}) == 2


# make test: more clients than processes started ahead, so that first calls reach processes of both kinds; make
# test-all adds issue 57's hundred (tests/conftest.py's INTEROP), the same behaviour under more clients.
@pytest.mark.parametrize("clients", [16, 100])
async def test_server_filesystem_fails_no_first_call_of_stock_clients(tmp_path: Path, clients: int) -> None:
    """server-filesystem asks its client's roots as soon as it is initialized, before any call: the gateway answers
    "none" for a client that declared none (a process started ahead knows no client), and the process keeps its
    directory. Fresh stock clients, half of each era, four at a time: each one's first request, a ``tools/call``,
    reads the file."""
    (tmp_path / "known.txt").write_text("known", encoding="utf-8")
    read, texts, four = {"path": str(tmp_path / "known.txt")}, list[str](), anyio.CapacityLimiter(4)

    async def first_call(mode: str) -> None:
        async with four, Client(url, mode=mode) as client:
            texts.append(text_of(await client.call_tool("read_text_file", read)))

    with gateway(tmp_path, filesystem(tmp_path), max_processes_per_principal=16, warm=2) as url:
        async with anyio.create_task_group() as tasks:
            for mode in ("auto", "legacy") * (clients // 2):
                tasks.start_soon(first_call, mode)

    assert texts == ["known"] * clients


@pytest.mark.parametrize("mode", ["legacy", "auto", "naming none"])
async def test_server_filesystem_gets_the_roots_of_a_client_that_declares_them(
    tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A conversation's process that asked its roots before its first call (as one started ahead does), answered
    "none" as no call was in progress, is told they changed at the first call of a client that declares them: it asks
    them through that call (a 2025 client on its stream, a 2026-07-28 one in an ``input_required`` round), and its
    later calls reach that client's directory alone (server-filesystem takes them as they come). One 2026-07-28
    client names its conversation by a data-layer session; a stock one names none and reaches its caller's own
    process (``--sessionless per-caller``), which was never told."""
    given, rooted = tmp_path / "given", tmp_path / "rooted"
    given.mkdir()
    rooted.mkdir()

    async def roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult.model_validate({"roots": [{"uri": rooted.as_uri()}]})

    async def allowed(meta: RequestParamsMeta | None) -> str:
        return text_of(await client.call_tool("list_allowed_directories", {}, meta=meta))

    warm = 1 if mode == "naming none" else 0  # the caller's process: one started ahead, which has asked its roots
    logged = caplog.at_level(logging.INFO, "mcp_sessions.gateway.stderr")
    with logged, gateway(tmp_path, filesystem(given), warm=warm) as url:
        async with Client(url, mode=mode.replace("naming none", "auto"), list_roots_callback=roots) as client:
            meta = None if mode != "auto" else sdk_session_meta(await create_session(client))
            said = r"process \S+: No valid root directories"
            if mode != "legacy":  # a 2025 transport session's process starts at its first call, which roots reach
                until(lambda: re.search(said, caplog.text) is not None, f"a log line saying {said!r}")
            with anyio.fail_after(30):
                while str(rooted) not in (seen := await allowed(meta)):
                    pass  # it takes them as they come: a call later, or two

    assert seen == f"Allowed directories:\n{rooted}"
