"""The floats either side of an instant, for the unit tests that pin an expiry boundary (``math.nextafter``)."""

from __future__ import annotations

import math


def before(instant: float) -> float:
    """The last float before ``instant``: as close to a boundary as a clock can get."""
    return math.nextafter(instant, -math.inf)


def after(instant: float) -> float:
    """The first float after ``instant``."""
    return math.nextafter(instant, math.inf)
