"""The handle step of the pipeline: every handle a ``tools/call`` carries, verified before the tool runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.types import Scope

from ..asgi import send_result
from ..handles import HandleContext, HandleError, Handles, check_call
from ..stores import SessionStoreUnavailable
from ..wire import Refusal, batch_refused, jsonrpc, store_unavailable
from ..wire.jsonrpc import hashable_id
from ..wire.protocol import Era
from ._echo import Target, annotate
from ._refusals import end_with

if TYPE_CHECKING:
    from asgiref.typing import ASGISendCallable

    from ..plan import Plan
    from ..session import SessionService

__all__ = ["answer_refused_handles", "check_handles"]


async def check_handles(handles: Handles, sessions: SessionService, scope: Scope, plan: Plan) -> None:
    """Set the request's handle view on ``plan``, and on each refused call its ``isError`` answer.

    A store that cannot answer refuses the call with the retryable error,
    never with a tool result the model would act on.
    """
    calls = [call for call in plan.calls if call.method == "tools/call" and call.refusal is None]
    try:
        digest = await sessions.principal_of(scope)
    except Refusal as refusal:  # the principal hook failed: a server bug, -32603
        for call in calls:
            call.refusal = refusal
        plan.refused = plan.refused or bool(calls)
        return
    context = plan.handles = HandleContext(handles, digest)
    for call in calls:
        before = set(context.verified)
        errors: list[HandleError] = []
        try:
            call.answer = await check_call(handles, call.params, digest, verified=context.verified, errors=errors)
        except SessionStoreUnavailable as exc:
            call.refusal = store_unavailable(exc)
            plan.refused = True
            continue
        plan.answered = plan.answered or call.answer is not None
        checked = [handle for token, handle in context.verified.items() if token not in before]
        if checked or errors:
            call.handles = (checked, errors)


async def answer_refused_handles(plan: Plan, targets: dict[Any, Target], send: ASGISendCallable) -> None:
    """Answer calls a handle refused with their ``isError`` result; the tool never runs.

    In a batch, the other elements are refused as a whole (-32600), as for an invalid session.
    """
    frames: list[dict[str, object]] = []
    for call in plan.calls:
        if call.answer is None:
            refusal = batch_refused("batch refused: another element's handle is invalid")
            end_with(call.operation, refusal)
            if call.is_request or call.method is None:
                frames.append(refusal.frame(call.request_id))
            continue
        if plan.era is Era.PER_REQUEST:
            call.answer["resultType"] = "complete"
        frame = jsonrpc.result(call.request_id, call.answer)
        if (target := targets.get(hashable_id(call.request_id))) is not None:
            annotate(target, frame)  # the session echo, and the operation learns of the tool error
        if call.operation is not None:
            call.operation.end()
        frames.append(frame)
    await send_result(send, frames if plan.batch else frames[0], accept=plan.headers.get(b"accept", b""))
