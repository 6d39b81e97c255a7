"""A long ``text/event-stream`` response through the middleware: memory and the first event.

A downstream ASGI app answers one session-bearing ``tools/call`` with an SSE
stream of progress notifications (about 1 KiB each, one ASGI message per
event, CRLF line ends as sse-starlette writes them) and ends it with the
response to the request, which the middleware rewrites to add the session
echo: the rewriter scans every event of the stream. The app is called
directly with a consuming ``send`` that counts and drops what it gets (no
network), bare and behind ``MCPSessionMiddleware``, at each ``--sizes``:

- time to first event: wall time from calling the app to the first event
  reaching ``send``, the median of ``--ttfe-rounds`` streams of each size per
  app, bare and middleware alternating in a shuffled order, each stopped once
  its first event arrived (as a client that disconnects would);
- events held back: the most events the app had sent that had not yet
  reached ``send`` (0: every event leaves as soon as the app sends it);
- peak memory while streaming: ``tracemalloc``'s peak over what was allocated
  before the stream (in a second pass, as tracing slows allocation down), and
  the growth of the process's peak RSS (``VmHWM``, reset before each stream
  through ``/proc/self/clear_refs``);
- CPU seconds for the whole stream and the resulting MB/s: the median of
  ``--rate-rounds`` streams per app and size, the apps taking turns in a
  shuffled order each round (one stream of 10 MB is a few hundredths of a
  second of CPU: one alone reads whatever the machine did meanwhile).

Constant memory shows as the same peak at every size; a middleware that
buffered would peak at the stream's size.

    python benchmarks/bench_sse.py                 # 10 MB and 100 MB
    python benchmarks/bench_sse.py --quick         # a few MB: the tests check it runs
    python benchmarks/bench_sse.py --json out.json # also write the numbers for run_all.py
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import statistics
import time
import tracemalloc
from pathlib import Path
from typing import Any

from _harness import (
    METHOD_NOT_FOUND,
    SECRET,
    SESSION_META_KEY,
    Request,
    create_session,
    finish,
    load_average,
    read_whole,
    section,
    send_json,
    session_request,
    verdict,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_sessions import MCPSessionMiddleware

MB = 1_000_000
EVENT_END = b"\r\n\r\n"
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]


def sse_event(message: dict[str, Any]) -> bytes:
    return b"event: message\r\ndata: " + json.dumps(message, separators=(",", ":")).encode() + EVENT_END


PROGRESS = sse_event(
    {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "bench", "progress": 1, "total": 2, "message": "working " + "x" * 900},
    }
)
RESULT = sse_event(
    {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "done"}], "isError": False}}
)


class StreamingApp:
    """Reads the request, then streams ``events`` progress notifications and the result, one message each."""

    def __init__(self, events: int) -> None:
        self.events = events
        self.produced = 0  # events handed to send so far, read by the consumer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if b'"tools/call"' not in await read_whole(receive):  # the middleware's probe, say
            return await send_json(send, METHOD_NOT_FOUND)
        self.produced = 0
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        for _ in range(self.events):
            self.produced += 1
            await send({"type": "http.response.body", "body": PROGRESS, "more_body": True})
        self.produced += 1
        await send({"type": "http.response.body", "body": RESULT, "more_body": False})


class FirstEventSeen(Exception):
    """Raised by the consumer's send to stop a stream once its first event arrived."""


class Consumer:
    """The ``send`` of a client that reads everything and keeps nothing."""

    def __init__(self, app: StreamingApp, *, stop_at_first: bool) -> None:
        self.app = app
        self.stop_at_first = stop_at_first
        self.started_ns = 0
        self.first_event_ns = 0
        self.delivered = 0
        self.bytes = 0
        self.held_back = 0
        self.last = b""
        self.status = 0

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            return
        body = message.get("body", b"")
        if not self.first_event_ns and EVENT_END in body:
            self.first_event_ns = time.perf_counter_ns()
            if self.stop_at_first:
                raise FirstEventSeen
        self.delivered += body.count(EVENT_END)
        self.bytes += len(body)
        self.held_back = max(self.held_back, self.app.produced - self.delivered)
        if not message.get("more_body", False):
            self.last = body


async def stream(target: ASGIApp, downstream: StreamingApp, req: Request, *, stop_at_first: bool = False) -> Consumer:
    scope, body = req
    consumer = Consumer(downstream, stop_at_first=stop_at_first)
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    consumer.started_ns = time.perf_counter_ns()
    try:
        await target(dict(scope, headers=list(scope["headers"]), state={}), receive, consumer.send)
    except FirstEventSeen:
        assert stop_at_first
        return consumer
    assert consumer.status == 200
    assert consumer.delivered == downstream.events + 1, (consumer.delivered, downstream.events)
    return consumer


def vm_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    except OSError:
        return False
    return True


async def long_stream(name: str, target: ASGIApp, downstream: StreamingApp, req: Request) -> dict[str, Any]:
    gc.collect()
    reset = reset_peak_rss()
    rss_before = vm_kib("VmRSS")
    cpu = time.process_time()
    consumer = await stream(target, downstream, req)
    cpu = time.process_time() - cpu
    rss_growth = vm_kib("VmHWM") - rss_before
    if name != "bare app":
        assert SESSION_META_KEY.encode() in consumer.last, consumer.last[:200]  # the rewriter did its job
    gc.collect()
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    await stream(target, downstream, req)
    peak = tracemalloc.get_traced_memory()[1] - baseline
    tracemalloc.stop()
    return {
        "name": name,
        "bytes": consumer.bytes,
        "events": consumer.delivered,
        "held_back": consumer.held_back,
        "traced_peak_kib": peak / 1024,
        "rss_growth_kib": rss_growth if reset else None,
        "cpu_seconds": cpu,
        "mb_per_second": consumer.bytes / MB / cpu if cpu else 0.0,
    }


async def first_events(cases: dict[str, tuple[ASGIApp, StreamingApp, Request]], rounds: int) -> dict[str, list[float]]:
    """Time to first event in µs, the cases alternating in a shuffled order, each stream stopped there."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases) * rounds
    random.shuffle(order)
    for name in order:
        target, downstream, req = cases[name]
        consumer = await stream(target, downstream, req, stop_at_first=True)
        samples[name].append((consumer.first_event_ns - consumer.started_ns) / 1000)
    return samples


CONSTANT_KIB = 64.0  # constant memory: the traced peak grows by less than this from the smallest stream to the largest
RATE_SHARE = 0.5  # a long SSE response at no less than this share of the bare app's rate


def sse_verdicts(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    ours = [row for row in rows if row["name"] != "bare app"]
    bare = {row["size_mb"]: row for row in rows if row["name"] == "bare app"}
    growth = ours[-1]["traced_peak_kib"] - ours[0]["traced_peak_kib"]
    held = max(row["held_back"] for row in ours)
    shares = {row["size_mb"]: row["mb_per_second"] / bare[row["size_mb"]]["mb_per_second"] for row in ours}
    largest = f"{ours[-1]['size_mb']:g} MB"
    return [
        verdict(
            f"A {largest} SSE response through the middleware: constant memory, no event held back",
            "; ".join(
                f"{row['size_mb']:g} MB: traced peak {row['traced_peak_kib']:.1f} KiB, first event "
                f"{row['ttfe_added_us']:+.1f} µs, events held back {row['held_back']}"
                for row in ours
            ),
            growth < CONSTANT_KIB and held == 0,
            f"the peak grew {growth:+.1f} KiB from the smallest stream to the largest; {held} events held back",
        ),
        verdict(
            f"A long SSE response at ≥ {RATE_SHARE:g}x the bare app's rate",
            "; ".join(
                f"{row['size_mb']:g} MB: {row['mb_per_second']:.0f} MB/s against "
                f"{bare[row['size_mb']]['mb_per_second']:.0f}"
                for row in ours
            ),
            min(shares.values()) >= RATE_SHARE,
            ", ".join(f"x{share:.2f} at {size:g} MB" for size, share in shares.items()),
        ),
    ]


async def measured_rows(sizes: list[float], ttfe_rounds: int, rate_rounds: int) -> list[dict[str, Any]]:
    downstream = StreamingApp(2)
    middleware = MCPSessionMiddleware(downstream, secret=SECRET)
    req = session_request(await create_session(middleware))
    cases: dict[str, tuple[ASGIApp, StreamingApp, Request]] = {
        "bare app": (downstream, downstream, req),
        "middleware, with session": (middleware, downstream, req),
    }
    await first_events(cases, 20)  # warm up
    rows = []
    for size in sizes:
        downstream.events = max(int(size * MB) // len(PROGRESS), 1)
        ttfe = await first_events(cases, ttfe_rounds)
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        names = list(cases)
        for _ in range(rate_rounds):
            random.shuffle(names)
            for name in names:
                target, app, case_request = cases[name]
                started_cpu = time.process_time()
                await stream(target, app, case_request)
                cpu[name].append(time.process_time() - started_cpu)
        for name in names:
            target, app, case_request = cases[name]
            row = await long_stream(name, target, app, case_request)
            seconds = statistics.median(cpu[name])
            row |= {"cpu_seconds": seconds, "mb_per_second": row["bytes"] / MB / seconds if seconds else 0.0}
            added = statistics.median(ttfe[name]) - statistics.median(ttfe["bare app"])
            rows.append({"size_mb": size, **row, "ttfe_us": statistics.median(ttfe[name]), "ttfe_added_us": added})
    rows.sort(key=lambda row: (row["size_mb"], row["name"]))
    return rows


def main(args: argparse.Namespace) -> None:
    began = time.monotonic(), load_average()
    rows = asyncio.run(measured_rows(args.sizes, args.ttfe_rounds, args.rate_rounds))
    how = (
        "`bench_sse.py`: a downstream ASGI app answers one session-bearing `tools/call` with a `text/event-stream` "
        f"of progress notifications ({len(PROGRESS)} bytes each, one ASGI message per event) ending with the "
        "response, which the middleware rewrites to add the session echo, so that it scans the whole stream; called "
        'directly with a `send` that counts and drops what it receives. "first event µs" is the median time from '
        f"calling the app to the first event reaching `send` over {args.ttfe_rounds} streams per app, each stopped "
        'there; "held back" the most events the app had sent that had not yet reached the client; "traced peak" '
        'the `tracemalloc` peak over what was allocated before the stream; "peak RSS growth" that of `VmHWM`; '
        f"CPU s and MB/s the median of {args.rate_rounds} whole streams per app, the apps taking turns."
    )
    header = ["app", "stream MB", "events", "first event µs", "added µs", "held back", "traced peak KiB"]
    header += ["peak RSS growth KiB", "CPU s", "MB/s"]
    table = [
        [
            row["name"],
            f"{row['bytes'] / MB:.1f}",
            row["events"],
            f"{row['ttfe_us']:.1f}",
            f"{row['ttfe_added_us']:+.1f}",
            row["held_back"],
            f"{row['traced_peak_kib']:.1f}",
            "n/a" if row["rss_growth_kib"] is None else row["rss_growth_kib"],
            f"{row['cpu_seconds']:.2f}",
            f"{row['mb_per_second']:.0f}",
        ]
        for row in rows
    ]
    sections = [section("A long SSE response", how, header, table)]
    finish("sse", args.json, args.quick, began, sections, sse_verdicts(rows), rows=rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[10.0, 100.0], help="stream sizes in MB")
    parser.add_argument(
        "--ttfe-rounds", type=int, default=500, help="streams per app and size, stopped at the first event"
    )
    parser.add_argument("--rate-rounds", type=int, default=7, help="whole streams per app and size for the rate")
    parser.add_argument("--quick", "--smoke", action="store_true", help="a few MB only")
    parser.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.ttfe_rounds, args.rate_rounds = [1.0, 3.0], 10, 2
    main(args)
