"""``subscriptions/listen`` streams over raw 2026-07-28 HTTP: a client that opens them in the background and
reads their notifications as they arrive (tests/e2e/test_listen_*.py, test_asgi_servers.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from _mcp import MCP_PATH, aiter_messages, answer, modern_headers, modern_request, session_meta, tool_text
from _waits import WITHIN, until_awaited

APP = "examples.notifications:app"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
NOTE = "note://plan"
WAIT = WITHIN  # a bound of the tests' waits for a stream's acknowledgement or end: the suite's one (_waits)


class Stream:
    """One open ``subscriptions/listen`` response: its messages as they arrive, and whether it has ended."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.messages: list[dict[str, Any]] = []
        self.ended = asyncio.Event()
        self.acknowledged = asyncio.Event()
        self.status = 0

    @property
    def events(self) -> list[str]:
        """The notifications after the acknowledgement: ``method`` or ``method uri``."""
        return [
            f"{m['method']} {m['params']['uri']}" if "uri" in m.get("params", {}) else m["method"]
            for m in self.messages[1:]
            if "method" in m
        ]

    async def wait(self, event: str) -> float:
        """Seconds until ``event`` is on the stream (bounded)."""
        start = time.monotonic()
        await until_awaited(lambda: event in self.events, lambda: f"{self.name}: no {event!r}, got {self.events}")
        return time.monotonic() - start


class Client:
    """Raw 2026-07-28 requests to the replicas, and listen streams opened in the background."""

    def __init__(self, http: httpx.AsyncClient, group: asyncio.TaskGroup) -> None:
        self.http, self.group = http, group
        self.reading: list[asyncio.Task[None]] = []

    async def request(
        self, base: str, method: str, params: Mapping[str, Any] | None = None, session: Any = None
    ) -> Any:
        body = modern_request(method, params, session=None if session is None else session_meta(session))
        response = await self.http.post(base + MCP_PATH, json=body, headers=modern_headers(body))
        assert response.status_code == 200, response.text
        return answer(response)

    async def create(self, base: str) -> dict[str, Any]:
        created: dict[str, Any] = (await self.request(base, "sessions/create"))["result"]["session"]
        return created

    async def tool(self, base: str, name: str, arguments: Mapping[str, Any], session: Any = None) -> str:
        return tool_text(await self.request(base, "tools/call", {"name": name, "arguments": dict(arguments)}, session))

    async def listen(self, base: str, name: str, session: Any = None) -> Stream:
        """A stream of tool-list changes and of NOTE's updates, acknowledged (so subscribed) when returned."""
        stream = Stream(name)
        notifications = {"toolsListChanged": True, "resourceSubscriptions": [NOTE]}
        body = modern_request(
            "subscriptions/listen",
            {"notifications": notifications},
            id=f"listen-{name}",
            session=None if session is None else session_meta(session),
        )

        async def read() -> None:
            try:
                async with self.http.stream("POST", base + MCP_PATH, json=body, headers=modern_headers(body)) as r:
                    stream.status = r.status_code
                    async for message in aiter_messages(r.aiter_lines()):
                        stream.messages.append(message)
                        stream.acknowledged.set()
            finally:
                stream.ended.set()
                stream.acknowledged.set()

        self.reading.append(self.group.create_task(read()))
        async with asyncio.timeout(WAIT):
            await stream.acknowledged.wait()
        assert stream.messages[0]["method"] == "notifications/subscriptions/acknowledged", stream.messages
        return stream


@contextlib.asynccontextmanager
async def client() -> AsyncIterator[Client]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=30)) as http, asyncio.TaskGroup() as group:
        wire = Client(http, group)
        yield wire
        for task in wire.reading:  # the streams still open: the test is over
            task.cancel()


def graceful_end(stream: Stream) -> None:
    """The stream's last frame is its listen request's result, the subscription id in ``_meta``."""
    assert stream.ended.is_set(), f"{stream.name} is still open"
    last = stream.messages[-1]
    request_id = f"listen-{stream.name}"
    assert last["id"] == request_id, last
    assert last["result"]["_meta"] == {SUBSCRIPTION_ID: request_id}, last
