"""What goes wrong with a handle, in words for the model that never repeat the handle."""

from __future__ import annotations

from typing import Final, Literal

__all__ = ["HandleError", "HandleErrorReason"]

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
