"""The benchmark scripts run (smoke mode): CI proves they work and print their rows, never times them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ASGI_ROWS = {
    "bare MCPServer",
    "pass-through control",
    "middleware, no session",
    "bare, session body",
    "middleware, with session",
    "starlette cookie session",
    "trivial app, among MCPServer calls",
    "trivial + middleware, session, among MCPServer calls",
    "trivial app",
    "trivial pass-through",
    "trivial + middleware, no session",
    "trivial + middleware, session",
    "trivial + middleware, session new to this replica",
    "trivial + starlette cookie session",
    "bare MCPServer + SDK",
    "pass-through + SDK",
    "middleware, no session + SDK",
    "bare, session body + SDK",
    "middleware, session + SDK",
    "otel-asgi + SDK",
    "trivial app + SDK",
    "trivial + middleware, session + SDK",
    "trivial + otel-asgi + SDK",
}
UVICORN_ROWS = {
    "bare MCPServer",
    "pass-through control",
    "middleware, no session",
    "bare, session body",
    "middleware, with session",
    "trivial app",
    "trivial + middleware, no session",
    "trivial + middleware, session",
}
SSE_ROWS = {"bare app", "middleware, with session"}


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    # A process of its own: bench_asgi.py sets OpenTelemetry's global TracerProvider, once per process.
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def first_cells(text: str) -> list[str]:
    """The first column of every row of the plain-text tables (columns are two spaces apart)."""
    rows = []
    for block in text.strip().split("\n\n"):
        rows += [line.split("  ")[0].strip() for line in block.splitlines()[1:] if line.strip()]
    return rows


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Each benchmark once, in smoke mode, keeping its JSON for the report."""
    directory = tmp_path_factory.mktemp("bench")
    printed = {}
    for name in ("asgi", "uvicorn", "sse"):
        printed[name] = run(f"bench_{name}.py", "--smoke", "--json", str(directory / f"{name}.json")).stdout
    return directory, printed


def test_bench_asgi_smoke(results: tuple[Path, dict[str, str]]) -> None:
    directory, printed = results
    assert set(first_cells(printed["asgi"])) == ASGI_ROWS
    numbers = json.loads((directory / "asgi.json").read_text())
    assert {row["name"] for row in numbers["rows"]} == ASGI_ROWS
    assert all(row["base"] in ASGI_ROWS and row["requests"] == 20 for row in numbers["rows"])


def test_bench_uvicorn_smoke(results: tuple[Path, dict[str, str]]) -> None:
    directory, printed = results
    assert set(first_cells(printed["uvicorn"])) == UVICORN_ROWS
    numbers = json.loads((directory / "uvicorn.json").read_text())
    assert {row["name"]: row["requests"] for row in numbers["rows"]} == dict.fromkeys(UVICORN_ROWS, 16)


def test_bench_sse_smoke(results: tuple[Path, dict[str, str]]) -> None:
    directory, printed = results
    assert first_cells(printed["sse"]) == sorted(SSE_ROWS) * 2  # two stream sizes
    numbers = json.loads((directory / "sse.json").read_text())
    assert all(row["held_back"] == 0 for row in numbers["rows"])  # a property, not a time


def test_run_all_renders_the_page(results: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    directory, _ = results
    page = tmp_path / "performance.md"
    run("run_all.py", "--from", str(directory), "--write", str(page))
    text = page.read_text()
    assert "Smoke run" in text
    for heading in ("## Verdict", "## The machine", "## Through uvicorn", "## A long SSE response", "## How to"):
        assert heading in text
    for row in ASGI_ROWS | UVICORN_ROWS | SSE_ROWS:
        assert f"| {row} |" in text
    verdicts = [line for line in text.split("## Verdict")[1].split("##")[0].splitlines() if line.startswith("| ")]
    assert len(verdicts) == 2 + 4  # header, alignment, one row per target


def test_bench_stores_smoke(tmp_path: Path) -> None:
    """Every store's row, for memory, sqlite and (redis-server installed) redis."""
    printed = run("bench_stores.py", "--smoke", "--json", str(tmp_path / "stores.json")).stdout
    numbers = json.loads((tmp_path / "stores.json").read_text())
    assert set(numbers) == {"memory", "sqlite", "redis"} or not shutil.which("redis-server")
    for store, rows in numbers.items():
        assert "touch + incr (a session request)" in rows, store
        assert all(value > 0 for value in rows.values())
        assert f"  {store}  " in printed
