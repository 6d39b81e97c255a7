"""The benchmarks run (quick mode) and report: their tables, their verdicts, the page. What they measured is
never checked: a few requests on a shared machine say nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ON_THE_PAGE = ("asgi", "uvicorn", "sse", "scale_out")  # bench_gateway.py: test_gateway_benchmark.py
SAID = ("met: ", "**not met**: ", "not judged: ")
HEADLINES = ("Starlette's cookie `SessionMiddleware`", "PyJWT's `jwt.decode`", "within noise of the bare server")

# Each benchmark runs for real, if briefly, in a process of its own: with the suite on both cores, the module's
# fixture can take minutes, which pytest-timeout counts against its first test.
pytestmark = pytest.mark.timeout(900)


def run(script: str, *args: str, cwd: Path = ROOT) -> str:
    # A process of its own: bench_asgi.py sets OpenTelemetry's global TracerProvider, once per process.
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    command = [sys.executable, f"benchmarks/{script}", *args]
    done = subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each benchmark of the page once, in quick mode, its results kept as run_all.py keeps them."""
    directory = tmp_path_factory.mktemp("bench")
    for name in ON_THE_PAGE:
        run(f"bench_{name}.py", "--quick", "--json", str(directory / f"{name}.json"))
    return directory


@pytest.mark.parametrize("name", ON_THE_PAGE)
def test_a_benchmark_reports_its_tables_and_verdicts(kept: Path, name: str) -> None:
    result = json.loads((kept / f"{name}.json").read_text())
    assert result["benchmark"] == name and result["smoke"] is True
    assert result["sections"] and result["verdicts"]
    for part in result["sections"]:
        assert part["title"] and part["text"] and part["rows"]
        assert all(len(row) == len(part["header"]) for row in part["rows"]), part["title"]
    for verdict in result["verdicts"]:
        assert verdict["target"] and verdict["measured"] and verdict["verdict"].startswith(SAID), verdict


def test_run_all_puts_every_section_and_verdict_on_the_page(kept: Path, tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    run("run_all.py", "--from", str(kept), "--write", str(page))
    text = page.read_text()
    assert "**Quick run**" in text
    verdicts = text.split("## Verdict\n")[1].split("\n## ")[0]
    for name in ON_THE_PAGE:
        result = json.loads((kept / f"{name}.json").read_text())
        for part in result["sections"]:
            assert f"\n## {part['title']}\n" in text
            assert f"| {' | '.join(part['rows'][0])} |" in text
        for verdict in result["verdicts"]:
            assert f"| {verdict['target']} | {verdict['measured']} | {verdict['verdict']} <!-- {name} --> |" in verdicts
        assert f"| `bench_{name}.py` | " in text  # its duration and load, in the machine table
    assert all(headline in verdicts for headline in HEADLINES)
    assert "| not run | `bench_gateway.py`" in text  # a benchmark without results: the page says so


def test_run_all_only_replaces_one_benchmarks_parts_of_the_page(kept: Path, tmp_path: Path) -> None:
    """``--only NAME``: NAME's verdict rows, machine line and sections replaced, every other line as it was."""
    page, fresh = tmp_path / "performance.md", tmp_path / "fresh"
    run("run_all.py", "--from", str(kept), "--write", str(page))
    before = page.read_text()
    machine_lines = ("| `bench_sse.py` |", "| `bench_asgi.py` |")  # their own lines say when they ran
    for name in ("sse", "asgi"):  # the same results again (asgi: sections of several titles)
        run("run_all.py", "--only", name, "--from", str(kept), "--write", str(page))
        kept_lines = [line for line in page.read_text().split("\n") if not line.startswith(machine_lines)]
        assert kept_lines == [line for line in before.split("\n") if not line.startswith(machine_lines)]
    result = json.loads((kept / "sse.json").read_text())
    old = result["verdicts"][0]["measured"]
    result["verdicts"][0]["measured"] = "measured again"
    fresh.mkdir()
    (fresh / "sse.json").write_text(json.dumps(result))
    run("run_all.py", "--only", "sse", "--from", str(fresh), "--write", str(page))
    assert "| measured again |" in page.read_text() and f"| {old} |" not in page.read_text()


def test_run_all_quick_runs_every_benchmark(tmp_path: Path) -> None:
    """The chain itself, `run_all.py --quick`, with the benchmarks stood in by the shortest that reports."""
    shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks")
    for name in ("asgi", "uvicorn", "scale_out", "gateway", "stdio"):  # run above, test_gateway_benchmark, _stdio
        (tmp_path / "benchmarks" / f"bench_{name}.py").unlink()
    run("run_all.py", "--quick", "--write", "performance.md", cwd=tmp_path)
    assert "\n## A long SSE response\n" in (tmp_path / "performance.md").read_text()


def test_bench_stores_reports_every_store(tmp_path: Path) -> None:
    """Every store's row, for memory, sqlite and (redis-server installed) redis."""
    printed = run("bench_stores.py", "--smoke", "--json", str(tmp_path / "stores.json"))
    numbers = json.loads((tmp_path / "stores.json").read_text())
    assert set(numbers) == {"memory", "sqlite", "redis"} or not shutil.which("redis-server")
    for store, rows in numbers.items():
        assert "touch + incr (a session request)" in rows, store
        assert f"  {store}  " in printed


def test_bench_handle_vs_session_reports() -> None:
    assert "a session adds" in run("bench_handle_vs_session.py", "--smoke")


def test_bench_connect_reports_the_shim_beside_mcp_remote(tmp_path: Path) -> None:
    """bench_connect.py, quick: both bridges' rows, each with its memory at rest."""
    run("bench_connect.py", "--quick", "--json", str(tmp_path / "connect.json"))
    result = json.loads((tmp_path / "connect.json").read_text())
    [part] = result["sections"]
    bridges = ["mcp-sessions connect", "mcp-sessions connect, no conversation", "mcp-remote 0.15.1"]
    assert [row[0] for row in part["rows"]] == ["directly", *bridges] and sorted(result["rest"]) == sorted(bridges)
    assert all(len(calls) == 5 for calls in result["times"].values())
