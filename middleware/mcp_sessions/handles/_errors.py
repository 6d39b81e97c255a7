"""What goes wrong with a handle, in words for the model that never repeat the handle."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal

from ..wire.protocol import TOO_MANY_SESSIONS

__all__ = ["HandleError", "HandleErrorReason", "HandleLimitExceeded"]

# The mcp SDK (and fastmcp, built on it) answers a tool's MCPError as a JSON-RPC error instead of a tool result.
if TYPE_CHECKING:
    _ToolCallError = Exception
else:
    try:
        from mcp.shared.exceptions import MCPError as _ToolCallError
    except ImportError:  # pragma: no cover - without the SDK, a plain exception
        _ToolCallError = Exception

HandleErrorReason = Literal["malformed", "forged", "wrong_kind", "expired", "revoked", "other_principal"]
REASONS: Final = frozenset({"malformed", "forged", "wrong_kind", "expired", "revoked", "other_principal"})


class HandleError(Exception):
    """A handle was refused.

    ``reason`` is one of ``malformed``, ``forged``, ``wrong_kind``, ``expired``,
    ``revoked`` or ``other_principal``; the message is written for the model
    (what happened, what to do) and names at most the handle's prefix.
    ``kind`` is the kind the handle was checked as, and ``handle_id`` its stable
    id once the handle authenticated (for logs and spans).
    """

    def __init__(self, reason: HandleErrorReason, message: str, *, kind: str, handle_id: str | None = None) -> None:
        super().__init__(message)
        self.reason: HandleErrorReason = reason
        self.message = message
        self.kind = kind
        self.handle_id = handle_id


class HandleLimitExceeded(_ToolCallError):
    """:meth:`Handles.mint` refused: the request's caller holds its maximum of live handles, or is over the
    session middleware's create limit.

    The message says when to retry; ``retry_after`` is that many seconds. Raised in a tool of the ``mcp``
    SDK or fastmcp (it is then their ``MCPError``), the call is answered with the JSON-RPC error -32011, as
    a create over its limit, with ``data.retryAfter``; elsewhere it is a plain exception.
    """

    def __init__(self, message: str, *, retry_after: int) -> None:
        if _ToolCallError is Exception:
            Exception.__init__(self, message)
        else:
            _ToolCallError.__init__(self, TOO_MANY_SESSIONS, message, {"retryAfter": retry_after})
        self._text = message
        self.retry_after = retry_after

    @property
    def message(self) -> str:
        """What happened and when to retry, for the model."""
        return self._text

    def __str__(self) -> str:
        return self._text
