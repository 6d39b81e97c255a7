"""The gateway: the session pipeline in front of a streaming reverse proxy to an MCP server anywhere.

``gateway_app`` builds the ASGI app, ``mcp-sessions gateway`` serves it (``_cli``). Its front door (``_front``)
refuses what may not be forwarded (a target that is not a path, ambiguous framing) and decides whose forwarded
headers count; the proxy (``_proxy``) forwards every request to the upstream replica that holds its
conversation (``_replicas``); the upstream decides every answer the pipeline gives itself,
as the middleware asks the app it wraps (``mcp_sessions._pipeline._probe``). httpx and
uvicorn, which only the gateway needs, are imported when it is built. See ``docs/gateway.md``.
"""

from typing import Any

from ._app import gateway_app
from ._cli import DESCRIPTION, add_arguments, run  # what _cli reads of every command

__all__ = ["DESCRIPTION", "add_arguments", "gateway_app", "run"]


def __getattr__(name: str) -> Any:
    """``stdio_gateway_app``, imported when asked for: it needs the ``mcp`` SDK (``mcp-sessions[gateway]``)."""
    if name == "stdio_gateway_app":
        from .stdio._server import stdio_gateway_app

        return stdio_gateway_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
