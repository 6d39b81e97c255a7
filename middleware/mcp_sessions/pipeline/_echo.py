"""Pure: what a response to a request in a session gains (the echo, the capability), and where.

The response rewriter moves bytes; these functions decide what changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final, NamedTuple

from ..wire import iso
from ..wire.protocol import Era

if TYPE_CHECKING:
    from ..otel import Operation
    from ..profiles import Echo, WireProfile
    from ..session import Session

__all__ = [
    "CHANGED",
    "EchoOnly",
    "Target",
    "advertise",
    "advertising_tables",
    "annotate",
    "leading_splice_point",
    "splice_point",
]

# annotate()'s answer when the message changed beyond the echo: serialize it again.
CHANGED: Final = object()


class Target:
    """What to do with the response to one request id."""

    __slots__ = ("advertised", "capability", "era", "operation", "profile", "revoked", "session")

    def __init__(
        self,
        profile: WireProfile,
        session: Session | None,
        advertised: tuple[WireProfile, ...],
        capability: Mapping[str, Mapping[str, object]],
        era: Era,
        operation: Operation | None,
        revoked: bool = False,
    ) -> None:
        self.profile = profile
        self.session = session
        self.advertised = advertised
        self.capability = capability
        """Each wire's capability value, by wire name."""
        self.era = era
        self.operation = operation
        self.revoked = revoked
        """The request named a session that is gone, on a wire whose result then says so."""


class EchoOnly(NamedTuple):
    """The usual response's whole change: the echo of a data-layer session, in a wire's ``_meta`` form
    (:class:`~mcp_sessions.profiles.Echo`), added to the answer to request ``key``, and nothing
    advertised; with telemetry, its ``operation`` observes the result. No :class:`Target` is built for
    it unless the bytes cannot take a splice (an error, a result not written compactly)."""

    key: object
    session: Session
    echo: Echo
    profile: WireProfile
    era: Era
    operation: Operation | None

    def target(self) -> Target:
        """The same change as a :class:`Target`, for an answer whose bytes a splice cannot take."""
        return Target(self.profile, self.session, (), {}, self.era, self.operation)


def advertising_tables(profiles: Sequence[WireProfile]) -> dict[str, dict[str, tuple[WireProfile, ...]]]:
    """Era value -> method -> the wires whose capability that method's result advertises.

    Keyed by the era's value: an Enum member hashes in Python code, a str in C.
    """
    methods = {m for p in profiles for m in (*p.advertised_per_request, *p.advertised_handshake)}
    return {
        era.value: {
            method: advertised
            for method in methods
            if (advertised := tuple(p for p in profiles if p.advertises(method, era)))
        }
        for era in Era
    }


def annotate(target: Target, message: dict[str, object]) -> bytes | object | None:
    """Observe a response to ``target``'s request and add the echo and the capability to it.

    Returns ``None`` when ``message`` did not change, the echo's JSON when the
    echo is the only change, and :data:`CHANGED` otherwise.
    """
    result = message.get("result")
    operation = target.operation
    if not isinstance(result, dict):
        error = message.get("error")
        if operation is not None and isinstance(error, dict) and type(error.get("code")) is int:
            operation.fail(error["code"], str(error.get("message", "")))
        return None
    if operation is not None:
        operation.observe_result(result)  # a tool error, or tool and prompt names the server has
    change: bytes | object | None = None
    session = target.session
    if session is not None:
        expires = iso(int(session.expires_at_timestamp))
        spliceable = target.profile.echo.attach(message, result, session.token, session.state_token, expires)
        change = CHANGED if spliceable is None else spliceable
    elif target.revoked:
        target.profile.echo.revoke(message, result)
        change = CHANGED
    for profile in target.advertised:
        if advertise(result, profile, target.era, value=target.capability[profile.name]):
            change = CHANGED
    return change


def advertise(result: dict[str, object], profile: WireProfile, era: Era, *, value: Mapping[str, object]) -> bool:
    """Merge the capability into a ``server/discover`` or ``initialize`` result; whether it changed."""
    capabilities = result.get("capabilities")
    if not isinstance(capabilities, dict):
        return False
    for path in profile.capability.places(era):
        node = capabilities
        for name in path[:-1]:
            child = node.get(name)
            if not isinstance(child, dict):
                child = node[name] = {}
            node = child
        existing = node.setdefault(path[-1], dict(value))
        if profile.capability.merge and isinstance(existing, dict):
            for name, setting in value.items():
                existing.setdefault(name, setting)
    return True


# What opens the echo, by ``_meta`` key (one per wire, built once): as a new ``_meta`` in an empty result,
# as a new ``_meta`` after the result's members, and as one more member of the result's own ``_meta``.
_OPENERS: dict[str, tuple[bytes, bytes, bytes]] = {}


def _openers(meta_key: str) -> tuple[bytes, bytes, bytes]:
    member = b'"%s":' % meta_key.encode()
    openers = _OPENERS[meta_key] = (b'"_meta":{' + member, b',"_meta":{' + member, b"," + member)
    return openers


# How an answer to request N opens, as the SDK and any compact serializer write it.
_OPENING: Final = b'{"jsonrpc":"2.0","id":%d,"result":{'


def leading_splice_point(raw: bytes, request_id: object, meta_key: str) -> tuple[int, bytes, bytes] | None:
    """Where an echo under ``meta_key`` can go in ``raw`` when the bytes alone say so, without parsing them.

    ``raw`` must open as the compact answer to ``request_id`` (an int) with a result object, and spell
    no ``_meta`` (the echo then opens a new one, first in the result), and after its opening no second
    ``result`` or ``id``, no ``method``, and no ``\\u`` escape that could spell one: anything else is decided by
    :func:`splice_point`, on the parsed answer. (``find``, not ``in``: a bytes needle's ``in`` first
    tries it as an int, and pays for the exception.)
    """
    # First the _meta a result of the SDK's ends with: looked for from the end, it is found at once.
    if type(request_id) is not int or raw.rfind(b'"_meta"') >= 0:
        return None
    opening = _OPENING % request_id
    start = len(opening)
    if (
        not raw.startswith(opening)
        or raw.find(b'"result"', start) >= 0
        or raw.find(b'"id"', start) >= 0
        or raw.find(b'"method"', start) >= 0
        or raw.find(b"\\u", start) >= 0
    ):
        return None
    following = raw[start : start + 1]
    if following != b'"' and following != b"}":
        return None  # not compact
    # Before the result's first member, or alone in an empty result.
    return start, (_OPENERS.get(meta_key) or _openers(meta_key))[0], b"}," if following == b'"' else b"}"


def splice_point(raw: bytes, message: dict[str, object], meta_key: str) -> tuple[int, bytes, bytes] | None:
    """Where an echo under ``meta_key`` can go in ``raw`` without reserializing, if the bytes allow it.

    The message must end with ``result`` as its last member and ``result``
    with ``_meta`` (an object, which then gets one more member) or without
    any ``_meta`` (which is then added last), with no whitespace after the
    last braces: how the SDK, and any compact serializer, writes it.
    """
    if not raw.endswith(b"}}") or next(reversed(message), None) != "result":
        return None
    result = message["result"]
    if not isinstance(result, dict):
        return None
    openers = _OPENERS.get(meta_key) or _openers(meta_key)
    if not result:
        return len(raw) - 2, openers[0], b"}"
    last = next(reversed(result))
    if last == "_meta":
        meta = result["_meta"]
        if isinstance(meta, dict) and meta and meta_key not in meta and raw.endswith(b"}}}"):
            return len(raw) - 3, openers[2], b""
        return None
    if "_meta" in result:
        return None
    return len(raw) - 2, openers[1], b"}"
