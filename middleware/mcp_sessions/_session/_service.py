"""Minting, verifying and revoking data-layer sessions: what every wire shares; who is calling; and the
bounds on what a caller may make the middleware do.

Wires differ in names and shapes only; a session is the same JWT, checked the
same way, whichever wire names it. A session is bound to its creator's
principal (the principal hook's answer) as a pseudonymous digest.

The bounds, per caller, in this process:
Creating a session stores nothing, so a flood of ``sessions/create`` costs
CPU only; deleting one writes a revocation entry that lives until the token
expires. ``create_limit=(count, seconds)`` (a :class:`RateLimit`) bounds both.
What a caller can make the store keep without a token of its own (a host
conversation's data, a handle) is bounded by a :class:`Quota`: so many live
records at once. A caller is its authenticated principal, or its client
address when there is none (:func:`caller_of`); a rate limit ``per_address``
(the gateway's, whose principal is a credential only the upstream checks)
counts the client address as well, so that made-up credentials do not
multiply one address's budget.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import inspect
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol

from starlette.authentication import SimpleUser
from starlette.types import Scope

from .._bounded import BoundedDict
from .._otel import TRACEPARENT_CLAIM
from .._tokens import InvalidToken, KeySet, SessionClaims
from .._wire import Refusal, store_unavailable
from .._wire.protocol import INTERNAL_ERROR, RATE_LIMITED
from ..stores import SessionStatus, SessionStore, SessionStoreUnavailable
from ._session import Session, SessionBus

if TYPE_CHECKING:
    from .._otel import Operation

logger = logging.getLogger("mcp_sessions")

MAX_TRACKED: Final = 100_000  # callers remembered at once; the least recently seen is forgotten first
MAX_TRACKED_RECORDS: Final = 1_000_000  # a quota's records remembered at once, all callers together

PrincipalHook = Callable[[Scope], "str | Awaitable[str | None] | None"]


class ScopedCreateHook(Protocol):
    """An ``on_create`` hook that takes the create's request too: its ASGI ``scope``, a keyword."""

    def __call__(self, claims: SessionClaims, *, scope: Scope) -> Awaitable[None]: ...


CreateHook = Callable[[SessionClaims], Awaitable[None]] | ScopedCreateHook
"""Awaited as a session is minted, before anything is handed out; it may raise :class:`Refusal` to refuse it. One
that takes a ``scope`` keyword is given the create's request's ASGI scope (who asks, through what), as the
principal hook is; one that does not is called with the claims alone, as before that keyword was offered."""
PRINCIPAL_CLAIM: Final = "pbh"
ENDPOINT_CLAIM: Final = "mep"
"""The MCP endpoint a session was minted at (the request's path), when sessions are bound to one."""


def authenticated_user(scope: Scope) -> str | None:
    """The default principal hook: the authenticated user the server's own auth set on the scope.

    The session work runs inside the server's authentication (see
    ``_asgi.py``), where Starlette's ``AuthenticationMiddleware`` has set
    ``scope["user"]``. For the ``mcp`` SDK's bearer auth the principal is the
    access token's (client id, issuer, subject), as the SDK's own
    ``principal_components`` names it (a subject is unique only per issuer);
    for any other authenticated Starlette user, its ``identity`` (a string as
    it is, any other type with its type: ``1`` and ``"1"`` are two principals),
    or a ``SimpleUser``'s ``username``. Never a ``display_name``, which users often choose: a user
    without an identity gets no binding, and the log says so once per user class.
    """
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    access_token = getattr(user, "access_token", None)
    client_id = getattr(access_token, "client_id", None)
    if isinstance(client_id, str):
        claims = getattr(access_token, "claims", None)
        issuer = claims.get("iss") if isinstance(claims, dict) else None
        subject = getattr(access_token, "subject", None)
        return json.dumps(["mcp", client_id, None if issuer is None else str(issuer), subject])
    identity = _identity(user)
    if identity is None or identity == "":
        _say_unbound(type(user))
        return None
    if isinstance(identity, str):
        return identity
    return json.dumps(["user", type(identity).__qualname__, str(identity)])  # typed: user 1 is not user "1"


def _identity(user: object) -> object:
    if isinstance(user, SimpleUser):  # its username is the one its auth backend signed in
        return user.username
    try:  # Starlette's BaseUser raises NotImplementedError for what a user class leaves out
        return getattr(user, "identity", None)
    except NotImplementedError:
        return None


_UNBOUND: set[type] = set()


def _say_unbound(user_class: type) -> None:
    if user_class not in _UNBOUND:
        _UNBOUND.add(user_class)
        logger.warning(
            "mcp-sessions: authenticated users of type %s have no identity, so their sessions are bound to no "
            "principal: give the class an identity property (a stable id, not a display name)",
            f"{user_class.__module__}.{user_class.__qualname__}",
        )


def hook_failed() -> Refusal:
    """Log that the principal hook failed, a server bug, and refuse the request: -32603, nothing forwarded."""
    logger.exception("the principal hook failed")
    return Refusal(INTERNAL_ERROR, "Internal error", reason="principal_hook_failed")


async def principal_digest(hook: PrincipalHook | None, scope: Scope, audience: str) -> str | None:
    """A pseudonymous digest of the authenticated principal, or None when there is none.

    Bound into the token at creation; a later request by another principal
    (or by none) is refused as "not found". A failing hook is a server bug:
    the request gets -32603 and nothing is forwarded.
    """
    if hook is None:
        return None
    try:
        principal = hook(scope)
        if inspect.isawaitable(principal):
            principal = await principal
    except Exception:
        raise hook_failed() from None
    return None if principal is None else digest_of(str(principal), audience)


def _takes_scope(hook: CreateHook) -> bool:
    """Whether an ``on_create`` hook takes the create's ``scope`` (a keyword, or ``**kwargs``): asked once, of its
    signature, so that a hook written before the keyword was offered is called as it always was."""
    try:
        inspect.signature(hook).bind(None, scope=None)
    except (TypeError, ValueError):  # ValueError: a callable with no signature to read
        return False
    return True


def digest_of(principal: str, audience: str) -> str:
    """The pseudonymous digest of ``principal`` for ``audience``: what tokens and handles are bound to."""
    digest = hashlib.sha256(
        b"mcp-sessions principal\x00%s\x00%s" % (audience.encode(), principal.encode("utf-8", "surrogatepass"))
    )
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


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

    def __init__(
        self,
        *,
        keys: KeySet,
        store: SessionStore,
        ttl: float,
        idle_ttl: float | None,
        principal: PrincipalHook | None,
        limit: RateLimit | None = None,
        on_create: CreateHook | None = None,
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
        self._sync_principal = not (  # an instance whose __call__ is async is an async hook too
            inspect.iscoroutinefunction(principal) or inspect.iscoroutinefunction(type(principal).__call__)
        )
        self.limit = limit
        self.on_create = on_create
        self._create_takes_scope = on_create is not None and _takes_scope(on_create)

    def owns(self, session: Session, scope: Scope) -> bool:
        """Whether ``session`` (resolved with ``owner_later``) is the caller's, as ``scope`` says now."""
        if not self._sync_principal:
            return True  # an async hook was asked when the session was resolved
        expected = None
        if self.principal is not None:
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
        if self.on_create is not None:
            hook: Callable[..., Awaitable[None]] = self.on_create
            try:
                await (hook(claims, scope=scope) if self._create_takes_scope else hook(claims))
            except Refusal:
                raise
            except Exception:
                logger.exception("the on_create hook failed")
                raise Refusal(INTERNAL_ERROR, "Internal error", reason="create_hook_failed") from None
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
        if not (owner_later and self._sync_principal) and extra.get(PRINCIPAL_CLAIM) != await self.principal_of(scope):
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

    @property
    def limits_creation(self) -> bool:
        """Whether new sessions count against the create limit."""
        return self.limit is not None

    def wait_to_create(self, scope: Scope, principal: str | None) -> float:
        """Seconds before the caller may create a session (0: now, and it is counted)."""
        return 0.0 if self.limit is None else self.limit.take_for(scope, principal)

    @property
    def kept_for(self) -> float:
        """Seconds an adopted session's records live after a request starts it: the ttl and the leeway."""
        return self.ttl + self.keys.leeway

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
                RATE_LIMITED,
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


def caller_of(scope: Scope, principal: str | None) -> str:
    """Whom a limit counts: the principal (its digest) when there is one, else the client address."""
    return principal if principal is not None else _address(scope)


def _address(scope: Scope) -> str:
    client = scope.get("client")
    return f"address:{client[0] if client else ''}"


class RateLimit:
    """A token bucket per caller: ``count`` operations, refilled over ``seconds``.

    ``per_address``: :meth:`take_for` spends from the client address's bucket too, and only when both have one.
    """

    def __init__(self, count: int, seconds: float, *, per_address: bool = False) -> None:
        self.count = count
        self.seconds = float(seconds)
        self._rate = count / self.seconds
        self.per_address = per_address
        self._buckets: BoundedDict[str, tuple[float, float]] = BoundedDict(MAX_TRACKED)

    def take_for(self, scope: Scope, principal: str | None) -> float:
        """:meth:`take` for the request's caller (:func:`caller_of`) and, ``per_address``, its client address."""
        caller = caller_of(scope, principal)
        return self.take(caller, _address(scope)) if self.per_address else self.take(caller)

    def take(self, *callers: str) -> float:
        """Spend one operation of each caller's, if each has one; 0 if so, else the seconds until each has one."""
        now = time.monotonic()
        tokens = {caller: self._refilled(caller, now) for caller in callers}
        allowed = all(left >= 1 for left in tokens.values())
        for caller, left in tokens.items():
            self._buckets[caller] = (left - 1 if allowed else left, now)
        return 0.0 if allowed else max((1 - left) / self._rate for left in tokens.values() if left < 1)

    def wait(self, caller: str) -> float:
        """What :meth:`take` would answer, spending nothing: 0 if ``caller`` has an operation left."""
        tokens = self._refilled(caller, time.monotonic())
        return 0.0 if tokens >= 1 else (1 - tokens) / self._rate

    def _refilled(self, caller: str, now: float) -> float:
        tokens, last = self._buckets.get(caller, (float(self.count), now))
        return min(float(self.count), tokens + (now - last) * self._rate)


class Quota(BoundedDict[str, list[float]]):
    """At most ``count`` live records per caller, each counted until the time it expires.

    A quota, not a rate: a caller at its maximum gets a slot back when its
    oldest record ends. It counts in this process, for at most
    :data:`MAX_TRACKED` callers and :data:`MAX_TRACKED_RECORDS` records (the
    least recently seen caller is forgotten first). Times are Unix seconds.
    Each caller maps to a heap of its records' expiries.
    """

    def __init__(self, count: int) -> None:
        super().__init__(MAX_TRACKED)
        self.count = count
        self.records = 0

    def wait(self, caller: str, now: float) -> float:
        """0 if ``caller`` may add a record now, else the seconds until its oldest one ends."""
        expiries = self.get(caller)
        while expiries and expiries[0] <= now:  # the ended records are dropped
            heapq.heappop(expiries)
            self.records -= 1
        return 0.0 if expiries is None or len(expiries) < self.count else expiries[0] - now

    def add(self, caller: str, expires_at: float) -> None:
        """Count a record of ``caller``'s until ``expires_at`` (after :meth:`wait` said there was room)."""
        expiries = self.get(caller, [])
        heapq.heappush(expiries, expires_at)
        self.records += 1
        self[caller] = expiries
        while self.records > MAX_TRACKED_RECORDS:
            self.evicted(*self.popitem(last=False))

    def evicted(self, key: str, value: list[float]) -> None:
        """A caller forgotten for room: its records are no longer counted."""
        self.records -= len(value)
