"""What trace viewers read of a whole trace from its root span: its name, what kind of call it was, who made it.

Phoenix names a trace after its root span. MLflow 3.17's OTLP ingestion turns each ``mlflow.traceTag.<key>``
attribute of the root span into the trace tag ``<key>`` and names the trace only from ``mlflow.traceName``
(else its "Trace name" column shows ``-``). Langfuse names and tags a trace from ``langfuse.trace.name``
and ``langfuse.trace.tags``. The middleware's span carries these only when it is the root of its trace; every
span of it says what kind of call it is (:data:`CALL_KIND_ATTRIBUTE`), so a viewer can leave out the
housekeeping: a client's handshake, discovery and listings, which often carry no session.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any, Final, Literal

from opentelemetry.util.types import AttributeValue

from .._wire.protocol import KNOWN_METHODS
from ._names import _redacted, process_digest

CALL_KIND_ATTRIBUTE: Final = "mcp_sessions.call.kind"
TURN: Final = "turn"
"""A call that does the conversation's work: ``tools/call``, ``prompts/get``, ``resources/read``, any other method."""
SESSION: Final = "session"
"""A session method of an enabled wire: ``sessions/create``, ``sessions/delete``."""
HOUSEKEEPING: Final = "housekeeping"
"""What a client does around the conversation: the handshake, discovery, listings, pings, notifications."""
HOUSEKEEPING_METHODS: Final = KNOWN_METHODS - {"completion/complete", "prompts/get", "resources/read", "tools/call"}
"""Every method a client sends but the turns: :data:`HOUSEKEEPING` calls."""

TraceUserMode = Literal["digest", "name"]


def call_kinds(session_methods: Iterable[str]) -> dict[str, str]:
    """The kind of each method that is not a turn (every other method, ``_OTHER`` included, is a turn)."""
    kinds = dict.fromkeys(HOUSEKEEPING_METHODS, HOUSEKEEPING)
    kinds.update(dict.fromkeys(session_methods, SESSION))
    return kinds


def trace_names(name: str) -> dict[str, AttributeValue]:
    """The root span's attributes that name its trace in MLflow and Langfuse (Phoenix reads the span's name)."""
    return {"mlflow.traceTag.mlflow.traceName": name, "langfuse.trace.name": name}


def root_attributes(name: str, kind: str) -> dict[str, AttributeValue]:
    """Everything a root span of the middleware adds for the viewers: the trace's name, and its kind as a tag."""
    return {**trace_names(name), "mlflow.traceTag." + CALL_KIND_ATTRIBUTE: kind, "langfuse.trace.tags": (kind,)}


class TraceUser:
    """``user.id`` from the principal the server authenticated (the ``trace_user`` option): a digest, or the name.

    ``principal`` is the middleware's principal hook (what binds a session to its creator), asked once
    per traced request. ``digest`` keys the digest (every replica that shares the signing keys computes
    the same one); without it, a random key of this process does. A name is redacted and bounded as
    every client-chosen string on a span is (``_names._redacted``): a principal may be a token.
    """

    __slots__ = ("_digest", "_principal", "mode")

    def __init__(
        self,
        mode: TraceUserMode,
        principal: Callable[[MutableMapping[str, Any]], object],
        digest: Callable[[str], str] | None,
    ) -> None:
        if mode not in ("digest", "name"):
            raise ValueError('trace_user must be "digest", "name" or None')
        self.mode = mode
        self._principal = principal
        self._digest = process_digest("u-") if digest is None else digest

    async def user_id(self, scope: MutableMapping[str, Any]) -> str | None:
        """The user of the request ``scope`` is, as ``user.id`` records it; ``None`` when it has no principal."""
        try:
            principal = self._principal(scope)
            if inspect.isawaitable(principal):
                principal = await principal
        except Exception:  # the session work answers a failing hook; telemetry only goes without a user
            return None
        if principal is None:
            return None
        return self._digest(str(principal)) if self.mode == "digest" else _redacted(str(principal))
