"""Opt-in data-layer sessions for any Streamable HTTP MCP server, as one ASGI middleware."""

from ._config import SessionsConfig
from ._guard import Guard, Rejection
from ._keys import SessionKey
from ._middleware import MCPSessionMiddleware
from ._principal import authenticated_user
from ._protocol import HEADER_MISMATCH, SESSION_STORE_UNAVAILABLE, TOO_MANY_SESSIONS
from ._session import SCOPE_KEY, Session, SessionData, get_session
from ._tokens import InvalidToken, KeySet, SessionClaims, StateTooLarge
from .profiles import DRAFT, WireProfile
from .profiles.draft import SESSION_META_KEY, SESSION_NOT_FOUND, SESSION_REQUIRED
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
    "Guard",
    "InvalidToken",
    "KeySet",
    "MCPSessionMiddleware",
    "MemoryStore",
    "Rejection",
    "Session",
    "SessionClaims",
    "SessionData",
    "SessionKey",
    "SessionStatus",
    "SessionStore",
    "SessionStoreFull",
    "SessionStoreUnavailable",
    "SessionsConfig",
    "StateTooLarge",
    "WireProfile",
    "authenticated_user",
    "get_session",
]

__version__ = "0.1.0"
