"""The benchmark scripts run (smoke mode): CI proves they work, never times them."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_bench_asgi_smoke(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["bench_asgi.py", "--smoke"])
    runpy.run_path(str(BENCHMARKS / "bench_asgi.py"), run_name="__main__")
    out = capsys.readouterr().out
    rows = {line.split("  ")[0].strip() for line in out.splitlines()[1:] if line.strip()}
    assert rows == {
        "bare MCPServer",
        "pass-through control",
        "middleware, no session",
        "bare, session body",
        "middleware, with session",
    }
