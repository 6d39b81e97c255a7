"""The handle step of the pipeline: every handle a ``tools/call`` carries, verified before the tool runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import Scope

from ._answers import Refusal, store_unavailable
from .handles import HandleContext, HandleError, Handles, check_call
from .stores import SessionStoreUnavailable

if TYPE_CHECKING:
    from ._plan import Plan
    from ._service import SessionService

__all__ = ["check_handles"]


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
        return
    context = plan.handles = HandleContext(handles, digest)
    for call in calls:
        before = set(context.verified)
        errors: list[HandleError] = []
        try:
            call.answer = await check_call(handles, call.params, digest, verified=context.verified, errors=errors)
        except SessionStoreUnavailable as exc:
            call.refusal = store_unavailable(exc)
            continue
        checked = [handle for token, handle in context.verified.items() if token not in before]
        if checked or errors:
            call.handles = (checked, errors)
