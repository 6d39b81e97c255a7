"""The handle registry: kinds, minting, verification, revocation, and server-side data."""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from .._keys import SessionKey
from .._principal import digest_of
from .._session import SessionData
from .._tokens import KeySet
from ..stores import SessionStatus, SessionStore
from . import _format as fmt
from ._context import current_handle_context
from ._errors import HandleError

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

__all__ = ["CURRENT", "Handle", "HandleKind", "Handles"]

DEFAULT_TTL: Final = 24 * 3600
MAX_TTL: Final = 10 * 365 * 24 * 3600
_MAC_DOMAIN: Final = b"mcp-sessions handle v1\x00"
_DATA_PREFIX: Final = "h:"
_META_PREFIX: Final = "hm:"
_META_KEY: Final = "m"


class _Current:
    def __repr__(self) -> str:
        return "CURRENT"


CURRENT: Final[Any] = _Current()
"""Take the principal from the current request's handle context (the default)."""


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key_material(key: SessionKey) -> bytes | None:
    """The secret bytes a key's handle MAC key is derived from; ``None`` for a verify-only key."""
    if key.signing_key is None:
        return None
    if isinstance(key.signing_key, bytes):
        return key.signing_key
    if isinstance(key.signing_key, ec.EllipticCurvePrivateKey):
        return key.signing_key.private_numbers().private_value.to_bytes(32, "big")
    if isinstance(key.signing_key, ed25519.Ed25519PrivateKey):
        return key.signing_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return None  # pragma: no cover - SessionKey admits no other kind


class HandleKind:
    """One kind of handle (``basket``): its name, prefix, lifetimes and the tool that creates one.

    Declare it at module level and register it with :meth:`Handles.register`
    (or let :meth:`Handles.kind` do both). Use it as a tool parameter's type
    metadata, ``Annotated[Handle, basket]``: the input schema shows a string
    with the kind's ``pattern`` and a description, and the tool receives the
    verified :class:`Handle`.

    ``prefix`` (1 to 4 characters, ``[a-z][a-z0-9]*``) starts every handle of
    the kind (``bsk_…``). ``ttl`` is the default lifetime, ``idle_ttl`` ends a
    handle unused for that long. ``create`` names the tool that mints one
    (default ``create_<name>``): error messages tell the model to call it.
    """

    __slots__ = ("create", "description", "idle_ttl", "length", "name", "pattern", "prefix", "ttl")

    def __init__(
        self,
        name: str,
        *,
        prefix: str,
        ttl: float = DEFAULT_TTL,
        idle_ttl: float | None = None,
        create: str | None = None,
        description: str | None = None,
    ) -> None:
        if not isinstance(name, str) or not name or len(name) > 64 or not name.isprintable():
            raise ValueError("a handle kind's name must be 1 to 64 printable characters")
        if not isinstance(prefix, str) or not fmt.PREFIX_SHAPE.fullmatch(prefix):
            raise ValueError(
                f"the prefix {prefix!r} is not 1 to {fmt.MAX_PREFIX_CHARS} characters of [a-z0-9] "
                "starting with a letter (it keeps handles within 40 characters)"
            )
        _check_ttl("ttl", ttl)
        if idle_ttl is not None:
            _check_ttl("idle_ttl", idle_ttl)
        self.name = name
        self.prefix = prefix
        self.ttl = float(ttl)
        self.idle_ttl = None if idle_ttl is None else float(idle_ttl)
        self.create = create or f"create_{name}"
        self.description = description or (
            f"A {name} handle ({prefix}_…) as {self.create} returned it; pass it exactly as returned, "
            f"or call {self.create} for a new one."
        )
        self.pattern = fmt.pattern(prefix)
        self.length = len(prefix) + 1 + fmt.PAYLOAD_CHARS

    def __repr__(self) -> str:
        return f"HandleKind({self.name!r}, prefix={self.prefix!r})"

    @property
    def shown(self) -> str:
        """How messages name a handle of this kind: its prefix and an ellipsis."""
        return f"{self.prefix}_…"

    # -- pydantic -----------------------------------------------------------------

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from ._params import core_schema_for

        return core_schema_for(self)

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {
            "type": "string",
            "pattern": self.pattern,
            "minLength": self.length,
            "maxLength": self.length,
            "description": self.description,
        }


class Handle:
    """A verified handle, as a tool receives it.

    ``id`` is the stable id (safe to log; key your own records by it), ``kind``
    the kind's name, ``data`` the server-side data (the same atomic operations
    as ``session.data``), ``expires_at`` the absolute expiry. ``token`` is the
    handle string itself, a bearer credential: never log it.
    """

    __slots__ = ("_data", "expires_at_timestamp", "id", "kind", "principal_bound", "registry", "session_id", "token")

    def __init__(
        self,
        *,
        registry: Handles,
        token: str,
        handle_id: str,
        kind: str,
        expires_at: int,
        principal_bound: bool,
        session_id: str | None,
    ) -> None:
        self.registry = registry
        self.token = token
        self.id = handle_id
        self.kind = kind
        self.expires_at_timestamp = expires_at
        self.principal_bound = principal_bound
        self.session_id = session_id
        self._data: SessionData | None = None

    def __repr__(self) -> str:
        return f"<Handle kind={self.kind!r} id={self.id!r} expires_at={_iso(self.expires_at_timestamp)}>"

    @property
    def expires_at(self) -> datetime:
        """When the handle ends at the latest (idle expiry and revocation can end it sooner)."""
        return datetime.fromtimestamp(self.expires_at_timestamp, UTC)

    @property
    def data(self) -> SessionData:
        """The handle's server-side data, in the registry's store, keyed by the stable id."""
        if self._data is None:
            self._data = SessionData(self.registry.store, _DATA_PREFIX + self.id, self.expires_at_timestamp)
        return self._data

    async def revoke(self) -> bool:
        """End the handle everywhere at once and drop its data; ``False`` if it had already ended."""
        return await self.registry.revoke(self)


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
        self._mac_keys: dict[str, tuple[int, bytes]] = {}
        for key in keys.keys:
            material = _key_material(key)
            if material is not None:
                self._mac_keys[key.kid] = (fmt.key_hint(key.kid), fmt.mac_key(material))
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
        audience = self.keys.audience.encode()
        self._bases[kind.name] = {
            kid: (hint, hmac.new(key, _MAC_DOMAIN + audience + b"\x00" + kind.name.encode() + b"\x00", hashlib.sha256))
            for kid, (hint, key) in self._mac_keys.items()
        }
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

    def _digest_of(self, principal: Any) -> str | None:
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
        data: Mapping[str, Any] | None = None,
        principal: Any = CURRENT,
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
        _check_ttl("ttl", lifetime)
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
        await self.store.create(_DATA_PREFIX + handle_id, expires_at=expires_at, now=current)
        if flags:
            meta = {"p": digest, "s": session_id, "se": session_expires_at or expires_at}
            await self.store.set(_META_PREFIX + handle_id, _META_KEY, meta, expires_at=expires_at)
        for key, value in (data or {}).items():
            await self.store.set(_DATA_PREFIX + handle_id, key, value, expires_at=expires_at)
        return token

    # -- verifying ----------------------------------------------------------------------

    def _error(self, reason: Any, spec: HandleKind, handle_id: str | None = None, **details: Any) -> HandleError:
        return HandleError(reason, _message(reason, spec, **details), kind=spec.name, handle_id=handle_id)

    def authenticate(
        self,
        value: Any,
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
            spec = expected or _ANY
            raise self._error("malformed", spec)
        spec_or_none = self.kind_of(value)
        if spec_or_none is None:
            raise self._error("malformed", expected or _ANY)
        spec = spec_or_none
        if expected is not None and spec is not expected:
            raise HandleError(
                "wrong_kind",
                _message("wrong_kind", expected, other=spec),
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
        self, value: Any, *, kind: HandleKind | str | None = None, principal: Any = CURRENT, now: float | None = None
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
        self, value: Any, principal_digest: str | None, *, expected: HandleKind | None = None, now: float | None = None
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
            _DATA_PREFIX + handle_id, expires_at=payload.expires_at, now=current, idle_ttl=spec.idle_ttl
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
                expires_at=float(meta.get("se") or payload.expires_at),
                now=current,
                idle_ttl=self.session_idle_ttl,
            )
            if session_status is not SessionStatus.ACTIVE:
                # The session ended: end the handle too, so its data goes now rather than at its expiry.
                await self.store.revoke(_DATA_PREFIX + handle_id, expires_at=payload.expires_at)
                raise self._error("revoked", spec, handle_id, session=True)
        return Handle(
            registry=self,
            token=value,
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
            error.message = _message("other_principal", spec)
            error.args = (error.message,)
            error.handle_id = handle_id

    # -- revoking ---------------------------------------------------------------------------

    async def revoke(self, handle: Handle | str, *, principal: Any = CURRENT) -> bool:
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
        return await self.store.revoke(_DATA_PREFIX + handle.id, expires_at=handle.expires_at_timestamp)


def _check_ttl(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TTL:
        raise ValueError(f"{name} must be a positive number of seconds, at most {MAX_TTL} (ten years)")


class _AnyKind:
    """Stands in for the kind in messages about strings that name no registered kind."""

    name = "handle"
    prefix = ""
    create = "the tool that creates it"
    shown = "handle"
    length = 0


_ANY: Any = _AnyKind()


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _message(
    reason: str,
    spec: Any,
    *,
    other: Any = None,
    at: int | None = None,
    idle: float | None = None,
    session: bool = False,
) -> str:
    what = f"{spec.name} handle {spec.shown}" if spec is not _ANY else "this value"
    again = f"call {spec.create} for a new one"
    if reason == "malformed":
        if spec is _ANY:
            return "this value is not a handle any tool here issued; pass a handle exactly as it was returned"
        return (
            f"{what} is incomplete or mistyped (a {spec.name} handle is exactly {spec.length} characters "
            f"starting {spec.prefix}_); pass it exactly as {spec.create} returned it, or {again}"
        )
    if reason == "forged":
        return f"{what} was never issued or was mistyped; pass it exactly as {spec.create} returned it, or {again}"
    if reason == "wrong_kind":
        return (
            f"this argument takes a {spec.name} handle ({spec.shown}), not {_article(other.name)} {other.name} "
            f"handle ({other.shown}); "
            f"pass the {spec.name} handle {spec.create} returned, or {again}"
        )
    if reason == "expired":
        if idle is not None:
            return f"{what} expired after {idle:g} seconds unused; {again}"
        return f"{what} expired at {_iso(at or 0)}; {again}"
    if reason == "revoked":
        ended = "its session ended" if session else "it was closed or revoked"
        return f"{what} has ended ({ended}) and cannot be used again; {again}"
    if reason == "other_principal":
        return f"{what} belongs to another user and cannot be used here; call {spec.create} for your own"
    return f"{what} was refused; {again}"  # pragma: no cover - every reason is handled above
