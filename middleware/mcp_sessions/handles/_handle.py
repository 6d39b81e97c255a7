"""A handle as a tool gets it, and as it is refused; its records in the store; how many one caller may mint.

A handle's records are keyed by its stable id, never by the handle: ``h:<id>`` holds its data, its
revocation and its idle clock; ``hm:<id>`` what a principal-bound or session-tied handle was minted for.
The store keeps them while the pure check accepts the handle (its expiry plus the key set's leeway):
forgotten at the expiry itself, a revoked handle would verify again for the leeway.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from .._session import Quota, SessionData
from .._wire import Refusal, iso
from .._wire.protocol import TOO_MANY_SESSIONS
from ..stores import SessionStatus, SessionStore
from ._format import HandleKind, Payload, RequestHandles

if TYPE_CHECKING:
    _ToolCallError = Exception
else:  # the mcp SDK (and fastmcp, built on it) answers a tool's MCPError as a JSON-RPC error, not a tool result
    try:
        from mcp.shared.exceptions import MCPError as _ToolCallError
    except ImportError:  # pragma: no cover - without the SDK, a plain exception
        _ToolCallError = Exception

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


class HandleLimitExceeded(_ToolCallError):
    """:meth:`Handles.mint` refused: the caller holds its maximum of live handles, or is over the create limit.

    ``retry_after`` is the seconds to wait. Raised in a tool of the ``mcp`` SDK
    or fastmcp (it is then their ``MCPError``), the call is answered with the
    JSON-RPC error -32011 and ``data.retryAfter``; elsewhere it is a plain exception.
    """

    def __init__(self, message: str, *, retry_after: int) -> None:
        if _ToolCallError is Exception:
            Exception.__init__(self, message)
        else:
            _ToolCallError.__init__(self, TOO_MANY_SESSIONS, message, {"retryAfter": retry_after})
        self._text = message
        self.retry_after = retry_after

    @property
    def message(self) -> str:
        """What happened and when to retry, for the model."""
        return self._text


async def create_records(
    store: SessionStore,
    handle_id: str,
    kept_until: float,
    *,
    now: float,
    meta: Mapping[str, object] | None,
    data: Mapping[str, object],
) -> None:
    """A new handle's records: its data record with the data it starts with, and what it was minted for."""
    await store.create(DATA_PREFIX + handle_id, expires_at=kept_until, now=now)
    if meta is not None:
        await store.set(META_PREFIX + handle_id, META_KEY, meta, expires_at=kept_until)
    for key, value in data.items():
        await store.set(DATA_PREFIX + handle_id, key, value, expires_at=kept_until)


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

    __slots__ = ("_quota",)

    def __init__(self, count: int | None) -> None:
        if count is not None and (type(count) is not int or count < 1):
            raise ValueError("max_handles_per_caller must be a whole number, 1 or more, or None for no maximum")
        self._quota = None if count is None else Quota(count)

    @property
    def count(self) -> int | None:
        """The maximum of live handles per caller, or ``None``."""
        return None if self._quota is None else self._quota.count

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
        return Refusal(TOO_MANY_SESSIONS, message, reason="handle_limit", retry_after=retry)

    def spend(self, context: RequestHandles | None, now: float) -> None:
        """Before a mint: :class:`HandleLimitExceeded` when the caller may not mint; a create-limit slot spent."""
        if (over := self.wait(context, now)) is not None:
            retry, why = over
            raise HandleLimitExceeded(f"no handle was created: {why}; retry in {retry} s", retry_after=retry)
        if context is not None and context.caller is not None and context.create_limit is not None:
            context.create_limit.take(context.caller)

    def count_handle(self, context: RequestHandles | None, kept_until: float) -> None:
        """After a mint: the handle counts against its caller until the store forgets it."""
        if self._quota is not None and context is not None and context.caller is not None:
            self._quota.add(context.caller, kept_until)
