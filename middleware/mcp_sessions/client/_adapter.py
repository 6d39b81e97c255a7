"""One HTTP adapter for ``httpx`` and ``httpx2``: the two libraries differ in module name only.

:class:`HttpAdapter` sends through the wrapped transport and builds requests
and responses with whichever library module it was given. The protocols say
what the rest of the client needs of a request, a response and a transport.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping
from types import ModuleType
from typing import Any, Generic, Protocol, TypeVar

from ._outgoing import Headers
from ._stream import Relay

__all__ = ["HttpAdapter", "InnerTransport", "RequestLike", "ResponseLike"]


class _HeadersLike(Protocol):
    def get(self, key: str, /) -> str | None: ...
    def multi_items(self) -> list[tuple[str, str]]: ...


class RequestLike(Protocol):
    """What the client reads of a request (``httpx.Request`` and ``httpx2.Request`` alike)."""

    @property
    def method(self) -> str: ...
    @property
    def url(self) -> object: ...  # the library's URL: passed back to it, never read here
    @property
    def headers(self) -> _HeadersLike: ...
    @property
    def extensions(self) -> Mapping[str, object]: ...
    async def aread(self) -> bytes: ...


class ResponseLike(Protocol):
    """What the client reads of a response."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> _HeadersLike: ...
    # Both libraries type a response's stream as sync or async; a transport's responses (the only ones
    # read here) always carry an async one, which the client reads as such. A protocol for the async
    # stream would not match the libraries' union, and narrowing it would check every response.
    @property
    def stream(self) -> Any: ...
    @property
    def extensions(self) -> Mapping[str, object]: ...


RequestT = TypeVar("RequestT", bound=RequestLike)
ResponseT = TypeVar("ResponseT", bound=ResponseLike)
RequestT_contra = TypeVar("RequestT_contra", bound=RequestLike, contravariant=True)
ResponseT_co = TypeVar("ResponseT_co", bound=ResponseLike, covariant=True)


class InnerTransport(Protocol[RequestT_contra, ResponseT_co]):
    """The transport a session transport wraps (an ``AsyncBaseTransport`` of either library)."""

    async def handle_async_request(self, request: RequestT_contra) -> ResponseT_co: ...
    async def aclose(self) -> None: ...


class HttpAdapter(Generic[RequestT, ResponseT]):
    """Send through ``inner``; build requests and responses with ``library`` (the ``httpx`` or ``httpx2`` module)."""

    def __init__(self, library: ModuleType, inner: InnerTransport[RequestT, ResponseT]) -> None:
        self._library = library
        self._stream_type = _relay_stream_type(library)
        self.inner = inner

    async def send(self, request: RequestT) -> ResponseT:
        """Send through the wrapped transport."""
        return await self.inner.handle_async_request(request)

    def post(self, url: object, headers: Headers, body: bytes, extensions: Mapping[str, object]) -> RequestT:
        """A POST request with exactly these headers and body."""
        request: RequestT = self._library.Request(
            "POST", url, headers=headers, content=body, extensions=dict(extensions)
        )
        return request

    def with_body(self, response: ResponseT, body: bytes) -> ResponseT:
        """``response`` (status, headers, extensions) with a body read already."""
        return self._response(response, self._library.ByteStream(body))

    def with_stream(self, response: ResponseT, relay: Relay) -> ResponseT:
        """``response`` with its body coming from ``relay``."""
        return self._response(response, self._stream_type(relay))

    def synthetic(self, status: int, headers: Headers, body: bytes) -> ResponseT:
        """A response the client answers itself."""
        response: ResponseT = self._library.Response(status, headers=headers, stream=self._library.ByteStream(body))
        return response

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.inner.aclose()

    def _response(self, response: ResponseT, stream: object) -> ResponseT:
        rebuilt: ResponseT = self._library.Response(
            response.status_code, headers=response.headers, stream=stream, extensions=response.extensions
        )
        return rebuilt


class _RelayStream:
    """The body of a relayed SSE answer; mixed into the library's ``AsyncByteStream`` by :func:`_relay_stream_type`."""

    def __init__(self, relay: Relay) -> None:
        self._relay = relay

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._relay:
            yield chunk

    async def aclose(self) -> None:
        await self._relay.aclose()


@functools.cache
def _relay_stream_type(library: ModuleType) -> type[_RelayStream]:
    # The library checks isinstance(stream, AsyncByteStream) before reading or closing a body.
    return type("RelayStream", (_RelayStream, library.AsyncByteStream), {"__module__": __name__})
