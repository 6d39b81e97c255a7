"""The steps before an answer: each call's session (or its refusal) through the session sources in order, the
handles a ``tools/call`` carries, and each call's span."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from starlette.types import Scope

from .._session import caller_of
from .._wire import Refusal, jsonrpc
from .._wire.protocol import HEADER_MISMATCH, INVALID_PARAMS, MCP_METHOD_HEADER
from ..handles import HandleContext, Handles, check_request, is_tools_call, record_handles
from ..profiles import Era
from ..sources import turn_of

if TYPE_CHECKING:
    from .._otel import Operation, Telemetry, TraceUser
    from .._plan import Call, Plan
    from .._session import Session, SessionService
    from ..sources import SessionSource

Explain = Callable[["Call", "Plan"], "str | None"]
"""Why a call that needs a session has none, where a source can say (a host's id with data off)."""


class Resolver:
    """The source chain of one middleware, and the policy that says when a call needs a session."""

    def __init__(
        self,
        sources: Sequence[SessionSource],
        *,
        data_layer: SessionSource,
        requires: Callable[[str, Any], bool],
        explain: Explain | None = None,
    ):
        self._sources = tuple(sources)
        self._data_layer = data_layer
        self._requires = requires
        self._explain = explain

    async def resolve(self, scope: Scope, plan: Plan) -> None:
        """Set each call's session; a call that is refused gets its refusal, and the plan is refused."""
        requires = self._requires
        for call in plan.calls:
            if call.method is None:
                continue
            try:
                if call.local is not None:
                    call.session = await self._local_session(scope, call, plan)
                    continue
                session = None
                for source in self._sources:  # in order, until one says whose call it is
                    session = await source.session_for(scope, call, plan)
                    if session is not None:
                        break
                call.session = session
                if session is None and call.is_request and requires(call.method, call.params):
                    raise self._required(call, plan)
            except Refusal as refusal:
                call.refusal = refusal
                plan.refused = True
                if plan.batch:  # refused whole: the other elements are answered -32600, with no session work
                    break

    async def _local_session(self, scope: Scope, call: Call, plan: Plan) -> Session | None:
        """The session a wire's own method acts on: a data-layer one only, never a host's or a transport's."""
        assert call.local is not None and call.method is not None
        header_method = plan.headers.get(MCP_METHOD_HEADER)
        if plan.era is Era.MODERN and header_method is not None and header_method != call.method.encode():
            raise Refusal(HEADER_MISMATCH, "Mcp-Method header does not match the request method")
        params = call.params
        if params is not None and not isinstance(params, dict):
            raise Refusal(INVALID_PARAMS, "params must be an object")
        if not call.local.needs_session:
            return None
        session = await self._data_layer.session_for(scope, call, plan)
        if session is None:  # a wire's own method names its session itself: no host's id explains its absence
            raise self._required(call, None)
        return session

    def _required(self, call: Call, plan: Plan | None) -> Refusal:
        """The wire's "session required", saying in its message why a host's conversation has no data
        where it has none, and what to do (clients show the message, not ``data``)."""
        profile = call.profile
        why = None if call.conversation is None else call.conversation.no_data
        if why is None and self._explain is not None and plan is not None:
            why = self._explain(call, plan)
        return Refusal(profile.required, profile.required_text(why), profile.required_data, reason="required")


async def check_handles(handles: Handles, sessions: SessionService, scope: Scope, plan: Plan) -> None:
    """Set the request's handle view on ``plan``, and on each refused call its ``isError`` answer.

    A store that cannot answer refuses the call with the retryable error,
    never with a tool result the model would act on.
    """
    if plan.refused:
        return  # answered with its refusal: no handle is checked, no store touched for it
    try:
        digest = await sessions.principal_of(scope)
    except Refusal as refusal:  # the principal hook failed: a server bug, -32603
        calls = [call for call in plan.calls if call.refusal is None and is_tools_call(call.message)]
        for call in calls:
            call.refusal = refusal
        plan.refused = bool(calls)
        return
    caller = caller_of(scope, digest)
    context = plan.handles = HandleContext(handles, digest, caller=caller, create_limit=sessions.limit)
    # A call the session step refused already is not checked: it is answered with that refusal.
    check = await check_request(handles, [c.message if c.refusal is None else None for c in plan.calls], context)
    for index, found in check.calls.items():
        call = plan.calls[index]
        call.answer = found.answer
        if found.checked or found.errors:
            call.handles = (found.checked, found.errors)
        plan.answered = plan.answered or found.answer is not None
    if check.retryable is not None and check.retryable_at is not None:
        plan.calls[check.retryable_at].refusal = check.retryable
        plan.refused = True


def start_operations(telemetry: Telemetry, scope: Scope, plan: Plan, *, capture: bool = False) -> None:
    """A SERVER span per JSON-RPC call of ``plan``, for a request an OpenTelemetry SDK records (``plan.traced``).

    With ``capture`` (the ``capture_content`` option), each ``tools/call``'s span records its arguments,
    and its result once the response is read (``_otel/_span.py``); a session method's, its label and
    outcome. Who made the calls is :func:`record_user`'s, with ``trace_user``.
    """
    for call in plan.calls:
        if call.method is not None:
            call.operation = operation = _start(telemetry, scope, plan, call)
            if capture:
                _capture(call, operation)


async def record_user(users: TraceUser, scope: Scope, plan: Plan) -> None:
    """``user.id`` on each recording span of ``plan``, from the principal, asked once (the ``trace_user`` option)."""
    recording = [call.operation for call in plan.calls if call.operation is not None and call.operation.recording]
    if recording and (user := await users.user_id(scope)) is not None:
        for operation in recording:
            operation.set_user(user)


def _capture(call: Call, operation: Operation) -> None:
    """What ``call`` gave: a tool's arguments (its result comes later), or a session method's label and outcome."""
    params = call.params
    if call.method == "tools/call":
        if isinstance(params, dict):
            session = call.session
            known = () if session is None else tuple(t for t in (session.token, session.state_token) if t)
            operation.capture(params.get("arguments"), known)
    elif call.local is not None:  # a wire's create, else its delete
        if call.method == call.profile.create_method:
            label = params.get("label") if isinstance(params, dict) else None
            operation.capture_local(label if type(label) is str else None, "created")
        else:
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
        turn_id=turn_of(jsonrpc.meta(call.params)),  # the host's turn, whichever session the call has
    )
    if call.refusal is not None and call.refusal.session_id is not None:
        operation.set_session(call.refusal.session_id)
    if call.handles is not None:
        record_handles(operation.span, *call.handles)
    return operation
