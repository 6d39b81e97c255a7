"""What a run prints and writes, line for line as the official suite's ``server`` command does.

Per scenario its checks (``timestamp [id] STATUS description``, columns
aligned), then ``Passed: P/D, F failed, W warnings`` and the failed checks;
at the end a summary and ``Total: N passed, N failed``. ``checks.json`` goes
to ``DIR/server-<scenario>-<timestamp>/``, as ``-o DIR`` writes it there.
Colours only on a terminal, and never with ``NO_COLOR`` set.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ._model import ConformanceCheck, now

__all__ = ["Palette", "print_checks", "print_summary", "write_checks"]


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


def print_checks(checks: Sequence[ConformanceCheck], out: TextIO, palette: Palette) -> tuple[int, int]:
    """One scenario's checks and its ``Passed:`` line (``printServerResults``); its failures and warnings."""
    width_id = max((len(check["id"]) for check in checks), default=0)
    width_status = max((len(check["status"]) for check in checks), default=0)
    lines = [
        f"{palette.gray}{check['timestamp']}{palette.reset} [{check['id'].ljust(width_id)}] "
        f"{palette.status(check['status'])}{check['status'].ljust(width_status)}{palette.reset} {check['description']}"
        for check in checks
    ]
    out.write("Checks:\n" + "\n".join(lines) + "\n")
    counts = {status: sum(check["status"] == status for check in checks) for status in ("SUCCESS", "FAILURE")}
    warnings = sum(check["status"] == "WARNING" for check in checks)
    denominator = counts["SUCCESS"] + counts["FAILURE"]
    out.write("\nTest Results:\n")
    out.write(f"Passed: {counts['SUCCESS']}/{denominator}, {counts['FAILURE']} failed, {warnings} warnings\n")
    failed = [check for check in checks if check["status"] == "FAILURE"]
    if failed:
        out.write("\n=== Failed Checks ===\n")
        for check in failed:
            out.write(f"\n  - {check['name']}: {check['description']}\n")
            if "errorMessage" in check:
                out.write(f"    Error: {check['errorMessage']}\n")
    return counts["FAILURE"], warnings


def print_summary(results: Sequence[tuple[str, Sequence[ConformanceCheck]]], out: TextIO) -> tuple[int, int]:
    """The closing summary (``printServerSummary``): one line a scenario, then the totals."""
    out.write("\n\n=== SUMMARY ===\n")
    total_passed = total_failed = 0
    for scenario, checks in results:
        passed = sum(check["status"] == "SUCCESS" for check in checks)
        failed = sum(check["status"] == "FAILURE" for check in checks)
        total_passed, total_failed = total_passed + passed, total_failed + failed
        out.write(f"{'✓' if failed == 0 else '✗'} {scenario}: {passed} passed, {failed} failed\n")
    out.write(f"\nTotal: {total_passed} passed, {total_failed} failed\n")
    return total_passed, total_failed


def write_checks(directory: Path, scenario: str, checks: Sequence[ConformanceCheck]) -> Path:
    """``checks.json`` of one scenario, as ``JSON.stringify(checks, null, 2)`` writes it; its folder."""
    stamp = now().replace(":", "-").replace(".", "-")
    folder = directory / f"server-{scenario}-{stamp}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "checks.json").write_text(json.dumps(list(checks), indent=2, ensure_ascii=False), encoding="utf-8")
    return folder
