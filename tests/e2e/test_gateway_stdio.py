"""``mcp-sessions gateway --stdio``: a stdio server behind the session pipeline, a process per conversation.

The gateway's app (``stdio_gateway_app``) on a real uvicorn in a thread, or the command as its own process where
signals matter; the server is the tests' own (``_plain_stdio.py``, which asks its client and reports progress as the
SDK's server does; ``_stdio_server.py``, the SDK's, where what it takes of its client's answers is the point), reached
by the ``mcp`` SDK's client in both eras and by raw HTTP.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from _mcp import (
    LEGACY,
    MCP_PATH,
    MODERN,
    SESSION_NOT_FOUND,
    DeleteSessionRequest,
    DeleteSessionResult,
    create_session,
    jwt_claims,
    legacy_request,
    modern_headers,
    modern_request,
    sdk_session_meta,
    session_meta,
)
from _redis import free_port, missing, only_skips
from _waits import WITHIN, until, until_awaited
from conftest import SECRET
from e2e._gateway import (
    EVERYTHING,
    MAIN,
    gateway_process,
    gateway_run,
    installed,
    legacy_initialize,
    main_run,
    node,
    result_of,
    run_recipe,
    said_as_root,
    stopped_as_it_starts,
)
from e2e._listen import client as listening
from e2e._stdio import SDK_SERVER, SERVER, SERVER_PATH, gone, own_children, stdio_gateway, text_of
from mcp_sessions import SessionsConfig
from mcp_sessions._gateway.stdio import _relay

pytestmark = pytest.mark.anyio

GONE_WITHIN = 10.0  # the gateway's bound (all gone within 10 s of its SIGTERM): a behaviour, not a wait
T = TypeVar("T")


def gateway(**options: Any) -> contextlib.AbstractContextManager[str]:
    """The stdio gateway in front of the tests' server: its MCP URL."""
    options.setdefault("max_processes_per_principal", 64)  # every test's client is 127.0.0.1
    return stdio_gateway(**options)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with gateway(max_processes=64) as url:  # the module's tests leave their conversations open: room for all
        yield url


@pytest.fixture(scope="module")
def sdk_url() -> Iterator[str]:
    """The gateway in front of the ``mcp`` SDK's server, which checks what its client answers: its URL."""
    with gateway(command=SDK_SERVER) as url:
        yield url


@pytest.fixture(params=["auto", "legacy"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def whoami(client: Client, session: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = None if session is None else sdk_session_meta(session)
    result = await client.call_tool("whoami", {}, meta=meta)
    found: dict[str, Any] = json.loads(text_of(result))
    return found


async def count(client: Client, session: dict[str, Any]) -> int:
    return int(text_of(await client.call_tool("count", {}, meta=sdk_session_meta(session))))


# -- a process per conversation -------------------------------------------------------------------


async def test_each_conversation_has_its_own_process(url: str, mode: str) -> None:
    async with Client(url, mode=mode) as client:
        assert client.protocol_version == (MODERN if mode == "auto" else LEGACY)
        assert client.server_info is not None
        assert client.server_info.name == "stdio-test-server"
        assert client.server_capabilities is not None
        assert client.server_capabilities.tools is not None
        first, second = await create_session(client), await create_session(client)
        counts = [await count(client, first), await count(client, first), await count(client, second)]
        mine, theirs, again = await whoami(client, first), await whoami(client, second), await whoami(client, first)
        shared, shared_again = await whoami(client), await whoami(client)

    assert mine["pid"] == again["pid"]
    assert mine["session"] == again["session"] is not None  # its own id
    if mode == "auto":  # each session a process of its own; the caller's requests that name nothing, one of hers
        assert counts == [1, 2, 1]
        assert mine["pid"] != theirs["pid"]
        assert mine["session"] != theirs["session"]
        assert {shared["pid"], shared_again["pid"]}.isdisjoint({mine["pid"], theirs["pid"]})
        assert shared["session"] == shared_again["session"]
        assert shared["pid"] == shared_again["pid"]
    else:  # a 2025 client's sessions are its transport session's conversation: one process for all of it
        assert counts == [1, 2, 3]
        assert mine["pid"] == theirs["pid"] == shared["pid"] == shared_again["pid"]
    assert mine["leaked"] == shared["leaked"] == []  # the gateway had MCP_SESSIONS_SECRET; no child sees it


async def test_a_2025_session_lives_in_its_transport_sessions_process_and_a_reconnect_reaches_it(url: str) -> None:
    """A session a 2025 client opens is its transport session's conversation: a reconnect (another transport
    session) that names it reaches that process while it lives; once the first closed (DELETE), "not found"."""
    async with Client(url, mode="legacy") as first:
        session = await create_session(first)
        pid = (await whoami(first))["pid"]
        async with Client(url, mode="legacy") as again:
            assert (await whoami(again, session))["pid"] == pid != (await whoami(again))["pid"]
    async with Client(url, mode="legacy") as later:
        with pytest.raises(MCPError) as ending:  # while its process ends
            await whoami(later, session)
        await until_awaited(lambda: gone(pid), "the process's end")
        with pytest.raises(MCPError) as ended:
            await whoami(later, session)

    assert ending.value.code == ended.value.code == SESSION_NOT_FOUND  # the client starts a new one


async def test_the_same_request_id_in_two_conversations_gets_two_answers(url: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        sessions = []
        for _ in range(2):
            body = modern_request("sessions/create")
            sessions.append(
                result_of(await http.post(url, json=body, headers=modern_headers(body)), 1)["result"]["session"]
            )
        bodies = [
            modern_request("tools/call", {"name": "count", "arguments": {}}, id=7, session=session_meta(session))
            for session in sessions
        ]
        await http.post(url, json=bodies[0], headers=modern_headers(bodies[0]))  # the first conversation's count: 1
        answers: list[dict[str, Any]] = [{}, {}]

        async def call(index: int) -> None:
            answers[index] = result_of(
                await http.post(url, json=bodies[index], headers=modern_headers(bodies[index])), 7
            )

        async with anyio.create_task_group() as tasks:
            for index in range(2):
                tasks.start_soon(call, index)

    assert [answer["result"]["content"][0]["text"] for answer in answers] == ["2", "1"]  # each its own


async def test_a_create_beyond_max_processes_is_refused_and_starts_nothing() -> None:
    limit = 1  # a 2025 client's create starts none: its transport session's process (the clients test, its limit)
    with gateway(max_processes=limit, sessionless="shared", warm=0) as url:  # each process started at its create
        async with Client(url) as client:
            await whoami(client)
            before = own_children()
            first = await create_session(client)
            started = own_children() - before
            assert len(started) == 1  # the first conversation's process, started at its create
            with pytest.raises(MCPError) as refused:
                await create_session(client)
            assert own_children() - before == started  # the refused create started nothing
            assert await whoami(client) is not None  # the shared process is no conversation's: not counted
            await delete(client, first)
            second = await answered(lambda: create_session(client))  # once the deleted one's process ended
            assert await count(client, second) == 1

    assert refused.value.code == -32011
    assert f"at most {limit} " in refused.value.message
    assert "--max-processes" in refused.value.message


async def delete(client: Client, session: dict[str, Any]) -> None:
    request = DeleteSessionRequest(params=types.RequestParams(_meta=sdk_session_meta(session)))
    await client.session.send_request(request, DeleteSessionResult)


async def answered(call: Callable[[], Awaitable[T]]) -> T:
    """``call``'s answer once it gives one rather than an error (bounded)."""
    with anyio.fail_after(WITHIN):
        while True:
            with contextlib.suppress(MCPError):
                return await call()
            await anyio.sleep(0.05)


# -- lifetimes ------------------------------------------------------------------------------------


async def test_delete_ends_the_conversations_process(url: str, mode: str) -> None:
    async with Client(url, mode=mode) as client:
        session = await create_session(client)
        pid = (await whoami(client, session))["pid"]
        await delete(client, session)
        if mode == "legacy":  # its transport session's process: that conversation goes on, the session is gone
            assert (await whoami(client))["pid"] == pid
            with pytest.raises(MCPError, match="Session not found"):
                await whoami(client, session)
        else:
            await until_awaited(lambda: gone(pid), "the process's end")


async def test_an_idle_conversations_process_ends_and_its_session_too() -> None:
    with gateway(process_idle=0.5) as url:
        async with Client(url) as client:  # a 2025 client's transport session would idle out with it (404)
            session = await create_session(client)
            pid = (await whoami(client, session))["pid"]
            await until_awaited(lambda: gone(pid), "the process's end")
            with pytest.raises(MCPError) as later:
                await whoami(client, session)

    assert later.value.code == SESSION_NOT_FOUND  # its state is gone: the client starts a new conversation


async def test_a_crash_answers_at_once_and_touches_no_other_conversation(url: str, logged: list[str]) -> None:
    async with Client(url) as client:  # two sessions, two processes (a 2025 client's: test_gateway_stdio_attacks)
        crashing, other = await create_session(client), await create_session(client)
        process = (await whoami(client, crashing))["session"]
        await count(client, other)
        with pytest.raises(MCPError) as in_flight:
            await client.call_tool("crash", {}, meta=sdk_session_meta(crashing))
        with pytest.raises(MCPError) as later:
            await wait_for_error(client, crashing)
        assert await count(client, other) == 2

    assert "exited" in in_flight.value.message
    assert later.value.code == SESSION_NOT_FOUND  # its state is gone: the client starts a new conversation
    sid = jwt_claims(crashing["sessionId"])["sid"]
    assert f"process {process}: serves the conversation {sid}" in logged  # which process, for the operator
    assert any(line.startswith(f"process {process}: server process") and "ended" in line for line in logged), logged


async def test_a_crash_answers_at_once_while_a_process_it_started_holds_its_stdout(url: str) -> None:
    async with Client(url, mode="legacy") as client:
        session = await create_session(client)
        result = await client.call_tool("spawn", {"holds_stdout": True}, meta=sdk_session_meta(session))
        helper = int(text_of(result))
        with anyio.fail_after(GONE_WITHIN), pytest.raises(MCPError) as in_flight:  # never a hang
            await client.call_tool("crash", {}, meta=sdk_session_meta(session))

    assert "exited" in in_flight.value.message
    await until_awaited(lambda: gone(helper), "its end with the process group of the process that started it")


async def wait_for_error(client: Client, session: dict[str, Any]) -> None:
    """Call ``whoami`` in ``session`` until it fails with "Session not found"; until the crashed process is
    stopped and its session revoked, the error says that the process exited."""
    with anyio.fail_after(WITHIN):
        while True:
            try:
                await whoami(client, session)
            except MCPError as exc:
                if exc.code == SESSION_NOT_FOUND:
                    raise
                assert "has ended (crash: " in exc.message
            await anyio.sleep(0.05)


async def test_stderr_goes_to_the_log_prefixed_with_the_process_id(url: str, logged: list[str]) -> None:
    async with Client(url, mode="legacy") as client:
        session = await create_session(client)
        process = (await whoami(client, session))["session"]
        await client.call_tool("complain", {"line": "disk \x1b[31mfull"}, meta=sdk_session_meta(session))
        await client.call_tool("complain", {"line": "y" * 10_000}, meta=sdk_session_meta(session))
        await client.call_tool("complain", {"line": "after"}, meta=sdk_session_meta(session))
        await until_awaited(lambda: f"process {process}: after" in logged, "the last line logged")
    assert f"process {process}: disk \\x1b[31mfull" in logged
    assert f"process {process}: {'y' * 4096} [cut]" in logged  # at most 4 KiB of a line; the rest of it dropped
    assert not any(session["sessionId"] in line for line in logged)


# -- what MCP carries -----------------------------------------------------------------------------


def test_a_call_with_params_its_revision_refuses_is_invalid_params_from_the_gateway(url: str) -> None:
    """The gateway relays a request's params as they came (no model of its own between): the ``mcp`` SDK checks a
    spec method's params against its revision's schema before any handler, and refuses a ``tools/call`` with no
    ``name``, or whose ``arguments`` are no object, in either era, with ``-32602``; no process is asked."""
    with httpx.Client(timeout=WITHIN) as http:
        headers = legacy_initialize(http, url)
        nameless = legacy_request("tools/call", {"arguments": {}}, id=7)
        legacy = result_of(http.post(url, json=nameless, headers=headers), 7)
        listed = modern_request("tools/call", {"name": "whoami", "arguments": ["not", "an", "object"]}, id=8)
        modern = result_of(http.post(url, json=listed, headers=modern_headers(listed)), 8)

    assert legacy["error"]["code"] == modern["error"]["code"] == -32602, (legacy, modern)


async def test_progress_arrives_under_the_clients_own_token(url: str, mode: str) -> None:
    reported: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total, message))

    async with Client(url, mode=mode) as client:
        session = await create_session(client)
        result = await client.call_tool(
            "progress", {"steps": 2}, progress_callback=on_progress, meta=sdk_session_meta(session)
        )

    assert text_of(result) == "done"
    assert reported == [(1, 2, "step 1"), (2, 2, "step 2")]


async def test_sampling_and_elicitation_reach_the_client_and_return_to_the_same_process(
    sdk_url: str, mode: str
) -> None:
    """A 2025 client is asked on the stream of its request; a 2026-07-28 client in an ``input_required`` result,
    and its retry brings the answer to the same process, whose call goes on. The ``mcp`` SDK's server, the one most
    put behind ``--stdio``: it takes the answers it was relayed only in the types and the schema it asked for."""

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        [message] = params.messages
        assert isinstance(message.content, types.TextContent)
        text = f"sampled {message.content.text}"
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=text), model="m")

    async def elicitation(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        return types.ElicitResult(action="accept", content={"answer": f"yes to {params.message}"})

    async with Client(sdk_url, mode=mode, sampling_callback=sampling, elicitation_callback=elicitation) as client:
        session = await create_session(client)
        sampled = await client.call_tool("sample", {"prompt": "hi"}, meta=sdk_session_meta(session))
        elicited = await client.call_tool("elicit", {"question": "ok?"}, meta=sdk_session_meta(session))
        assert await count(client, session) == 1  # the same process answered all three

    assert text_of(sampled) == "sampled hi"
    assert text_of(elicited) == "accept: yes to ok?"


async def test_the_shared_process_asks_no_client(url: str, mode: str) -> None:
    """Nothing tells which client's call made the shared process ask (``sessionless="shared"``): no client is asked,
    and the process is told so (another client must never see the question, nor answer it). A client with no
    session is asked by its own process: a 2025 client's transport session's, a 2026-07-28 request's own."""
    asked: list[types.CreateMessageRequestParams] = []

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append(params)
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="x"), model="m")

    async with Client(url, mode=mode, sampling_callback=sampling) as client:
        assert text_of(await client.call_tool("sample", {"prompt": "mine"})) == "x"
    if mode == "legacy":
        return
    asked.clear()
    with gateway(sessionless="shared") as shared:
        async with Client(shared, mode=mode, sampling_callback=sampling) as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("sample", {"prompt": "private"})  # no session: the shared process

    assert refused.value.message == "the shared server process cannot ask a client; a session's can"
    assert asked == []


async def test_a_retry_that_brings_input_too_late_is_answered_at_once(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 2026-07-28 call that waited for the client's input longer than the gateway keeps it is abandoned; the
    retry that comes after gets an error, never a hang."""
    monkeypatch.setattr(_relay, "ANSWER_WITHIN", 0.0)  # every wait for the client's input has run out at once

    async def elicitation(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"answer": "yes"})

    async with Client(url, mode="auto", elicitation_callback=elicitation) as client:
        session = await create_session(client)
        with anyio.fail_after(WITHIN), pytest.raises(MCPError) as late:
            await client.call_tool("elicit", {"question": "ok?"}, meta=sdk_session_meta(session))

    assert "abandoned" in late.value.message


async def test_roots_list_reaches_the_client_in_both_eras(url: str, mode: str) -> None:
    async def list_roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult.model_validate({"roots": [{"uri": "file:///work/a"}, {"uri": "file:///work/b"}]})

    async with Client(url, mode=mode, list_roots_callback=list_roots) as client:
        session = await create_session(client)
        listed = await client.call_tool("roots", {}, meta=sdk_session_meta(session))
    async with Client(url, mode=mode) as client:  # it declares no roots: the gateway answers for it, none
        unlisted = await client.call_tool("roots", {})

    assert text_of(listed) == "file:///work/a file:///work/b"
    assert not unlisted.is_error
    assert [content.text for content in unlisted.content] in ([], [""])  # type: ignore[union-attr]


async def test_a_notification_tied_to_no_request_reaches_that_conversations_get_stream_only(url: str) -> None:
    """Two 2025 clients, each with its conversation: what one conversation's process announces after its request
    was answered reaches the GET stream of that client, and not the other's."""
    heard: dict[str, list[str]] = {"a": [], "b": []}

    def client(name: str) -> Client:
        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                heard[name].append("tools changed")

        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            heard[name].append(str(params.data))

        return Client(url, mode="legacy", message_handler=on_message, logging_callback=on_log)

    async with client("a") as first, client("b") as second:
        mine, theirs = await create_session(first), await create_session(second)
        pid = (await whoami(first, mine))["pid"]
        await whoami(second, theirs)
        assert text_of(await first.call_tool("announce", {}, meta=sdk_session_meta(mine))) == "soon"
        await until_awaited(lambda: len(heard["a"]) == 2, "both notifications")
        await whoami(second, theirs)  # anything sent its way would have come before this answer

    # The client library may hand the two notifications to its callbacks in either order.
    assert sorted(heard["a"]) == sorted(["tools changed", f"announced by {pid}"])
    assert heard["b"] == []


async def test_a_notification_tied_to_no_request_reaches_that_conversations_listen_stream_only(url: str) -> None:
    """Two 2026-07-28 conversations, each with a ``subscriptions/listen`` stream, and one without a session: what a
    conversation's process announces after its request was answered reaches that conversation's stream only."""
    base = url.removesuffix(MCP_PATH)
    changed = "notifications/tools/list_changed"
    async with listening() as c:
        mine, theirs = await c.create(base), await c.create(base)
        streams = [await c.listen(base, "mine", mine), await c.listen(base, "theirs", theirs)]
        streams.append(await c.listen(base, "nobody's"))
        assert await c.tool(base, "announce", {}, mine) == "soon"
        await streams[0].wait(changed)
        assert await c.tool(base, "announce", {}, theirs) == "soon"
        await streams[1].wait(changed)  # after anything of the first conversation's its stream would have got
        assert streams[0].events == streams[1].events == [changed]
        assert streams[2].events == []
        assert all(not stream.ended.is_set() for stream in streams)


async def test_an_endless_stdout_line_stops_the_process_with_a_clear_error(logged: list[str]) -> None:
    """A hostile server's stdout line without end: read up to the bound (the gateway's ``max_response_size``),
    then the process is stopped, its request answered with an error; other conversations go on."""
    with stdio_gateway(config=SessionsConfig(secret=SECRET, max_response_size=65_536)) as url:
        async with Client(url) as client:  # the era changes nothing of how a process's line is read
            hostile, other = await create_session(client), await create_session(client)
            pid = (await whoami(client, hostile))["pid"]
            with pytest.raises(MCPError) as stopped:
                await client.call_tool("endless", {}, meta=sdk_session_meta(hostile))
            await until_awaited(lambda: gone(pid), "the process's end")
            assert await count(client, other) == 1

    assert stopped.value.code == -32603
    assert "exited" in stopped.value.message
    assert any("a stdout line longer than 65536 bytes; the server is stopped" in line for line in logged), logged


# -- servers from the package indexes ---------------------------------------------------------------


def server_time() -> list[str]:
    """mcp-server-time from PyPI, in its own environment (``make test`` builds it; ``STDIO_SERVER_VENVS`` names it):
    a missing one skips, or fails under CI."""
    __tracebackhide__ = only_skips
    venvs = os.environ.get("STDIO_SERVER_VENVS", str(MAIN / ".venv-server-time")).split()
    venv = next((Path(v) for v in venvs if Path(v).name.endswith("-server-time")), MAIN / ".venv-server-time")
    command = venv / "bin" / "mcp-server-time"
    if not command.exists():
        missing(f"{command} is missing: `make {venv}/.installed` builds that environment")
    return [str(command), "--local-timezone", "UTC"]


def server_everything() -> list[str]:
    return [node(), str(installed(EVERYTHING, "@modelcontextprotocol/server-everything")), "stdio"]


async def test_mcp_server_time_from_pypi_in_both_eras(mode: str) -> None:
    with stdio_gateway(server_time()) as url:
        async with Client(url, mode=mode) as client:
            assert client.server_info is not None
            assert client.server_info.name == "mcp-time"
            session = await create_session(client)
            tools = await client.list_tools(meta=sdk_session_meta(session))
            now = await client.call_tool(
                "get_current_time", {"timezone": "Europe/Paris"}, meta=sdk_session_meta(session)
            )

    assert {tool.name for tool in tools.tools} == {"get_current_time", "convert_time"}
    assert json.loads(text_of(now))["timezone"] == "Europe/Paris"


async def test_server_everything_stdio_in_both_eras(mode: str) -> None:
    with stdio_gateway(server_everything()) as url:
        async with Client(url, mode=mode) as client:
            assert client.server_info is not None
            assert "everything" in client.server_info.name
            first, second = await create_session(client), await create_session(client)
            tools = await client.list_tools(meta=sdk_session_meta(first))
            echoed = [
                await client.call_tool("echo", {"message": f"to {name}"}, meta=sdk_session_meta(session))
                for name, session in (("first", first), ("second", second))
            ]

    assert "echo" in {tool.name for tool in tools.tools}
    assert [text_of(result) for result in echoed] == ["Echo: to first", "Echo: to second"]


def test_the_typescript_sdk_client_round_trip() -> None:
    """docs/gateway.md's TypeScript SDK recipe, run as written, through ``--stdio`` server-everything: a session
    created, used, echoed and deleted (the TS SDK 1.x client speaks 2025-11-25)."""
    with stdio_gateway(server_everything()) as url:
        assert run_recipe(url, timeout=60)["transport"]


# -- the command ------------------------------------------------------------------------------------


def test_sigterm_ends_every_process_even_one_that_ignores_it() -> None:
    """The gateway as its own process, its server ignoring SIGTERM and its stdin's end: all gone within 10 s."""
    server = shlex.join([*SERVER, "--stubborn"])
    with gateway_process([], "--stdio", server, "--log-level", "info", environ=SERVER_PATH) as process:
        pids = anyio.run(_pids_of_a_conversation, process.url())
        assert process.process is not None
        process.process.send_signal(signal.SIGTERM)
        process.process.wait(timeout=GONE_WITHIN)
        # The kernel has already ended them; their reaping may lag.
        until(lambda: all(gone(pid) for pid in pids), process.output)
        assert "process " in process.output()


def test_a_call_unanswered_when_the_shutdown_timeout_ends_is_told_it_may_have_run(tmp_path: Path) -> None:
    """A call its process has not answered when ``--shutdown-timeout`` ends is answered ``-32603``, which says it may
    have run (it was 503 with ``Retry-After`` and ``-32014``, "send the request again", which a client or a front
    did, running a ``write_file`` twice: issue 101, item 7), with its id: not uvicorn's 500, and no traceback."""
    environ = {**SERVER_PATH, "STDIO_TEST_FILES": str(tmp_path)}
    server = shlex.join(SERVER)
    body = modern_request("tools/call", {"name": "hold", "arguments": {}})
    with gateway_process([], "--stdio", server, "--shutdown-timeout", "0.5", environ=environ) as process:
        assert process.process is not None
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(httpx.post, process.url(), json=body, headers=modern_headers(body), timeout=WITHIN)
            until(lambda: (tmp_path / "held").exists(), process.output)
            process.process.send_signal(signal.SIGTERM)
            answer = pending.result()
        process.process.wait(timeout=WITHIN)
        output = process.output()
    assert answer.status_code == 200, output
    assert "retry-after" not in answer.headers, output
    error = {
        "code": -32603,
        "message": "The gateway stopped while the call ran: it may have run; check before sending it again",
        "data": {"reason": "gateway_stopped", "mayHaveRun": True},
    }
    assert answer.json() == {"jsonrpc": "2.0", "id": body["id"], "error": error}
    assert "Traceback" not in output, output
    assert "Exception in ASGI application" not in output, output


def test_a_server_that_never_answers_ends_the_start_after_its_30_s_in_one_line(tmp_path: Path) -> None:
    """A server that answers nothing: the start's 30 s (the revision probe and the shared process's ``initialize``
    together, not each) end it, in one line and exit status 2. Timed from its first process's start (each appends
    when it started), not the gateway's own, which a busy machine's interpreter start lengthens."""
    starts = tmp_path / "starts"
    wait = "import sys, time; open(sys.argv[1], 'a').write(repr(time.time()) + chr(10)); time.sleep(600)"
    server = [sys.executable, "-c", wait, str(starts)]
    done = gateway_run("--port", str(free_port()), "--stdio", shlex.join(server), "--process-containment", "none")
    elapsed = time.time() - float(starts.read_text().split()[0])
    said = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert elapsed < 45, elapsed  # loose (30 s and the process's stop): 60 s and more before
    why = "the server did not answer server/discover, its first request, within 30 s of the gateway's start"
    assert said[-1] == f"mcp-sessions gateway: {shlex.join(server)}: {why}", said
    assert not [line for line in said[:-1] if not re.match(r"\S+ INFO: ", line)], said  # the rest is the log
    assert len(starts.read_text().split()) == 1
    assert "handshake" not in done.stderr  # no era guessed, no 2nd process


NO_SDK = """\
import sys
class _NoSdk:  # the gateway installed without its extra: no mcp SDK to import
    def find_spec(self, name, path=None, target=None):
        if name == "mcp_types":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _NoSdk())
"""


def test_a_gateway_whose_app_cannot_be_built_says_so_in_one_line_and_leaves_no_process(tmp_path: Path) -> None:
    """Issue 112 (2): a ``--stdio`` gateway builds its app (imports the ``mcp`` SDK) as it starts, its shared process
    started beside; one it cannot build (here, no SDK) says so in one line, exit status 2, as where it built it
    before anything started, and the process started for it is stopped: uvicorn, told of no failure by an app
    never built, said its start was complete and served nothing."""
    (tmp_path / "sitecustomize.py").write_text(NO_SDK)
    pid = tmp_path / "pid"
    server = [sys.executable, "-c", "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); input()", str(pid)]
    line = [sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(free_port()), "--stdio", shlex.join(server)]
    line += ["--processes", "per-conversation", "--process-containment", "none"]
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), SERVER_PATH["PYTHONPATH"]])}
    done = subprocess.run(
        said_as_root(line),
        env={**environ, "MCP_SESSIONS_SECRET": SECRET},
        capture_output=True,
        text=True,
        timeout=WITHIN,
    )
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr.splitlines()[-1]
        == "mcp-sessions gateway: mcp_types is missing: pip install 'mcp-sessions[gateway]'"
    )
    if pid.exists():  # started before the import failed: stopped
        stat = Path(f"/proc/{pid.read_text()}/stat")
        assert not stat.exists() or stat.read_text().rpartition(")")[2].split()[0] == "Z"


GC_STATE = """\
import gc, os, signal
def _said(signum, frame):  # the collector's state, on SIGUSR1, which nothing else in the gateway handles
    with open(os.environ["GC_STATE"] + ".part", "w") as out:
        out.write(f"{gc.isenabled()} {gc.get_freeze_count()}")
    os.replace(os.environ["GC_STATE"] + ".part", os.environ["GC_STATE"])
signal.signal(signal.SIGUSR1, _said)
"""


def test_a_serving_gateway_collects_garbage_and_never_scans_what_its_start_made(tmp_path: Path) -> None:
    """The collector is off while the gateway is built (what its start makes, the ``mcp`` SDK's import among it,
    lives as long as the gateway: collections found nothing there to free, a tenth of the start's CPU), and on once
    it listens, what the start made frozen: a gateway that served with it off would never free a cycle."""
    (tmp_path / "sitecustomize.py").write_text(GC_STATE)
    state = tmp_path / "state"
    environ = {"PYTHONPATH": os.pathsep.join([str(tmp_path), SERVER_PATH["PYTHONPATH"]]), "GC_STATE": str(state)}
    with gateway_process([], "--stdio", shlex.join(SERVER), environ=environ) as process:
        assert process.process is not None
        process.process.send_signal(signal.SIGUSR1)
        until(state.exists, process.output)
    enabled, frozen = state.read_text().split()
    assert enabled == "True"
    assert int(frozen) > 20_000, frozen  # the SDK's import alone makes about 90,000


def test_a_port_in_use_is_one_line_and_exit_status_2_before_any_process_starts(tmp_path: Path) -> None:
    started = tmp_path / "started"
    server = [sys.executable, "-c", f"import pathlib; pathlib.Path({str(started)!r}).touch()"]
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        # by main in this process, as the command runs it: a fresh interpreter cost about a CPU-second
        options = ("--stdio", shlex.join(server), "--process-containment", "none")
        done = main_run("gateway", "--port", str(port), *options, environ={"MCP_SESSIONS_SECRET": SECRET})
    said = f"mcp-sessions gateway: --host 127.0.0.1 --port {port}: Address already in use\n"
    assert (done.returncode, done.stderr) == (2, said)
    assert not started.exists()  # the port first: no process ran
    assert gc.isenabled()  # off while the gateway was built, back on as its start ended


def test_a_sigterm_while_the_gateway_is_built_ends_its_start_with_exit_status_0(tmp_path: Path) -> None:
    """110.5: a SIGTERM before uvicorn heard signals (the gateway reading its ``--config`` file, making its
    sandboxes) ended it by the signal (-15), what it had made left; now it ends the start as one during its first
    process's start does: exit status 0, no server started, nothing of its left running. The file is a FIFO, as
    ``--config <(envsubst < servers.toml)`` gives it: the signal comes while the gateway reads it."""
    started = tmp_path / "started"
    server = [sys.executable, "-c", "import sys; open(sys.argv[1], 'a'); sys.stdin.read()", str(started)]
    servers = f"[servers.blocked]\nstdio = {json.dumps(shlex.join(server))}\nprocess-containment = 'none'\n"
    fifo = tmp_path / "servers.toml"
    os.mkfifo(fifo)
    line = said_as_root([sys.executable, "-m", "mcp_sessions", "gateway", "--port", "0", "--config", str(fifo)])
    environ = {**os.environ, "MCP_SESSIONS_SECRET": SECRET}

    def opened() -> int:  # once the gateway has opened it to read (ENXIO until then): no wait on one that ended
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)

    with subprocess.Popen(line, env=environ, stderr=subprocess.PIPE, text=True, start_new_session=True) as gateway:
        try:
            writer = until(opened, "the gateway reading its --config file", ignoring=(OSError,))
            gateway.send_signal(signal.SIGTERM)
            with contextlib.suppress(BrokenPipeError):
                os.write(writer, servers.encode())
            os.close(writer)
            said = gateway.communicate(timeout=WITHIN)[1]
            left = _in_session(gateway.pid)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(gateway.pid, signal.SIGKILL)
    assert gateway.returncode == 0, said
    assert "Traceback" not in said, said
    assert not started.exists()
    assert not left


HELD_LOADING = """\
import os, pathlib, signal, sys
class _Held:  # the gateway's modules, held as they start to load, until a signal
    def find_spec(self, name, path, target=None):
        if name == "mcp_sessions._gateway":
            sys.meta_path.remove(self)
            pathlib.Path(os.environ["LOADING"]).touch()
            signal.pause()
sys.meta_path.insert(0, _Held())
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_gateway_s_modules_load_ends_it_with_exit_status_0(tmp_path: Path, sig: int) -> None:
    """110.5: a SIGTERM before the gateway noted signals, as its modules loaded (the first half second of a start
    from exec), ended it by the signal (-15), and a Ctrl-C printed a traceback: nothing is made then, and it ends
    with exit status 0, as one during the rest of its start does."""
    (tmp_path / "sitecustomize.py").write_text(HELD_LOADING)
    loading = tmp_path / "loading"
    environ = {**os.environ, "PYTHONPATH": str(tmp_path), "LOADING": str(loading), "MCP_SESSIONS_SECRET": SECRET}
    line = [sys.executable, "-m", "mcp_sessions", "gateway", "--port", "0", "--upstream", "http://127.0.0.1:9/mcp"]
    with subprocess.Popen(line, env=environ, stderr=subprocess.PIPE, text=True) as gateway:
        try:
            until(loading.exists, "the gateway's modules loading")
            gateway.send_signal(sig)
            said = gateway.communicate(timeout=WITHIN)[1]
        finally:
            gateway.kill()
    assert (gateway.returncode, said) == (0, "")


def test_a_sigterm_as_the_start_ends_is_a_stopped_start_with_exit_status_0() -> None:
    """110.5: a SIGTERM as the app's start ended (an ``--upstream`` gateway's takes no time after uvicorn's "Waiting
    for application startup") cancelled the app once it had started: uvicorn was told of a failed start after its
    end (a traceback), and the signal, raised again, ended the gateway (-15). A start the signal meets is now a
    stopped start whichever comes first, its end or the cancel: exit status 0, no traceback."""
    upstream = f"http://127.0.0.1:{free_port()}/mcp"  # never reached: the start asks nothing of it
    status, left, _ = stopped_as_it_starts("--port", "0", "--upstream", upstream)
    assert status == 0, left
    assert "Traceback" not in left, left


def _in_session(session: int) -> list[int]:
    """The live processes of ``session`` (a gateway's, started in a session of its own)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rpartition(")")[2].split()
            if int(fields[3]) == session and fields[0] != "Z":
                found.append(int(stat.parent.name))
    return found


async def _pids_of_a_conversation(url: str) -> list[int]:
    """The pids of a conversation's process, of a process it started, and of the shared process."""
    async with Client(url, mode="legacy") as client:
        session = await create_session(client)
        own = (await whoami(client, session))["pid"]
        started = int(text_of(await client.call_tool("spawn", {}, meta=sdk_session_meta(session))))
        shared = (await whoami(client))["pid"]
        await client.call_tool("complain", {"line": "stderr line"}, meta=sdk_session_meta(session))
    return [own, started, shared]
