"""Session wires: the draft, the one built in (``_base.py``), and the names of the wires that went.

A wire of a program's own is a :class:`WireProfile` given in ``profiles=``, written with this module's names
alone (``docs/profiles.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from .._wire.protocol import HEADER_MISMATCH, RATE_LIMITED, SESSION_STORE_UNAVAILABLE
from ._base import ADVERTISING_METHODS as ADVERTISING_METHODS
from ._base import (
    DRAFT,
    SESSION_META_KEY,
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    Capability,
    Era,
    ErrorCodes,
    LocalCall,
    LocalMethod,
    WireProfile,
)
from ._base import METHOD_CREATE as METHOD_CREATE
from ._base import METHOD_DELETE as METHOD_DELETE
from ._base import SESSIONS_EXTENSION_ID as SESSIONS_EXTENSION_ID
from ._base import required_codes as required_codes
from ._base import with_error_codes as with_error_codes
from ._carriers import Echo, SessionCarrier
from ._carriers import InvalidSessionMeta as InvalidSessionMeta

# The public API is __all__, what a wire is written with included (docs/profiles.md, "Writing another wire");
# each ``name as name`` import above, and PROFILES, are for the package's other parts only.
__all__ = [
    "DRAFT",
    "HEADER_MISMATCH",
    "RATE_LIMITED",
    "SESSION_META_KEY",
    "SESSION_NOT_FOUND",
    "SESSION_REQUIRED",
    "SESSION_STORE_UNAVAILABLE",
    "Capability",
    "Echo",
    "Era",
    "ErrorCodes",
    "LocalCall",
    "LocalMethod",
    "SessionCarrier",
    "WireProfile",
]

PROFILES: Final[dict[str, WireProfile]] = {DRAFT.name: DRAFT}
"""Every wire this package speaks, by the name ``profiles=`` knows it by."""
RETIRED: Final = frozenset({"strawman", "sep1364-alt1", "sep1364-alt2"})
"""The wires earlier versions spoke and this one does not (docs/profiles.md says why): named in the error."""


def profiles_from_names(names: str | Iterable[str | WireProfile]) -> Sequence[WireProfile]:
    """Profiles from names (``"draft"`` or a list) or instances, in order, without repeats."""
    items = [n.strip() for n in names.split(",") if n.strip()] if isinstance(names, str) else list(names)
    chosen: list[WireProfile] = []
    for item in items:
        profile = item if isinstance(item, WireProfile) else PROFILES.get(item)
        if profile is None and item in RETIRED:
            raise ValueError(
                f"the session wire profile {item!r} was removed: no client speaks it any more;"
                " use 'draft' (docs/profiles.md says why)"
            )
        if profile is None:
            raise ValueError(f"unknown session wire profile {item!r}: known are {', '.join(sorted(PROFILES))}")
        if any(p.name == profile.name for p in chosen):
            raise ValueError(f"the session wire profile {profile.name!r} is listed twice")
        chosen.append(profile)
    if not chosen:
        raise ValueError("at least one session wire profile is needed (the default is 'draft')")
    return tuple(chosen)
