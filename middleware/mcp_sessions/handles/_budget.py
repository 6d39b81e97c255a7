"""What one caller may mint: at most so many live handles at once, and, in the session middleware, its create limit.

A handle's records stay in the store until its expiry (a revoked one leaves a
tombstone until then), so each handle a caller mints counts against that
caller until it expires. The caller is the request's: the
:class:`HandleContext` a middleware sets names it (a principal's digest, else
the client address). A mint outside a request (no context, or one without a
caller) is the server's own and is not counted.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from ..session import Quota
from ..wire import Refusal
from ..wire.protocol import TOO_MANY_SESSIONS
from ._errors import HandleLimitExceeded

if TYPE_CHECKING:
    from ._context import HandleContext

__all__ = ["DEFAULT_MAX_HANDLES_PER_CALLER", "HandleBudget"]

DEFAULT_MAX_HANDLES_PER_CALLER: Final = 1_000


class HandleBudget:
    """The live handles a registry lets each caller hold (``count``; ``None``: no maximum), in this process."""

    __slots__ = ("_quota",)

    def __init__(self, count: int | None) -> None:
        if count is not None and (type(count) is not int or count < 1):
            raise ValueError("max_handles_per_caller must be a whole number, 1 or more, or None for no maximum")
        self._quota = None if count is None else Quota(count)

    @property
    def count(self) -> int | None:
        """The maximum of live handles per caller, or ``None``."""
        return None if self._quota is None else self._quota.count

    def wait(self, context: HandleContext | None, now: float) -> tuple[float, str] | None:
        """``None`` when the context's caller may mint now; else the seconds until it may, and why not."""
        if context is None or context.caller is None:
            return None
        quota, limit = self._quota, context.create_limit
        if quota is not None and (wait := quota.wait(context.caller, now)) > 0:
            return wait, f"this caller already holds {quota.count} live handles, its maximum"
        if limit is not None and (wait := limit.wait(context.caller)) > 0:
            return wait, "this caller created handles faster than the create limit allows"
        return None

    def refusal(self, context: HandleContext | None, now: float) -> Refusal | None:
        """A call of a kind's ``create`` tool, refused before it runs when its caller could mint nothing (-32011)."""
        over = self.wait(context, now)
        if over is None:
            return None
        wait, why = over
        message = f"Too many handles created: {why}; retry later"
        return Refusal(TOO_MANY_SESSIONS, message, reason="handle_limit", retry_after=max(1, math.ceil(wait)))

    def spend(self, context: HandleContext | None, now: float) -> None:
        """Before a mint: :class:`HandleLimitExceeded` when the caller may not mint; a create-limit slot spent."""
        if (over := self.wait(context, now)) is not None:
            wait, why = over
            retry = max(1, math.ceil(wait))
            raise HandleLimitExceeded(f"no handle was created: {why}; retry in {retry} s", retry_after=retry)
        if context is not None and context.caller is not None and context.create_limit is not None:
            context.create_limit.take(context.caller)

    def count_handle(self, context: HandleContext | None, kept_until: float) -> None:
        """After a mint: the handle counts against its caller until the store forgets it."""
        if self._quota is not None and context is not None and context.caller is not None:
            self._quota.add(context.caller, kept_until)
