"""Where a request carries its session: the :class:`Carrier` protocol, its two built-in shapes
:class:`SessionCarrier` (in ``params._meta``) and :class:`TopLevelCarrier` (a top-level member),
and what a carrier reads, a :class:`SessionRef`.

Reading refuses session metadata of the wrong shape, or on a path whose
member names a request repeats, with :class:`InvalidSessionMeta`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, NamedTuple, Protocol

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
    if type(obj) is not dict:  # the parser's plain objects repeated no name; only its recording subclass may have
        if not isinstance(obj, dict):
            return None
        _check_unique(obj, name)
    return obj.get(name)


def _check_unique(obj: Mapping[str, object], *names: str) -> None:
    if type(obj) is dict:
        return
    repeated = getattr(obj, "repeated", None)
    if repeated is not None and not repeated.isdisjoint(names):
        raise InvalidSessionMeta("session metadata must not repeat a member name")


@dataclass(frozen=True, slots=True)
class SessionCarrier:
    """Where a request carries its session: ``params._meta[meta_key]``, an object."""

    meta_key: str
    """The ``params._meta`` key whose value names the session."""
    id_member: str
    """The member of that object that names the session (in errors' data too)."""
    state_member: str | None = None
    """The member that carries the session's state, where the wire has one."""
    strips: ClassVar[bool] = False
    """Whether the member is removed from the request before the app sees it: never, ``_meta`` is the app's."""
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
        if type(session) is not dict:
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
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        return isinstance(meta, dict) and meta.get(self.meta_key) is not None

    def opens(self, message: Mapping[str, object], method: str) -> bool:
        """Whether the message opens a session and then runs in it: never, on this carrier."""
        return False

    def strip(self, message: dict[str, Any]) -> bool:
        """Remove the session from a message before the app sees it: never, ``_meta`` is the app's to read."""
        return False


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
    """This carrier has no state member."""
    strips: ClassVar[bool] = True
    """The member is removed from the request before the app sees it."""

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

    def opens(self, message: Mapping[str, object], method: str) -> bool:
        """Whether the message is an opening method that carries the member (even ``null``)."""
        return method in self.opening_methods and self.member in message

    def strip(self, message: dict[str, Any]) -> bool:
        """Remove the member before the app sees the message; whether it was there."""
        return message.pop(self.member, _ABSENT) is not _ABSENT


class Carrier(Protocol):
    """Where a wire's requests name their session: what a wire of a new shape implements.

    The planner reads ``marker``, ``path_names``, ``opening_methods`` and
    ``strips`` once; a request is read with :meth:`read` (the data-layer
    source), :meth:`present` and :meth:`opens` (which wire a message speaks),
    and :meth:`strip` (before the app sees it, where ``strips``).
    """

    @property
    def marker(self) -> str:
        """A member name whose absence from a body (spelled without escapes) means no session is named."""
        ...

    @property
    def id_member(self) -> str:
        """The member that names the session (repeated in errors' data)."""
        ...

    @property
    def path_names(self) -> tuple[str, ...]:
        """The member names on the path to the session, which a request must not repeat."""
        ...

    @property
    def opening_methods(self) -> frozenset[str]:
        """Methods on which a message opens a session and then runs in it."""
        ...

    @property
    def strips(self) -> bool:
        """Whether the member is removed from the request before the app sees it."""
        ...

    def read(self, message: Mapping[str, object]) -> SessionRef | None:
        """The session a message names; ``None`` when none; :class:`InvalidSessionMeta` for a bad shape."""
        ...

    def present(self, message: Mapping[str, object]) -> bool:
        """Whether a message carries this wire's session member at all (even malformed)."""
        ...

    def opens(self, message: Mapping[str, object], method: str) -> bool:
        """Whether the message opens a session and then runs in it."""
        ...

    def strip(self, message: dict[str, Any]) -> bool:
        """Remove the session from a message before the app sees it; whether it was there."""
        ...
