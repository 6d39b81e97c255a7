"""The suite's one wait: poll a condition until it holds, bounded, in a test's thread or on its event loop.

A wait is not a timing check (a test that checks how long something takes measures it): a condition that
holds returns at once, so a long bound costs a passing test nothing, while a short one fails a test on a busy
machine. Every wait is therefore bounded by at least :data:`WITHIN`, whatever its caller asks for.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Final

import anyio

WITHIN: Final = 60.0
"""Half the suite's timeout (pyproject's 120 s per test): the shortest bound of a wait. Its failure names what did
not happen before pytest-timeout would end the test with nothing to say."""
POLL: Final = 0.02
"""Seconds between two looks at the condition."""


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
    condition: Callable[[], bool],
    what: str | Callable[[], str],
    within: float = WITHIN,
    *,
    ignoring: tuple[type[BaseException], ...] = (),
) -> None:
    """Wait in this thread until ``condition()`` holds; ``ignoring``: exceptions that count as "not yet"."""
    deadline = Deadline(what, within)
    while True:
        try:
            if condition():
                return
        except ignoring:
            pass
        deadline.check()
        time.sleep(POLL)


async def until_awaited(
    condition: Callable[[], bool | Awaitable[bool]], what: str | Callable[[], str], within: float = WITHIN
) -> None:
    """Wait on the event loop until ``condition()`` holds, awaited when it returns an awaitable."""
    deadline = Deadline(what, within)
    while True:
        held = condition()
        if await held if inspect.isawaitable(held) else held:
            return
        deadline.check()
        await anyio.sleep(POLL)
