"""A deploy invisible where the state is kept (issue 101, item 2): ``@modelcontextprotocol/server-memory`` behind a
real ``gateway --stdio`` process, its memory file in a directory granted to its processes
(``--process-mount DIR:/tmp/mine:rw``), declared so (``--conversation-state disk``). Live conversations of every kind
of client write to its graph; the gateway is restarted (SIGTERM, and started again on its port), then killed
(SIGKILL, and started again); each conversation's next calls get a new process, which reads the graph from the disk,
and no client sees an error: the ``mcp`` SDK's 2026-07-28 client in a data-layer session, its 2025-11-25 client in a
transport session the gateway minted, Claude Code's ``mcp-sessions connect``, and raw HTTP naming a host's
conversation. Where the state lived in the process (the default), the end is told once, as
``test_connect.py``'s ``test_after_the_gateway_restarts_the_host_hears_it_once_then_has_a_new_session`` shows.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import httpx
import pytest

from _mcp import legacy_request
from _redis import end_process, free_port
from _waits import WITHIN, until, until_awaited
from e2e._clients import CLIENTS, Conversations
from e2e._gateway import (
    CACHE,
    JSON_SSE,
    SECRET,
    Process,
    for_every_uid,
    installed,
    legacy_initialize,
    node,
    readable_directory,
    result_of,
)
from e2e._issuer import ISSUER, jwks, signed
from e2e._sealed import needs
from e2e._stdio import COUNT, ENVIRON, own_children, stdio_gateway
from mcp_sessions import SessionsConfig
from mcp_sessions._gateway.auth._users import GatewayAuth
from mcp_sessions._gateway.http._replicas import TransportIds
from mcp_sessions._gateway.stdio._server import _record
from mcp_sessions.stores import store_from_url

pytestmark = pytest.mark.anyio

MEMORY = CACHE / "memory/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
AUDIENCE = "https://mcp.example.com/mcp"


class Restartable:
    """The gateway as its own process on one port, restarted there with the same secret: stopped as ``how`` says
    (SIGTERM: its drain and shutdown; SIGKILL: nothing it held is answered), then started again."""

    def __init__(self, command: str, granted: Path, *state: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        flags = ["--stdio", command, "--processes", "per-conversation", "--warm", "0", *state]
        flags += ["--process-mount", f"{granted}:/tmp/mine:rw", "--process-network", "none", "--log-level", "info"]
        self.command = [sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(self.port), *flags]
        self.said: list[str] = []
        self.process = self._started()

    def _started(self) -> Process:
        return Process("gateway", self.command, {"MCP_SESSIONS_SECRET": SECRET}, self.port)

    def restart(self, how: signal.Signals) -> None:
        assert self.process.process is not None
        if how is signal.SIGKILL:
            end_process(self.process.process, kill=True)
        self.said.append(self.process.stop().decode(errors="replace"))
        self.process = self._started()

    def stop(self) -> None:
        self.said.append(self.process.stop().decode(errors="replace"))


@pytest.mark.timeout(300)
async def test_a_restart_and_a_kill_of_the_gateway_are_invisible_where_the_state_is_on_disk() -> None:
    """Each client's conversation writes an entity; after a restart, then after a SIGKILL, its next calls read the
    graph (every entity there) from new processes: no error, none told its conversation ended."""
    needs("root", "bwrap")
    memory = installed(MEMORY, "@modelcontextprotocol/server-memory")
    with (
        for_every_uid(memory, CACHE / "memory") as index,
        readable_directory("mcp-sessions-memory-") as granted,
        tempfile.TemporaryDirectory() as state,
    ):
        command = f"env MEMORY_FILE_PATH=/tmp/mine/memory.jsonl {node()} {index}"
        gateway = Restartable(command, granted, "--conversation-state", "disk")
        conversations = Conversations()
        try:
            async with conversations.opened(gateway.url, Path(state)):
                for n, kind in enumerate(CLIENTS):
                    entity = {"name": f"entity-{n}", "entityType": "note", "observations": [kind]}
                    await conversations.call(kind, "create_entities", {"entities": [entity]})
                for how in (signal.SIGTERM, signal.SIGKILL):
                    await anyio.to_thread.run_sync(gateway.restart, how)
                    for kind in CLIENTS:
                        graph = await conversations.call(kind, "read_graph", {})
                        assert all(f"entity-{n}" in graph for n in range(len(CLIENTS))), (kind, graph)
        finally:
            gateway.stop()
    assert conversations.errors == [], (conversations.errors, gateway.said)
    assert conversations.answered == len(CLIENTS) * 3, conversations.answered
    logged = "".join(gateway.said)
    assert "Traceback" not in logged, logged[-4000:]


def as_user(user: str) -> dict[str, str]:
    token = signed({"iss": ISSUER, "aud": AUDIENCE, "sub": user, "exp": int(time.time()) + 600})
    return {"Authorization": f"Bearer {token}"}


def test_a_transport_session_opened_again_is_its_caller_s_alone() -> None:
    """A 2025 transport session id the gateway does not have (one another gateway with the same keys gave out, as
    after a restart) is opened again for the caller that names it, within her own conversation: bob's calls naming
    it reach one process of his, which counts on; alice naming the same id reaches a new one of hers, never his, and
    his goes on."""
    with jwks() as keys:
        auth = GatewayAuth(jwks_url=keys, issuer=ISSUER, audience=AUDIENCE)
        with (
            stdio_gateway(auth=auth, state="disk") as elsewhere,
            stdio_gateway(auth=auth, state="disk") as url,
            httpx.Client(timeout=60) as http,
        ):
            minted = legacy_initialize(http, elsewhere, as_user("bob"))["Mcp-Session-Id"]

            def call(user: str, tool: str, request_id: int) -> str:
                headers = {**JSON_SSE, "MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": minted, **as_user(user)}
                body = legacy_request("tools/call", {"name": tool, "arguments": {}}, id=request_id)
                response = http.post(url, json=body, headers=headers)
                assert response.headers.get("mcp-session-id") in (None, minted)  # never the new id
                return str(result_of(response, request_id)["result"]["content"][0]["text"])

            his = [call("bob", "whoami", 1), call("bob", "count", 2), call("bob", "count", 3)]
            hers = [call("alice", "whoami", 1), call("alice", "count", 2)]
            his.append(call("bob", "count", 4))  # his, as it was: hers took nothing of it
    assert his[1:] == ["1", "2", "3"]
    assert hers[1] == "1"  # a conversation of her own
    assert json.loads(his[0])["pid"] != json.loads(hers[0])["pid"]


async def test_a_reopened_transport_session_declares_what_its_client_declared(tmp_path: Path) -> None:
    """A 2025 client declares roots and sampling at its ``initialize``; its gateway is replaced by another on the
    same store (SQLite: two apps on one file, as a restart or another replica is): its transport session, opened
    again there, declares what she declared, so the server's ``roots/list`` reaches her after as before (it was
    answered "no roots" for her: the reopening declared nothing), and its ``sampling/createMessage`` too; her
    ``DELETE`` forgets it."""
    url_of_store = f"sqlite:///{tmp_path}/sessions.db"
    answers: dict[str, object] = {
        "roots/list": {"roots": [{"uri": "file:///work/hers"}]},
        "sampling/createMessage": {"role": "assistant", "content": {"type": "text", "text": "hers"}, "model": "m"},
    }
    asked: list[str] = []
    headers = {**JSON_SSE, "MCP-Protocol-Version": "2025-11-25"}

    async def call(http: httpx.AsyncClient, url: str, session: str, tool: str, request_id: int) -> str:
        """A ``tools/call`` in her transport session, each request of the server's on its stream answered."""
        held = {**headers, "Mcp-Session-Id": session}
        arguments = {"prompt": "hi"} if tool == "sample" else {}
        body = legacy_request("tools/call", {"name": tool, "arguments": arguments}, id=request_id)
        async with http.stream("POST", url, json=body, headers=held) as response:
            async for line in response.aiter_lines():  # the stream ends with the call's answer
                message = json.loads(line.removeprefix("data:")) if line.startswith("data:") else {}
                if message.get("id") == request_id and "method" not in message:
                    return str(message["result"]["content"][0]["text"])
                if "method" in message:
                    asked.append(message["method"])
                    answer = {"jsonrpc": "2.0", "id": message["id"], "result": answers[message["method"]]}
                    assert (await http.post(url, json=answer, headers=held)).status_code == 202
        raise AssertionError(f"{tool}: no answer")

    def gateway() -> contextlib.AbstractContextManager[str]:
        return stdio_gateway(config=SessionsConfig(secret=SECRET, store=store_from_url(url_of_store)), state="disk")

    hello = {"protocolVersion": "2025-11-25", "capabilities": {"roots": {"listChanged": True}, "sampling": {}}}
    hello["clientInfo"] = {"name": "hers", "version": "1"}
    kept = store_from_url(url_of_store)
    async with httpx.AsyncClient(timeout=60) as http:
        with gateway() as before:
            opened = await http.post(before, json=legacy_request("initialize", hello, id=0), headers=headers)
            session = opened.headers["mcp-session-id"]
            done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await http.post(before, json=done, headers={**headers, "Mcp-Session-Id": session})
            seen = [await call(http, before, session, "roots", 1)]
            # kept as her handshake ends (the SDK's handler of notifications/initialized runs beside its 202)
            record = _record(minted_as(session), ())
            await until_awaited(lambda: kept.get(record, "capabilities"), "her capabilities kept")
        with gateway() as after:
            seen += [await call(http, after, session, "roots", 2), await call(http, after, session, "sample", 3)]
            ended = await http.delete(after, headers={**headers, "Mcp-Session-Id": session})
            assert ended.status_code == 200 and await kept.get(record, "capabilities") is None  # forgotten
    await kept.aclose()
    assert seen == ["file:///work/hers", "file:///work/hers", "hers"]
    assert asked == ["roots/list", "roots/list", "sampling/createMessage"]


def minted_as(session: str) -> bytes:
    """The SDK's id of the transport session a client holds as ``session`` (the gateway's signed id of it)."""
    verified = TransportIds(SessionsConfig(secret=SECRET).keys).verify(session.encode())
    assert verified is not None, session
    return verified[1]


@pytest.mark.parametrize("state", ["process", "disk"])
def test_a_made_up_transport_session_id_starts_no_process(tmp_path: Path, state: str) -> None:
    """110.6: a stdio gateway, whose sessions adopt 2025 transport sessions, one process started ahead (``--warm 1``):
    a request naming an ``Mcp-Session-Id`` no gateway gave out (one the SDK could have minted, the client's own
    altered) gets 404 "Session not found", and no process starts, nor is the one started ahead taken. Under
    ``--conversation-state disk`` it was opened as a transport session of the caller's, and its call served by a
    process of its own (the one started ahead, another started in its place); a genuine id is opened again there
    (``test_a_transport_session_opened_again_is_its_caller_s_alone``)."""
    marker = f"STDIO_TEST_FILES={tmp_path}"
    environ = {**ENVIRON, "STDIO_TEST_FILES": str(tmp_path)}
    with stdio_gateway(environ=environ, warm=1, state=state) as url, httpx.Client(timeout=WITHIN) as http:
        # the shared process and the one started ahead, counted apart from what a request starts
        ahead = until(lambda: found if len(found := own_children(marker)) == 2 else None, "one started ahead")
        genuine = legacy_initialize(http, url)
        held = genuine["Mcp-Session-Id"]
        refused = []
        for made_up in (uuid.uuid4().hex, held[:-1] + ("A" if held[-1] != "A" else "B")):
            named = {**genuine, "Mcp-Session-Id": made_up}
            posted = {"json": legacy_request("tools/call", COUNT, id=2), "headers": named}
            listened = {"headers": {**named, "Accept": "text/event-stream"}}
            for method, given in (("POST", posted), ("GET", listened)):
                with http.stream(method, url, **given) as answer:  # a stream opened for it would never end
                    refused.append((answer.status_code, answer.read() if answer.status_code == 404 else b""))
        started = own_children(marker) - ahead
        served = result_of(http.post(url, json=legacy_request("tools/call", COUNT, id=3), headers=genuine), 3)

    not_found = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}})
    assert [(status, json.loads(body or "null")) for status, body in refused] == [(404, json.loads(not_found))] * 4
    assert started == set()
    assert served["result"]["content"][0]["text"] == "1"  # the genuine id's call: its own process (the one ahead)
