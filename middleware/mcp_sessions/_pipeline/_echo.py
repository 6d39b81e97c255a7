"""Pure: what a response to a request in a session gains (the echo, the capability), and where.

The response rewriter moves bytes; these functions decide what changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._wire import iso, jsonrpc
from .._wire.protocol import Era
from ..profiles import Echo

if TYPE_CHECKING:
    from .._otel import Operation
    from .._session import Session
    from ..profiles import WireProfile


@dataclass(slots=True)
class Target:
    """What to do with the response to one request id."""

    profile: WireProfile
    session: Session | None
    """The data-layer session whose echo the result carries."""
    advertised: tuple[WireProfile, ...]
    """The wires whose capability the result advertises."""
    capability: Mapping[str, Mapping[str, object]]
    """Each wire's capability value, by wire name."""
    era: Era
    operation: Operation | None
    revoked: bool = False
    """The request named a session that is gone, on a wire whose result then says so."""


def advertising_tables(profiles: Sequence[WireProfile]) -> dict[Era, dict[str, tuple[WireProfile, ...]]]:
    """Era -> method -> the wires whose capability that method's result advertises."""
    methods = {m for p in profiles for m in (*p.advertised_per_request, *p.advertised_handshake)}
    return {
        era: {
            method: advertised
            for method in methods
            if (advertised := tuple(p for p in profiles if p.advertises(method, era)))
        }
        for era in Era
    }


def rewritten(target: Target, raw: bytes, message: dict[str, object]) -> bytes | None:
    """``raw``, the response ``message`` to ``target``'s request, with what it gains; ``None`` if nothing.

    When the echo is all it gains and the bytes end as a compact serializer ends them
    (:func:`splice_point`), the echo is spliced into them; otherwise the message is serialized again.
    """
    session, echo = target.session, target.profile.echo
    if session is not None and not target.advertised and isinstance(echo, Echo):
        at = splice_point(raw, message, echo.meta_key)
        if at is not None:
            if target.operation is not None:
                target.operation.observe_result(message["result"])  # type: ignore[arg-type]  # an object
            position, before, after = at
            member = echo.member_json(session.token, session.state_token, iso(int(session.expires_at_timestamp)))
            return b"".join((raw[:position], before, member, after, raw[position:]))
    return jsonrpc.dumps(message) if annotate(target, message) else None


def annotate(target: Target, message: dict[str, object]) -> bool:
    """Observe a response to ``target``'s request, add the echo and the capability to it; whether it changed."""
    result = message.get("result")
    operation = target.operation
    if not isinstance(result, dict):
        error = message.get("error")
        if operation is not None and isinstance(error, dict) and type(error.get("code")) is int:
            operation.fail(error["code"], str(error.get("message", "")))
        return False
    if operation is not None:
        operation.observe_result(result)  # a tool error, or tool and prompt names the server has
    changed = False
    session = target.session
    if session is not None:
        expires = iso(int(session.expires_at_timestamp))
        target.profile.echo.attach(message, result, session.token, session.state_token, expires)
        changed = True
    elif target.revoked:
        target.profile.echo.revoke(message, result)
        changed = True
    for profile in target.advertised:
        changed = advertise(result, profile, target.era, value=target.capability[profile.name]) or changed
    return changed


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


def splice_point(raw: bytes, message: dict[str, object], meta_key: str) -> tuple[int, bytes, bytes] | None:
    """Where one more ``_meta`` member named ``meta_key`` can go in ``raw`` without serializing it again.

    The position, and what goes before and after the member: a new ``_meta`` around it, or a comma
    before it in the result's own ``_meta``. The message must end with ``result`` as its last member and
    ``result`` with ``_meta`` (an object, without ``meta_key``) or without any ``_meta`` (then added last),
    with no whitespace after the last braces: how the SDK, and any compact serializer, writes it.
    """
    if not raw.endswith(b"}}") or next(reversed(message), None) != "result":
        return None
    result = message["result"]
    if not isinstance(result, dict):
        return None
    if not result:
        return len(raw) - 2, b'"_meta":{', b"}"
    if next(reversed(result)) == "_meta":
        meta = result["_meta"]
        if isinstance(meta, dict) and meta and meta_key not in meta and raw.endswith(b"}}}"):
            return len(raw) - 3, b",", b""
        return None
    if "_meta" in result:
        return None
    return len(raw) - 2, b',"_meta":{', b"}"
