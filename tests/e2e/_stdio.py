"""What the stdio gateway's tests share: the tests' stdio server (``e2e._plain_stdio``; the ``mcp`` SDK's,
``e2e._stdio_server``, where the behaviour is the SDK's) and what it is run with, the gateway in front of it,
``@modelcontextprotocol/server-filesystem`` (node, from ``scripts/system-deps.sh``), a tool's text, and the processes
the gateways of this test process started."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import mcp_types as types

from _redis import only_skips
from conftest import SECRET, serve
from e2e._gateway import CACHE, MAIN, installed, node
from mcp_sessions import SessionsConfig
from mcp_sessions._gateway._config import GatewayConfig, Listening, StdioProcesses
from mcp_sessions._gateway.stdio._server import stdio_gateway_app

SERVER = [sys.executable, "-m", "e2e._plain_stdio"]
SDK_SERVER = [sys.executable, "-m", "e2e._stdio_server"]
FILESYSTEM = CACHE / "filesystem/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
# What a gateway process (which inherits the tests' environment) passes on for its server to import the tests' modules.
SERVER_PATH = {"PYTHONPATH": os.pathsep.join(filter(None, [str(MAIN / "tests"), os.environ.get("PYTHONPATH")]))}
COUNT = {"name": "count", "arguments": {}}  # the tests' server's counter, as a tools/call's params
GATEWAY_FIELDS = {field.name for field in dataclasses.fields(GatewayConfig)}
LISTENING_FIELDS = {field.name for field in dataclasses.fields(Listening)}
ENVIRON = {"PATH": os.environ["PATH"], "PYTHONPATH": str(MAIN / "tests"), "MCP_SESSIONS_SECRET": SECRET}


@contextlib.contextmanager
def stdio_gateway(
    command: Sequence[str] = SERVER,
    config: SessionsConfig | None = None,
    environ: Mapping[str, str] = ENVIRON,
    **options: Any,
) -> Iterator[str]:
    """``stdio_gateway_app`` in front of ``command`` (the tests' server) on a real uvicorn in a thread: its MCP URL.
    ``options``: :func:`stdio_config`'s."""
    with serve(stdio_gateway_app(stdio_config(command, config, environ, **options))) as url:
        yield url + "/mcp"


def stdio_config(
    command: Sequence[str] = SERVER,
    config: SessionsConfig | None = None,
    environ: Mapping[str, str] = ENVIRON,
    **options: Any,
) -> GatewayConfig:
    """The configuration of a gateway in front of ``command``: ``options`` are ``GatewayConfig``'s, ``Listening``'s
    and ``StdioProcesses``' fields, each where it belongs. ``PYTHONPATH`` and ``STDIO_TEST_FILES`` reach its
    processes (``pass_env``), as the tests' server needs; a process per conversation unless ``processes`` says
    otherwise, none started ahead unless ``warm`` says so."""
    options.setdefault("pass_env", ("PYTHONPATH", "STDIO_TEST_FILES"))
    options.setdefault("processes", "per-conversation")  # the tests' server speaks 2026-07-28: not the default's
    options.setdefault("warm", 0)  # the pool's own tests ask for one; the others start only what they use
    gateway = {name: options.pop(name) for name in GATEWAY_FIELDS & options.keys()}
    listening = Listening(**{name: options.pop(name) for name in LISTENING_FIELDS & options.keys()})
    serves = StdioProcesses(command=tuple(command), environ=environ, **options)
    sessions = config or SessionsConfig(secret=SECRET)
    return GatewayConfig(serves=serves, listening=listening, sessions=sessions, **gateway)


def text_of(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


def filesystem(allowed: Path) -> list[str]:
    """server-filesystem's command, ``allowed`` its directory (until a client's roots replace it)."""
    __tracebackhide__ = only_skips
    return [node(), str(installed(FILESYSTEM, "@modelcontextprotocol/server-filesystem")), str(allowed)]


def own_children(marker: str = "", parent: int | None = None) -> set[int]:
    """The pids of this process's live children (the gateways' servers: uvicorn runs in a thread of the tests), or
    ``parent``'s, those whose environment holds ``marker`` (one gateway's, where a test file run before in this
    worker left others)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rpartition(")")[2].split()
            if (
                int(fields[1]) == (os.getpid() if parent is None else parent)
                and fields[0] != "Z"
                and marker.encode() in (stat.parent / "environ").read_bytes()
            ):
                found.add(int(stat.parent.name))
    return found


def gone(pid: int) -> bool:
    """Whether no process has ``pid`` (a zombie no one reaps counts as gone: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True
