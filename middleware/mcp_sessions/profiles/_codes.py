"""Which error codes the wires answer with: the seeds' own (the default), or codes MCP 2026-07-28 allows.

MCP 2026-07-28 reserves -32020..-32099 to the codes it defines and retires -32002 and -32042, where the
seeds' -32043, -32044 and the strawman's -32002 fall. Of -32000..-32019 it says "new implementations
SHOULD NOT use codes from this sub-range at all", and of new codes that they "SHOULD be allocated outside
the JSON-RPC reserved range (-32768 to -32000)". ``error_codes="application"`` follows those sentences:
a wire's "not found" and "required" move to -31043 and -31044, application codes outside the reserved
range. ``error_codes="spec-safe"`` keeps only the MUST NOT: they move to -32012 and -32013, inside
-32000..-32019. "Error codes" in ``docs/profiles.md`` has the table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final, Literal

from ._base import WireProfile

ErrorCodes = Literal["seeds", "spec-safe", "application"]
"""The error code sets ``error_codes=`` takes."""
ERROR_CODE_SETS: Final[tuple[ErrorCodes, ...]] = ("seeds", "spec-safe", "application")
"""Each set ``error_codes=`` takes: the seeds' own codes (the default), codes MCP 2026-07-28 does not forbid,
or codes outside the JSON-RPC reserved range, as 2026-07-28 asks of new codes."""

SPEC_SAFE_NOT_FOUND: Final = -32012
"""Error code under ``error_codes="spec-safe"``: the session names no live session of the caller."""
SPEC_SAFE_REQUIRED: Final = -32013
"""Error code under ``error_codes="spec-safe"``: the request has no session and the policy requires one."""
APPLICATION_NOT_FOUND: Final = -31043
"""Error code under ``error_codes="application"``: the session names no live session of the caller."""
APPLICATION_REQUIRED: Final = -31044
"""Error code under ``error_codes="application"``: the request has no session and the policy requires one."""
_MOVED: Final[dict[str, tuple[int, int]]] = {
    "spec-safe": (SPEC_SAFE_NOT_FOUND, SPEC_SAFE_REQUIRED),
    "application": (APPLICATION_NOT_FOUND, APPLICATION_REQUIRED),
}
"""Where each set other than the seeds' moves the "not found" and "required" codes the specification forbids."""
SPEC_DEFINED_CODES: Final = frozenset({-32020, -32021, -32022})
"""The codes of the reserved band that MCP 2026-07-28 defines: header mismatch, missing client
capability, unsupported protocol version."""
_RETIRED: Final = frozenset({-32002, -32042})


def spec_allows(code: int) -> bool:
    """Whether MCP 2026-07-28 lets an implementation answer ``code``: not reserved to it, not retired."""
    if code in _RETIRED:
        return False
    return not -32099 <= code <= -32020 or code in SPEC_DEFINED_CODES


def outside_reserved(code: int) -> bool:
    """Whether ``code`` lies outside the JSON-RPC reserved range (-32768..-32000), where MCP 2026-07-28 says new
    codes SHOULD be allocated."""
    return not -32768 <= code <= -32000


def with_error_codes(profiles: Iterable[WireProfile], codes: ErrorCodes) -> tuple[WireProfile, ...]:
    """The wires answering with ``codes``: as they are (``seeds``), or with every code the spec forbids moved."""
    if codes not in ERROR_CODE_SETS:
        raise ValueError(f"error_codes must be one of {', '.join(ERROR_CODE_SETS)}, got {codes!r}")
    if codes == "seeds":
        return tuple(profiles)
    not_found, required = _MOVED[codes]
    keeps = spec_allows if codes == "spec-safe" else outside_reserved
    return tuple(
        dataclasses.replace(
            profile,
            not_found=profile.not_found if keeps(profile.not_found) else not_found,
            required=profile.required if keeps(profile.required) else required,
        )
        for profile in profiles
    )


def not_found_codes(profile: WireProfile) -> frozenset[int]:
    """The codes a client of ``profile`` reads as "not found", whichever set the server answers with."""
    return frozenset({profile.not_found, SPEC_SAFE_NOT_FOUND, APPLICATION_NOT_FOUND})


def required_codes(profile: WireProfile) -> frozenset[int]:
    """The codes a client of ``profile`` reads as "required", whichever set the server answers with."""
    return frozenset({profile.required, SPEC_SAFE_REQUIRED, APPLICATION_REQUIRED})
