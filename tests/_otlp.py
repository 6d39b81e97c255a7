"""A tiny OTLP/HTTP trace receiver on 127.0.0.1 (a Starlette app): what an exporter POSTs to /v1/traces, decoded
(and to /v1/metrics, taken).

No viewer, no network beyond loopback: the tests serve it with :func:`conftest.serve` and read its spans.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

STATUS_ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR
KIND_SERVER = 2  # opentelemetry.proto.trace.v1.Span.SPAN_KIND_SERVER
KIND_CLIENT = 3  # opentelemetry.proto.trace.v1.Span.SPAN_KIND_CLIENT


@dataclass
class Exported:
    """One span as it arrived at the receiver."""

    service: str
    scope: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    status: int
    kind: int = 0
    resource: dict[str, Any] = field(default_factory=dict)
    """The attributes of the resource that exported it (``service.name`` among them)."""


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return None if kind is None else getattr(value, kind)


class Receiver:
    """Counts the OTLP/HTTP POSTs to /v1/traces and keeps their spans."""

    def __init__(self) -> None:
        self.posts = 0
        self.spans: list[Exported] = []
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[
                Route("/v1/traces", self._traces, methods=["POST"]),
                Route("/v1/metrics", self._metrics, methods=["POST"]),
            ]
        )

    async def _metrics(self, request: Request) -> Response:
        """Metrics are taken, not decoded: an exporter of both signals gets no error."""
        await request.body()
        return Response(ExportMetricsServiceResponse().SerializeToString(), media_type="application/x-protobuf")

    async def _traces(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        spans = []
        for resource_spans in export.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        Exported(
                            service=resource.get("service.name", ""),
                            scope=scope_spans.scope.name,
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes={kv.key: _value(kv.value) for kv in span.attributes},
                            status=span.status.code,
                            kind=span.kind,
                            resource=resource,
                        )
                    )
        with self._lock:
            self.posts += 1
            self.spans.extend(spans)
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type="application/x-protobuf")

    def by_id(self) -> dict[str, Exported]:
        return {span.span_id: span for span in self.spans}

    def ancestors(self, span: Exported) -> list[Exported]:
        spans, chain = self.by_id(), []
        while span.parent_id in spans:
            span = spans[span.parent_id]
            chain.append(span)
        return chain
