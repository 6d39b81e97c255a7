"""The wire profiles of SEP-1364 "Elevating MCP Sessions", alternatives 1 and 2 (``docs/profiles.md``).

Both name the session by a top-level ``sessionId`` on requests, notifications and responses (JSON-RPC knows
no such member, so it is removed before the server sees the message) that ``Mcp-Session-Id`` mirrors in every
era. Alternative 1 opens, refreshes and ends sessions with ``session/create`` and ``session/delete``;
alternative 2 with ``initialize`` carrying the member (``null`` opens one, an id resumes it; without the
member it is an ordinary ``initialize``) and ``terminate``.

On the 2025 wire a stateful server owns ``Mcp-Session-Id``: it names the server's transport session. The
middleware keeps the transport session inside the data-layer session: the server still sees its own header on
every request of the session, and the client only ever sees the session's id. A session bound to no transport
session here (its token no longer verifies, or this process never saw one) goes with an id the server cannot
know: a stateful server answers 404, which on the 2025 wire tells the client to initialize again, and a
stateless one never reads the header (it sets none, so nothing is ever bound for it). Transport sessions live in
the server's process, so an in-process map, bounded, is where the binding belongs.
"""

from __future__ import annotations

from functools import partial
from typing import Final

from starlette.types import Message, Scope, Send

from .._bounded import BoundedDict
from .._session import Session, SessionNotFound, SessionService
from .._tokens import InvalidToken, is_session_token
from .._wire import Refusal
from .._wire.protocol import INVALID_PARAMS, MCP_SESSION_ID_HEADER, Era
from ._base import (
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    SESSIONLESS,
    Capability,
    Claim,
    LocalCall,
    LocalMethod,
    WireProfile,
    ended_hint,
)
from ._carriers import InvalidSessionMeta, TopLevelCarrier, TopLevelEcho

SESSION_ID_MEMBER: Final = "sessionId"
"""The top-level member that names a message's session."""
METHOD_CREATE: Final = "session/create"
METHOD_DELETE: Final = "session/delete"
METHOD_OPEN: Final = "initialize"
METHOD_TERMINATE: Final = "terminate"
_MAX_BINDINGS: Final = 100_000
_UNBOUND: Final = b"mcp-sessions-unbound"
"""The transport session id a session bound to none goes with: no server minted it."""
_transport_ids: BoundedDict[str, bytes] = BoundedDict(_MAX_BINDINGS)
"""The server's transport session id behind each data-layer session, by its stable id (both alternatives')."""


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
    if requested is None:
        minted = await call.mint()
        token = minted.token
        header = call.header
        if call.era is Era.LEGACY and header is not None and not is_session_token(header):
            # Created inside the server's transport session: requests in the session go on in it.
            _transport_ids[minted.claims.session_id] = header
    else:
        token = (await live_session(call, requested)).token
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


class Sep1364(WireProfile):
    """SEP-1364's differences from the draft: its methods' shapes, ``initialize`` opening a session, and
    ``Mcp-Session-Id`` naming the session in every era (the server's own transport session kept inside it)."""

    carrier: TopLevelCarrier

    def claim(self, message: dict[str, object], method: str) -> tuple[Claim, LocalMethod | None] | None:
        """The draft's claims, and first of all an opening method carrying the member (even ``null``)."""
        claim = super().claim(message, method)
        if method in self.carrier.opening_methods and self.carrier.member in message:
            return Claim.OPENS, None if claim is None else claim[1]
        return claim

    def in_shape(self, message: dict[str, object], method: str) -> bool:
        """``session/create`` and ``session/delete`` with a ``sessionId`` (top-level or in params) or
        ``capabilities`` (the strawman has methods of the same names)."""
        return method not in (METHOD_CREATE, METHOD_DELETE) or _of_this_wire(message)

    def header_names_session(self, era: Era) -> bool:
        """In every era."""
        return True

    def to_server(self, scope: Scope, send: Send, session: Session, *, era: Era, method: str) -> tuple[Scope, Send]:
        """On the 2025 wire: the server's own transport session in the header (none for an opening method, so the
        server opens one, which the session adopts), and a ``send`` that shows the client the session instead."""
        if era is not Era.LEGACY:
            return scope, send
        token = session.token.encode()

        async def send_as_session(message: Message) -> None:
            if message["type"] == "http.response.start":
                shown = []
                for name, value in message.get("headers", ()):
                    if name.lower() == MCP_SESSION_ID_HEADER:
                        _transport_ids[session.id] = bytes(value)
                        value = token
                    shown.append((name, value))
                message = {**message, "headers": shown}
            await send(message)

        return _with_transport_id(scope, session.id, opening=method in self.carrier.opening_methods), send_as_session

    def probe_scope(
        self,
        scope: Scope,
        *,
        era: Era,
        session: Session | None,
        header: bytes | None,
        message: object,
        sessions: SessionService,
    ) -> Scope:
        """On the 2025 wire: the server's own transport session of the session the header or the message names,
        as the request would be forwarded (:data:`_UNBOUND` for a session bound to none)."""
        if era is not Era.LEGACY:
            return scope
        if session is not None:
            return _with_transport_id(scope, session.id)
        try:  # the token the header holds, else the one the message carries
            if header is not None and is_session_token(header):
                token: str | None = header.decode("latin-1")
            else:
                ref = self.carrier.read(message) if isinstance(message, dict) else None
                token = None if ref is None else ref.token
        except InvalidSessionMeta:
            token = None
        if token is None:  # no session named: the header, if any, is the server's own transport session
            return scope
        try:
            session_id: str | None = sessions.keys.verify_session_token(token).session_id
        except InvalidToken:  # a session bound to no transport session here
            session_id = None
        return _with_transport_id(scope, session_id)


def _with_transport_id(scope: Scope, session_id: str | None, *, opening: bool = False) -> Scope:
    """``scope`` with the server's own transport session id in ``Mcp-Session-Id``: none for an ``opening``
    request; :data:`_UNBOUND` for a session bound to none (``None``: one whose token did not verify)."""
    headers = [(n, v) for n, v in scope["headers"] if n.lower() != MCP_SESSION_ID_HEADER]
    if not opening:
        transport_id = None if session_id is None else _transport_ids.get(session_id)
        headers.append((MCP_SESSION_ID_HEADER, _UNBOUND if transport_id is None else transport_id))
    return {**scope, "headers": headers}


SEP1364_ALT1: Final = Sep1364(
    name="sep1364-alt1",
    carrier=TopLevelCarrier(member=SESSION_ID_MEMBER),
    echo=TopLevelEcho(member=SESSION_ID_MEMBER),
    capability=Capability(per_request=(("sessions",),), handshake=(("sessions",),), settings=_capability, merge=True),
    methods={
        METHOD_CREATE: LocalMethod(needs_session=False, answer=create),
        METHOD_DELETE: LocalMethod(needs_session=False, answer=partial(end_named, action="delete")),
    },
    sessionless=SESSIONLESS | {METHOD_CREATE},
    not_found=SESSION_NOT_FOUND,
    required=SESSION_REQUIRED,
    required_data={"create": METHOD_CREATE},
    required_hint=f'call {METHOD_CREATE} and send its sessionId as the top-level "{SESSION_ID_MEMBER}" of each request',
    not_found_hint=ended_hint(METHOD_CREATE),
    create_method=METHOD_CREATE,
)
"""SEP-1364 alternative 1 (top-level ``sessionId``, ``session/create``, ``session/delete``)."""

SEP1364_ALT2: Final = Sep1364(
    name="sep1364-alt2",
    carrier=TopLevelCarrier(member=SESSION_ID_MEMBER, opening_methods=frozenset({METHOD_OPEN})),
    echo=TopLevelEcho(member=SESSION_ID_MEMBER),
    # The SEP gives this alternative no capability: initialize with a null sessionId is the probe.
    capability=Capability(per_request=(), handshake=()),
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
)
"""SEP-1364 alternative 2 (``initialize`` with a top-level ``sessionId``, ``terminate``)."""
