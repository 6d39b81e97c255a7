"""Client-chosen values bounded before they name a span or label a metric.

As the OpenTelemetry HTTP conventions bound ``http.request.method``: a method,
tool, prompt or protocol version outside the known set becomes ``_OTHER``, and
the span alone keeps the original (cut short, tokens redacted) under
``mcp_sessions.*_original``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

from opentelemetry import metrics as otel_metrics
from opentelemetry.util.types import AttributeValue

__all__ = ["MAX_LEARNED_NAMES", "OTHER", "Vocabulary"]

# The OpenTelemetry conventions' value for a client-chosen name outside the known set.
OTHER: Final = "_OTHER"
# How many tool (and prompt) names the server lists are learned before the rest count as _OTHER.
MAX_LEARNED_NAMES: Final = 1000
_ORIGINAL_LIMIT: Final = 256
# A compact JWS (session ids and state tokens are), or what is left of one: never recorded.
_JWS_LIKE: Final = re.compile(r"eyJ[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*)*")
_LONG_BASE64URL: Final = re.compile(r"[A-Za-z0-9_-]{40,}")
_REDACTED: Final = "[redacted]"


class Vocabulary:
    """The values a metric attribute may take: the known ones, then up to ``cap`` learned ones; else ``_OTHER``."""

    __slots__ = ("_cap", "_names")

    def __init__(self, known: Iterable[str] = (), cap: int = MAX_LEARNED_NAMES) -> None:
        self._names = {name for name in known if type(name) is str}
        self._cap = len(self._names) + cap

    def learn(self, name: object) -> None:
        """Add ``name`` if it is a string and there is room (it stays once learned)."""
        if type(name) is str and len(self._names) < self._cap:
            self._names.add(name)

    def learn_listed(self, items: object) -> None:
        """Learn the ``name`` of every object in a list result (``tools``, ``prompts``)."""
        if type(items) is list:
            for item in items:
                if isinstance(item, dict):
                    self.learn(item.get("name"))

    def bounded(self, name: str) -> str:
        return name if name in self._names else OTHER


class _RejectionCounter:
    """The rejection counter, with its method attribute bounded like every metric's."""

    __slots__ = ("_counter", "_methods")

    def __init__(self, counter: otel_metrics.Counter, methods: frozenset[str]) -> None:
        self._counter = counter
        self._methods = methods

    def add(self, amount: int, attributes: Mapping[str, AttributeValue]) -> None:
        method = attributes.get("mcp.method.name")
        if method is not None and method not in self._methods:
            attributes = {**attributes, "mcp.method.name": OTHER}
        self._counter.add(amount, attributes)


def _original(value: str) -> str:
    """A client-chosen value kept on a span: bounded in length, and never anything shaped like a token."""
    return _JWS_LIKE.sub(_REDACTED, value[:_ORIGINAL_LIMIT])


def _redacted(text: str) -> str:
    """An error message for a span's status: tokens, and any long base64url run, replaced."""
    return _LONG_BASE64URL.sub(_REDACTED, _JWS_LIKE.sub(_REDACTED, text))
