"""What a session wire decides, as data: :class:`WireProfile` and its parts.

A profile names its methods and what each does, where a request carries its
session (``_carriers.py``), what the echo looks like and where it goes
(``_echo_shapes.py``), where the capability is advertised in each era, and its
error codes. The pipeline asks the enabled profiles, in order, which one a
message speaks, and never names a literal of its own. A method the middleware
answers itself gets a :class:`LocalCall`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from starlette.types import Scope

from .._session import Minted, Session, SessionService
from .._wire import Refusal
from .._wire.protocol import HEADER_MISMATCH, INVALID_PARAMS, Era
from ._carriers import Carrier
from ._echo_shapes import EchoShape

if TYPE_CHECKING:
    from .._otel import Operation

SESSIONLESS: Final = frozenset({"initialize", "notifications/initialized", "server/discover", "ping"})
"""What a client calls before it can hold a session: a policy that requires sessions everywhere lets these through."""
_MAX_ECHOED_ID: Final = 256


@dataclass(slots=True)
class LocalCall:
    """One call of a local method, as its answer function sees it; the answer returns a result or raises a Refusal."""

    scope: Scope
    """The request's ASGI scope."""
    message: dict[str, object]
    """The JSON-RPC request."""
    profile: WireProfile
    """The wire the call speaks."""
    era: Era
    """The protocol era of the request."""
    sessions: SessionService
    """The middleware's sessions: mint, resolve, revoke."""
    session: Session | None
    """The verified session the call names, for methods that need one."""
    operation: Operation | None
    """The call's telemetry, when it is traced."""
    envelope: dict[str, object] = field(default_factory=dict)
    """Members the answer adds beside ``result`` (SEP-1364's top-level ``sessionId``)."""
    minted: Minted | None = None
    """The session this call opened, if it opened one."""

    @property
    def params(self) -> dict[str, object]:
        """The call's params; an object (the pipeline refuses anything else), empty when absent."""
        params = self.message.get("params")
        return params if isinstance(params, dict) else {}

    def string_param(self, name: str, *, max_length: int) -> str | None:
        """An optional string parameter, bounded; -32602 when it is anything else."""
        value = self.params.get(name)
        if value is not None and (type(value) is not str or len(value) > max_length):
            raise Refusal(INVALID_PARAMS, f"{name} must be a string of at most {max_length} characters")
        return value

    async def mint(self) -> Minted:
        """A new session for the caller, counted in telemetry."""
        minted = self.minted = await self.sessions.mint(self.scope, self.operation)
        if (operation := self.operation) is not None:
            operation.set_session(minted.claims.session_id)
            operation.telemetry.sessions_created.add(1, operation.session_attributes())
        return minted

    async def end(self, session: Session, token: str) -> None:
        """End ``session`` everywhere; the wire's "not found" error if it had already ended."""
        if not await self.revoke(session):
            raise self.profile.not_found_refusal(token, "revoked", session.id)

    async def revoke(self, session: Session) -> bool:
        """End ``session`` everywhere, counted in telemetry; ``False`` if it had already ended."""
        revoked = await self.sessions.revoke(session, self.scope)
        if revoked and (operation := self.operation) is not None:
            attributes = operation.session_attributes()
            operation.telemetry.sessions_deleted.add(1, attributes)
            operation.telemetry.session_duration.record(max(time.time() - session.issued_at, 0.0), attributes)
        return revoked


LocalAnswer = Callable[[LocalCall], Awaitable[dict[str, object]]]


@dataclass(frozen=True, slots=True)
class Capability:
    """Where the server's support is advertised: paths under ``capabilities`` of a result, in each era."""

    per_request: tuple[tuple[str, ...], ...]
    """The places in a ``server/discover`` result (2026-07-28)."""
    handshake: tuple[tuple[str, ...], ...]
    """The places in an ``initialize`` result (2025 and earlier)."""
    settings: Callable[[bool], dict[str, object]] | None = None
    """The value from "the policy requires a session everywhere"; by default ``{}`` or ``{"required": true}``."""
    merge: bool = False
    """Add this wire's members to an object another wire (or the server) already put at the same place."""

    def places(self, era: Era) -> tuple[tuple[str, ...], ...]:
        """The paths under ``capabilities`` where the capability goes in ``era``."""
        return self.per_request if era is Era.MODERN else self.handshake

    def value(self, *, required: bool) -> dict[str, object]:
        """The capability's value, from whether the policy requires a session for everything."""
        if self.settings is not None:
            return self.settings(required)
        return {"required": True} if required else {}


@dataclass(frozen=True, slots=True)
class LocalMethod:
    """A method the middleware answers itself: never forwarded to the app."""

    needs_session: bool
    """Whether the call must name a live session, which the pipeline resolves first."""
    answer: LocalAnswer
    """The function that answers a call: the result object, or :class:`Refusal`."""
    applies: Callable[[dict[str, object]], bool] | None = None
    """When two wires share a method name: whether a message is of this wire's shape (default: always)."""


@dataclass(frozen=True, slots=True)
class ClientSide:
    """What the client shim needs of a wire beyond its carrier and echo: its own create and delete."""

    create_params: Callable[[str | None], dict[str, object]]
    """The params of the create request, from the handle's label."""
    created: Callable[[dict[str, object]], tuple[str, dict[str, object]] | None]
    """The token and echo (in the wire's member names) of a create result, ``None`` when it has none."""
    delete_method: str
    """The method that ends a session."""
    delete_params: Callable[[str], dict[str, object]]
    """The params of the delete request for a session token (the pipeline adds the ``_meta`` envelope)."""
    deleted: Callable[[dict[str, object]], bool]
    """Whether a delete result ended a live session."""
    advertised: Callable[[dict[str, object]], bool]
    """Whether a server's ``capabilities`` advertise this wire."""


@dataclass(frozen=True, slots=True)
class WireProfile:
    """Everything one session wire decides. The draft is :data:`mcp_sessions.profiles.DRAFT`."""

    name: str
    """The name ``profiles=`` and ``MCP_SESSIONS_PROFILES`` know it by."""
    carrier: Carrier
    """Where a request names its session."""
    echo: EchoShape
    """What a result to a request in a session carries back."""
    capability: Capability
    """Where the server advertises this wire, in each era."""
    methods: Mapping[str, LocalMethod]
    """The methods the middleware answers itself, by name."""
    sessionless: frozenset[str]
    """Methods that never need a session, whatever the policy says."""
    not_found: int
    """The error code for a session id that names no live session of the caller."""
    required: int
    """The error code for a request without a session where the policy requires one."""
    header_mismatch: int = HEADER_MISMATCH
    """The error code for an ``Mcp-Session-Id`` header that differs from the session in the body."""
    required_message: str = "Session required"
    """The message of the "required" error, as the wire's draft words it (:meth:`required_text` adds the hint)."""
    not_found_message: str = "Session not found"
    """The message of the "not found" error, as the wire's draft words it (:attr:`not_found_text` adds the hint)."""
    required_hint: str | None = None
    """What a client does about the "required" error, added to its message: clients show the message, not ``data``."""
    not_found_hint: str | None = None
    """What a client does about the "not found" error, added to its message."""
    required_data: Mapping[str, object] | None = None
    """The hint that goes with the "required" error (for the draft, the create method)."""
    create_method: str | None = None
    """The method that opens a session, named in errors."""
    advertised_per_request: frozenset[str] = frozenset({"server/discover"})
    """Methods whose 2026-07-28 result advertises the capability."""
    advertised_handshake: frozenset[str] = frozenset({"server/discover", "initialize"})
    """Methods whose 2025-era result advertises the capability."""
    unknown_is_no_session: bool = False
    """A session id that names no live session makes the request sessionless, and its result says so
    (a ``null`` echo: the strawman's revocation signal), instead of the "not found" error."""
    declared: Callable[[dict[str, object]], bool] | None = None
    """Whether a message without any wire's session comes from a client that declared this wire
    (its capabilities); then the "required" error is this wire's."""
    header_every_era: bool = False
    """``Mcp-Session-Id`` mirrors this wire's session in every era, not only on 2026-07-28 requests."""
    client: ClientSide | None = None
    """What the client shim needs to speak this wire (``None``: the shim does not speak it)."""

    def speaks(self, message: dict[str, object], method: str) -> bool:
        """Whether a message is of this wire: one of its methods, or its session key is there."""
        return self.local_for(message, method) is not None or self.carrier.present(message)

    def local_for(self, message: dict[str, object], method: str) -> LocalMethod | None:
        """The local method a message calls on this wire, if it calls one in this wire's shape."""
        local = self.methods.get(method)
        if local is None or local.applies is None or local.applies(message):
            return local
        return None

    def advertises(self, method: str, era: Era) -> bool:
        """Whether the result of ``method`` is where this wire advertises its capability, in ``era``."""
        return method in (self.advertised_per_request if era is Era.MODERN else self.advertised_handshake)

    def required_text(self, why: str | None = None) -> str:
        """The "required" error's message: the draft's words, then why there is no session, then what to do."""
        return _message(self.required_message, why, self.required_hint)

    @property
    def not_found_text(self) -> str:
        """The "not found" error's message: the draft's words, then what to do."""
        return _message(self.not_found_message, None, self.not_found_hint)

    def not_found_data(self, token: Any) -> dict[str, object]:
        """The "not found" error's data: what the client sent, cut to 256 characters."""
        return {self.carrier.id_member: token[:_MAX_ECHOED_ID] if isinstance(token, str) else None}

    def not_found_refusal(self, token: Any, reason: str, session_id: str | None = None) -> Refusal:
        """The "not found" error for the session id ``token``: gone (``reason``), or never this caller's."""
        return Refusal(
            self.not_found, self.not_found_text, self.not_found_data(token), reason=reason, session_id=session_id
        )


def session_object(value: object, id_member: str) -> tuple[str, dict[str, object]] | None:
    """``(id, value)`` when ``value`` is an object naming a session by a non-empty string ``id_member``."""
    token = value.get(id_member) if isinstance(value, dict) else None
    return (token, value) if isinstance(value, dict) and isinstance(token, str) and token else None


def ended_hint(opens: str) -> str:
    """The "not found" hint of a wire whose sessions ``opens`` (a method, or how to call one) opens."""
    return f"the session ended or is not this caller's; call {opens} for a new one"


def _message(words: str, why: str | None, hint: str | None) -> str:
    """A draft's fixed words, kept as its first characters (its conformance), and the rest after them."""
    parts = [part for part in (why, hint) if part]
    if words.endswith("."):  # sentences already: each part is one more
        return " ".join([words, *(f"{part[0].upper()}{part[1:]}." for part in parts)])
    return f"{words}: {'; or '.join(parts)}" if parts else words
