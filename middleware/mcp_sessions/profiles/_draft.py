"""The wire profile "draft-2026-03": the data-layer sessions draft (transports-wg PR #20).

``sessions/create`` and ``sessions/delete``; a request names its session in
``params._meta["io.modelcontextprotocol/session"]`` as ``{"sessionId", "state"?}``
and results echo ``{"sessionId", "state"?, "expiresAt"}`` there. The key uses the
``io.modelcontextprotocol/`` prefix that MCP reserves for the specification, because
the draft was written to become part of it.
"""

from __future__ import annotations

from typing import Final

from .._wire import Refusal, iso
from .._wire.protocol import INVALID_REQUEST
from ._base import SESSIONLESS, Capability, ClientSide, LocalCall, LocalMethod, WireProfile, ended_hint, session_object
from ._carriers import SessionCarrier
from ._echo_shapes import Echo

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


def _create_params(label: str | None) -> dict[str, object]:
    return {} if label is None else {"label": label}


def _created(result: dict[str, object]) -> tuple[str, dict[str, object]] | None:
    return session_object(result.get("session"), "sessionId")


def _delete_params(token: str) -> dict[str, object]:
    return {"_meta": {SESSION_META_KEY: {"sessionId": token}}}


def _advertised(capabilities: dict[str, object]) -> bool:
    extensions, experimental = capabilities.get("extensions"), capabilities.get("experimental")
    return (
        "sessions" in capabilities
        or (isinstance(extensions, dict) and SESSIONS_EXTENSION_ID in extensions)
        or (isinstance(experimental, dict) and "sessions" in experimental)
    )


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
    not_found_hint=ended_hint(METHOD_CREATE),
    create_method=METHOD_CREATE,
    client=ClientSide(
        create_params=_create_params,
        created=_created,
        delete_method=METHOD_DELETE,
        delete_params=_delete_params,
        deleted=lambda result: True,  # a delete of a session that is gone is -32043, not a result
        advertised=_advertised,
    ),
)
"""The data-layer sessions draft (``sessions/create``, ``io.modelcontextprotocol/session``): the default wire."""
