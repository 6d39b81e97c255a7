"""The session transport, written once for both HTTP libraries.

:class:`SessionTransportBase` is the public API both ``SessionTransport``
(httpx2) and ``HttpxSessionTransport`` (httpx) share; each names its library
module in ``_library`` and inherits the library's ``AsyncBaseTransport``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any, ClassVar, Generic, TypeVar

from ..profiles import PROFILES, WireProfile
from ._adapter import HttpAdapter, InnerTransport, RequestT, ResponseT
from ._client import SessionClient
from ._keeper import ChangeHook
from ._session import RetryPolicy, SessionHandle

__all__ = ["SessionTransportBase"]

InnerT = TypeVar("InnerT", bound=InnerTransport[Any, Any])


class SessionTransportBase(Generic[InnerT, RequestT, ResponseT]):
    """Create, use, delete and inspect the session a transport holds; see :class:`SessionTransport`."""

    _library: ClassVar[ModuleType]

    def __init__(
        self,
        transport: InnerT | None = None,
        *,
        session: SessionHandle | None = None,
        auto_create: bool = True,
        recreate: bool = False,
        delete_on_close: bool = False,
        retry: RetryPolicy | None = None,
        on_change: ChangeHook | None = None,
        close_timeout: float = 5.0,
        close_transport: bool = True,
        profile: str | WireProfile = "draft",
    ) -> None:
        inner: InnerTransport[RequestT, ResponseT] = (
            self._library.AsyncHTTPTransport() if transport is None else transport
        )
        self._client: SessionClient[RequestT, ResponseT] = SessionClient(
            HttpAdapter(self._library, inner),
            session=session,
            auto_create=auto_create,
            recreate=recreate,
            delete_on_close=delete_on_close,
            retry=RetryPolicy() if retry is None else retry,
            on_change=on_change,
            close_timeout=close_timeout,
            owns_transport=close_transport,
            profile=_profile(profile),
        )

    async def handle_async_request(self, request: RequestT) -> ResponseT:
        """Send one request through the wrapped transport, with the session where it belongs."""
        return await self._client.send(request)

    @property
    def session(self) -> SessionHandle:
        """The held session: inspect it (``id``, ``expires_at``, ``state``) or persist it (``to_dict()``)."""
        return self._client.session

    @property
    def supports_sessions(self) -> bool | None:
        """What the server said: ``True`` (advertised), ``False`` (not advertised, or -32601), ``None`` (not yet)."""
        return self._client.keeper.supported

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
        return await self._client.create(self._client.endpoint(url, protocol_version, headers))

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
        if self._client.session.token is None:
            return False
        return await self._client.delete(self._client.endpoint(url, protocol_version, headers))

    async def aclose(self) -> None:
        """Delete the session if ``delete_on_close`` (bounded by ``close_timeout``), then close the wrapped transport.

        Failing to delete is logged, never raised. The wrapped transport is
        closed too, unless the transport was built with ``close_transport=False``.
        """
        await self._client.aclose()


def _profile(profile: str | WireProfile) -> WireProfile:
    """The wire the shim speaks: ``"draft"`` (the default) or ``"strawman"``, or such a profile itself."""
    chosen = profile if isinstance(profile, WireProfile) else PROFILES.get(profile)
    if chosen is None or chosen.client is None:
        speaks = ", ".join(name for name, p in PROFILES.items() if p.client is not None)
        raise ValueError(f"the session client speaks the wires {speaks}, not {profile!r}")
    return chosen
