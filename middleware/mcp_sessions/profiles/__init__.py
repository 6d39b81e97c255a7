"""Session wires, one module each; the pipeline asks them, in order, which one a message speaks.

To add a wire, add a module with one :class:`WireProfile` (a subclass where it answers the interface's
methods otherwise than the draft) and register its name here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from .._wire.protocol import HEADER_MISMATCH, RATE_LIMITED, SESSION_STORE_UNAVAILABLE
from ._base import ADVERTISING_METHODS as ADVERTISING_METHODS
from ._base import DRAFT, SESSION_META_KEY, SESSION_NOT_FOUND, SESSION_REQUIRED, ErrorCodes, WireProfile
from ._base import ClientSide as ClientSide
from ._base import LocalCall as LocalCall
from ._base import LocalMethod as LocalMethod
from ._base import required_codes as required_codes
from ._base import with_error_codes as with_error_codes
from ._carriers import Carrier as Carrier
from ._carriers import Echo as Echo
from ._carriers import InvalidSessionMeta as InvalidSessionMeta
from ._carriers import SessionCarrier as SessionCarrier
from ._sep1364 import SEP1364_ALT1, SEP1364_ALT2
from ._strawman import STRAWMAN

# The public API is __all__; each ``name as name`` import above is for the package's other parts only.
__all__ = [
    "DRAFT",
    "HEADER_MISMATCH",
    "PROFILES",
    "RATE_LIMITED",
    "SEP1364_ALT1",
    "SEP1364_ALT2",
    "SESSION_META_KEY",
    "SESSION_NOT_FOUND",
    "SESSION_REQUIRED",
    "SESSION_STORE_UNAVAILABLE",
    "STRAWMAN",
    "ErrorCodes",
    "WireProfile",
]

PROFILES: Final[dict[str, WireProfile]] = {p.name: p for p in (DRAFT, STRAWMAN, SEP1364_ALT1, SEP1364_ALT2)}
"""Every wire this package speaks, by the name ``profiles=`` knows it by, in the default order."""


def profiles_from_names(names: str | Iterable[str | WireProfile]) -> Sequence[WireProfile]:
    """Profiles from names (``"draft,strawman"`` or a list) or instances, in order, without repeats."""
    items = [n.strip() for n in names.split(",") if n.strip()] if isinstance(names, str) else list(names)
    chosen: list[WireProfile] = []
    for item in items:
        profile = item if isinstance(item, WireProfile) else PROFILES.get(item)
        if profile is None:
            raise ValueError(f"unknown session wire profile {item!r}: known are {', '.join(sorted(PROFILES))}")
        if any(p.name == profile.name for p in chosen):
            raise ValueError(f"the session wire profile {profile.name!r} is listed twice")
        chosen.append(profile)
    if not chosen:
        raise ValueError("at least one session wire profile is needed (the default is 'draft')")
    return tuple(chosen)
