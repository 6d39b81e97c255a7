"""Times as the wires write them."""

from __future__ import annotations

import functools
from datetime import UTC, datetime

__all__ = ["iso"]


@functools.lru_cache(maxsize=64)
def iso(timestamp: int) -> str:
    """RFC 3339 UTC; cached, as most echoes of a process repeat a few expiry times."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
