"""Issue 40's bar for checks that can fail: each broken rule fails exactly its checks, and every check has one.

Each fault (tests/e2e/_faults.py) is the quickstart behind ``MCPSessionMiddleware``
with one rule of one wire broken by a small ASGI middleware in front of it
(tests/e2e/_broken.py). ``mcp-sessions conformance`` against it must fail
exactly the checks the fault names; the same server unbroken fails none; and
the faults together break every check the pack has.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from examples.quickstart import SESSION_TOOLS, build_app, build_server
from starlette.types import ASGIApp

from conftest import SECRET
from e2e._broken import Fault, broken_servers, place_unbatcher
from e2e._faults import FAULTS, STRAWMAN_FAULTS
from e2e._pack import run_pack
from mcp_sessions import MCPSessionMiddleware
from mcp_sessions_conformance import SCENARIOS
from mcp_sessions_conformance._model import ConformanceCheck, load_traceability
from mcp_sessions_conformance._report import Palette, print_checks


def quickstart(**options: Any) -> ASGIApp:
    environ = {"MCP_SESSIONS_SECRET": SECRET}
    return build_app(json_response=False, stateless=False, environ=environ, **options)


def takes_batches() -> ASGIApp:
    """The quickstart's server (JSON, stateless) taking batches: the servers the draft's batch rules are about."""
    app = build_server().streamable_http_app(streamable_http_path="/mcp", json_response=True, stateless_http=True)
    assert place_unbatcher(app)
    return MCPSessionMiddleware.from_env(
        app,
        environ={"MCP_SESSIONS_SECRET": SECRET},
        require_session_tools=SESSION_TOOLS,
    )


BASES: dict[str, Callable[[], ASGIApp]] = {
    "draft": quickstart,
    "hosts-data": lambda: quickstart(conversation_data="anonymous"),
    "batches": takes_batches,
}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    """Each base app, unbroken at ``/mcp`` and with each of its faults at ``/<fault>/mcp``: one uvicorn a base."""
    with ExitStack() as stack:
        urls = {}
        for base, make in BASES.items():
            faults = {f.name: f for f in FAULTS if f.base == base}
            assert len(faults) == sum(f.base == base for f in FAULTS), f"two faults of {base} share a name"
            urls[base] = stack.enter_context(broken_servers(make(), faults))
        yield urls


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f"{f.wire}-{f.name}")
def test_a_broken_rule_fails_exactly_its_checks(servers: dict[str, str], fault: Fault) -> None:
    conventions = ["--conventions"] if fault.conventions else []
    run = run_pack(
        f"{servers[fault.base]}/{fault.name}/mcp", "--wire", fault.wire, "--spec-version", fault.era, *conventions
    )

    assert run.failing() == fault.breaks, run.out
    must = any(c["status"] == "FAILURE" for checks in run.checks.values() for c in checks)
    assert run.code == (1 if must else 0)


@pytest.mark.parametrize(
    ("base", "wire", "era", "conventions"), sorted({(f.base, f.wire, f.era, f.conventions) for f in FAULTS})
)
def test_each_server_unbroken_passes_every_check(
    servers: dict[str, str], base: str, wire: str, era: str, conventions: bool
) -> None:
    run = run_pack(f"{servers[base]}/mcp", "--wire", wire, "--spec-version", era, *(["--conventions"] * conventions))

    assert (run.code, run.failing()) == (0, set()), run.out
    if base == "batches":  # a server that takes batches: the batch checks run, and pass
        statuses = run.statuses()
        assert statuses["sessions-draft-batch-session-method"] == {"SUCCESS"}
        assert statuses["sessions-draft-batch-bad-session"] == {"SUCCESS"}


# The strawman's checks that fast-agent 0.5.3's server, the one left that speaks it, skips (no resume, no count, no
# tool that needs a session) or answers otherwise with --conventions: no fault can show them failing there.
STRAWMAN_UNBROKEN = {
    "sessions-strawman-capability-version",
    "sessions-strawman-expiry",
    "sessions-strawman-label-in-data",
    "sessions-strawman-resume",
    "sessions-strawman-delete-null-cookie",
    "sessions-strawman-session-is-context",
    "sessions-strawman-echo",
    "sessions-strawman-revoked",
    "sessions-strawman-unknown-is-no-session",
    "sessions-strawman-session-required",
}


def test_every_check_of_the_pack_fails_against_some_fault() -> None:
    """The strawman's against fast-agent 0.5.3's server (test_conformance_strawman.py), but those it cannot show."""
    every = {r.check for scenario in SCENARIOS for r in load_traceability(scenario.name).requirements}
    broken = set().union(*(fault.breaks for fault in [*FAULTS, *STRAWMAN_FAULTS]))

    assert broken == every - STRAWMAN_UNBROKEN
    assert every > STRAWMAN_UNBROKEN


def test_a_fault_is_caught_in_the_default_run_exactly_where_its_checks_quote_the_wire_s_text() -> None:
    """A convention's fault runs with --conventions; a fault of the text's own checks runs without it."""
    conventions = {
        r.check for scenario in SCENARIOS for r in load_traceability(scenario.name).requirements if r.convention
    }
    for fault in FAULTS:
        if fault.name in CAUGHT_BY_THE_FIXTURE_S_CONTRACT:
            assert fault.conventions and not fault.breaks & conventions, fault.name
            continue
        assert fault.conventions == bool(fault.breaks & conventions), fault.name


# A text's own check that only --conventions can fail here, as it needs the quickstart's tools' contract. Which tool
# needs a session only the server knows: the default run sees count served without one, and SKIPS. And only
# countdown is sure to stream its answer (the SDK answers JSON when a tool sends no notification).
CAUGHT_BY_THE_FIXTURE_S_CONTRACT = {"runs-without-session", "no-echo-in-sse"}


def test_without_the_fixture_s_contract_a_tool_served_without_a_session_is_skipped(servers: dict[str, str]) -> None:
    run = run_pack(f"{servers['draft']}/runs-without-session/mcp", "--wire", "draft")

    assert (run.code, run.failing()) == (0, set()), run.out
    assert run.statuses()["sessions-draft-session-required"] == {"SKIPPED"}
    assert "the tool 'count' was served without a session: it requires none" in json.dumps(run.checks)


def test_a_failure_on_the_console_shows_what_the_server_answered(servers: dict[str, str]) -> None:
    """Issue 51: the console's failure says what the server answered (bounded and escaped), as checks.json does."""
    run = run_pack(f"{servers['draft']}/delete-errs/mcp", "--wire", "draft")

    assert run.failing() == {"sessions-draft-delete"}
    [shown] = [line for line in run.out.splitlines() if line.startswith("    Error: the result is not {}: ")]
    assert '"error":{"code":-32603,"message":"broken"}' in shown, run.out
    assert len(shown) < 300

    # A failure whose message does not quote the answer gets a line of its own that does (a strawman check's).
    answer = '{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"broken"}}'
    failed: ConformanceCheck = {
        **run.checks["sessions-draft"][0],  # type: ignore[typeddict-item]
        "status": "FAILURE",
        "errorMessage": "session/delete failed",
        "details": {"status": 200, "answer": answer},
    }
    console = io.StringIO()
    print_checks([failed], console, Palette())
    assert "    Error: session/delete failed\n" in console.getvalue()
    lines = [line for line in console.getvalue().splitlines() if line.startswith("    Server answered: HTTP 200: ")]
    assert len(lines) == 1 and '"error":{"code":-32603,"message":"broken"}' in lines[0]
