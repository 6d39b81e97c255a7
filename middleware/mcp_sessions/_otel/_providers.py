"""The providers a middleware records with: whether one is an SDK's, and flushing them when the server stops.

Through ``opentelemetry-api`` only: an SDK provider is told apart from the API's stand-ins by its class,
and flushed by its ``force_flush`` method, found by name (the API declares none).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider, NoOpMeterProvider
from opentelemetry.trace import TracerProvider

__all__ = ["FLUSH_MILLIS", "flush_providers", "records"]

logger = logging.getLogger("mcp_sessions")

FLUSH_MILLIS: Final = 10_000
"""How long each provider may take to export what it holds when the server stops (the SDK's default for metrics)."""
# The API's stand-ins before (or without) an SDK: nothing they make records.
_STAND_INS: Final = (trace.ProxyTracerProvider, trace.NoOpTracerProvider, NoOpMeterProvider)
# The API's own package for metrics, where its (unexported) proxy MeterProvider is defined.
_METRICS_API: Final = "opentelemetry.metrics"


def records(provider: TracerProvider | MeterProvider) -> bool:
    """Whether ``provider`` is an SDK's (or any real implementation's), not one of the API's stand-ins."""
    if isinstance(provider, _STAND_INS):
        return False
    module = type(provider).__module__
    return module != _METRICS_API and not module.startswith(_METRICS_API + ".")


def flush_providers(tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None) -> None:
    """Export what the given providers and the global ones still hold (blocking; bounded by :data:`FLUSH_MILLIS`).

    For the end of the app's lifespan: uvicorn re-raises the SIGTERM it caught once its graceful shutdown is
    done, so the process ends by the signal and the SDK's own exit flush (an ``atexit`` handler) never runs.
    The global providers are flushed too: the MCP SDK's own span, and most libraries', come from them.
    """
    given: tuple[object, ...] = (tracer_provider, trace.get_tracer_provider(), meter_provider)
    providers: list[object] = []
    for provider in (*given, otel_metrics.get_meter_provider()):
        if provider is not None and not any(provider is seen for seen in providers):
            providers.append(provider)
    for provider in providers:
        force_flush = getattr(provider, "force_flush", None)
        if callable(force_flush):
            _flush(force_flush, provider)


def _flush(force_flush: Callable[..., object], provider: object) -> None:
    """One provider's flush; a failure is logged, never raised: the server is stopping either way."""
    try:
        try:
            flushed = force_flush(FLUSH_MILLIS)
        except TypeError:  # a provider whose force_flush takes no timeout
            flushed = force_flush()
    except Exception:
        logger.exception("could not flush the telemetry of %s at shutdown", type(provider).__qualname__)
        return
    if flushed is False:
        logger.warning(
            "%s did not export everything within %d ms at shutdown", type(provider).__qualname__, FLUSH_MILLIS
        )
