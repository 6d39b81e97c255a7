"""The benchmark scripts run (smoke mode): CI proves they work, never times them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_asgi_smoke() -> None:
    # A process of its own: the benchmark sets OpenTelemetry's global TracerProvider, once per process.
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "benchmarks/bench_asgi.py", "--smoke"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = {line.split("  ")[0].strip() for line in done.stdout.splitlines()[1:] if line.strip()}
    assert rows == {
        "bare MCPServer",
        "pass-through control",
        "middleware, no session",
        "bare, session body",
        "middleware, with session",
        "bare MCPServer + SDK",
        "pass-through + SDK",
        "middleware, no session + SDK",
        "bare, session body + SDK",
        "middleware, session + SDK",
        "otel-asgi + SDK",
    }
