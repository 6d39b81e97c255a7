"""``error_codes``: the seeds' codes by default, codes MCP 2026-07-28 allows on request, a client that reads each."""

from __future__ import annotations

import pytest

from conftest import SECRET
from mcp_sessions import SessionsConfig
from mcp_sessions.client import HeldSession
from mcp_sessions.client._session import SessionKeeper
from mcp_sessions.profiles import PROFILES
from mcp_sessions.profiles._base import (
    SPEC_SAFE_NOT_FOUND,
    SPEC_SAFE_REQUIRED,
    outside_reserved,
    spec_allows,
    with_error_codes,
)

SEEDS = {"draft": (-32043, -32044, -32020)}  # wire: (not found, required, header mismatch), as the seeds define them


@pytest.mark.parametrize(
    ("code", "allowed"),
    [
        (-32000, True),
        (-32010, True),  # the project's store unavailable
        (-32011, True),  # too many sessions
        (SPEC_SAFE_NOT_FOUND, True),
        (SPEC_SAFE_REQUIRED, True),
        (-32019, True),
        (-32020, True),  # header mismatch: the spec's own
        (-32022, True),  # unsupported protocol version: the spec's own
        (-32023, False),
        (-32043, False),
        (-32044, False),
        (-32099, False),
        (-32002, False),  # retired
        (-32042, False),  # retired
        (-32600, True),
        (-31999, True),
    ],
)
def test_which_codes_the_spec_lets_an_implementation_answer(code: int, allowed: bool) -> None:
    assert spec_allows(code) is allowed


def codes(config: SessionsConfig) -> dict[str, tuple[int, int, int]]:
    return {p.name: (p.not_found, p.required, p.header_mismatch) for p in config.profiles}


def test_the_seeds_codes_by_default_and_spec_safe_on_request() -> None:
    every = ",".join(PROFILES)
    assert codes(SessionsConfig(secret=SECRET, profiles=every)) == SEEDS
    spec_safe = codes(SessionsConfig(secret=SECRET, profiles=every, error_codes="spec-safe"))
    assert spec_safe == {name: (-32012, -32013, -32020) for name in PROFILES}
    assert all(spec_allows(c) for wire in spec_safe.values() for c in wire)


def test_the_application_codes_lie_outside_the_json_rpc_reserved_range() -> None:
    """Issue 51: MCP 2026-07-28 says new codes "SHOULD be allocated outside the JSON-RPC reserved range (-32768 to
    -32000)" and that new implementations SHOULD NOT use -32000..-32019 at all: spec-safe's -32012 and -32013 do."""
    every = ",".join(PROFILES)
    application = codes(SessionsConfig(secret=SECRET, profiles=every, error_codes="application"))
    assert application == {name: (-31043, -31044, -32020) for name in PROFILES}
    assert all(outside_reserved(c) for wire in application.values() for c in wire[:2])
    assert not outside_reserved(SPEC_SAFE_NOT_FOUND)
    assert not outside_reserved(SPEC_SAFE_REQUIRED)
    environ = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_ERROR_CODES": "application"}
    assert codes(SessionsConfig.from_env(environ=environ))["draft"] == (-31043, -31044, -32020)


def test_the_variable_sets_the_option_and_the_keyword_wins() -> None:
    environ = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_ERROR_CODES": "Spec-Safe"}
    assert codes(SessionsConfig.from_env(environ=environ))["draft"] == (-32012, -32013, -32020)
    assert codes(SessionsConfig.from_env(environ=environ, error_codes="seeds"))["draft"] == SEEDS["draft"]


def test_the_client_reads_every_code_set() -> None:
    seeds = PROFILES["draft"]
    [spec_safe] = with_error_codes([seeds], "spec-safe")
    [application] = with_error_codes([seeds], "application")
    keeper = SessionKeeper(HeldSession(), None)
    assert {seeds.not_found, spec_safe.not_found, application.not_found} <= keeper.gone_codes
    assert {seeds.required, spec_safe.required, application.required} <= keeper.required_codes
