"""A stdio MCP server of the tests' own on the ``mcp`` SDK, for ``mcp-sessions gateway --stdio``: ``python -m
e2e._stdio_server``, for the tests of what the SDK's server does (it asks its client, reports progress, announces);
the others' server is ``_plain_stdio``, which answers ``whoami`` and ``count`` alike. Each tool says what it does.
"""

from __future__ import annotations

import asyncio
import json
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import SamplingMessage, TextContent
from pydantic import BaseModel

server = MCPServer("stdio-test-server", instructions="A server of the tests' own.")
counter = 0
_background: set[asyncio.Task[None]] = set()


class Answer(BaseModel):
    answer: str


@server.tool()
def whoami() -> str:
    """This process: its pid, the MCP_SESSION_ID it was given, and the names of its MCP_SESSIONS_* variables."""
    leaked = sorted(key for key in os.environ if key.startswith("MCP_SESSIONS_"))
    return json.dumps({"pid": os.getpid(), "session": os.environ.get("MCP_SESSION_ID"), "leaked": leaked})


@server.tool()
def count() -> int:
    """One more than the last time (this process's memory)."""
    global counter
    counter += 1
    return counter


@server.tool()
async def progress(steps: int, ctx: Context) -> str:
    """A progress notification per step, then "done"."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
    return "done"


@server.tool()
async def sample(prompt: str, ctx: Context) -> str:
    """The client's sampling answer to ``prompt``."""
    result = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=prompt))], max_tokens=10
    )
    content = result.content
    return content.text if isinstance(content, TextContent) else repr(content)


@server.tool()
async def elicit(question: str, ctx: Context) -> str:
    """The client's elicitation answer to ``question``."""
    result = await ctx.elicit(question, Answer)
    return f"{result.action}: {result.data.answer if result.action == 'accept' else ''}"


@server.tool()
async def announce(ctx: Context) -> str:
    """Answers at once; a moment later, tied to no request: ``notifications/tools/list_changed`` and a log
    message that names this process."""
    session = ctx.session

    async def later() -> None:
        await asyncio.sleep(0.2)
        await session.send_tool_list_changed()
        await session.send_log_message("info", f"announced by {os.getpid()}")

    _background.add(asyncio.get_running_loop().create_task(later()))
    return "soon"


@server.tool()
async def roots(ctx: Context) -> str:
    """The client's roots, as ``roots/list`` gives them."""
    result = await ctx.session.list_roots()
    return " ".join(str(root.uri) for root in result.roots)


if __name__ == "__main__":
    server.run("stdio")
