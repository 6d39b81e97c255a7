"""``mcp-sessions gateway --config FILE``: many servers behind one gateway, from one file (issue 101, item 1).

The ``mcpServers`` JSON a team already holds (Claude Desktop's, Cursor's): two stdio servers from npm, each reached
at its own path by the ``mcp`` SDK's clients of both eras, each one's tools its own; a path no server is at is a
404 that names where they are. One gateway, as its own process, for the file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp import Client

from e2e._gateway import CACHE, SECRET, Process, installed, node, started
from e2e._stdio import filesystem, text_of

pytestmark = pytest.mark.anyio

MEMORY = CACHE / "memory/node_modules/@modelcontextprotocol/server-memory/dist/index.js"


@pytest.fixture(scope="module")
def two_stdio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Process, Path]]:
    """The gateway of a ``mcpServers`` file: server-filesystem on a tree, server-memory with its file in ``env``;
    uncontained (``process-containment``, a key of the gateway's beside the host's), so that the tree under the
    tests' /tmp is the one it reads."""
    tree = tmp_path_factory.mktemp("tree")
    (tree / "known.txt").write_text("known", encoding="utf-8")
    memory = str(installed(MEMORY, "@modelcontextprotocol/server-memory"))
    command, *args = filesystem(tree)
    file = tree.parent / "mcp.json"
    servers = {
        "files": {"command": command, "args": args, "process-containment": "none"},
        "memory": {
            "command": node(),
            "args": [memory],
            "env": {"MEMORY_FILE_PATH": str(tree.parent / "memory.jsonl")},
            "process-containment": "none",
        },
    }
    file.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")

    def command_line(port: int) -> tuple[list[str], dict[str, str]]:
        line = ["-m", "mcp_sessions", "gateway", "--config", str(file), "--port", str(port), "--log-level", "warning"]
        return [sys.executable, *line], {"MCP_SESSIONS_SECRET": SECRET}

    gateway = started("mcp-sessions gateway --config", command_line)
    try:
        yield gateway, tree
    except BaseException:
        print(f"the gateway's log:\n{gateway.output()}")
        raise
    finally:
        gateway.stop()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_each_server_of_an_mcpservers_file_is_at_its_path_with_its_own_tools(
    two_stdio: tuple[Process, Path], mode: str
) -> None:
    """Each server of the file at ``/servers/NAME/mcp``, its tools its own: server-filesystem's reads the tree's
    file; server-memory's keeps an entity and reads it back (its file from the server's ``env``)."""
    gateway, tree = two_stdio
    async with Client(gateway.url("/servers/files/mcp"), mode=mode) as files:
        names = {tool.name for tool in (await files.list_tools()).tools}
        assert "read_text_file" in names
        assert "create_entities" not in names
        read = await files.call_tool("read_text_file", {"path": str(tree / "known.txt")})
        assert text_of(read) == "known"
    async with Client(gateway.url("/servers/memory/mcp"), mode=mode) as memory:
        names = {tool.name for tool in (await memory.list_tools()).tools}
        assert "create_entities" in names
        assert "read_text_file" not in names
        entity = {"name": f"kept-{mode}", "entityType": "test", "observations": ["seen"]}
        await memory.call_tool("create_entities", {"entities": [entity]})
        graph = text_of(await memory.call_tool("read_graph", {}))
        assert f"kept-{mode}" in graph
    assert f"kept-{mode}" in (tree.parent / "memory.jsonl").read_text(encoding="utf-8")


def test_a_path_no_server_is_at_is_a_404_naming_the_servers(two_stdio: tuple[Process, Path]) -> None:
    gateway, _ = two_stdio
    for path in ("/mcp", "/servers/nope/mcp", "/servers", "/servers/files"):
        answer = httpx.post(gateway.url(path), json={}, timeout=10)
        assert answer.status_code == 404, path
        assert answer.json() == {"error": "no server here: this gateway serves /servers/files/mcp, /servers/memory/mcp"}
