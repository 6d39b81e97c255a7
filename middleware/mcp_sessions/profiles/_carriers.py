"""A wire's shapes. Where a request carries its session: the :class:`Carrier` protocol, its two built-in
shapes :class:`SessionCarrier` (in ``params._meta``) and :class:`TopLevelCarrier` (a top-level member), and
what a carrier reads, a :class:`SessionRef`. What a result to a request in a session carries back: the echo
shapes :class:`Echo` (in ``result._meta``) and :class:`TopLevelEcho` (a top-level member beside ``result``).

Reading refuses session metadata of the wrong shape, or on a path whose
member names a request repeats, with :class:`InvalidSessionMeta`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, NamedTuple, Protocol

from .._wire import jsonrpc

_ABSENT: Final = object()


class InvalidSessionMeta(Exception):
    """Session metadata present but of the wrong shape (answered with -32600)."""


class SessionRef(NamedTuple):
    """What a request says of its session: the wire id and, where the wire has one, the state."""

    token: str
    """The session's id on the wire (a token)."""
    state: str | None
    """The state the request carries with it, where the wire has one."""
    mint: bool = False
    """The message asks for a new session and then runs in it (SEP-1364 alt. 2: ``initialize`` with a null id)."""


def _member(obj: object, name: str) -> object:
    """``obj[name]`` when ``obj`` is an object, else ``None``; refused when the object repeated that name."""
    if not isinstance(obj, dict):
        return None
    _check_unique(obj, name)
    return obj.get(name)


def _check_unique(obj: Mapping[str, object], *names: str) -> None:
    if type(obj) is dict:  # the parser's plain objects repeated no name; only its recording subclass may have
        return
    repeated = getattr(obj, "repeated", None)
    if repeated is not None and not repeated.isdisjoint(names):
        raise InvalidSessionMeta("session metadata must not repeat a member name")


@dataclass(frozen=True)
class SessionCarrier:
    """Where a request carries its session: ``params._meta[meta_key]``, an object."""

    meta_key: str
    """The ``params._meta`` key whose value names the session."""
    id_member: str
    """The member of that object that names the session (in errors' data too)."""
    state_member: str | None = None
    """The member that carries the session's state, where the wire has one."""

    @property
    def path_names(self) -> tuple[str, ...]:
        """The member names on the path to the session, which a request must not repeat."""
        names = ("params", "_meta", self.meta_key, self.id_member)
        return names if self.state_member is None else (*names, self.state_member)

    def read(self, message: Mapping[str, object]) -> SessionRef | None:
        """The session a message names, ``None`` when it names none.

        ``null`` counts as absent. Anything else that is not an object with a
        string id (and, where the wire has state, a string state) is invalid.
        """
        session = _member(_member(_member(message, "params"), "_meta"), self.meta_key)
        if session is None:
            return None
        if not isinstance(session, dict):
            raise InvalidSessionMeta("session metadata must be an object")
        _check_unique(session, *self.path_names[3:])
        token = session.get(self.id_member)
        if type(token) is not str:
            raise InvalidSessionMeta(f"session metadata needs a string {self.id_member}")
        state = None if self.state_member is None else session.get(self.state_member)
        if state is not None and type(state) is not str:
            raise InvalidSessionMeta("session state must be a string")
        return SessionRef(token, state)

    def present(self, message: Mapping[str, object]) -> bool:
        """Whether a message carries this wire's session key at all (even malformed)."""
        meta = jsonrpc.meta(message.get("params"))
        return isinstance(meta, dict) and meta.get(self.meta_key) is not None

    def strip(self, message: dict[str, Any]) -> bool:
        """Remove the session from a message before the app sees it: never, ``_meta`` is the app's to read."""
        return False


@dataclass(frozen=True)
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
    """This carrier has no state member."""

    @property
    def id_member(self) -> str:
        """The member that names the session (in errors' data too)."""
        return self.member

    def read(self, message: Mapping[str, object]) -> SessionRef | None:
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

    def present(self, message: Mapping[str, object]) -> bool:
        """Whether a message has the member at all (even ``null``): it speaks this wire."""
        return self.member in message

    def strip(self, message: dict[str, Any]) -> bool:
        """Remove the member before the app sees the message; whether it was there."""
        return message.pop(self.member, _ABSENT) is not _ABSENT


class Carrier(Protocol):
    """Where a wire's requests name their session: what a wire of a new shape implements.

    A request is read with :meth:`read` (the data-layer source),
    :meth:`present` (which wire a message speaks), and :meth:`strip` (before
    the app sees it).
    """

    @property
    def id_member(self) -> str:
        """The member that names the session (repeated in errors' data)."""
        ...

    def read(self, message: Mapping[str, object]) -> SessionRef | None:
        """The session a message names; ``None`` when none; :class:`InvalidSessionMeta` for a bad shape."""
        ...

    def present(self, message: Mapping[str, object]) -> bool:
        """Whether a message carries this wire's session member at all (even malformed)."""
        ...

    def strip(self, message: dict[str, Any]) -> bool:
        """Remove the session from a message before the app sees it; whether it was there."""
        ...


@dataclass(frozen=True)
class Echo:
    """What a result to a request in a session carries back, in ``result._meta[meta_key]``."""

    meta_key: str
    """The ``result._meta`` key the echo goes under."""
    id_member: str
    """The member that names the session."""
    expiry_member: str
    """The member that says when the session expires (RFC 3339)."""
    state_member: str | None = None
    """The member that carries the session's state, where the wire has one."""

    def attach(
        self, message: dict[str, object], result: dict[str, object], token: str, state: str | None, expires: str
    ) -> None:
        """Put the echo into ``result._meta``."""
        _meta_of(result)[self.meta_key] = self.build(token, state, expires)

    def revoke(self, message: dict[str, object], result: dict[str, object]) -> None:
        """Say "this session is gone": ``null`` in its place (the strawman's revocation signal)."""
        _meta_of(result)[self.meta_key] = None

    def build(self, token: str, state: str | None, expires: str) -> dict[str, str]:
        """The echo as an object."""
        echo = {self.id_member: token}
        if state is not None and self.state_member is not None:
            echo[self.state_member] = state
        echo[self.expiry_member] = expires
        return echo


@dataclass(frozen=True)
class TopLevelEcho:
    """The echo as a top-level string ``member`` of the response, beside ``result`` (SEP-1364)."""

    member: str
    """The top-level member of the response that carries the session id."""

    def attach(
        self, message: dict[str, object], result: dict[str, object], token: str, state: str | None, expires: str
    ) -> None:
        """Put the session id beside ``result``."""
        message[self.member] = token

    def revoke(self, message: dict[str, object], result: dict[str, object]) -> None:
        """Say "this session is gone": a ``null`` id."""
        message[self.member] = None


EchoShape = Echo | TopLevelEcho
"""The echo a wire declares: in ``result._meta``, or beside ``result``."""


def _meta_of(result: dict[str, object]) -> dict[str, object]:
    """``result._meta``, a new object in its place when it is not one."""
    meta = jsonrpc.meta(result)
    if meta is None:
        meta = result["_meta"] = {}
    return meta
