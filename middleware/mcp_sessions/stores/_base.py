"""The store interface (revocation, idle expiry, server-side session data),
and stores named by URL: ``store_from_url("sqlite:///var/lib/mcp/sessions.db")``, with a registry for more schemes."""

from __future__ import annotations

import enum
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection
from typing import Any
from urllib.parse import parse_qs, urlsplit


class SessionStatus(enum.Enum):
    """What :meth:`SessionStore.touch` found: the session may be used, or why not."""

    ACTIVE = "active"
    """The session may be used (a session the store has no record of yet is active)."""
    REVOKED = "revoked"
    """The session was deleted: the middleware answers "not found"."""
    IDLE_EXPIRED = "idle_expired"
    """The session went unused for longer than ``idle_ttl`` and has ended: "not found"."""


class SessionStoreUnavailable(Exception):
    """The store cannot answer now; the client should retry (never -32043)."""


class SessionStore(ABC):
    """Where a deployment keeps what a stateless token cannot carry.

    Every method takes the session's stable id (the ``sid`` claim), never the
    token. ``expires_at`` is the session's absolute expiry (Unix seconds):
    a store keeps nothing about a session past it. Values are JSON-serializable;
    every store stores a copy, so mutating a value after ``set`` changes nothing.
    Stores raise :class:`SessionStoreUnavailable` when their backend fails.

    **Creation stores nothing.** A session the store has no record of is live
    unless revoked: its idle clock starts at the token's ``iat`` (``issued_at``).
    A record appears when the idle clock must move (:meth:`touch` with an
    ``idle_ttl``), when data is written, or when the session is revoked.

    **Revocation is final.** :meth:`revoke` leaves a tombstone until the token's own
    expiry and drops the session's data. Data writes after it go nowhere: ``set``
    stores nothing, ``incr`` and ``update`` return what they would have stored,
    and nothing is raised (a request that outlives its session's deletion is not
    an error of the tool that runs in it).

    Required: :meth:`touch`, :meth:`revoke` and the data methods. Optional, with
    defaults: :meth:`ping` (does nothing), :meth:`aclose` (does nothing).
    """

    @abstractmethod
    async def touch(
        self,
        session_id: str,
        *,
        expires_at: float,
        now: float,
        idle_ttl: float | None,
        issued_at: float | None = None,
    ) -> SessionStatus:
        """Check a session on use and move its idle clock: the hot path, one round trip.

        Without a record the session is ``ACTIVE`` unless its idle clock, started at
        ``issued_at`` (``now`` when ``None``), has run out. With ``idle_ttl=None`` a touch
        only reads (the revocation check) and writes nothing.
        """

    @abstractmethod
    async def revoke(self, session_id: str, *, expires_at: float) -> bool:
        """End a session and drop its data; ``False`` if it was already revoked.

        The tombstone lives until ``expires_at`` (the token's expiry; a store may add a
        clock-skew margin). A session without a record counts as live, so its first
        revoke returns ``True``: ``revoke`` is not given the token's ``iat``, so a store
        cannot tell that such a session's idle clock ran out. (The middleware touches a
        session before deleting it, so an idle-expired session is refused before this.)
        A session whose record shows it idle-expired is already revoked: ``False``.
        """

    @abstractmethod
    async def get(self, session_id: str, key: str, default: object = None) -> Any:
        """The value stored under ``key``, or ``default``."""

    @abstractmethod
    async def set(self, session_id: str, key: str, value: object, *, expires_at: float) -> None:
        """Store a copy of ``value`` (JSON-serializable) under ``key``; a no-op once revoked."""

    @abstractmethod
    async def delete(self, session_id: str, key: str) -> None:
        """Remove ``key`` if present."""

    @abstractmethod
    async def incr(self, session_id: str, key: str, amount: int = 1, *, expires_at: float) -> int:
        """Atomically add ``amount`` to an integer value (missing counts as 0)."""

    @abstractmethod
    async def update(
        self, session_id: str, key: str, fn: Callable[[Any], object], *, expires_at: float, default: object = None
    ) -> object:
        """Atomically replace a value with ``fn(old)``; returns the new value."""

    @abstractmethod
    async def items(self, session_id: str) -> dict[str, Any]:
        """Every key and value of the session's data (a copy)."""

    async def ping(self) -> None:  # noqa: B027 - optional hook
        """Raise :class:`SessionStoreUnavailable` unless the backend answers now (for readiness probes)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the middleware never calls it, the application does."""


def touch_verdict(
    found: tuple[bool, float | None] | None, start: float, now: float, idle_ttl: float | None, interval: float
) -> tuple[SessionStatus, bool]:
    """What a touch finds, from the session's record (revoked, last seen) or ``None``, and whether to write it.

    The one idle rule: a session ends when idle for longer than ``idle_ttl`` plus the ``interval`` a store
    writes its idle clock at (so used exactly ``idle_ttl`` seconds after its last use, it is still alive).
    Without a last use the clock starts at ``start``. A record is written when an idle-expired session
    has one, or when a full ``interval`` has passed since the clock last moved.
    """
    if found is not None and found[0]:
        return SessionStatus.REVOKED, False
    if idle_ttl is None:
        return SessionStatus.ACTIVE, False
    seen = start if found is None or found[1] is None else found[1]
    if now - seen > idle_ttl + interval:
        return SessionStatus.IDLE_EXPIRED, found is not None
    return SessionStatus.ACTIVE, now > seen and now - seen >= interval


def encode_value(value: object) -> str:
    """A data value as the JSON text every store keeps (``TypeError`` or ``ValueError`` if it is not JSON)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def adding(key: str, amount: int) -> Callable[[Any], int]:
    """The ``update`` that ``incr(key, amount)`` is, for a store that counts by reading and writing back."""
    if type(amount) is not int:
        raise TypeError("incr takes an integer amount")

    def add(current: Any) -> int:
        if type(current) is not int:
            raise TypeError(f"session data {key!r} is not an integer")
        return current + amount

    return add


_PARAMETER = re.compile(r"[a-z][a-z0-9_]{0,39}")


def url_query(url: str, allowed: Collection[str]) -> dict[str, str]:
    """The URL's query parameters, each given once, all among ``allowed``; a message never repeats a value."""
    try:
        query = parse_qs(urlsplit(url).query, keep_blank_values=True, strict_parsing=False)
    except ValueError:
        raise ValueError("the store URL's query is not valid") from None
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        accepted = ", ".join(sorted(allowed)) or "none"
        # A name that is not a plain word may be a piece of a password that holds an unescaped '&'.
        if not _PARAMETER.fullmatch(unknown[0]):
            raise ValueError(
                f"a store URL parameter has a name that is not a plain word (accepted: {accepted}); "
                "percent-encode '&', '?' and '#' in a password"
            )
        raise ValueError(
            f"unknown store URL parameter {unknown[0]!r} (accepted: {accepted}): "
            "pass the store's own options as keyword arguments"
        )
    for name, values in query.items():
        if len(values) != 1:
            raise ValueError(f"store URL parameter {name!r} is given more than once")
    return {name: values[0] for name, values in query.items()}


def url_integer(text: str, what: str) -> int:
    """``text`` as a non-negative integer; else a ``ValueError`` that says ``what`` must be one."""
    if not text.isascii() or not text.isdigit():
        raise ValueError(f"{what} must be a non-negative integer")
    return int(text)
