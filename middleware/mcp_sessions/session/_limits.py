"""A bound on what anonymous or abusive callers can make the middleware do: creates and deletes per interval.

Creating a session stores nothing, so a flood of ``sessions/create`` costs
CPU only; deleting one writes a revocation entry that lives until the token
expires. ``create_limit=(count, seconds)`` bounds both, per authenticated
principal, or per client address when there is none, in this process.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Final

__all__ = ["RateLimit", "parse_limit"]

MAX_TRACKED: Final = 100_000  # callers remembered at once; the least recently seen is forgotten first


class RateLimit:
    """A token bucket per caller: ``count`` operations, refilled over ``seconds``."""

    __slots__ = ("_buckets", "_rate", "count", "seconds")

    def __init__(self, count: int, seconds: float) -> None:
        if type(count) is not int or count < 1:
            raise ValueError("the create limit's count must be a whole number, 1 or more")
        if not 0 < seconds <= 86_400:
            raise ValueError("the create limit's interval must be a positive number of seconds, at most a day")
        self.count = count
        self.seconds = float(seconds)
        self._rate = count / self.seconds
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, caller: str, now: float | None = None) -> float:
        """Spend one operation of ``caller``'s; 0 if allowed, else the seconds until one is free."""
        now = time.monotonic() if now is None else now
        tokens, last = self._buckets.pop(caller, (float(self.count), now))
        tokens = min(float(self.count), tokens + (now - last) * self._rate)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / self._rate
        self._buckets[caller] = (tokens, now)
        if len(self._buckets) > MAX_TRACKED:
            self._buckets.popitem(last=False)
        return wait


def parse_limit(text: str, *, source: str) -> RateLimit:
    """``"100/60"``: 100 operations per 60 seconds."""
    count, _, seconds = text.partition("/")
    try:
        return RateLimit(int(count), float(seconds))
    except ValueError as exc:
        raise ValueError(f"{source} must look like COUNT/SECONDS (for example 100/60): {exc}") from None
