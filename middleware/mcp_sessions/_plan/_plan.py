"""Parse once and classify: which messages a request holds, their era and the wire each speaks.

A single message and a batch are the same here: a plan of calls, one per element. Nothing in a plan is decided
about sessions yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any

from .._wire import jsonrpc
from .._wire.jsonrpc import UNMARKED
from .._wire.protocol import MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER, Era

if TYPE_CHECKING:
    from .._otel import Operation
    from .._session import Session
    from .._wire import Refusal
    from ..handles import Handle, HandleContext, HandleError
    from ..profiles import LocalMethod, WireProfile


@dataclass(slots=True, eq=False)
class Conversation:
    """Who a call belongs to, as telemetry names it: an id and the source that found it.

    Application code never sees one: it sees a :class:`~mcp_sessions.Session`
    or nothing. A host's conversation id without data (``conversation_data``
    off) is only this, so ``get_session()`` is ``None`` while every span of the
    request still carries ``session.id``.
    """

    id: str
    """The conversation's id, as the host or the source named it."""
    source: str
    """The name of what found it: a host (``openai``…), ``baggage``, or a source's own name."""
    _: KW_ONLY
    user: str | None = None
    """A user id the host sent beside it (ChatGPT's anonymized ``openai/subject``)."""
    turn: str | None = None
    """The turn of the conversation this call is part of (Codex's ``turn_id``)."""
    no_data: str | None = None
    """Why a conversation that could have had data has none (it goes into the "session required" error)."""

    def __repr__(self) -> str:
        return f"<Conversation source={self.source!r} id={self.id!r}>"


class Call:
    """One element of a request: a JSON-RPC call (``method`` set) or anything else in a batch."""

    __slots__ = (
        "answer",
        "conversation",
        "handles",
        "is_request",
        "local",
        "message",
        "method",
        "minted",
        "operation",
        "profile",
        "refusal",
        "request_id",
        "revoked",
        "session",
    )

    def __init__(self, message: Any, method: str | None, profile: WireProfile, local: LocalMethod | None) -> None:
        self.message = message
        """The element as parsed (a JSON-RPC call is a dict)."""
        self.method = method
        """The JSON-RPC method; ``None`` for anything that is not a call."""
        self.profile = profile
        """The wire the call speaks (else the first enabled one)."""
        self.local = local
        """The session method the middleware answers itself, if the call is one."""
        self.is_request = isinstance(message, dict) and "id" in message
        """A call with an id expects an answer; one without is a notification."""
        self.request_id: object = None
        """Set by the planner: as sent for one message, sanitised in a batch."""
        self.session: Session | None = None
        """The session a source found for it."""
        self.refusal: Refusal | None = None
        """The refusal it is answered with, instead of reaching the app."""
        self.operation: Operation | None = None
        """Its telemetry: the span and metrics of this call."""
        self.revoked: str | None = None
        """Why the session it named is gone, on a wire that treats that as "no session" and says so."""
        self.minted = False
        """Its session was opened by this very message (SEP-1364 alt. 2's initialize)."""
        self.conversation: Conversation | None = None
        """Who it belongs to in telemetry, when a source named a conversation without giving it a session."""
        self.answer: dict[str, object] | None = None
        """A result decided before forwarding (a refused handle's isError result)."""
        self.handles: tuple[list[Handle], list[HandleError]] | None = None
        """The handles checked: those verified, and the errors of those refused."""

    @property
    def params(self) -> Any:
        """The call's ``params`` (``None`` when it has none)."""
        return self.message.get("params") if isinstance(self.message, dict) else None


class Plan:
    """What one HTTP request carries, parsed and classified."""

    __slots__ = (
        "answered",
        "batch",
        "calls",
        "era",
        "handles",
        "header_session_id",
        "headers",
        "local",
        "named",
        "refused",
        "start_ns",
        "traced",
        "unmarked",
    )

    def __init__(self, calls: list[Call], batch: bool, headers: dict[bytes, bytes], start_ns: int) -> None:
        self.calls = calls
        """The request's calls, one per element (one for a single message)."""
        self.batch = batch
        """Whether the request is a JSON-RPC batch."""
        self.headers = headers
        """The request's headers, by lower-case name (the first of each)."""
        self.header_session_id = headers.get(MCP_SESSION_ID_HEADER)
        """The ``Mcp-Session-Id`` header as sent, if any."""
        self.era = Era.of(headers.get(MCP_PROTOCOL_VERSION_HEADER))
        """The protocol era, which the ``Mcp-Protocol-Version`` header alone decides."""
        self.local = None if batch or calls[0].local is None else calls[0]
        """The call of a local method, when the request is one (local methods never come in batches)."""
        self.start_ns = start_ns
        """When the request arrived (``time.time_ns()``), for its telemetry."""
        self.handles: HandleContext | None = None
        """With handles configured: the request's handle view."""
        self.refused = False
        """Some call has a refusal: nothing is forwarded."""
        self.answered = False
        """Some call has an answer decided before the tool (a refused handle)."""
        self.traced = False
        """Whether an OpenTelemetry SDK records this request (set before its sessions are resolved)."""
        self.unmarked = False
        """Whether the body cannot name a session on any enabled wire: UTF-8 without the wire's marker, and no
        escape that could spell one. A source that reads a wire's carrier has nothing to read then."""
        self.named: dict[tuple[str, ...], object] | None = None
        """In a batch: what each session its elements name resolved to (by a source's key: its name and the
        session's reference), so that a session many elements name costs one check and one store round trip."""

    @property
    def protocol_version(self) -> str | None:
        """The ``Mcp-Protocol-Version`` header as sent (read by telemetry only)."""
        version = self.headers.get(MCP_PROTOCOL_VERSION_HEADER)
        return None if version is None else version.decode("latin-1")


class Planner:
    """Built once per middleware from the enabled wires."""

    __slots__ = ("_declarers", "_default", "_guarded", "_methods", "_openers", "_profiles", "_watch", "strips")

    def __init__(self, profiles: Sequence[WireProfile]) -> None:
        self._profiles = tuple(profiles)
        self._default = profiles[0]
        self._watch = jsonrpc.Watch(
            (p.carrier.marker for p in profiles), (n for p in profiles for n in p.carrier.path_names)
        )
        # Wires with more than the draft's needs; each is empty when only the draft is on.
        self._openers = tuple(p for p in profiles if p.carrier.opening_methods)
        self._declarers = tuple(p for p in profiles if p.declared is not None)
        self._guarded = frozenset(m for p in profiles for m, local in p.methods.items() if local.applies is not None)
        self.strips = any(p.carrier.strips for p in profiles)
        """Whether some enabled wire's session member must be removed before the app sees a request."""
        # One wire that needs nothing but its method table (the draft alone): one lookup, nothing to choose.
        simple = not (self._openers or self._declarers or self._guarded or self.strips)
        self._methods = profiles[0].methods if len(profiles) == 1 and simple else None

    def plan(self, body: bytes, headers: dict[bytes, bytes], start_ns: int) -> Plan | None:
        """The plan of a JSON-RPC request; ``None`` for anything else (the app answers it)."""
        scan = self._watch.scan(body)  # whether a session member is spelled, and whether a name repeats
        parsed = jsonrpc.loads(body, watch=self._watch, scan=scan)
        if isinstance(parsed, dict):
            call = self.call(parsed)
            if call.method is None:
                return None  # not a call: the app answers it
            call.request_id = parsed.get("id")  # repeated as sent
            plan = Plan([call], False, headers, start_ns)
            # One wire's marker, not spelled in UTF-8, nor escaped (UTF-16 and UTF-32 have NULs).
            plan.unmarked = scan == UNMARKED and self._watch.marker is not None and 0 not in body
            return plan
        if type(parsed) is not list or not parsed:
            return None
        calls = [self.call(element) for element in parsed]
        if all(call.method is None for call in calls):
            return None
        for call in calls:
            call.request_id = jsonrpc.request_id_of(call.message)  # only ids that can be echoed
        return Plan(calls, True, headers, start_ns)

    def call(self, message: Any) -> Call:
        """Classify one message: the wire it speaks (else the first), and its local method if any."""
        method = message.get("method") if isinstance(message, dict) and message.get("jsonrpc") == "2.0" else None
        if type(method) is not str:
            return Call(message, None, self._default, None)
        if self._methods is not None:
            return Call(message, method, self._default, self._methods.get(method))
        for profile in self._openers:
            if profile.carrier.opens(message, method):
                return Call(message, method, profile, profile.local_for(message, method))
        # A wire's own method wins over another wire's session member (alt. 2's terminate carries alt. 1's).
        for profile in self._profiles:
            if (local := profile.local_for(message, method)) is not None:
                return Call(message, method, profile, local)
        for profile in self._profiles:
            if profile.carrier.present(message):
                return Call(message, method, profile, None)
        if method in self._guarded:
            # A shared method name in no enabled wire's shape: the first wire that has it answers (-32602).
            for profile in self._profiles:
                if (local := profile.methods.get(method)) is not None:
                    return Call(message, method, profile, local)
        for profile in self._declarers:
            assert profile.declared is not None
            if profile.declared(message):
                return Call(message, method, profile, None)
        return Call(message, method, self._default, None)
