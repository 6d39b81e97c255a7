"""A stdio MCP server that tells its tool's caller which conversation it sees: ``python _conversation_server.py``.

Run by the ``mcp`` 2.3 SDK it speaks 2026-07-28 (its ``MCPServer``); by an ``mcp`` 1.x it speaks only the
2025-11-25 handshake (its ``FastMCP``). The tool ``whoami`` answers this process's pid and the conversation the
request's ``_meta`` names (``io.modelcontextprotocol/session``, as the draft names a session), if any.
"""

from __future__ import annotations

import json
import os
from typing import Any

try:
    from mcp.server.mcpserver import Context, MCPServer
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import Context  # type: ignore[attr-defined, no-redef]
    from mcp.server.fastmcp import FastMCP as MCPServer  # type: ignore[attr-defined, no-redef]

server = MCPServer("conversation-server")


@server.tool()
def whoami(ctx: Context) -> str:
    """This process's pid and the conversation this request names."""
    meta: Any = ctx.request_context.meta
    if meta is not None and not isinstance(meta, dict):  # mcp 1.x: a model, its extra keys kept
        meta = meta.model_dump(by_alias=True)
    named = (meta or {}).get("io.modelcontextprotocol/session") or {}
    return json.dumps({"pid": os.getpid(), "conversation": named.get("sessionId")})


if __name__ == "__main__":
    server.run("stdio")
