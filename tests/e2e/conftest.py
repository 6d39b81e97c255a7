"""Fixtures the end-to-end modules share."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from examples.quickstart import build_app

from _otel import SpanLog, global_tracing
from _otlp import Receiver
from conftest import SECRET, serve
from e2e._issuer import jwks as served_jwks
from e2e._sealed import hostile


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


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The log lines of the gateways in this process (``mcp_sessions.gateway``'s) while the test runs."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler, logger = Collect(), logging.getLogger("mcp_sessions.gateway")
    monkeypatch.setattr(logger, "disabled", False)  # a uvicorn of another test may have disabled it
    caplog.set_level(logging.INFO, logger.name)  # its level, as it was, once the test ends
    logger.addHandler(handler)
    yield lines  # what follows runs whatever the test's outcome
    logger.removeHandler(handler)


@pytest.fixture(scope="module", params=["json", "sse"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The quickstart served for real, answering in JSON and in SSE: its base URL, for the module."""
    with serve(build_app(json_response=request.param == "json", environ={"MCP_SESSIONS_SECRET": SECRET})) as base:
        yield base


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The hostile stdio server's command (``e2e._sealed.hostile``), for the module: the sealed gateways' tests."""
    with hostile() as command:
        yield command


@pytest.fixture(scope="module")
def jwks() -> Iterator[str]:
    """The authorization server's JWKS on loopback (``e2e._issuer``), for the module: its URL."""
    with served_jwks() as url:
        yield url
