"""A warning about one condition that recurs on every request while it lasts (an outage), at most once an interval."""

from __future__ import annotations

import logging
import math
import time
from typing import Final

WARNING_INTERVAL: Final = 10.0


class ThrottledWarning:
    """One condition's warning, logged at most once every ``interval`` seconds, with a count of the ones not logged.

    Logging writes synchronously: a warning for each request refused during an outage would add a
    write to every one of them, and bury the first line under hundreds that say the same. Each line
    says how many occurrences were not logged since the one before.
    """

    __slots__ = ("_last", "_not_logged", "interval", "logger")

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.interval = WARNING_INTERVAL
        self._last = -math.inf
        self._not_logged = 0

    def warn(self, message: str, *args: object) -> None:
        """Log ``message % args`` as a warning, or only count it when one was logged less than ``interval`` ago."""
        now = time.monotonic()
        if now - self._last < self.interval:
            self._not_logged += 1
            return
        not_logged, self._not_logged, self._last = self._not_logged, 0, now
        self.logger.warning(
            message + " (%d more not logged since the last such message; the next in %.0f s at the earliest)",
            *args,
            not_logged,
            self.interval,
        )
