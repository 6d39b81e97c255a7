"""The benchmark scripts run (quick mode): CI proves they work and print their rows, never times them."""

from __future__ import annotations

import json
import os
import re
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
    "session floor",
    "checked floor",
    "middleware, with session",
    "starlette cookie session",
    "trivial app, among MCPServer calls",
    "trivial + middleware, session, among MCPServer calls",
    "trivial app",
    "trivial pass-through",
    "trivial + session floor",
    "trivial + checked floor",
    "trivial + middleware, no session",
    "trivial + middleware, session",
    "trivial + middleware, session, new request objects",
    "trivial + middleware, session new to this replica",
    "trivial + starlette cookie session",
    "trivial app, N-curve base",
    "session path, N=100",
    "session path, N=1000",
    "bare MCPServer + SDK",
    "pass-through + SDK",
    "middleware, no session + SDK",
    "bare, session body + SDK",
    "middleware, session + SDK",
    "otel-asgi + SDK",
    "SDK floor",
    "trivial app + SDK",
    "trivial + middleware, session + SDK",
    "trivial + otel-asgi + SDK",
    "trivial + SDK floor",
}
UVICORN_ROWS = {
    "bare MCPServer",
    "pass-through control",
    "middleware, no session",
    "bare, session body",
    "middleware, with session",
    "session floor",
    "checked floor",
    "trivial app",
    "trivial + middleware, no session",
    "trivial + middleware, session",
    "trivial + session floor",
    "trivial + checked floor",
}
SSE_ROWS = {"bare app", "middleware, with session", "session floor"}
TOKEN_ROWS = ["cached", "uncached, direct HS256", "uncached, PyJWT"]
QUICK_SESSION_COUNTS = [100, 1000]
VERSIONS_ROWS = {
    "bare, no session",
    "pass-through, no session",
    "base, no session",
    "base, session",
    "this, no session",
    "this, session",
    "bare, session body",
    "floor, session",
}
LANE = "a94083e"  # the last commit with the express lane, which run_all.py compares with
NOT_RUN = 3  # bench_versions.py's exit status when its base revision is not in the repository
# A shallow clone may not hold it: then the comparison cannot run, and the page must say so.
LANE_PRESENT = (
    subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{LANE}^{{commit}}"], capture_output=True).returncode
    == 0
)
VERSIONS = {"versions": (), "versions_trivial": ("--trivial",)}  # as run_all.py runs them

# Each benchmark runs for real, if briefly, in a process of its own; with the suite on both cores a module's
# fixture (several of them in a row) can take minutes, which pytest-timeout counts against its first test.
pytestmark = pytest.mark.timeout(600)


def run(script: str, *args: str, status: int = 0) -> subprocess.CompletedProcess[str]:
    # A process of its own: bench_asgi.py sets OpenTelemetry's global TracerProvider, once per process.
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == status, done.stderr
    return done


def first_cells(text: str) -> list[str]:
    """The first column of every row of the plain-text tables (columns are two spaces apart)."""
    rows = []
    for block in text.strip().split("\n\n"):
        rows += [line.split("  ")[0].strip() for line in block.splitlines()[1:] if line.strip()]
    return rows


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Each benchmark once, in quick mode, keeping its JSON for the report."""
    directory = tmp_path_factory.mktemp("bench")
    printed = {}
    for name in ("asgi", "uvicorn", "sse", "scale_out"):
        printed[name] = run(f"bench_{name}.py", "--quick", "--json", str(directory / f"{name}.json")).stdout
    for name, extra in VERSIONS.items():
        out = str(directory / f"{name}.json")
        done = run(
            "bench_versions.py", "--base", LANE, *extra, "--quick", "--json", out, status=0 if LANE_PRESENT else NOT_RUN
        )
        printed[name] = done.stdout
    return directory, printed


def test_bench_asgi_smoke(results: tuple[Path, dict[str, str]]) -> None:
    directory, printed = results
    assert set(first_cells(printed["asgi"])) == ASGI_ROWS | set(TOKEN_ROWS)
    numbers = json.loads((directory / "asgi.json").read_text())
    assert {row["name"] for row in numbers["rows"]} == ASGI_ROWS
    assert all(row["base"] in ASGI_ROWS and row["requests"] == 20 for row in numbers["rows"])
    assert numbers["session_counts"] == QUICK_SESSION_COUNTS
    # Measured in two processes, pooled: every row keeps each process's own added cost and multiple.
    assert numbers["processes"] == 2
    assert all(len(row["process_added_us"]) == len(row["process_checked_multiples"]) == 2 for row in numbers["rows"])
    checked = next(row for row in numbers["rows"] if row["name"] == "checked floor")
    # The floor against itself: exactly 1.0, or None where a process measured no added cost for it.
    assert all(multiple in (None, 1.0) for multiple in checked["process_checked_multiples"])


def test_bench_asgi_compares_with_the_floor_in_each_table(results: tuple[Path, dict[str, str]]) -> None:
    directory, printed = results
    rows = {row["name"]: row for row in json.loads((directory / "asgi.json").read_text())["rows"]}
    for floor, base in (("session floor", "bare, session body"), ("trivial + session floor", "trivial app")):
        assert rows[floor]["base"] == base
        assert rows[floor]["floor_multiple"] in (None, 1.0)  # None only if the floor measured no added cost
    for floor, base in (("checked floor", "bare, session body"), ("trivial + checked floor", "trivial app")):
        assert rows[floor]["base"] == base
        assert rows[floor]["checked_multiple"] in (None, 1.0)
    # Rows of a table without a floor, and base rows, have no multiple.
    for key in ("floor_multiple", "checked_multiple"):
        assert rows["bare MCPServer"][key] is None
        assert rows["session path, N=100"][key] is None
    # With the SDK, rows read against the SDK floor; no checked floor there.
    assert all(row["checked_multiple"] is None for row in rows.values() if row["phase"] == 2)
    assert "x floor  x checked" in printed["asgi"]  # both columns, side by side
    assert all(
        row["base"] == "trivial app, N-curve base" for name, row in rows.items() if name.startswith("session path")
    )


def test_bench_asgi_measures_the_token_checks(results: tuple[Path, dict[str, str]]) -> None:
    directory, _ = results
    tokens = json.loads((directory / "asgi.json").read_text())["tokens"]
    assert [row["name"] for row in tokens["rows"]] == TOKEN_ROWS
    assert all(row["checks"] == 20 and row["median_us"] > 0 for row in tokens["rows"])
    assert tokens["cache_capacity"] == 100_000
    assert 200 < tokens["cache_entry_bytes"] < 5000  # a property of the objects, not a time


def test_bench_uvicorn_smoke(results: tuple[Path, dict[str, str]]) -> None:
    directory, printed = results
    assert set(first_cells(printed["uvicorn"])) == UVICORN_ROWS
    numbers = json.loads((directory / "uvicorn.json").read_text())
    # The trivial app's servers run three times as many requests, in slices three times as long.
    weight = numbers["trivial_weight"]
    assert weight == 3
    assert {row["name"]: row["requests"] for row in numbers["rows"]} == {
        name: 16 * weight if name.startswith("trivial") else 16 for name in UVICORN_ROWS
    }
    rows = {row["name"]: row for row in numbers["rows"]}
    for key in ("floor_multiple", "checked_multiple"):
        assert all(key in row for row in rows.values())  # each read against its app's floors
        assert rows["bare MCPServer"][key] is None  # a base has no added cost to compare
        assert all((row[key] is None) <= (row[f"{key}_ci"] is None) for row in rows.values())  # none without a multiple
    assert rows["checked floor"]["base"] == "bare, session body"
    assert rows["trivial + checked floor"]["base"] == "trivial app"
    assert "x floor  x checked" in printed["uvicorn"]


def test_bench_uvicorn_pairs_the_slices_by_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """A load every server met in the same round cancels; independent spreads only for unequal slice counts."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_uvicorn

    drift = [1.0, 5.0, 2.0, 8.0, 3.0]  # each round's load, the same on both servers
    server, base = [x + 0.5 for x in drift], drift
    assert bench_uvicorn.mean_half_width(server, base) == 0.0  # a constant difference, known exactly
    assert bench_uvicorn.mean_half_width(server, base[:-1]) > 1.0  # a deadline left them unequal: unpaired
    assert bench_uvicorn.mean_half_width([1.0], base) == 0.0


def test_bench_uvicorn_gives_a_multiple_its_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """A multiple of a floor is paired by round too: a load every server met alike moves it not at all."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_uvicorn

    drift = [1.0, 5.0, 2.0, 8.0, 3.0]
    floor = [x + 2.0 for x in drift]
    interval = bench_uvicorn.ratio_half_width
    assert interval([x + 3.0 for x in drift], drift, floor, drift) == 0.0  # 1.5x in every round
    noisy = [x + 3.0 + e for x, e in zip(drift, (0.4, -0.4, 0.2, -0.2, 0.0), strict=True)]
    half = interval(noisy, drift, floor, drift)
    assert half is not None and abs(half - 0.1386) < 1e-3  # 1.96 * stdev(e) / (sqrt(5) * 2.0)
    # A floor read against a base of its own (the MCPServer's session-body base): paired all the same.
    shifted = [x + 10.0 for x in drift]
    assert interval(noisy, drift, [x + 2.0 for x in shifted], shifted) == half
    assert interval(noisy, drift, floor, drift[:-1]) is None  # unequal slices: not paired
    assert interval(noisy, drift, drift, drift) is None  # a floor that adds nothing


def test_bench_sse_smoke(results: tuple[Path, dict[str, str]]) -> None:
    directory, printed = results
    assert first_cells(printed["sse"]) == sorted(SSE_ROWS) * 2  # two stream sizes
    numbers = json.loads((directory / "sse.json").read_text())
    assert all(row["held_back"] == 0 for row in numbers["rows"])  # a property, not a time


def test_bench_versions_against_the_lane(results: tuple[Path, dict[str, str]]) -> None:
    directory, printed = results
    for name, app in (("versions", "MCPServer"), ("versions_trivial", "trivial app")):
        numbers = json.loads((directory / f"{name}.json").read_text())
        assert (numbers["benchmark"], numbers["base"], numbers["app"]) == ("versions", LANE, app)
        assert numbers["requests"] == 20 and numbers["smoke"] and not numbers["sdk"]
        assert len(numbers["load_before"]) == len(numbers["load_after"]) == 3
        if not LANE_PRESENT:
            assert not numbers["available"] and "not in this repository" in numbers["reason"]
            continue
        assert numbers["available"] and numbers["base_commit"].startswith(LANE)
        assert (
            {row["name"] for row in numbers["rows"]}
            == VERSIONS_ROWS
            == set(first_cells(printed[name].split("\n\n")[0]))
        )
        assert set(numbers["added_us"]) == set(numbers["ratios"]) == {"session", "no session"}
        assert set(numbers["floor"]["multiples"]) == {"base", "this"} and numbers["otel_asgi"] is None
        assert f"{LANE} added" in printed[name] and "the floor" in printed[name]
        # In two processes of 10 requests each, pooled: each process keeps its own ratio.
        assert numbers["processes"] == 2 and len(numbers["process_ratios"]) == 2


def test_bench_versions_says_when_the_revision_is_missing(results: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """A revision not in the repository (as in a shallow clone): said plainly, and the page says so too."""
    missing = "0" * 40
    for name, extra in VERSIONS.items():
        done = run(
            "bench_versions.py",
            "--base",
            missing,
            *extra,
            "--quick",
            "--json",
            str(tmp_path / f"{name}.json"),
            status=NOT_RUN,
        )
        assert f"cannot compare with {missing}: revision {missing} is not in this repository" in done.stderr
        assert "Traceback" not in done.stderr
        numbers = json.loads((tmp_path / f"{name}.json").read_text())
        assert not numbers["available"] and "rows" not in numbers
    directory, _ = results
    for name in ("asgi", "uvicorn", "sse", "scale_out"):
        shutil.copy(directory / f"{name}.json", tmp_path)
    page = tmp_path / "performance.md"
    run("run_all.py", "--from", str(tmp_path), "--write", str(page))
    text = page.read_text()
    (verdict,) = [
        line
        for line in text.splitlines()
        if line.startswith("| A session-bearing `tools/call` adds ≤ 1.2x what the express lane")
    ]
    assert verdict.endswith("| not judged: the comparison could not run |")
    assert "> **Not measured** (the MCPServer and the trivial app): the comparison could not run" in text
    # Issue 37's target: the cookie half is judged from bench_asgi.py alone; the 505fdc3 half says it did not run.
    (asked,) = [
        line for line in text.splitlines() if line.startswith("| A session-bearing `tools/call` on the `MCPServer`")
    ]
    assert "the cookie session" in asked and "against 505fdc3: the comparison could not run" in asked
    assert asked.rstrip(" |").endswith("505fdc3: not judged") and "| cookie: " in asked


def test_bench_versions_shares_of_otel_asgi(tmp_path: Path) -> None:
    printed = run("bench_versions.py", "--base", "HEAD", "--sdk", "--smoke", "--json", str(tmp_path / "v.json")).stdout
    numbers = json.loads((tmp_path / "v.json").read_text())
    assert numbers["sdk"] and numbers["floor"] is None
    assert set(numbers["otel_asgi"]["shares"]) == {"base", "this"} and numbers["otel_asgi"]["added_us"] > 0
    assert "otel-asgi, no session" in {row["name"] for row in numbers["rows"]}
    assert "this, session:" in printed and "what otel-asgi adds" in printed


SCALE_OUT_SETUPS = ("1 replica, memory store", "3 replicas, one Redis", "3 replicas, 3-node Redis Cluster")


def test_bench_scale_out_smoke(results: tuple[Path, dict[str, str]]) -> None:
    """Every setup ran its conversations through real replicas: no increment lost, no error, Redis memory read."""
    directory, printed = results
    numbers = json.loads((directory / "scale_out.json").read_text())
    rows = {row["setup"]: row for row in numbers["rows"]}
    assert tuple(rows) == SCALE_OUT_SETUPS
    for setup, row in rows.items():
        assert row["conversations"] == numbers["args"]["conversations"], setup
        assert row["requests"] == row["conversations"] * row["requests_per_conversation"], setup
        assert (row["lost_increments"], row["errors"]) == (0, {}), setup
        assert 0 < row["p50_ms"] <= row["p99_ms"], setup
        assert ("live_bytes" in row) == (setup != SCALE_OUT_SETUPS[0]), setup
        assert setup in printed["scale_out"]


def test_run_all_renders_the_page(results: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    directory, _ = results
    for kept in directory.glob("*.json"):
        shutil.copy(kept, tmp_path)
    # Through uvicorn, two processes differ by tens of µs: an added cost can read below zero, signed once.
    uvicorn = json.loads((tmp_path / "uvicorn.json").read_text())
    (served,) = [row for row in uvicorn["rows"] if row["name"] == "middleware, with session"]
    served["added_cpu_us"], served["cpu_ratio"] = -45.0, 0.969
    (tmp_path / "uvicorn.json").write_text(json.dumps(uvicorn))
    page = tmp_path / "performance.md"
    run("run_all.py", "--from", str(tmp_path), "--write", str(page))
    text = page.read_text()
    assert "whole server (uvicorn, server CPU): -45 µs on " in text and "= -3.1%" in text and "+-" not in text
    assert "Smoke run" in text
    headings = ("## Verdict", "## The machine", "## As the number of live sessions grow", "## Checking a session id")
    lane = f"## Against the express lane ({LANE})"
    for heading in (*headings, "## Through uvicorn", "## A long SSE response", "## Scale out", lane, "## How to"):
        assert heading in text
    for setup in SCALE_OUT_SETUPS:
        assert f"| {setup} | " in text
    n_curve = {f"session path, N={n}" for n in QUICK_SESSION_COUNTS} | {"trivial app, N-curve base"}
    for row in (ASGI_ROWS - n_curve) | UVICORN_ROWS | SSE_ROWS | set(TOKEN_ROWS):
        assert f"| {row} |" in text
    for n in QUICK_SESSION_COUNTS:
        assert f"| {n:,} |" in text
    verdicts = [line for line in text.split("## Verdict")[1].split("##")[0].splitlines() if line.startswith("| ")]
    assert len(verdicts) == 2 + 11  # header, alignment, one row per target
    assert any("bare httpx streaming proxy" in line or "gateway" in line for line in verdicts[2:])
    (lane_verdict,) = [line for line in verdicts if f"what the express lane ({LANE}) added" in line]
    section = text.split(lane)[1].split("\n## ")[0]
    if LANE_PRESENT:
        assert lane_verdict.count(" µs against the lane's ") == 2  # on the MCPServer and the trivial app
        assert "without a session, for information" in lane_verdict
        assert lane_verdict.endswith(" | met |") or "| **not met** on " in lane_verdict
        for app in ("MCPServer", "trivial app"):
            for request in ("with a session", "without a session"):
                assert f"| {app} | {request} | " in section
        assert f"`bench_versions.py --base {LANE} --trivial` | " in text  # its time and load, in the machine table
    else:
        assert lane_verdict.endswith("| not judged: the comparison could not run |")
        assert "the comparison could not run" in section


def test_bench_stores_smoke(tmp_path: Path) -> None:
    """Every store's row, for memory, sqlite and (redis-server installed) redis."""
    printed = run("bench_stores.py", "--smoke", "--json", str(tmp_path / "stores.json")).stdout
    numbers = json.loads((tmp_path / "stores.json").read_text())
    assert set(numbers) == {"memory", "sqlite", "redis"} or not shutil.which("redis-server")
    for store, rows in numbers.items():
        assert "touch + incr (a session request)" in rows, store
        assert all(value > 0 for value in rows.values())
        assert f"  {store}  " in printed


def test_bench_handle_vs_session_smoke() -> None:
    printed = run("bench_handle_vs_session.py", "--smoke").stdout
    assert "a session adds" in printed and "handle/session" in printed


def test_bench_versions_smoke() -> None:
    printed = run("bench_versions.py", "--base", "HEAD", "--smoke").stdout
    assert "pass-through / bare" in printed and "this/base" in printed
    assert "floor, session" in printed and "this, session:" in printed
    # A multiple of the floor, unless in a few requests the floor's own added cost reads zero or less.
    assert re.search(r"^this, session: (\d+\.\d\dx the floor \(|no multiple of the floor, which added )", printed, re.M)
