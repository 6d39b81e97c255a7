"""The answers the gateway gives itself, when no upstream answer can be relayed."""

from __future__ import annotations

import json
from typing import Final

from .._guard import Rejection

__all__ = ["UPSTREAM_UNAVAILABLE", "lost_session", "request_id_of", "too_large", "upstream_failed"]

UPSTREAM_UNAVAILABLE: Final = -32014
"""Error code: no upstream replica answered (HTTP 502, 503 or 504, with ``Retry-After``); temporary."""
_MAX_ID_BODY: Final = 64 * 1024
_JSON: Final = (b"content-type", b"application/json")


def lost_session() -> Rejection:
    """The ``mcp`` SDK's answer for a transport session it does not hold (404): the client opens a new one."""
    body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}'
    return Rejection(404, (_JSON, _length(body)), body, "transport_session_lost", -32600, "Session not found")


def upstream_failed(status: int, message: str, retry_after: bytes, request_id: str | int | None) -> Rejection:
    """The gateway's JSON-RPC error for an upstream that did not answer: retryable, with ``Retry-After``."""
    error = {"code": UPSTREAM_UNAVAILABLE, "message": message}
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}, separators=(",", ":")).encode()
    headers = (_JSON, _length(body), (b"retry-after", retry_after))
    return Rejection(status, headers, body, "upstream_unavailable", UPSTREAM_UNAVAILABLE, message)


def too_large() -> Rejection:
    """The answer to the gateway's own question was larger than any such answer is: 502."""
    return upstream_failed(502, "The upstream's answer was too large", b"1", None)


def request_id_of(body: bytes | object) -> str | int | None:
    """The id of a one-message JSON-RPC body read whole (and small), for the error that answers it."""
    if not isinstance(body, bytes) or not body or len(body) > _MAX_ID_BODY:
        return None
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    return request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None


def _length(body: bytes) -> tuple[bytes, bytes]:
    return (b"content-length", str(len(body)).encode())
