"""Running ``mcp-sessions conformance`` in process, and reading what it wrote, as a user's CI would."""

from __future__ import annotations

import io
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_sessions._cli import main

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
_STAMPED = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")  # the folder's timestamp, after the scenario's name


@dataclass(frozen=True)
class PackRun:
    """One run: its exit status, what it printed, and each scenario's checks.json."""

    code: int
    out: str
    checks: dict[str, list[dict[str, Any]]]

    def failing(self) -> set[str]:
        """The ids of the checks that failed or warned (what a baseline must list), every scenario together."""
        return {c["id"] for checks in self.checks.values() for c in checks if c["status"] in ("FAILURE", "WARNING")}

    def statuses(self) -> dict[str, set[str]]:
        """Each check id's statuses, every scenario together."""
        found: dict[str, set[str]] = {}
        for checks in self.checks.values():
            for check in checks:
                found.setdefault(check["id"], set()).add(check["status"])
        return found


def run_pack(url: str, *args: str) -> PackRun:
    """``mcp-sessions conformance URL ARGS --json DIR``, in this process."""
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as folder:
        code = main(["conformance", url, *args, "--json", folder], stdout=out, stderr=err, environ={})
        checks = {
            _STAMPED.sub("", path.parent.name.removeprefix("server-")): json.loads(path.read_text(encoding="utf-8"))
            for path in Path(folder).glob("*/checks.json")
        }
    assert err.getvalue() == "", err.getvalue()
    return PackRun(code, out.getvalue(), checks)
