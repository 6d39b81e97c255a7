"""What a result to a request in a session carries back: :class:`Echo` (in ``result._meta``)
and :class:`TopLevelEcho` (a top-level member beside ``result``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Echo", "EchoShape", "TopLevelEcho"]


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
        self, message: dict[str, object], result: dict[str, object], token: str, state: str | None, expires: str
    ) -> bytes | None:
        """Put the echo into ``result._meta``; its JSON, for splicing into the server's bytes."""
        meta = result.get("_meta")
        if not isinstance(meta, dict):
            meta = result["_meta"] = {}
        meta[self.meta_key] = self.build(token, state, expires)
        return self.to_json(token, state, expires)

    def revoke(self, message: dict[str, object], result: dict[str, object]) -> None:
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
        self, message: dict[str, object], result: dict[str, object], token: str, state: str | None, expires: str
    ) -> bytes | None:
        """Put the session id beside ``result``; ``None``: the message is serialized again."""
        message[self.member] = token
        return None

    def revoke(self, message: dict[str, object], result: dict[str, object]) -> None:
        """Say "this session is gone": a ``null`` id."""
        message[self.member] = None


EchoShape = Echo | TopLevelEcho
