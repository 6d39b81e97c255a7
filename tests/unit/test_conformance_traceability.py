"""The traceability files: one a wire, every row well formed, every check once, the quotes where they claim to be.

That every row names a check the pack really emits is shown by a run against the
quickstart (tests/e2e/test_conformance_quickstart.py), as the official suite
builds its traceability manifest from a run, not from a source scan.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from _redis import missing
from mcp_sessions._cli import main
from mcp_sessions_conformance import SCENARIOS
from mcp_sessions_conformance._model import load_traceability

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "conformance" / "mcp_sessions_conformance" / "traceability"


def test_one_file_a_wire_and_no_other() -> None:
    assert sorted(path.stem for path in FOLDER.glob("*.yaml")) == sorted(s.name for s in SCENARIOS)
    for scenario in SCENARIOS:
        traceability = load_traceability(scenario.name)
        assert (traceability.wire, traceability.scenario) == (scenario.wire, scenario.name)


def test_check_ids_are_named_by_wire_and_unique() -> None:
    seen: list[str] = []
    for scenario in SCENARIOS:
        for requirement in load_traceability(scenario.name).requirements:
            assert requirement.check.startswith(f"{scenario.name}-"), requirement.check
            assert requirement.era in (None, *scenario.eras), requirement
            seen.append(requirement.check)
    assert len(seen) == len(set(seen))


def test_every_excluded_row_says_why() -> None:
    for scenario in SCENARIOS:
        for excluded in load_traceability(scenario.name).excluded:
            assert len(excluded.reason) > 10, excluded


SHARED = ROOT.parent / "shared"
"""The seed texts beside the checkout (shared/seeds/, shared/spec/), as the project's machines and CI have them."""
TEXTS = {
    "draft": ["seeds/004_5543cca64d2ef1c9.txt", "seeds/002_e39abaa8ab38ee42.txt", "spec/data-layer-sessions.md"],
    "strawman": ["seeds/002_e39abaa8ab38ee42.txt"],
}


def _plain(text: str) -> str:
    """``text`` as the quotes write it: one space for any run of spaces, no Markdown emphasis or escapes, and no
    diff or comment marks (``+``, ``*``) at the start of a line of code."""
    unmarked = re.sub(r"(?m)^[ \t]*\+?[ \t]*\*?(?!\*)[ \t]*", "", text.replace("**", "").replace("\\_", "_"))
    return re.sub(r"\s+", " ", unmarked)


@pytest.mark.parametrize("wire", sorted(TEXTS))
def test_every_default_check_quotes_its_wire_s_own_text(wire: str) -> None:
    """Issue 51: the default run tests the texts' own sentences; each piece of a quote ('…' between) is verbatim."""
    found = [SHARED / name for name in TEXTS[wire] if (SHARED / name).exists()]
    if len(found) < len(TEXTS[wire]):
        missing(f"the seed texts are not beside the checkout (expected under {SHARED})")
    texts = _plain(" ".join(path.read_text(encoding="utf-8") for path in found))
    scenario = next(s for s in SCENARIOS if s.wire == wire)
    for requirement in load_traceability(scenario.name).requirements:
        if requirement.convention:
            continue
        for piece in filter(None, re.split(r"\s*…\s*", requirement.text)):
            assert _plain(piece) in texts, (requirement.check, piece)


def test_the_hosts_quotes_are_verbatim_in_the_page_they_quote() -> None:
    """The hosts wire's sentences are this project's own (docs/clients.md): each row quotes the page as it stands."""
    page = re.sub(r"\s+", " ", (ROOT / "docs" / "clients.md").read_text(encoding="utf-8"))
    traceability = load_traceability("sessions-hosts")
    for text in [r.text for r in traceability.requirements] + [e.text for e in traceability.excluded]:
        assert text in page, text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--header", "no colon"], "--header takes 'Name: value'"),
        (["--expected-failures", "/nonexistent/baseline.yml"], "No such file"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["conformance", "http://127.0.0.1:9/mcp", *argv], stdout=out, stderr=err, environ={})

    assert code == 2
    assert message in err.getvalue()
    assert out.getvalue() == ""


def test_an_unreachable_server_fails_each_scenario_and_says_why() -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["conformance", "http://127.0.0.1:9/mcp", "--wire", "draft"], stdout=out, stderr=err, environ={})

    assert code == 1
    assert "[sessions-draft] FAILURE Failed to run scenario" in out.getvalue()
    assert "Error: ConnectError" in out.getvalue()
