"""Verifying a handle: shape, kind, MAC and expiry with no I/O, then its records in the store."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

from ..stores import SessionStatus, SessionStore
from . import _format as fmt
from ._errors import HandleError, HandleErrorReason
from ._handle import Handle
from ._kind import HandleKind
from ._messages import ANY_KIND, KindWords, message
from ._records import DATA_PREFIX, META_KEY, META_PREFIX, kept_until
from ._table import KindTable

if TYPE_CHECKING:
    from ._registry import Handles

__all__ = ["authenticate", "verify_handle"]


def _error(
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
    table: KindTable,
    value: object,
    principal_digest: str | None,
    *,
    expected: HandleKind | None,
    now: float,
    leeway: float,
) -> tuple[HandleKind, fmt.Payload, str]:
    """Shape, kind, MAC and expiry of a handle, with no I/O; see :meth:`Handles.authenticate`."""
    if type(value) is not str:
        raise _error("malformed", expected or ANY_KIND)
    spec = table.of(value)
    if spec is None:
        raise _error("malformed", expected or ANY_KIND)
    if expected is not None and spec is not expected:
        raise HandleError("wrong_kind", message("wrong_kind", expected, other=spec), kind=expected.name)
    payload = fmt.decode(value[len(spec.prefix) + 1 :])
    if payload is None:
        raise _error("malformed", spec)
    principal = principal_digest if payload.principal_bound else None
    if (
        payload.version != fmt.VERSION
        or (payload.principal_bound and principal is None)
        or not table.mac_matches(spec, payload, principal)
    ):
        raise _error("forged", spec)
    handle_id = payload.handle_id
    if payload.expires_at + leeway <= now:
        raise _error("expired", spec, handle_id, at=payload.expires_at)
    return spec, payload, handle_id


async def verify_handle(
    handles: Handles,
    table: KindTable,
    value: object,
    principal_digest: str | None,
    *,
    expected: HandleKind | None,
    now: float | None,
) -> Handle:
    """The verified :class:`Handle` for ``value``; see :meth:`Handles.verify_digest`."""
    current = time.time() if now is None else now
    leeway = handles.keys.leeway
    try:
        spec, payload, handle_id = authenticate(
            table, value, principal_digest, expected=expected, now=current, leeway=leeway
        )
    except HandleError as exc:
        if exc.reason == "forged" and isinstance(value, str):
            await _refine_forged(table, handles.store, value, exc)
        raise
    kept = kept_until(payload.expires_at, leeway)
    status = await handles.store.touch(DATA_PREFIX + handle_id, expires_at=kept, now=current, idle_ttl=spec.idle_ttl)
    if status is SessionStatus.IDLE_EXPIRED:
        raise _error("expired", spec, handle_id, idle=spec.idle_ttl)
    if status is not SessionStatus.ACTIVE:
        raise _error("revoked", spec, handle_id)
    session_id = await _tied_session(handles, spec, payload, current) if payload.session_bound else None
    return Handle(
        registry=handles,
        token=cast(str, value),  # authenticate refused anything but a str
        handle_id=handle_id,
        kind=spec.name,
        expires_at=payload.expires_at,
        principal_bound=payload.principal_bound,
        session_id=session_id,
    )


async def _tied_session(handles: Handles, spec: HandleKind, payload: fmt.Payload, now: float) -> str:
    """The id of the live session a session-tied handle belongs to; a handle whose session ended ends too."""
    handle_id, store, leeway = payload.handle_id, handles.store, handles.keys.leeway
    meta = await store.get(META_PREFIX + handle_id, META_KEY)
    if not isinstance(meta, dict) or not isinstance(meta.get("s"), str):
        raise _error("revoked", spec, handle_id)  # the link is gone: fail closed
    session_id: str = meta["s"]
    session_status = await store.touch(
        session_id,
        expires_at=kept_until(float(meta.get("se") or payload.expires_at), leeway),
        now=now,
        idle_ttl=handles.session_idle_ttl,
    )
    if session_status is not SessionStatus.ACTIVE:
        # The session ended: end the handle too, so its data goes now rather than at its expiry.
        await store.revoke(DATA_PREFIX + handle_id, expires_at=kept_until(payload.expires_at, leeway))
        raise _error("revoked", spec, handle_id, session=True)
    return session_id


async def _refine_forged(table: KindTable, store: SessionStore, value: str, error: HandleError) -> None:
    """Turn ``forged`` into ``other_principal`` when the handle is genuine but bound to someone else.

    Only principal-bound handles whose MAC failed get here: the store holds
    the digest they were minted for, and the MAC under it decides.
    """
    spec = table.of(value)
    payload = None if spec is None else fmt.decode(value[len(spec.prefix) + 1 :])
    if spec is None or payload is None or payload.version != fmt.VERSION or not payload.principal_bound:
        return
    handle_id = payload.handle_id
    meta = await store.get(META_PREFIX + handle_id, META_KEY)
    owner = meta.get("p") if isinstance(meta, dict) else None
    if isinstance(owner, str) and table.mac_matches(spec, payload, owner):
        error.reason = "other_principal"
        error.message = message("other_principal", spec)
        error.args = (error.message,)
        error.handle_id = handle_id
