"""Explicit state handles (SEP-2567) done right: short, unforgeable, expiring, revocable, typed.

``handles = Handles(keys, store)`` registers kinds (``handles.kind("basket",
prefix="bsk")``) and mints handle strings (``await handles.mint("basket")``)
that tools take as typed parameters (``basket: Annotated[Handle, kind]``).
:class:`HandleMiddleware` verifies every handle a ``tools/call`` carries before
the tool runs; :func:`check_call` is that check as a function. See
``docs/handles.md``.
"""

from ._check import (
    ATTRIBUTE_ID,
    ATTRIBUTE_KIND,
    HandleContext,
    ToolErrorResult,
    check_call,
    current_handle_context,
    handle_candidates,
    handle_context,
    record_handles,
    tool_error_result,
)
from ._check import check_request as check_request
from ._check import is_tools_call as is_tools_call
from ._format import CURRENT, MAX_HANDLE_CHARS, MAX_PREFIX_CHARS, HandleKind
from ._handle import (
    DEFAULT_MAX_HANDLES_PER_CALLER,
    Handle,
    HandleBudget,
    HandleError,
    HandleErrorReason,
    HandleLimitExceeded,
)
from ._middleware import HandleMiddleware
from ._middleware import answer_elements as answer_elements
from ._middleware import send_answers as send_answers
from ._registry import Handles

# The request-level check the session middleware's pipeline shares with HandleMiddleware is re-exported
# above for the pipeline, and is no part of the public API (``__all__``).

__all__ = [
    "ATTRIBUTE_ID",
    "ATTRIBUTE_KIND",
    "CURRENT",
    "DEFAULT_MAX_HANDLES_PER_CALLER",
    "MAX_HANDLE_CHARS",
    "MAX_PREFIX_CHARS",
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
    "handle_candidates",
    "handle_context",
    "record_handles",
    "tool_error_result",
]
