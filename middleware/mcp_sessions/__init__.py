"""Opt-in data-layer sessions for any Streamable HTTP MCP server, as one ASGI middleware."""

from typing import TYPE_CHECKING, Any

from ._config import SessionsConfig
from ._middleware import MCPSessionMiddleware
from ._session import Session, SessionData, SessionLogFilter, authenticated_user, get_session
from ._tokens import InvalidToken, KeySet, SessionClaims, SessionKey, StateTooLarge
from ._version import __version__ as __version__
from ._wire import Refusal

if TYPE_CHECKING:
    from ._gateway import gateway_app

# Stores are in mcp_sessions.stores, wires and error codes in mcp_sessions.profiles. Refusal (raised by an
# on_create hook or a session source) and authenticated_user (the default principal hook) are here for the uses
# docs/configuration.md documents.
__all__ = [
    "InvalidToken",
    "KeySet",
    "MCPSessionMiddleware",
    "Refusal",
    "Session",
    "SessionClaims",
    "SessionData",
    "SessionKey",
    "SessionLogFilter",
    "SessionsConfig",
    "StateTooLarge",
    "authenticated_user",
    "gateway_app",
    "get_session",
]


def __getattr__(name: str) -> Any:
    """``gateway_app``, imported when first asked for: it needs httpx and uvicorn (``mcp-sessions[gateway]``)."""
    if name == "gateway_app":
        from ._gateway import gateway_app

        return gateway_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
