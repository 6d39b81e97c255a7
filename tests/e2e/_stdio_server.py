"""A stdio MCP server of the tests' own on the ``mcp`` SDK, for ``mcp-sessions gateway --stdio``: ``python -m
e2e._stdio_server``, for the tests of what the SDK's server takes of its client's answers (it asks in the types and
the schema it checks them against); the others' server is ``_plain_stdio``, which asks alike without the SDK. Each
tool says what it does.
"""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import SamplingMessage, TextContent
from pydantic import BaseModel

server = MCPServer("stdio-test-server", instructions="A server of the tests' own.")
counter = 0


class Answer(BaseModel):
    answer: str


@server.tool()
def count() -> int:
    """One more than the last time (this process's memory)."""
    global counter
    counter += 1
    return counter


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


if __name__ == "__main__":
    server.run("stdio")
