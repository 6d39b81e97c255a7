"""The session: what application code sees (:class:`Session`), and the service that mints, resolves and ends it."""

from ._limits import Quota, RateLimit, caller_of, parse_limit
from ._log_filter import SessionLogFilter
from ._principal import PRINCIPAL_CLAIM, PrincipalHook, authenticated_user, digest_of, principal_digest
from ._service import Minted, SessionNotFound, SessionService
from ._session import (
    SCOPE_KEY,
    STATE_ATTRIBUTE,
    HeaderSession,
    Session,
    SessionBus,
    SessionData,
    current_conversation,
    current_session,
    get_session,
    header_session,
)

__all__ = [
    "PRINCIPAL_CLAIM",
    "SCOPE_KEY",
    "STATE_ATTRIBUTE",
    "HeaderSession",
    "Minted",
    "PrincipalHook",
    "Quota",
    "RateLimit",
    "Session",
    "SessionBus",
    "SessionData",
    "SessionLogFilter",
    "SessionNotFound",
    "SessionService",
    "authenticated_user",
    "caller_of",
    "current_conversation",
    "current_session",
    "digest_of",
    "get_session",
    "header_session",
    "parse_limit",
    "principal_digest",
]
