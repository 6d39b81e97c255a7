"""Run every benchmark and write the performance page: the machine, the tables, a verdict per target.

Each benchmark runs in a process of its own (``bench_asgi.py`` sets
OpenTelemetry's global TracerProvider), writes its numbers as JSON, and this
script renders them as Markdown.

    python benchmarks/run_all.py --write docs/performance.md   # the published page (a few minutes)
    python benchmarks/run_all.py --quick                       # a few requests each, to standard output
    python benchmarks/run_all.py --from DIR --write OUT.md     # render the JSON files a run kept in DIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import ROOT, load_average
from bench_gateway import gateway_verdict
from bench_gateway import section as gateway_section

LANE_REVISION = "a94083e"  # the last commit with the express lane (_express.py), before the one pipeline
ASK_REVISION = "505fdc3"  # before the rewrite that asks the server instead of rebuilding it (issue 37)
# name -> (script, timeout in seconds, its arguments); each writes NAME.json
BENCHMARKS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "asgi": ("bench_asgi.py", 600, ()),
    "uvicorn": ("bench_uvicorn.py", 600, ()),
    "sse": ("bench_sse.py", 600, ()),
    "versions": ("bench_versions.py", 300, ("--base", LANE_REVISION)),
    "versions_trivial": ("bench_versions.py", 300, ("--base", LANE_REVISION, "--trivial")),
    "versions_ask": ("bench_versions.py", 300, ("--base", ASK_REVISION)),
    "scale_out": ("bench_scale_out.py", 900, ()),
    "gateway": ("bench_gateway.py", 600, ()),
}
# The comparisons with the lane need its revision in the repository, which a shallow clone lacks:
# when they cannot run, the page says so and why, and the rest of the run stands.
LANE_VERSIONS = {"versions": "MCPServer", "versions_trivial": "trivial app"}
VERSIONS = {**LANE_VERSIONS, "versions_ask": "MCPServer"}
SESSION_BUDGET = 0.05  # at most 5% on a session-bearing tools/call
TRIVIAL_BUDGET_US = 40.0  # at most 40 µs CPU per request on a trivial app
FIRST_REQUEST_BUDGET_US = 15.0  # a session's first request on a replica, over a cached one (HS256)
FLAT_RATIO = 1.2  # the session path at N = 60,000 live sessions, against N = 100
CHECKED_MULTIPLE = 1.3  # a session-bearing tools/call adds at most this multiple of what the checked floor adds
OTEL_SHARE = 0.45  # with the SDK, at most this share of what opentelemetry-instrumentation-asgi adds
SSE_RATE = 0.5  # a long SSE response at no less than this share of the bare app's rate
LANE_MULTIPLE = 1.2  # a session-bearing tools/call adds at most this multiple of what the lane added
ASK_MULTIPLE = 1.15  # ... and at most this multiple of what it added at ASK_REVISION, on the MCPServer
CONSTANT_MEMORY_KIB = 64.0  # "constant": the peak grows by less than this from the smallest stream to the largest

Results = dict[str, dict[str, Any]]
RUN_FILE = "run.json"  # when the whole run started and ended, and the load then


def run(directory: Path, smoke: bool) -> tuple[Results, dict[str, Any]]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    clock = time.monotonic()
    started: dict[str, Any] = {"load": load_average(), "time": time.strftime("%Y-%m-%d %H:%M %Z")}
    for name, (script, timeout, arguments) in BENCHMARKS.items():
        print(f"running {command_of(name)} ...", file=sys.stderr, flush=True)
        out = directory / f"{name}.json"
        out.unlink(missing_ok=True)  # what a kept directory held from an earlier run says nothing of this one
        command = [sys.executable, str(ROOT / "benchmarks" / script), *arguments, "--json", str(out)]
        try:
            done = subprocess.run(
                [*command, *(["--smoke"] if smoke else [])],
                cwd=ROOT,
                env=environ,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            if name not in VERSIONS:
                raise
            print(f"{script} timed out after {timeout} s", file=sys.stderr, flush=True)
            out.write_text(json.dumps(not_run(name, f"it did not finish within {timeout} s")) + "\n")
            continue
        if done.returncode != 0 and not (name in VERSIONS and out.exists() and not available(load_one(out))):
            raise SystemExit(f"{script} failed:\n{done.stderr}")
        print(done.stdout or done.stderr, file=sys.stderr, flush=True)
    started["load_after"] = load_average()
    started["seconds"] = round(time.monotonic() - clock, 1)
    (directory / RUN_FILE).write_text(json.dumps(started, indent=2) + "\n")
    return load(directory), started


def load(directory: Path) -> Results:
    results = {}
    for name in BENCHMARKS:
        path = directory / f"{name}.json"
        if name in VERSIONS and not path.exists():  # kept by a run from before the comparison was on the page
            results[name] = not_run(name, f"{path.name} is not among the results rendered")
        elif name == "gateway" and not path.exists():  # kept by a run from before the gateway was measured
            results[name] = {"benchmark": "gateway", "available": False, "reason": f"no {path.name} in these results"}
        else:
            results[name] = load_one(path)
    return results


def load_one(path: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def not_run(name: str, reason: str) -> dict[str, Any]:
    """The result of a comparison with the lane that could not run, and why."""
    return {"benchmark": "versions", "app": VERSIONS[name], "available": False, "reason": reason}


def available(result: dict[str, Any]) -> bool:
    return bool(result.get("available", True))


def command_of(name: str) -> str:
    script, _, arguments = BENCHMARKS[name]
    return " ".join((script, *arguments))


# -- rendering -------------------------------------------------------------------------


def rows_by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in result["rows"]}


def table(header: list[str], rows: list[list[str]], right: list[bool]) -> str:
    align = ["---:" if r else "---" for r in right]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def load_text(values: list[float]) -> str:
    return " / ".join(f"{value:.2f}" for value in values)


def verdicts(results: Results) -> list[list[str]]:
    asgi = rows_by_name(results["asgi"])
    uvicorn = rows_by_name(results["uvicorn"])
    out = []

    # 1. at most 5% on a session-bearing tools/call on the bare MCPServer
    direct = asgi["middleware, with session"]
    direct_base = direct["median_us"] - direct["added_us"]
    served = uvicorn["middleware, with session"]
    served_base = served["cpu_us"] - served["added_cpu_us"]
    direct_met = direct["ratio"] <= 1 + SESSION_BUDGET
    served_met = served["cpu_ratio"] <= 1 + SESSION_BUDGET
    measured = (
        f"app alone (direct ASGI): {direct['added_us']:+.1f} ± {direct['ci_us']:.1f} µs on {direct_base:.0f} µs "
        f"= {(direct['ratio'] - 1) * 100:+.1f}%; whole server (uvicorn, server CPU): "
        f"{served['added_cpu_us']:+.0f} µs on {served_base:.0f} µs = {(served['cpu_ratio'] - 1) * 100:+.1f}%"
    )
    parts = []
    for label, met, ratio, base in (
        ("app alone", direct_met, direct["ratio"], direct_base),
        ("whole server", served_met, served["cpu_ratio"], served_base),
    ):
        if met:
            parts.append(f"{label}: met")
        else:
            gap = (ratio - 1 - SESSION_BUDGET) * base
            parts.append(f"{label}: **not met**, {gap:.0f} µs over the budget of {SESSION_BUDGET * base:.0f} µs")
    out.append(["≤ 5% on a session-bearing `tools/call` on the bare `MCPServer`", measured, "; ".join(parts)])

    # 2. at most 40 µs CPU per request on a trivial app
    with_session = asgi["trivial + middleware, session"]
    without = asgi["trivial + middleware, no session"]
    mixed = asgi["trivial + middleware, session, among MCPServer calls"]
    served = uvicorn["trivial + middleware, session"]
    first = asgi["trivial + middleware, session new to this replica"]
    measured = (
        f"app alone: with a session {with_session['added_us']:+.1f} ± {with_session['ci_us']:.1f} µs, "
        f"without {without['added_us']:+.1f} ± {without['ci_us']:.1f} µs; with a session, "
        f"among MCPServer calls (cold caches) {mixed['added_us']:+.1f} ± {mixed['ci_us']:.1f} µs; "
        f"whole server (uvicorn) {served['added_cpu_us']:+.0f} ± {served['ci_us']:.0f} µs. Not in the verdict: "
        f"a session's first request on a replica, before its token is in the verified-token cache, "
        f"{first['added_us']:+.0f} µs"
    )
    parts = []
    for label, added in (
        ("app alone", max(with_session["added_us"], without["added_us"])),
        ("among MCPServer calls", mixed["added_us"]),
        ("whole server", served["added_cpu_us"]),
    ):
        if added <= TRIVIAL_BUDGET_US:
            parts.append(f"{label}: met, {TRIVIAL_BUDGET_US - added:.0f} µs to spare")
        else:
            parts.append(f"{label}: **not met**, {added - TRIVIAL_BUDGET_US:.0f} µs over")
    out.append(["≤ 40 µs CPU per request on a trivial app", measured, "; ".join(parts)])

    # 2b. near the checked floor: a session-bearing tools/call adds at most 1.3x what the hand-written
    # minimum that makes the checks it must make adds; the multiple of the bare session floor, for information
    sessions = [
        ("MCPServer (direct ASGI)", asgi["middleware, with session"]),
        ("trivial app (direct ASGI)", asgi["trivial + middleware, session"]),
        ("MCPServer (uvicorn)", uvicorn["middleware, with session"]),
        ("trivial app (uvicorn)", uvicorn["trivial + middleware, session"]),
    ]
    parts = []
    for label, row in sessions:
        checked, floor = row.get("checked_multiple"), row.get("floor_multiple")
        ci = row.get("checked_multiple_ci")  # through uvicorn: the multiple's own 95% interval
        text = (
            f"{label}: {checked:.2f}x" + ("" if ci is None else f" (± {ci:.2f}, 95%)") + " the checked floor's"
            if checked is not None
            else f"{label}: no multiple of the checked floor (its added cost, or the floor's, is within its noise)"
        )
        each = [f"{m:.2f}" for m in row.get("process_checked_multiples", ()) if m is not None]
        if checked is not None and len(each) > 1:
            text += f", {', '.join(each[:-1])} and {each[-1]} in its processes"
        parts.append(text + (f" ({floor:.2f}x the session floor's)" if floor is not None else ""))
    measured = "; ".join(parts)
    over = [label for label, row in sessions if (row.get("checked_multiple") or 0.0) > CHECKED_MULTIPLE]
    unjudged = [label for label, row in sessions if row.get("checked_multiple") is None]
    verdict = "met" if not over else "**not met** on " + ", ".join(over)
    if len(unjudged) == len(sessions):
        verdict = "not judged: no multiple anywhere"
    elif unjudged:
        verdict += "; not judged on " + ", ".join(unjudged) + " (no multiple)"
    undecided = [  # met or not, a verdict its own noise could turn
        label
        for label, row in sessions
        if row.get("checked_multiple") is not None
        and row.get("checked_multiple_ci") is not None
        and abs(row["checked_multiple"] - CHECKED_MULTIPLE) <= row["checked_multiple_ci"]
    ]
    if undecided:
        verdict += f"; {CHECKED_MULTIPLE:g}x is within the 95% interval on " + ", ".join(undecided)
    out.append(
        [f"A session-bearing `tools/call` adds ≤ {CHECKED_MULTIPLE:g}x what the checked floor adds", measured, verdict]
    )

    # 2c. against the express lane: a session-bearing tools/call adds at most 1.2x what the lane added at
    # a94083e, both measured in one process; the sessionless ratio for information
    out.append(lane_verdict(results))

    # 2c'. against the code before it asked the server (issue 37): at most 1.15x what 505fdc3 added, and no
    # more than Starlette's cookie SessionMiddleware adds in the same run, each tool reading its session
    out.append(ask_verdict(results))

    # 2d. the gateway with a session adds at most 1.5x what a bare httpx streaming proxy adds (p50)
    out.append(gateway_verdict(results["gateway"]))

    # 3. with the OpenTelemetry SDK, cheaper per request than opentelemetry-instrumentation-asgi
    pairs = [
        ("MCPServer", asgi["middleware, session + SDK"], asgi["otel-asgi + SDK"]),
        ("trivial app", asgi["trivial + middleware, session + SDK"], asgi["trivial + otel-asgi + SDK"]),
    ]
    measured = "; ".join(
        f"{label}: this middleware with a session {ours['added_us']:+.0f} ± {ours['ci_us']:.0f} µs, "
        f"otel-asgi {theirs['added_us']:+.0f} ± {theirs['ci_us']:.0f} µs"
        for label, ours, theirs in pairs
    )
    floors = [
        (label, asgi.get(name)) for label, name in (("MCPServer", "SDK floor"), ("trivial app", "trivial + SDK floor"))
    ]
    floor_shares = [
        f"{label} {floor['added_us'] / theirs['added_us']:.2f}x"
        for (label, floor), (_, _, theirs) in zip(floors, pairs, strict=True)
        if floor is not None and theirs["added_us"] > 0
    ]
    if floor_shares:
        measured += (
            "; the SDK floor alone (the same span, its context and one histogram point, nothing else): "
            + ", ".join(floor_shares)
            + " of otel-asgi's"
        )
    shares = [(label, ours["added_us"] / theirs["added_us"]) for label, ours, theirs in pairs if theirs["added_us"] > 0]
    text = ", ".join(f"{share * 100:.0f}% of otel-asgi's added cost on the {label}" for label, share in shares)
    if any(share >= 1 for _, share in shares):
        verdict = f"**not met**, not even cheaper: {text}"
    elif any(share > OTEL_SHARE for _, share in shares):
        verdict = f"**not met** ({text}); cheaper than otel-asgi on both"
    else:
        verdict = f"met: {text}"
    out.append(
        [
            f"With the OpenTelemetry SDK configured, ≤ {OTEL_SHARE:g}x what `opentelemetry-instrumentation-asgi` adds",
            measured,
            verdict,
        ]
    )

    # 4. a 100 MB SSE response: constant memory, no added latency to the first event
    sse = results["sse"]
    streams = [row for row in sse["rows"] if row["name"] == "middleware, with session"]
    smallest, largest = streams[0], streams[-1]
    growth = largest["traced_peak_kib"] - smallest["traced_peak_kib"]
    held = max(row["held_back"] for row in streams)
    added_first = max(row["ttfe_added_us"] for row in streams)
    rss = ", ".join(
        f"{row['size_mb']:g} MB: {row['rss_growth_kib']} KiB" for row in streams if row["rss_growth_kib"] is not None
    )
    measured = (
        f"traced peak {smallest['traced_peak_kib']:.1f} KiB at {smallest['size_mb']:g} MB, "
        f"{largest['traced_peak_kib']:.1f} KiB at {largest['size_mb']:g} MB; peak RSS growth {rss or 'n/a'}; "
        f"events held back: {held}; first event {largest['ttfe_added_us']:+.1f} µs at {largest['size_mb']:g} MB, "
        f"{smallest['ttfe_added_us']:+.1f} µs at {smallest['size_mb']:g} MB"
    )
    constant = growth < CONSTANT_MEMORY_KIB
    prompt = held == 0 and added_first <= TRIVIAL_BUDGET_US
    if constant and prompt:
        verdict = (
            "met: memory does not grow with the stream, every event leaves as it arrives; the first event "
            "waits only for the request's own checks, within the 40 µs per-request budget"
        )
    else:
        failures = []
        if not constant:
            failures.append(f"memory grew by {growth:.0f} KiB")
        if held:
            failures.append(f"{held} events held back")
        if added_first > TRIVIAL_BUDGET_US:
            failures.append(f"first event {added_first - TRIVIAL_BUDGET_US:.1f} µs over the per-request budget")
        verdict = "**not met**: " + ", ".join(failures)
    out.append([f"A {largest['size_mb']:g} MB SSE response: constant memory, no first-event delay", measured, verdict])

    # 4b. the stream's rate: at least half the bare app's
    bare = {row["size_mb"]: row for row in sse["rows"] if row["name"] == "bare app"}
    rates = [(row["size_mb"], row["mb_per_second"] / bare[row["size_mb"]]["mb_per_second"]) for row in streams]
    measured = "; ".join(
        f"{size:g} MB: {row['mb_per_second']:.0f} MB/s against {bare[size]['mb_per_second']:.0f} (x{rate:.2f})"
        for (size, rate), row in zip(rates, streams, strict=True)
    )
    slow = [f"{size:g} MB" for size, rate in rates if rate < SSE_RATE]
    verdict = "met" if not slow else "**not met** at " + ", ".join(slow)
    out.append([f"A long SSE response at ≥ {SSE_RATE:g}x the bare app's rate", measured, verdict])

    # 5. a session's first request on a replica: at most 15 µs over a cached one (HS256)
    checks = {row["name"]: row for row in results["asgi"]["tokens"]["rows"]}
    direct, reference = checks["uncached, direct HS256"], checks["uncached, PyJWT"]
    through = (
        asgi["trivial + middleware, session new to this replica"]["median_us"]
        - asgi["trivial + middleware, session, new request objects"]["median_us"]
    )
    measured = (
        f"the check alone: {direct['added_us']:+.1f} ± {direct['ci_us']:.1f} µs over a cached one "
        f"(PyJWT's path: {reference['added_us']:+.1f} µs); through the middleware on the trivial app: "
        f'{through:+.1f} µs ("session new to this replica" against "session, new request objects": '
        "each request a new object in both)"
    )
    worst = max(direct["added_us"], through)
    verdict = (
        f"met, {FIRST_REQUEST_BUDGET_US - worst:.0f} µs to spare"
        if worst <= FIRST_REQUEST_BUDGET_US
        else f"**not met**, {worst - FIRST_REQUEST_BUDGET_US:.1f} µs over"
    )
    out.append(["A session's first request on a replica: ≤ 15 µs over a cached one (HS256)", measured, verdict])

    # 6. flat as sessions grow: the session path at N = 60,000 within 1.2x of N = 100
    curve = n_curve(results["asgi"])
    smallest_n, small = curve[0]
    largest_n, large = max(((n, row) for n, row in curve if n <= 60_000), key=lambda item: item[0])
    ratio = large["added_us"] / small["added_us"]
    measured = "; ".join(f"N={n:,}: {row['added_us']:+.1f} µs" for n, row in curve)
    verdict = (
        f"met: N={largest_n:,} is {ratio:.2f}x N={smallest_n:,}"
        if ratio <= FLAT_RATIO
        else f"**not met**: N={largest_n:,} is {ratio:.2f}x N={smallest_n:,}"
    )
    out.append(["Flat as sessions grow: N = 60,000 live sessions within 1.2x of N = 100", measured, verdict])
    return out


def not_run_notes(results: Results) -> dict[str, list[str]]:
    """Why the comparison with the lane could not run, and on which apps (one reason, usually, for both)."""
    notes: dict[str, list[str]] = {}
    for name, app in LANE_VERSIONS.items():
        if not available(results[name]):
            notes.setdefault(results[name]["reason"], []).append(app)
    return notes


def lane_verdict(results: Results) -> list[str]:
    target = f"A session-bearing `tools/call` adds ≤ {LANE_MULTIPLE:g}x what the express lane ({LANE_REVISION}) added"
    missing = not_run_notes(results)
    if len(missing) == 1 and len(next(iter(missing.values()))) == len(LANE_VERSIONS):
        (reason,) = missing
        return [target, f"the comparison could not run: {reason}", "not judged: the comparison could not run"]
    parts, over, unjudged = [], [], []
    for name, app in LANE_VERSIONS.items():
        result = results[name]
        if not available(result):
            parts.append(f"{app}: the comparison could not run: {result['reason']}")
            unjudged.append(f"{app} (it could not run)")
            continue
        session, sessionless = result["added_us"]["session"], result["added_us"]["no session"]
        ratio, information = result["ratios"]["session"], result["ratios"]["no session"]
        text = f"{app}: {session['this']:+.1f} µs against the lane's {session['base']:+.1f} µs"
        each = [f"{r:.2f}" for r in result.get("process_ratios", ()) if r is not None]
        if ratio is None:
            text += " (no ratio: the lane added nothing measurable)"
        else:
            text += f" ({ratio:.2f}x" + (
                f"; {', '.join(each[:-1])} and {each[-1]} in its processes)" if len(each) > 1 else ")"
            )
        text += (
            f"; without a session, for information: {sessionless['this']:+.1f} µs against "
            f"{sessionless['base']:+.1f} µs" + (" (no ratio)" if information is None else f" ({information:.2f}x)")
        )
        parts.append(text)
        if ratio is None:
            unjudged.append(f"{app} (no ratio)")
        elif ratio > LANE_MULTIPLE:
            over.append(f"{app} ({ratio:.2f}x)")
    if len(unjudged) == len(LANE_VERSIONS):
        verdict = "not judged: " + ", ".join(unjudged)
    else:
        verdict = "met" if not over else "**not met** on " + ", ".join(over)
        if unjudged:
            verdict += "; not judged on " + ", ".join(unjudged)
    return [target, "; ".join(parts), verdict]


def ask_verdict(results: Results) -> list[str]:
    target = (
        f"A session-bearing `tools/call` on the `MCPServer` adds ≤ {ASK_MULTIPLE:g}x what it added at {ASK_REVISION}, "
        "and no more than Starlette's cookie `SessionMiddleware`"
    )
    asgi = rows_by_name(results["asgi"])
    ours, cookie = asgi["middleware, with session"], asgi["starlette cookie session"]
    parts = [
        "direct ASGI, each tool reading its session: "
        f"this middleware {ours['added_us']:+.1f} ± {ours['ci_us']:.1f} µs, "
        f"the cookie session {cookie['added_us']:+.1f} ± {cookie['ci_us']:.1f} µs"
    ]
    over = ours["added_us"] - cookie["added_us"]
    if over <= 0:
        verdicts = [f"cookie: met, {-over:.1f} µs below"]
    else:
        noise = " (within both 95% intervals)" if over <= ours["ci_us"] + cookie["ci_us"] else ""
        verdicts = [f"cookie: **not met**, {over:.1f} µs over{noise}"]
    result = results["versions_ask"]
    if not available(result):
        parts.append(f"against {ASK_REVISION}: the comparison could not run: {result['reason']}")
        verdicts.append(f"{ASK_REVISION}: not judged")
    else:
        session, ratio = result["added_us"]["session"], result["ratios"]["session"]
        each = [f"{r:.2f}" for r in result.get("process_ratios", ()) if r is not None]
        text = f"`bench_versions.py --base {ASK_REVISION}`: {session['this']:+.1f} µs against {session['base']:+.1f} µs"
        if ratio is None:
            parts.append(text + f" (no ratio: {ASK_REVISION} added nothing measurable)")
            verdicts.append(f"{ASK_REVISION}: not judged (no ratio)")
        else:
            parts.append(text + f" ({ratio:.2f}x" + (f"; {', '.join(each)} in its processes)" if each else ")"))
            met = ratio <= ASK_MULTIPLE
            verdicts.append(f"{ASK_REVISION}: " + ("met" if met else f"**not met** ({ratio:.2f}x)"))
    return [target, "; ".join(parts), "; ".join(verdicts)]


def lane_table(results: Results) -> str:
    """The comparison with the lane, per app and kind of request; a note for each app it could not run on."""
    header = [
        "app",
        "request",
        "bare app µs",
        f"{LANE_REVISION} adds µs",
        "this code adds µs",
        f"this / {LANE_REVISION}",
        f"x floor, {LANE_REVISION}",
        "x floor, this code",
    ]
    notes = [
        f"> **Not measured** (the {' and the '.join(apps)}): the comparison could not run: {reason}."
        for reason, apps in not_run_notes(results).items()
    ]
    rows = []
    for name, app in LANE_VERSIONS.items():
        result = results[name]
        if not available(result):
            continue
        cases = rows_by_name(result)
        floor = result.get("floor") or {"multiples": {}}
        for kind in ("session", "no session"):
            base, this = cases[f"base, {kind}"], cases[f"this, {kind}"]
            ratio = result["ratios"][kind]
            multiples = floor["multiples"] if kind == "session" else {}
            rows.append(
                [
                    app,
                    "with a session" if kind == "session" else "without a session",
                    f"{cases['bare, no session']['median_us']:.1f}",
                    f"{base['added_us']:+.1f} ± {base['ci_us']:.1f}",
                    f"{this['added_us']:+.1f} ± {this['ci_us']:.1f}",
                    "" if ratio is None else f"{ratio:.2f}",
                    *("" if multiples.get(who) is None else f"{multiples[who]:.2f}" for who in ("base", "this")),
                ]
            )
        floor_text = f", the session floor added {floor['added_us']:.1f} µs" if "added_us" in floor else ""
        notes.append(
            f"The {app}: the pass-through control read {result['pass_through_ratio']:.3f} of the bare app"
            f"{floor_text}; {result['requests']} requests per case."
        )
    if not rows:
        return "\n\n".join(notes)
    return table(header, rows, [False, False, *[True] * 6]) + "\n\n" + "\n\n".join(notes)


def n_curve(result: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    rows = rows_by_name(result)
    return [(n, rows[f"session path, N={n}"]) for n in result["session_counts"]]


def n_curve_table(result: dict[str, Any]) -> str:
    curve = n_curve(result)
    first = curve[0][1]["added_us"]
    rows = [
        [
            f"{n:,}",
            f"{row['median_us']:.1f}",
            f"{row['added_us']:+.1f}",
            f"{row['ci_us']:.1f}",
            f"{row['added_us'] / first:.2f}",
        ]
        for n, row in curve
    ]
    header = ["live sessions N", "median CPU µs", "added µs", "± µs (95%)", f"added, x N={curve[0][0]:,}"]
    return table(header, rows, [True] * 5)


def token_table(result: dict[str, Any]) -> str:
    tokens = result["tokens"]
    rows = [
        [row["name"], f"{row['median_us']:.2f}", "" if row["name"] == "cached" else f"{row['added_us']:+.2f}",
         "" if row["name"] == "cached" else f"{row['ci_us']:.2f}"]
        for row in tokens["rows"]
    ]  # fmt: skip
    return table(
        ["session-id check (HS256)", "median CPU µs", "added µs", "± µs (95%)"], rows, [False, True, True, True]
    )


def asgi_tables(result: dict[str, Any]) -> str:
    header = ["app", "median CPU µs", "ratio", "added µs", "± µs (95%)", "x floor", "x checked", "base"]
    right = [False, True, True, True, True, True, True, False]
    sections = []
    phases = {1: "without an OpenTelemetry SDK", 2: "with the OpenTelemetry SDK configured"}
    groups = dict.fromkeys((row["phase"], row["group"]) for row in result["rows"])
    for phase, group in groups:
        rows = [
            [
                row["name"],
                f"{row['median_us']:.1f}",
                f"{row['ratio']:.3f}",
                "" if row["base"] == row["name"] else f"{row['added_us']:+.1f}",
                "" if row["base"] == row["name"] else f"{row['ci_us']:.1f}",
                "" if row.get("floor_multiple") is None else f"{row['floor_multiple']:.2f}",
                "" if row.get("checked_multiple") is None else f"{row['checked_multiple']:.2f}",
                row["base"],
            ]
            for row in result["rows"]
            if (row["phase"], row["group"]) == (phase, group) and row["group"] != "live sessions"
        ]
        if not rows:
            continue
        sections.append(f"### {group}, {phases[phase]}\n\n{table(header, rows, right)}")
    return "\n\n".join(sections)


def uvicorn_table(result: dict[str, Any]) -> str:
    header = [
        "server",
        "requests",
        "req/s",
        "ratio",
        "server CPU µs/request",
        "ratio",
        "added µs",
        "± µs (95%)",
        "x floor",
        "x checked",
        "base",
    ]
    right = [False, True, True, True, True, True, True, True, True, True, False]
    rows = [
        [
            row["name"],
            str(row["requests"]),
            f"{row['requests_per_second']:.0f}",
            f"{row['throughput_ratio']:.3f}",
            f"{row['cpu_us']:.0f}",
            f"{row['cpu_ratio']:.3f}",
            "" if row["base"] == row["name"] else f"{row['added_cpu_us']:+.0f}",
            "" if row["base"] == row["name"] else f"{row['ci_us']:.0f}",
            "" if row.get("floor_multiple") is None else f"{row['floor_multiple']:.2f}",
            "" if row.get("checked_multiple") is None else f"{row['checked_multiple']:.2f}",
            row["base"],
        ]
        for row in result["rows"]
    ]
    return table(header, rows, right)


def sse_table(result: dict[str, Any]) -> str:
    header = [
        "app",
        "stream MB",
        "events",
        "first event µs",
        "added µs",
        "events held back",
        "traced peak KiB",
        "peak RSS growth KiB",
        "CPU s",
        "MB/s",
    ]
    rows = [
        [
            row["name"],
            f"{row['bytes'] / 1e6:.1f}",
            str(row["events"]),
            f"{row['ttfe_us']:.1f}",
            "" if row["name"] == "bare app" else f"{row['ttfe_added_us']:+.1f}",
            str(row["held_back"]),
            f"{row['traced_peak_kib']:.1f}",
            "n/a" if row["rss_growth_kib"] is None else str(row["rss_growth_kib"]),
            f"{row['cpu_seconds']:.2f}",
            f"{row['mb_per_second']:.0f}",
        ]
        for row in result["rows"]
    ]
    return table(header, rows, [False] + [True] * 9)


def scale_out_table(result: dict[str, Any]) -> str:
    header = ["setup", "conversations", "requests", "requests/s", "p50 ms", "p99 ms", "lost increments", "errors"]
    header += ["Redis bytes per live session", "per deleted session"]
    rows = [
        [
            row["setup"],
            str(row["conversations"]),
            str(row["requests"]),
            f"{row['requests_per_second']:.0f}",
            f"{row['p50_ms']:.1f}",
            f"{row['p99_ms']:.1f}",
            str(row["lost_increments"]),
            str(sum(row["errors"].values())),
            f"{row['live_bytes']:.0f}" if "live_bytes" in row else "n/a",
            f"{row['tombstone_bytes']:.0f}" if "tombstone_bytes" in row else "n/a",
        ]
        for row in result["rows"]
    ]
    return table(header, rows, [False] + [True] * 9)


def machine_table(results: Results, run_info: dict[str, Any] | None) -> str:
    info = results["asgi"]["machine"]
    cores = f"{info['cores']} ({info['usable_cores']} usable by the benchmarks)"
    libraries = ", ".join(f"{name} {version}" for name, version in info["libraries"].items())
    rows = [
        ["CPU", info["cpu"]],
        ["cores", cores],
        ["system", info["system"]],
        ["Python", info["python"]],
        ["libraries", libraries],
        ["code measured", info["code"]],
    ]
    if run_info is not None:
        rows.append(["run", f"{run_info['time']}, {run_info['seconds']:.0f} s in all"])
        rows.append(["load average (1 / 5 / 15 min) at start", load_text(run_info["load"])])
        rows.append(["load average at end", load_text(run_info["load_after"])])
    for name, result in results.items():
        if not available(result):
            rows.append([f"`{command_of(name)}`", f"could not run: {result['reason']}"])
            continue
        rows.append(
            [
                f"`{command_of(name)}`",
                f"{result['seconds']:.0f} s; load {load_text(result['load_before'])} before, "
                f"{load_text(result['load_after'])} after",
            ]
        )
    return table(["", "this run"], rows, [False, False])


def render(results: Results, run_info: dict[str, Any] | None, smoke: bool) -> str:
    asgi, uvicorn, sse, scale = results["asgi"], results["uvicorn"], results["sse"], results["scale_out"]
    sizes = " and ".join(f"{size:g} MB" for size in sse["sizes_mb"])
    warning = (
        "\n> **Smoke run**: a few requests each, to check the scripts work. These numbers mean nothing.\n"
        if smoke
        else ""
    )
    return f"""# Performance

<!-- Generated by `python benchmarks/run_all.py --write docs/performance.md`: edit that script, not this page. -->

What the middleware costs per request, through a real server, and on a long
SSE stream, measured in one run on one machine, each against its base and a
pass-through control. The scripts are in the repository's `benchmarks/`.
{warning}
## Verdict

{table(["target", "measured", "verdict"], verdicts(results), [False, False, False])}

## The machine

{machine_table(results, run_info)}

This machine is shared and noisy: other processes may run during the
benchmarks, hence the load averages above (which count the benchmarks' own
processes too: `bench_uvicorn.py` keeps both cores busy, a server and the
client). The benchmarks measure CPU time rather than wall time where they
can, and alternate the compared apps request by request (or slice by slice)
in a shuffled order, so that drift hits every app alike; the ratios matter,
not the absolute numbers.

## Per-request CPU, calling the ASGI apps directly

`bench_asgi.py`: {asgi["rounds"]} requests per app, shared out among
{asgi.get("processes", 1)} processes run one after another and pooled (each
process has a memory layout and hash seed of its own, which alone can move a
multiple by a few hundredths); the apps of each table called in one shuffled
sequence, one request at a time; CPU time of the process
(`time.process_time_ns`) around each call; the median per app. "± µs" is the
half-width of a 95% interval on the added time (order statistics of the two
medians, pooled). The `MCPServer` app is the `mcp` SDK's, with JSON responses and
one `echo` tool that reads its session (this middleware's through
`get_session()`, Starlette's through `request.session`, the cookie carrying a
signed `{{"conversation": ...}}`); the trivial app reads the body, reads its
session the same way, and answers a fixed `tools/call` result, so its rows
show what a layer costs with nothing else to hide it. The trivial apps have a
table of their own, as a server of a trivial app runs no MCP SDK code between
two requests; two trivial rows are also measured among the `MCPServer` calls,
whose code evicts the CPU caches between them, to show how much of the cost
is cache misses. Every session row but one reuses one session, whose token the
middleware verified once and then finds in its cache of verified tokens;
"session new to this replica" sends each request a session created by another
middleware with the same secret and the same store, so every request pays the
token check, as a session's first request on each replica does; each of its
requests is a new object, colder in the CPU caches than a request sent again,
so "session, new request objects" sends the cached session the same way, as
its fair base. The second phase
configures the OpenTelemetry SDK (spans exported inline to memory, metrics to
an in-memory reader); `otel-asgi` is `opentelemetry-instrumentation-asgi`'s
`OpenTelemetryMiddleware` with its default options.

The "session floor" rows are the hand-written minimum session layer
(`SessionFloor` in `benchmarks/_harness.py`): it reads the body, parses it
once with the standard library's `json`, looks the session id up in a dict
of sessions it takes as already verified, sets a context variable, replays
the body, splices the echo into the answer's `result._meta` and fixes
`Content-Length`. The echo is merged into any `_meta` the server set, as the
wire requires (the `mcp` SDK's results end with one): where the bytes do not
say where it goes, the answer is parsed (with `json`). No token check, no
store, no error handling: what any session layer must pay. "x floor" is each row's added cost as a multiple of
the floor's in the same table.

The "checked floor" rows (`CheckedSessionFloor`, same file) are that minimum
plus exactly the checks the middleware must make on a session-bearing
`tools/call`, each as cheaply as a careful hand would write it, and nothing
else: the request's own (a header dict, the method, path and content type, a
bounded body read), the server's own guard (`Host` and `Origin` in the
loopback allow-lists the `mcp` SDK's DNS-rebinding protection uses), a body
with a backslash or a member name on the path to the session twice
(`params`, `_meta`, the session member, `sessionId`, `state`: one regular
expression scan, as the middleware makes it) parsed with a hook that refuses
repeated names, the session id looked up in a dict of already
verified claims with its expiry and the `Mcp-Session-Id` header checked, the
principal binding, and one lookup in a dict of revoked or idle sessions (what
the store's `touch` stands for). "x checked" is each row's added cost as a
multiple of the checked floor's in the same table.

With the SDK configured, the floor is the "SDK floor" (`SdkFloor` in
`benchmarks/bench_asgi.py`): the OpenTelemetry work alone that the middleware
asks for on a session-bearing call, and nothing else. It starts the same
SERVER span (its name, attributes and link copied from one the middleware
recorded for the same request), runs the app in that span's context with the
session in baggage, ends the span and records one point of the same
histogram. No session, no parsing, no rewriting: what any layer that records
what the middleware records pays the SDK.

{asgi_tables(asgi)}

## As the number of live sessions grows

The session path on the trivial app, each request naming a session drawn at
random among N live ones: one middleware per N, holding N sessions in its
store and (as `sessions/create` leaves them) in its cache of verified tokens,
interleaved with the others and the trivial app alone, {asgi["rounds"]}
requests each. The verified-token cache holds
{asgi["tokens"]["cache_capacity"]:,} session ids; a miss costs the direct
HS256 check below.

{n_curve_table(asgi)}

## Checking a session id

`KeySet.verify_session_token` alone, {asgi["tokens"]["rows"][0]["checks"]}
checks of each kind interleaved: a token in the cache of verified tokens; a
token seen for the first time, checked directly (HMAC-SHA256, strict
base64url, the claims); the same through PyJWT (the path before the direct
check, still the path for ES256, EdDSA and any header the set's keys do not
mint). Tokens of {asgi["tokens"]["token_length"]} characters. A cache entry
(the token, its claims and its share of the dict, by `sys.getsizeof`) is
about {asgi["tokens"]["cache_entry_bytes"]} bytes:
{asgi["tokens"]["cache_entry_bytes"] * asgi["tokens"]["cache_capacity"] / 1e6:.0f} MB for a full cache of
{asgi["tokens"]["cache_capacity"]:,}.

{token_table(asgi)}

## Through uvicorn

`bench_uvicorn.py`: one uvicorn process per server (h11, access log off), all
pinned to CPU {uvicorn["server_cpus"]} with the same hash seed and memory layout,
the `httpx` client on CPU {uvicorn["client_cpus"]}; {uvicorn["requests"]}
`tools/call` requests per server, in slices of {uvicorn["slice"]} with
{uvicorn["concurrency"]} in flight on kept-alive connections, the servers taking
turns in a shuffled order each round; the trivial app's servers, whose
requests cost about a third as much, {uvicorn.get("trivial_weight", 1)} times as many
requests per slice and in all. Server CPU is the run time of the server
process's threads across its slices (`/proc/<pid>/task/*/schedstat`, in
nanoseconds; the `utime + stime` of `/proc/<pid>/stat` agrees within its 10 ms
ticks), so it includes uvicorn's HTTP handling: the whole server's cost of a
request. "± µs" comes from the spread of the per-round differences between a
server's slices and its base's (each round's load falls on both alike); it does
not cover what differs between two server processes, which the control row
shows. A multiple is given only where the row's added cost and its floor's are
both larger than their "± µs"; the verdict gives each multiple of the checked
floor its own 95% interval, from the same rounds (the ratio's spread over
them), and says where the target lies within it. The client shares the two
cores, so requests/s measures the pair; CPU per request is the server's own.

{uvicorn_table(uvicorn)}

## A long SSE response

`bench_sse.py`: a downstream ASGI app answers one session-bearing `tools/call`
with a `text/event-stream` of progress notifications ({sse["event_bytes"]} bytes
each, one ASGI message per event) ending with the response to the request,
which the middleware rewrites to add the session echo, so that it scans the
whole stream; {sizes}; called directly with a `send` that counts and drops
what it receives. "first event µs" is the median time from calling the app to
the first event reaching `send`, over {sse["ttfe_rounds"]} streams of that size
per app, bare and middleware alternating, each stopped once its first event
arrived; "events held back" the most events the app had sent that had not yet
reached the client (0: none is ever held); "traced peak" the `tracemalloc`
peak over what was allocated before the stream (in a second pass, as tracing
slows allocation down); "peak RSS growth" that of the process's `VmHWM`, reset
before each stream; CPU s and MB/s are those of the whole stream, the median
of {sse.get("rate_rounds", 1)} whole streams per app, the apps taking turns in a shuffled
order each round.

{sse_table(sse)}

## Scale out

`bench_scale_out.py`: real uvicorn processes serving `examples/quickstart.py`
(JSON responses), configured only by environment as a deployment is: one
replica on the memory store (the base), three replicas sharing one Redis
(`redis://`), and three replicas sharing a three-node Redis Cluster
(`redis+cluster://`, three masters). A load generator in another process on
the same machine runs {scale["args"]["conversations"]} conversations per setup,
{scale["args"]["concurrency"]} at a time, each `sessions/create`,
{scale["args"]["calls"]} `tools/call count` (an increment of `session.data`) and
`sessions/delete`, every request sent to the next replica in turn; p50 and p99
are per request, as the client sees them. "lost increments" counts the
conversations whose counts were not exactly 1, 2, …; "errors" every answer that
was not a result. The load keeps every setup saturated ({scale["args"]["concurrency"]}
conversations in flight), so the latencies include the queueing that throughput
at saturation brings. The Redis memory is `MEMORY USAGE` of the keys, summed
over the nodes, per session: {scale["args"]["memory_sessions"]} live sessions with
a counter, then the same sessions deleted (a deleted session keeps a tombstone
until its token would have expired); Redis's own bookkeeping per key comes on
top (see [sizing Redis](deployment.md#sizing-redis)). Replicas, Redis nodes and
the client share this machine's two cores, so the figures are a floor, not a
capacity plan: on one machine, more replicas add contention, not cores.

{scale_out_table(scale)}

## Against the express lane ({LANE_REVISION})

`bench_versions.py --base {LANE_REVISION}`, and with `--trivial`: the package
as it was at {LANE_REVISION}, the last commit with the express lane
(`_express.py`, a second, hand-inlined path for the usual request), exported
with `git archive` under another name and imported beside this code. Both
middlewares wrap the same app in one process, beside the bare app, a
pass-through control and the session floor, called one request at a time in
one shuffled sequence; CPU time of the process around each call; no
OpenTelemetry SDK; each app in a process of its own. The requests are shared
out among {results["versions"].get("processes", 1)} such processes, run one
after another, and their samples pooled: the median per case. "adds" is
the added cost over the bare app sent a request without a session, for both
kinds of request, as the script prints it ("±" the 95% interval); "x floor"
reads a session-bearing call against the session floor, each over the bare
app sent the same session-bearing body, as in the tables above. The target:
this code's added cost on a session-bearing `tools/call` at most
{LANE_MULTIPLE:g}x the lane's; the sessionless ratio is for information.

{lane_table(results)}

{gateway_section(results["gateway"])}
## Reading the numbers

- **The control.** "pass-through control" wraps the app in an ASGI layer that
  does nothing. Its ratio should read 1.00: how far it strays (and its
  "± µs") is the noise of this run, and a smaller difference elsewhere means
  nothing.
- **The base of each row** is named in the table: the session case is
  compared with the bare app sent the same session-bearing body (which it
  ignores: the SDK itself pays for parsing the larger `_meta`), the SDK rows
  with the bare app under the SDK. "bare MCPServer + SDK" compares across the
  two phases, which are not interleaved.
- **The targets** (issue 6): the middleware adds at most 5% to a
  session-bearing `tools/call` on the bare `MCPServer`, judged both on the
  ASGI app alone (direct calls) and on the whole server (uvicorn's server CPU
  per request, HTTP parsing included); at most 40 µs of CPU per request on a
  trivial app, with or without a session; with the OpenTelemetry SDK
  configured, less added CPU per request than
  `opentelemetry-instrumentation-asgi` on the same app; and a 100 MB SSE
  response with constant memory (the traced peak grows by less than
  {CONSTANT_MEMORY_KIB:.0f} KiB from the smallest stream to the largest) and no
  added delay to the first event (no event ever held back, and the first
  event later only by the request's own checks, within the 40 µs budget).
- **The floors.** "session floor" is the least a session layer can do
  (above); "x floor" reads every row against it in the same table, so a
  session row at 2.7 costs 2.7 times the minimum. The floor verifies no
  token and touches no store: the distance to it is what checking,
  revocation, the error paths and telemetry cost. "checked floor" makes the
  checks a session-bearing call must make and nothing more; "x checked"
  reads every row against it, and the target is a session-bearing
  `tools/call` at most {CHECKED_MULTIPLE:g}x the checked floor, directly and
  through uvicorn, on both apps (the multiple of the session floor is kept
  beside it, for information).
- **Issue 14's targets**: a session's first request on a replica (its token
  not yet in the cache of verified tokens) adds at most
  {FIRST_REQUEST_BUDGET_US:.0f} µs over a cached one for HS256, judged on the
  check alone and through the middleware (against the cached session sent in
  new request objects too); and the session path at N = 60,000 live
  sessions costs at most {FLAT_RATIO}x its cost at N = 100.
- **The lane's target**: with the express lane gone, a session-bearing
  `tools/call` through the one pipeline adds at most {LANE_MULTIPLE:g}x what
  the lane added at {LANE_REVISION}, the two measured side by side in one
  process (rows measured in separate processes, or on separate pages, can
  differ by more than that: see "Where the time goes"). It needs
  {LANE_REVISION} in the repository; in a shallow clone the page says the
  comparison could not run.
- **Issue 37's target**: after the rewrite that asks the server instead of
  rebuilding it, a session-bearing `tools/call` on the `MCPServer` adds at
  most {ASK_MULTIPLE:g}x what it added at {ASK_REVISION} (`bench_versions.py`,
  side by side, as for the lane), and no more than Starlette's cookie
  `SessionMiddleware` adds in the same `bench_asgi.py` run, each tool reading
  its session.
- **Cache state.** The same code costs more when other code ran in between
  and evicted it from the CPU caches: compare "trivial + middleware, session"
  in its own table with its "among MCPServer calls" row, and with the
  uvicorn server, where uvicorn's own code runs between requests. A tight
  loop of one request type reads lower still. Ratios compare apps in the same
  cache state.
- **Two uvicorn processes** whose code differs by next to nothing can differ
  in CPU per request by tens of µs, the "± µs" of neither showing it (where
  their objects land in memory differs with the code each loaded): the
  "pass-through control" row through uvicorn, one do-nothing layer, shows
  how far. On the
  MCPServer, whose requests cost over 800 µs there, that is as large as what
  the middleware adds, so its uvicorn rows are read beside the direct ASGI
  rows, which measure the middleware's own cost in one process.
- **Throughput through uvicorn** is bounded by the client as much as by the
  server on two cores; read the server CPU per request for the server's cost.

## Where the time goes

There is one pipeline (see [architecture](architecture.md)), and the usual
request, one JSON-RPC message of the draft naming a session whose token is in
the verified-token cache, is its fast case rather than a second path. The
planner builds the single call directly (with the draft alone, one lookup in
its method table); the session service's cached-token branch is one dict
lookup, the verified claims with their expiry checked; the forward step
prepares an `Exchange` (the session attached to the scope, `request.state`
and `get_session()`'s context variable, the response rewriter's `send`) and
`__call__` calls the app itself, so no coroutine of the pipeline is on the
stack while the app runs, where every suspension of the app would pass
through it; and the response rewriter holds the JSON body and splices the
echo into the original bytes without serializing the result again. A
session-bearing `tools/call` with a cached token spends its time on:

- **reading the request**: the header dictionary, the body, one scan for
  the member names on the path to the session (after a backslash test: it
  tells both whether the body spells a session member and whether a name
  repeats), and one parse with pydantic-core's `from_json` (the `mcp` SDK's
  own parser, about twice as fast as `json`);
- **the session**: the verified-token cache, the principal binding, the
  store's `touch` (revocation and idle expiry are checked on every request)
  and the `Session` object;
- **the response**: one parse, to be sure where the result ends and what its
  `_meta` holds, and the echo spliced into the original bytes (the response
  is never serialized again), with a new `Content-Length`;
- **the glue**: the plan and its call, the resolver's loop over the sources,
  the replayed `receive`, and the `Exchange` (what it attaches, and undoes in
  `finish`).

On the express lane at {LANE_REVISION}, which did the same work written inline in
one closure, timing each step (each wrapped in a clock; alone, then between
`MCPServer` calls) gave about 5 µs alone and 10 µs between server calls for
reading the request, 3.5 and 7.5 µs for the session, 3 and 9 µs for the
response; those times have not been taken again on the pipeline. Between
server calls, every call and every object counts two to three times: when
the lane was written, the same lane written as small steps (a class per
step, the general `resolve`, a response rewriter object) added 1.1 to 1.2
times what it added as one closure (`bench_versions.py`, A/B in one run).
The pipeline's fast case is now held to {LANE_MULTIPLE:g} times what the
lane itself adds, the two measured side by side in this run: see the verdict
and "Against the express lane" above.

Profiled with a sampling profiler (py-spy) and per-line opcode counts, the
pipeline's fast case had no single hot spot: its excess over the lane was
spread over the steps' boundaries. What took it from about 1.45 to about 1.25
times the lane (`bench_versions.py --base` the previous commit, one change at
a time, on the trivial app): the body scanned once for both questions above,
where it had been searched for the session member's name twice more (about
8%); no `Target` built for the usual response, the rewriter given the echo
alone, and with telemetry the operation that observes the spliced result
(about 3%); `Era` and `SessionStatus` members read as module constants,
since on CPython 3.11 reading an Enum member through its class costs a
descriptor call, about 90 ns against 15 for a module global, and the usual
request read six of them (about 4%); the response parsed with the fast parser
directly; positional calls. Folding a step's helper into its caller (the
forward step's echo decision into `prepare`) measured within the noise and was
left out.

Then counted rather than timed: `valgrind --tool=callgrind` counts the
instructions of a loop of requests exactly (to about 20 instructions a
request with `PYTHONHASHSEED=0`), whatever else the machine runs, where a
timed A/B moves by 2 to 3% from run to run. On the trivial app the usual
request took about 156,000 instructions against 132,000 for the checked floor
and 14,000 for the bare app. CPython 3.11's inline caches showed what the
timings could not: reading through an instance a class default the instance
never set, a `NamedTuple` field, or a property is a generic attribute lookup
(a descriptor call for the last two) on every read, where an attribute the
instance set, or a slot, is one load. The request's objects (`Plan`, `Call`,
`Exchange`, `ResponseRewriter`) now set every attribute in `__init__`, in
slots; `EchoOnly` and `SessionRef` are unpacked once; the session's expiry is
computed once: about 152,000 instructions, 3% less added (0.96 of the
previous commit's added time, `bench_versions.py --base`, trivial app). An
Enum member read through its class runs enum's own descriptor, in Python, on
3.11: about 900 instructions against 20 for a module constant. With the span
kind and the era read as constants and the tool name bounded once, a traced
request went from about 572,000 instructions to 569,000 (the SDK floor's is
385,000).

Counting cache misses as well (callgrind's cache simulation, the caches made
cold before each request by writing 8 MB) put the rest of the distance in
the interpreter itself: the fast case executes about 1,670 bytecode
instructions in 31 functions against the checked floor's 625, half of them
in one function; it misses the last-level cache on about 1,310 data lines a
request against the floor's 910, most of them the bytecode and the objects
it reads. The instruction fetches of the interpreter's own C code miss alike
in both (about 1,800 lines). Between `MCPServer` calls, and more so while other
tenants share the machine's caches, those data lines come from memory,
which is why the multiple of the floor on the `MCPServer` moves with the
machine's load while the trivial app's barely does.

Every step costs two to three times more between `MCPServer` calls than in a
loop of its own (the server's code evicts it from the CPU caches); the floor's
steps too, but a layer of more steps loses more to the caches, which is why
the multiples of the floor read higher between `MCPServer` calls than on the
trivial app. The distance to the floor is what the floor leaves out. Taking
the steps away one at a time, on the lane at {LANE_REVISION} (`bench_versions.py`,
each variant against the unchanged code in one process, the floor beside
them; 40 to 60 µs added per call and 18 to 25 µs for the floor in those
runs):

- **the response**: parsing it costs about 6 µs and splicing the echo in
  another 6 (finding the splice point, building the echo); without either
  the session path adds 0.77 times as much. The `MCPServer`'s result already
  has a `_meta` (its `serverInfo`), so the echo must go inside it, after the
  last member the server wrote, and only a parse tells where that is. Finding
  it in the bytes instead (the strings taken out with a regular expression,
  then the brackets matched) takes 5 µs in a loop of its own against 1.2 µs
  for pydantic-core's parse;
- **the store's `touch`** (revocation and idle expiry, on every request):
  about 1.6 µs;
- **the echo built once per session** rather than per response: about 1 µs
  (0.97 and 0.98), too little to pay for one more cache to bound;
- with the response not handled at all, no `touch` and one `Session` object
  reused, the lane still read 1.4 and 1.6 times the floor: the request's own
  checks (the header dictionary, the method, path and content type, the
  body's length limit, the repeated-name scan, the token cache and its
  expiry) already cost 0.6 to 0.8 times the floor on a call without a
  session, where the floor reads no header at all.

A throwaway prototype that did the lane's work for this one request in a
single function (no era header check, no principal binding, no fallbacks)
read 1.6 to 1.7 times the floor between `MCPServer` calls, against the lane's
2.1 to 2.4 in the same runs (at {LANE_REVISION}): the checks themselves, not the way
they are written, keep the session path above the floor.

The rows measured between `MCPServer` calls also move from one run to the
next, each run a new process: the bare server steadies within a few per cent,
but what a layer adds among its calls can read 1.2 to 1.45 times more in one
run than in another (Starlette's cookie session +73 µs in one run and +105 µs
in another, the same hour). Read such rows within one page; to compare two
versions of the middleware, `benchmarks/bench_versions.py` runs both in one
process, request by request, as "Against the express lane" does.

With an OpenTelemetry SDK recording, the usual request is still the fast
case: `start_operations` starts a SERVER span for its call (its attributes,
the link to the session's creation span, or the conversation id a host sent
for a request without a session), the `Exchange` makes it current while the
app runs, and `finish` ends it and records the operation's duration. Most of
that cost is the SDK's own: the "SDK floor" rows do that SDK work and nothing
else, and read about 0.2 times what otel-asgi adds. In one run on the
trivial app at {LANE_REVISION}, taking the parts away one at a time (each variant a
middleware of its own), the SDK floor added 0.20 times what otel-asgi added,
the session path without telemetry 0.09 times (through the lane), and the
middleware with both 0.38 times when traced requests took the pipeline of
then (0.33 once they took the lane): the session path and the SDK's work
alone come to about 0.3 times before any glue between them, hence a target
of {OTEL_SHARE:g}x: 0.3 would take recording less than the middleware
records (the conventions' attributes, the link to the session's creation,
the duration metric).

A token not yet verified on this replica pays the direct HS256 check once
(see "Checking a session id"); it is cached until it expires or the cache of
verified tokens fills. An SSE stream costs one call per event: a chunk that is
one notification event passes by its first bytes and its line ends, one with
no `"id"` member and no backslash by a substring scan, and only a chunk that
may hold the response is parsed.

## How to reproduce

```sh
pip install -e ".[demo]" --group test       # the mcp SDK, uvicorn, httpx, the OpenTelemetry SDK, otel-asgi
python benchmarks/run_all.py --write docs/performance.md
```

Each script also runs on its own and prints its table:
`python benchmarks/bench_asgi.py`, `bench_uvicorn.py`, `bench_sse.py`
(`--help` for their sizes; `--quick` (or `--smoke`) for a few requests, as the tests run
them). Run on a quiet machine if you can; on a busy one, the control rows
tell how much to trust the rest. `bench_versions.py --base REV` compares this code with
any earlier revision in one run (the page runs it against {LANE_REVISION}, with and without
`--trivial`; `--sdk` adds the SDK and otel-asgi). Not on this page: `bench_stores.py` (each
store's cost per operation), `bench_handle_vs_session.py` (a handle's cost against a
session's) and `bench_handles.py`.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="OUT", help="write the page here (default: standard output)")
    parser.add_argument(
        "--smoke", "--quick", dest="smoke", action="store_true", help="run every benchmark in its quick mode"
    )
    parser.add_argument("--from", dest="source", metavar="DIR", help="render the JSON files in DIR; run nothing")
    parser.add_argument("--keep", metavar="DIR", help="keep the benchmarks' JSON files in DIR")
    args = parser.parse_args()
    run_info = None
    if args.source:
        results = load(Path(args.source))
        if (Path(args.source) / RUN_FILE).exists():
            run_info = json.loads((Path(args.source) / RUN_FILE).read_text())
    else:
        with tempfile.TemporaryDirectory() as scratch:
            directory = Path(args.keep) if args.keep else Path(scratch)
            directory.mkdir(parents=True, exist_ok=True)
            results, run_info = run(directory, args.smoke)
    smoke = args.smoke or any(result.get("smoke", False) for result in results.values())
    page = render(results, run_info, smoke)
    if args.write:
        Path(args.write).write_text(page)
        print(f"wrote {args.write}", file=sys.stderr)
    else:
        print(page)


if __name__ == "__main__":
    main()
