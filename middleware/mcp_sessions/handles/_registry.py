"""Handles, the registry: its kinds and keys, and the handles it mints, verifies and revokes.

A verified :class:`Handle` is what a tool gets; :class:`HandleError` what a refused one raises. A handle's
records are keyed by its stable id, never by the handle: ``h:<id>`` holds its data, its revocation and its
idle clock; ``hm:<id>`` what a principal-bound or session-tied handle was minted for. The store keeps them
while the pure check accepts the handle (its expiry plus the key set's leeway): forgotten at the expiry
itself, a revoked handle would verify again for the leeway. :class:`HandleBudget` is how many one caller may
hold at once.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal

from .._session import Quota, SessionData, digest_of
from .._tokens import KeySet
from .._wire import Refusal, iso
from .._wire.protocol import RATE_LIMITED
from ..stores import SessionStatus, SessionStore
from . import _format as fmt
from ._format import CURRENT, REQUEST, HandleKind, Payload, RequestHandles, _Current, check_ttl

DATA_PREFIX: Final = "h:"
META_PREFIX: Final = "hm:"
META_KEY: Final = "m"
DEFAULT_MAX_HANDLES_PER_CALLER: Final = 1_000
"""How many live handles one caller may hold at once unless ``max_handles_per_caller`` says otherwise."""

HandleErrorReason = Literal["malformed", "forged", "wrong_kind", "expired", "revoked", "other_principal"]
"""Why a handle was refused: the ``reason`` of a :class:`HandleError`."""

# What the model reads for each reason: what happened and what to do, naming at most the handle's prefix.
_REFUSALS: Final[dict[str, str]] = {
    "malformed": "{what} is incomplete or mistyped (a {name} handle is exactly {length} characters starting "
    "{prefix}_); pass it exactly as {create} returned it, or {again}",
    "forged": "{what} was never issued or was mistyped; pass it exactly as {create} returned it, or {again}",
    "wrong_kind": "this argument takes a {name} handle ({shown}), not {other}; pass the {name} handle {create} "
    "returned, or {again}",
    "expired": "{what} expired {when}; {again}",
    "revoked": "{what} has ended ({ended}) and cannot be used again; {again}",
    "other_principal": "{what} belongs to another user and cannot be used here; call {create} for your own",
}


class Handle:
    """A verified handle, as a tool receives it.

    ``id`` is the stable id (safe to log; key your own records by it), ``kind``
    the kind's name, ``data`` the server-side data (the same atomic operations
    as ``session.data``), ``expires_at`` the absolute expiry. ``token`` is the
    handle string itself, a bearer credential: never log it.
    """

    def __init__(
        self, store: SessionStore, token: str, kind: str, payload: Payload, kept_until: float, session_id: str | None
    ) -> None:
        self._store = store
        self._kept_until = kept_until
        self.token = token
        self.id = payload.handle_id
        self.kind = kind
        self.expires_at_timestamp = payload.expires_at
        self.principal_bound = payload.principal_bound
        self.session_id = session_id
        self.data = SessionData(store, DATA_PREFIX + self.id, kept_until)
        """The handle's server-side data, in the registry's store, keyed by the stable id."""

    def __repr__(self) -> str:
        return f"<Handle kind={self.kind!r} id={self.id!r} expires_at={iso(self.expires_at_timestamp)}>"

    @property
    def expires_at(self) -> datetime:
        """When the handle ends at the latest (idle expiry and revocation can end it sooner)."""
        return datetime.fromtimestamp(self.expires_at_timestamp, UTC)

    async def revoke(self) -> bool:
        """End the handle everywhere at once and drop its data; ``False`` if it had already ended."""
        return await self._store.revoke(DATA_PREFIX + self.id, expires_at=self._kept_until)


class HandleError(Exception):
    """A handle was refused: ``reason``, and a message for the model that names at most the handle's prefix.

    ``kind`` is the kind the handle was checked as, and ``handle_id`` its stable
    id once the handle authenticated (for logs and spans).
    """

    def __init__(self, reason: HandleErrorReason, message: str, *, kind: str, handle_id: str | None = None) -> None:
        super().__init__(message)
        self.reason: HandleErrorReason = reason
        self.message = message
        self.kind = kind
        self.handle_id = handle_id


def refusal(
    reason: HandleErrorReason,
    kind: HandleKind | None,
    handle_id: str | None = None,
    *,
    other: HandleKind | None = None,
    at: int = 0,
    idle: float | None = None,
    session: bool = False,
) -> HandleError:
    """A handle refused as ``kind`` (``None``: no registered kind), in words for the model: what and what to do.

    ``other`` is a ``wrong_kind`` handle's kind; ``at``, ``idle`` and ``session`` say how it ended.
    """
    if kind is None:
        text = "this value is not a handle any tool here issued; pass a handle exactly as it was returned"
        return HandleError(reason, text, kind="handle")
    article = "an" if other is not None and other.name[0].lower() in "aeiou" else "a"
    text = _REFUSALS[reason].format(
        what=f"{kind.name} handle {kind.shown}",
        again=f"call {kind.create} for a new one",
        name=kind.name,
        length=kind.length,
        prefix=kind.prefix,
        create=kind.create,
        shown=kind.shown,
        other=None if other is None else f"{article} {other.name} handle ({other.shown})",
        when=f"after {idle:g} seconds unused" if idle is not None else f"at {iso(at)}",
        ended="its session ended" if session else "it was closed or revoked",
    )
    return HandleError(reason, text, kind=kind.name, handle_id=handle_id)


class HandleLimitExceeded(Exception):
    """:meth:`Handles.mint` refused: the caller holds its maximum of live handles, or is over the create limit.

    ``retry_after`` is the seconds to wait. Raised in a tool of the ``mcp`` SDK
    or fastmcp (it is then also their ``MCPError``), the call is answered with the
    JSON-RPC error -32011 and ``data.retryAfter``; elsewhere it is a plain exception.
    """

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(RATE_LIMITED, message, {"retryAfter": retry_after})  # MCPError's arguments
        self._text = message
        self.retry_after = retry_after

    @property
    def message(self) -> str:
        """What happened and when to retry, for the model."""
        return self._text

    def __str__(self) -> str:
        return self._text


@functools.cache
def raised_limit_exceeded() -> type[HandleLimitExceeded]:
    """:class:`HandleLimitExceeded` as a mint raises it: also the SDK's ``MCPError`` where the SDK is installed.

    The SDK is imported here, when a mint is first refused, never with the package.
    """
    try:  # the mcp SDK (and fastmcp, built on it) answers a tool's MCPError as a JSON-RPC error, not a tool result
        from mcp.shared.exceptions import MCPError
    except ImportError:
        return HandleLimitExceeded
    return type("HandleLimitExceeded", (HandleLimitExceeded, MCPError), {"__doc__": HandleLimitExceeded.__doc__})


async def minted_for(store: SessionStore, handle_id: str) -> dict[str, Any]:
    """What a bound or tied handle was minted for: ``p`` its principal's digest, ``s`` and ``se`` its session."""
    meta = await store.get(META_PREFIX + handle_id, META_KEY)
    return meta if isinstance(meta, dict) else {}


async def use(
    store: SessionStore,
    token: str,
    kind: HandleKind,
    payload: Payload,
    leeway: float,
    session_idle_ttl: float | None,
    now: float,
) -> Handle:
    """The authenticated handle ``token``, used now: revocation, idle expiry and its tied session, in the store.

    A tied handle counts as a use of its session, and ends with it: its data
    goes at once, not at its expiry.
    """
    handle_id, kept_until = payload.handle_id, payload.expires_at + leeway
    status = await store.touch(DATA_PREFIX + handle_id, expires_at=kept_until, now=now, idle_ttl=kind.idle_ttl)
    if status is SessionStatus.IDLE_EXPIRED:
        raise refusal("expired", kind, handle_id, idle=kind.idle_ttl)
    if status is not SessionStatus.ACTIVE:
        raise refusal("revoked", kind, handle_id)
    session_id = None
    if payload.session_bound:
        meta = await minted_for(store, handle_id)
        session_id = meta.get("s")
        if not isinstance(session_id, str):
            raise refusal("revoked", kind, handle_id)  # the link is gone: fail closed
        session_ends = float(meta.get("se") or payload.expires_at) + leeway
        status = await store.touch(session_id, expires_at=session_ends, now=now, idle_ttl=session_idle_ttl)
        if status is not SessionStatus.ACTIVE:
            await store.revoke(DATA_PREFIX + handle_id, expires_at=kept_until)
            raise refusal("revoked", kind, handle_id, session=True)
    return Handle(store, token, kind.name, payload, kept_until, session_id)


class HandleBudget:
    """The live handles a registry lets each caller hold at once (``count``; ``None``: no maximum), in this process.

    A handle counts against the caller that minted it until its records leave
    the store (its expiry, revoked or not). The caller is the request's (the
    :class:`HandleContext` names it), whose ``create_limit`` is spent too; a
    mint outside a request is the server's own and is not counted.
    """

    def __init__(self, count: int | None) -> None:
        if count is not None and (type(count) is not int or count < 1):
            raise ValueError("max_handles_per_caller must be a whole number, 1 or more, or None for no maximum")
        self._quota = None if count is None else Quota(count)

    def wait(self, context: RequestHandles | None, now: float) -> tuple[int, str] | None:
        """``None`` when the context's caller may mint now; else the whole seconds (1 or more) until it may, and why."""
        if context is None or context.caller is None:
            return None
        quota, limit = self._quota, context.create_limit
        if quota is not None and (wait := quota.wait(context.caller, now)) > 0:
            return max(1, math.ceil(wait)), f"this caller already holds {quota.count} live handles, its maximum"
        if limit is not None and (wait := limit.wait(context.caller)) > 0:
            return max(1, math.ceil(wait)), "this caller created handles faster than the create limit allows"
        return None

    def refusal(self, context: RequestHandles | None, now: float) -> Refusal | None:
        """A call of a kind's ``create`` tool, refused before it runs when its caller could mint nothing (-32011)."""
        if (over := self.wait(context, now)) is None:
            return None
        retry, why = over
        message = f"Too many handles created: {why}; retry later"
        return Refusal(RATE_LIMITED, message, reason="handle_limit", retry_after=retry)

    def spend(self, context: RequestHandles | None, now: float) -> None:
        """Before a mint: :class:`HandleLimitExceeded` when the caller may not mint; a create-limit slot spent."""
        if (over := self.wait(context, now)) is not None:
            retry, why = over
            raise raised_limit_exceeded()(f"no handle was created: {why}; retry in {retry} s", retry_after=retry)
        if context is not None and context.caller is not None and context.create_limit is not None:
            context.create_limit.take(context.caller)

    def count_handle(self, context: RequestHandles | None, kept_until: float) -> None:
        """After a mint: the handle counts against its caller until the store forgets it."""
        if self._quota is not None and context is not None and context.caller is not None:
            self._quota.add(context.caller, kept_until)


class Handles:
    """Mints and verifies handles with the middleware's key set and store.

    Each key of ``keys`` that holds secret material (an HS256 secret, an ES256
    or EdDSA private key) yields a handle MAC key: the signer mints, every such
    key verifies, so rotation works as for sessions. ``store`` keeps
    revocations, idle clocks and handle data, by stable id. ``session_idle_ttl``
    is the session middleware's ``idle_ttl``, so that an idle session ends its
    handles; ``max_handles_per_caller`` is the :class:`HandleBudget`.
    """

    def __init__(
        self,
        keys: KeySet,
        store: SessionStore,
        *,
        kinds: Iterable[HandleKind] = (),
        session_idle_ttl: float | None = None,
        max_handles_per_call: int = 16,
        max_handles_per_caller: int | None = DEFAULT_MAX_HANDLES_PER_CALLER,
    ) -> None:
        if not isinstance(keys, KeySet):
            raise TypeError("Handles needs a KeySet (the one the session middleware uses)")
        if not isinstance(store, SessionStore):
            raise TypeError("Handles needs a SessionStore (the one the session middleware uses)")
        if type(max_handles_per_call) is not int or max_handles_per_call < 1:
            raise ValueError("max_handles_per_call must be a positive integer")
        self.keys = keys
        self.store = store
        self.session_idle_ttl = session_idle_ttl
        self.max_handles_per_call = max_handles_per_call
        self.budget = HandleBudget(max_handles_per_caller)
        self._mac_keys = fmt.mac_keys(keys)
        if not self._mac_keys:
            raise ValueError(
                "no key of the KeySet holds secret material to derive a handle MAC key from: "
                "add a secret or a private key"
            )
        signer = keys.signer
        self._signer = signer.kid if signer is not None and signer.kid in self._mac_keys else None
        self._kinds: dict[str, HandleKind] = {}
        self._by_prefix: dict[str, HandleKind] = {}
        self._macs: dict[str, fmt.KindMacs] = {}  # by kind name
        self.prefixes: tuple[str, ...] = ()
        """``"bsk_"`` for each kind: how a handle is recognised."""
        self.creators: frozenset[str] = frozenset()
        """Each kind's ``create`` tool: refused up front for a caller who may mint no handle now."""
        for kind in kinds:
            self.register(kind)

    def __repr__(self) -> str:
        return f"Handles(kinds={sorted(self._kinds)!r})"

    def kind(self, name: str, *, prefix: str, **options: Any) -> HandleKind:
        """Declare a :class:`HandleKind` (``ttl``, ``idle_ttl``, ``create``, ``description`` as there), registered."""
        return self.register(HandleKind(name, prefix=prefix, **options))

    def register(self, kind: HandleKind) -> HandleKind:
        """Mint and verify handles of ``kind`` here; names and prefixes are unique, the same kind again is a no-op."""
        if not isinstance(kind, HandleKind):
            raise TypeError("register takes a HandleKind")
        if self._kinds.get(kind.name) is kind:
            return kind
        if kind.name in self._kinds:
            raise ValueError(f"the handle kind {kind.name!r} is already registered")
        if (owner := self._by_prefix.get(kind.prefix)) is not None:
            raise ValueError(f"the prefix {kind.prefix!r} already belongs to the kind {owner.name!r}")
        self._kinds[kind.name] = self._by_prefix[kind.prefix] = kind
        self._macs[kind.name] = fmt.kind_macs(self._mac_keys, self.keys.audience, kind.name)
        self.prefixes = (*self.prefixes, f"{kind.prefix}_")
        self.creators = self.creators | {kind.create}
        return kind

    @property
    def kinds(self) -> Mapping[str, HandleKind]:
        """The registered kinds, by name (a copy)."""
        return dict(self._kinds)

    def kind_of(self, value: str) -> HandleKind | None:
        """The registered kind whose prefix ``value`` starts with (``bsk_…``), if any."""
        prefix, sep, _ = value.partition("_")
        return self._by_prefix.get(prefix) if sep else None

    def principal_digest(self, principal: str) -> str:
        """The pseudonymous digest of a principal, as the session middleware computes it."""
        return digest_of(str(principal), self.keys.audience)

    async def mint(
        self,
        kind: HandleKind | str,
        *,
        ttl: float | None = None,
        data: Mapping[str, object] | None = None,
        principal: str | _Current | None = CURRENT,
        session_id: str | None = None,
        session_expires_at: float | None = None,
        now: float | None = None,
    ) -> str:
        """A new handle of ``kind``: the string to give the model.

        ``ttl`` overrides the kind's; ``data`` seeds ``handle.data``; ``principal``
        (by default the current request's) binds the handle to a principal;
        ``session_id`` ties it to a session, whose end (and ``session_expires_at``)
        ends it too. In a request it counts against the caller, and raises
        :class:`HandleLimitExceeded` when the caller may mint no more now.
        """
        spec = self._registered(kind)
        now = time.time() if now is None else now
        request = REQUEST.get()
        self.budget.spend(request, now)
        digest = self._digest_of(principal)
        if self._signer is None:
            raise ValueError("the KeySet's signer holds no secret material: this Handles registry can only verify")
        lifetime = spec.ttl if ttl is None else ttl
        check_ttl("ttl", lifetime)
        if session_id is not None and (not isinstance(session_id, str) or not session_id):
            raise TypeError("session_id must be a session's stable id (session.id)")
        session_ends = math.inf if session_id is None or session_expires_at is None else session_expires_at
        expires_at = math.ceil(min(now + lifetime, session_ends))
        if expires_at <= now:
            raise ValueError("the handle would be born expired (its session ends now)")
        flags = (fmt.SESSION_FLAG if session_id is not None else 0) | (fmt.PRINCIPAL_FLAG if digest else 0)
        hint, base = self._macs[spec.name][self._signer]
        signed = fmt.pack(flags=flags, hint=hint, expires_at=expires_at)
        kept_until = expires_at + self.keys.leeway
        handle_id = fmt.stable_id(signed)
        if flags:  # what it was minted for, then the data it starts with
            meta = {"p": digest, "s": session_id, "se": session_expires_at or expires_at}
            await self.store.set(META_PREFIX + handle_id, META_KEY, meta, expires_at=kept_until)
        for key, value in (data or {}).items():
            await self.store.set(DATA_PREFIX + handle_id, key, value, expires_at=kept_until)
        self.budget.count_handle(request, kept_until)
        return fmt.encode(spec.prefix, signed, fmt.mac(base, signed, digest))

    def authenticate(
        self,
        value: object,
        principal_digest: str | None,
        *,
        expected: HandleKind | None = None,
        now: float | None = None,
    ) -> tuple[HandleKind, fmt.Payload]:
        """Shape, kind, MAC and expiry, with no I/O: the handle's kind and fields, or :class:`HandleError`.

        A genuine handle bound to another principal is ``forged`` here: only
        the store can tell ``other_principal`` (:meth:`verify_digest`).
        """
        spec, payload = self._parse(value, expected)
        if not fmt.authentic(self._macs[spec.name], payload, principal_digest):
            raise refusal("forged", spec)
        if payload.expires_at + self.keys.leeway <= (time.time() if now is None else now):
            raise refusal("expired", spec, payload.handle_id, at=payload.expires_at)
        return spec, payload

    async def verify(
        self,
        value: object,
        *,
        kind: HandleKind | str | None = None,
        principal: str | _Current | None = CURRENT,
        now: float | None = None,
    ) -> Handle:
        """The verified :class:`Handle` for ``value``, or :class:`HandleError`.

        Shape, kind (if given), MAC, principal (by default the current
        request's) and expiry; then, in the store, revocation, idle expiry and
        the tied session. A store that cannot answer raises
        :class:`~mcp_sessions.stores.SessionStoreUnavailable`.
        """
        expected = None if kind is None else self._registered(kind)
        return await self.verify_digest(value, self._digest_of(principal), expected=expected, now=now)

    async def verify_digest(
        self,
        value: object,
        principal_digest: str | None,
        *,
        expected: HandleKind | None = None,
        now: float | None = None,
    ) -> Handle:
        """:meth:`verify` with the principal given as its digest (what the session middleware holds)."""
        now = time.time() if now is None else now
        try:
            spec, payload = self.authenticate(value, principal_digest, expected=expected, now=now)
        except HandleError as exc:
            if exc.reason == "forged":  # bound to another principal? One store read, on this path only
                spec, payload = self._parse(value, expected)
                owner = (await minted_for(self.store, payload.handle_id)).get("p") if payload.principal_bound else None
                if isinstance(owner, str) and fmt.authentic(self._macs[spec.name], payload, owner):
                    raise refusal("other_principal", spec, payload.handle_id) from None
            raise
        return await use(self.store, str(value), spec, payload, self.keys.leeway, self.session_idle_ttl, now)

    async def revoke(self, handle: Handle | str, *, principal: str | _Current | None = CURRENT) -> bool:
        """End a handle on every replica sharing the store, and drop its data; ``False`` if it had already ended.

        A handle string is verified first, for ``principal``.
        """
        if not isinstance(handle, Handle):
            try:
                handle = await self.verify(handle, principal=principal)
            except HandleError as exc:
                if exc.reason in ("revoked", "expired"):
                    return False
                raise
        return await handle.revoke()

    def _registered(self, kind: HandleKind | str) -> HandleKind:
        if isinstance(kind, HandleKind):
            if self._kinds.get(kind.name) is not kind:
                raise ValueError(f"the kind {kind.name!r} is not registered here: call handles.register(kind) first")
            return kind
        found = self._kinds.get(kind)
        if found is None:
            raise KeyError(f"no handle kind {kind!r} is registered: call handles.kind({kind!r}, prefix=...) first")
        return found

    def _digest_of(self, principal: str | _Current | None) -> str | None:
        if principal is CURRENT:
            request = REQUEST.get()
            return None if request is None else request.principal_digest
        if principal is None:
            return None
        if not isinstance(principal, str) or not principal:
            raise TypeError("principal must be a non-empty string, None, or CURRENT")
        return self.principal_digest(principal)

    def _parse(self, value: object, expected: HandleKind | None) -> tuple[HandleKind, fmt.Payload]:
        """The kind a handle string names and its decoded payload; ``malformed`` or ``wrong_kind`` if it has none."""
        spec = self.kind_of(value) if type(value) is str else None
        if spec is None:
            raise refusal("malformed", expected)
        if expected is not None and spec is not expected:
            raise refusal("wrong_kind", expected, other=spec)
        payload = fmt.decode(str(value)[len(spec.prefix) + 1 :])
        if payload is None:
            raise refusal("malformed", spec)
        return spec, payload
