"""Session wires, one module each; the pipeline asks them, in order, which one a message speaks.

To add a wire, add a module with one :class:`WireProfile` and register its name here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from .._wire import iso
from ._base import Capability, ClientSide, LocalCall, LocalMethod, WireProfile
from ._carriers import Carrier, InvalidSessionMeta, SessionCarrier, SessionRef, TopLevelCarrier
from ._codes import (
    APPLICATION_NOT_FOUND,
    APPLICATION_REQUIRED,
    ERROR_CODE_SETS,
    SPEC_DEFINED_CODES,
    SPEC_SAFE_NOT_FOUND,
    SPEC_SAFE_REQUIRED,
    ErrorCodes,
    not_found_codes,
    outside_reserved,
    required_codes,
    spec_allows,
    with_error_codes,
)
from ._draft import DRAFT, SESSION_META_KEY, SESSION_NOT_FOUND, SESSION_REQUIRED
from ._echo_shapes import Echo, EchoShape, TopLevelEcho
from ._sep1364 import SEP1364_ALT1, SEP1364_ALT2
from ._strawman import STRAWMAN

__all__ = [
    "APPLICATION_NOT_FOUND",
    "APPLICATION_REQUIRED",
    "DRAFT",
    "ERROR_CODE_SETS",
    "PROFILES",
    "SEP1364_ALT1",
    "SEP1364_ALT2",
    "SESSION_META_KEY",
    "SESSION_NOT_FOUND",
    "SESSION_REQUIRED",
    "SPEC_DEFINED_CODES",
    "SPEC_SAFE_NOT_FOUND",
    "SPEC_SAFE_REQUIRED",
    "STRAWMAN",
    "Capability",
    "Carrier",
    "ClientSide",
    "Echo",
    "EchoShape",
    "ErrorCodes",
    "InvalidSessionMeta",
    "LocalCall",
    "LocalMethod",
    "SessionCarrier",
    "SessionRef",
    "TopLevelCarrier",
    "TopLevelEcho",
    "WireProfile",
    "iso",
    "not_found_codes",
    "outside_reserved",
    "profiles_from_names",
    "required_codes",
    "spec_allows",
    "with_error_codes",
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
