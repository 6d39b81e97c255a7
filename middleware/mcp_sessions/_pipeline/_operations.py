"""Telemetry glue of the pipeline: the span each call gets, named by its session or conversation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import Scope

from .._wire.protocol import Era
from ..handles import record_handles

if TYPE_CHECKING:
    from .._otel import Operation, Telemetry
    from .._plan import Call, Plan


async def start_operations(telemetry: Telemetry, scope: Scope, plan: Plan, *, capture: bool = False) -> None:
    """A SERVER span per JSON-RPC call of ``plan`` (only when an OpenTelemetry SDK records).

    With ``capture`` (the ``capture_content`` option), each ``tools/call``'s span records its arguments,
    and its result once the response is read (``otel/_content.py``); a session method's, its label and
    outcome. With ``trace_user``, a recording span gets ``user.id`` from the principal, asked once.
    """
    if not telemetry.enabled():
        return
    user: str | None = None
    asked = False
    for call in plan.calls:
        if call.method is not None:
            call.operation = operation = _start(telemetry, scope, plan, call)
            if telemetry.users is not None and operation.recording:
                if not asked:
                    user, asked = await telemetry.users.user_id(scope), True
                if user is not None:
                    operation.set_user(user)
            if capture:
                _capture(call, operation)


def _capture(call: Call, operation: Operation) -> None:
    """What ``call`` gave: a tool's arguments (its result comes later), or a session method's label and outcome."""
    params = call.params
    if call.method == "tools/call":
        if isinstance(params, dict):
            session = call.session
            known = () if session is None else tuple(t for t in (session.token, session.state_token) if t)
            operation.capture(params.get("arguments"), known)
    elif call.local is not None:
        profile = call.profile
        if call.method == profile.create_method:
            label = params.get("label") if isinstance(params, dict) else None
            operation.capture_local(label if type(label) is str else None, "created")
        elif profile.client is not None and call.method == profile.client.delete_method:
            operation.capture_local(None, "ended")


def _start(telemetry: Telemetry, scope: Scope, plan: Plan, call: Call) -> Operation:
    session, conversation = call.session, call.conversation
    # Telemetry names the conversation the first source found: a host's id verbatim, else the session.
    named = session if conversation is None else conversation
    operation = telemetry.start(
        scope=scope,
        headers=plan.headers,
        message=call.message,
        method=call.method or "",
        protocol_version=plan.protocol_version,
        modern=plan.era is Era.MODERN,
        session_id=None if named is None else named.id,
        session_claims=None if session is None else session.claims,
        start_ns=plan.start_ns,
        session_source=None if named is None else named.source,
        user_id=None if conversation is None else conversation.user,
        turn_id=None if conversation is None else conversation.turn,
    )
    if call.refusal is not None and call.refusal.session_id is not None:
        operation.set_session(call.refusal.session_id)
    if call.minted:
        operation.telemetry.sessions_created.add(1, operation.session_attributes())
    if call.revoked is not None:
        attributes = {"mcp_sessions.reason": call.revoked, "mcp.method.name": call.method or ""}
        operation.telemetry.sessions_rejected.add(1, attributes)
    if call.handles is not None:
        record_handles(operation.span, *call.handles)
    return operation
