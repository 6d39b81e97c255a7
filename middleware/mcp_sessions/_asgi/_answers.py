"""The answers the middleware sends itself: refusals, local results, bare statuses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .._wire import jsonrpc

if TYPE_CHECKING:
    from asgiref.typing import ASGISendCallable

_JSON_HEADERS: Final = [(b"content-type", b"application/json")]


async def send_json(send: ASGISendCallable, status: int, payload: Any, retry_after: bytes) -> None:
    """``payload`` as an ``application/json`` response."""
    body = jsonrpc.dumps(payload)
    headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
    if status in (503, 429):
        headers.append((b"retry-after", retry_after))
    await _send_response(send, status, headers, body)


async def _send_response(send: ASGISendCallable, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers, "trailers": False})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_result(send: ASGISendCallable, payload: Any, *, accept: bytes) -> None:
    """A successful answer, as JSON, or as one SSE event to a client that accepts only a stream."""
    accept = accept.lower()
    if b"application/json" in accept or b"text/event-stream" not in accept:
        return await send_json(send, 200, payload, b"")
    body = b"event: message\r\ndata: " + jsonrpc.dumps(payload) + b"\r\n\r\n"
    headers = [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache, no-transform"),
        (b"content-length", str(len(body)).encode()),
    ]
    await _send_response(send, 200, headers, body)


async def send_status(send: ASGISendCallable, status: int, retry_after: bytes) -> None:
    """A response with no body: ``status``, and ``Retry-After`` with a 503."""
    headers = [(b"content-length", b"0")]
    if status == 503:
        headers.append((b"retry-after", retry_after))
    await _send_response(send, status, headers, b"")


async def send_accepted(send: ASGISendCallable) -> None:
    """202 and no body: the answer to a notification that never reaches the app."""
    await send_status(send, 202, b"")
