"""The answer the wrapped server would have sent: :class:`Rejection`, and its byte-exact shapes.

Each builder makes the bytes one of the ``mcp`` SDK's answers has: Starlette's
plain-text and empty responses, the 2025-era transport's JSON-RPC error and the
2026-07-28 entry's. :class:`Rejection` is public, exported from ``mcp_sessions``
(and from ``mcp_sessions._guard``, where it was first defined).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.types import Send

__all__ = ["Rejection"]


@dataclass(frozen=True, slots=True)
class Rejection:
    """The answer the wrapped server would have sent instead of the middleware's.

    ``status``, ``headers`` and ``body`` are the SDK's bytes; ``code`` and
    ``message`` are the JSON-RPC error in the body, if it has one, and
    ``reason`` a low-cardinality name for logs and telemetry.
    """

    status: int
    """The HTTP status the server answers with."""
    headers: tuple[tuple[bytes, bytes], ...]
    """The response headers, as the server sends them."""
    body: bytes
    """The response body, byte for byte."""
    reason: str
    """A low-cardinality name for logs and telemetry (``invalid_host``, ``not_acceptable``…)."""
    code: int | None = None
    """The JSON-RPC error code in the body, if the body is a JSON-RPC error."""
    message: str | None = None
    """The JSON-RPC error message in the body, if any."""

    async def send(self, send: Send) -> None:
        """Send this answer as a complete HTTP response."""
        await send({"type": "http.response.start", "status": self.status, "headers": list(self.headers)})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


def _plain(status: int, text: str, reason: str) -> Rejection:
    """A Starlette ``Response(text)`` without a media type: the SDK's Host and Origin answers."""
    body = text.encode()
    return Rejection(status, ((b"content-length", str(len(body)).encode()),), body, reason)


def _empty(status: int, reason: str) -> Rejection:
    """A Starlette ``Response(status_code=...)``: the 2026-07-28 406 and 202."""
    return Rejection(status, ((b"content-length", b"0"),), b"", reason)


def _legacy_error(status: int, code: int, message: str, reason: str) -> Rejection:
    """The 2025-era transport's error: ``JSONRPCError(id=None)`` dumped by pydantic, content type first."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, separators=(",", ":")
    ).encode()
    headers = ((b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()))
    return Rejection(status, headers, body, reason, code, message)


def _modern_error(request_id: object, code: int, message: str, reason: str, data: object = None) -> Rejection:
    """The 2026-07-28 entry's ``_write``: ``exclude_none``, then ``id: null`` put back last."""
    error: dict[str, object] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    payload: dict[str, object] = {"jsonrpc": "2.0"}
    if request_id is not None:
        payload["id"] = request_id
    payload["error"] = error
    if request_id is None:
        payload["id"] = None
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = ((b"content-length", str(len(body)).encode()), (b"content-type", b"application/json"))
    return Rejection(400, headers, body, reason, code, message)
