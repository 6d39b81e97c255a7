"""Explicit state handles (SEP-2567) done right: short, unforgeable, expiring, revocable, typed.

``handles = Handles(keys, store)`` registers kinds (``handles.kind("basket",
prefix="bsk")``) and mints handle strings (``await handles.mint("basket")``)
that tools take as typed parameters (``basket: Annotated[Handle, kind]``).
:class:`HandleMiddleware` verifies every handle a ``tools/call`` carries before
the tool runs; :func:`check_call` is that check as a function. See
``docs/handles.md``.
"""

from ._format import MAX_HANDLE_CHARS, HandleKind
from ._middleware import (
    HandleContext,
    HandleMiddleware,
    ToolErrorResult,
    check_call,
    current_handle_context,
    handle_context,
    tool_error_result,
)
from ._middleware import answer_elements as answer_elements
from ._middleware import check_request as check_request
from ._middleware import is_tools_call as is_tools_call
from ._middleware import record_handles as record_handles
from ._middleware import send_answers as send_answers
from ._registry import Handle, HandleBudget, HandleError, HandleErrorReason, HandleLimitExceeded, Handles

# The public API is __all__; each ``name as name`` import above is for the package's other parts only.
__all__ = [
    "MAX_HANDLE_CHARS",
    "Handle",
    "HandleBudget",
    "HandleContext",
    "HandleError",
    "HandleErrorReason",
    "HandleKind",
    "HandleLimitExceeded",
    "HandleMiddleware",
    "Handles",
    "ToolErrorResult",
    "check_call",
    "current_handle_context",
    "handle_context",
    "tool_error_result",
]
