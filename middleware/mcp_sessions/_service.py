"""Minting, verifying and revoking data-layer sessions: what every wire shares.

Wires differ in names and shapes only; a session is the same JWT, checked the
same way, whichever wire names it.
"""

from __future__ import annotations

import functools
import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple

from starlette.types import Scope

from ._answers import store_unavailable
from ._principal import PRINCIPAL_CLAIM, PrincipalHook, principal_digest
from ._session import Session
from ._telemetry import TRACEPARENT_CLAIM
from ._tokens import InvalidToken, KeySet, SessionClaims
from .stores import SessionStatus, SessionStore, SessionStoreUnavailable

if TYPE_CHECKING:
    from ._telemetry import Operation

__all__ = ["Minted", "SessionRefused", "SessionService", "iso"]

logger = logging.getLogger("mcp_sessions")


@functools.lru_cache(maxsize=64)
def iso(timestamp: int) -> str:
    """RFC 3339 UTC; cached, as most echoes of a process repeat a few expiry times."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SessionRefused(Exception):
    """A session id that names no live session of this caller; ``reason`` is safe to log."""

    def __init__(self, reason: str, session_id: str | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.session_id = session_id


class Minted(NamedTuple):
    """A new session: its wire id, its claims and when it ends if unused."""

    token: str
    claims: SessionClaims
    expires_at: float


def rejection_reason(reason: str) -> str:
    """A low-cardinality reason for the rejection counter."""
    if reason in ("expired", "revoked", "idle_expired"):
        return reason
    if reason.startswith("state:"):
        return "invalid_state"
    return "invalid_token"


class SessionService:
    """The session machinery one middleware instance shares across its wires."""

    __slots__ = ("idle_ttl", "keys", "principal", "store", "ttl")

    def __init__(
        self, *, keys: KeySet, store: SessionStore, ttl: float, idle_ttl: float | None, principal: PrincipalHook | None
    ) -> None:
        self.keys = keys
        self.store = store
        self.ttl = ttl
        self.idle_ttl = idle_ttl
        self.principal = principal

    async def principal_of(self, scope: Scope) -> str | None:
        """The caller's principal digest (see :func:`principal_digest`)."""
        return await principal_digest(self.principal, scope, self.keys.audience)

    async def mint(self, scope: Scope, operation: Operation | None) -> Minted:
        """A new session for the caller; its creation span and principal ride in the signed token."""
        now = time.time()
        extra: dict[str, str] = {}
        if operation is not None and (traceparent := operation.traceparent()) is not None:
            extra[TRACEPARENT_CLAIM] = traceparent
        if (principal := await self.principal_of(scope)) is not None:
            extra[PRINCIPAL_CLAIM] = principal
        # Nothing is stored: the token says when it was issued, and the idle clock starts there.
        token, claims = self.keys.mint_session_token(ttl=self.ttl, now=now, extra_claims=extra)
        expires = claims.expires_at if self.idle_ttl is None else min(claims.expires_at, now + self.idle_ttl)
        logger.debug("session created (sid=%s)", claims.session_id)
        return Minted(token, claims, expires)

    async def resolve(self, scope: Scope, token: str, state_token: str | None) -> Session:
        """The live session ``token`` names for this caller; :class:`SessionRefused` otherwise."""
        now = time.time()
        sid = None
        try:
            claims = self.keys.verify_session_token(token, now=now)
            sid = claims.session_id
            bound = claims.extra.get(PRINCIPAL_CLAIM)
            if bound is not None and bound != await self.principal_of(scope):
                raise InvalidToken("bound to another principal")
            try:
                state_json = None if state_token is None else self.keys.verify_state(sid, state_token)
            except InvalidToken as exc:
                raise InvalidToken(f"state: {exc.reason}") from None
            status = await self.store.touch(
                sid, expires_at=claims.expires_at, now=now, idle_ttl=self.idle_ttl, issued_at=claims.issued_at
            )
            if status is not SessionStatus.ACTIVE:
                raise InvalidToken(status.value)
        except InvalidToken as exc:
            logger.debug("session rejected: %s (sid=%s)", exc.reason, sid)
            raise SessionRefused(rejection_reason(exc.reason), sid) from None
        except SessionStoreUnavailable as exc:
            raise store_unavailable(exc) from None
        return Session(
            token=token,
            session_id=sid,
            issued_at=claims.issued_at,
            expires_at=claims.expires_at,
            claims=claims.extra,
            keys=self.keys,
            store=self.store,
            state_token=state_token,
            state_json=state_json,
            now=now,
            idle_ttl=self.idle_ttl,
        )

    async def revoke(self, session: Session) -> bool:
        """End ``session`` on every replica; ``False`` if it had already ended."""
        try:
            revoked = await self.store.revoke(session.id, expires_at=session.token_expires_at)
        except SessionStoreUnavailable as exc:
            raise store_unavailable(exc) from None
        if revoked:
            logger.debug("session deleted (sid=%s)", session.id)
        return revoked
