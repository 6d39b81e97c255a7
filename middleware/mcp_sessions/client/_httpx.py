"""The session transport for httpx (the ``mcp`` SDK client uses httpx2: see SessionTransport)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from ._api import SessionTransportAPI
from ._session import RetryPolicy, SessionHandle
from ._transport import ChangeHook, Headers, Relay, Shim, Wire

__all__ = ["HttpxSessionTransport"]


class HttpxSessionTransport(SessionTransportAPI, httpx.AsyncBaseTransport):
    """:class:`SessionTransport` for ``httpx``: the same behaviour, for clients built on httpx.

    The ``mcp`` SDK client (2.x) sends its HTTP through ``httpx2``: use
    :class:`SessionTransport` there. This one is for hand-written JSON-RPC
    clients and other libraries on ``httpx``::

        http = httpx.AsyncClient(transport=HttpxSessionTransport())

    The arguments are those of :class:`SessionTransport`, with ``transport`` an
    ``httpx.AsyncBaseTransport`` (default: a new ``httpx.AsyncHTTPTransport()``).
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        session: SessionHandle | None = None,
        auto_create: bool = True,
        recreate: bool = False,
        delete_on_close: bool = False,
        retry: RetryPolicy | None = None,
        on_change: ChangeHook | None = None,
        close_timeout: float = 5.0,
        close_transport: bool = True,
    ) -> None:
        self._shim: Shim[httpx.Request, httpx.Response] = Shim(
            _Wire(httpx.AsyncHTTPTransport() if transport is None else transport),
            session=session,
            auto_create=auto_create,
            recreate=recreate,
            delete_on_close=delete_on_close,
            retry=RetryPolicy() if retry is None else retry,
            on_change=on_change,
            close_timeout=close_timeout,
            owns_wire=close_transport,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through the wrapped transport, with the session stamped in and the echo read back.

        httpx calls this for every request of the client; application code does not.
        """
        return await self._shim.handle(request)


class _Wire(Wire[httpx.Request, httpx.Response]):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def send(self, request: httpx.Request) -> httpx.Response:
        return await self.inner.handle_async_request(request)

    def request(self, url: Any, headers: Headers, body: bytes, extensions: Mapping[str, Any]) -> httpx.Request:
        return httpx.Request("POST", url, headers=headers, content=body, extensions=dict(extensions))

    def with_body(self, response: httpx.Response, body: bytes) -> httpx.Response:
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=httpx.ByteStream(body),
            extensions=response.extensions,
        )

    def with_stream(self, response: httpx.Response, relay: Relay) -> httpx.Response:
        return httpx.Response(
            response.status_code, headers=response.headers, stream=_RelayStream(relay), extensions=response.extensions
        )

    def synthetic(self, status: int, headers: Headers, body: bytes) -> httpx.Response:
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body))

    async def aclose(self) -> None:
        await self.inner.aclose()


class _RelayStream(httpx.AsyncByteStream):
    def __init__(self, relay: Relay) -> None:
        self._relay = relay

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._relay:
            yield chunk

    async def aclose(self) -> None:
        await self._relay.aclose()
