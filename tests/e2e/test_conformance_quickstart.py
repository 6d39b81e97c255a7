"""Issue 40's bar: ``mcp-sessions conformance`` against the quickstart passes every check of the draft and the
host conversation ids, both eras.

The quickstart runs on real uvicorn (JSON and SSE, and with host conversation
data on); the pack runs in process, as a user's CI runs it, and once as a real
subprocess. The same runs show that every row of the draft's and the hosts'
traceability files names a check the pack emits (the strawman's are judged
against fast-agent 0.5.3's server, tests/e2e/test_conformance_thirdparty.py), that ``checks.json`` has
the official suite's shape, that the console prints its lines, and they make
the results table of docs/conformance.md (``python scripts/update_docs.py`` regenerates it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from examples.quickstart import build_app

from _docs import assert_generated
from conftest import SECRET, serve
from e2e._pack import LEGACY, MODERN, PackRun, run_pack
from mcp_sessions_conformance import SCENARIOS
from mcp_sessions_conformance._model import load_traceability

DOC = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"


@dataclass(frozen=True)
class Server:
    """A quickstart configuration, as the docs' table names it."""

    title: str
    json: bool = False
    stateless: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)


SERVERS = {
    "draft": Server("defaults, SSE, stateful"),
    "draft-json": Server("defaults, JSON, stateless", json=True, stateless=True),
    "hosts-data": Server(
        "`MCP_SESSIONS_CONVERSATION_DATA=anonymous`, SSE, stateful", options={"conversation_data": "anonymous"}
    ),
}


@dataclass(frozen=True)
class Run:
    """One row of the results table: a server, the wire checked (``None``: every wire it advertises), an era, whether
    with this project's conventions (``--conventions``)."""

    server: str
    wire: str | None
    era: str
    conventions: bool = False

    @property
    def id(self) -> str:
        return f"{self.server}-{self.wire or 'every-wire'}-{self.era}{'-conventions' * self.conventions}"

    @property
    def args(self) -> list[str]:
        wire = ["--wire", self.wire] if self.wire else []
        return [*wire, "--spec-version", self.era, *(["--conventions"] if self.conventions else [])]


PAIRS = [("draft", "draft"), ("draft-json", "draft")]
HOSTS = [("draft", "hosts"), ("hosts-data", "hosts")]  # this project's own wire: with --conventions only
RUNS = [
    *(Run(server, wire, era) for server, wire in PAIRS for era in (MODERN, LEGACY)),
    *(Run(server, wire, era, True) for server, wire in PAIRS + HOSTS for era in (MODERN, LEGACY)),
    Run("draft", None, MODERN),
    Run("draft", None, LEGACY, True),
]


@pytest.fixture(scope="module")
def urls() -> Iterator[dict[str, str]]:
    """Each quickstart configuration on its own uvicorn, for the whole module."""
    with ExitStack() as stack:
        found = {}
        for key, server in SERVERS.items():
            environ = {"MCP_SESSIONS_SECRET": SECRET}
            app = build_app(json_response=server.json, stateless=server.stateless, environ=environ, **server.options)
            found[key] = stack.enter_context(serve(app)) + "/mcp"
        yield found


@pytest.fixture(scope="module")
def runs(urls: dict[str, str]) -> dict[str, PackRun]:
    """Every run of ``RUNS``, once for the module."""
    return {run.id: run_pack(urls[run.server], *run.args) for run in RUNS}


@pytest.mark.parametrize("run", RUNS, ids=[run.id for run in RUNS])
def test_the_quickstart_passes_every_check(runs: dict[str, PackRun], run: Run) -> None:
    result = runs[run.id]

    assert (result.code, result.failing()) == (0, set()), result.out


def test_a_run_without_wire_checks_the_wires_the_server_advertises(runs: dict[str, PackRun]) -> None:
    default = runs[Run("draft", None, MODERN).id]
    assert set(default.checks) == {"sessions-draft"}
    assert set(runs[Run("draft", None, LEGACY, True).id].checks) == {"sessions-draft", "sessions-hosts"}
    assert (
        "SKIPPED: scenario 'sessions-strawman': the server does not advertise it at 2026-07-28"
        " (no capabilities.experimental.session); --wire strawman checks it anyway." in default.out
    )


def test_an_explicit_wire_the_server_lacks_still_fails_unless_baselined(urls: dict[str, str], tmp_path: Path) -> None:
    result = run_pack(urls["draft"], "--wire", "strawman")

    assert result.code == 1
    assert "sessions-strawman-capability" in result.failing(), result.out
    baseline = tmp_path / "conformance-baseline.yml"
    listed = "".join(f"  - sessions-strawman:{check}\n" for check in sorted(result.failing()))
    baseline.write_text("server:\n" + listed, encoding="utf-8")
    baselined = run_pack(urls["draft"], "--wire", "strawman", "--expected-failures", str(baseline))
    assert baselined.code == 0, baselined.out
    assert "Baseline check passed: all failures are expected." in baselined.out


def test_every_traceability_row_names_a_check_the_pack_emits(runs: dict[str, PackRun]) -> None:
    """The draft's and the hosts' rows: no server here speaks the strawman (test_conformance_thirdparty.py)."""
    judged = [scenario for scenario in SCENARIOS if scenario.wire != "strawman"]
    rows = {r.check for scenario in judged for r in load_traceability(scenario.name).requirements}
    emitted = {check["id"] for run in runs.values() for checks in run.checks.values() for check in checks}

    assert rows - emitted == set(), "rows naming a check the pack never emits"
    assert emitted - rows == set(), "checks the pack emits with no row"


def test_checks_json_has_the_official_check_shape(runs: dict[str, PackRun]) -> None:
    """The official suite's ``ConformanceCheck`` (src/types.ts), field by field, and its ``toISOString`` stamps."""
    required = {"id": str, "name": str, "description": str, "status": str, "timestamp": str}
    optional = {
        "specReferences": list,
        "source": dict,
        "details": dict,
        "metadata": dict,
        "errorMessage": str,
        "logs": list,
    }
    stamp = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
    checks = [check for run in runs.values() for checks in run.checks.values() for check in checks]
    assert checks
    for check in checks:
        assert set(check) <= set(required) | set(optional), check
        assert all(isinstance(check[key], kind) for key, kind in required.items()), check
        assert all(isinstance(check[key], kind) for key, kind in optional.items() if key in check), check
        assert check["status"] in {"SUCCESS", "FAILURE", "WARNING", "SKIPPED", "INFO"}
        assert stamp.fullmatch(check["timestamp"]), check["timestamp"]
        for reference in check.get("specReferences", []):
            assert set(reference) <= {"id", "url"} and isinstance(reference["id"], str), reference
        assert check["name"] == "".join(part.capitalize() for part in check["id"].split("-"))
        assert ("errorMessage" in check) == (check["status"] in ("FAILURE", "WARNING")), check


def test_the_console_prints_the_official_lines(runs: dict[str, PackRun]) -> None:
    result = runs[Run("draft", None, MODERN).id]
    lines = result.out.splitlines()
    for scenario, checks in result.checks.items():
        width_id = max(len(check["id"]) for check in checks)
        width_status = max(len(check["status"]) for check in checks)
        for check in checks:
            line = f"{check['timestamp']} [{check['id'].ljust(width_id)}] {check['status'].ljust(width_status)} "
            assert line + check["description"] in lines
        passed = sum(check["status"] == "SUCCESS" for check in checks)
        denominator = sum(check["status"] in ("SUCCESS", "FAILURE") for check in checks)
        assert f"Passed: {passed}/{denominator}, 0 failed, 0 warnings" in lines
        assert f"✓ {scenario}: {passed} passed, 0 failed" in lines
    total = sum(check["status"] == "SUCCESS" for checks in result.checks.values() for check in checks)
    assert lines[-1] == f"Total: {total} passed, 0 failed"


def test_a_real_subprocess_run(urls: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    argv = [sys.executable, "-m", "mcp_sessions", "conformance", urls["draft"], "--wire", "draft"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)

    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    assert done.stdout.splitlines()[-1] == "Total: 19 passed, 0 failed"
    assert "\x1b[" not in done.stdout  # not a terminal: no colours


# -- docs/conformance.md -----------------------------------------------------------------------------------


def _row(run: Run, scenario: str, checks: list[dict[str, Any]]) -> str:
    count = {status: sum(c["status"] == status for c in checks) for status in ("SUCCESS", "FAILURE", "WARNING")}
    skipped = sum(c["status"] == "SKIPPED" for c in checks)
    failed = sorted({c["id"] for c in checks if c["status"] == "FAILURE"})
    failures = f"{len(failed)}: " + ", ".join(f"`{f}` (baselined)" for f in failed) if failed else "0"
    passed = f"{count['SUCCESS']}/{count['SUCCESS'] + count['FAILURE']}"
    server, options = SERVERS[run.server].title, "`--conventions`" if run.conventions else "default"
    return (
        f"| {server} | `{scenario}` | {run.era} | {options} | {passed} | {failures} | {count['WARNING']} | {skipped} |"
    )


def render_results(runs: dict[str, PackRun]) -> str:
    """The results table: every run of this module, a row per scenario."""
    lines = [
        "| quickstart | scenario | spec version | run | passed | failed | warnings | skipped |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    order = [scenario.name for scenario in SCENARIOS]
    for run in RUNS:
        checks = runs[run.id].checks
        lines += [_row(run, name, checks[name]) for name in order if name in checks]
    return "\n".join(lines) + "\n"


def test_docs_results_table_is_generated_from_this_run(runs: dict[str, PackRun]) -> None:
    assert_generated(DOC, render_results(runs), "<!-- begin results -->\n", "<!-- end results -->")
