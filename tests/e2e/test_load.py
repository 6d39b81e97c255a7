"""Load: 128 concurrent sessions x 20 calls against the quickstart in real uvicorn processes.

Two server processes (so that the load generator never shares their event loop): one answers
JSON, the other SSE. Sessions alternate between them, and twice as many are open as requests may be
in flight, so that every server always holds requests of many sessions at once. Every response is
checked (:func:`conversation`). The servers' resident memory after a warm-up round and after the
full run must stay flat. ``pytest -m soak`` runs a longer soak (200 sessions x 50 calls a round,
deselected by default); ``MCP_SESSIONS_SOAK_ROUNDS`` sets its length.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from _mcp import SESSION_KEY, answer, jwt_claims, messages, modern_headers, modern_request
from _redis import end_process
from _waits import until
from conftest import SECRET

ROOT = Path(__file__).resolve().parents[2]
MB = 1024 * 1024

CONCURRENCY = 64  # requests in flight at once, at most
SESSIONS = 2 * CONCURRENCY
CALLS = 20  # per session: count and whoami, state set twice and read twice, one countdown (see plan)
# The run adds a MemoryStore entry a session and a few hundred entries to the KeySet's token caches
# (a few hundred bytes an entry): under 1 MB a server. The rest of any growth is allocator noise.
# Each server answers SESSIONS / 2 sessions x (CALLS + 3) requests (1,472): a leak of 10 KB a
# request (15 MB) or 250 KB a session (16 MB) would pass this limit.
RSS_GROWTH_LIMIT = 14 * MB
# The soak's rounds: as the load test once was, round after round.
SOAK_SESSIONS, SOAK_CALLS = 200, 50
SOAK_GROWTH_LIMIT = 100 * MB

SERVER = """
import socket, sys
import uvicorn
from examples.quickstart import build_app

fd, mode = int(sys.argv[1]), sys.argv[2]
app = build_app(json_response=mode == "json", stateless=True)
# A keep-alive longer than the client's timeout: uvicorn closing an idle pooled connection just as the
# client reuses it is a race between uvicorn and httpx, not what this test is about.
config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2, timeout_keep_alive=120)
uvicorn.Server(config).run(sockets=[socket.socket(fileno=fd)])
"""


@dataclass
class Server:
    mode: str
    url: str
    process: subprocess.Popen[bytes]

    def rss(self) -> int:
        """The process's resident set size in bytes, from /proc/<pid>/status."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS line")


def start(mode: str, log: Path) -> Server:
    """A uvicorn process serving the quickstart on a socket bound here (no port race); its output goes to ``log``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    env = {**os.environ, "MCP_SESSIONS_SECRET": SECRET, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(sock.fileno()), mode],
            pass_fds=[sock.fileno()],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    server = Server(mode, f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", process)
    sock.close()  # the child holds its own copy
    probe = modern_request("server/discover", id=0)

    def answering() -> bool:
        assert process.poll() is None, f"the {mode} server exited: {log.read_text()[-2000:]}"
        # The listening socket queues this until the server accepts it.
        httpx.post(server.url, json=probe, headers=modern_headers(probe), timeout=2).raise_for_status()
        return True

    try:
        until(
            answering,
            lambda: f"the {mode} server did not start: {log.read_text()[-2000:]}",
            ignoring=(httpx.HTTPError,),
        )
    except BaseException:
        end_process(server.process)
        raise
    return server


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    logs = tmp_path_factory.mktemp("load")
    started: list[Server] = []
    try:
        for mode in ("json", "sse"):
            started.append(start(mode, logs / f"{mode}.log"))
        yield started
    finally:
        for server in started:
            end_process(server.process)


@dataclass
class Tally:
    requests: int = 0
    errors: list[str] = field(default_factory=list)


def plan(number: int, step: int) -> tuple[str, dict[str, Any]]:
    """Session ``number``'s call ``step``: mostly count and whoami, sometimes state, once a countdown."""
    if step == 5:
        return "countdown", {"n": 1}
    if step % 10 == 3:
        return "set_mode", {"mode": f"mode-{number}-{step}"}  # one no other session sets
    if step % 10 == 7:
        return "get_mode", {}
    return ("count", {}) if step % 2 == 0 else ("whoami", {})


async def conversation(
    http: httpx.AsyncClient, server: Server, number: int, calls: int, gate: anyio.Semaphore, tally: Tally
) -> None:
    """One session: create, ``calls`` tool calls, delete, then one refused call. Every answer is checked."""

    doing = "sessions/create"  # what the error names, should one come

    async def post(body: dict[str, Any]) -> httpx.Response:
        nonlocal doing
        params = body.get("params") or {}
        doing = f"{body['method']} {params.get('name', '')} (id {body['id']})"
        async with gate:
            response = await http.post(server.url, json=body, headers=modern_headers(body))
        tally.requests += 1
        assert response.status_code == 200, (response.status_code, response.text[:300])
        return response

    try:
        created = answer(await post(modern_request("sessions/create", id=f"create-{number}")))
        token = created["result"]["session"]["sessionId"]
        sid = jwt_claims(token)["sid"]
        session: dict[str, Any] = {"sessionId": token}
        counted, mode = 0, "unset"
        for step in range(calls):
            tool, arguments = plan(number, step)
            meta = {"progressToken": f"progress-{number}"} if tool == "countdown" else None
            body = modern_request(
                "tools/call", {"name": tool, "arguments": arguments}, session=session, meta=meta, id=step
            )
            response = await post(body)
            reply = answer(response)
            assert reply["id"] == step, reply
            result = reply["result"]
            assert result["isError"] is False, result
            echo = result["_meta"][SESSION_KEY]
            assert echo["sessionId"] == token, "the echo names another session"
            if "state" in echo:
                session["state"] = echo["state"]  # a client keeps the latest state
            text = result["content"][0]["text"]
            if tool == "count":
                counted += 1
                assert int(text) == counted, f"count answered {text}, this session counted {counted}"
            elif tool == "whoami":
                assert text == sid, "whoami answered another session"
            elif tool == "set_mode":
                mode = arguments["mode"]
            elif tool == "get_mode":
                assert text == mode, f"get_mode answered {text!r}, this session set {mode!r}"
            elif tool == "countdown":
                assert text == "done"
                if server.mode == "sse":
                    progress = [m for m in messages(response) if m.get("method") == "notifications/progress"]
                    assert len(progress) == 1, progress
                    assert SESSION_KEY not in progress[0]["params"].get("_meta", {}), (
                        "session metadata in a notification"
                    )
        assert counted > 0
        deleted = answer(await post(modern_request("sessions/delete", session={"sessionId": token}, id="delete")))
        assert deleted["result"] == {"resultType": "complete"}, deleted
        refused = answer(await post(modern_request("tools/call", {"name": "whoami"}, session=session, id="after")))
        assert refused["error"]["code"] == -32043, refused
    except Exception as exc:  # collected, so that one failure does not hide the others
        tally.errors.append(f"session {number} on the {server.mode} server, at {doing}: {exc!r}"[:500])


async def workload(servers: list[Server], sessions: int, calls: int, concurrency: int = CONCURRENCY) -> Tally:
    """``sessions`` concurrent conversations, alternating between the servers, at most ``concurrency`` in flight;
    each with a client of its own, as MCP clients are. (One client for all cost this process more CPU than the
    servers: httpcore looks at every connection of its pool for each request.)"""
    tally = Tally()
    gate = anyio.Semaphore(concurrency)
    tls = httpx.create_ssl_context()  # one for all: unused on http://, and 40 ms of CPU to build
    async with contextlib.AsyncExitStack() as clients, anyio.create_task_group() as tg:
        for number in range(sessions):
            http = await clients.enter_async_context(httpx.AsyncClient(verify=tls, timeout=httpx.Timeout(60)))
            tg.start_soon(conversation, http, servers[number % len(servers)], number, calls, gate, tally)
    return tally


def measure(servers: list[Server], sessions: int, calls: int) -> tuple[Tally, float]:
    started = time.monotonic()
    tally = anyio.run(workload, servers, sessions, calls)
    return tally, time.monotonic() - started


@pytest.mark.timeout(300)
def test_concurrent_sessions_without_errors_leaks_or_growth(servers: list[Server]) -> None:
    warm_up, _ = measure(servers, sessions=20, calls=10)
    assert warm_up.errors == []
    before = [server.rss() for server in servers]

    tally, duration = measure(servers, sessions=SESSIONS, calls=CALLS)

    after = [server.rss() for server in servers]
    print(
        f"\nload: {tally.requests} requests in {duration:.1f} s ({tally.requests / duration:.0f}/s), "
        + ", ".join(
            f"{s.mode} RSS {b / MB:.1f} -> {a / MB:.1f} MB" for s, b, a in zip(servers, before, after, strict=True)
        )
    )
    assert tally.errors == [], f"{len(tally.errors)} failed sessions, first: {tally.errors[:5]}"
    assert tally.requests == SESSIONS * (1 + CALLS + 2)
    for server, rss_before, rss_after in zip(servers, before, after, strict=True):
        assert rss_after - rss_before < RSS_GROWTH_LIMIT, (server.mode, rss_before, rss_after)


@pytest.mark.soak  # deselected by default (pyproject's addopts); run it with: pytest -m soak
@pytest.mark.timeout(3600)
def test_soak(servers: list[Server]) -> None:
    """200 sessions x 50 calls, round after round (MCP_SESSIONS_SOAK_ROUNDS, default 20): memory must plateau."""
    rounds = int(os.environ.get("MCP_SESSIONS_SOAK_ROUNDS", "20"))
    first, _ = measure(servers, sessions=SOAK_SESSIONS, calls=SOAK_CALLS)
    assert first.errors == []
    baseline = [server.rss() for server in servers]
    for round_number in range(1, rounds):
        tally, duration = measure(servers, sessions=SOAK_SESSIONS, calls=SOAK_CALLS)
        rss = [server.rss() for server in servers]
        megabytes = [round(r / MB, 1) for r in rss]
        print(f"\nsoak round {round_number}: {tally.requests} requests in {duration:.1f} s, RSS {megabytes} MB")
        assert tally.errors == [], tally.errors[:5]
        # Each round leaves 200 revoked entries in each MemoryStore (kept until their 24 h expiry): a few
        # hundred bytes each. Anything near this bound is a leak.
        for server, start_rss, now_rss in zip(servers, baseline, rss, strict=True):
            assert now_rss - start_rss < SOAK_GROWTH_LIMIT, (server.mode, round_number, start_rss, now_rss)
