"""What a client keeps through ``mcp-sessions gateway --stdio`` (issue 77): a stock client that names nothing keeps
its server's state between its calls; a conversation named in ``_meta`` reaches its own process, whatever
connection it comes through; concurrent first requests of a conversation reach one process, on every store; and a
2025 transport session's ``DELETE`` ends its process, even while that process starts."""

from __future__ import annotations

import itertools
import json
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from _backends import STORES, open_backend
from _mcp import legacy_request, messages, modern_headers, modern_request
from _waits import WITHIN, until
from conftest import SECRET
from e2e._gateway import CACHE, installed, legacy_initialize, node, result_of
from e2e._stdio import COUNT, ENVIRON, SERVER, own_children, stdio_gateway
from mcp_sessions import SessionsConfig
from mcp_sessions._gateway.sealed._sandbox import SandboxPolicy

pytestmark = pytest.mark.anyio

MEMORY = CACHE / "memory/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
IDS = itertools.count(1)
PLAN = {"entities": [{"name": "launch", "entityType": "plan", "observations": ["on Friday"]}]}


@pytest.mark.parametrize("sessionless", ["per-caller", "per-request"])
async def test_a_stock_client_that_names_nothing_keeps_its_server_memory_graph(
    tmp_path: Path, sessionless: str
) -> None:
    """77.1: the ``mcp`` SDK's ``Client(url)`` (2026-07-28, naming no conversation) in front of server-memory, each
    process with a graph file of its own: by default (``--sessionless per-caller``) its ``read_graph`` has what its
    ``create_entities`` wrote; with ``per-request``, as before, each call had a process of its own: an empty graph."""
    index = installed(MEMORY, "@modelcontextprotocol/server-memory")
    server = ["sh", "-c", f"MEMORY_FILE_PATH=$HOME/memory.jsonl exec {node()} {index}"]  # $HOME: the process's own
    with stdio_gateway(server, sessionless=sessionless, sandbox=SandboxPolicy(cwd=f"{tmp_path}/{{id}}")) as url:
        async with Client(url) as client:
            await client.call_tool("create_entities", PLAN)
            graph = json.dumps((await client.call_tool("read_graph", {})).model_dump(mode="json"))

    assert ("launch" in graph) is (sessionless == "per-caller"), graph


def served(tmp_path: Path, command: list[str] = SERVER, **options: Any) -> Any:
    """The in-thread stdio gateway in front of ``command``, its processes' files (and marker) in ``tmp_path``."""
    return stdio_gateway(command, environ={**ENVIRON, "STDIO_TEST_FILES": str(tmp_path)}, **options)


def count(http: httpx.Client, url: str, headers: dict[str, str], meta: dict[str, Any] | None = None) -> Any:
    """A ``count`` call of the tests' server: 2025-11-25 in a transport session (``Mcp-Session-Id`` in ``headers``),
    else 2026-07-28; ``meta`` in its ``_meta``. Its result's text, or its error."""
    number = next(IDS)  # one transport session's requests in flight have ids of their own
    if "Mcp-Session-Id" in headers:
        body = legacy_request("tools/call", COUNT, id=number, meta=meta)
    else:
        body = modern_request("tools/call", COUNT, id=number, meta=meta or {})
        headers = {**modern_headers(body), **headers}
    answer = result_of(http.post(url, json=body, headers=headers), number)
    return answer["result"]["content"][0]["text"] if "result" in answer else answer["error"]


def test_the_requests_of_a_caller_that_name_nothing_are_one_conversation_of_hers(tmp_path: Path) -> None:
    """77.1: ``--sessionless per-caller`` (the default) in front of a server kept per conversation: one process per
    caller (her address here), for every request of hers that names no conversation; another caller's is her own."""
    a, b = {"X-Forwarded-For": "10.0.0.1"}, {"X-Forwarded-For": "10.0.0.2"}
    with served(tmp_path) as url, httpx.Client(timeout=WITHIN) as http:
        counts = [count(http, url, headers) for headers in (a, a, b, a)]
        processes = own_children(f"STDIO_TEST_FILES={tmp_path}")

    assert counts == ["1", "2", "1", "3"]
    assert len(processes) == 3  # the shared one, and one each


def test_a_conversation_named_in_meta_reaches_its_process_whatever_connection_it_comes_through(tmp_path: Path) -> None:
    """77.2: a host that keeps one connection (one 2025 transport session: VS Code's way through ``connect``) and names
    each request's conversation in ``_meta``: X, Y, X counted 1, 2, 3 in the transport session's process; now each
    conversation its own."""
    with served(tmp_path) as url, httpx.Client(timeout=WITHIN) as http:
        transport = legacy_initialize(http, url)
        counts = [count(http, url, transport, {"vscode.conversationId": name}) for name in ("x", "y", "x")]

    assert counts == ["1", "1", "2"]


@pytest.mark.parametrize("store", [name for name in STORES if name != "memory"])
def test_concurrent_first_requests_of_a_host_conversation_reach_one_process(tmp_path: Path, store: str) -> None:
    """77.3: two first requests of one new host conversation at once, on SQLite or Redis: the second was told "the
    server process of this conversation has ended" about half the time (it opened the conversation the first had
    opened while the store answered). Twelve conversations, each begun by two requests at once: one process each."""
    with (
        open_backend(store, tmp_path) as backend,
        served(
            tmp_path, config=SessionsConfig(secret=SECRET, store=backend.open()), max_processes_per_principal=12
        ) as url,
        httpx.Client(timeout=WITHIN) as http,
        ThreadPoolExecutor(2) as pool,
    ):
        begun = []
        for number in range(12):
            meta = {"vscode.conversationId": f"chat-{number}"}
            begun.append(sorted(map(str, pool.map(count, [http] * 2, [url] * 2, [{}] * 2, [meta] * 2))))

    assert begun == [["1", "2"]] * 12, begun


WAITING = (  # the tests' server, once the file "start" is in STDIO_TEST_FILES (at most 60 s)
    'i=0; until [ -e "$STDIO_TEST_FILES/start" ] || [ $i -ge 600 ]; do i=$((i+1)); sleep 0.1; done; '
    f"exec {shlex.join(SERVER)}"
)


def test_a_delete_ends_a_transport_sessions_process_even_while_it_starts(tmp_path: Path) -> None:
    """77.3: a 2025 client's ``DELETE`` within a second of its ``initialize`` got 200, and its process ran on for up
    to 600 s, counted against its caller. Its ``initialize`` starts no process now; and a ``DELETE`` that comes while
    the process its first call started is starting ends it: its call is answered with an error, never served."""
    (tmp_path / "start").touch()  # the shared process starts at once
    with (
        served(tmp_path, ["sh", "-c", WAITING]) as url,
        httpx.Client(timeout=WITHIN) as http,
        ThreadPoolExecutor(1) as pool,
    ):
        ours = partial(own_children, f"STDIO_TEST_FILES={tmp_path}")  # this gateway's processes alone
        (tmp_path / "start").unlink()
        ended = legacy_initialize(http, url)
        assert http.delete(url, headers=ended).status_code == 200
        assert len(ours()) == 1  # the shared process alone
        transport = legacy_initialize(http, url)
        call = pool.submit(http.post, url, json=legacy_request("tools/call", COUNT), headers=transport)
        until(lambda: len(ours()) == 2, "the first call's process, starting")
        assert http.delete(url, headers=transport).status_code == 200
        (tmp_path / "start").touch()
        answered = messages(call.result())
        until(lambda: len(ours()) == 1, "the process to end")

    assert not [message for message in answered if "result" in message], answered


def test_a_caller_looping_on_initialize_holds_a_bounded_number_of_connections(tmp_path: Path) -> None:
    """77.3's cost: a 2025 transport session's ``initialize`` starts no process, so the process limits no longer
    bound them; a caller's connections with no process are (eight times ``--max-processes-per-principal``), her
    oldest ended first (404: its client initializes again), where the ``mcp`` SDK alone keeps 10,000."""
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with served(tmp_path, max_processes_per_principal=1) as url, httpx.Client(timeout=WITHIN) as http:
        connections = [legacy_initialize(http, url) for _ in range(9)]
        answered = [http.post(url, json=ping, headers=headers).status_code for headers in connections]

    assert answered == [404] + [200] * 8


def test_the_sessionless_argument_is_one_of_three() -> None:
    from mcp_sessions._gateway._config import StdioProcesses

    with pytest.raises(ValueError, match="'per-caller', 'per-request' or 'shared'"):
        StdioProcesses(command=(sys.executable,), sessionless="per-host")  # type: ignore[arg-type]
