"""The quickstart with OpenTelemetry: every MCP call traced, and the traces grouped by session.

    python examples/tracing.py --port 8000      serve http://127.0.0.1:8000/mcp, exporting spans over OTLP/HTTP
    python examples/tracing.py --conversation   serve on a free port, run two short scripted conversations
                                                against it, flush the spans and exit
    python examples/tracing.py --conversation --url URL
                                                run the conversations against a server that is already running

Spans go to --otlp-endpoint (default http://127.0.0.1:6006/v1/traces: a local Arize Phoenix). Serving needs
MCP_SESSIONS_SECRET (or MCP_SESSIONS_DEV=1); --conversation without --url signs with a throwaway key. Both
modes read the other MCP_SESSIONS_* variables: MCP_SESSIONS_CAPTURE_CONTENT=1 records each call's input and
output. Install with the extras `demo` and `tracing`; docs/observability.md shows the result in Phoenix.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import os
import secrets
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx
from mcp.server.mcpserver.exceptions import ToolError
from opentelemetry import propagate, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    MetricReader,
    NumberDataPoint,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from mcp_sessions import MCPSessionMiddleware, get_session
from mcp_sessions.telemetry import SessionSpanProcessor

if __package__ in (None, ""):
    # Run as a script (python examples/tracing.py): make the examples package importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from examples.demo import ENVELOPE, PROTOCOL_VERSION, SESSION_META_KEY, serve_in_thread
from examples.quickstart import SESSION_TOOLS, build_server

DEFAULT_ENDPOINT = "http://127.0.0.1:6006/v1/traces"
SERVICE_NAME = "mcp-sessions-quickstart"
CLIENT_SERVICE_NAME = "mcp-sessions-demo-agent"
# The variables that choose the signing key: --conversation without --url signs with a throwaway key instead.
_KEY_VARIABLES = frozenset({"MCP_SESSIONS_SECRET", "MCP_SESSIONS_KEYS", "MCP_SESSIONS_SIGNER", "MCP_SESSIONS_DEV"})


# -- OpenTelemetry set-up --------------------------------------------------------------------------


def make_tracer_provider(
    *,
    endpoint: str | None = DEFAULT_ENDPOINT,
    exporter: SpanExporter | None = None,
    service_name: str = SERVICE_NAME,
) -> TracerProvider:
    """A TracerProvider that stamps ``session.id`` on every span of a session's request and exports OTLP/HTTP.

    ``exporter`` replaces the OTLP/HTTP exporter (with an in-memory one, for example).
    """
    # openinference.project.name picks the Phoenix project; other backends ignore it.
    resource = Resource.create({"service.name": service_name, "openinference.project.name": SERVICE_NAME})
    provider = TracerProvider(resource=resource)
    # First the processor that copies the session id from baggage onto every span started in the request...
    provider.add_span_processor(SessionSpanProcessor())
    # ...then the one that exports, so that the exported spans carry it.
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=1000))
    return provider


def make_meter_provider(
    *, endpoint: str | None = None, readers: Sequence[MetricReader] = (), service_name: str = SERVICE_NAME
) -> MeterProvider:
    """A MeterProvider for the middleware's metrics: OTLP/HTTP to ``endpoint`` if given, plus ``readers``."""
    all_readers = list(readers)
    if endpoint is not None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        all_readers.append(PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint)))
    return MeterProvider(resource=Resource.create({"service.name": service_name}), metric_readers=all_readers)


# -- the app ---------------------------------------------------------------------------------------


def build_app(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    environ: Mapping[str, str] | None = None,
    **options: Any,
) -> MCPSessionMiddleware:
    """The quickstart's server plus a tool with a span of its own, behind the middleware with telemetry on.

    With no providers, the global ones are used (set them with ``trace.set_tracer_provider``): the MCP SDK's
    own span always comes from the global one.
    """
    mcp = build_server()
    tracer = trace.get_tracer("examples.tracing", tracer_provider=tracer_provider)

    @mcp.tool()
    async def add_note(text: str) -> int:
        """Add a note to this conversation's notes (kept server-side) and return how many there are."""
        # Your own span: SessionSpanProcessor gives it session.id, and it nests under the SDK's span.
        with tracer.start_as_current_span("notes.append") as span:
            if not text.strip():
                raise ToolError("a note cannot be empty")  # the client gets an error result
            session = get_session()
            assert session is not None  # required below
            notes = await session.data.update("notes", lambda notes: [*(notes or []), text], default=[])
            span.set_attribute("notes.count", len(notes))
            return len(notes)

    mcp_app = mcp.streamable_http_app(streamable_http_path="/mcp")
    options.setdefault("require_session_tools", SESSION_TOOLS | {"add_note"})
    return MCPSessionMiddleware.from_env(
        mcp_app, environ=environ, tracer_provider=tracer_provider, meter_provider=meter_provider, **options
    )


# -- the scripted conversations --------------------------------------------------------------------


@dataclass
class Reply:
    """What one POST gave: the JSON-RPC response and the notifications streamed before it."""

    response: dict[str, Any]
    notifications: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return "error" in self.response or self.response.get("result", {}).get("isError") is True

    def outcome(self) -> str:
        if "error" in self.response:
            return f"error {self.response['error'].get('code')} {self.response['error'].get('message')}"
        result = self.response.get("result", {})
        if "session" in result:
            return "session created"
        if result.get("isError"):
            return f"tool error: {result['content'][0]['text']}"
        if isinstance(result.get("structuredContent"), dict) and "result" in result["structuredContent"]:
            return f"-> {result['structuredContent']['result']!r}"
        return "ok"


class Client:
    """A raw HTTP client of the 2026-07-28 wire, as in examples/demo.py, that can send a trace context."""

    def __init__(self, http: httpx.Client, url: str, tracer: trace.Tracer | None = None) -> None:
        self.http = http
        self.url = url
        self.tracer = tracer  # when set, each call runs in a CLIENT span sent as _meta.traceparent
        self._id = 0

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: str | None = None,
        state: str | None = None,
        progress_token: str | None = None,
    ) -> Reply:
        if self.tracer is None:
            return self._post(method, params, session, state, progress_token)
        name = f"agent: {method} {params['name']}" if params and "name" in params else f"agent: {method}"
        # What an instrumented agent records: the call and its outcome as input.value and output.value
        # (Phoenix shows them as the session's turns). Never _meta: the session token travels there.
        attributes = {"input.value": json.dumps(params or {}), "input.mime_type": "application/json"}
        with self.tracer.start_as_current_span(name, kind=trace.SpanKind.CLIENT, attributes=attributes) as span:
            reply = self._post(method, params, session, state, progress_token)
            span.set_attributes({"output.value": reply.outcome(), "output.mime_type": "text/plain"})
            if reply.failed:
                span.set_status(trace.StatusCode.ERROR, reply.outcome())
            return reply

    def _post(
        self,
        method: str,
        params: dict[str, Any] | None,
        session: str | None,
        state: str | None,
        progress_token: str | None,
    ) -> Reply:
        self._id += 1
        params = dict(params or {})
        meta: dict[str, Any] = dict(ENVELOPE)
        headers = {
            "Accept": "application/json, text/event-stream",
            "Mcp-Protocol-Version": PROTOCOL_VERSION,
            "Mcp-Method": method,
        }
        if method == "tools/call":
            headers["Mcp-Name"] = params["name"]
        if progress_token is not None:
            meta["progressToken"] = progress_token
        if session is not None:
            meta[SESSION_META_KEY] = {"sessionId": session} if state is None else {"sessionId": session, "state": state}
            headers["Mcp-Session-Id"] = session
        if self.tracer is not None:
            propagate.inject(meta)  # traceparent (and tracestate) of the current CLIENT span, per SEP-414
        params["_meta"] = meta
        body = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": params}
        reply = Reply({})
        with self.http.stream("POST", self.url, json=body, headers=headers) as response:
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                data: list[str] = []
                for line in [*response.iter_lines(), ""]:
                    if line.startswith("data:"):
                        data.append(line[5:].strip())
                    elif line == "" and data:
                        message = json.loads("\n".join(data))
                        data = []
                        if "method" in message:
                            reply.notifications.append(message)
                        else:
                            reply.response = message
            else:
                reply.response = json.loads(response.read())
        return reply


def _sid(token: str) -> str:
    """The stable session id (the token's ``sid`` claim): not a secret, unlike the token itself."""
    claims = token.split(".")[1]
    sid: str = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))["sid"]
    return sid


def run_conversations(
    url: str, *, out: TextIO | None = None, agent_tracer: trace.Tracer | None = None
) -> dict[str, str]:
    """Two short conversations; returns their stable session ids by name. Never prints a token.

    Conversation A: counter, client-held state, a countdown streaming progress, a note, then it is deleted
    and a late ``count`` gets ``-32043``. Conversation B: notes (one rejected by the tool), a count; B is
    left open. With ``agent_tracer``, B's calls run in CLIENT spans sent as ``_meta.traceparent``.
    """
    out = sys.stdout if out is None else out
    sids: dict[str, str] = {}

    def show(name: str, what: str, reply: Reply) -> Reply:
        extra = f" ({len(reply.notifications)} progress notifications)" if reply.notifications else ""
        print(f"  {name}  {what:<28} {reply.outcome()}{extra}", file=out, flush=True)
        return reply

    def tool(client: Client, name: str, token: str, tool_name: str, **arguments: Any) -> Reply:
        reply = client.call("tools/call", {"name": tool_name, "arguments": arguments}, session=token)
        return show(name, tool_name, reply)

    with httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0)) as http:
        plain = Client(http, url)
        token_a = plain.call("sessions/create", {"label": "conversation A"}).response["result"]["session"]["sessionId"]
        sids["A"] = _sid(token_a)
        print(f"  A  sessions/create              session.id {sids['A']}", file=out, flush=True)
        tool(plain, "A", token_a, "count")
        tool(plain, "A", token_a, "count")
        set_mode = tool(plain, "A", token_a, "set_mode", mode="focus")
        state = set_mode.response["result"]["_meta"][SESSION_META_KEY]["state"]
        get_mode = plain.call("tools/call", {"name": "get_mode"}, session=token_a, state=state)
        show("A", "get_mode (with the state)", get_mode)
        countdown = {"name": "countdown", "arguments": {"n": 3}}
        show("A", "countdown 3", plain.call("tools/call", countdown, session=token_a, progress_token="countdown-1"))
        tool(plain, "A", token_a, "add_note", text="buy milk")
        show("A", "sessions/delete", plain.call("sessions/delete", session=token_a))
        tool(plain, "A", token_a, "count")  # -32043: the session is gone

        agent = Client(http, url, agent_tracer)
        token_b = agent.call("sessions/create", {"label": "conversation B"}).response["result"]["session"]["sessionId"]
        sids["B"] = _sid(token_b)
        print(f"  B  sessions/create              session.id {sids['B']}", file=out, flush=True)
        tool(agent, "B", token_b, "add_note", text="call Bob")
        tool(agent, "B", token_b, "add_note", text="  ")  # the tool raises: an error result, marked on the spans
        tool(agent, "B", token_b, "add_note", text="book the train")
        tool(agent, "B", token_b, "count")
        tool(agent, "B", token_b, "whoami")
    return sids


# -- running it ------------------------------------------------------------------------------------


def _metrics_summary(reader: InMemoryMetricReader) -> list[str]:
    """One line per metric: how many values a histogram recorded, or a counter's total."""
    data = reader.get_metrics_data()
    lines = []
    for resource_metrics in data.resource_metrics if data else []:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                points = list(metric.data.data_points)
                if all(isinstance(p, HistogramDataPoint) for p in points):
                    what = f"{sum(p.count for p in points if isinstance(p, HistogramDataPoint))} recorded"
                else:
                    what = f"total {sum(p.value for p in points if isinstance(p, NumberDataPoint))}"
                lines.append(f"  {metric.name} [{metric.unit}]: {what}, {len(points)} attribute set(s)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tracing.py", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--otlp-endpoint", default=DEFAULT_ENDPOINT, help="OTLP/HTTP traces URL (…/v1/traces)")
    parser.add_argument("--otlp-metrics-endpoint", help="OTLP/HTTP metrics URL (…/v1/metrics); off by default")
    parser.add_argument("--trace-mode", choices=("link", "session"), default="link")
    parser.add_argument("--conversation", action="store_true", help="run the scripted conversations, then exit")
    parser.add_argument("--url", help="with --conversation: the MCP endpoint of a server that is already running")
    args = parser.parse_args(argv)
    for noisy in ("httpx", "mcp"):  # the per-request INFO lines
        logging.getLogger(noisy).setLevel(logging.WARNING)

    provider = make_tracer_provider(endpoint=args.otlp_endpoint)
    # The MCP SDK's span (and your libraries' spans) come from the global provider.
    trace.set_tracer_provider(provider)
    summary = InMemoryMetricReader() if args.conversation else None
    meters = make_meter_provider(endpoint=args.otlp_metrics_endpoint, readers=[summary] if summary else [])
    try:
        if not args.conversation:
            import uvicorn

            app = build_app(tracer_provider=provider, meter_provider=meters, trace_mode=args.trace_mode)
            print(f"MCP endpoint http://{args.host}:{args.port}/mcp, spans to {args.otlp_endpoint}", flush=True)
            uvicorn.run(app, host=args.host, port=args.port)
            return 0
        # The scripted agent traces too: its own service, so its CLIENT spans are told apart in the viewer.
        agent = make_tracer_provider(endpoint=args.otlp_endpoint, service_name=CLIENT_SERVICE_NAME)
        try:
            with contextlib.ExitStack() as stack:
                if args.url:
                    url = args.url
                else:
                    # The environment's options (MCP_SESSIONS_CAPTURE_CONTENT, …), with a throwaway key of its own.
                    environ = {k: v for k, v in os.environ.items() if k not in _KEY_VARIABLES}
                    environ["MCP_SESSIONS_SECRET"] = secrets.token_urlsafe(32)
                    app = build_app(
                        tracer_provider=provider, meter_provider=meters, environ=environ, trace_mode=args.trace_mode
                    )
                    url = stack.enter_context(serve_in_thread(app))
                print(f"Two conversations with {url}; spans to {args.otlp_endpoint}", flush=True)
                sids = run_conversations(url, agent_tracer=agent.get_tracer("examples.tracing.agent"))
        finally:
            agent.shutdown()
        if summary is not None and not args.url:
            print("Metrics recorded (not exported unless --otlp-metrics-endpoint):")
            print("\n".join(_metrics_summary(summary)))
        print(f"Sessions: A = {sids['A']}, B = {sids['B']} (look for these ids in the viewer)")
        return 0
    finally:
        provider.shutdown()  # flushes the batch of spans still waiting
        meters.shutdown()


if __name__ == "__main__":
    sys.exit(main())
