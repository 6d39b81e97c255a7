"""What a session wire decides, as data: :class:`WireProfile` and its parts.

A profile names its methods and what each does, where a request carries its
session, what the echo looks like and where it goes, where the capability is
advertised in each era, and its error codes. The pipeline asks the enabled
profiles, in order, which one a message speaks, and never names a literal of
its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, NamedTuple

from .._protocol import Era

if TYPE_CHECKING:
    from .._local import LocalCall

__all__ = [
    "Capability",
    "Carrier",
    "ClientSide",
    "Echo",
    "EchoShape",
    "InvalidSessionMeta",
    "LocalMethod",
    "SessionCarrier",
    "SessionRef",
    "TopLevelCarrier",
    "TopLevelEcho",
    "WireProfile",
]

LocalAnswer = Callable[["LocalCall"], Awaitable[dict[str, Any]]]


class InvalidSessionMeta(Exception):
    """Session metadata present but of the wrong shape (answered with -32600)."""


class SessionRef(NamedTuple):
    """What a request says of its session: the wire id and, where the wire has one, the state."""

    token: str
    state: str | None
    mint: bool = False
    """The message asks for a new session and then runs in it (SEP-1364 alt. 2: ``initialize`` with a null id)."""


def _check_unique(obj: dict[str, Any], *names: str) -> None:
    if type(obj) is dict:
        return  # the parser's plain objects repeated no name; only its recording subclass may have
    repeated = getattr(obj, "repeated", None)
    if repeated is not None and not repeated.isdisjoint(names):
        raise InvalidSessionMeta("session metadata must not repeat a member name")


@dataclass(frozen=True, slots=True)
class SessionCarrier:
    """Where a request carries its session: ``params._meta[meta_key]``, an object."""

    meta_key: str
    id_member: str
    state_member: str | None = None
    strips: ClassVar[bool] = False
    """Whether the member is removed from the request before the app sees it."""
    opening_methods: ClassVar[frozenset[str]] = frozenset()
    """Methods on which the message opens a session: none, on this carrier."""

    @property
    def marker(self) -> str:
        """A member name whose presence in a body means this wire's session may be there."""
        return self.meta_key

    @property
    def path_names(self) -> tuple[str, ...]:
        """The member names on the path to the session, which a request must not repeat."""
        names = ("params", "_meta", self.meta_key, self.id_member)
        return names if self.state_member is None else (*names, self.state_member)

    def read(self, message: dict[str, Any]) -> SessionRef | None:
        """The session a message names, ``None`` when it names none.

        ``null`` counts as absent. Anything else that is not an object with a
        string id (and, where the wire has state, a string state) is invalid.
        """
        # type(x) is dict: the parser's plain objects; only its recording subclass may repeat a name.
        if type(message) is not dict:
            _check_unique(message, "params")
        params = message.get("params")
        if not isinstance(params, dict):
            return None
        if type(params) is not dict:
            _check_unique(params, "_meta")
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            return None
        if type(meta) is not dict:
            _check_unique(meta, self.meta_key)
        session = meta.get(self.meta_key)
        if session is None:
            return None
        if not isinstance(session, dict):
            raise InvalidSessionMeta("session metadata must be an object")
        if type(session) is not dict:
            _check_unique(session, self.id_member, *(() if self.state_member is None else (self.state_member,)))
        token = session.get(self.id_member)
        if type(token) is not str:
            raise InvalidSessionMeta(f"session metadata needs a string {self.id_member}")
        state = None if self.state_member is None else session.get(self.state_member)
        if state is not None and type(state) is not str:
            raise InvalidSessionMeta("session state must be a string")
        return SessionRef(token, state)

    def present(self, message: dict[str, Any]) -> bool:
        """Whether a message carries this wire's session key at all (even malformed)."""
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        return isinstance(meta, dict) and meta.get(self.meta_key) is not None

    def opens(self, message: dict[str, Any], method: str) -> bool:
        """Whether the message opens a session and then runs in it: never, on this carrier."""
        return False

    def strip(self, message: dict[str, Any]) -> bool:
        """Remove the session from a message before the app sees it: never, ``_meta`` is the app's to read."""
        return False


_ABSENT: Final = object()


@dataclass(frozen=True, slots=True)
class TopLevelCarrier:
    """Where a request carries its session: a top-level string ``member`` of the message (SEP-1364).

    JSON-RPC knows no such member, so it is removed before the app sees the
    message. ``null`` counts as absent, except on ``opening_methods``, where a
    ``null`` id asks for a new session.
    """

    member: str
    """The top-level member that names the session."""
    opening_methods: frozenset[str] = frozenset()
    """Methods on which a ``null`` id asks for a new session."""
    state_member: ClassVar[None] = None
    strips: ClassVar[bool] = True

    @property
    def marker(self) -> str:
        """A member name whose presence in a body means this wire's session may be there."""
        return self.member

    @property
    def id_member(self) -> str:
        """The member that names the session (in errors' data too)."""
        return self.member

    @property
    def path_names(self) -> tuple[str, ...]:
        """The member names on the path to the session, which a request must not repeat."""
        return (self.member,)

    def read(self, message: dict[str, Any]) -> SessionRef | None:
        """The session a message names, ``None`` when it names none; a non-string id is invalid."""
        _check_unique(message, self.member)
        token = message.get(self.member, _ABSENT)
        if token is None:
            return SessionRef("", None, mint=True) if message.get("method") in self.opening_methods else None
        if token is _ABSENT:
            return None
        if type(token) is not str:
            raise InvalidSessionMeta(f"{self.member} must be a string or null")
        return SessionRef(token, None)

    def present(self, message: dict[str, Any]) -> bool:
        """Whether a message has the member at all (even ``null``): it speaks this wire."""
        return self.member in message

    def opens(self, message: dict[str, Any], method: str) -> bool:
        """Whether the message is an opening method that carries the member (even ``null``)."""
        return method in self.opening_methods and self.member in message

    def strip(self, message: dict[str, Any]) -> bool:
        """Remove the member before the app sees the message; whether it was there."""
        return message.pop(self.member, _ABSENT) is not _ABSENT


Carrier = SessionCarrier | TopLevelCarrier


@dataclass(frozen=True, slots=True)
class Echo:
    """What a result to a request in a session carries back, in ``result._meta[meta_key]``.

    Its values never need JSON escaping (compact JWS and RFC 3339 times), so
    the echo is built as bytes by concatenation and spliced into the server's.
    """

    meta_key: str
    id_member: str
    expiry_member: str
    state_member: str | None = None
    _opener: bytes = field(init=False, repr=False, compare=False)
    _state: bytes = field(init=False, repr=False, compare=False)
    _expiry: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_opener", b'{"%s":"' % self.id_member.encode())
        object.__setattr__(self, "_state", b'","%s":"' % (self.state_member or "").encode())
        object.__setattr__(self, "_expiry", b'","%s":"' % self.expiry_member.encode())

    def attach(
        self, message: dict[str, Any], result: dict[str, Any], token: str, state: str | None, expires: str
    ) -> bytes | None:
        """Put the echo into ``result._meta``; its JSON, for splicing into the server's bytes."""
        meta = result.get("_meta")
        if not isinstance(meta, dict):
            meta = result["_meta"] = {}
        meta[self.meta_key] = self.build(token, state, expires)
        return self.to_json(token, state, expires)

    def revoke(self, message: dict[str, Any], result: dict[str, Any]) -> None:
        """Say "this session is gone": ``null`` in its place (the strawman's revocation signal)."""
        meta = result.get("_meta")
        if not isinstance(meta, dict):
            meta = result["_meta"] = {}
        meta[self.meta_key] = None

    def build(self, token: str, state: str | None, expires: str) -> dict[str, str]:
        """The echo as an object."""
        echo = {self.id_member: token}
        if state is not None and self.state_member is not None:
            echo[self.state_member] = state
        echo[self.expiry_member] = expires
        return echo

    def to_json(self, token: str, state: str | None, expires: str) -> bytes:
        """The same echo as compact JSON, by concatenation."""
        if state is None or self.state_member is None:
            return b"".join((self._opener, token.encode(), self._expiry, expires.encode(), b'"}'))
        return b"".join(
            (self._opener, token.encode(), self._state, state.encode(), self._expiry, expires.encode(), b'"}')
        )


@dataclass(frozen=True, slots=True)
class TopLevelEcho:
    """The echo as a top-level string ``member`` of the response, beside ``result`` (SEP-1364)."""

    member: str
    """The top-level member of the response that carries the session id."""

    def attach(
        self, message: dict[str, Any], result: dict[str, Any], token: str, state: str | None, expires: str
    ) -> bytes | None:
        """Put the session id beside ``result``; ``None``: the message is serialized again."""
        message[self.member] = token
        return None

    def revoke(self, message: dict[str, Any], result: dict[str, Any]) -> None:
        """Say "this session is gone": a ``null`` id."""
        message[self.member] = None


EchoShape = Echo | TopLevelEcho


@dataclass(frozen=True, slots=True)
class Capability:
    """Where the server's support is advertised: paths under ``capabilities`` of a result.

    ``per_request`` places go into the ``server/discover`` result (2026-07-28),
    ``handshake`` places into the ``initialize`` result (2025 and earlier).
    """

    per_request: tuple[tuple[str, ...], ...]
    handshake: tuple[tuple[str, ...], ...]
    settings: Callable[[bool], dict[str, Any]] | None = None
    """The value from "the policy requires a session everywhere"; by default ``{}`` or ``{"required": true}``."""
    merge: bool = False
    """Add this wire's members to an object another wire (or the server) already put at the same place."""

    def places(self, era: Era) -> tuple[tuple[str, ...], ...]:
        """The paths under ``capabilities`` where the capability goes in ``era``."""
        return self.per_request if era is Era.PER_REQUEST else self.handshake

    def value(self, *, required: bool) -> dict[str, Any]:
        """The capability's value, from whether the policy requires a session for everything."""
        if self.settings is not None:
            return self.settings(required)
        return {"required": True} if required else {}


@dataclass(frozen=True, slots=True)
class LocalMethod:
    """A method the middleware answers itself: never forwarded to the app."""

    needs_session: bool
    answer: LocalAnswer
    applies: Callable[[dict[str, Any]], bool] | None = None
    """When two wires share a method name: whether a message is of this wire's shape (default: always)."""


@dataclass(frozen=True, slots=True)
class ClientSide:
    """What the client shim needs of a wire beyond its carrier and echo: its own create and delete.

    ``created`` reads a create result: the token and the echo (in the wire's
    member names), ``None`` when the result has no session. ``delete_params``
    names the session to delete (the pipeline adds the ``_meta`` envelope);
    ``deleted`` reads whether a delete result ended a live session.
    """

    create_params: Callable[[str | None], dict[str, Any]]
    """The params of the create request, from the handle's label."""
    created: Callable[[dict[str, Any]], tuple[str, dict[str, Any]] | None]
    """The token and echo of a create result, ``None`` when it has none."""
    delete_method: str
    """The method that ends a session."""
    delete_params: Callable[[str], dict[str, Any]]
    """The params of the delete request for a session token."""
    deleted: Callable[[dict[str, Any]], bool]
    """Whether a delete result ended a live session."""
    advertised: Callable[[dict[str, Any]], bool]
    """Whether a server's ``capabilities`` advertise this wire."""


@dataclass(frozen=True, slots=True)
class WireProfile:
    """Everything one session wire decides. The draft is :data:`mcp_sessions.profiles.DRAFT`.

    ``methods`` are answered by the middleware; ``sessionless`` methods never
    need a session, whatever the policy. ``not_found``, ``required`` and
    ``header_mismatch`` are the wire's error codes; ``required_data`` is the
    hint that goes with the "required" error.
    """

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
    header_mismatch: int
    """The error code for an ``Mcp-Session-Id`` header that differs from the session in the body."""
    required_message: str = "Session required"
    """The message of the "required" error."""
    not_found_message: str = "Session not found"
    """The message of the "not found" error."""
    required_data: Mapping[str, Any] | None = None
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
    declared: Callable[[dict[str, Any]], bool] | None = None
    """Whether a message without any wire's session comes from a client that declared this wire
    (its capabilities); then the "required" error is this wire's."""
    header_every_era: bool = False
    """``Mcp-Session-Id`` mirrors this wire's session in every era, not only on 2026-07-28 requests."""
    client: ClientSide | None = None
    """What the client shim needs to speak this wire (``None``: the shim does not speak it)."""

    def speaks(self, message: dict[str, Any], method: str) -> bool:
        """Whether a message is of this wire: one of its methods, or its session key is there."""
        return self.local_for(message, method) is not None or self.carrier.present(message)

    def local_for(self, message: dict[str, Any], method: str) -> LocalMethod | None:
        """The local method a message calls on this wire, if it calls one in this wire's shape."""
        local = self.methods.get(method)
        if local is None or local.applies is None or local.applies(message):
            return local
        return None

    def advertises(self, method: str, era: Era) -> bool:
        """Whether the result of ``method`` is where this wire advertises its capability, in ``era``."""
        return method in (self.advertised_per_request if era is Era.PER_REQUEST else self.advertised_handshake)

    def not_found_data(self, token: Any) -> dict[str, Any]:
        """The "not found" error's data: what the client sent, cut to 256 characters."""
        return {self.carrier.id_member: token[:_MAX_ECHOED_ID] if isinstance(token, str) else None}


_MAX_ECHOED_ID: Final = 256
