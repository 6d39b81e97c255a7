"""A server on an older mcp wrapped by the middleware, run by tests/e2e/test_server_versions.py in its venv.

``python _versioned_server.py SECRET KIND`` serves one ``count`` tool on 127.0.0.1, on a port the OS
picks, and prints that port on one line. ``KIND``: ``sdk`` (the SDK's own server, stateful:
``MCPServer`` on mcp 2, ``FastMCP`` on mcp 1.x), ``fastmcp`` (fastmcp's ``FastMCP``, stateful) or
``fastmcp-stateless``. Imports only what those environments have: mcp, fastmcp, uvicorn and this
checkout's mcp_sessions.
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


def main(secret: str, kind: str) -> None:
    # Imported by name: mypy reads the tests against mcp 2.3, which has no mcp.server.fastmcp.
    if kind == "sdk":
        try:
            server = importlib.import_module("mcp.server.mcpserver").MCPServer("versioned")
        except ModuleNotFoundError:  # mcp 1.x
            server = importlib.import_module("mcp.server.fastmcp").FastMCP("versioned")
        server.add_tool(count)
        app = server.streamable_http_app()
    else:
        server = importlib.import_module("fastmcp").FastMCP("versioned")
        server.tool(count)
        app = server.http_app(stateless_http=kind == "fastmcp-stateless")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn.Config(MCPSessionMiddleware(app, secret=secret), log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
