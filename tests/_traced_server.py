"""The quickstart, traced, for a server process of its own (uvicorn, gunicorn): ``_traced_server:app()``.

Its spans go over OTLP/HTTP to ``TRACED_SERVER_OTLP`` through a batch whose timer never fires in a test's
time (an hour), so that only a flush exports them: a test that stops the server finds the spans of its
requests only if something flushed them before the process ended. The provider is the global one, as
docs/observability.md sets it up, and the middleware is not given it.
"""

from __future__ import annotations

import os

from examples.quickstart import build_app
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from conftest import SECRET
from mcp_sessions import MCPSessionMiddleware

HOUR_MILLIS = 3_600_000


def app() -> MCPSessionMiddleware:
    provider = TracerProvider(resource=Resource.create({"service.name": "traced-server"}))
    exporter = OTLPSpanExporter(endpoint=os.environ["TRACED_SERVER_OTLP"])
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=HOUR_MILLIS))
    trace.set_tracer_provider(provider)
    return build_app(json_response=True, environ={"MCP_SESSIONS_SECRET": SECRET})
