"""Which error codes the wires answer with: the seeds' own (the default), or codes MCP 2026-07-28 allows.

MCP 2026-07-28 reserves -32020..-32099 to the codes it defines and retires -32002 and -32042, where the
seeds' -32043, -32044 and the strawman's -32002 fall. ``error_codes="spec-safe"`` moves a wire's "not found"
and "required" codes to -32012 and -32013, in the band left to implementations; "Error codes" in
``docs/profiles.md`` says why these two.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final, Literal

from ._base import WireProfile

ErrorCodes = Literal["seeds", "spec-safe"]
"""The error code sets ``error_codes=`` takes."""
ERROR_CODE_SETS: Final[tuple[ErrorCodes, ...]] = ("seeds", "spec-safe")
"""Each set ``error_codes=`` takes: the seeds' own codes (the default), or those MCP 2026-07-28 allows."""

SPEC_SAFE_NOT_FOUND: Final = -32012
"""Error code under ``error_codes="spec-safe"``: the session names no live session of the caller."""
SPEC_SAFE_REQUIRED: Final = -32013
"""Error code under ``error_codes="spec-safe"``: the request has no session and the policy requires one."""
SPEC_DEFINED_CODES: Final = frozenset({-32020, -32021, -32022})
"""The codes of the reserved band that MCP 2026-07-28 defines: header mismatch, missing client
capability, unsupported protocol version."""
_RETIRED: Final = frozenset({-32002, -32042})


def spec_allows(code: int) -> bool:
    """Whether MCP 2026-07-28 lets an implementation answer ``code``: not reserved to it, not retired."""
    if code in _RETIRED:
        return False
    return not -32099 <= code <= -32020 or code in SPEC_DEFINED_CODES


def with_error_codes(profiles: Iterable[WireProfile], codes: ErrorCodes) -> tuple[WireProfile, ...]:
    """The wires answering with ``codes``: as they are (``seeds``), or with every code the spec forbids moved."""
    if codes not in ERROR_CODE_SETS:
        raise ValueError(f'error_codes must be "seeds" or "spec-safe", got {codes!r}')
    if codes == "seeds":
        return tuple(profiles)
    return tuple(
        dataclasses.replace(
            profile,
            not_found=profile.not_found if spec_allows(profile.not_found) else SPEC_SAFE_NOT_FOUND,
            required=profile.required if spec_allows(profile.required) else SPEC_SAFE_REQUIRED,
        )
        for profile in profiles
    )


def not_found_codes(profile: WireProfile) -> frozenset[int]:
    """The codes a client of ``profile`` reads as "not found", whichever set the server answers with."""
    return frozenset({profile.not_found, SPEC_SAFE_NOT_FOUND})


def required_codes(profile: WireProfile) -> frozenset[int]:
    """The codes a client of ``profile`` reads as "required", whichever set the server answers with."""
    return frozenset({profile.required, SPEC_SAFE_REQUIRED})
