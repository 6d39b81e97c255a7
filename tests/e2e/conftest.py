"""Fixtures the end-to-end modules share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from examples.quickstart import build_app

from _otel import SpanLog, global_tracing
from _otlp import Receiver
from conftest import SECRET, serve


@pytest.fixture(scope="module")
def span_log() -> Iterator[SpanLog]:
    """The process's SDK TracerProvider for the module, its spans kept in memory (``_otel.global_tracing``)."""
    with global_tracing() as exporter:
        yield SpanLog(exporter)


@pytest.fixture
def spans(span_log: SpanLog) -> SpanLog:
    """``span_log``, emptied for the test."""
    span_log.clear()
    return span_log


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    """An OTLP/HTTP receiver on a real uvicorn, for exporters in other processes: it and its traces URL."""
    receiver = Receiver()
    with serve(receiver.app) as base:
        yield receiver, f"{base}/v1/traces"


@pytest.fixture(scope="module", params=["json", "sse"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The quickstart served for real, answering in JSON and in SSE: its base URL, for the module."""
    with serve(build_app(json_response=request.param == "json", environ={"MCP_SESSIONS_SECRET": SECRET})) as base:
        yield base
