"""Where a handle's records live in the store, and for how long.

Keyed by the handle's stable id, never by the handle: ``h:<id>`` holds its
data, its revocation and its idle clock; ``hm:<id>`` what a principal-bound or
session-tied handle was minted for.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DATA_PREFIX", "META_KEY", "META_PREFIX", "kept_until"]

DATA_PREFIX: Final = "h:"
META_PREFIX: Final = "hm:"
META_KEY: Final = "m"


def kept_until(expires_at: float, leeway: float) -> float:
    """How long the store keeps a handle's records: while its pure check accepts it (expiry + leeway).

    Forgotten at the expiry itself, a revoked handle would verify again for ``leeway`` seconds.
    """
    return expires_at + leeway
