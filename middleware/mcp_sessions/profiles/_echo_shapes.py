"""The echo shapes a wire declares, what a result to a request in a session carries back:
:class:`Echo` (in ``result._meta``) and :class:`TopLevelEcho` (a top-level member beside ``result``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
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

    def member_json(self, token: str, state: str | None, expires: str) -> bytes:
        """The echo as its ``_meta`` member, ``"meta_key":{…}``, in compact JSON, to splice into a server's bytes.

        Its values never need escaping (a compact JWS, an RFC 3339 time), so it is written by formatting.
        """
        state_member = "" if state is None or self.state_member is None else f',"{self.state_member}":"{state}"'
        return (
            f'"{self.meta_key}":{{"{self.id_member}":"{token}"{state_member},"{self.expiry_member}":"{expires}"}}'
        ).encode()


@dataclass(frozen=True, slots=True)
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
    meta = result.get("_meta")
    if not isinstance(meta, dict):
        meta = result["_meta"] = {}
    return meta
