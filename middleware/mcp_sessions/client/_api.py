"""The public methods both session transports share (one per HTTP library)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._session import SessionHandle
from ._transport import Shim


class SessionTransportAPI:
    """Create, use, delete and inspect the session a transport holds."""

    _shim: Shim[Any, Any]

    @property
    def session(self) -> SessionHandle:
        """The held session: inspect it (``id``, ``expires_at``, ``state``) or persist it (``to_dict()``)."""
        return self._shim.session

    @property
    def supports_sessions(self) -> bool | None:
        """What the server said: ``True`` (advertised), ``False`` (not advertised, or -32601), ``None`` (not yet)."""
        return self._shim.supported

    async def create(
        self,
        url: str | None = None,
        *,
        protocol_version: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> SessionHandle:
        """Create a session now, replacing any held one (which is forgotten, not deleted).

        ``url`` is the MCP endpoint; without it, the endpoint of the last request
        this transport sent. ``protocol_version`` picks the era of the request
        (default ``2026-07-28``) and ``headers`` are added to it (for example
        ``Authorization``: this request does not pass through the client's auth).
        Raises :class:`SessionError` if the server refuses (``-32601``: the
        server has no sessions).
        """
        return await self._shim.create_explicit(self._shim.endpoint(url, protocol_version, headers))

    async def delete(
        self,
        url: str | None = None,
        *,
        protocol_version: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> bool:
        """Delete the held session on the server and forget it.

        ``True`` if the server deleted it, ``False`` if there was none or the
        server no longer knew it (``-32043``). Other refusals raise
        :class:`SessionError`. ``url``, ``protocol_version`` and ``headers`` as
        for :meth:`create`.
        """
        if self._shim.session.token is None:
            return False
        return await self._shim.delete(self._shim.endpoint(url, protocol_version, headers))

    async def aclose(self) -> None:
        """Delete the session if ``delete_on_close`` (bounded by ``close_timeout``), then close the wrapped transport.

        Failing to delete is logged, never raised. The wrapped transport is
        closed too, unless the transport was built with ``close_transport=False``.
        """
        await self._shim.aclose()
