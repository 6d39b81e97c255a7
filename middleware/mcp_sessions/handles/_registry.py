"""The handle registry: kinds registered, handles minted, verified and revoked against the key set and store."""

from __future__ import annotations

import hmac
import math
import time
from collections.abc import Iterable, Mapping
from typing import Final, cast

from ..session import digest_of
from ..stores import SessionStatus, SessionStore
from ..tokens import KeySet
from . import _format as fmt
from ._context import current_handle_context
from ._errors import HandleError, HandleErrorReason
from ._handle import DATA_PREFIX, Handle
from ._keys import derive_mac_keys, kind_macs
from ._kind import DEFAULT_TTL, HandleKind, check_ttl
from ._messages import ANY_KIND, KindWords, message

__all__ = ["CURRENT", "Handle", "HandleKind", "Handles"]

_META_PREFIX: Final = "hm:"
_META_KEY: Final = "m"


class _Current:
    def __repr__(self) -> str:
        return "CURRENT"


CURRENT: Final = _Current()
"""Take the principal from the current request's handle context (the default)."""


class Handles:
    """Mints and verifies handles with the middleware's key set and store.

    The MAC key of each key in ``keys`` that holds secret material (an HS256
    secret, or an ES256 / EdDSA private key) is derived from it; the key set's
    signer mints, every such key verifies, so rotation works as for sessions.
    ``store`` keeps revocations, idle clocks and handle data, keyed by the
    handle's stable id (``h:<id>``, ``hm:<id>``), never by the handle.
    ``session_idle_ttl`` is the session middleware's ``idle_ttl``: a handle tied
    to a session then ends when the session idles out.
    """

    def __init__(
        self,
        keys: KeySet,
        store: SessionStore,
        *,
        kinds: Iterable[HandleKind] = (),
        session_idle_ttl: float | None = None,
        max_handles_per_call: int = 16,
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
        self._mac_keys = derive_mac_keys(keys)
        if not self._mac_keys:
            raise ValueError(
                "no key of the KeySet holds secret material to derive a handle MAC key from: "
                "add a secret or a private key"
            )
        signer = keys.signer
        self._signer_kid = signer.kid if signer is not None and signer.kid in self._mac_keys else None
        self._by_name: dict[str, HandleKind] = {}
        self._by_prefix: dict[str, HandleKind] = {}
        self.prefixes: tuple[str, ...] = ()  # "bsk_" for each kind: how a handle is recognised
        # kind name -> kid -> (key hint, HMAC already fed the domain, the audience and the kind's name)
        self._bases: dict[str, dict[str, tuple[int, hmac.HMAC]]] = {}
        for kind in kinds:
            self.register(kind)

    def __repr__(self) -> str:
        return f"Handles(kinds={sorted(self._by_name)!r})"

    # -- kinds ------------------------------------------------------------------------

    def kind(
        self,
        name: str,
        *,
        prefix: str,
        ttl: float = DEFAULT_TTL,
        idle_ttl: float | None = None,
        create: str | None = None,
        description: str | None = None,
    ) -> HandleKind:
        """Declare a :class:`HandleKind` and register it (see :meth:`register`)."""
        return self.register(
            HandleKind(name, prefix=prefix, ttl=ttl, idle_ttl=idle_ttl, create=create, description=description)
        )

    def register(self, kind: HandleKind) -> HandleKind:
        """Make this registry mint and verify handles of ``kind``; names and prefixes must be unique."""
        if not isinstance(kind, HandleKind):
            raise TypeError("register takes a HandleKind")
        if self._by_name.get(kind.name) is kind:
            return kind
        if kind.name in self._by_name:
            raise ValueError(f"the handle kind {kind.name!r} is already registered")
        if kind.prefix in self._by_prefix:
            raise ValueError(
                f"the prefix {kind.prefix!r} already belongs to the kind {self._by_prefix[kind.prefix].name!r}"
            )
        self._bases[kind.name] = kind_macs(self._mac_keys, self.keys.audience, kind.name)
        self._by_name[kind.name] = kind
        self._by_prefix[kind.prefix] = kind
        self.prefixes = (*self.prefixes, f"{kind.prefix}_")
        return kind

    @property
    def kinds(self) -> Mapping[str, HandleKind]:
        """The registered kinds, by name."""
        return dict(self._by_name)

    def kind_of(self, value: str) -> HandleKind | None:
        """The registered kind whose prefix ``value`` starts with (``bsk_…``), if any: a cheap first look."""
        prefix, sep, _ = value.partition("_")
        return self._by_prefix.get(prefix) if sep else None

    def _kind(self, kind: HandleKind | str) -> HandleKind:
        if isinstance(kind, HandleKind):
            if self._by_name.get(kind.name) is not kind:
                raise ValueError(f"the kind {kind.name!r} is not registered here: call handles.register(kind) first")
            return kind
        found = self._by_name.get(kind)
        if found is None:
            raise KeyError(f"no handle kind {kind!r} is registered: call handles.kind({kind!r}, prefix=...) first")
        return found

    # -- principals --------------------------------------------------------------------

    def principal_digest(self, principal: str) -> str:
        """The pseudonymous digest of a principal, as the session middleware computes it."""
        return digest_of(str(principal), self.keys.audience)

    def _digest_of(self, principal: str | _Current | None) -> str | None:
        if principal is CURRENT:
            context = current_handle_context()
            return None if context is None else context.principal_digest
        if principal is None:
            return None
        if not isinstance(principal, str) or not principal:
            raise TypeError("principal must be a non-empty string, None, or CURRENT")
        return self.principal_digest(principal)

    # -- minting ----------------------------------------------------------------------

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

        ``ttl`` overrides the kind's lifetime. ``data`` seeds ``handle.data``.
        ``principal`` (a principal's name, ``None`` for none, by default the
        current request's) binds the handle: another principal's requests are
        refused. ``session_id`` ties it to a session: when the session ends,
        so does the handle (``session_expires_at``, the session's expiry, also
        caps the handle's). One store write, two with a binding or a tie.
        """
        spec = self._kind(kind)
        if self._signer_kid is None:
            raise ValueError("the KeySet's signer holds no secret material: this Handles registry can only verify")
        current = time.time() if now is None else now
        lifetime = spec.ttl if ttl is None else ttl
        check_ttl("ttl", lifetime)
        expires = current + lifetime
        if session_id is not None:
            if not isinstance(session_id, str) or not session_id:
                raise TypeError("session_id must be a session's stable id (session.id)")
            if session_expires_at is not None:
                expires = min(expires, session_expires_at)
        expires_at = math.ceil(expires)
        if expires_at <= current:
            raise ValueError("the handle would be born expired (its session ends now)")
        digest = self._digest_of(principal)
        flags = (fmt.SESSION_FLAG if session_id is not None else 0) | (fmt.PRINCIPAL_FLAG if digest else 0)
        hint, base = self._bases[spec.name][self._signer_kid]
        signed = fmt.pack(flags=flags, hint=hint, expires_at=expires_at)
        token = fmt.encode(spec.prefix, signed, fmt.mac(base, signed, digest))
        handle_id = fmt.stable_id(signed[: fmt.RANDOM_BYTES])
        kept_until = self._kept_until(expires_at)
        await self.store.create(DATA_PREFIX + handle_id, expires_at=kept_until, now=current)
        if flags:
            meta = {"p": digest, "s": session_id, "se": session_expires_at or expires_at}
            await self.store.set(_META_PREFIX + handle_id, _META_KEY, meta, expires_at=kept_until)
        for key, value in (data or {}).items():
            await self.store.set(DATA_PREFIX + handle_id, key, value, expires_at=kept_until)
        return token

    # -- verifying ----------------------------------------------------------------------

    def _error(
        self,
        reason: HandleErrorReason,
        spec: KindWords,
        handle_id: str | None = None,
        *,
        at: int | None = None,
        idle: float | None = None,
        session: bool = False,
    ) -> HandleError:
        text = message(reason, spec, at=at, idle=idle, session=session)
        return HandleError(reason, text, kind=spec.name, handle_id=handle_id)

    def authenticate(
        self,
        value: object,
        principal_digest: str | None,
        *,
        expected: HandleKind | None = None,
        now: float | None = None,
    ) -> tuple[HandleKind, fmt.Payload, str]:
        """Shape, kind, MAC and expiry of a handle, with no I/O: its kind, fields and stable id.

        Raises :class:`HandleError`; a MAC that fails for a principal-bound
        handle is reported ``forged`` here (only the store can tell
        ``other_principal``, see :meth:`verify_digest`).
        """
        if type(value) is not str:
            spec = expected or ANY_KIND
            raise self._error("malformed", spec)
        spec_or_none = self.kind_of(value)
        if spec_or_none is None:
            raise self._error("malformed", expected or ANY_KIND)
        spec = spec_or_none
        if expected is not None and spec is not expected:
            raise HandleError(
                "wrong_kind",
                message("wrong_kind", expected, other=spec),
                kind=expected.name,
            )
        payload = fmt.decode(value[len(spec.prefix) + 1 :])
        if payload is None:
            raise self._error("malformed", spec)
        principal = principal_digest if payload.principal_bound else None
        if (
            payload.version != fmt.VERSION
            or (payload.principal_bound and principal is None)
            or not self._mac_matches(spec, payload, principal)
        ):
            raise self._error("forged", spec)
        handle_id = payload.handle_id
        current = time.time() if now is None else now
        if payload.expires_at + self.keys.leeway <= current:
            raise self._error("expired", spec, handle_id, at=payload.expires_at)
        return spec, payload, handle_id

    def _mac_matches(self, spec: HandleKind, payload: fmt.Payload, principal: str | None) -> bool:
        for hint, base in self._bases[spec.name].values():
            if hint == payload.hint and hmac.compare_digest(fmt.mac(base, payload.signed, principal), payload.mac):
                return True
        return False

    async def verify(
        self,
        value: object,
        *,
        kind: HandleKind | str | None = None,
        principal: str | _Current | None = CURRENT,
        now: float | None = None,
    ) -> Handle:
        """The verified :class:`Handle` for ``value``, or :class:`HandleError`.

        Checks shape, kind (``kind``, if given), MAC, principal (by default the
        current request's), expiry, then revocation and idle expiry in the
        store, and the tied session's tombstone. Store failures raise
        :class:`~mcp_sessions.SessionStoreUnavailable`.
        """
        expected = None if kind is None else self._kind(kind)
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
        current = time.time() if now is None else now
        try:
            spec, payload, handle_id = self.authenticate(value, principal_digest, expected=expected, now=current)
        except HandleError as exc:
            if exc.reason == "forged" and isinstance(value, str):
                await self._refine_forged(value, exc)
            raise
        status = await self.store.touch(
            DATA_PREFIX + handle_id,
            expires_at=self._kept_until(payload.expires_at),
            now=current,
            idle_ttl=spec.idle_ttl,
        )
        if status is SessionStatus.IDLE_EXPIRED:
            raise self._error("expired", spec, handle_id, idle=spec.idle_ttl)
        if status is not SessionStatus.ACTIVE:
            raise self._error("revoked", spec, handle_id)
        session_id = None
        if payload.session_bound:
            meta = await self.store.get(_META_PREFIX + handle_id, _META_KEY)
            if not isinstance(meta, dict) or not isinstance(meta.get("s"), str):
                raise self._error("revoked", spec, handle_id)  # the link is gone: fail closed
            session_id = meta["s"]
            session_status = await self.store.touch(
                session_id,
                expires_at=self._kept_until(float(meta.get("se") or payload.expires_at)),
                now=current,
                idle_ttl=self.session_idle_ttl,
            )
            if session_status is not SessionStatus.ACTIVE:
                # The session ended: end the handle too, so its data goes now rather than at its expiry.
                await self.store.revoke(DATA_PREFIX + handle_id, expires_at=self._kept_until(payload.expires_at))
                raise self._error("revoked", spec, handle_id, session=True)
        return Handle(
            registry=self,
            token=cast(str, value),  # authenticate refused anything but a str
            handle_id=handle_id,
            kind=spec.name,
            expires_at=payload.expires_at,
            principal_bound=payload.principal_bound,
            session_id=session_id,
        )

    async def _refine_forged(self, value: str, error: HandleError) -> None:
        """Turn ``forged`` into ``other_principal`` when the handle is genuine but bound to someone else.

        Only principal-bound handles whose MAC failed get here: the store holds
        the digest they were minted for, and the MAC under it decides.
        """
        spec = self.kind_of(value)
        payload = None if spec is None else fmt.decode(value[len(spec.prefix) + 1 :])
        if spec is None or payload is None or payload.version != fmt.VERSION or not payload.principal_bound:
            return
        handle_id = payload.handle_id
        meta = await self.store.get(_META_PREFIX + handle_id, _META_KEY)
        owner = meta.get("p") if isinstance(meta, dict) else None
        if isinstance(owner, str) and self._mac_matches(spec, payload, owner):
            error.reason = "other_principal"
            error.message = message("other_principal", spec)
            error.args = (error.message,)
            error.handle_id = handle_id

    # -- revoking ---------------------------------------------------------------------------

    async def revoke(self, handle: Handle | str, *, principal: str | _Current | None = CURRENT) -> bool:
        """End a handle on every replica sharing the store, and drop its data.

        Takes a verified :class:`Handle`, or a handle string (verified first,
        for ``principal``). ``False`` when it had already ended.
        """
        if not isinstance(handle, Handle):
            try:
                handle = await self.verify(handle, principal=principal)
            except HandleError as exc:
                if exc.reason in ("revoked", "expired"):
                    return False
                raise
        return await self.store.revoke(
            DATA_PREFIX + handle.id, expires_at=self._kept_until(handle.expires_at_timestamp)
        )

    def _kept_until(self, expires_at: float) -> float:
        """How long the store keeps a handle's records: while its pure check accepts it (expiry + leeway).

        Forgotten at the expiry itself, a revoked handle would verify again for ``leeway`` seconds.
        """
        return expires_at + self.keys.leeway
