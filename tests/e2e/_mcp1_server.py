"""An mcp 1.x server wrapped by the middleware, run by tests/e2e/test_mcp1_server.py in .venv-mcp1.

``python _mcp1_server.py SECRET`` serves ``FastMCP`` (mcp 1.x's name, default stateful mode) with
one ``count`` tool on 127.0.0.1, on a port the OS picks, and prints that port on one line. Imports
only what that environment has: mcp<2, uvicorn and this checkout's mcp_sessions.
"""

from __future__ import annotations

import importlib
import socket
import sys

import uvicorn

from mcp_sessions import MCPSessionMiddleware, get_session


async def count() -> int:
    """Count the calls in this session; -1 when the tool sees no session."""
    session = get_session()
    return -1 if session is None else await session.data.incr("n")


def main(secret: str) -> None:
    # mcp 1.x's FastMCP: imported by name, as mypy reads the tests against mcp 2, which has none.
    server = importlib.import_module("mcp.server.fastmcp").FastMCP("mcp1")
    server.add_tool(count)
    app = MCPSessionMiddleware(server.streamable_http_app(), secret=secret)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main(sys.argv[1])
