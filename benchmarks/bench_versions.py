"""This code's per-request cost against an earlier revision's, in one run.

The package at ``--base`` (a git revision) is exported under another name
(``mcp_sessions_base``), so both middlewares wrap the same ``MCPServer`` app in
one process and are called request by request in shuffled order, with a
pass-through control. Reports each one's added CPU per session-bearing
``tools/call`` (cached token) and per sessionless call, and the ratio of this
code's added cost to the base's.

    python benchmarks/bench_versions.py --base 4acf941
    python benchmarks/bench_versions.py --base HEAD~5 --requests 400 --smoke

The session floor (``SessionFloor``) runs beside them without ``--sdk``, so each
session path also reads as a multiple of it, as in ``docs/performance.md``.

``--sdk`` configures the OpenTelemetry SDK first (as ``bench_asgi.py`` does) and
adds ``opentelemetry-instrumentation-asgi`` on the same app, so that each
middleware's added cost also reads as a share of otel-asgi's; ``--trivial``
wraps the trivial app instead of the ``MCPServer``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import io
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
    SECRET,
    App,
    PassThrough,
    SessionFloor,
    build_mcp_app,
    call,
    create_session,
    median,
    plain_body,
    print_table,
    request,
    run_lifespan,
    session_body,
    session_headers,
    trivial_app,
)

from mcp_sessions import MCPSessionMiddleware

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "middleware/mcp_sessions"


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
    apps["base"] = base_class(wrapped, secret=SECRET, **options)
    apps["this"] = MCPSessionMiddleware(wrapped, secret=SECRET, **options)
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
    await stop()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the git revision to compare with")
    parser.add_argument("--requests", type=int, default=2000, help="measured requests per case")
    parser.add_argument("--smoke", action="store_true", help="a few requests: check that it runs")
    parser.add_argument("--sdk", action="store_true", help="with the OpenTelemetry SDK, and otel-asgi beside")
    parser.add_argument("--trivial", action="store_true", help="wrap the trivial app, not the MCPServer")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base_class = import_base(args.base, Path(tmp))
        samples = asyncio.run(
            measure(base_class, 20 if args.smoke else args.requests, sdk=args.sdk, trivial=args.trivial)
        )
    medians = {name: median(values) for name, values in samples.items()}
    bare = medians["bare, no session"]
    rows = [[name, f"{value:.1f}", f"{value - bare:+.1f}"] for name, value in medians.items()]
    print_table(["case", "median CPU µs", "added µs"], rows, [False, True, True])
    print(f"\npass-through / bare: {medians['pass-through, no session'] / bare:.3f}")
    for kind in ("session", "no session"):
        base_added = medians[f"base, {kind}"] - bare
        this_added = medians[f"this, {kind}"] - bare
        print(f"{kind}: this adds {this_added:.1f} µs, {args.base} added {base_added:.1f} µs", end="")
        print(f" (this/base {this_added / base_added:.2f})" if base_added > 0 else "")
    if "floor, session" in medians:  # as docs/performance.md reads it: each against the session body
        body = medians["bare, session body"]
        floor_added = medians["floor, session"] - body
        for name in ("base", "this"):
            print(f"{name}, session: {(medians[f'{name}, session'] - body) / floor_added:.2f}x the floor", end="")
            print(f" ({floor_added:.1f} µs)")
    if args.sdk:
        otel_added = medians["otel-asgi, no session"] - bare
        for name in ("base", "this"):
            share = (medians[f"{name}, session"] - bare) / otel_added
            print(f"{name}, session: {share:.2f}x what otel-asgi adds ({otel_added:.1f} µs)")


if __name__ == "__main__":
    main()
