"""The wire profiles of SEP-1364 "Elevating MCP Sessions", alternatives 1 and 2 (``docs/profiles.md``).

Both name the session by a top-level ``sessionId`` on requests, notifications and responses (JSON-RPC knows
no such member, so it is removed before the server sees the message) that ``Mcp-Session-Id`` mirrors in every
era. Alternative 1 opens, refreshes and ends sessions with ``session/create`` and ``session/delete``;
alternative 2 with ``initialize`` carrying the member (``null`` opens one, an id resumes it; without the
member it is an ordinary ``initialize``) and ``terminate``.
"""

from __future__ import annotations

from functools import partial
from typing import Final

from .._session import Session, SessionNotFound
from .._wire import Refusal
from .._wire.protocol import INVALID_PARAMS
from ._base import SESSIONLESS, Capability, LocalCall, LocalMethod, WireProfile, ended_hint
from ._carriers import TopLevelCarrier
from ._draft import SESSION_NOT_FOUND, SESSION_REQUIRED
from ._echo_shapes import TopLevelEcho

SESSION_ID_MEMBER: Final = "sessionId"
"""The top-level member that names a message's session."""
METHOD_CREATE: Final = "session/create"
METHOD_DELETE: Final = "session/delete"
METHOD_OPEN: Final = "initialize"
METHOD_TERMINATE: Final = "terminate"


def _of_this_wire(message: dict[str, object]) -> bool:
    """A shared method name in this wire's shape: a top-level ``sessionId``, or one (or capabilities) in params."""
    if SESSION_ID_MEMBER in message:
        return True
    params = message.get("params")
    return isinstance(params, dict) and (SESSION_ID_MEMBER in params or "capabilities" in params)


def _session_id(value: object) -> str | None:
    """A ``sessionId`` the client sent: a string, or ``None`` for none; -32602 when it is anything else."""
    if value is not None and type(value) is not str:
        raise Refusal(INVALID_PARAMS, f"{SESSION_ID_MEMBER} must be a string")
    return value


async def live_session(call: LocalCall, token: str) -> Session:
    """The live session ``token`` names for this caller; the wire's "not found" error otherwise."""
    try:
        return await call.sessions.resolve(call.scope, token, None)
    except SessionNotFound as exc:
        raise call.profile.not_found_refusal(token, exc.reason, exc.session_id) from None


async def create(call: LocalCall) -> dict[str, object]:
    """``session/create``: a new session, or, for a valid ``params.sessionId``, that one refreshed."""
    capabilities = call.params.get("capabilities")
    if capabilities is not None and not isinstance(capabilities, dict):
        raise Refusal(INVALID_PARAMS, "capabilities must be an object")
    requested = _session_id(call.params.get(SESSION_ID_MEMBER))
    token = (await call.mint()).token if requested is None else (await live_session(call, requested)).token
    call.envelope[SESSION_ID_MEMBER] = token
    return {SESSION_ID_MEMBER: token}


async def end_named(call: LocalCall, action: str) -> dict[str, object]:
    """``session/delete`` and ``terminate``: end the session ``params.sessionId`` (else the top-level
    ``sessionId``) names; an unknown or already ended one is "not found"."""
    token = _session_id(call.params.get(SESSION_ID_MEMBER, call.message.get(SESSION_ID_MEMBER)))
    if token is None:
        raise Refusal(INVALID_PARAMS, f"params.{SESSION_ID_MEMBER} names the session to {action}")
    await call.end(await live_session(call, token), token)
    return {}


def _capability(required: bool) -> dict[str, object]:
    return {"required": required}


SEP1364_ALT1: Final = WireProfile(
    name="sep1364-alt1",
    carrier=TopLevelCarrier(member=SESSION_ID_MEMBER),
    echo=TopLevelEcho(member=SESSION_ID_MEMBER),
    capability=Capability(per_request=(("sessions",),), handshake=(("sessions",),), settings=_capability, merge=True),
    methods={
        METHOD_CREATE: LocalMethod(needs_session=False, answer=create, applies=_of_this_wire),
        METHOD_DELETE: LocalMethod(
            needs_session=False, answer=partial(end_named, action="delete"), applies=_of_this_wire
        ),
    },
    sessionless=SESSIONLESS | {METHOD_CREATE},
    not_found=SESSION_NOT_FOUND,
    required=SESSION_REQUIRED,
    required_data={"create": METHOD_CREATE},
    required_hint=f'call {METHOD_CREATE} and send its sessionId as the top-level "{SESSION_ID_MEMBER}" of each request',
    not_found_hint=ended_hint(METHOD_CREATE),
    create_method=METHOD_CREATE,
    header_every_era=True,
)
"""SEP-1364 alternative 1 (top-level ``sessionId``, ``session/create``, ``session/delete``)."""

SEP1364_ALT2: Final = WireProfile(
    name="sep1364-alt2",
    carrier=TopLevelCarrier(member=SESSION_ID_MEMBER, opening_methods=frozenset({METHOD_OPEN})),
    echo=TopLevelEcho(member=SESSION_ID_MEMBER),
    # The SEP gives this alternative no capability: initialize with a null sessionId is the probe.
    capability=Capability(per_request=(), handshake=()),
    advertised_per_request=frozenset(),
    advertised_handshake=frozenset(),
    methods={METHOD_TERMINATE: LocalMethod(needs_session=False, answer=partial(end_named, action="terminate"))},
    sessionless=SESSIONLESS | {METHOD_OPEN, METHOD_TERMINATE},
    not_found=SESSION_NOT_FOUND,
    required=SESSION_REQUIRED,
    required_data={"open": METHOD_OPEN},
    required_hint=(
        f'call {METHOD_OPEN} with "{SESSION_ID_MEMBER}": null and send the sessionId it returns'
        f' as the top-level "{SESSION_ID_MEMBER}" of each request'
    ),
    not_found_hint=ended_hint(f"{METHOD_OPEN} with a null sessionId"),
    create_method=METHOD_OPEN,
    header_every_era=True,
)
"""SEP-1364 alternative 2 (``initialize`` with a top-level ``sessionId``, ``terminate``)."""
