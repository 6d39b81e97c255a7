"""Read and plan: the headers the pipeline reads, then parse once and classify: which messages a request holds,
their era and the wire each speaks.

A single message and a batch are the same here: a plan of calls, one per element. Nothing in a plan is decided
about sessions yet.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from starlette.types import Scope

from ._asgi import EndpointPaths, headers_of, route_path
from ._session import SessionNotFound
from ._wire import Refusal, jsonrpc
from ._wire.protocol import MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER
from .profiles import Era
from .sources import MAX_SESSIONS_PER_REQUEST, Conversation

if TYPE_CHECKING:
    from ._otel import Operation
    from ._session import Session
    from .handles import Handle, HandleContext, HandleError
    from .profiles import LocalMethod, WireProfile

T = TypeVar("T")


class Call:
    """One element of a request: a JSON-RPC call (``method`` set) or anything else in a batch."""

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
        self.named: dict[tuple[str, ...], object] | None = None
        """What each session the request names resolved to (by a source's key: its name and the session's
        reference; see :meth:`once`), so that a session many elements name costs one check and one store round
        trip."""

    async def once(self, key: tuple[str, ...], find: Callable[[], Awaitable[T]]) -> T | None:
        """``find()`` for the first call of the request that names ``key``, its outcome reused for a batch's others
        (a refusal or a session not found raised again); ``None`` once the request names
        :data:`MAX_SESSIONS_PER_REQUEST` other sessions."""
        named = self.named = self.named or {}
        if key not in named:
            if len(named) >= MAX_SESSIONS_PER_REQUEST:
                return None
            try:
                named[key] = await find()
            except (Refusal, SessionNotFound) as refused:
                named[key] = refused
                raise
        if isinstance(found := named[key], Refusal | SessionNotFound):
            raise found
        return cast("T", found)

    @property
    def protocol_version(self) -> str | None:
        """The ``Mcp-Protocol-Version`` header as sent (read by telemetry only)."""
        version = self.headers.get(MCP_PROTOCOL_VERSION_HEADER)
        return None if version is None else version.decode("latin-1")


class Planner:
    """Built once per middleware from the enabled wires."""

    def __init__(self, profiles: Sequence[WireProfile], *, strict: bool = False) -> None:
        """``strict`` (a gateway's): bodies read as :func:`jsonrpc.read` reads them strictly, and one it cannot read
        refused, as a server it does not know may read it otherwise."""
        self._profiles = tuple(profiles)
        self._default = profiles[0]
        self._strict = strict

    def plan(self, body: bytes, headers: dict[bytes, bytes], start_ns: int) -> Plan | None:
        """The plan of a JSON-RPC request; ``None`` for anything else (the app answers it). A body the middleware
        cannot check raises :class:`jsonrpc.Unreadable`: one nested deeper than the reader reads, and, ``strict``,
        any body it cannot read."""
        try:
            parsed = jsonrpc.read(body, strict=self._strict)
        except jsonrpc.Unreadable as unread:
            if self._strict or isinstance(unread, jsonrpc.TooDeep):
                raise
            return None  # not JSON to json.loads either: the app answers its own parse error
        if isinstance(parsed, dict):
            call = self.call(parsed)
            if call.method is None:
                return None  # not a call: the app answers it
            call.request_id = parsed.get("id")  # repeated as sent
            return Plan([call], False, headers, start_ns)
        if type(parsed) is not list or not parsed:
            return None
        calls = [self.call(element) for element in parsed]
        if all(call.method is None for call in calls):
            return None
        for call in calls:
            call.request_id = jsonrpc.request_id_of(call.message)  # only ids that can be echoed
        return Plan(calls, True, headers, start_ns)

    def call(self, message: Any) -> Call:
        """Classify one message: the first wire that has its method, else the first whose session key it carries,
        else the first wire; and the local method it calls, if any."""
        method = message.get("method") if isinstance(message, dict) and message.get("jsonrpc") == "2.0" else None
        if type(method) is not str:
            return Call(message, None, self._default, None)
        for profile in self._profiles:
            if (local := profile.methods.get(method)) is not None:
                return Call(message, method, profile, local)
        speaks = (p for p in self._profiles if p.carrier.present(message))
        return Call(message, method, next(speaks, self._default), None)


def json_rpc_headers(scope: Scope, paths: EndpointPaths | frozenset[str] | None) -> dict[bytes, bytes] | None:
    """The headers of a POST of JSON to the MCP path (``paths``; ``None``: any), what the pipeline reads; ``None``
    for anything else (the app's, untouched)."""
    if scope["method"] != "POST":
        return None
    headers = headers_of(scope)
    if not headers.get(b"content-type", b"").lower().startswith(b"application/json"):  # media types: any case
        return None
    return headers if paths is None or scope["path"] in paths or route_path(scope) in paths else None


def body_of(plan: Plan) -> Any:
    """The parsed body, as the guard reads it: one message, or the batch."""
    return [call.message for call in plan.calls] if plan.batch else plan.calls[0].message
