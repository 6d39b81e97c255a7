"""Replicas of the quickstart: each ``python -m uvicorn examples.quickstart:app`` in its own process,
configured only by environment, on a free loopback port (tests/e2e/test_replicas.py, test_topologies.py);
or served by another ASGI server's command line (tests/e2e/test_asgi_servers.py); or, where the configuration
changes and not the process, built from its environment and served on a real uvicorn in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx
from examples.quickstart import build_app

from _mcp import (
    MCP_PATH,
    SESSION_NOT_FOUND,
    ModernClient,
    answer,
    modern_headers,
    modern_request,
    session_meta,
    tool_text,
)
from _redis import RedisServer, end_process, free_port, until_listening
from conftest import SECRET, serve

MAIN = Path(__file__).resolve().parents[2]
STORE_UNAVAILABLE = -32010


Command = Callable[[str, int], Sequence[str]]
"""An ASGI server's command line serving an app (``module:name``) on a loopback port."""


def uvicorn(app: str, port: int) -> list[str]:
    return [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]


class Replica:
    """``python -m uvicorn examples.quickstart:app`` (or ``app``, or another ``command``) in its own process,
    configured only by environment."""

    output_tail = 4000  # how much of its output :meth:`output` returns: the end, in characters

    def __init__(
        self, name: str, environ: Mapping[str, str], app: str = "examples.quickstart:app", command: Command = uvicorn
    ) -> None:
        self.app = app
        self.command = command
        self.name = name
        self.port = free_port()
        self.environ = dict(environ)
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, environ: Mapping[str, str] | None = None) -> None:
        """Start (on the same port as before), waiting until it accepts connections."""
        self.spawn(environ)
        self.wait_ready()

    def spawn(self, environ: Mapping[str, str] | None = None) -> None:
        assert self.process is None, f"replica {self.name} is running"
        if environ is not None:
            self.environ = dict(environ)
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("MCP_SESSIONS_", "QUICKSTART_", "WORKERS_APP_"))
        }
        env.update(self.environ)
        # A file, not a pipe: nobody reads the output while the test runs, and a full pipe blocks the server.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        self.process = subprocess.Popen(
            self.command(self.app, self.port),
            cwd=MAIN,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a group of its own, which end_process ends
        )

    def wait_ready(self) -> None:
        """Until it accepts connections; stopped if it never does, or if the test is stopped meanwhile."""
        assert self.process is not None
        try:
            # uvicorn listens only once the app's lifespan has started
            until_listening(self.process, self.port, f"replica {self.name}", self.output)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            end_process(process)
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self, environ: Mapping[str, str]) -> None:
        self.stop()
        self.start(environ)

    def output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-self.output_tail :]


@contextlib.contextmanager
def replicas(*environs: Mapping[str, str], app: str = "examples.quickstart:app") -> Iterator[list[Replica]]:
    with contextlib.ExitStack() as stack:
        started = [Replica("ABC"[index], environ, app) for index, environ in enumerate(environs)]
        for replica in started:
            stack.callback(replica.stop)
            replica.spawn()
        for replica in started:
            replica.wait_ready()
        yield started


class ServedReplica:
    """The quickstart built from ``environ`` alone (``build_app(environ=...)``, as the process reads its own), served
    by a real uvicorn in a thread: restarting one builds a new app, with its own store client, on a new port."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._served = contextlib.ExitStack()
        self.url = ""

    def start(self, environ: Mapping[str, str]) -> None:
        self.url = self._served.enter_context(serve(build_app(environ=environ)))

    def stop(self) -> None:
        self._served.close()

    def restart(self, environ: Mapping[str, str]) -> None:
        self.stop()
        self.start(environ)


@contextlib.contextmanager
def served_replicas(*environs: Mapping[str, str]) -> Iterator[list[ServedReplica]]:
    with contextlib.ExitStack() as stack:
        started = [ServedReplica("ABC"[index]) for index in range(len(environs))]
        for replica, environ in zip(started, environs, strict=True):
            stack.callback(replica.stop)
            replica.start(environ)
        yield started


def json_and_sse(
    environ: Mapping[str, str], app: str = "examples.quickstart:app"
) -> contextlib.AbstractContextManager[list[Replica]]:
    """Replicas A (JSON responses) and B (SSE responses), configured alike otherwise."""
    return replicas({**environ, "QUICKSTART_JSON": "1"}, environ, app=app)


def served_json_and_sse(environ: Mapping[str, str]) -> contextlib.AbstractContextManager[list[ServedReplica]]:
    """:func:`json_and_sse` in this process: served replicas A (JSON responses) and B (SSE responses)."""
    return served_replicas({**environ, "QUICKSTART_JSON": "1"}, environ)


def clients(http: httpx.Client, pair: Sequence[Replica | ServedReplica]) -> tuple[ModernClient, ModernClient]:
    return ModernClient(http, pair[0].url), ModernClient(http, pair[1].url)


def count(client: ModernClient, session: Mapping[str, Any]) -> int:
    response, message = client.call_tool("count", session=session_meta(session))
    assert response.status_code == 200, response.text
    return int(tool_text(message))


def refused(client: ModernClient, session: Mapping[str, Any], tool: str = "count") -> dict[str, Any]:
    response, message = client.call_tool(tool, session=session_meta(session))
    assert response.status_code == 200, response.text
    assert message["error"]["code"] == SESSION_NOT_FOUND, message
    return message


def counts_exactly_under_concurrency(pair: Sequence[Replica | ServedReplica], calls: int) -> None:
    """One session's counter, bumped by ``calls`` concurrent calls spread over both replicas: each value once."""

    async def scenario() -> tuple[int, list[int], int]:
        async with httpx.AsyncClient(timeout=20, limits=httpx.Limits(max_connections=calls + 10)) as client:

            async def post(base: str, body: dict[str, Any]) -> dict[str, Any]:
                response = await client.post(base + MCP_PATH, json=body, headers=modern_headers(body))
                assert response.status_code == 200, response.text
                return answer(response)

            created = await post(pair[1].url, modern_request("sessions/create"))
            session = created["result"]["session"]
            call = modern_request("tools/call", {"name": "count", "arguments": {}}, session=session_meta(session))
            first = int(tool_text(await post(pair[0].url, call)))
            results = await asyncio.gather(*(post(pair[i % 2].url, call) for i in range(calls)))
            last = int(tool_text(await post(pair[1].url, call)))
            return first, sorted(int(tool_text(r)) for r in results), last

    first, counts, last = asyncio.run(scenario())
    assert first == 1
    assert counts == list(range(2, calls + 2))  # every increment seen exactly once
    assert last == calls + 2


def a_delete_on_b_is_refused_on_a_at_once(http: httpx.Client, pair: Sequence[Replica | ServedReplica]) -> None:
    """A session deleted on replica B is refused by A on the very next request, and cannot be deleted again."""
    a, b = clients(http, pair)
    session = a.create_session()
    assert count(a, session) == 1
    response, deleted = b.request("sessions/delete", session=session_meta(session))
    assert response.status_code == 200
    assert deleted["result"] == {"resultType": "complete"}
    refused(a, session)  # the very next request, on the other replica
    refused(b, session, tool="whoami")
    _, again = a.request("sessions/delete", session=session_meta(session))
    assert again["error"]["code"] == SESSION_NOT_FOUND


OLD = "old-rotation-secret-0123456789-0123456789"
NEW = "new-rotation-secret-9876543210-9876543210"


def base_environ(redis: RedisServer, **extra: str) -> dict[str, str]:
    return {
        "MCP_SESSIONS_KEYS": f"old:{OLD},new:{NEW}",
        "MCP_SESSIONS_REDIS_URL": redis.url,
        "MCP_SESSIONS_REDIS_PREFIX": f"replicas-{uuid.uuid4().hex[:6]}:",
        "MCP_SESSIONS_REDIS_TIMEOUT": "2.0",  # a loaded two-core machine can hold a reply back past 0.3 s
        "MCP_SESSIONS_REDIS_CONNECT_TIMEOUT": "2.0",  # and a connect past 0.25 s
        **extra,
    }


def environ(url: str, prefix: str, **extra: str) -> dict[str, str]:
    return {
        "MCP_SESSIONS_KEYS": f"k1:{SECRET}",
        "MCP_SESSIONS_STORE": url,
        "MCP_SESSIONS_REDIS_PREFIX": prefix,
        "MCP_SESSIONS_REDIS_TIMEOUT": "2.0",  # a loaded two-core machine can hold a reply back past 0.3 s
        "MCP_SESSIONS_REDIS_CONNECT_TIMEOUT": "2.0",  # and a connect past 0.25 s
        **extra,
    }
