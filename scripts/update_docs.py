"""Regenerate the generated parts of docs/: the conformance checks and results, and the interop matrix.

    python scripts/update_docs.py

Runs the tests that render those parts (real servers, a real run: a minute or two) with
``MCP_SESSIONS_DOCS_OUT`` set, and splices what each rendered into its page. The tests themselves only check
that the pages are current; they never write them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = [
    "conformance/tests/test_conformance_docs.py",
    "conformance/tests/test_conformance_quickstart.py",
    "tests/e2e/test_interop.py",
]


def splice(text: str, begin: str, end: str, rendered: str) -> str:
    """``text`` with what lies between ``begin`` (or the start, if empty) and ``end`` replaced by ``rendered``."""
    head, marker, rest = text.partition(begin) if begin else ("", "", text)
    if begin and not marker:
        raise SystemExit(f"no {begin!r} in the page")
    _, found, tail = rest.partition(end)
    if not found:
        raise SystemExit(f"no {end!r} in the page")
    return head + marker + rendered + end + tail


def main() -> int:
    with tempfile.TemporaryDirectory() as out:
        environ = {**os.environ, "MCP_SESSIONS_DOCS_OUT": out}
        command = [sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider", *TESTS]
        done = subprocess.run(command, cwd=ROOT, env=environ, check=False)  # noqa: S603  # our own pytest
        records = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(Path(out).glob("*.json"))]
    if len(records) != len(TESTS):
        print(f"the tests rendered {len(records)} of {len(TESTS)} parts (pytest exit {done.returncode})")
        return 1
    for record in records:
        page = ROOT / record["doc"]
        text = page.read_text(encoding="utf-8")
        updated = splice(text, record["begin"], record["end"], record["rendered"])
        if updated != text:
            page.write_text(updated, encoding="utf-8")
            print(f"updated {record['doc']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
