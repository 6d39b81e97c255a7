"""Opt-in data-layer sessions for any Streamable HTTP MCP server, as one ASGI middleware."""

import importlib
from typing import TYPE_CHECKING, Any, Final

from ._version import __version__ as __version__

if TYPE_CHECKING:
    from ._config import SessionsConfig
    from ._gateway import gateway_app
    from ._middleware import MCPSessionMiddleware
    from ._session import Session, SessionData, SessionLogFilter, authenticated_user, get_session
    from ._tokens import InvalidToken, KeySet, SessionClaims, SessionKey, StateTooLarge
    from ._wire import Refusal

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

_HOME: Final = {
    "SessionsConfig": "._config",
    "MCPSessionMiddleware": "._middleware",
    "Refusal": "._wire",
    "gateway_app": "._gateway",  # it needs httpx and uvicorn (mcp-sessions[gateway])
    **dict.fromkeys(["Session", "SessionData", "SessionLogFilter", "authenticated_user", "get_session"], "._session"),
    **dict.fromkeys(["InvalidToken", "KeySet", "SessionClaims", "SessionKey", "StateTooLarge"], "._tokens"),
}
"""The module of each name, imported when the name is first asked for: a part of the package (the ``connect``
command, the client) costs only what it uses (PEP 562)."""


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
