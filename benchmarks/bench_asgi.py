"""Per-request CPU of the middleware, calling ASGI apps directly, against what a user would stack instead.

Each table's cases are called one request at a time in one shuffled sequence, with the CPU time of the
process around each call, and a pass-through layer as the control (its ratio reads 1.00: how far it strays
is the run's noise). The rounds are shared out among ``--processes`` processes run one after another and
pooled, each process having its own memory layout and hash seed.

- ``MCPServer``: the ``mcp`` SDK's server (JSON responses, one ``echo`` tool that reads its session), bare,
  behind this middleware (the tool reads ``get_session()``) and behind Starlette's cookie
  ``SessionMiddleware`` (a signed cookie, the tool reads ``request.session``).
- ``trivial app``: reads the body and its session and answers a fixed result, so that what a layer costs
  shows with nothing to hide it; with a session new to this replica (minted by another middleware with the
  same keys and store, so every request pays the token check a session's first request pays) against the
  same cached session sent in new request objects, and PyJWT's own ``jwt.decode`` of those tokens.
- ``live sessions``: the trivial app's session path, each request naming a session drawn among N.
- With the OpenTelemetry SDK configured (spans exported inline to memory, metrics to an in-memory reader):
  the middleware against ``opentelemetry-instrumentation-asgi``'s ``OpenTelemetryMiddleware``.

    python benchmarks/bench_asgi.py                 # full run
    python benchmarks/bench_asgi.py --quick         # a few requests: the tests check it runs
    python benchmarks/bench_asgi.py --json out.json # also write the results for run_all.py
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import itertools
import json
import logging
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

import jwt
from _floor import CheckedFloor
from _harness import (
    SECRET,
    PassThrough,
    Request,
    build_mcp_app,
    call,
    compared,
    create_session,
    finish,
    interleaved,
    lifespan,
    load_average,
    request,
    section,
    session_request,
    tools_call,
    trivial_app,
    us,
    verdict,
)
from _steps import steps_section
from itsdangerous import TimestampSigner
from opentelemetry import trace
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.middleware.sessions import SessionMiddleware
from starlette.types import ASGIApp

from mcp_sessions import KeySet, MCPSessionMiddleware
from mcp_sessions.stores import MemoryStore
from mcp_sessions.telemetry import SessionSpanProcessor

WARMUP = 20  # unmeasured calls of each case first
SESSION_COUNTS = (100, 5_000, 20_000, 60_000, 100_000)
QUICK_SESSION_COUNTS = (100, 1_000)
COOKIE_MULTIPLE = 2.0  # a session-bearing tools/call adds at most this multiple of what the cookie session adds
FLOOR_MULTIPLE = 3.5  # the session path adds at most this multiple of what the hand-written floor adds
OTEL_MULTIPLE = 0.5  # with the SDK recording, at most this multiple of what otel-asgi adds
FIRST_REQUEST_MARGIN_US = 50.0  # a session's first request on a replica: at most jwt.decode plus this
FLAT_RATIO = 1.2  # the session path among the most live sessions, against N = 100
MCP, TRIVIAL, LIVE, MCP_SDK, TRIVIAL_SDK = (
    "MCPServer",
    "trivial app",
    "live sessions",
    "MCPServer + SDK",
    "trivial + SDK",
)


class Case(NamedTuple):
    run: Callable[[], Awaitable[Any]]  # one call (a request, or a jwt.decode)
    base: str  # the case it is compared with (itself for a base)
    group: str  # the cases interleaved together, one table
    echoed: bool | None = None  # an ASGI case: whether its answer carries the session echo


def asgi(app: ASGIApp, requests: Request | list[Request], base: str, group: str, echoed: bool) -> Case:
    """A case calling ``app`` with ``requests`` (a list: a new one each call, in turn)."""
    following = itertools.cycle(requests if isinstance(requests, list) else [requests]).__next__
    return Case(lambda: call(app, *following()), base, group, echoed)


def floor(app: ASGIApp, token: str) -> CheckedFloor:
    """The hand-written floor in front of ``app``, ``token`` already verified (its claims in its cache)."""
    claims = jwt.decode(token, options={"verify_signature": False})
    return CheckedFloor(app, {token: claims}, principal_key=SECRET.encode())


def cookie_request() -> Request:
    """A request carrying a session cookie as Starlette's ``SessionMiddleware`` signs it."""
    payload = TimestampSigner(SECRET).sign(base64.b64encode(json.dumps({"conversation": "c-12345678"}).encode()))
    return request(
        tools_call(), [(b"mcp-method", b"tools/call"), (b"mcp-name", b"echo"), (b"cookie", b"session=" + payload)]
    )


async def cases_without_sdk(stack: contextlib.AsyncExitStack, rounds: int, counts: tuple[int, ...]) -> dict[str, Case]:
    bare = await stack.enter_async_context(lifespan(build_mcp_app()))
    keys, store = KeySet.from_secret(SECRET), MemoryStore()
    middleware = await stack.enter_async_context(lifespan(MCPSessionMiddleware(build_mcp_app(), keys=keys)))
    cookies = SessionMiddleware(bare, secret_key=SECRET)
    server_token = await create_session(middleware)
    plain, with_session = session_request(), session_request(server_token)
    trivial = MCPSessionMiddleware(trivial_app, keys=keys, store=store)
    token = await create_session(trivial)
    # Sessions minted by another replica (the same keys' material, the same store): this one has not
    # verified their tokens yet, so each request pays the check a session's first request on a replica pays.
    replica = MCPSessionMiddleware(trivial_app, keys=KeySet.from_secret(SECRET), store=store)
    fresh = [await create_session(replica) for _ in range(rounds + WARMUP)]
    tokens = itertools.cycle(fresh).__next__

    async def decode() -> None:
        jwt.decode(tokens(), SECRET, algorithms=["HS256"], audience=keys.audience, issuer=keys.issuer)

    async def nothing() -> None:
        pass

    cases = {
        "bare MCPServer": asgi(bare, plain, "bare MCPServer", MCP, False),
        "pass-through control": asgi(PassThrough(bare), plain, "bare MCPServer", MCP, False),
        "middleware, no session": asgi(middleware, plain, "bare MCPServer", MCP, False),
        # The bare server sent the session-bearing body it ignores: the SDK itself pays for the larger _meta.
        "bare, session body": asgi(bare, with_session, "bare MCPServer", MCP, False),
        "middleware, with session": asgi(middleware, with_session, "bare, session body", MCP, True),
        "hand-written floor, with session": asgi(
            floor(bare, server_token), with_session, "bare, session body", MCP, True
        ),
        "Starlette cookie session": asgi(cookies, cookie_request(), "bare MCPServer", MCP, False),
        "trivial app": asgi(trivial_app, plain, "trivial app", TRIVIAL, False),
        "trivial pass-through": asgi(PassThrough(trivial_app), plain, "trivial app", TRIVIAL, False),
        "trivial + middleware, no session": asgi(trivial, plain, "trivial app", TRIVIAL, False),
        "trivial + middleware, session": asgi(trivial, session_request(token), "trivial app", TRIVIAL, True),
        "trivial + middleware, session, new request objects": asgi(
            trivial, [session_request(token) for _ in fresh], "trivial app", TRIVIAL, True
        ),
        "trivial + middleware, session new to this replica": asgi(
            trivial, [session_request(new) for new in fresh], "trivial app", TRIVIAL, True
        ),
        "trivial + hand-written floor, session": asgi(
            floor(trivial_app, token), session_request(token), "trivial app", TRIVIAL, True
        ),
        "trivial + Starlette cookie session": asgi(
            SessionMiddleware(trivial_app, secret_key=SECRET), cookie_request(), "trivial app", TRIVIAL, False
        ),
        "nothing": Case(nothing, "nothing", TRIVIAL),
        "PyJWT jwt.decode of a new session's token": Case(decode, "nothing", TRIVIAL),
        "trivial app, N-curve base": asgi(trivial_app, plain, "trivial app, N-curve base", LIVE, False),
    }
    for count in counts:
        live = KeySet.from_secret(SECRET)
        # Minted as sessions/create mints them, which leaves each token in the verified-token cache.
        minted = [live.mint_session_token(ttl=3600)[0] for _ in range(count)]
        app = MCPSessionMiddleware(trivial_app, keys=live, store=MemoryStore(max_sessions=count + 100))
        drawn = [session_request(random.choice(minted)) for _ in range(rounds + WARMUP)]
        cases[f"session path, N={count}"] = asgi(app, drawn, "trivial app, N-curve base", LIVE, True)
    return cases


async def cases_with_sdk(stack: contextlib.AsyncExitStack, meters: MeterProvider) -> dict[str, Case]:
    bare = await stack.enter_async_context(lifespan(build_mcp_app()))
    middleware = await stack.enter_async_context(
        lifespan(MCPSessionMiddleware(build_mcp_app(), secret=SECRET, meter_provider=meters))
    )
    trivial = MCPSessionMiddleware(trivial_app, secret=SECRET, meter_provider=meters)
    plain, with_session = session_request(), session_request(await create_session(middleware))
    trivial_session = session_request(await create_session(trivial))
    otel_asgi = OpenTelemetryMiddleware(bare, meter_provider=meters)
    return {
        "bare MCPServer + SDK": asgi(bare, plain, "bare MCPServer + SDK", MCP_SDK, False),
        "pass-through + SDK": asgi(PassThrough(bare), plain, "bare MCPServer + SDK", MCP_SDK, False),
        "bare, session body + SDK": asgi(bare, with_session, "bare MCPServer + SDK", MCP_SDK, False),
        "middleware, session + SDK": asgi(middleware, with_session, "bare, session body + SDK", MCP_SDK, True),
        "otel-asgi + SDK": asgi(otel_asgi, plain, "bare MCPServer + SDK", MCP_SDK, False),
        "trivial app + SDK": asgi(trivial_app, plain, "trivial app + SDK", TRIVIAL_SDK, False),
        "trivial + middleware, session + SDK": asgi(trivial, trivial_session, "trivial app + SDK", TRIVIAL_SDK, True),
        "trivial + otel-asgi + SDK": asgi(
            OpenTelemetryMiddleware(trivial_app, meter_provider=meters), plain, "trivial app + SDK", TRIVIAL_SDK, False
        ),
    }


async def measured(cases: dict[str, Case], rounds: int, after: Callable[[], object]) -> dict[str, list[int]]:
    """Each group's cases interleaved, group after group, once each case is warm and answers as it should."""
    for name, case in cases.items():
        for _ in range(WARMUP):
            answer = await case.run()
            if case.echoed is not None:
                status, raw = answer
                assert status == 200 and b'"isError":false' in raw.replace(b" ", b""), (name, raw)
                assert (b"io.modelcontextprotocol/session" in raw) == case.echoed, (name, raw)
            after()
    samples: dict[str, list[int]] = {}
    for group in dict.fromkeys(case.group for case in cases.values()):
        samples |= await interleaved({n: c.run for n, c in cases.items() if c.group == group}, rounds, after)
    return samples


async def one_process(rounds: int, smoke: bool) -> dict[str, Any]:
    """This process's samples, without the SDK and then with it (a global TracerProvider is set once)."""
    async with contextlib.AsyncExitStack() as stack:
        first = await cases_without_sdk(stack, rounds, QUICK_SESSION_COUNTS if smoke else SESSION_COUNTS)
        samples = await measured(first, rounds, lambda: None)
        provider, exporter = TracerProvider(), InMemorySpanExporter()
        provider.add_span_processor(SessionSpanProcessor())
        provider.add_span_processor(SimpleSpanProcessor(exporter))  # export work counted inline: an upper bound
        trace.set_tracer_provider(provider)
        meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
        second = await cases_with_sdk(stack, meters)
        samples |= await measured(second, rounds, exporter.clear)
    cases = {name: (case.base, case.group) for name, case in (first | second).items()}
    return {"samples": samples, "cases": cases}


def in_processes(rounds: int, smoke: bool, processes: int) -> dict[str, Any]:
    """The samples of ``processes`` runs of this script, one after another, pooled."""
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        for index in range(processes):
            out = Path(folder) / f"{index}.json"
            command = [sys.executable, __file__, "--rounds", str(rounds), "--samples-out", str(out)]
            subprocess.run([*command, *(["--quick"] if smoke else [])], check=True, stdout=subprocess.DEVNULL)
            runs.append(json.loads(out.read_text()))
    samples = {name: [value for run in runs for value in run["samples"][name]] for name in runs[0]["samples"]}
    return {"samples": samples, "cases": runs[0]["cases"]}


def sections_and_verdicts(
    rows: dict[str, dict[str, Any]], counts: tuple[int, ...], requests: int
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    header = ["app", "median CPU µs", "ratio", "added µs", "± µs (95%)", "base"]

    def table(group: str) -> list[list[str]]:
        return [
            [
                r["name"],
                f"{r['median_us']:.1f}",
                f"{r['ratio']:.3f}",
                f"{r['added_us']:+.1f}",
                f"{r['ci_us']:.1f}",
                r["base"],
            ]
            for r in rows.values()
            if r["group"] == group
        ]

    how = (
        f"`bench_asgi.py`: {requests} requests per case, the cases of each table called one request at a time in "
        "one shuffled sequence, the CPU time of the process (`time.process_time_ns`) around each call; the median "
        'per case, "± µs" the half-width of a 95% interval on the added time (order statistics of the two medians).'
    )
    n_rows = [rows[f"session path, N={n}"] for n in counts]
    sections = [
        section(f"Per-request CPU, calling the ASGI apps directly: {MCP}", how, header, table(MCP)),
        section(
            f"Per-request CPU, calling the ASGI apps directly: {TRIVIAL}",
            'The trivial app reads the body and its session and answers a fixed result. "session new to this '
            'replica" sends each request a session minted by another replica with the same keys, so every request '
            'pays the token check; "new request objects" sends the cached session the same way, its fair base. '
            '"nothing" is an empty coroutine, the base of PyJWT\'s `jwt.decode` of the same tokens.',
            header,
            table(TRIVIAL),
        ),
        section(
            "As the number of live sessions grows",
            "The trivial app's session path, each request naming a session drawn at random among N live ones "
            "(one middleware per N, each token left in its verified-token cache as `sessions/create` leaves it).",
            ["live sessions N", "median CPU µs", "added µs", "± µs (95%)", "added, x N=100"],
            [
                [
                    f"{n:,}",
                    f"{r['median_us']:.1f}",
                    f"{r['added_us']:+.1f}",
                    f"{r['ci_us']:.1f}",
                    f"{r['added_us'] / n_rows[0]['added_us']:.2f}",
                ]
                for n, r in zip(counts, n_rows, strict=True)
            ],
        ),
        section(
            "With the OpenTelemetry SDK configured",
            "A global `TracerProvider` with the `SessionSpanProcessor` and a `SimpleSpanProcessor` to memory (export "
            "work counted inline), a `MeterProvider` with an in-memory reader; `otel-asgi` is "
            "`opentelemetry-instrumentation-asgi`'s `OpenTelemetryMiddleware` with its default options. On the "
            "MCPServer the middleware runs the same instructions as on the trivial app, and takes longer to run "
            "them: valgrind's cachegrind, the process run for 100 and for 400 requests and the difference divided "
            "by 300, counts 749k instructions added to an MCPServer request and 785k to the trivial app's (otel-asgi "
            "1,810k and 1,890k: ours is 0.41x its count on both), and as many first-level cache misses on both apps "
            "(15.5k and 15.3k in its instruction cache, otel-asgi 32.3k and 31.9k). What differs is what each "
            "instruction costs once an MCPServer request has run, in what cachegrind does not model (the second-level "
            "cache, branch prediction). The loop runs once between requests, untimed, as a server's does: before, no "
            "request let it run, so asyncio never dropped the 5 s timers the `mcp` SDK arms and cancels for each "
            "request, each holding its request's context, and the heap grew by each request's spans and session "
            "(1.37 page faults a request behind the middleware, 1.05 behind otel-asgi, 0.05 bare; none since).",
            header,
            table(MCP_SDK) + table(TRIVIAL_SDK),
        ),
    ]
    verdicts = [
        floor_verdict(rows),
        cookie_verdict(rows),
        first_request_verdict(rows),
        flat_verdict(counts, n_rows),
        otel_verdict(rows),
    ]
    return sections, verdicts


def floor_verdict(rows: dict[str, dict[str, Any]]) -> dict[str, str]:
    pairs = {
        MCP: (rows["middleware, with session"], rows["hand-written floor, with session"]),
        TRIVIAL: (rows["trivial + middleware, session"], rows["trivial + hand-written floor, session"]),
    }
    multiples = {app: ours["added_us"] / floor["added_us"] for app, (ours, floor) in pairs.items()}
    return verdict(
        f"A session-bearing `tools/call` adds ≤ {FLOOR_MULTIPLE:g}x what the hand-written floor adds "
        "(`benchmarks/_floor.py`: the same checks, no store, no telemetry)",
        "; ".join(
            f"{app}: this middleware {us(ours['added_us'], ours['ci_us'])}, the floor "
            f"{us(floor['added_us'], floor['ci_us'])}"
            for app, (ours, floor) in pairs.items()
        ),
        all(multiple <= FLOOR_MULTIPLE for multiple in multiples.values()),
        ", ".join(f"{multiple:.2f}x on the {app}" for app, multiple in multiples.items()),
    )


def cookie_verdict(rows: dict[str, dict[str, Any]]) -> dict[str, str]:
    ours, cookie = rows["middleware, with session"], rows["Starlette cookie session"]
    multiple = ours["added_us"] / cookie["added_us"] if cookie["added_us"] > 0 else None
    control = rows["pass-through control"]["ratio"]
    return verdict(
        f"A session-bearing `tools/call` on an `MCPServer` adds ≤ {COOKIE_MULTIPLE:g}x what Starlette's cookie "
        "`SessionMiddleware` adds (each tool reading its session)",
        f"direct ASGI: this middleware {us(ours['added_us'], ours['ci_us'])}, the cookie session "
        f"{us(cookie['added_us'], cookie['ci_us'])}; the pass-through control reads {control:.3f}",
        None if multiple is None else multiple <= COOKIE_MULTIPLE,
        "the cookie session added nothing measurable" if multiple is None else f"{multiple:.2f}x",
    )


def first_request_verdict(rows: dict[str, dict[str, Any]]) -> dict[str, str]:
    first = rows["trivial + middleware, session new to this replica"]
    cached = rows["trivial + middleware, session, new request objects"]
    decode = rows["PyJWT jwt.decode of a new session's token"]
    over = first["added_us"] - cached["added_us"]
    budget = decode["added_us"] + FIRST_REQUEST_MARGIN_US
    return verdict(
        "A session's first request on a replica adds ≤ PyJWT's `jwt.decode` of its token "
        f"+ {FIRST_REQUEST_MARGIN_US:g} µs over a cached one",
        f"trivial app, direct ASGI: {us(over)} over the cached session sent in new request objects; "
        f"`jwt.decode` of the same tokens {us(decode['added_us'], decode['ci_us'])}",
        over <= budget,
        f"{abs(budget - over):.1f} µs {'to spare' if over <= budget else 'over'}",
    )


def flat_verdict(counts: tuple[int, ...], n_rows: list[dict[str, Any]]) -> dict[str, str]:
    least, most = n_rows[0]["added_us"], n_rows[-1]["added_us"]
    flat = most / least if least > 0 else None
    return verdict(
        f"Flat as sessions grow: with N = {counts[-1]:,} live sessions within {FLAT_RATIO:g}x of N = {counts[0]:,}",
        "; ".join(f"N={n:,}: {us(row['added_us'])}" for n, row in zip(counts, n_rows, strict=True)),
        None if flat is None else flat <= FLAT_RATIO,
        f"N={counts[0]:,} added nothing measurable" if flat is None else f"{flat:.2f}x",
    )


def otel_verdict(rows: dict[str, dict[str, Any]]) -> dict[str, str]:
    pairs = {
        MCP: (rows["middleware, session + SDK"]["added_us"], rows["otel-asgi + SDK"]["added_us"]),
        TRIVIAL: (
            rows["trivial + middleware, session + SDK"]["added_us"],
            rows["trivial + otel-asgi + SDK"]["added_us"],
        ),
    }
    return verdict(
        f"With the OpenTelemetry SDK configured, the middleware with a session adds ≤ {OTEL_MULTIPLE:g}x what "
        "`opentelemetry-instrumentation-asgi` adds",
        "; ".join(
            f"{app}: this middleware {us(ours)}, otel-asgi {us(theirs)}" for app, (ours, theirs) in pairs.items()
        ),
        all(ours <= OTEL_MULTIPLE * theirs for ours, theirs in pairs.values()),
        ", ".join(
            f"{ours / theirs:.2f}x otel-asgi's on the {app}" for app, (ours, theirs) in pairs.items() if theirs > 0
        ),
    )


def main(args: argparse.Namespace) -> None:
    began = time.monotonic(), load_average()
    per_process = -(-args.rounds // args.processes)
    pooled = in_processes(per_process, args.quick, args.processes)
    samples, cases = pooled["samples"], pooled["cases"]
    rows = {name: compared(samples, name, base) | {"group": group} for name, (base, group) in cases.items()}
    counts = QUICK_SESSION_COUNTS if args.quick else SESSION_COUNTS
    sections, verdicts = sections_and_verdicts(rows, counts, per_process * args.processes)
    logging.disable(logging.WARNING)  # the middleware's note on the trivial app, as in the measuring processes
    sections.append(steps_section(200 if args.quick else 20_000))
    finish("asgi", args.json, args.quick, began, sections, verdicts, rows=list(rows.values()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6000, help="requests per case, shared out among the processes")
    parser.add_argument("--processes", type=int, default=3, help="processes measured one after another, pooled")
    parser.add_argument("--quick", "--smoke", action="store_true", help="a few requests only")
    parser.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    parser.add_argument("--samples-out", help=argparse.SUPPRESS)  # a child process: its samples, to this file
    args = parser.parse_args()
    if args.samples_out:
        logging.disable(logging.WARNING)  # the servers' start and stop lines, the middleware's note on the trivial app
        Path(args.samples_out).write_text(json.dumps(asyncio.run(one_process(args.rounds, args.quick))))
    else:
        if args.quick:
            args.rounds, args.processes = 20, 1
        main(args)
