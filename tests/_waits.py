"""The suite's one wait: poll a condition until it holds, bounded, in a test's thread or on its event loop.

A wait is not a timing check (a test that checks how long something takes measures it): a condition that
holds returns at once, so a long bound costs a passing test nothing, while a short one fails a test on a busy
machine. Every wait is therefore bounded by at least :data:`WITHIN`, whatever its caller asks for.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar, overload

import anyio

WITHIN: Final = 60.0
"""Half the suite's timeout (pyproject's 120 s per test): the shortest bound of a wait. Its failure names what did
not happen before pytest-timeout would end the test with nothing to say."""
POLL: Final = 0.02
"""Seconds between two looks at the condition."""
T = TypeVar("T")


class Deadline:
    """When a wait gives up: at least :data:`WITHIN` seconds from now, longer if asked."""

    def __init__(self, what: str | Callable[[], str], within: float = WITHIN) -> None:
        self.within = max(within, WITHIN)
        self._at = time.monotonic() + self.within
        self._what = what

    def check(self) -> None:
        """Fail, saying what did not happen, once the deadline has passed."""
        if time.monotonic() >= self._at:
            what = self._what if isinstance(self._what, str) else self._what()
            raise AssertionError(f"not within {self.within} s: {what}")


def until(
    condition: Callable[[], T | None],
    what: str | Callable[[], str],
    within: float = WITHIN,
    *,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """Wait in this thread until ``condition()`` holds: what it returned (true); ``ignoring``: exceptions that count
    as "not yet"."""
    deadline = Deadline(what, within)
    while True:
        try:
            if held := condition():
                return held
        except ignoring:
            pass
        deadline.check()
        time.sleep(POLL)


@overload
async def until_awaited(condition: Callable[[], Awaitable[T | None]], what: str | Callable[[], str]) -> T: ...
@overload
async def until_awaited(condition: Callable[[], T | None], what: str | Callable[[], str]) -> T: ...
async def until_awaited(condition: Callable[[], Any], what: str | Callable[[], str]) -> Any:
    """Wait on the event loop until ``condition()`` holds, awaited when it returns an awaitable: what it returned."""
    deadline = Deadline(what)
    while True:
        held = condition()
        if held := await held if inspect.isawaitable(held) else held:
            return held
        deadline.check()
        await anyio.sleep(POLL)
