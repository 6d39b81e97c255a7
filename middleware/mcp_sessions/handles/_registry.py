"""Handles, the registry: its kinds and keys, and the handles it mints, verifies and revokes."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .._session import digest_of
from .._tokens import KeySet
from ..stores import SessionStore
from . import _format as fmt
from ._format import CURRENT, REQUEST, HandleKind, _Current, check_ttl
from ._handle import (
    DEFAULT_MAX_HANDLES_PER_CALLER,
    Handle,
    HandleBudget,
    HandleError,
    create_records,
    minted_for,
    refusal,
    use,
)


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
        meta = {"p": digest, "s": session_id, "se": session_expires_at or expires_at} if flags else None
        await create_records(self.store, fmt.stable_id(signed), kept_until, now=now, meta=meta, data=data or {})
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
        :class:`~mcp_sessions.SessionStoreUnavailable`.
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
