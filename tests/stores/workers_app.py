"""The quickstart's tools plus ``pid``, for ``uvicorn --workers N --factory workers_app:app``.

``WORKERS_APP_SQLITE`` names the SQLite file every worker shares; unset, each worker has a MemoryStore.
"""

from __future__ import annotations

import os

from examples.quickstart import SESSION_TOOLS, build_server

from mcp_sessions import MCPSessionMiddleware
from mcp_sessions.stores import SQLiteStore


def app() -> MCPSessionMiddleware:
    """A worker's app: the store comes from the environment, the key from MCP_SESSIONS_SECRET."""
    server = build_server()

    @server.tool()
    async def pid() -> int:
        """The id of the worker process that answered."""
        return os.getpid()

    mcp_app = server.streamable_http_app(streamable_http_path="/mcp", json_response=True, stateless_http=True)
    path = os.environ.get("WORKERS_APP_SQLITE")
    if path:
        return MCPSessionMiddleware.from_env(mcp_app, require_session_tools=SESSION_TOOLS, store=SQLiteStore(path))
    return MCPSessionMiddleware.from_env(mcp_app, require_session_tools=SESSION_TOOLS)
