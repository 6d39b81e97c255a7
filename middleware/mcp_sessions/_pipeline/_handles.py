"""The handle step of the pipeline: every handle a ``tools/call`` carries, verified before the tool runs.

The check and the answers are :mod:`mcp_sessions.handles`' own (the ones
``HandleMiddleware`` runs); this step puts their results on the plan's calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.types import Scope

from .._session import caller_of
from .._wire import Refusal
from .._wire.jsonrpc import hashable_id
from ..handles import HandleContext, Handles, answer_elements, check_request, is_tools_call, send_answers
from ._echo import Target, annotate
from ._refusals import end_with

if TYPE_CHECKING:
    from asgiref.typing import ASGISendCallable

    from .._plan import Plan
    from .._session import SessionService


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


async def answer_refused_handles(plan: Plan, targets: dict[Any, Target], send: ASGISendCallable) -> None:
    """Answer calls a handle refused with their ``isError`` result; the tool never runs.

    In a batch, the other elements are refused as a whole (-32600), as for an invalid session.
    """
    answers = answer_elements(
        [call.message for call in plan.calls],
        {index: call.answer for index, call in enumerate(plan.calls) if call.answer is not None},
        era=plan.era,
        batch=plan.batch,
    )
    for call, answer in zip(plan.calls, answers, strict=True):
        if answer.refusal is not None:
            end_with(call.operation, answer.refusal)
            continue
        if answer.frame is not None and (target := targets.get(hashable_id(call.request_id))) is not None:
            annotate(target, answer.frame)  # the session echo, and the operation learns of the tool error
        if call.operation is not None:
            call.operation.end()
    await send_answers(send, answers, batch=plan.batch, accept=plan.headers.get(b"accept", b""))
