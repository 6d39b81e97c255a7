"""Opt-in data-layer sessions for any Streamable HTTP MCP server, as one ASGI middleware."""

from ._config import SessionsConfig
from ._gateway import gateway_app
from ._middleware import MCPSessionMiddleware
from ._session import SCOPE_KEY, Session, SessionData, SessionLogFilter, authenticated_user, get_session
from ._tokens import InvalidToken, KeySet, SessionClaims, SessionKey, StateTooLarge
from ._version import __version__ as __version__
from ._wire import Refusal
from ._wire.protocol import HEADER_MISMATCH, SESSION_STORE_UNAVAILABLE, TOO_MANY_SESSIONS
from .profiles import DRAFT, SESSION_META_KEY, SESSION_NOT_FOUND, SESSION_REQUIRED, WireProfile
from .stores import MemoryStore, SessionStatus, SessionStore, SessionStoreFull, SessionStoreUnavailable

__all__ = [
    "DRAFT",
    "HEADER_MISMATCH",
    "SCOPE_KEY",
    "SESSION_META_KEY",
    "SESSION_NOT_FOUND",
    "SESSION_REQUIRED",
    "SESSION_STORE_UNAVAILABLE",
    "TOO_MANY_SESSIONS",
    "InvalidToken",
    "KeySet",
    "MCPSessionMiddleware",
    "MemoryStore",
    "Refusal",
    "Session",
    "SessionClaims",
    "SessionData",
    "SessionKey",
    "SessionLogFilter",
    "SessionStatus",
    "SessionStore",
    "SessionStoreFull",
    "SessionStoreUnavailable",
    "SessionsConfig",
    "StateTooLarge",
    "WireProfile",
    "authenticated_user",
    "gateway_app",
    "get_session",
]
