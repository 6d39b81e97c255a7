"""Minting a handle: its signed string, and its records in the store."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from . import _format as fmt
from ._kind import HandleKind, check_ttl
from ._records import DATA_PREFIX, META_KEY, META_PREFIX, kept_until
from ._table import KindTable

if TYPE_CHECKING:
    from ._registry import Handles

__all__ = ["mint_handle"]


async def mint_handle(
    handles: Handles,
    table: KindTable,
    signer_kid: str | None,
    spec: HandleKind,
    *,
    ttl: float | None,
    data: Mapping[str, object] | None,
    principal_digest: str | None,
    session_id: str | None,
    session_expires_at: float | None,
    now: float,
) -> tuple[str, float]:
    """A new handle of ``spec``, signed by the key ``signer_kid``, and until when the store keeps its records.

    See :meth:`Handles.mint`.
    """
    if signer_kid is None:
        raise ValueError("the KeySet's signer holds no secret material: this Handles registry can only verify")
    lifetime = spec.ttl if ttl is None else ttl
    check_ttl("ttl", lifetime)
    expires = now + lifetime
    if session_id is not None:
        if not isinstance(session_id, str) or not session_id:
            raise TypeError("session_id must be a session's stable id (session.id)")
        if session_expires_at is not None:
            expires = min(expires, session_expires_at)
    expires_at = math.ceil(expires)
    if expires_at <= now:
        raise ValueError("the handle would be born expired (its session ends now)")
    flags = (fmt.SESSION_FLAG if session_id is not None else 0) | (fmt.PRINCIPAL_FLAG if principal_digest else 0)
    hint, base = table.signing_base(spec, signer_kid)
    signed = fmt.pack(flags=flags, hint=hint, expires_at=expires_at)
    token = fmt.encode(spec.prefix, signed, fmt.mac(base, signed, principal_digest))
    handle_id = fmt.stable_id(signed[: fmt.RANDOM_BYTES])
    store, kept = handles.store, kept_until(expires_at, handles.keys.leeway)
    await store.create(DATA_PREFIX + handle_id, expires_at=kept, now=now)
    if flags:
        meta = {"p": principal_digest, "s": session_id, "se": session_expires_at or expires_at}
        await store.set(META_PREFIX + handle_id, META_KEY, meta, expires_at=kept)
    for key, value in (data or {}).items():
        await store.set(DATA_PREFIX + handle_id, key, value, expires_at=kept)
    return token, kept
