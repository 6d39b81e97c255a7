"""A live conversation of every kind of client a deploy must be invisible to (issue 101, item 2): the ``mcp`` SDK's
2026-07-28 client in a data-layer session, its 2025-11-25 client in a transport session the gateway minted, Claude
Code's ``mcp-sessions connect``, and raw HTTP naming a host's conversation; each call's error counted, never raised."""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from _mcp import create_session, modern_headers, modern_request, sdk_session_meta
from e2e._gateway import PYTHONPATH

CLIENTS = ("2026 SDK client", "2025 SDK client", "connect", "raw HTTP")


def graph_of(answer: Any) -> str:
    """A ``tools/call``'s text (server-memory answers JSON as text)."""
    return "".join(getattr(item, "text", "") for item in answer.content)


@contextlib.asynccontextmanager
async def connected(url: str, state: Path) -> AsyncIterator[Client]:
    """Claude Code's ``mcp-sessions connect``, started as a host starts a stdio server, with its conversation's id."""
    environ = {"PYTHONPATH": PYTHONPATH, "XDG_STATE_HOME": str(state), "CLAUDE_CODE_SESSION_ID": "conv-resumed"}
    environ["CLAUDECODE"] = "1"
    server = StdioServerParameters(command=sys.executable, args=["-m", "mcp_sessions", "connect", url], env=environ)
    with tempfile.TemporaryFile("w+") as errors:
        async with Client(stdio_client(server, errlog=errors)) as client:
            yield client


class Conversations:
    """One live conversation of each of :data:`CLIENTS`, each a way to call a tool: its answer's text, or the error
    it raised, counted."""

    def __init__(self) -> None:
        self.calls: dict[str, Callable[[str, dict[str, Any]], Awaitable[str]]] = {}
        self.answered = 0
        self.errors: list[str] = []

    async def call(self, kind: str, tool: str, arguments: dict[str, Any]) -> str:
        try:
            said = await self.calls[kind](tool, arguments)
        except MCPError as exc:  # what the SDK's clients (and so the host behind connect) raise
            self.errors.append(f"{kind}: {exc.error.code} {exc.error.message}")
            return ""
        self.answered += 1
        return said

    @contextlib.asynccontextmanager
    async def opened(self, url: str, state: Path) -> AsyncIterator[None]:
        async with (
            Client(url) as modern,
            Client(url, mode="legacy") as legacy,
            connected(url, state) as shim,
            httpx.AsyncClient(timeout=60) as http,
        ):
            session = await create_session(modern)

            async def in_session(tool: str, arguments: dict[str, Any]) -> str:
                return graph_of(await modern.call_tool(tool, arguments, meta=sdk_session_meta(session)))

            async def of(client: Client, tool: str, arguments: dict[str, Any]) -> str:
                return graph_of(await client.call_tool(tool, arguments))

            async def raw(tool: str, arguments: dict[str, Any]) -> str:
                meta = {"vscode.conversationId": "chat-resumed"}
                body = modern_request("tools/call", {"name": tool, "arguments": arguments}, meta=meta)
                answer = (await http.post(url, json=body, headers=modern_headers(body))).json()
                if "error" in answer:
                    raise MCPError(answer["error"]["code"], answer["error"]["message"])
                return "".join(item.get("text", "") for item in answer["result"]["content"])

            self.calls = {
                "2026 SDK client": in_session,
                "2025 SDK client": lambda tool, arguments: of(legacy, tool, arguments),
                "connect": lambda tool, arguments: of(shim, tool, arguments),
                "raw HTTP": raw,
            }
            yield
