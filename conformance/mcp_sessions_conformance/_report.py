"""What a run prints and writes, and how a baseline judges it, line for line as the official suite's ``server`` command.

The expected-failures baseline is the official file: a ``server:`` list of
``<scenario>`` (the whole scenario may fail) or ``<scenario>:<check-id>`` (only
that check may fail). A failure that is not listed fails the run, and so does a
listed entry that now passes (a stale baseline); WARNING counts as failing here,
as it does in the official suite.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ._answers import excerpt, json_printable, printable
from ._model import ConformanceCheck, now, read_yaml

_SEVERITY = {"FAILURE": 3, "WARNING": 2, "SUCCESS": 1}
MAX_BASELINE_BYTES = 1 << 20
"""The largest expected-failures file read: one is a few kilobytes."""
MAX_SHOWN = 2000
"""The most characters of one error message printed (``checks.json`` keeps it whole)."""


@dataclass(frozen=True)
class Palette:
    """The ANSI colours of the official runner, or none at all."""

    reset: str = ""
    gray: str = ""
    green: str = ""
    yellow: str = ""
    red: str = ""
    blue: str = ""

    @classmethod
    def for_stream(cls, stream: TextIO, environ: Mapping[str, str]) -> Palette:
        """Colours when ``stream`` is a terminal and ``NO_COLOR`` is unset."""
        if "NO_COLOR" in environ or not stream.isatty():
            return cls()
        return cls("\x1b[0m", "\x1b[90m", "\x1b[32m", "\x1b[33m", "\x1b[31m", "\x1b[36m")

    def status(self, status: str) -> str:
        """The colour the official runner gives ``status``."""
        colours = {"SUCCESS": self.green, "FAILURE": self.red, "WARNING": self.yellow, "INFO": self.blue}
        return colours.get(status, self.reset)


def print_checks(checks: Sequence[ConformanceCheck], out: TextIO, palette: Palette) -> None:
    """One scenario's checks, its ``Passed:`` line and its failures (``printServerResults``).

    Every text is :func:`printable`: an error message quotes what the server sent.
    """
    width_id = max((len(check["id"]) for check in checks), default=0)
    width_status = max((len(check["status"]) for check in checks), default=0)
    lines = [
        f"{palette.gray}{check['timestamp']}{palette.reset} [{check['id'].ljust(width_id)}] "
        f"{palette.status(check['status'])}{check['status'].ljust(width_status)}{palette.reset} "
        f"{printable(check['description'])}"
        for check in checks
    ]
    out.write("Checks:\n" + "\n".join(lines) + "\n")
    tally = Counter(check["status"] for check in checks)
    passed, failed = tally["SUCCESS"], tally["FAILURE"]
    out.write(f"\nTest Results:\nPassed: {passed}/{passed + failed}, {failed} failed, {tally['WARNING']} warnings\n")
    if failed:
        out.write("\n=== Failed Checks ===\n")
    for check in checks:
        if check["status"] == "FAILURE":
            out.write(f"\n  - {printable(check['name'])}: {printable(check['description'])}\n")
            if "errorMessage" in check:
                message = check["errorMessage"]
                cut = "…" if len(message) > MAX_SHOWN else ""
                out.write(f"    Error: {printable(message[:MAX_SHOWN])}{cut}\n")
            answered = server_answer(check)
            if answered is not None and answered.partition(": ")[2][:80] not in check.get("errorMessage", ""):
                out.write(f"    Server answered: {answered}\n")


def server_answer(check: ConformanceCheck) -> str | None:
    """What the server answered, as a check's details keep it, for a person: its HTTP status and the start of the
    answer (or of the body, when it gave no JSON-RPC answer), on one line, bounded and escaped (:func:`excerpt`)."""
    details = check.get("details", {})
    answer, body, status = details.get("answer"), details.get("body"), details.get("status")
    text = answer if isinstance(answer, str) and answer != "null" else body if isinstance(body, str) else None
    if text is None:
        return None
    return f"HTTP {status}: {excerpt(text)}" if isinstance(status, int) else excerpt(text)


def print_summary(results: Sequence[tuple[str, Sequence[ConformanceCheck]]], out: TextIO) -> int:
    """The closing summary (``printServerSummary``): one line a scenario, then the totals; the failures in all."""
    out.write("\n\n=== SUMMARY ===\n")
    total = Counter[str]()
    for scenario, checks in results:
        tally = Counter(check["status"] for check in checks)
        total += tally
        mark = "✓" if tally["FAILURE"] == 0 else "✗"
        out.write(f"{mark} {scenario}: {tally['SUCCESS']} passed, {tally['FAILURE']} failed\n")
    out.write(f"\nTotal: {total['SUCCESS']} passed, {total['FAILURE']} failed\n")
    return total["FAILURE"]


def write_checks(directory: Path, scenario: str, checks: Sequence[ConformanceCheck]) -> Path:
    """``checks.json`` of one scenario, as ``JSON.stringify(checks, null, 2)`` writes it; its folder.

    The server's text is kept as sent; what JSON would leave raw of it and a terminal would act on
    (DEL, C1 controls, bidirectional overrides, lone surrogates) is written as ``\\uXXXX``: the same JSON.
    """
    stamp = now().replace(":", "-").replace(".", "-")
    folder = directory / f"server-{scenario}-{stamp}"
    folder.mkdir(parents=True, exist_ok=True)
    text = json_printable(json.dumps(list(checks), indent=2, ensure_ascii=False))
    (folder / "checks.json").write_text(text, encoding="utf-8")
    return folder


@dataclass(frozen=True)
class Entry:
    """One line of a baseline list: a scenario, and the one check that may fail in it, if any."""

    scenario: str
    check: str | None = None

    def __str__(self) -> str:
        return self.scenario if self.check is None else f"{self.scenario}:{self.check}"


@dataclass
class BaselineResult:
    """The verdict: 0 when only expected failures occurred, 1 on a regression or a stale entry."""

    unexpected: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """The exit status the official runner gives this verdict."""
        return 1 if self.unexpected or self.stale else 0


def _entry(value: object, number: int) -> Entry:
    written = f"'server' entry {number}"
    if isinstance(value, str) and value:
        scenario, colon, check = value.partition(":")
        if colon and not (scenario and check):
            raise ValueError(f"{written} ({value!r}): both sides of the colon are required.")
        return Entry(scenario, check or None)
    pairs = list(value.items()) if isinstance(value, dict) else []
    if len(pairs) == 1 and isinstance(pairs[0][1], str) and pairs[0][1]:
        key, rest = pairs[0]
        why = f"Did you write '- {key}: {rest}'? Remove the space after the colon: '- {key}:{rest}'"
    elif isinstance(value, dict):
        why = "A per-check entry takes no space after the colon."
    else:
        why = "This one is empty." if value is None or value == "" else "Quote it: YAML read it as something else."
    raise ValueError(f"{written} is not '<scenario>' or '<scenario>:<check-id>'. {why}")


def load_expected_failures(path: Path) -> list[Entry]:
    """The ``server`` entries of an expected-failures file, checked as the official suite checks them."""
    if path.stat().st_size > MAX_BASELINE_BYTES:
        raise ValueError(f"{path}: over {MAX_BASELINE_BYTES} bytes")
    document = read_yaml(path.read_text(encoding="utf-8"), str(path))
    if document is None:
        return []
    if not isinstance(document, dict):
        raise ValueError(f"{path}: expected an object with 'server' and/or 'client' keys")
    listed = document.get("server")
    if listed is None:
        return []
    if not isinstance(listed, list):
        raise ValueError(f"{path}: 'server' must be an array of scenario names")
    entries = [_entry(value, number) for number, value in enumerate(listed, 1)]
    wholesale = {entry.scenario for entry in entries if entry.check is None}
    for entry in entries:
        if entry.check is not None and entry.scenario in wholesale:
            raise ValueError(
                f"'{entry.scenario}' expects the whole scenario to fail, so '{entry}' is redundant. "
                "Remove one or the other."
            )
    return entries


def _collapsed(checks: Sequence[ConformanceCheck]) -> dict[str, str]:
    """Each check id's verdict, the most severe of its occurrences (INFO left out)."""
    verdicts: dict[str, str] = {}
    for check in checks:
        if check["status"] == "INFO":
            continue
        seen = verdicts.get(check["id"])
        if seen is None or _SEVERITY.get(check["status"], 0) >= _SEVERITY.get(seen, 0):
            verdicts[check["id"]] = check["status"]
    return verdicts


def evaluate(results: Sequence[tuple[str, Sequence[ConformanceCheck]]], entries: Sequence[Entry]) -> BaselineResult:
    """The official ``evaluateBaseline``: whole-scenario entries, then per-check ones."""
    verdict = BaselineResult()
    wholesale = {entry.scenario for entry in entries if entry.check is None}
    for scenario, checks in results:
        failing = any(check["status"] in ("FAILURE", "WARNING") for check in checks)
        if scenario in wholesale:
            (verdict.expected if failing else verdict.stale).append(scenario)
            continue
        allowed = list(dict.fromkeys(e.check for e in entries if e.scenario == scenario and e.check is not None))
        if not allowed:
            if failing:
                verdict.unexpected.append(scenario)
            continue
        collapsed = _collapsed(checks)
        for check, status in collapsed.items():
            if status in ("FAILURE", "WARNING"):
                (verdict.expected if check in allowed else verdict.unexpected).append(f"{scenario}:{check}")
        verdict.stale.extend(f"{scenario}:{check}" for check in allowed if collapsed.get(check) == "SUCCESS")
    return verdict


def print_baseline(verdict: BaselineResult, out: TextIO, palette: Palette) -> None:
    """The official ``printBaselineResults``."""
    sections = (
        (verdict.expected, palette.yellow, "Expected failures (in baseline):", "~"),
        (verdict.stale, palette.red, "Stale baseline entries (now passing - remove from baseline):", "✓"),
        (verdict.unexpected, palette.red, "Unexpected failures (not in baseline):", "✗"),
    )
    for entries, colour, title, mark in sections:
        if entries:
            out.write(f"\n{colour}{title}{palette.reset}\n" + "".join(f"  {mark} {printable(e)}\n" for e in entries))
    if verdict.exit_code == 0:
        out.write(f"\n{palette.green}Baseline check passed: all failures are expected.{palette.reset}\n")
        return
    if verdict.stale:
        message = "Baseline is stale: update your expected-failures file to remove passing entries."
        out.write(f"\n{palette.red}{message}{palette.reset}\n")
    if verdict.unexpected:
        message = "Unexpected failures detected: these are not in your expected-failures baseline."
        out.write(f"\n{palette.red}{message}{palette.reset}\n")
