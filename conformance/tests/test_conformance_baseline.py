"""The expected-failures baseline: the official suite's file, read and judged as the official suite does.

The cases are the official suite's own (src/expected-failures.ts and its README's exit-code table).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from mcp_sessions_conformance._model import ConformanceCheck
from mcp_sessions_conformance._report import Entry, Palette, evaluate, load_expected_failures, print_baseline


def checks(**statuses: str) -> list[ConformanceCheck]:
    made: list[ConformanceCheck] = []
    for check, status in statuses.items():
        made.append(
            {
                "id": check.replace("_", "-"),
                "name": check,
                "description": "d",
                "status": status,  # type: ignore[typeddict-item]
                "timestamp": "2026-11-23T00:00:00.000Z",
            }
        )
    return made


def load(tmp_path: Path, text: str) -> list[Entry]:
    path = tmp_path / "baseline.yml"
    path.write_text(text, encoding="utf-8")
    return load_expected_failures(path)


def test_reads_whole_scenarios_and_single_checks(tmp_path: Path) -> None:
    text = "server:\n  - sessions-hosts # whole\n  - sessions-draft:sessions-draft-echo\nclient:\n  - sse-retry\n"

    assert load(tmp_path, text) == [Entry("sessions-hosts"), Entry("sessions-draft", "sessions-draft-echo")]
    assert load(tmp_path, "") == load(tmp_path, "client:\n  - a\n") == load(tmp_path, "server: []\n") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("server:\n  - sessions-draft: sessions-draft-echo\n", "Remove the space after the colon"),
        ("server:\n  - sessions-draft\n  - sessions-draft:sessions-draft-echo\n", "redundant"),
        ("server:\n  - ':x'\n", "both sides of the colon"),
        ("server:\n  -\n", "empty"),
        ("server: everything\n", "must be an array"),
        ("- a\n", "expected an object"),
        ("server: {a: b}\n", "must be an array"),
        ("server:\n  - 42\n", "Quote it"),
        ("server: [a\n", r"baseline\.yml: while parsing a flow sequence"),
        ("server:\n  - a\nserver:\n  - b\n", r"'server' appears twice\n  in .*, line 3"),
        ("? [a]\n: b\n", "found unhashable key"),
        ("server: " + "[" * 100_000, "nested too deeply"),
        ("server: !!python/object:os.system ls\n", "could not determine a constructor"),
    ],
)
def test_refuses_what_the_official_suite_refuses(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load(tmp_path, text)


@pytest.mark.parametrize(
    ("results", "entries", "exit_code", "outcome"),
    [
        # The README's table, a whole scenario listed: fails and listed, fails and not, passes and listed.
        ({"s": checks(a="FAILURE")}, [Entry("s")], 0, {"expected": ["s"]}),
        ({"s": checks(a="FAILURE")}, [], 1, {"unexpected": ["s"]}),
        ({"s": checks(a="SUCCESS")}, [Entry("s")], 1, {"stale": ["s"]}),
        ({"s": checks(a="SUCCESS")}, [], 0, {}),
        # A WARNING counts as failing here.
        ({"s": checks(a="WARNING")}, [], 1, {"unexpected": ["s"]}),
        # One check listed: it is excused, another failure is not, and a listed check that passes is stale.
        ({"s": checks(a="FAILURE", b="SUCCESS")}, [Entry("s", "a")], 0, {"expected": ["s:a"]}),
        ({"s": checks(a="FAILURE", b="FAILURE")}, [Entry("s", "a")], 1, {"expected": ["s:a"], "unexpected": ["s:b"]}),
        ({"s": checks(a="SUCCESS", b="FAILURE")}, [Entry("s", "a")], 1, {"stale": ["s:a"], "unexpected": ["s:b"]}),
        # A listed check that is absent or skipped says nothing: tolerated.
        ({"s": checks(b="SUCCESS")}, [Entry("s", "a")], 0, {}),
        ({"s": checks(a="SKIPPED")}, [Entry("s", "a")], 0, {}),
    ],
)
def test_judges_as_the_official_suite(
    results: dict[str, list[ConformanceCheck]], entries: list[Entry], exit_code: int, outcome: dict[str, Any]
) -> None:
    verdict = evaluate(list(results.items()), entries)

    assert verdict.exit_code == exit_code
    assert (verdict.expected, verdict.stale, verdict.unexpected) == (
        outcome.get("expected", []),
        outcome.get("stale", []),
        outcome.get("unexpected", []),
    )


def test_repeated_ids_collapse_to_the_most_severe() -> None:
    repeated = [*checks(a="SUCCESS"), *checks(a="FAILURE"), *checks(a="SUCCESS")]

    assert evaluate([("s", repeated)], [Entry("s", "a")]).expected == ["s:a"]


def test_prints_the_official_report() -> None:
    out = io.StringIO()
    verdict = evaluate([("s", checks(a="FAILURE", b="SUCCESS"))], [Entry("s", "b")])
    print_baseline(verdict, out, Palette())

    assert out.getvalue() == (
        "\nStale baseline entries (now passing - remove from baseline):\n  ✓ s:b\n"
        "\nUnexpected failures (not in baseline):\n  ✗ s:a\n"
        "\nBaseline is stale: update your expected-failures file to remove passing entries.\n"
        "\nUnexpected failures detected: these are not in your expected-failures baseline.\n"
    )
