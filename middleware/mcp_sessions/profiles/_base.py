"""The wire interface, :class:`WireProfile`, its parts, the error code sets, and the default wire, the draft.

A profile names its methods and what each does, where a request carries its
session and what the echo looks like (``_carriers.py``), where the capability is
advertised in each era, and its error codes. The pipeline takes the first enabled
profile that has a message's method, else the first whose session key the message
carries (``_plan.py``), and never names a literal of its own; a method the
middleware answers itself gets a :class:`LocalCall`.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from .._wire import Refusal, iso
from .._wire.protocol import HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, LEGACY_VERSIONS
from ._carriers import Echo, SessionCarrier

if TYPE_CHECKING:
    from starlette.types import Scope

    from .._otel import Operation
    from .._session import Minted, Session, SessionService

SESSIONLESS: Final = frozenset({"initialize", "notifications/initialized", "server/discover", "ping"})
"""What a client calls before it can hold a session: a policy that requires sessions everywhere lets these through."""
ADVERTISING_METHODS: Final = frozenset({"server/discover", "initialize"})
"""The methods whose result may advertise a wire's capability (:meth:`WireProfile.advertises`)."""
_MAX_ECHOED_ID: Final = 256
_LEGACY_HEADERS: Final = LEGACY_VERSIONS | {version.encode() for version in LEGACY_VERSIONS}


class Era(enum.Enum):
    """The wire a request speaks, chosen by its ``Mcp-Protocol-Version`` as the SDK server chooses."""

    LEGACY = "2025"
    """No version, or 2024-11-05 … 2025-11-25: the initialize handshake; ``Mcp-Session-Id`` is the server's own."""
    MODERN = "2026-07-28"
    """2026-07-28 and later: every request carries its version and envelope; no transport session."""

    @classmethod
    def of(cls, protocol_version: str | bytes | None) -> Era:
        """The era of a request with this ``Mcp-Protocol-Version`` (``None``: the header is absent).

        The header alone chooses: absent or a 2025 version is :attr:`LEGACY`, anything else
        :attr:`MODERN`. The value as text, or as the ASGI header's bytes.
        """
        if protocol_version is None or protocol_version in _LEGACY_HEADERS:
            return cls.LEGACY
        return cls.MODERN


@dataclass
class LocalCall:
    """One call of a local method, as its answer function sees it; the answer returns a result or raises a Refusal."""

    scope: Scope
    """The request's ASGI scope."""
    message: dict[str, object]
    """The JSON-RPC request."""
    profile: WireProfile
    """The wire the call speaks."""
    era: Era
    """The protocol era of the request."""
    sessions: SessionService
    """The middleware's sessions: mint, resolve, revoke."""
    session: Session | None
    """The verified session the call names, for methods that need one."""
    operation: Operation | None
    """The call's telemetry, when it is traced."""
    minted: Minted | None = None
    """The session this call opened, if it opened one."""

    @property
    def params(self) -> dict[str, object]:
        """The call's params; an object (the pipeline refuses anything else), empty when absent."""
        params = self.message.get("params")
        return params if isinstance(params, dict) else {}

    def string_param(self, name: str, *, max_length: int) -> str | None:
        """An optional string parameter, bounded; -32602 when it is anything else."""
        value = self.params.get(name)
        if value is not None and (type(value) is not str or len(value) > max_length):
            raise Refusal(INVALID_PARAMS, f"{name} must be a string of at most {max_length} characters")
        return value

    async def mint(self) -> Minted:
        """A new session for the caller, counted in telemetry."""
        minted = self.minted = await self.sessions.mint(self.scope, self.operation)
        if (operation := self.operation) is not None:
            operation.set_session(minted.claims.session_id)
            operation.telemetry.sessions_created.add(1, operation.session_attributes())
        return minted

    async def end(self, session: Session, token: str) -> None:
        """End ``session`` everywhere; the wire's "not found" error if it had already ended."""
        if not await self.revoke(session):
            raise self.profile.not_found_refusal(token, "revoked", session.id)

    async def revoke(self, session: Session) -> bool:
        """End ``session`` everywhere, counted in telemetry; ``False`` if it had already ended."""
        revoked = await self.sessions.revoke(session, self.scope)
        if revoked and (operation := self.operation) is not None:
            attributes = operation.session_attributes()
            operation.telemetry.sessions_deleted.add(1, attributes)
            operation.telemetry.session_duration.record(max(time.time() - session.issued_at, 0.0), attributes)
        return revoked


LocalAnswer = Callable[[LocalCall], Awaitable[dict[str, object]]]


@dataclass(frozen=True)
class Capability:
    """Where the server's support is advertised: paths under ``capabilities`` of a result, in each era."""

    per_request: tuple[tuple[str, ...], ...]
    """The places in a ``server/discover`` result (2026-07-28)."""
    handshake: tuple[tuple[str, ...], ...]
    """The places in an ``initialize`` result (2025 and earlier)."""

    def places(self, era: Era) -> tuple[tuple[str, ...], ...]:
        """The paths under ``capabilities`` where the capability goes in ``era``."""
        return self.per_request if era is Era.MODERN else self.handshake

    def value(self, *, required: bool) -> dict[str, object]:
        """The capability's value, from whether the policy requires a session for everything."""
        return {"required": True} if required else {}


@dataclass(frozen=True)
class LocalMethod:
    """A method the middleware answers itself: never forwarded to the app."""

    needs_session: bool
    """Whether the call must name a live session, which the pipeline resolves first."""
    answer: LocalAnswer
    """The function that answers a call: the result object, or :class:`Refusal`."""


@dataclass(frozen=True)
class WireProfile:
    """Everything one session wire decides. The draft is :data:`mcp_sessions.profiles.DRAFT`.

    The fields are what every wire states; the methods are what the pipeline asks of a wire.
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
    header_mismatch: int = HEADER_MISMATCH
    """The error code for an ``Mcp-Session-Id`` header that differs from the session in the body."""
    required_hint: str | None = None
    """What a client does about the "required" error, added to its message: clients show the message, not ``data``."""
    not_found_hint: str | None = None
    """What a client does about the "not found" error, added to its message."""
    required_data: Mapping[str, object] | None = None
    """The hint that goes with the "required" error (for the draft, the create method)."""
    create_method: str | None = None
    """The method that opens a session, named in errors."""

    # -- what the server advertises -----------------------------------------------

    def advertises(self, method: str, era: Era) -> bool:
        """Whether the result of ``method`` is where this wire advertises its capability, in ``era``."""
        return method == "server/discover" or (era is Era.LEGACY and method == "initialize")

    # -- errors ---------------------------------------------------------------------

    def required_text(self, why: str | None = None) -> str:
        """The "required" error's message: the draft's words, then why there is no session, then what to do."""
        return _message("Session required", why, self.required_hint)

    @property
    def not_found_text(self) -> str:
        """The "not found" error's message: the draft's words, then what to do."""
        return _message("Session not found", None, self.not_found_hint)

    def not_found_refusal(self, token: Any, reason: str, session_id: str | None = None) -> Refusal:
        """The "not found" error for the session id ``token``: gone (``reason``), or never this caller's. Its data
        is what the client sent, cut to 256 characters."""
        data = {self.carrier.id_member: token[:_MAX_ECHOED_ID] if isinstance(token, str) else None}
        return Refusal(self.not_found, self.not_found_text, data, reason=reason, session_id=session_id)

    # -- what a client reads --------------------------------------------------------

    def gone_codes(self) -> frozenset[int]:
        """The error codes that tell a client the session its request carried is gone, whichever set the server
        answers with (``error_codes=``)."""
        return frozenset({self.not_found, SPEC_SAFE_NOT_FOUND, APPLICATION_NOT_FOUND})


def _message(words: str, why: str | None, hint: str | None) -> str:
    """A draft's fixed words, kept as its first characters (its conformance), and the rest after them."""
    parts = [part for part in (why, hint) if part]
    return f"{words}: {'; or '.join(parts)}" if parts else words


# -- the error code sets -------------------------------------------------------------
#
# MCP 2026-07-28 reserves -32020..-32099 to the codes it defines and retires -32002 and -32042; the draft's
# seeds, -32043 and -32044, fall in the reserved band. Of -32000..-32019 it says "new implementations SHOULD
# NOT use codes from this sub-range at all", and of new codes that they "SHOULD be allocated outside the
# JSON-RPC reserved range (-32768 to -32000)". error_codes="application" follows those sentences: a wire's
# "not found" and "required" move to -31043 and -31044, outside the reserved range. error_codes="spec-safe"
# keeps only the MUST NOT: they move to -32012 and -32013. "Error codes" in docs/profiles.md has the table.

ErrorCodes = Literal["seeds", "spec-safe", "application"]
"""The error code sets ``error_codes=`` takes."""
ERROR_CODE_SETS: Final[tuple[ErrorCodes, ...]] = ("seeds", "spec-safe", "application")
"""Each set ``error_codes=`` takes: the seeds' own codes (the default), codes MCP 2026-07-28 does not forbid,
or codes outside the JSON-RPC reserved range, as 2026-07-28 asks of new codes."""

SPEC_SAFE_NOT_FOUND: Final = -32012
"""Error code under ``error_codes="spec-safe"``: the session names no live session of the caller."""
SPEC_SAFE_REQUIRED: Final = -32013
"""Error code under ``error_codes="spec-safe"``: the request has no session and the policy requires one."""
APPLICATION_NOT_FOUND: Final = -31043
"""Error code under ``error_codes="application"``: the session names no live session of the caller."""
APPLICATION_REQUIRED: Final = -31044
"""Error code under ``error_codes="application"``: the request has no session and the policy requires one."""
_MOVED: Final[dict[str, tuple[int, int]]] = {
    "spec-safe": (SPEC_SAFE_NOT_FOUND, SPEC_SAFE_REQUIRED),
    "application": (APPLICATION_NOT_FOUND, APPLICATION_REQUIRED),
}
"""Where each set other than the seeds' moves the "not found" and "required" codes the specification forbids."""
SPEC_DEFINED_CODES: Final = frozenset({-32020, -32021, -32022})
"""The codes of the reserved band that MCP 2026-07-28 defines: header mismatch, missing client
capability, unsupported protocol version."""
_RETIRED: Final = frozenset({-32002, -32042})


def spec_allows(code: int) -> bool:
    """Whether MCP 2026-07-28 lets an implementation answer ``code``: not reserved to it, not retired."""
    if code in _RETIRED:
        return False
    return not -32099 <= code <= -32020 or code in SPEC_DEFINED_CODES


def outside_reserved(code: int) -> bool:
    """Whether ``code`` lies outside the JSON-RPC reserved range (-32768..-32000), where MCP 2026-07-28 says new
    codes SHOULD be allocated."""
    return not -32768 <= code <= -32000


def with_error_codes(profiles: Iterable[WireProfile], codes: ErrorCodes) -> tuple[WireProfile, ...]:
    """The wires answering with ``codes``: as they are (``seeds``), or with every code the spec forbids moved."""
    if codes not in ERROR_CODE_SETS:
        raise ValueError(f"error_codes must be one of {', '.join(ERROR_CODE_SETS)}, got {codes!r}")
    if codes == "seeds":
        return tuple(profiles)
    not_found, required = _MOVED[codes]
    keeps = spec_allows if codes == "spec-safe" else outside_reserved
    return tuple(
        dataclasses.replace(
            profile,
            not_found=profile.not_found if keeps(profile.not_found) else not_found,
            required=profile.required if keeps(profile.required) else required,
        )
        for profile in profiles
    )


def required_codes(profile: WireProfile) -> frozenset[int]:
    """The codes a client of ``profile`` reads as "required", whichever set the server answers with."""
    return frozenset({profile.required, SPEC_SAFE_REQUIRED, APPLICATION_REQUIRED})


# -- the default wire: the data-layer sessions draft ------------------------------------
#
# The wire profile "draft-2026-03" (transports-wg PR #20): sessions/create and sessions/delete; a request names
# its session in params._meta["io.modelcontextprotocol/session"] as {"sessionId", "state"?} and results echo
# {"sessionId", "state"?, "expiresAt"} there. The key uses the io.modelcontextprotocol/ prefix that MCP
# reserves for the specification, because the draft was written to become part of it.

SESSION_META_KEY: Final = "io.modelcontextprotocol/session"
"""The ``params._meta`` key whose value names a request's session: ``{"sessionId": ..., "state": ...}``."""
METHOD_CREATE: Final = "sessions/create"
METHOD_DELETE: Final = "sessions/delete"
SESSIONS_EXTENSION_ID: Final = "io.modelcontextprotocol/sessions"
SESSION_NOT_FOUND: Final = -32043
"""Error code: the session is unknown, invalid, expired or deleted; permanent, so the client opens a new one."""
SESSION_REQUIRED: Final = -32044
"""Error code: the request has no session and the policy requires one."""
MAX_LABEL_LENGTH: Final = 256


async def create(call: LocalCall) -> dict[str, object]:
    """``sessions/create``: a new session; session metadata on the request is an error."""
    if call.profile.carrier.present(call.message):
        raise Refusal(INVALID_REQUEST, f"{call.profile.create_method} must not carry session metadata")
    call.string_param("label", max_length=MAX_LABEL_LENGTH)
    minted = await call.mint()
    return {"session": {"sessionId": minted.token, "expiresAt": iso(int(minted.expires_at))}}


async def delete(call: LocalCall) -> dict[str, object]:
    """``sessions/delete``: end the session the request names; deleting it twice is "not found"."""
    session = call.session
    assert session is not None  # needs_session: the pipeline resolved it
    await call.end(session, session.token)
    return {}


DRAFT: Final = WireProfile(
    name="draft",
    carrier=SessionCarrier(meta_key=SESSION_META_KEY, id_member="sessionId", state_member="state"),
    echo=Echo(meta_key=SESSION_META_KEY, id_member="sessionId", state_member="state", expiry_member="expiresAt"),
    capability=Capability(
        per_request=(("sessions",), ("extensions", SESSIONS_EXTENSION_ID)),
        handshake=(("sessions",), ("experimental", "sessions")),
    ),
    methods={
        METHOD_CREATE: LocalMethod(needs_session=False, answer=create),
        METHOD_DELETE: LocalMethod(needs_session=True, answer=delete),
    },
    sessionless=SESSIONLESS | {METHOD_CREATE},
    not_found=SESSION_NOT_FOUND,
    required=SESSION_REQUIRED,
    required_data={"create": METHOD_CREATE},
    required_hint=f'call {METHOD_CREATE} and send its sessionId in params._meta["{SESSION_META_KEY}"]',
    not_found_hint=f"the session ended or is not this caller's; call {METHOD_CREATE} for a new one",
    create_method=METHOD_CREATE,
)
"""The data-layer sessions draft (``sessions/create``, ``io.modelcontextprotocol/session``): the default wire."""
