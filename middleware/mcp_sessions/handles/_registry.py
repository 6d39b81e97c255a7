"""The handle registry: its configuration, its kinds, and the handles it mints, verifies and revokes.

The work is done elsewhere: the kind table (:mod:`._table`), minting
(:mod:`._mint`), verifying (:mod:`._verify`), the store's records
(:mod:`._records`). :class:`Handles` is what applications hold.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Final

from ..session import digest_of
from ..stores import SessionStore
from ..tokens import KeySet
from . import _format as fmt
from ._budget import DEFAULT_MAX_HANDLES_PER_CALLER, HandleBudget
from ._context import current_handle_context
from ._errors import HandleError
from ._handle import Handle
from ._keys import derive_mac_keys
from ._kind import DEFAULT_TTL, HandleKind
from ._mint import mint_handle
from ._records import DATA_PREFIX, kept_until
from ._table import KindTable
from ._verify import authenticate, verify_handle

__all__ = ["CURRENT", "Handle", "HandleKind", "Handles"]


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
    to a session then ends when the session idles out. ``max_handles_per_caller``
    bounds the live handles one caller (a principal, else a client address) may
    mint, in this process (``None``: no maximum); see :class:`HandleBudget`.
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
        mac_keys = derive_mac_keys(keys)
        if not mac_keys:
            raise ValueError(
                "no key of the KeySet holds secret material to derive a handle MAC key from: "
                "add a secret or a private key"
            )
        signer = keys.signer
        self._signer_kid = signer.kid if signer is not None and signer.kid in mac_keys else None
        self._table = KindTable(mac_keys, keys.audience)
        for kind in kinds:
            self.register(kind)

    def __repr__(self) -> str:
        return f"Handles(kinds={sorted(self._table.by_name)!r})"

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
        return self._table.register(kind)

    @property
    def kinds(self) -> Mapping[str, HandleKind]:
        """The registered kinds, by name."""
        return self._table.by_name

    @property
    def creators(self) -> frozenset[str]:
        """The tools that create a handle (each kind's ``create``): refused up front for a caller at its maximum."""
        return self._table.creators

    @property
    def prefixes(self) -> tuple[str, ...]:
        """``"bsk_"`` for each kind: how a handle is recognised."""
        return self._table.prefixes

    def kind_of(self, value: str) -> HandleKind | None:
        """The registered kind whose prefix ``value`` starts with (``bsk_…``), if any: a cheap first look."""
        return self._table.of(value)

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

    # -- minting, verifying, revoking ----------------------------------------------------

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

        In a request, the handle counts against the request's caller:
        :class:`HandleLimitExceeded` when it holds ``max_handles_per_caller``
        live handles, or is over the session middleware's create limit.
        """
        spec = self._table.lookup(kind)
        current = time.time() if now is None else now
        context = current_handle_context()
        self.budget.spend(context, current)
        token, kept = await mint_handle(
            self,
            self._table,
            self._signer_kid,
            spec,
            ttl=ttl,
            data=data,
            principal_digest=self._digest_of(principal),
            session_id=session_id,
            session_expires_at=session_expires_at,
            now=current,
        )
        self.budget.count_handle(context, kept)
        return token

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
        current = time.time() if now is None else now
        return authenticate(
            self._table, value, principal_digest, expected=expected, now=current, leeway=self.keys.leeway
        )

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
        expected = None if kind is None else self._table.lookup(kind)
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
        return await verify_handle(self, self._table, value, principal_digest, expected=expected, now=now)

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
        expires_at = kept_until(handle.expires_at_timestamp, self.keys.leeway)
        return await self.store.revoke(DATA_PREFIX + handle.id, expires_at=expires_at)
