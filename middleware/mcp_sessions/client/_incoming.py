"""What the client reads of a server's answers: decoded bodies, JSON-RPC messages, failures and ``Retry-After``.

Bodies are decoded for observing only: the caller always gets the bytes as they came.
"""

from __future__ import annotations

import email.utils
import logging
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol, TypeVar

from .._wire import jsonrpc
from .._wire.protocol import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, SESSION_STORE_UNAVAILABLE
from .._wire.sse import SSERewriter
from ._session import SessionError

logger = logging.getLogger("mcp_sessions.client")

_DECODABLE: Final = frozenset({"gzip", "x-gzip", "deflate", "identity"})


class HeadersLike(Protocol):
    """What the client reads of a request's or a response's headers."""

    def get(self, key: str, /) -> str | None: ...
    def multi_items(self) -> list[tuple[str, str]]: ...


class ResponseLike(Protocol):
    """What the client reads of a response (``httpx.Response`` and ``httpx2.Response`` alike)."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> HeadersLike: ...
    # Both libraries type a response's stream as sync or async; a transport's responses (the only ones
    # read here) always carry an async one. A protocol for the async stream would not match the union.
    @property
    def stream(self) -> Any: ...
    @property
    def extensions(self) -> Mapping[str, object]: ...


ResponseT = TypeVar("ResponseT", bound=ResponseLike)


def decodable_encodings(value: str) -> str:
    """``Accept-Encoding`` cut to what :class:`Inflater` reads (gzip, deflate): never br or zstd."""
    kept = [item.strip() for item in value.split(",") if item.split(";")[0].strip().lower() in _DECODABLE]
    return ", ".join(kept) or "identity"


class _Decompressor(Protocol):
    def decompress(self, data: bytes, /) -> bytes: ...


class Inflater:
    """Decodes a ``Content-Encoding`` chunk by chunk; an encoding it cannot read yields nothing."""

    def __init__(self, encoding: str | None) -> None:
        name = (encoding or "identity").strip().lower()
        self._raw_deflate_next = name == "deflate"  # some servers send deflate without the zlib wrapper
        self._readable = name in _DECODABLE
        self._decoder: _Decompressor | None = None
        if name in ("gzip", "x-gzip", "deflate"):
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib, by the header
        elif not self._readable:
            logger.debug("cannot read a %r response: the session echo is not observed", name)

    def __call__(self, chunk: bytes) -> bytes:
        if not self._readable:
            return b""
        if self._decoder is None:
            return chunk
        try:
            return self._decoder.decompress(chunk)
        except zlib.error:
            if self._raw_deflate_next:
                self._raw_deflate_next = False
                self._decoder = zlib.decompressobj(-zlib.MAX_WBITS)
                return self(chunk)
            self._readable = False
            return b""


async def read_all(response: ResponseLike) -> bytes:
    """The whole body of ``response``, its stream closed."""
    try:
        return b"".join([chunk async for chunk in response.stream])
    finally:
        await response.stream.aclose()


def body_messages(response: ResponseLike, raw: bytes) -> list[object]:
    """The JSON messages of a whole body, by its type: a JSON message or batch, or the events of an SSE stream."""
    content_type = str(response.headers.get("content-type") or "").lower()
    body = Inflater(response.headers.get("content-encoding"))(raw)
    if content_type.startswith("application/json"):
        parsed = jsonrpc.loads(body)
        if isinstance(parsed, list):
            return parsed
        return [parsed] if isinstance(parsed, dict) else []
    found: list[object] = []
    if content_type.startswith("text/event-stream"):

        def collect(data: str) -> None:
            parsed = jsonrpc.loads(data.encode())
            if parsed is not None:
                found.append(parsed)

        SSERewriter(collect, once=False).feed(body)
    return found


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    text = value.strip() if isinstance(value, str) else ""
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


@dataclass(slots=True)
class Failure:
    """A refused ``sessions/create`` or ``sessions/delete``, as the server answered it."""

    code: int
    message: str
    data: object = None
    status: int = 200
    retry_after: str | None = None

    def error(self) -> SessionError:
        """The exception the explicit API raises for this failure."""
        return SessionError(self.code, self.message, self.data)

    @property
    def retryable(self) -> bool:
        """Whether the policy retries it: the store was unavailable (-32010) or the server answered 503."""
        return self.code == SESSION_STORE_UNAVAILABLE or self.status == 503


def failure_of(reply: dict[str, object] | None, response: ResponseLike) -> Failure:
    """The failure an answer means: its JSON-RPC error, or one the HTTP status implies."""
    status, wait = response.status_code, response.headers.get("retry-after")
    error = reply.get("error") if reply is not None else None
    code = jsonrpc.error_code(reply)
    if isinstance(error, dict) and code is not None:
        message = error.get("message")
        return Failure(code, message if isinstance(message, str) else "", error.get("data"), status, wait)
    if status == 404:
        return Failure(METHOD_NOT_FOUND, "Method not found (HTTP 404)", None, status, wait)
    if status == 503:
        return Failure(SESSION_STORE_UNAVAILABLE, "Service unavailable (HTTP 503)", None, status, wait)
    code = INVALID_REQUEST if 400 <= status < 500 else INTERNAL_ERROR
    return Failure(code, f"no JSON-RPC answer (HTTP {status})", None, status if status >= 400 else 500, wait)
