"""``benchmarks/bench_gateway.py`` runs (a few rounds) and puts its section on a copy of the performance page."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUPS = [
    "upstream directly",
    "pass-through control",
    "bare httpx proxy",
    "fastmcp create_proxy",
    "gateway, no session",
    "gateway, with session",
]

pytestmark = pytest.mark.timeout(300)


def test_the_gateway_benchmark_runs_and_writes_its_section(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    shutil.copy(ROOT / "docs" / "performance.md", page)
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/bench_gateway.py",
            "--smoke",
            "--json",
            str(tmp_path / "g.json"),
            "--write",
            str(page),
        ],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    numbers = json.loads((tmp_path / "g.json").read_text())
    assert [row["name"] for row in numbers["rows"]] == SETUPS
    assert all(row["requests"] == numbers["rounds"] > 0 and row["p50_us"] > 0 for row in numbers["rows"])
    assert {"seconds", "load_before", "load_after"} <= set(numbers)  # what run_all.py's machine table reads
    text = page.read_text()
    assert text.count("\n## The gateway\n") == 1
    for setup in SETUPS:
        assert f"| {setup} | " in text
    assert "The gateway with a session adds ≤ 1.5x what a bare httpx proxy adds (p50): " in text


def test_a_run_without_the_gateway_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_all.py --from a directory kept before the gateway was measured: the page says it was not."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_gateway

    assert bench_gateway.gateway_verdict({"available": False})[2] == "not judged"
    assert bench_gateway.section({"available": False}).startswith("## The gateway\n\nNot measured in this run")
