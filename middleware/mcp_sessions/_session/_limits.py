"""Bounds on what anonymous or abusive callers can make the middleware do, per caller, in this process.

Creating a session stores nothing, so a flood of ``sessions/create`` costs
CPU only; deleting one writes a revocation entry that lives until the token
expires. ``create_limit=(count, seconds)`` (a :class:`RateLimit`) bounds both.
What a caller can make the store keep without a token of its own (a host
conversation's data, a handle) is bounded by a :class:`Quota`: so many live
records at once. A caller is its authenticated principal, or its client
address when there is none (:func:`caller_of`); a rate limit ``per_address``
(the gateway's, whose principal is a credential only the upstream checks)
counts the client address as well, so that made-up credentials do not
multiply one address's budget.
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from typing import Final

from starlette.types import Scope

MAX_TRACKED: Final = 100_000  # callers remembered at once; the least recently seen is forgotten first
MAX_TRACKED_RECORDS: Final = 1_000_000  # a quota's records remembered at once, all callers together


def caller_of(scope: Scope, principal: str | None) -> str:
    """Whom a limit counts: the principal (its digest) when there is one, else the client address."""
    return principal if principal is not None else _address(scope)


def _address(scope: Scope) -> str:
    client = scope.get("client")
    return f"address:{client[0] if client else ''}"


class RateLimit:
    """A token bucket per caller: ``count`` operations, refilled over ``seconds``.

    ``per_address``: :meth:`take_for` spends from the client address's bucket too, and only when both have one.
    """

    __slots__ = ("_buckets", "_rate", "count", "per_address", "seconds")

    def __init__(self, count: int, seconds: float, *, per_address: bool = False) -> None:
        if type(count) is not int or count < 1:
            raise ValueError("the create limit's count must be a whole number, 1 or more")
        if not 0 < seconds <= 86_400:
            raise ValueError("the create limit's interval must be a positive number of seconds, at most a day")
        self.count = count
        self.seconds = float(seconds)
        self._rate = count / self.seconds
        self.per_address = per_address
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take_for(self, scope: Scope, principal: str | None) -> float:
        """:meth:`take` for the request's caller (:func:`caller_of`) and, ``per_address``, its client address."""
        caller = caller_of(scope, principal)
        return self.take(caller, _address(scope)) if self.per_address else self.take(caller)

    def take(self, *callers: str) -> float:
        """Spend one operation of each caller's, if each has one; 0 if so, else the seconds until each has one."""
        now = time.monotonic()
        tokens = {caller: self._refilled(caller, now) for caller in callers}
        allowed = all(left >= 1 for left in tokens.values())
        for caller, left in tokens.items():
            self._buckets[caller] = (left - 1 if allowed else left, now)
            self._buckets.move_to_end(caller)
        while len(self._buckets) > MAX_TRACKED:
            self._buckets.popitem(last=False)
        return 0.0 if allowed else max((1 - left) / self._rate for left in tokens.values() if left < 1)

    def wait(self, caller: str) -> float:
        """What :meth:`take` would answer, spending nothing: 0 if ``caller`` has an operation left."""
        tokens = self._refilled(caller, time.monotonic())
        return 0.0 if tokens >= 1 else (1 - tokens) / self._rate

    def _refilled(self, caller: str, now: float) -> float:
        tokens, last = self._buckets.get(caller, (float(self.count), now))
        return min(float(self.count), tokens + (now - last) * self._rate)


class Quota:
    """At most ``count`` live records per caller, each counted until the time it expires.

    A quota, not a rate: a caller at its maximum gets a slot back when its
    oldest record ends. It counts in this process, for at most
    :data:`MAX_TRACKED` callers and :data:`MAX_TRACKED_RECORDS` records (the
    least recently seen caller is forgotten first). Times are Unix seconds.
    """

    __slots__ = ("_callers", "_records", "count")

    def __init__(self, count: int) -> None:
        if type(count) is not int or count < 1:
            raise ValueError("a per-caller maximum must be a whole number, 1 or more (or None for no maximum)")
        self.count = count
        self._callers: OrderedDict[str, list[float]] = OrderedDict()  # each a heap of its records' expiries
        self._records = 0

    def wait(self, caller: str, now: float) -> float:
        """0 if ``caller`` may add a record now, else the seconds until its oldest one ends."""
        expiries = self._callers.get(caller)
        while expiries and expiries[0] <= now:  # the ended records are dropped
            heapq.heappop(expiries)
            self._records -= 1
        return 0.0 if expiries is None or len(expiries) < self.count else expiries[0] - now

    def add(self, caller: str, expires_at: float) -> None:
        """Count a record of ``caller``'s until ``expires_at`` (after :meth:`wait` said there was room)."""
        expiries = self._callers.setdefault(caller, [])
        heapq.heappush(expiries, expires_at)
        self._callers.move_to_end(caller)
        self._records += 1
        while self._records > MAX_TRACKED_RECORDS or len(self._callers) > MAX_TRACKED:
            self._records -= len(self._callers.popitem(last=False)[1])


def parse_limit(text: str, *, source: str) -> RateLimit:
    """``"100/60"``: 100 operations per 60 seconds."""
    count, _, seconds = text.partition("/")
    try:
        return RateLimit(int(count), float(seconds))
    except ValueError as exc:
        raise ValueError(f"{source} must look like COUNT/SECONDS (for example 100/60): {exc}") from None
