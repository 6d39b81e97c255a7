"""Per-request CPU cost of the middleware, measured by calling ASGI apps directly.

The compared apps are called request by request in a shuffled order (this
machine is noisy), and a pass-through wrapper is the control: its ratio to the
bare app should read 1.00. Reports the median CPU time per request of each
app, its ratio to its base app, the added microseconds, and a 95% interval
on them (order statistics of the two medians).

Two sets of apps:

- the ``MCPServer`` app of the ``mcp`` SDK (JSON responses, one ``echo`` tool
  that reads its session), bare, behind this middleware, and behind
  Starlette's cookie ``SessionMiddleware`` (the alternative a user would
  stack; the request carries a signed cookie and the tool reads
  ``request.session``, as the middleware's session case verifies a token and
  the tool reads ``get_session()``);
- a trivial app that reads the body and answers a fixed JSON-RPC result:
  what the middleware itself costs, with nothing else to hide it. Its cases
  are interleaved among themselves, as a trivial app's server runs no MCP SDK
  code between requests; two of them also run among the MCPServer calls,
  whose code evicts the CPU caches, to show what that costs. One case sends
  each request a session created by another replica (same secret, same
  store), whose token this middleware has not verified yet: a session's
  first request on this replica.

Each of the two first tables also has a "session floor" row: the hand-written
minimum session layer (``SessionFloor`` in ``_harness.py``), against which
every row's added cost is read as a multiple ("x floor"); and a "checked
floor" row: that minimum plus exactly the checks a session-bearing call must
make (``CheckedSessionFloor``), every row's added cost read against it too
("x checked"). A third table, the
N curve, sends the trivial app's session path a session drawn at random among
N live ones (N up to 100,000, a middleware per N). Last, outside the ASGI
calls, the cost of one HS256 session-id check: cached, new (the direct check)
and new through PyJWT, and the size of a verified-token cache entry.

Two phases, because OpenTelemetry's global TracerProvider can be set only once
per process and the MCP SDK's own span always uses it:

1. without an OpenTelemetry SDK: the API alone, as a server without tracing
   runs (the middleware then skips telemetry altogether);
2. with the SDK configured: a global ``TracerProvider`` with the
   ``SessionSpanProcessor`` and a ``SimpleSpanProcessor`` to an in-memory
   exporter, cleared after each request outside the timed region (so export
   work is counted inline: an upper bound on what a ``BatchSpanProcessor``
   costs on the request path), and a ``MeterProvider`` with an
   ``InMemoryMetricReader``. The bare MCPServer then records the SDK's own
   span; the middleware adds its SERVER span, session link, baggage and
   metrics; ``opentelemetry-instrumentation-asgi``'s ``OpenTelemetryMiddleware``
   (default options: an HTTP SERVER span plus its internal receive/send spans,
   and HTTP metrics) wraps the same apps for comparison. The "SDK floor" rows
   (``SdkFloor``) do the SDK work alone that the middleware asks for on a
   session-bearing call, and nothing else: the same SERVER span (name,
   attributes and link copied from one the middleware recorded), its context
   with the session in baggage for the app, one point of the same histogram.

The rounds are shared out among ``--processes`` processes (3 by default), run
one after another, and their samples pooled: each process has its own memory
layout and hash seed, and one process's luck with them moved the MCPServer's
added cost by 10 µs (a multiple of the checked floor by 0.06) from one run
to the next. Each row keeps every process's added cost and multiple too.

Each phase keeps its own pass-through control and interleaves only its own
cases; "bare MCPServer + SDK" is compared with phase 1's bare app, across
phases (not interleaved, so read that ratio with the noise in mind). Run it in
a process of its own: if an SDK TracerProvider is already set, phase 1 is not
SDK-free (the processes are new ones).

    python benchmarks/bench_asgi.py                 # full run
    python benchmarks/bench_asgi.py --quick         # a few requests: CI checks it runs (also --smoke)
    python benchmarks/bench_asgi.py --json out.json # also write the numbers for run_all.py
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from _harness import (
    COOKIE_NAME,
    NAME_HEADERS,
    PROCESSES,
    SECRET,
    App,
    CheckedSessionFloor,
    Lifespans,
    PassThrough,
    Request,
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
    token_claims,
    trivial_app,
    write_json,
)
from itsdangerous import TimestampSigner
from opentelemetry import baggage, context, trace
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from starlette.middleware.sessions import SessionMiddleware
from starlette.types import Receive, Scope, Send

from mcp_sessions import KeySet, MCPSessionMiddleware
from mcp_sessions.stores import MemoryStore
from mcp_sessions.telemetry import SessionSpanProcessor

SDK_SCOPE = "mcp-python-sdk"
MIDDLEWARE_SCOPE = "mcp_sessions"
ASGI_SCOPE = "opentelemetry.instrumentation.asgi"
SDK_FLOOR_SCOPE = "sdk-floor"
# The attributes of the middleware's duration metric (_otel/_span.py, Operation._metric_attributes).
METRIC_KEYS = (
    "mcp.method.name",
    "network.transport",
    "network.protocol.name",
    "mcp.protocol.version",
    "gen_ai.tool.name",
    "gen_ai.operation.name",
)
NONE: frozenset[str] = frozenset()
WARMUP = 20  # unmeasured requests per case first
MCP_GROUP = "MCPServer"
TRIVIAL_GROUP = "trivial app"
SESSIONS_GROUP = "live sessions"
SESSION_COUNTS = (100, 5_000, 20_000, 60_000, 100_000)
QUICK_SESSION_COUNTS = (100, 1_000)
N_BASE = "trivial app, N-curve base"


class Case(NamedTuple):
    app: App
    request: Request | list[Request] | Callable[[], Request]  # a list: one each call, in turn; a callable: its answer
    base: str  # the row it is compared with (itself for a base)
    scopes: frozenset[str]  # the instrumentation scopes whose spans one request must record (phase 2)
    group: str = MCP_GROUP  # the cases interleaved together


Cases = dict[str, Case]


class CaseInfo(NamedTuple):
    """What a case is, without its app: what a child process reports with its samples."""

    phase: int  # 1 without an OpenTelemetry SDK, 2 with one
    group: str
    base: str


def cookie_session(inner: App) -> tuple[App, Request]:
    """Starlette's ``SessionMiddleware`` around ``inner``, and a request with a cookie it signed."""
    app: App = SessionMiddleware(inner, secret_key=SECRET)
    # The cookie's format: the session as base64 JSON, signed with a timestamp (as SessionMiddleware writes it).
    payload = TimestampSigner(SECRET).sign(base64.b64encode(json.dumps({"conversation": "c-12345678"}).encode()))
    cookie = (b"cookie", COOKIE_NAME.encode() + b"=" + payload)
    return app, request(plain_body(), [*NAME_HEADERS, cookie])


async def cases_without_sdk(inner: App, rounds: int, lifespans: Lifespans) -> Cases:
    middleware = await lifespans.own_mcp_app(lambda app: MCPSessionMiddleware(app, secret=SECRET))
    trivial_middleware = MCPSessionMiddleware(trivial_app, secret=SECRET)
    plain = request(plain_body(), NAME_HEADERS)
    token = await create_session(middleware)
    with_session = request(session_body(token), session_headers(token))
    trivial_token = await create_session(trivial_middleware)
    trivial_session = request(session_body(trivial_token), session_headers(trivial_token))
    # Sessions created by another replica (same secret, same store, as replicas share one): this one
    # has not verified their tokens yet, so each request pays the check a session's later requests skip.
    replica = MCPSessionMiddleware(trivial_app, secret=SECRET, store=trivial_middleware.store)
    new_to_this_replica = []
    for _ in range(rounds + WARMUP):
        new_token = await create_session(replica)
        new_to_this_replica.append(request(session_body(new_token), session_headers(new_token)))
    # The same cached session in a new request object each time, as the row above gets: its base.
    session_copies = [request(session_body(trivial_token), session_headers(trivial_token)) for _ in new_to_this_replica]
    cookies, cookie_request = cookie_session(inner)
    trivial_cookies, trivial_cookie_request = cookie_session(trivial_app)
    # The floor knows the session ids already verified: one dict lookup stands for the whole check.
    floor = SessionFloor(inner, {token: object()})
    trivial_floor = SessionFloor(trivial_app, {trivial_token: object()})
    # The checked floor's cache holds the claims a verification returned; it checks them on every request.
    checked = CheckedSessionFloor(inner, {token: token_claims(token)})
    trivial_checked = CheckedSessionFloor(trivial_app, {trivial_token: token_claims(trivial_token)})
    return {
        "bare MCPServer": Case(inner, plain, "bare MCPServer", NONE),
        "pass-through control": Case(PassThrough(inner), plain, "bare MCPServer", NONE),
        "middleware, no session": Case(middleware, plain, "bare MCPServer", NONE),
        # The same session-bearing body, which the bare server ignores: the fair base
        # for the session case (the SDK itself pays for the larger _meta).
        "bare, session body": Case(inner, with_session, "bare MCPServer", NONE),
        "session floor": Case(floor, with_session, "bare, session body", NONE),
        "checked floor": Case(checked, with_session, "bare, session body", NONE),
        "middleware, with session": Case(middleware, with_session, "bare, session body", NONE),
        "starlette cookie session": Case(cookies, cookie_request, "bare MCPServer", NONE),
        # The trivial app reads neither headers nor body: one base serves every request.
        # Interleaved with the MCPServer calls, which evict the CPU caches between its requests;
        # the trivial group below runs on its own, as a server of a trivial app would.
        "trivial app, among MCPServer calls": Case(trivial_app, plain, "trivial app, among MCPServer calls", NONE),
        "trivial + middleware, session, among MCPServer calls": Case(
            trivial_middleware, trivial_session, "trivial app, among MCPServer calls", NONE
        ),
        "trivial app": Case(trivial_app, plain, "trivial app", NONE, TRIVIAL_GROUP),
        "trivial pass-through": Case(PassThrough(trivial_app), plain, "trivial app", NONE, TRIVIAL_GROUP),
        "trivial + session floor": Case(trivial_floor, trivial_session, "trivial app", NONE, TRIVIAL_GROUP),
        "trivial + checked floor": Case(trivial_checked, trivial_session, "trivial app", NONE, TRIVIAL_GROUP),
        "trivial + middleware, no session": Case(trivial_middleware, plain, "trivial app", NONE, TRIVIAL_GROUP),
        "trivial + middleware, session": Case(trivial_middleware, trivial_session, "trivial app", NONE, TRIVIAL_GROUP),
        "trivial + middleware, session, new request objects": Case(
            trivial_middleware, session_copies, "trivial app", NONE, TRIVIAL_GROUP
        ),
        "trivial + middleware, session new to this replica": Case(
            trivial_middleware, new_to_this_replica, "trivial app", NONE, TRIVIAL_GROUP
        ),
        "trivial + starlette cookie session": Case(
            trivial_cookies, trivial_cookie_request, "trivial app", NONE, TRIVIAL_GROUP
        ),
    }


async def cases_with_live_sessions(counts: tuple[int, ...]) -> Cases:
    """The session path on the trivial app, each request naming a session drawn at random among N live ones.

    One middleware per N, holding N live sessions (in its store and, as
    ``sessions/create`` leaves them, in its verified-token cache).
    """
    cases: Cases = {N_BASE: Case(trivial_app, request(plain_body(), NAME_HEADERS), N_BASE, NONE, SESSIONS_GROUP)}
    for count in counts:
        middleware = MCPSessionMiddleware(trivial_app, secret=SECRET, store=MemoryStore(max_sessions=count + 100))
        now = time.time()
        tokens = []
        for _ in range(count):
            token, claims = middleware.keys.mint_session_token(ttl=3600, now=now)
            await middleware.store.create(claims.session_id, expires_at=claims.expires_at, now=now)
            tokens.append(token)

        def draw(tokens: list[str] = tokens) -> Request:
            token = random.choice(tokens)
            return request(session_body(token), session_headers(token))

        cases[f"session path, N={count}"] = Case(middleware, draw, N_BASE, NONE, SESSIONS_GROUP)
    return cases


def token_costs(rounds: int, cache_entries: int) -> dict[str, Any]:
    """CPU µs of one HS256 session-id check: cached, not yet cached (the direct path), and PyJWT's path."""
    minter = KeySet.from_secret(SECRET)
    fresh = [minter.mint_session_token(ttl=3600)[0] for _ in range(2 * rounds)]
    cached = KeySet.from_secret(SECRET)
    reference = KeySet.from_secret(SECRET)
    reference._session_headers = {}  # PyJWT decides every token: the path before the direct check
    direct = KeySet.from_secret(SECRET)
    known = fresh[0]
    cached.verify_session_token(known)
    samples: dict[str, list[int]] = {"cached": [], "uncached, direct HS256": [], "uncached, PyJWT": []}
    order = list(samples) * rounds
    random.shuffle(order)
    unused = iter(fresh)
    for name in order:
        if name == "cached":
            start = time.process_time_ns()
            cached.verify_session_token(known)
        else:
            token = next(unused)
            keys = direct if name == "uncached, direct HS256" else reference
            start = time.process_time_ns()
            keys.verify_session_token(token)
        samples[name].append(time.process_time_ns() - start)
    # What one verified-token cache entry holds: the token, its claims, its share of the dict.
    filler = KeySet.from_secret(SECRET)
    for _ in range(cache_entries):
        filler.mint_session_token(ttl=3600)
    cache = filler._session_cache
    entry = (
        sum(
            sys.getsizeof(token)
            + sys.getsizeof(claims)
            + sys.getsizeof(claims.session_id)
            + sys.getsizeof(claims.issued_at)
            + sys.getsizeof(claims.expires_at)
            + sys.getsizeof(claims.extra)
            for token, claims in cache.items()
        )
        + sys.getsizeof(cache)
    ) / len(cache)
    base = median(samples["cached"])
    return {
        "rows": [
            {
                "name": name,
                "median_us": median(values) / 1000,
                "added_us": (median(values) - base) / 1000,
                "ci_us": 0.0 if name == "cached" else difference_half_width(values, samples["cached"]) / 1000,
                "checks": len(values),
            }
            for name, values in samples.items()
        ],
        "cache_entry_bytes": round(entry),
        "cache_capacity": cache.maxsize,
        "token_length": len(known),
    }


class SdkFloor:
    """The OpenTelemetry SDK work alone that the middleware asks for on a session-bearing call.

    One SERVER span with the name, attributes and links of ``recorded`` (a span
    the middleware recorded for the same request), the context the app runs in
    (that span, the session id in baggage), and one point of a histogram with
    the duration metric's attributes. No session, no parsing, no rewriting:
    what any layer recording what the middleware records must pay the SDK.
    """

    def __init__(self, app: App, recorded: ReadableSpan, meter_provider: MeterProvider) -> None:
        self.app = app
        self.tracer = trace.get_tracer(SDK_FLOOR_SCOPE)
        self.name = recorded.name
        self.attributes = dict(recorded.attributes or {})
        self.links = [trace.Link(link.context, link.attributes) for link in recorded.links]
        self.metric_attributes = {key: self.attributes[key] for key in METRIC_KEYS if key in self.attributes}
        self.session_id = str(self.attributes["session.id"])
        meter = meter_provider.get_meter(SDK_FLOOR_SCOPE)
        self.duration = meter.create_histogram("mcp.server.operation.duration", unit="s")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        span = self.tracer.start_span(self.name, kind=SpanKind.SERVER, attributes=self.attributes, links=self.links)
        ctx = baggage.set_baggage("session.id", self.session_id, trace.set_span_in_context(span))
        token = context.attach(ctx)
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)
            span.end()
            self.duration.record(time.perf_counter() - started, self.metric_attributes)


async def recorded_span(app: App, request: Request, exporter: InMemorySpanExporter) -> ReadableSpan:
    """The SERVER span the middleware records for ``request``."""
    exporter.clear()
    status, raw = await call(app, *request)
    assert status == 200, raw
    (span,) = [
        s
        for s in exporter.get_finished_spans()
        if s.instrumentation_scope and s.instrumentation_scope.name == MIDDLEWARE_SCOPE
    ]
    exporter.clear()
    return span


async def cases_with_sdk(
    inner: App, meter_provider: MeterProvider, exporter: InMemorySpanExporter, lifespans: Lifespans
) -> Cases:
    middleware = await lifespans.own_mcp_app(
        lambda app: MCPSessionMiddleware(app, secret=SECRET, meter_provider=meter_provider)
    )
    instrumented = OpenTelemetryMiddleware(inner, meter_provider=meter_provider)
    trivial_middleware = MCPSessionMiddleware(trivial_app, secret=SECRET, meter_provider=meter_provider)
    trivial_instrumented = OpenTelemetryMiddleware(trivial_app, meter_provider=meter_provider)
    plain = request(plain_body(), NAME_HEADERS)
    token = await create_session(middleware)  # its token links to a creation span
    with_session = request(session_body(token), session_headers(token))
    trivial_token = await create_session(trivial_middleware)
    trivial_session = request(session_body(trivial_token), session_headers(trivial_token))
    sdk = frozenset({SDK_SCOPE})
    ours = frozenset({MIDDLEWARE_SCOPE})
    floor = frozenset({SDK_FLOOR_SCOPE})
    sdk_floor = SdkFloor(inner, await recorded_span(middleware, with_session, exporter), meter_provider)
    trivial_recorded = await recorded_span(trivial_middleware, trivial_session, exporter)
    trivial_sdk_floor = SdkFloor(trivial_app, trivial_recorded, meter_provider)
    base = "bare MCPServer + SDK"
    return {
        base: Case(inner, plain, "bare MCPServer", sdk),
        "pass-through + SDK": Case(PassThrough(inner), plain, base, sdk),
        "middleware, no session + SDK": Case(middleware, plain, base, sdk | ours),
        "bare, session body + SDK": Case(inner, with_session, base, sdk),
        "middleware, session + SDK": Case(middleware, with_session, "bare, session body + SDK", sdk | ours),
        "otel-asgi + SDK": Case(instrumented, plain, base, sdk | {ASGI_SCOPE}),
        "SDK floor": Case(sdk_floor, plain, base, sdk | floor),
        "trivial app + SDK": Case(trivial_app, plain, "trivial app", NONE, TRIVIAL_GROUP),
        "trivial + middleware, session + SDK": Case(
            trivial_middleware, trivial_session, "trivial app + SDK", ours, TRIVIAL_GROUP
        ),
        "trivial + otel-asgi + SDK": Case(
            trivial_instrumented, plain, "trivial app + SDK", frozenset({ASGI_SCOPE}), TRIVIAL_GROUP
        ),
        "trivial + SDK floor": Case(trivial_sdk_floor, plain, "trivial app + SDK", floor, TRIVIAL_GROUP),
    }


def install_sdk() -> InMemorySpanExporter:
    """The global SDK TracerProvider (set here, or the one already set), with our processors added."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SessionSpanProcessor())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


async def measure_groups(cases: Cases, rounds: int, exporter: InMemorySpanExporter | None) -> dict[str, list[int]]:
    """Each group of cases measured in turn."""
    samples: dict[str, list[int]] = {}
    for group in dict.fromkeys(case.group for case in cases.values()):
        samples |= await measure({name: case for name, case in cases.items() if case.group == group}, rounds, exporter)
    return samples


async def measure(cases: Cases, rounds: int, exporter: InMemorySpanExporter | None) -> dict[str, list[int]]:
    """CPU nanoseconds of each request, the cases interleaved in a shuffled order."""
    draws = {name: case.request for name, case in cases.items() if callable(case.request)}
    pools = {
        name: case.request if isinstance(case.request, list) else [case.request]
        for name, case in cases.items()
        if not callable(case.request)
    }
    served = dict.fromkeys(cases, 0)

    def next_request(name: str) -> Request:
        if name in draws:
            return draws[name]()
        pool = pools[name]
        served[name] += 1
        return pool[served[name] % len(pool)]

    if exporter is not None:
        exporter.clear()
    for name, case in cases.items():  # warm up; check every case answers and records what it should
        for _ in range(WARMUP):
            status, raw = await call(case.app, *next_request(name))
            assert status == 200, (name, raw)
            assert b'"isError":false' in raw.replace(b" ", b""), (name, raw)
            floors = "session floor" in name or "checked floor" in name
            echoed = ("middleware" in name or floors or "N=" in name) and "no session" not in name
            assert (b"io.modelcontextprotocol/session" in raw) == echoed, name
            if exporter is not None:
                spans = exporter.get_finished_spans()
                recorded = {span.instrumentation_scope.name for span in spans if span.instrumentation_scope}
                assert recorded == case.scopes, (name, recorded)
                exporter.clear()
    samples: dict[str, list[int]] = {name: [] for name in cases}
    order = list(cases) * rounds
    random.shuffle(order)
    for name in order:
        app = cases[name].app
        scope, body = next_request(name)
        start = time.process_time_ns()
        await call(app, scope, body)
        samples[name].append(time.process_time_ns() - start)
        if exporter is not None:
            exporter.clear()
    return samples


def floor_multiples(rows: list[dict[str, Any]]) -> None:
    """Each row's added cost as a multiple of the floors' in the same table, where it has them.

    ``floor_multiple`` reads it against the session floor (the SDK floor with the SDK),
    ``checked_multiple`` against the checked floor.
    """
    for row in rows:
        table = [f for f in rows if (f["phase"], f["group"]) == (row["phase"], row["group"])]
        floor = next((f for f in table if "floor" in f["name"] and "checked floor" not in f["name"]), None)
        checked = next((f for f in table if "checked floor" in f["name"]), None)
        for key, reference in (("floor_multiple", floor), ("checked_multiple", checked)):
            measured = reference is not None and row["base"] != row["name"] and reference["added_us"] > 0
            row[key] = row["added_us"] / reference["added_us"] if measured and reference else None


def summarize(samples: Mapping[str, Sequence[float]], cases: dict[str, CaseInfo]) -> list[dict[str, Any]]:
    rows = []
    for name, values in samples.items():
        phase, group, base_name = cases[name]
        base = median(samples[base_name])
        middle = median(values)
        rows.append(
            {
                "name": name,
                "phase": phase,
                "group": group,
                "base": base_name,
                "median_us": middle / 1000,
                "ratio": middle / base,
                "added_us": (middle - base) / 1000,
                "ci_us": 0.0 if base_name == name else difference_half_width(values, samples[base_name]) / 1000,
                "requests": len(values),
            }
        )
    floor_multiples(rows)
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    header = ("app", "median CPU µs", "ratio", "added µs", "± µs (95%)", "x floor", "x checked", "base")
    table = [
        (
            row["name"],
            f"{row['median_us']:.1f}",
            f"{row['ratio']:.3f}",
            f"{row['added_us']:.1f}",
            f"{row['ci_us']:.1f}",
            "" if row["floor_multiple"] is None else f"{row['floor_multiple']:.2f}",
            "" if row["checked_multiple"] is None else f"{row['checked_multiple']:.2f}",
            row["base"],
        )
        for row in rows
    ]
    print_table(header, table, (False, True, True, True, True, True, True, False))


def report_tokens(tokens: dict[str, Any]) -> None:
    header = ("check", "median CPU µs", "added µs", "± µs (95%)")
    table = [
        (row["name"], f"{row['median_us']:.2f}", f"{row['added_us']:.2f}", f"{row['ci_us']:.2f}")
        for row in tokens["rows"]
    ]
    print_table(header, table, (False, True, True, True))


async def measured_samples(rounds: int, smoke: bool) -> tuple[dict[str, list[int]], dict[str, CaseInfo]]:
    """Every case's CPU nanoseconds per request, in this process, and what each case is (phase, group, base)."""
    inner = build_mcp_app()
    shutdown = await run_lifespan(inner)
    lifespans = Lifespans()
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    exporter = None
    try:
        first = await cases_without_sdk(inner, rounds, lifespans)
        first |= await cases_with_live_sessions(QUICK_SESSION_COUNTS if smoke else SESSION_COUNTS)
        samples = await measure_groups(first, rounds, None)
        exporter = install_sdk()
        second = await cases_with_sdk(inner, meter_provider, exporter, lifespans)
        samples |= await measure_groups(second, rounds, exporter)
    finally:
        await lifespans.shutdown()
        await shutdown()
        if exporter is not None:
            exporter.shutdown()  # the provider stays global: stop keeping spans
        meter_provider.shutdown()
    phases = [(1, first), (2, second)]
    return samples, {
        name: CaseInfo(phase, case.group, case.base) for phase, cases in phases for name, case in cases.items()
    }


def pooled(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of every process's samples pooled, each row with each process's own added cost and multiples."""
    cases = {name: CaseInfo(*info) for name, info in runs[0]["cases"].items()}
    rows = summarize(pooled_samples([run["samples"] for run in runs]), cases)
    each = [summarize(run["samples"], cases) for run in runs]
    for index, row in enumerate(rows):
        row["process_added_us"] = [process_rows[index]["added_us"] for process_rows in each]
        row["process_checked_multiples"] = [process_rows[index]["checked_multiple"] for process_rows in each]
    return rows


async def main(rounds: int, json_out: str | None, smoke: bool, processes: int) -> None:
    load_before = load_average()
    started = time.monotonic()
    per_process = -(-rounds // processes)  # the rounds shared out, rounded up
    args = ["--rounds", str(per_process), *(["--smoke"] if smoke else [])]
    rows = pooled(in_processes(__file__, args, processes))
    tokens = token_costs(rounds, 1_000 if smoke else 100_000)
    report(rows)
    print()
    report_tokens(tokens)
    write_json(
        json_out,
        {
            "benchmark": "asgi",
            "smoke": smoke,
            "rounds": per_process * processes,
            "processes": processes,
            "seconds": round(time.monotonic() - started, 1),
            "load_before": load_before,
            "load_after": load_average(),
            "machine": machine(),
            "rows": rows,
            "session_counts": list(QUICK_SESSION_COUNTS if smoke else SESSION_COUNTS),
            "tokens": tokens,
        },
    )


def child(rounds: int, out: str, smoke: bool) -> None:
    """One process's run: its samples and cases, for the parent to pool."""
    samples, cases = asyncio.run(measured_samples(rounds, smoke))
    Path(out).write_text(json.dumps({"samples": samples, "cases": cases}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6000, help="requests per app, shared out among the processes")
    parser.add_argument("--processes", type=int, default=PROCESSES, help="processes measured one after another, pooled")
    parser.add_argument("--smoke", "--quick", dest="smoke", action="store_true", help="a few requests only")
    parser.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    parser.add_argument("--samples-out", help=argparse.SUPPRESS)  # a child process: its samples, to this file
    args = parser.parse_args()
    if args.samples_out:
        child(args.rounds, args.samples_out, args.smoke)
    else:
        processes = min(args.processes, 2) if args.smoke else args.processes
        asyncio.run(main(20 if args.smoke else args.rounds, args.json, args.smoke, max(processes, 1)))
