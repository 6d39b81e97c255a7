"""One request's handle check, shared by the session middleware's pipeline and :class:`HandleMiddleware`.

It works on the parsed JSON-RPC messages (one message, or a batch's
elements, by their index), never on a middleware's own view of them: which
are ``tools/call`` requests, every handle each carries verified with
:func:`check_call`, and what was verified recorded (in the request's
:class:`HandleContext`, per call, and on spans when given a tracer). How a
refused request is answered is :mod:`._answer`'s.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any, Final, TypeGuard

from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode, Tracer

from ..stores import SessionStoreUnavailable
from ..wire import Refusal, store_unavailable
from ._check import ToolErrorResult, check_call, handle_candidates, record_handles
from ._context import HandleContext
from ._errors import HandleError
from ._handle import Handle
from ._registry import Handles

__all__ = ["SPAN_NAME", "CallCheck", "RequestCheck", "check_request", "is_tools_call"]

SPAN_NAME: Final = "mcp_sessions.handles.check"


def is_tools_call(message: object) -> TypeGuard[dict[str, Any]]:
    """Whether ``message`` is a ``tools/call`` request: what runs a tool (a notification runs none)."""
    return (
        isinstance(message, dict)
        and message.get("jsonrpc") == "2.0"
        and message.get("method") == "tools/call"
        and "id" in message
    )


class CallCheck:
    """What the check found in one ``tools/call``: the handles it verified, the refusals, and its answer."""

    __slots__ = ("answer", "checked", "errors")

    def __init__(self) -> None:
        self.answer: ToolErrorResult | None = None
        """The ``isError`` result to answer instead of running the tool; ``None``: the tool runs."""
        self.checked: list[Handle] = []
        """The handles this call verified first (one the request already verified is not repeated)."""
        self.errors: list[HandleError] = []
        """The refusal of the handle that failed, if one did."""


class RequestCheck:
    """What the check found in one request, by element index (a single message is element 0)."""

    __slots__ = ("calls", "retryable", "retryable_at")

    def __init__(self) -> None:
        self.calls: dict[int, CallCheck] = {}
        """Each ``tools/call`` request that carries something handle-shaped."""
        self.retryable: Refusal | None = None
        """The retryable refusal (the check stops there): the store could not answer (-32010), or a kind's
        ``create`` tool was called by a caller who may mint no handle now (-32011)."""
        self.retryable_at: int | None = None
        """The element it refuses."""

    @property
    def answers(self) -> dict[int, ToolErrorResult]:
        """The ``isError`` result of each refused call, by element index."""
        return {index: call.answer for index, call in self.calls.items() if call.answer is not None}

    @property
    def refused(self) -> bool:
        """Whether the request is answered here: a handle was refused, or the store could not answer."""
        return self.retryable is not None or any(call.answer is not None for call in self.calls.values())


async def check_request(
    handles: Handles, messages: Sequence[object], context: HandleContext, *, tracer: Tracer | None = None
) -> RequestCheck:
    """Check the handles of every ``tools/call`` request in ``messages`` (``None``: an element not to check).

    Each verified handle goes into ``context.verified``, for the tools' typed
    parameters (a handle met twice is verified once). A store that cannot
    answer stops the check with the retryable refusal, never a verdict. With
    ``tracer``, each call that carries handles gets a span
    (:data:`SPAN_NAME`), and that span and the current one get the handles'
    kinds and stable ids (:func:`record_handles`). A call of a kind's ``create``
    tool by a caller who may mint no handle now is refused up front (-32011).
    """
    check = RequestCheck()
    creators = handles.creators if context.caller is not None else frozenset()
    for index, message in enumerate(messages):
        if not is_tools_call(message):
            continue
        params = message.get("params")
        name = params.get("name") if creators and isinstance(params, dict) else None
        if type(name) is str and name in creators and (over := handles.budget.refusal(context, time.time())):
            check.retryable, check.retryable_at = over, index  # the tool would only fail to mint
            break
        arguments = params.get("arguments") if isinstance(params, dict) else None
        if not isinstance(arguments, dict) or next(handle_candidates(handles, arguments), None) is None:
            continue  # no handle: no span, nothing to check
        found = await _check_call(handles, params, context, tracer)
        if isinstance(found, Refusal):
            check.retryable, check.retryable_at = found, index
            break
        check.calls[index] = found
    return check


async def _check_call(
    handles: Handles, params: object, context: HandleContext, tracer: Tracer | None
) -> CallCheck | Refusal:
    """One call's check, in its span when traced; the store's refusal when it could not answer."""
    call = CallCheck()
    before = set(context.verified)
    parent = trace.get_current_span()
    with _span(tracer) as span:
        try:
            call.answer = await check_call(
                handles, params, context.principal_digest, verified=context.verified, errors=call.errors
            )
        except SessionStoreUnavailable as exc:
            span.set_status(Status(StatusCode.ERROR, "store unavailable"))
            return store_unavailable(exc)
        call.checked = [handle for token, handle in context.verified.items() if token not in before]
        record_handles(span, call.checked, call.errors)
        if tracer is not None:
            record_handles(parent, call.checked, call.errors)
    return call


def _span(tracer: Tracer | None) -> contextlib.AbstractContextManager[Span]:
    if tracer is None:
        return contextlib.nullcontext(INVALID_SPAN)
    return tracer.start_as_current_span(SPAN_NAME, kind=SpanKind.INTERNAL)
