"""The gateway: the session pipeline in front of a streaming reverse proxy to an MCP server anywhere.

``mcp-sessions gateway`` serves it (``_cli``, ``_lifecycle``) in front of an upstream over HTTP (``http/``:
``gateway_app``, the proxy and its replicas) or a stdio server's processes (``stdio/``, each sealed by ``sealed/``).
Its front door (``_front``) refuses what may not be forwarded (a target that is not a path, ambiguous framing) and
decides whose forwarded headers count; who is asking, and what they may carry to a server, is ``auth/``'s. The
upstream decides every answer the pipeline gives itself, as the middleware asks the app it wraps
(``mcp_sessions._pipeline._probe``). httpx and uvicorn, which only the gateway needs, are imported when it is built.
See ``docs/gateway.md``.
"""

from typing import Any

# What _cli reads of every command.
from ._cli import DESCRIPTION, add_arguments, run
from .http._app import gateway_app

__all__ = ["DESCRIPTION", "add_arguments", "gateway_app", "run"]


def __getattr__(name: str) -> Any:
    """``stdio_gateway_app``, imported when asked for: it needs the ``mcp`` SDK (``mcp-sessions[gateway]``)."""
    if name == "stdio_gateway_app":
        from .stdio._server import stdio_gateway_app

        return stdio_gateway_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
