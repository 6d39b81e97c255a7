"""The refusal vocabulary: the one way any part of the package says "no" to a JSON-RPC call.

Pure: building a refusal sends nothing; the pipeline answers it (``asgi``'s senders).
"""

from __future__ import annotations

import logging

from . import jsonrpc
from ._throttle import ThrottledWarning
from .protocol import INVALID_REQUEST, SESSION_STORE_UNAVAILABLE

logger = logging.getLogger("mcp_sessions")
unavailable_warning = ThrottledWarning(logger)  # one outage refuses every request: said once an interval


class Refusal(Exception):
    """A JSON-RPC error the middleware answers itself instead of forwarding.

    ``reason`` is a low-cardinality word for the rejection metric;
    ``session_id`` is the stable id when a token verified but its session was
    refused (deleted, idle, bad state, another principal), so that telemetry
    files the refusal under it.
    """

    def __init__(
        self,
        code: int,
        message: str,
        data: object = None,
        *,
        reason: str = "invalid_request",
        session_id: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.reason = reason
        self.session_id = session_id
        self.retry_after = retry_after  # seconds, for a refusal that says when to try again (429)

    def frame(self, request_id: object) -> dict[str, object]:
        """The JSON-RPC error response to ``request_id``."""
        return jsonrpc.error(request_id, self.code, self.message, self.data)


def store_unavailable(exc: Exception) -> Refusal:
    """The retryable refusal for a store that cannot answer now (never "not found")."""
    unavailable_warning.warn("session store unavailable: %s", exc)
    return Refusal(SESSION_STORE_UNAVAILABLE, "Session store unavailable, retry later", reason="store_unavailable")


def batch_refused(reason: str = "batch refused: another element's session is invalid") -> Refusal:
    return Refusal(INVALID_REQUEST, reason)
