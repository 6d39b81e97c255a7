"""This code's per-request cost against an earlier revision's, in one run.

The package at ``--base`` (a git revision) is exported under another name
(``mcp_sessions_base``), so both middlewares wrap the same ``MCPServer`` app in
one process and are called request by request in shuffled order, with a
pass-through control. Reports each one's added CPU per session-bearing
``tools/call`` (cached token) and per sessionless call, and the ratio of this
code's added cost to the base's.

    python benchmarks/bench_versions.py --base 4acf941
    python benchmarks/bench_versions.py --base HEAD~5 --requests 400 --smoke
    python benchmarks/bench_versions.py --base a94083e --json out.json   # also the numbers, for run_all.py

The requests are shared out among ``--processes`` processes (3 by default), run
one after another, and their samples pooled, as ``bench_asgi.py`` does: each
process's memory layout and hash seed move the comparison by a few hundredths.
The JSON keeps each process's ratio too.

The session floor (``SessionFloor``) runs beside them without ``--sdk``, so each
session path also reads as a multiple of it, as in ``docs/performance.md``.

``--sdk`` configures the OpenTelemetry SDK first (as ``bench_asgi.py`` does) and
adds ``opentelemetry-instrumentation-asgi`` on the same app, so that each
middleware's added cost also reads as a share of otel-asgi's; ``--trivial``
wraps the trivial app instead of the ``MCPServer``.

The revision must be in the repository (``git archive`` exports it): in a
shallow clone it may not be. Then the script says so, writes a ``--json`` that
says the comparison could not run and why, and exits with status 3.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import io
import json
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import (
    NAME_HEADERS,
    PROCESSES,
    SECRET,
    App,
    Lifespans,
    PassThrough,
    SessionFloor,
    build_mcp_app,
    call,
    create_session,
    difference_half_width,
    in_processes,
    load_average,
    machine,
    median,
    plain_body,
    pooled_samples,
    print_table,
    request,
    run_lifespan,
    session_body,
    session_headers,
    trivial_app,
    write_json,
)

from mcp_sessions import MCPSessionMiddleware

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "middleware/mcp_sessions"
NOT_RUN = 3  # the exit status when the base revision is not in the repository


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30, check=False)


def find_revision(revision: str) -> tuple[str | None, str]:
    """The commit ``revision`` names in this repository, or ``None`` and why it cannot be compared with."""
    try:
        found = git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
        if found.returncode == 0:
            return found.stdout.strip(), ""
        shallow = git("rev-parse", "--is-shallow-repository")
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"git could not run ({exc})"
    if shallow.returncode != 0:
        return None, f"{ROOT} is not a git repository, so revision {revision} cannot be exported"
    if shallow.stdout.strip() == "true":
        return None, (
            f"revision {revision} is not in this repository, a shallow clone: `git fetch --unshallow` brings it"
        )
    return None, f"revision {revision} is not in this repository"


def import_base(revision: str, into: Path) -> Any:
    """The middleware class of ``mcp_sessions`` as it was at ``revision``, imported as ``mcp_sessions_base``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision, PACKAGE], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / PACKAGE).rename(into / "mcp_sessions_base")  # the package imports itself relatively
    sys.path.insert(0, str(into))
    return importlib.import_module("mcp_sessions_base").MCPSessionMiddleware


async def measure(base_class: Any, requests: int, *, sdk: bool, trivial: bool) -> dict[str, list[float]]:
    inner = build_mcp_app()
    stop = await run_lifespan(inner)
    wrapped = trivial_app if trivial else inner
    options: dict[str, Any] = {}
    apps: dict[str, App] = {"bare": wrapped, "pass-through": PassThrough(wrapped)}
    if sdk:
        from bench_asgi import install_sdk
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        install_sdk()
        options["meter_provider"] = MeterProvider(metric_readers=[InMemoryMetricReader()])
        apps["otel-asgi"] = OpenTelemetryMiddleware(wrapped, meter_provider=options["meter_provider"])
    # This version places its work inside the app it wraps: each version wraps an MCPServer of its own (the
    # same code as the bare one's, in objects of its own), so that neither shares the bare app's caches.
    lifespans = Lifespans()
    middlewares: dict[str, Any] = {"base": base_class, "this": MCPSessionMiddleware}
    for name, middleware in middlewares.items():

        def wrap(app: App, cls: Any = middleware) -> App:
            wrapper: App = cls(app, secret=SECRET, **options)
            return wrapper

        apps[name] = wrap(wrapped) if trivial else await lifespans.own_mcp_app(wrap)
    cases: dict[str, tuple[App, Any]] = {}
    for name, app in apps.items():
        cases[f"{name}, no session"] = (app, request(plain_body(), NAME_HEADERS))
        if name in ("base", "this"):
            token = await create_session(app)
            cases[f"{name}, session"] = (app, request(session_body(token), session_headers(token)))
    if not sdk:  # the floor, and the body it reads, which costs the app itself a little more
        cases["bare, session body"] = (wrapped, request(session_body(token), session_headers(token)))
        cases["floor, session"] = (SessionFloor(wrapped, {token: object()}), cases["bare, session body"][1])
    samples: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases) * requests
    random.shuffle(order)
    for name in list(cases) * 20:  # warm-up, unmeasured
        await call(cases[name][0], *cases[name][1])
    for name in order:
        app, (scope, body) = cases[name]
        started = time.process_time_ns()
        status, _ = await call(app, scope, body)
        samples[name].append((time.process_time_ns() - started) / 1000)
        assert status == 200, (name, status)
    await lifespans.shutdown()
    await stop()
    return samples


def summarize(samples: dict[str, list[float]], *, sdk: bool) -> dict[str, Any]:
    """The medians, each case's added cost over the bare app, and the ratios the script reports."""
    medians = {name: median(values) for name, values in samples.items()}
    bare, bare_samples = medians["bare, no session"], samples["bare, no session"]
    rows = [
        {
            "name": name,
            "median_us": value,
            "added_us": value - bare,
            "ci_us": difference_half_width(samples[name], bare_samples) if samples[name] is not bare_samples else 0.0,
        }
        for name, value in medians.items()
    ]
    added = {
        kind: {name: medians[f"{name}, {kind}"] - bare for name in ("base", "this")}
        for kind in ("session", "no session")
    }
    ratios = {
        kind: (pair["this"] / pair["base"] if pair["base"] > 0 else None) for kind, pair in added.items()
    }  # this code's added cost over the base's; none when the base adds nothing measurable
    floor = None
    if "floor, session" in medians:  # as docs/performance.md reads it: each against the session body
        body = medians["bare, session body"]
        floor_added = medians["floor, session"] - body
        floor = {
            "added_us": floor_added,
            "multiples": {
                name: ((medians[f"{name}, session"] - body) / floor_added if floor_added > 0 else None)
                for name in ("base", "this")
            },
        }
    otel = None
    if sdk:
        otel_added = medians["otel-asgi, no session"] - bare
        otel = {
            "added_us": otel_added,
            "shares": {
                name: ((medians[f"{name}, session"] - bare) / otel_added if otel_added > 0 else None)
                for name in ("base", "this")
            },
        }
    return {
        "rows": rows,
        "pass_through_ratio": medians["pass-through, no session"] / bare,
        "added_us": added,
        "ratios": ratios,
        "floor": floor,
        "otel_asgi": otel,
    }


def report(summary: dict[str, Any], base: str) -> None:
    rows = [[row["name"], f"{row['median_us']:.1f}", f"{row['added_us']:+.1f}"] for row in summary["rows"]]
    print_table(["case", "median CPU µs", "added µs"], rows, [False, True, True])
    print(f"\npass-through / bare: {summary['pass_through_ratio']:.3f}")
    for kind, pair in summary["added_us"].items():
        print(f"{kind}: this adds {pair['this']:.1f} µs, {base} added {pair['base']:.1f} µs", end="")
        ratio = summary["ratios"][kind]
        print(f" (this/base {ratio:.2f})" if ratio is not None else "")
    each = [f"{ratio:.2f}" for ratio in summary.get("process_ratios", ()) if ratio is not None]
    if len(each) > 1:
        print(f"session, this/base in each process: {', '.join(each)}")
    for key, text, missing in (
        ("floor", "x the floor", "no multiple of the floor, which added"),
        ("otel_asgi", "x what otel-asgi adds", "no share of what otel-asgi adds, which is"),
    ):
        if (against := summary[key]) is None:
            continue
        for name, multiple in against["multiples" if key == "floor" else "shares"].items():
            if multiple is None:  # what it is read against added nothing measurable (a few requests, a busy machine)
                print(f"{name}, session: {missing} {against['added_us']:.1f} µs")
            else:
                print(f"{name}, session: {multiple:.2f}{text} ({against['added_us']:.1f} µs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the git revision to compare with")
    parser.add_argument("--requests", type=int, default=6000, help="measured requests per case, shared out")
    parser.add_argument("--processes", type=int, default=PROCESSES, help="processes measured one after another")
    parser.add_argument("--samples-out", help=argparse.SUPPRESS)  # a child process: its samples, to this file
    parser.add_argument(
        "--smoke", "--quick", dest="smoke", action="store_true", help="a few requests: check that it runs"
    )
    parser.add_argument("--sdk", action="store_true", help="with the OpenTelemetry SDK, and otel-asgi beside")
    parser.add_argument("--trivial", action="store_true", help="wrap the trivial app, not the MCPServer")
    parser.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    args = parser.parse_args()
    if args.samples_out:  # one of the processes: its samples only
        with tempfile.TemporaryDirectory() as tmp:
            base_class = import_base(args.base, Path(tmp))
            samples = asyncio.run(measure(base_class, args.requests, sdk=args.sdk, trivial=args.trivial))
        Path(args.samples_out).write_text(json.dumps(samples))
        return
    processes = max(min(args.processes, 2) if args.smoke else args.processes, 1)
    per_process = -(-(20 if args.smoke else args.requests) // processes)  # shared out, rounded up
    requests = per_process * processes
    load_before = load_average()
    started = time.monotonic()
    described = {
        "benchmark": "versions",
        "smoke": args.smoke,
        "base": args.base,
        "app": "trivial app" if args.trivial else "MCPServer",
        "sdk": args.sdk,
        "requests": requests,
        "processes": processes,
    }
    commit, why = find_revision(args.base)
    if commit is None:
        print(f"bench_versions.py: cannot compare with {args.base}: {why}", file=sys.stderr)
        write_json(
            args.json,
            {
                **described,
                "available": False,
                "reason": why,
                "seconds": 0.0,
                "load_before": load_before,
                "load_after": load_average(),
            },
        )
        sys.exit(NOT_RUN)
    options = [*(["--sdk"] if args.sdk else []), *(["--trivial"] if args.trivial else [])]
    runs = in_processes(__file__, ["--base", commit, "--requests", str(per_process), *options], processes)
    summary = summarize(pooled_samples(runs), sdk=args.sdk)
    summary["process_ratios"] = [summarize(run, sdk=args.sdk)["ratios"]["session"] for run in runs]
    report(summary, args.base)
    write_json(
        args.json,
        {
            **described,
            "available": True,
            "base_commit": commit,
            "seconds": round(time.monotonic() - started, 1),
            "load_before": load_before,
            "load_after": load_average(),
            "machine": machine(),
            **summary,
        },
    )


if __name__ == "__main__":
    main()
