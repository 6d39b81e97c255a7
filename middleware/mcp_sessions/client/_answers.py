"""Reading what a server answered: decoded bodies, JSON-RPC messages, failures and ``Retry-After``.

Pure except for :func:`read_all`. Bodies are decoded for observing only: the
caller always gets the bytes as they came.
"""

from __future__ import annotations

import email.utils
import logging
import re
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, Protocol

from .._wire import jsonrpc
from .._wire.protocol import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, SESSION_STORE_UNAVAILABLE
from .._wire.sse import SSERewriter
from ._session import SessionError

if TYPE_CHECKING:
    from ._adapter import ResponseLike

__all__ = [
    "Failure",
    "Inflater",
    "decodable_encodings",
    "failure_of",
    "first_event_has_data",
    "json_messages",
    "read_all",
    "retry_after",
    "sse_messages",
]

logger = logging.getLogger("mcp_sessions.client")

_DECODABLE: Final = frozenset({"gzip", "x-gzip", "deflate", "identity"})
_EOL: Final = re.compile(rb"\r\n|\r|\n")


def decodable_encodings(value: str) -> str:
    """``Accept-Encoding`` cut to what :class:`Inflater` reads (gzip, deflate): never br or zstd."""
    kept = [item.strip() for item in value.split(",") if item.split(";")[0].strip().lower() in _DECODABLE]
    return ", ".join(kept) or "identity"


class _Decompressor(Protocol):
    """What :class:`Inflater` uses of a ``zlib.decompressobj()``."""

    def decompress(self, data: bytes, /) -> bytes: ...


class Inflater:
    """Decodes a ``Content-Encoding`` chunk by chunk; an encoding it cannot read yields nothing."""

    def __init__(self, encoding: str | None) -> None:
        name = str(encoding or "identity").strip().lower()
        self._deflate = name == "deflate"
        self._decoder: _Decompressor | None = None
        self._readable = name in _DECODABLE
        if name in ("gzip", "x-gzip"):
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif self._deflate:
            self._decoder = zlib.decompressobj()
        elif not self._readable:
            logger.debug("cannot read a %r response: the session echo is not observed", name)

    def __call__(self, chunk: bytes) -> bytes:
        if not self._readable:
            return b""
        if self._decoder is None:
            return chunk
        try:
            return bytes(self._decoder.decompress(chunk))
        except zlib.error:
            if self._deflate:
                # Some servers send raw deflate without the zlib wrapper.
                self._deflate = False
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


def json_messages(body: bytes) -> list[object]:
    """The messages of a JSON body: one, a batch, or none when it is not JSON."""
    parsed = jsonrpc.loads(body) if body else None
    if isinstance(parsed, list):
        return parsed
    return [parsed] if isinstance(parsed, dict) else []


def sse_messages(body: bytes) -> list[object]:
    """The JSON messages of a complete ``text/event-stream`` body, in order."""
    found: list[object] = []

    def collect(data: str) -> None:
        parsed = jsonrpc.loads(data.encode())
        if parsed is not None:
            found.append(parsed)

    SSERewriter(collect, once=False).feed(body)
    return found


def first_event_has_data(output: bytes) -> bool:
    """Whether the first event in ``output`` (complete events, as the rewriter emits them) has a data field."""
    for line in _EOL.split(output):
        if not line:
            return False  # the blank line that ends the first event
        if line.partition(b":")[0] == b"data":
            return True
    return False


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
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


def failure_of(reply: dict[str, object] | None, status: int, retry_after_header: str | None) -> Failure:
    """The failure an answer means: its JSON-RPC error, or one the HTTP status implies."""
    error = reply.get("error") if reply is not None else None
    code = jsonrpc.error_code(reply)
    if isinstance(error, dict) and code is not None:
        message = error.get("message")
        text = message if isinstance(message, str) else ""
        return Failure(code, text, error.get("data"), status, retry_after_header)
    if status == 404:
        return Failure(METHOD_NOT_FOUND, "Method not found (HTTP 404)", None, status, retry_after_header)
    if status == 503:
        return Failure(SESSION_STORE_UNAVAILABLE, "Service unavailable (HTTP 503)", None, status, retry_after_header)
    code = INVALID_REQUEST if 400 <= status < 500 else INTERNAL_ERROR
    http_status = status if status >= 400 else 500
    return Failure(code, f"no JSON-RPC answer (HTTP {status})", None, http_status, retry_after_header)
