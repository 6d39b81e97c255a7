"""What the stdio gateway's tests share: the tests' stdio server (``e2e._stdio_server``) and what it is run with,
``@modelcontextprotocol/server-filesystem`` (node, from ``scripts/system-deps.sh``), a tool's text, and the processes
the gateways of this test process started."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import mcp_types as types

from conftest import SECRET
from e2e._gateway import CACHE, MAIN, installed, node

SERVER = [sys.executable, "-m", "e2e._stdio_server"]
FILESYSTEM = CACHE / "filesystem/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
ENVIRON = {"PATH": os.environ["PATH"], "PYTHONPATH": str(MAIN / "tests"), "MCP_SESSIONS_SECRET": SECRET}


def text_of(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


def filesystem(allowed: Path) -> list[str]:
    """server-filesystem's command, ``allowed`` its directory (until a client's roots replace it)."""
    return [node(), str(installed(FILESYSTEM, "@modelcontextprotocol/server-filesystem")), str(allowed)]


def own_children(marker: str = "") -> set[int]:
    """The pids of this process's live children (the gateways' servers: uvicorn runs in a thread of the tests), those
    whose environment holds ``marker`` (one gateway's, where a test file run before in this worker left others)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rpartition(")")[2].split()
            if (
                int(fields[1]) == os.getpid()
                and fields[0] != "Z"
                and marker.encode() in (stat.parent / "environ").read_bytes()
            ):
                found.add(int(stat.parent.name))
    return found
