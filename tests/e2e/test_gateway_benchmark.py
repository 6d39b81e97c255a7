"""``benchmarks/bench_gateway.py`` runs (a few rounds), the gateway's command among its setups and started once more
for its time to a first answer, and its sections and verdicts reach the page."""

from __future__ import annotations

import json
import os
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
    "gateway, session and token",
    "mcp-sessions gateway command, no session",
    "mcp-sessions gateway command, with session",
]

pytestmark = pytest.mark.timeout(600)


def test_the_gateway_benchmark_reports_its_tables_and_verdicts(tmp_path: Path) -> None:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    for command in (
        ["benchmarks/bench_gateway.py", "--quick", "--json", str(tmp_path / "gateway.json")],
        ["benchmarks/run_all.py", "--from", str(tmp_path), "--write", str(tmp_path / "performance.md")],
    ):
        done = subprocess.run(
            [sys.executable, *command], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=500, check=False
        )
        assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "gateway.json").read_text())
    part, started = result["sections"]
    assert [row[0] for row in part["rows"]] == SETUPS
    assert [row[:2] for row in started["rows"]] == [["mcp-sessions gateway command", "1"]]
    assert len(result["starts"]) == 1
    text = (tmp_path / "performance.md").read_text()
    assert "\n## The gateway\n" in text
    assert "\n## The gateway: from its start to its first answer\n" in text
    for verdict in result["verdicts"]:
        assert f"| {verdict['target']} | {verdict['measured']} | {verdict['verdict']} <!-- gateway --> |" in text
    app, command, _ = (verdict["target"] for verdict in result["verdicts"])
    assert app.startswith("The gateway with a session adds ≤ 1.5x what a bare httpx proxy adds")
    assert command.startswith("The gateway command (`mcp-sessions gateway`) with a session adds ≤ 1.5x")
