"""``mcp-sessions gateway --stdio`` stopped as an orchestrator stops it: SIGTERM (or Ctrl-C) drains it first.

The gateway as its own process, the tests' stdio server's ``hold`` tool holding a call in flight until the test
says ``go``: a call in flight from a 2026-07-28 client, a 2025-11-25 client (the SDK's legacy mode) and ``connect``
as Claude Code starts it ends with its answer; meanwhile ``/readyz`` says 503, ``/healthz`` 200, and a request that
would open a conversation gets 503 with ``Retry-After`` (``-32014``); then the gateway stops, as the signal says.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from _mcp import legacy_request, modern_headers, modern_request
from _redis import free_port
from _waits import WITHIN, until, until_awaited
from e2e._gateway import INITIALIZE, JSON_SSE, PYTHONPATH, SECRET, Process, gateway_process
from e2e._issuer import ISSUER, jwks
from e2e._stdio import SERVER_PATH, text_of
from mcp_sessions._gateway._serving import CUT, CUT_DATA

pytestmark = pytest.mark.anyio

RESTARTING = -32014
INTERNAL_ERROR = -32603


@contextlib.contextmanager
def holding_gateway(files: Path, *flags: str) -> Iterator[Process]:
    """The gateway in front of the tests' server, its files (``held``, ``go``) in ``files``, logging what it does."""
    environ = {**SERVER_PATH, "STDIO_TEST_FILES": str(files)}
    server = f"{sys.executable} -m e2e._plain_stdio"
    with gateway_process([], "--stdio", server, "--log-level", "info", *flags, environ=environ) as gateway:
        yield gateway


def gateway_on(port: int, files: Path) -> Process:
    """The gateway of :func:`holding_gateway` on ``port``, as a restart starts it again on its port."""
    environ = {"MCP_SESSIONS_SECRET": SECRET, **SERVER_PATH, "STDIO_TEST_FILES": str(files)}
    server = ("--stdio", f"{sys.executable} -m e2e._plain_stdio", "--pass-env", "PYTHONPATH")
    flags = ["--pass-env", "STDIO_TEST_FILES", "--processes", "per-conversation", "--warm", "0"]
    flags += ["--process-containment", "none", "--log-level", "info", "--shutdown-timeout", "120"]
    command = [sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(port), *server, *flags]
    return Process("gateway", command, environ, port)


@contextlib.asynccontextmanager
async def client_of(
    kind: str, url: str, state: Path, conversation: str = "conversation-drained"
) -> AsyncIterator[Client]:
    """A client of ``kind``: the SDK's, in 2026-07-28 or its legacy mode, or ``connect`` started as Claude Code
    starts it (its conversation in the environment), the SDK's legacy client its host."""
    if kind != "connect":
        async with Client(url, mode="auto" if kind == "2026-07-28" else "legacy") as client:
            yield client
        return
    environ = {"PYTHONPATH": PYTHONPATH, "XDG_STATE_HOME": str(state), "CLAUDECODE": "1"}
    environ["CLAUDE_CODE_SESSION_ID"] = conversation
    shim = StdioServerParameters(command=sys.executable, args=["-m", "mcp_sessions", "connect", url], env=environ)
    async with Client(stdio_client(shim), mode="legacy") as client:
        yield client


def opening(kind: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A request that opens a conversation, and its headers: a 2025 ``initialize``, a 2026-07-28 ``sessions/create``,
    or a 2026-07-28 call naming a host conversation the gateway has not served."""
    if kind == "initialize":
        return legacy_request("initialize", INITIALIZE, id=0), JSON_SSE
    if kind == "sessions/create":
        body = modern_request("sessions/create", {})
    else:
        meta = {"vscode.conversationId": "opened-while-draining"}
        body = modern_request("tools/call", {"name": "count", "arguments": {}}, meta=meta)
    return body, modern_headers(body)


async def probe(http: httpx.AsyncClient, url: str) -> tuple[int, int]:
    ready, healthy = await http.get(url + "/readyz"), await http.get(url + "/healthz")
    return ready.status_code, healthy.status_code


@pytest.mark.parametrize("kind", ["2026-07-28", "2025-11-25", "connect"])
async def test_sigterm_drains_a_call_in_flight_to_its_answer(kind: str, tmp_path: Path) -> None:
    """Issue 94, item 1: a 2025 client's call (and Claude Code's, through ``connect``) was cut at SIGTERM at once
    with ``-32603 ... (the gateway is shutting down)``. Now each kind of client's call in flight gets its answer,
    however long it takes within ``--shutdown-timeout``; meanwhile the gateway says it is not ready, refuses what
    would open a conversation (or a stream, which would hold the stop) with a retryable answer, and stops as SIGTERM
    says once the call is answered."""
    answers: list[str] = []
    with holding_gateway(tmp_path, "--shutdown-timeout", "120") as gateway:
        base, process = gateway.url(""), gateway.process
        assert process is not None
        # The 2026-07-28 call by hand: the SDK's client, in its auto mode, may send again once the call is answered,
        # and find the gateway stopped, as it is meant to be by then.
        modern = kind == "2026-07-28"
        opened = contextlib.nullcontext() if modern else client_of(kind, gateway.url(), tmp_path)
        async with httpx.AsyncClient(timeout=30) as http, httpx.AsyncClient(timeout=120) as caller, opened as client:
            assert await probe(http, base) == (200, 200)
            if client is not None:  # the SDK lists the tools to check an answer unless it has: listed here, not
                await client.list_tools()  # after the held answer, when the gateway has stopped, as it is meant to

            async def held() -> None:
                if client is not None:
                    answers.append(text_of(await client.call_tool("hold", {})))
                    return
                body = modern_request("tools/call", {"name": "hold", "arguments": {}})
                answered = (await caller.post(gateway.url(), json=body, headers=modern_headers(body))).json()
                answers.append(answered["result"]["content"][0]["text"])

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(held)
                await until_awaited(lambda: (tmp_path / "held").exists(), "the call to reach its process")
                process.send_signal(signal.SIGTERM)
                await until_awaited(lambda: b"draining" in gateway.log(), "the drain to begin")
                assert await probe(http, base) == (503, 200)
                for opens in ("initialize", "sessions/create", "host conversation"):
                    body, headers = opening(opens)
                    refused = await http.post(gateway.url(), json=body, headers=headers)
                    assert (refused.status_code, refused.headers["retry-after"]) == (503, "1"), refused.text
                    assert refused.json()["error"]["code"] == RESTARTING
                stream = await http.get(
                    gateway.url(), headers={"Accept": "text/event-stream"}
                )  # it would hold the stop
                assert (stream.status_code, stream.headers["retry-after"]) == (503, "1"), stream.text
                assert process.poll() is None  # still listening, still serving the call
                (tmp_path / "go").touch()
        assert process.wait(WITHIN) == -signal.SIGTERM
    assert answers == ["held"]


async def test_calls_back_to_back_do_not_hold_the_drain_to_its_bound(tmp_path: Path) -> None:
    """A conversation whose calls come back to back, as SIGTERM comes while another's call is in flight: its calls
    are answered until the call in flight at the signal is, then its next is refused with a retryable answer (503,
    ``Retry-After``, ``-32014``), and the drain ends with the calls in flight, not at ``--shutdown-timeout`` (it
    ran to the bound: there was never a moment with no call in flight, and the calls then in flight were cut). So is
    the next call of a 2025 transport session, whose answers are event streams (a 200 stream told ``-32014``, which
    a client does not send again, failed a rolling restart's call)."""
    meta = {"vscode.conversationId": "calling-back-to-back"}
    body = modern_request("tools/call", {"name": "count", "arguments": {}}, meta=meta)
    counts: list[int] = []
    with holding_gateway(tmp_path, "--shutdown-timeout", "120") as gateway:
        process = gateway.process
        assert process is not None
        async with httpx.AsyncClient(timeout=30) as http, httpx.AsyncClient(timeout=120) as holding:

            async def call() -> httpx.Response:
                return await http.post(gateway.url(), json=body, headers=modern_headers(body))

            counts.append(int(text_of_answer(await call())))  # its conversation, opened before the signal
            opened = await http.post(
                gateway.url(), json=legacy_request("initialize", INITIALIZE, id=0), headers=JSON_SSE
            )
            transport = {**JSON_SSE, "MCP-Protocol-Version": "2025-11-25"}
            transport["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.post(gateway.url(), json=initialized, headers=transport)).status_code == 202
            hold = modern_request("tools/call", {"name": "hold", "arguments": {}})
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(partial(holding.post, gateway.url(), json=hold, headers=modern_headers(hold)))
                await until_awaited(lambda: (tmp_path / "held").exists(), "the call to reach its process")
                process.send_signal(signal.SIGTERM)
                await until_awaited(lambda: b"draining" in gateway.log(), "the drain to begin")
                for _ in range(3):  # back to back while the held call is in flight: answered
                    counts.append(int(text_of_answer(await call())))
                # one more of its calls, held in flight past the signalled call's answer: the drain goes on
                later = modern_request("tools/call", {"name": "hold", "arguments": {"name": "-later"}}, meta=meta)
                tasks.start_soon(partial(holding.post, gateway.url(), json=later, headers=modern_headers(later)))
                await until_awaited(lambda: (tmp_path / "held-later").exists(), "its call to reach its process")
                (tmp_path / "go").touch()
                await until_awaited(lambda: b"at the signal are answered" in gateway.log(), "the held call's answer")
                refused = await call()
                count = legacy_request("tools/call", {"name": "count", "arguments": {}}, id=1)
                refused_legacy = await http.post(gateway.url(), json=count, headers=transport)
                (tmp_path / "go-later").touch()
        assert process.wait(WITHIN) == -signal.SIGTERM  # with the calls in flight, not 120 s later
    assert counts == [1, 2, 3, 4]
    for each in (refused, refused_legacy):
        assert (each.status_code, each.headers["retry-after"]) == (503, "1"), each.text
        assert each.json()["error"]["code"] == RESTARTING
    assert refused_legacy.json()["id"] == 1


def text_of_answer(answer: httpx.Response) -> str:
    """A 2026-07-28 ``tools/call``'s text, from its JSON answer."""
    assert answer.status_code == 200, answer.text
    return str(answer.json()["result"]["content"][0]["text"])


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_second_ctrl_c_ends_the_drain_at_once_quietly(mode: str, tmp_path: Path) -> None:
    """Issue 94, item 6 (Why, 5): the first Ctrl-C drains; a second, as uvicorn's own line invites, ends the drain
    at once, and the gateway ends with 0 and no traceback (it printed the lifespan's ``CancelledError``), every
    cancellation of a planned stop said as INFO. Issue 101, item 7: the call in flight, which its server may have
    run, was told "send the request again" (``-32014``), which ran a ``write_file`` twice; now, in either era, it is
    told that it may have run (``-32603``, ``data.mayHaveRun``), in its answer (a 2025 client's event stream, a
    2026-07-28 client's JSON), never a 503 its client would send again."""
    with holding_gateway(tmp_path, "--shutdown-timeout", "120") as gateway:
        process = gateway.process
        assert process is not None
        async with Client(gateway.url(), mode=mode) as client, anyio.create_task_group() as tasks:
            cut: list[MCPError] = []

            async def held() -> None:
                with pytest.raises(MCPError) as told:
                    await client.call_tool("hold", {})
                cut.append(told.value)

            tasks.start_soon(held)
            await until_awaited(lambda: (tmp_path / "held").exists(), "the call to reach its process")
            process.send_signal(signal.SIGINT)
            await until_awaited(lambda: b"draining" in gateway.log(), "the drain to begin")
            process.send_signal(signal.SIGINT)
            await until_awaited(lambda: process.poll() is not None, "the gateway to stop")  # not the call's 120 s
            status = process.returncode
        said = gateway.log().decode()
    assert status == 0, said
    assert "Traceback" not in said, said
    assert "ERROR" not in said, said
    assert [(error.error.code, error.error.message, error.error.data) for error in cut] == [
        (INTERNAL_ERROR, CUT, CUT_DATA)
    ]


def test_the_probes_answer_without_credentials_and_say_nothing_more(tmp_path: Path) -> None:
    """``/readyz`` and ``/healthz`` on the gateway's own port, which asks every other request for a bearer token:
    200 and ``ok`` alone, for an orchestrator that holds none."""
    with jwks() as keys:
        auth = ("--auth-jwks", keys, "--auth-issuer", ISSUER, "--auth-audience", "https://mcp.example.com/mcp")
        with holding_gateway(tmp_path, *auth) as gateway, httpx.Client(timeout=30) as http:
            assert http.post(gateway.url(), json=legacy_request("ping", {})).status_code == 401
            for path in ("/readyz", "/healthz"):
                answer = http.get(gateway.url(path))
                assert (answer.status_code, answer.text) == (200, "ok\n")


def test_a_gateway_with_nothing_in_flight_stops_at_once_on_sigterm(tmp_path: Path) -> None:
    """No call in flight: the drain has nothing to wait for, and the gateway stops as it did (its ``-15``)."""
    with holding_gateway(tmp_path, "--shutdown-timeout", "120") as gateway:
        assert gateway.process is not None
        until(lambda: b"startup complete" in gateway.log(), "the gateway to start")
        gateway.process.send_signal(signal.SIGTERM)
        assert gateway.process.wait(WITHIN) == -signal.SIGTERM


async def test_a_restart_within_connects_bound_costs_a_new_conversation_nothing(tmp_path: Path) -> None:
    """A Claude Code conversation that starts while the gateway drains: its ``initialize`` is answered 503 (the
    draining gateway's), then its connection refused (none listens until the next gateway does); ``connect`` sends
    it again until the restarted gateway answers, within its bound, and the host sees no error. A conversation of
    before the restart is told once (``-32043``) that its session ended with its process, then goes on."""
    port, url = free_port(), ""
    first = gateway_on(port, tmp_path)
    answers: list[str] = []
    try:
        url = first.url()
        async with (
            client_of("connect", url, tmp_path / "old", "conversation-before") as before,
            client_of("2025-11-25", url, tmp_path) as holding,
            anyio.create_task_group() as tasks,
        ):
            assert text_of(await before.call_tool("count", {})) == "1"
            await holding.list_tools()  # as above: not after the held answer, when the gateway has stopped

            async def held() -> None:
                answers.append(text_of(await holding.call_tool("hold", {})))

            async def started_while_draining() -> None:
                async with client_of("connect", url, tmp_path / "new", "conversation-new") as new:
                    answers.append(text_of(await new.call_tool("count", {})))

            tasks.start_soon(held)
            await until_awaited(lambda: (tmp_path / "held").exists(), "the call to reach its process")
            assert first.process is not None
            first.process.send_signal(signal.SIGTERM)
            await until_awaited(lambda: b"draining" in first.log(), "the drain to begin")
            tasks.start_soon(started_while_draining)
            await until_awaited(lambda: b'"POST /mcp HTTP/1.1" 503' in first.log(), "the new conversation refused")
            (tmp_path / "go").touch()
            stopped = first.process
            await until_awaited(lambda: stopped.poll() is not None, "the drained gateway to stop")
            assert stopped.returncode == -signal.SIGTERM
            first.stop()
            first = await anyio.to_thread.run_sync(gateway_on, port, tmp_path)
            await until_awaited(lambda: len(answers) == 2, "the new conversation's call")
            with pytest.raises(MCPError) as lost:
                await before.call_tool("count", {})
            assert lost.value.error.code == -32043
            assert text_of(await before.call_tool("count", {})) == "1"
    finally:
        first.stop()
    assert answers == ["held", "1"]


def test_a_drained_stop_writes_nothing_of_uvicorns_and_no_other_librarys_setting() -> None:
    """Issue 102, item 4: the drain wrote uvicorn's ``config.timeout_graceful_shutdown`` (what was left of its bound)
    and its private ``_captured_signals``, and turned sse-starlette's ``AppStatus.enable_automatic_graceful_drain``
    off for the whole process while the gateway served: each breaks silently as they change. Now the gateway, run in
    this process, drains through what uvicorn lets a subclass override: the call in flight at Ctrl-C is answered,
    then the gateway stops and raises the signal again (here to the test's handler), and uvicorn's configuration,
    its private list and sse-starlette's setting are as they were, during the drain and after it."""
    from sse_starlette.sse import AppStatus
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from mcp_sessions import SessionsConfig
    from mcp_sessions._gateway._config import Forwarding, GatewayConfig, Listening
    from mcp_sessions._gateway._lifecycle import Gateway
    from mcp_sessions._gateway._serving import Listener, bind

    during: list[bool] = []

    async def hold(request: Request) -> PlainTextResponse:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, with this call in flight
        await until_awaited(gateway.stop_asked, "the drain to begin")
        during.append(AppStatus.enable_automatic_graceful_drain)
        return PlainTextResponse("held")

    bound = bind("127.0.0.1", 0)
    port = bound.getsockname()[1]
    upstream = Forwarding(("http://127.0.0.1:9/mcp",), None, 1.0, 1.0, 1.0)
    config = GatewayConfig(
        serves=upstream, listening=Listening("127.0.0.1", port, "info", 30.0), sessions=SessionsConfig(secret=SECRET)
    )
    gateway = Gateway(Starlette(routes=[Route("/hold", hold, methods=["POST"])]), config)
    answers: list[str] = []

    def call() -> None:
        until(lambda: gateway.started, "the gateway to start")
        answers.append(httpx.post(f"http://127.0.0.1:{port}/hold", timeout=WITHIN).text)

    raised: list[int] = []
    caller = threading.Thread(target=call)
    interrupted = signal.signal(signal.SIGINT, lambda sig, _: raised.append(sig))
    try:
        caller.start()
        status = gateway.run_until_stopped(Listener(bound), io.StringIO())
    finally:
        signal.signal(signal.SIGINT, interrupted)
        caller.join(WITHIN)
    assert (status, answers, raised) == (0, ["held"], [signal.SIGINT])
    assert during == [AppStatus.enable_automatic_graceful_drain] == [True]
    assert gateway.config.timeout_graceful_shutdown == 30.0
    assert vars(gateway)["_captured_signals"] == []  # uvicorn's own, never the gateway's to write
