"""An ASGI app's lifespan, run in process: the app then answers through ``httpx.ASGITransport`` as it does served.

The MCP SDK's app needs its lifespan (it starts the session manager); no socket or server process is needed.
:func:`sdk_client` is the SDK's client connected to such an app.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.client import ConnectMode
from mcp.client.streamable_http import streamable_http_client

from _mcp import LOCAL, MCP_PATH
from _waits import WITHIN


@asynccontextmanager
async def running(app: Any) -> AsyncIterator[None]:
    """Start ``app``'s lifespan for the block, and shut it down after; a failed start or stop fails the test."""
    to_app, app_receives = anyio.create_memory_object_stream[dict[str, Any]](1)
    app_sends, from_app = anyio.create_memory_object_stream[dict[str, Any]](1)
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    with to_app, app_receives, app_sends, from_app:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(app, scope, app_receives.receive, app_sends.send)
            await to_app.send({"type": "lifespan.startup"})
            with anyio.fail_after(WITHIN):
                assert (await from_app.receive())["type"] == "lifespan.startup.complete"
            try:
                yield
            finally:
                await to_app.send({"type": "lifespan.shutdown"})
                with anyio.fail_after(WITHIN):
                    assert (await from_app.receive())["type"] == "lifespan.shutdown.complete"


@asynccontextmanager
async def sdk_client(app: Any, mode: ConnectMode = "auto") -> AsyncIterator[Client]:
    """The SDK client, as an agent builds it, connected to ``app`` in process (its lifespan running for the block)."""
    async with (
        running(app),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app)) as http,
        Client(streamable_http_client(LOCAL + MCP_PATH, http_client=http), mode=mode) as client,
    ):
        yield client
