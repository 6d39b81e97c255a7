"""Client-chosen values bounded before they name a span or label a metric.

As the OpenTelemetry HTTP conventions bound ``http.request.method``: a method,
tool, prompt or protocol version outside the known set becomes ``_OTHER``, and
the span alone keeps the original under ``mcp_sessions.*_original``.

Every client-chosen string a span keeps (those originals, ``jsonrpc.request.id``,
``mcp.resource.uri``, a status or exception message) goes through :func:`_redacted`:
at most :data:`MAX_RECORDED_CHARS` characters, cut outside a run of base64url
characters, and each run that holds ``eyJ`` (a compact JWS: session and state
tokens) or has :data:`OPAQUE_CHARS` characters or more becomes ``[redacted]``.
A bearer value recorded as an id is a keyed digest (:func:`process_digest`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from opentelemetry import metrics as otel_metrics
from opentelemetry.util.types import AttributeValue

from ._content import REDACTED, TRUNCATED, redacted

# The OpenTelemetry conventions' value for a client-chosen name outside the known set.
OTHER: Final = "_OTHER"
# How many tool (and prompt) names the server lists are learned before the rest count as _OTHER.
MAX_LEARNED_NAMES: Final = 1000
MAX_RECORDED_CHARS: Final = 256
"""The most characters of a client-chosen string a span keeps, the truncation marker included."""
OPAQUE_CHARS: Final = 32
"""The shortest run of base64url characters redacted whatever it holds: the MCP SDK's transport session id
(``uuid4().hex``) has 32, a handle 37 or more, a token's signature 43 or more."""
_BASE64URL: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_RUN: Final = re.compile(r"[A-Za-z0-9_-]+")


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


def _redacted(text: str) -> str:
    """A client-chosen string as a span keeps it: bounded, and with nothing shaped like a bearer value."""
    if len(text) < OPAQUE_CHARS and "eyJ" not in text:
        return text  # no run in it can be redacted
    return redacted(text, MAX_RECORDED_CHARS, MAX_RECORDED_CHARS - len(TRUNCATED), _BASE64URL, _RUN, _redacted_run)


def _redacted_run(run: re.Match[str]) -> str:
    value = run[0]
    return REDACTED if len(value) >= OPAQUE_CHARS or "eyJ" in value else value


def process_digest(prefix: str) -> Callable[[str | bytes], str]:
    """A keyed digest under a random key of this process: ``prefix`` and 24 base64url characters (144 bits of
    HMAC-SHA256), the format of the key set's own digests (``_tokens/_digest.py``), for when none is given."""
    key = secrets.token_bytes(32)

    def digest(value: str | bytes) -> str:
        data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
        return prefix + base64.urlsafe_b64encode(hmac.new(key, data, hashlib.sha256).digest()[:18]).decode()

    return digest
