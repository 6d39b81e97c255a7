"""Minting, verifying and revoking data-layer sessions: what every wire shares.

Wires differ in names and shapes only; a session is the same JWT, checked the
same way, whichever wire names it.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from starlette.types import Scope

from .._otel import TRACEPARENT_CLAIM
from .._tokens import InvalidToken, KeySet, SessionClaims
from .._wire import Refusal, store_unavailable
from .._wire.protocol import TOO_MANY_SESSIONS
from ..stores import SessionStatus, SessionStore, SessionStoreUnavailable
from ._limits import RateLimit
from ._principal import (
    ENDPOINT_CLAIM,
    PRINCIPAL_CLAIM,
    PrincipalHook,
    authenticated_user,
    digest_of,
    hook_failed,
    principal_digest,
)
from ._session import Session, SessionBus

if TYPE_CHECKING:
    from .._otel import Operation

logger = logging.getLogger("mcp_sessions")


class SessionNotFound(Exception):
    """A session id that names no live session of this caller; ``reason`` is safe to log."""

    def __init__(self, reason: str, session_id: str | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.session_id = session_id


class Minted(NamedTuple):
    """A new session: its wire id, its claims (``claims.expires_at``: the token's expiry) and when the session ends
    if unused (``expires_at``: :attr:`Session.expires_at`, the token's expiry or sooner by the idle timeout)."""

    token: str
    claims: SessionClaims
    expires_at: float


class SessionService:
    """The session machinery one middleware instance shares across its wires."""

    __slots__ = (
        "_reads_user",
        "_sync_principal",
        "binds_endpoint",
        "bus",
        "idle_ttl",
        "keys",
        "limit",
        "principal",
        "store",
        "ttl",
    )

    def __init__(
        self,
        *,
        keys: KeySet,
        store: SessionStore,
        ttl: float,
        idle_ttl: float | None,
        principal: PrincipalHook | None,
        limit: RateLimit | None = None,
        binds_endpoint: bool = False,
        bus: SessionBus | None = None,
    ) -> None:
        self.keys = keys
        self.bus = bus
        """The subscription bus sessions publish their own events through, and their streams are ended by."""
        self.binds_endpoint = binds_endpoint
        """Whether a session is bound to the MCP endpoint (the request path) it was minted at."""
        self.store = store
        self.ttl = ttl
        self.idle_ttl = idle_ttl
        self.principal = principal
        self._reads_user = principal is authenticated_user  # the default hook: no user on the scope, no principal
        self._sync_principal = not (  # an instance whose __call__ is async is an async hook too
            inspect.iscoroutinefunction(principal) or inspect.iscoroutinefunction(type(principal).__call__)
        )
        self.limit = limit

    def _anonymous(self, scope: Scope) -> bool:
        """Whether the default hook would find no user at all: the app has no auth (or it has not run)."""
        return self._reads_user and scope.get("user") is None

    def owns(self, session: Session, scope: Scope) -> bool:
        """Whether ``session`` (resolved with ``owner_later``) is the caller's, as ``scope`` says now."""
        if not self._sync_principal:
            return True  # an async hook was asked when the session was resolved
        expected = None
        if self.principal is not None and not self._anonymous(scope):
            try:
                principal = self.principal(scope)
            except Exception:
                hook_failed()
                return False
            if inspect.isawaitable(principal):  # a synchronous function that returned one: not awaited here
                if inspect.iscoroutine(principal):
                    principal.close()
                return False
            expected = None if principal is None else digest_of(str(principal), self.keys.audience)
        return session.claims.get(PRINCIPAL_CLAIM) == expected

    async def principal_of(self, scope: Scope) -> str | None:
        """The caller's principal digest (see :func:`principal_digest`)."""
        return await principal_digest(self.principal, scope, self.keys.audience)

    async def mint(self, scope: Scope, operation: Operation | None) -> Minted:
        """A new session for the caller; its creation span and principal ride in the signed token."""
        now = time.time()
        extra: dict[str, str] = {}
        if operation is not None and (traceparent := operation.traceparent()) is not None:
            extra[TRACEPARENT_CLAIM] = traceparent
        principal = await self.principal_of(scope)
        self._limited(scope, principal)
        if principal is not None:
            extra[PRINCIPAL_CLAIM] = principal
        if self.binds_endpoint:
            extra[ENDPOINT_CLAIM] = scope["path"]
        # Nothing is stored: the token says when it was issued (iat, a whole second), and the idle clock
        # starts there; so does the promised expiry, which counted from `now` fell up to 1 s too late.
        token, claims = self.keys.mint_session_token(ttl=self.ttl, now=now, extra_claims=extra)
        session_ends = (
            claims.expires_at if self.idle_ttl is None else min(claims.expires_at, claims.issued_at + self.idle_ttl)
        )
        logger.debug("session created (sid=%s)", claims.session_id)
        return Minted(token, claims, session_ends)

    async def resolve(
        self, scope: Scope, token: str, state_token: str | None, *, endpoint: bool = True, owner_later: bool = False
    ) -> Session:
        """The live session ``token`` names for this caller; :class:`SessionNotFound` otherwise.

        ``endpoint=False`` for an ordinary route of the app, which may read a session minted at any endpoint.
        ``owner_later=True`` leaves the principal to :meth:`owns`, asked once the app's own auth has run,
        when the principal hook can be asked there (it is synchronous).
        """
        now = time.time()
        sid = None
        keys = self.keys
        try:
            claims = keys.verify_session_token(token, now=now)
            sid = claims.session_id
            await self._check_bindings(claims.extra, scope, endpoint=endpoint, owner_later=owner_later)
            try:
                state_json = None if state_token is None else keys.verify_state(sid, state_token)
            except InvalidToken as exc:
                raise InvalidToken(f"state: {exc.reason}") from None
            # The store keeps the session's records (a deletion, the idle clock) for as long as the token
            # is accepted, exp + leeway: forgotten at exp, a deleted session would come back for `leeway` s.
            status = await self.store.touch(
                sid,
                expires_at=claims.expires_at + keys.leeway,
                now=now,
                idle_ttl=self.idle_ttl,
                issued_at=claims.issued_at,
            )
            if status is not SessionStatus.ACTIVE:
                raise InvalidToken(status.value)
        except InvalidToken as exc:
            logger.debug("session rejected: %s (sid=%s)", exc.reason, sid)
            reason = exc.reason
            if reason not in ("expired", "revoked", "idle_expired"):  # the rejection counter's few reasons
                reason = "invalid_state" if reason.startswith("state:") else "invalid_token"
            raise SessionNotFound(reason, sid) from None
        except SessionStoreUnavailable as exc:
            raise store_unavailable(exc) from None
        return Session(
            self,
            token=token,
            session_id=sid,
            issued_at=claims.issued_at,
            token_expires_at=claims.expires_at,
            claims=claims.extra,
            state_token=state_token,
            state_json=state_json,
            now=now,
        )

    async def _check_bindings(
        self, extra: Mapping[str, Any], scope: Scope, *, endpoint: bool, owner_later: bool
    ) -> None:
        """Refuse a session bound to another caller or endpoint (see :meth:`resolve`)."""
        # Bound both ways: another principal's session, and an anonymous one presented by a principal
        # (fixation: its anonymous creator would read what the principal writes), are unknown here.
        # The default hook reads scope["user"]: without one (no auth on the app) the caller is anonymous.
        if not (owner_later and self._sync_principal) and extra.get(PRINCIPAL_CLAIM) != (
            None if self._anonymous(scope) else await self.principal_of(scope)
        ):
            raise InvalidToken("bound to another principal")
        # Minted at another MCP endpoint; one minted by the key's holder with no endpoint is valid anywhere.
        if endpoint and (minted_at := extra.get(ENDPOINT_CLAIM)) is not None and minted_at != scope["path"]:
            raise InvalidToken("minted at another endpoint")

    async def adopt(self, scope: Scope, session_id: str, source: str) -> Session | None:
        """A session without a token (a transport session, a host conversation), keyed by ``session_id``.

        Its data lives in the store like a data-layer session's and ends by
        ``idle_ttl`` (or :meth:`end`); ``None`` once it has ended.
        """
        now = time.time()
        kept_until = int(now + self.ttl)  # no token: the store keeps its records as long as one would live
        try:
            status = await self.store.touch(session_id, expires_at=kept_until, now=now, idle_ttl=self.idle_ttl)
        except SessionStoreUnavailable as exc:
            raise store_unavailable(exc) from None
        if status is not SessionStatus.ACTIVE:
            logger.debug("%s session ended: %s (sid=%s)", source, status.value, session_id)
            return None
        return Session(
            self, session_id=session_id, issued_at=int(now), token_expires_at=kept_until, now=now, source=source
        )

    async def end(self, session_id: str) -> bool:
        """End a session :meth:`adopt` gave (its transport session ended) and drop its data."""
        try:
            ended = await self.store.revoke(session_id, expires_at=time.time() + self.ttl)
        except SessionStoreUnavailable as exc:
            logger.warning("could not drop an ended transport session's data: %s", exc)
            return False
        if self.bus is not None:
            await self.bus.end_session(session_id)
        return ended

    def _limited(self, scope: Scope, principal: str | None) -> None:
        """Refuse (429) a caller over the create limit: by principal, else by client address (and by both,
        where the limit counts ``per_address``)."""
        if self.limit is not None and (wait := self.limit.take_for(scope, principal)) > 0:
            raise Refusal(
                TOO_MANY_SESSIONS,
                "Too many sessions created or deleted, retry later",
                reason="rate_limited",
                retry_after=max(1, math.ceil(wait)),
            )

    async def revoke(self, session: Session, scope: Scope | None = None) -> bool:
        """End ``session`` on every replica; ``False`` if it had already ended."""
        if scope is not None:
            self._limited(scope, session.claims.get(PRINCIPAL_CLAIM))
        try:
            revoked = await self.store.revoke(session.id, expires_at=session.token_expires_at + self.keys.leeway)
        except SessionStoreUnavailable as exc:
            raise store_unavailable(exc) from None
        if revoked:
            logger.debug("session deleted (sid=%s)", session.id)
            if self.bus is not None:  # a publish that fails is logged and dropped
                await self.bus.end_session(session.id)
        return revoked

    async def still_active(self, session: Session) -> bool:
        """Whether ``session`` may still be used, touching it as a request does (``True`` if the store fails)."""
        try:
            status = await self.store.touch(
                session.id,
                expires_at=session.token_expires_at + self.keys.leeway,
                now=time.time(),
                idle_ttl=self.idle_ttl,
                issued_at=session.issued_at,
            )
        except SessionStoreUnavailable:
            return True  # a store outage ends no stream: the next check asks again
        return status is SessionStatus.ACTIVE
