"""Fixtures the end-to-end modules share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from _otel import SpanLog, global_tracing


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
