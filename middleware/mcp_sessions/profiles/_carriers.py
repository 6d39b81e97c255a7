"""A wire's shapes. Where a request carries its session, :class:`SessionCarrier` (in ``params._meta``), and
what it reads, a :class:`SessionRef`. What a result to a request in a session carries back, :class:`Echo` (in
``result._meta``).

Reading refuses session metadata of the wrong shape, or on a path whose
member names a request repeats, with :class:`InvalidSessionMeta`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from .._wire import jsonrpc


class InvalidSessionMeta(Exception):
    """Session metadata present but of the wrong shape (answered with -32600)."""


class SessionRef(NamedTuple):
    """What a request says of its session: the wire id and, where the wire has one, the state."""

    token: str
    """The session's id on the wire (a token)."""
    state: str | None
    """The state the request carries with it, where the wire has one."""


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

    def attach(self, result: dict[str, object], token: str, state: str | None, expires: str) -> None:
        """Put the echo into ``result._meta``."""
        _meta_of(result)[self.meta_key] = self.build(token, state, expires)

    def build(self, token: str, state: str | None, expires: str) -> dict[str, str]:
        """The echo as an object."""
        echo = {self.id_member: token}
        if state is not None and self.state_member is not None:
            echo[self.state_member] = state
        echo[self.expiry_member] = expires
        return echo


def _meta_of(result: dict[str, object]) -> dict[str, object]:
    """``result._meta``, a new object in its place when it is not one."""
    meta = jsonrpc.meta(result)
    if meta is None:
        meta = result["_meta"] = {}
    return meta
