"""The session transport for httpx2, the HTTP library of the ``mcp`` SDK client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx2

from ._api import SessionTransportAPI
from ._session import RetryPolicy, SessionHandle
from ._transport import ChangeHook, Headers, Relay, Shim, Wire

__all__ = ["SessionTransport"]


class SessionTransport(SessionTransportAPI, httpx2.AsyncBaseTransport):
    """An httpx2 transport that gives every MCP request it carries a data-layer session.

    Wrap the transport of an existing client, and the client gets sessions
    without a code change::

        http = httpx2.AsyncClient(transport=SessionTransport())
        async with Client(streamable_http_client(url, http_client=http)) as client:
            await client.call_tool("count", {})  # creates the session, then stamps it

    ``transport`` is the transport to wrap (default: a new
    ``httpx2.AsyncHTTPTransport()``). Configure TLS, HTTP/2 and proxies on it: a
    client given ``transport=`` ignores its own. It is closed with this one,
    unless ``close_transport=False`` (several conversations sharing one
    connection pool).

    ``session`` is the held session (default: none yet); pass
    ``SessionHandle.from_dict(saved)`` to resume one. ``auto_create`` creates a
    session on the first request that belongs to a conversation, and again after
    the server answers ``-32044``. ``recreate`` also creates a new session and
    retries once when the server answers ``-32043`` (the session is gone): off
    by default, so that losing server-side state is never silent. ``retry``
    governs ``-32010`` and HTTP 503. ``delete_on_close`` sends
    ``sessions/delete`` when the transport closes, waiting at most
    ``close_timeout`` seconds. ``on_change(session)`` (a function or a
    coroutine function) runs whenever the session is created, updated by an
    echo, or dropped: persist it there.
    """

    def __init__(
        self,
        transport: httpx2.AsyncBaseTransport | None = None,
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
        self._shim: Shim[httpx2.Request, httpx2.Response] = Shim(
            _Wire(httpx2.AsyncHTTPTransport() if transport is None else transport),
            session=session,
            auto_create=auto_create,
            recreate=recreate,
            delete_on_close=delete_on_close,
            retry=RetryPolicy() if retry is None else retry,
            on_change=on_change,
            close_timeout=close_timeout,
            owns_wire=close_transport,
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send ``request`` through the wrapped transport, with the session stamped in and the echo read back.

        httpx2 calls this for every request of the client; application code does not.
        """
        return await self._shim.handle(request)


class _Wire(Wire[httpx2.Request, httpx2.Response]):
    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner

    async def send(self, request: httpx2.Request) -> httpx2.Response:
        return await self.inner.handle_async_request(request)

    def request(self, url: Any, headers: Headers, body: bytes, extensions: Mapping[str, Any]) -> httpx2.Request:
        return httpx2.Request("POST", url, headers=headers, content=body, extensions=dict(extensions))

    def with_body(self, response: httpx2.Response, body: bytes) -> httpx2.Response:
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=httpx2.ByteStream(body),
            extensions=response.extensions,
        )

    def with_stream(self, response: httpx2.Response, relay: Relay) -> httpx2.Response:
        return httpx2.Response(
            response.status_code, headers=response.headers, stream=_RelayStream(relay), extensions=response.extensions
        )

    def synthetic(self, status: int, headers: Headers, body: bytes) -> httpx2.Response:
        return httpx2.Response(status, headers=headers, stream=httpx2.ByteStream(body))

    async def aclose(self) -> None:
        await self.inner.aclose()


class _RelayStream(httpx2.AsyncByteStream):
    def __init__(self, relay: Relay) -> None:
        self._relay = relay

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._relay:
            yield chunk

    async def aclose(self) -> None:
        await self._relay.aclose()
