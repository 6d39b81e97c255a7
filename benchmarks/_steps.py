"""Where the session path's time goes: each pipeline step timed on its own, and what it buys.

The trivial app's session path (a cached session, a ``tools/call``), without an OpenTelemetry SDK and with
one (spans exported to memory, metrics to an in-memory reader, both given to the middleware): each step
below is wrapped in a timer of the process's CPU time (``time.process_time_ns``, as the tables above) for
the run, and unwrapped after; a step's time is less what the timer itself costs (measured around an empty
function). "the rest" is the middleware's own ``__call__``, the body's replay and the context variables:
the added time measured without timers, less the steps'.

With the SDK recording, most of "the span" and of "detach, end" is the SDK's own work on what the
middleware gives it, timed the same way in the rows "of which, the SDK's": ``Tracer.start_span``
cleaning each of the span's attributes (18 on a root span: the conventions', the session's, the four
that name the trace for the viewers) and its link to the session's creation; ``Span.end`` handing the
span to its processors; ``Histogram.record`` cleaning and hashing the duration point's 7 attributes. The
conventions, the viewers and the telemetry tests ask for each of them. The rest of those two steps is the
middleware's: the parent and link (the token's ``tp`` claim, read once per session), the attributes every
call of the same method, version, target and place in the trace shares (built once, copied), the redacted
request id, the context the app runs in, the span's outcome.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from _harness import SECRET, call, create_session, session_request, trivial_app
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_sessions import MCPSessionMiddleware

# (module, attribute, the step, what it buys), in request order.
STEPS = (
    (
        "_middleware",
        "json_rpc_headers",
        "the headers",
        "a POST of JSON to the MCP path is told from the app's own "
        "routes; the first of a repeated header wins, two different Mcp-Session-Id headers match no session",
    ),
    (
        "_otel._telemetry",
        "Telemetry.enabled",
        "is an SDK recording?",
        "without one, no span, metric or context work "
        "at all; asks the global providers until one records (an SDK set up after the middleware is seen)",
    ),
    (
        "_middleware",
        "read_body",
        "the body, bounded",
        "413 past max_body_size, by the declared length or as it arrives; a client gone is not forwarded",
    ),
    (
        "_plan",
        "Planner.plan",
        "parse once, classify",
        "the body parsed once, recording repeated member names (two "
        "parsers never read two sessions); each call's wire and local method",
    ),
    (
        "_pipeline._resolve",
        "Resolver.resolve",
        "the session",
        "the source chain: the token checked (cached claims, expiry, principal, endpoint, Mcp-Session-Id), "
        "the store's touch (revocation, idle expiry), the Session",
    ),
    (
        "_middleware",
        "start_operations",
        "the span (SDK only)",
        "a SERVER span per call with the conventions' attributes, its parent and its link to the session's creation",
    ),
    (
        "_pipeline._forward",
        "Forwarder.prepare",
        "attach",
        "what the response gains per request id; the session in "
        "the scope, request.state and get_session(); the span current",
    ),
    (
        "_pipeline._response",
        "ResponseRewriter.send",
        "the response",
        "the JSON answer held, parsed, the echo "
        "(sessionId, expiresAt) put in result._meta, written again with a new Content-Length; the span observes it",
    ),
    (
        "_pipeline._forward",
        "Exchange.finish",
        "detach, end",
        "the context variables reset, the span ended and the duration metric recorded",
    ),
)


# The SDK's calls inside two steps (module, attribute, the row): timed in the same run, not part of the rest.
SDK_PARTS = (
    ("opentelemetry.sdk.trace", "Tracer.start_span", "of which, the SDK's start_span"),
    ("opentelemetry.sdk.trace", "Span.end", "of which, the SDK's Span.end"),
    ("opentelemetry.sdk.metrics._internal.instrument", "Histogram.record", "of which, the SDK's Histogram.record"),
)


def _timed(function: Any, label: str, spent: Counter[str], calls: Counter[str]) -> Any:
    if asyncio.iscoroutinefunction(function):

        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time_ns()
            try:
                return await function(*args, **kwargs)
            finally:
                spent[label] += time.process_time_ns() - start
                calls[label] += 1

        return functools.wraps(function)(timed_async)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time_ns()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label] += time.process_time_ns() - start
            calls[label] += 1

    return functools.wraps(function)(timed)


def _timer_cost(rounds: int) -> float:
    """The ns a timer adds around a call, read between its two clock readings."""
    spent: Counter[str] = Counter()
    timed = _timed(lambda: None, "empty", spent, Counter())
    for _ in range(rounds):
        timed()
    return spent["empty"] / rounds


async def _added(app: Any, rounds: int, after: Callable[[], object], *counters: Counter[str]) -> float:
    """The µs ``app`` adds to the trivial app per request, a cached session sent each time (``after`` each)."""
    request = session_request(await create_session(app))
    for _ in range(200):
        await call(app, *request)
        after()
    for counter in counters:
        counter.clear()
    totals = []
    for target in (trivial_app, app):
        start = time.process_time_ns()
        for _ in range(rounds):
            await call(target, *request)
            after()
        totals.append((time.process_time_ns() - start) / rounds / 1000)
    return totals[1] - totals[0]


async def _profile(rounds: int, sdk: bool) -> tuple[float, dict[str, float]]:
    options: dict[str, Any] = {}
    exporter = InMemorySpanExporter()  # emptied after each request, as bench_asgi.py does
    if sdk:
        tracer = TracerProvider()
        tracer.add_span_processor(SimpleSpanProcessor(exporter))
        options = {"tracer_provider": tracer, "meter_provider": MeterProvider([InMemoryMetricReader()])}
    untimed = await _added(MCPSessionMiddleware(trivial_app, secret=SECRET, **options), rounds, exporter.clear)
    steps = [(f"mcp_sessions.{module}", attribute, label) for module, attribute, label, _ in STEPS]
    times: dict[str, float] = {}
    # The SDK's parts in a run of their own: their timers would otherwise count in the steps around them.
    for parts in (steps, SDK_PARTS) if sdk else (steps,):
        spent: Counter[str] = Counter()
        calls: Counter[str] = Counter()
        undo = []
        for module_name, attribute, label in parts:
            owner: Any = importlib.import_module(module_name)
            *path, name = attribute.split(".")
            for piece in path:
                owner = getattr(owner, piece)
            undo.append((owner, name, owner.__dict__[name]))
            setattr(owner, name, _timed(owner.__dict__[name], label, spent, calls))
        try:
            app = MCPSessionMiddleware(trivial_app, secret=SECRET, **options)
            await _added(app, rounds, exporter.clear, spent, calls)
        finally:
            for owner, name, original in undo:
                setattr(owner, name, original)
        cost = _timer_cost(rounds)
        times |= {label: (spent[label] - cost * calls[label]) / rounds / 1000 for *_, label in parts}
    return untimed, times


def steps_section(rounds: int) -> dict[str, Any]:
    """The per-step table: µs without the SDK and with it, and what each step buys."""
    plain_total, plain = asyncio.run(_profile(rounds, sdk=False))
    sdk_total, sdk = asyncio.run(_profile(rounds, sdk=True))
    rows = [[label, f"{plain[label]:.1f}", f"{sdk[label]:.1f}", buys] for _, _, label, buys in STEPS]
    own = [label for *_, label, _ in STEPS]  # the SDK's parts are inside two of them
    rest = [plain_total - sum(plain.values()), sdk_total - sum(sdk[label] for label in own)]
    rows.append(["the rest", *(f"{value:.1f}" for value in rest), "the middleware's __call__, the replay, the context"])
    rows.append(["added, untimed", f"{plain_total:.1f}", f"{sdk_total:.1f}", "the session path's whole cost"])
    buys = "what the conventions, the viewers and the telemetry tests ask of the span and the metric"
    rows += [[label, "0.0", f"{sdk[label]:.1f}", buys] for *_, label in SDK_PARTS]
    return {
        "title": "Where the session path's time goes",
        "text": __doc__.split("\n\n", 1)[1].replace("\n", " ").strip() + f" {rounds} requests each, one process.",
        "header": ["step", "µs, no SDK", "µs, SDK recording", "what it buys"],
        "rows": rows,
    }
