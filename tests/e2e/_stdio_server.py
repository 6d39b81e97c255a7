"""A stdio MCP server of the tests' own, for ``mcp-sessions gateway --stdio``: ``python -m e2e._stdio_server``.

Each tool says what it does. ``--stubborn``: it ignores SIGTERM and its stdin's end (only SIGKILL ends it), as a
careless server may.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import SamplingMessage, TextContent
from pydantic import BaseModel

server = MCPServer("stdio-test-server", instructions="A server of the tests' own.")
counter = 0
_background: set[asyncio.Task[None]] = set()
WIRE = os.dup(1)  # the protocol's stdout, before the SDK's stdio transport diverts fd 1 to stderr


class Answer(BaseModel):
    answer: str


@server.tool()
def whoami() -> str:
    """This process: its pid, the MCP_SESSION_ID it was given, and the names of its MCP_SESSIONS_* variables."""
    leaked = sorted(key for key in os.environ if key.startswith("MCP_SESSIONS_"))
    return json.dumps({"pid": os.getpid(), "session": os.environ.get("MCP_SESSION_ID"), "leaked": leaked})


@server.tool()
def keep(line: str) -> str:
    """Appends ``line`` to this process's own file (``<pid>.txt`` in ``STDIO_TEST_FILES``); the file's lines."""
    path = os.path.join(os.environ["STDIO_TEST_FILES"], f"{os.getpid()}.txt")
    with open(path, "a") as file:
        file.write(line + "\n")
    with open(path) as file:
        return file.read()


@server.tool()
def getenv(name: str) -> str:
    """An environment variable of this process ("" when it has none)."""
    return os.environ.get(name, "")


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
def complain(line: str) -> str:
    """Writes ``line`` to stderr."""
    print(line, file=sys.stderr, flush=True)
    return "written"


@server.tool()
def spawn(holds_stdout: bool = False) -> int:
    """Starts a process of its own (a long sleep, in this process's group); its pid. ``holds_stdout``: it inherits
    the protocol's stdout, as a helper of a server that writes its stdout directly does."""
    command = [sys.executable, "-c", "import time; time.sleep(300)"]
    return subprocess.Popen(command, stdout=WIRE if holds_stdout else None).pid


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


@server.tool()
def endless() -> str:
    """Writes one stdout line that never ends, as a hostile server may."""
    chunk = b"x" * 65536
    while True:
        os.write(WIRE, chunk)


@server.tool()
def hold() -> str:
    """Says it is running (the file ``held`` in ``STDIO_TEST_FILES``), then answers once the file ``go`` is there
    (within 30 s)."""
    files = os.environ["STDIO_TEST_FILES"]
    open(os.path.join(files, "held"), "w").close()
    for _ in range(600):
        if os.path.exists(os.path.join(files, "go")):
            break
        time.sleep(0.05)
    return "held"


@server.tool()
def allocate(mib: int) -> int:
    """Holds ``mib`` MiB, every page written, until it answers: its size in bytes."""
    return len(bytearray(mib << 20))


@server.tool()
def crash() -> str:
    """Exits at once, without an answer."""
    os._exit(3)


if __name__ == "__main__":
    if "--stubborn" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    server.run("stdio")
    if "--stubborn" in sys.argv:
        time.sleep(300)
