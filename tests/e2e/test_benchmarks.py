"""The benchmarks run (quick mode) and report: their tables, their verdicts, the page. What they measured is
never checked: a few requests on a shared machine say nothing."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from _redis import missing
from e2e._gateway import installed, node

ROOT = Path(__file__).resolve().parents[2]
ON_THE_PAGE = ("asgi", "uvicorn", "sse", "scale_out")  # bench_gateway.py: test_gateway_benchmark.py
SAID = ("met: ", "**not met**: ", "not judged: ")
HEADLINES = ("Starlette's cookie `SessionMiddleware`", "PyJWT's `jwt.decode`", "within noise of the bare server")

# Each benchmark runs for real, if briefly, in a process of its own: with the suite on both cores, the module's
# fixture can take minutes, which pytest-timeout counts against its first test.
pytestmark = pytest.mark.timeout(900)


def run(script: str, *args: str, cwd: Path = ROOT) -> str:
    """The benchmark's output, once it has ended well. It runs in a process group of its own, ended when it
    returns, fails or is stopped (by pytest-timeout too): no server it started outlives the test."""
    # A process of its own: bench_asgi.py sets OpenTelemetry's global TracerProvider, once per process.
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    command = [sys.executable, f"benchmarks/{script}", *args]
    pipe = subprocess.PIPE
    process = subprocess.Popen(
        command, cwd=cwd, env=environ, stdout=pipe, stderr=pipe, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=600)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == 0, stderr
    return stdout


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
    assert result["benchmark"] == name
    assert result["smoke"] is True
    assert result["sections"]
    assert result["verdicts"]
    for part in result["sections"]:
        assert part["title"]
        assert part["text"]
        assert part["rows"]
        assert all(len(row) == len(part["header"]) for row in part["rows"]), part["title"]
    for verdict in result["verdicts"]:
        assert verdict["target"], verdict
        assert verdict["measured"], verdict
        assert verdict["verdict"].startswith(SAID), verdict


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
    assert "| measured again |" in page.read_text()
    assert f"| {old} |" not in page.read_text()
    page.write_text(page.read_text().replace(" <!-- sse --> |", " |"))  # a page from before the marks
    run("run_all.py", "--only", "sse", "--from", str(kept), "--write", str(page))
    rows = [line for line in page.read_text().split("\n") if line.startswith(f"| {result['verdicts'][0]['target']} |")]
    assert len(rows) == 1
    assert f"| {old} |" in rows[0]  # its row replaced, not a second one added


def test_run_all_only_keeps_the_sections_whose_titles_begin_with_its_own() -> None:
    """``--only stdio``: bench_stdio's first section is "stdio servers", and bench_egress's and bench_masks's
    titles begin with it ("stdio servers: what egress costs"); they stay, where ``--only stdio`` took them."""
    spec = importlib.util.spec_from_file_location("run_all", Path("benchmarks/run_all.py"))
    assert spec is not None
    assert spec.loader is not None
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    page = "# P\n\n## Verdict\n\n| a | b | c |\n\n## The machine\n\nm\n\n## stdio servers\n\nold\n\n"
    page += "## stdio servers: what egress costs\n\negress's\n\n## Reading the numbers\n\nr\n"
    section = {"title": "stdio servers", "text": "new", "header": ["x"], "rows": [["1"]]}
    result = {"verdicts": [], "sections": [section], "load_before": [0, 0, 0], "load_after": [0, 0, 0]}
    result |= {"machine": {"code": "c", "date": "d"}, "seconds": 1}
    spliced = run_all.splice(page, "stdio", result)
    assert "\n## stdio servers\n\nnew\n" in spliced
    assert "old" not in spliced
    assert "\n## stdio servers: what egress costs\n\negress's\n" in spliced


def test_run_all_quick_runs_every_benchmark(tmp_path: Path) -> None:
    """The chain itself, `run_all.py --quick`, with the benchmarks stood in by the shortest that reports."""
    shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks")
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # bench_masks's stand-in authority is the tests'
    for name in ("asgi", "uvicorn", "scale_out", "gateway", "stdio"):  # run above, test_gateway_benchmark, _stdio
        (tmp_path / "benchmarks" / f"bench_{name}.py").unlink()
    (tmp_path / "benchmarks" / "restart_latency.py").unlink()  # run below; it takes bench_stdio.py's conversations
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


def test_the_benchmark_against_supergateway_runs_and_reports(tmp_path: Path) -> None:
    """``benchmarks/bench_stdio.py --quick``: it runs both gateways side by side, started by their commands, and
    reports each one's numbers, its start to a first answer too (what they are is the benchmark's to say, not the
    test's). Moved here from test_gateway_stdio.py (issue 68):
    a benchmark's smoke run, under this module's timeout, not the suite's 120 s."""
    installed(ROOT / ".cache/supergateway/node_modules/supergateway/dist/index.js", "supergateway")
    node()
    out = tmp_path / "bench.json"
    printed = run("bench_stdio.py", "--quick", "--json", str(out))
    report = json.loads(out.read_text())
    readied = report["ready"]  # as root: each gateway's exec to its readiness, ours with --process-uids
    assert {name: len(took) for name, took in readied.items()} == (
        {
            "mcp-sessions gateway --stdio --process-uids (egress), /readyz": 1,
            "supergateway 4.0.0 --stateful, --healthEndpoint": 1,
        }
        if os.geteuid() == 0
        else {}
    )
    assert len(report["sections"]) == 4 + bool(readied)
    # the last: a new conversation's first answer beside supergateway's
    assert len(report["verdicts"]) == 8 + bool(readied)
    ways = report["ways"]
    assert set(ways) == {
        "stdio directly",
        "mcp-sessions gateway --stdio, 2025 client",
        "supergateway 4.0.0 --stateful, 2025 client",
        "mcp-sessions gateway --stdio, 2026 request, --sessionless per-request",
        "mcp-sessions gateway --stdio --sessionless shared, 2026 request",
        "supergateway 4.0.0, 2026 request (a process per request)",
        "sessions/create (2026)",
        "initialize (2025)",
        "the first tools/call after a 2025 initialize",
        "a new 2025 conversation's first answer (initialize, then its first tools/call)",
        "initialize (2025), supergateway 4.0.0 --stateful",
        "a new 2025 conversation's first answer (initialize, then its first tools/call), supergateway 4.0.0 --stateful",
    }
    for name in ("mcp-sessions gateway --stdio, 2025 client", "supergateway 4.0.0 --stateful, 2025 client"):
        assert {"p50_ms", "p99_ms", "added_p50_ms", "added_p99_ms", "rss_kib_per_conversation"} <= set(ways[name])
    assert len(report["ceiling"]) == 3
    assert report["per_request_paced_per_s"] > 0
    for name in ("mcp-sessions gateway --stdio, 2025 client", "supergateway 4.0.0 --stateful, 2025 client"):
        assert len(report["starts"][f"{name} ms"]) == len(report["starts"][f"{name} cpu"]) == 1  # spawned, answered
    assert "mcp-sessions gateway --stdio" in printed


def test_bench_egress_reports_egress_beside_the_host_network(tmp_path: Path) -> None:
    """bench_egress.py, quick, as root: a call, a start, a conversation's memory at rest and a 10 MB download through
    each network, counted."""
    if os.geteuid() != 0:
        missing("bench_egress.py runs as root: a uid per process, namespaces and nftables rules")
    out = tmp_path / "egress.json"
    run("bench_egress.py", "--quick", "--json", str(out))
    seen = json.loads(out.read_text())["seen"]
    assert {measure: {way: len(times) for way, times in ways.items()} for measure, ways in seen.items()} == {
        "call": {"host": 20, "egress": 20},
        "start": {"host": 3, "egress": 3},
        "memory": {"host": 3, "egress": 3},
        "download": {"host": 2, "egress": 2},
    }


def test_bench_masks_reports_the_proxy_beside_a_direct_connection(tmp_path: Path) -> None:
    """bench_masks.py, quick, as root: small requests and 10 MB downloads through the proxy and directly, counted."""
    if os.geteuid() != 0:
        missing("bench_masks.py runs as root: a uid per process, namespaces and nftables rules")
    out = tmp_path / "masks.json"
    run("bench_masks.py", "--quick", "--json", str(out))
    seen = json.loads(out.read_text())["seen"]
    assert {path: {way: len(times) for way, times in ways.items()} for path, ways in seen.items()} == {
        "/small": {"proxy": 10, "direct": 10},
        "/big": {"proxy": 2, "direct": 2},
    }


def test_bench_connect_reports_the_shim_beside_mcp_remote(tmp_path: Path) -> None:
    """bench_connect.py, quick: both bridges' rows, each with its memory at rest, and each bridge's start."""
    run("bench_connect.py", "--quick", "--json", str(tmp_path / "connect.json"))
    result = json.loads((tmp_path / "connect.json").read_text())
    part, start = result["sections"]
    bridges = ["mcp-sessions connect", "mcp-sessions connect, no conversation", "mcp-remote 0.15.1"]
    assert [row[0] for row in part["rows"]] == ["directly", *bridges]
    assert sorted(result["rest"]) == sorted(bridges)
    assert all(len(calls) == 5 for calls in result["times"].values())
    assert [row[0] for row in start["rows"]] == bridges
    assert all(len(cpu) == 2 for cpu in result["starts"].values())


def test_restart_latency_reports_a_restarts_latency_beside_the_steady_states(tmp_path: Path) -> None:
    """restart_latency.py, quick: a handover and a SIGKILL and start under socket activation, each call of the
    conversations calling across them in the steady set or a restart's, timed, its error said; and its verdict."""
    run("restart_latency.py", "--quick", "--json", str(tmp_path / "restart.json"))
    result = json.loads((tmp_path / "restart.json").read_text())
    [part] = result["sections"]
    assert part["title"] == "The gateway: what a restart adds"
    assert {row[0] for row in part["rows"]} >= {"steady", "during a handover", "after a SIGKILL, to ready"}
    assert set(result["sets"]) == {"steady", "during a handover", "in flight at a SIGKILL", "after a SIGKILL, to ready"}
    [judged] = result["verdicts"]
    assert judged["target"].startswith("A lone gateway's restart")
