"""The verified handle a tool receives: its stable id, kind, expiry, server-side data and revocation."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..session import SessionData
from ._messages import iso
from ._records import DATA_PREFIX, kept_until

if TYPE_CHECKING:
    from ._registry import Handles

__all__ = ["Handle"]


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
        return f"<Handle kind={self.kind!r} id={self.id!r} expires_at={iso(self.expires_at_timestamp)}>"

    @property
    def expires_at(self) -> datetime:
        """When the handle ends at the latest (idle expiry and revocation can end it sooner)."""
        return datetime.fromtimestamp(self.expires_at_timestamp, UTC)

    @property
    def data(self) -> SessionData:
        """The handle's server-side data, in the registry's store, keyed by the stable id."""
        if self._data is None:
            kept = kept_until(self.expires_at_timestamp, self.registry.keys.leeway)  # as long as it verifies
            self._data = SessionData(self.registry.store, DATA_PREFIX + self.id, kept)
        return self._data

    async def revoke(self) -> bool:
        """End the handle everywhere at once and drop its data; ``False`` if it had already ended."""
        return await self.registry.revoke(self)
