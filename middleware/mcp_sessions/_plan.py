"""Parse once and classify: which messages a request holds, their era and the wire each speaks.

A single message and a batch are the same here: a plan of calls, one per
element. Nothing in a plan is decided about sessions yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _jsonrpc as jsonrpc
from ._protocol import MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER, Era

if TYPE_CHECKING:
    from ._answers import Refusal
    from ._session import Session
    from ._telemetry import Operation
    from .handles import Handle, HandleContext, HandleError
    from .profiles import LocalMethod, WireProfile

__all__ = ["Call", "Plan", "Planner"]


class Call:
    """One element of a request: a JSON-RPC call (``method`` set) or anything else in a batch."""

    __slots__ = (
        "answer",
        "handles",
        "local",
        "message",
        "method",
        "operation",
        "profile",
        "refusal",
        "request_id",
        "session",
    )

    def __init__(self, message: Any, method: str | None, profile: WireProfile, local: LocalMethod | None) -> None:
        self.message = message
        self.method = method
        self.profile = profile
        self.local = local
        self.request_id = jsonrpc.request_id_of(message) if isinstance(message, dict) else None
        self.session: Session | None = None
        self.refusal: Refusal | None = None
        self.operation: Operation | None = None
        # A result decided before forwarding (a refused handle's isError result), and the handles checked.
        self.answer: dict[str, Any] | None = None
        self.handles: tuple[list[Handle], list[HandleError]] | None = None

    @property
    def is_request(self) -> bool:
        """A call with an id expects an answer; one without is a notification."""
        return isinstance(self.message, dict) and "id" in self.message

    @property
    def params(self) -> Any:
        return self.message.get("params") if isinstance(self.message, dict) else None


class Plan:
    """What one HTTP request carries, parsed and classified."""

    __slots__ = ("batch", "calls", "era", "handles", "header_session_id", "headers", "protocol_version", "start_ns")

    def __init__(self, calls: list[Call], *, batch: bool, headers: dict[bytes, bytes], start_ns: int) -> None:
        self.calls = calls
        self.batch = batch
        self.headers = headers
        self.header_session_id = headers.get(MCP_SESSION_ID_HEADER)
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        self.protocol_version = None if version is None else version.decode("latin-1")
        self.era = Era.of(self.protocol_version)
        self.start_ns = start_ns
        self.handles: HandleContext | None = None  # with handles configured: the request's handle view

    @property
    def local(self) -> Call | None:
        """The call of a local method, when the request is one (local methods never come in batches)."""
        call = self.calls[0]
        return call if not self.batch and call.local is not None else None


class Planner:
    """Built once per middleware from the enabled wires."""

    __slots__ = ("_default", "_profiles", "_watch")

    def __init__(self, profiles: Sequence[WireProfile]) -> None:
        self._profiles = tuple(profiles)
        self._default = profiles[0]
        self._watch = jsonrpc.Watch(
            (p.carrier.meta_key for p in profiles), (n for p in profiles for n in p.carrier.path_names)
        )

    def plan(self, body: bytes, headers: dict[bytes, bytes], start_ns: int) -> Plan | None:
        """The plan of a JSON-RPC request; ``None`` for anything else (the app answers it)."""
        parsed = jsonrpc.loads(body, watch=self._watch)
        if isinstance(parsed, dict):
            call = self.call(parsed)
            if call.method is None:
                return None
            call.request_id = parsed.get("id")  # repeated as sent; batch elements' ids are sanitised
            return Plan([call], batch=False, headers=headers, start_ns=start_ns)
        if type(parsed) is list and parsed:
            calls = [self.call(element) for element in parsed]
            if all(call.method is None for call in calls):
                return None
            return Plan(calls, batch=True, headers=headers, start_ns=start_ns)
        return None

    def call(self, message: Any) -> Call:
        """Classify one message: the wire it speaks (else the first), and its local method if any."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return Call(message, None, self._default, None)
        method = message.get("method")
        if type(method) is not str:
            return Call(message, None, self._default, None)
        for profile in self._profiles:
            if profile.speaks(message, method):
                return Call(message, method, profile, profile.methods.get(method))
        return Call(message, method, self._default, None)
