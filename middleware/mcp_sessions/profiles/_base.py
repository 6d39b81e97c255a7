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
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .._protocol import Era

if TYPE_CHECKING:
    from .._local import LocalCall

__all__ = [
    "Capability",
    "Echo",
    "InvalidSessionMeta",
    "LocalMethod",
    "SessionCarrier",
    "SessionRef",
    "WireProfile",
]

LocalAnswer = Callable[["LocalCall"], Awaitable[dict[str, Any]]]


class InvalidSessionMeta(Exception):
    """Session metadata present but of the wrong shape (answered with -32600)."""


class SessionRef(NamedTuple):
    """What a request says of its session: the wire id and, where the wire has one, the state."""

    token: str
    state: str | None


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
class Capability:
    """Where the server's support is advertised: paths under ``capabilities`` of a result.

    ``per_request`` places go into the ``server/discover`` result (2026-07-28),
    ``handshake`` places into the ``initialize`` result (2025 and earlier).
    """

    per_request: tuple[tuple[str, ...], ...]
    handshake: tuple[tuple[str, ...], ...]

    def places(self, era: Era) -> tuple[tuple[str, ...], ...]:
        """The paths under ``capabilities`` where the capability goes in ``era``."""
        return self.per_request if era is Era.PER_REQUEST else self.handshake

    def value(self, *, required: bool) -> dict[str, Any]:
        return {"required": True} if required else {}


@dataclass(frozen=True, slots=True)
class LocalMethod:
    """A method the middleware answers itself: never forwarded to the app."""

    needs_session: bool
    answer: LocalAnswer


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
    carrier: SessionCarrier
    """Where a request names its session."""
    echo: Echo
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

    def speaks(self, message: dict[str, Any], method: str) -> bool:
        """Whether a message is of this wire: one of its methods, or its session key is there."""
        return method in self.methods or self.carrier.present(message)

    def advertises(self, method: str, era: Era) -> bool:
        """Whether the result of ``method`` is where this wire advertises its capability, in ``era``."""
        return method in (self.advertised_per_request if era is Era.PER_REQUEST else self.advertised_handshake)

    def not_found_data(self, token: Any) -> dict[str, Any]:
        """The "not found" error's data: what the client sent, cut to 256 characters."""
        return {self.carrier.id_member: token[:_MAX_ECHOED_ID] if isinstance(token, str) else None}


_MAX_ECHOED_ID: Final = 256
