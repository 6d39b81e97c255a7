"""The pre-call check: every handle a ``tools/call`` carries is verified before the tool runs.

A handle is recognised by its prefix, so the scan is cheap: a string is looked
at only if it starts with a registered ``<prefix>_``. A handle that fails
becomes the call's answer, an ``isError`` tool result that tells the model
what happened and what to do; the tool never runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Final

from opentelemetry.trace import Span, Status, StatusCode

from ._errors import HandleError
from ._handle import Handle
from ._registry import Handles

__all__ = [
    "ATTRIBUTE_ERROR",
    "ATTRIBUTE_ID",
    "ATTRIBUTE_KIND",
    "ToolErrorResult",
    "check_call",
    "handle_candidates",
    "record_handles",
    "tool_error_result",
]

ToolErrorResult = dict[str, object]
"""A ``CallToolResult`` with ``isError: true``, as JSON (the ``result`` of the JSON-RPC response)."""

ATTRIBUTE_KIND: Final = "mcp_sessions.handle.kind"
ATTRIBUTE_ID: Final = "mcp_sessions.handle.id"
ATTRIBUTE_ERROR: Final = "mcp_sessions.handle.error"
_MAX_DEPTH: Final = 8
# What a handle mistyped by a character or two still looks like: the base64url alphabet, near the length.
_HANDLE_LIKE: Final = re.compile(r"[A-Za-z0-9_-]{20,60}")


def handle_candidates(handles: Handles, arguments: object) -> Iterator[tuple[str, str]]:
    """``(argument path, value)`` for each string in ``arguments`` that looks like a registered kind's handle."""
    prefixes = handles.prefixes
    if not prefixes:
        return
    stack: list[tuple[str, object, int]] = [("", arguments, 0)]
    while stack:
        path, value, depth = stack.pop()
        if isinstance(value, str):
            if value.startswith(prefixes) and _HANDLE_LIKE.fullmatch(value):
                yield path, value
        elif depth < _MAX_DEPTH:
            if isinstance(value, dict):
                stack.extend((f"{path}.{key}" if path else str(key), item, depth + 1) for key, item in value.items())
            elif isinstance(value, list):
                stack.extend((f"{path}[{index}]", item, depth + 1) for index, item in enumerate(value))


def record_handles(span: Span, verified: Iterable[Handle], errors: list[HandleError]) -> None:
    """Kinds and stable ids of a call's handles on ``span`` (lists, one entry per handle); never a handle."""
    verified = list(verified)
    if not span.is_recording() or not (verified or errors):
        return
    kinds = [handle.kind for handle in verified] + [error.kind for error in errors]
    ids = [handle.id for handle in verified] + [error.handle_id or "" for error in errors]
    span.set_attribute(ATTRIBUTE_KIND, kinds)
    span.set_attribute(ATTRIBUTE_ID, ids)
    if errors:
        span.set_attribute(ATTRIBUTE_ERROR, errors[0].reason)
        span.set_status(Status(StatusCode.ERROR, errors[0].reason))


def tool_error_result(text: str) -> ToolErrorResult:
    """An ``isError`` ``CallToolResult`` with one text content."""
    return {"content": [{"type": "text", "text": text}], "isError": True}


async def check_call(
    handles: Handles,
    tools_call_params: object,
    principal_digest: str | None,
    *,
    verified: dict[str, Handle] | None = None,
    errors: list[HandleError] | None = None,
) -> ToolErrorResult | None:
    """Verify every handle in a ``tools/call``'s ``arguments``; the error result to answer, or ``None``.

    ``principal_digest`` is the request's principal digest (as the session
    middleware computes it; ``None`` when anonymous). Each verified handle is
    put in ``verified`` (token -> :class:`Handle`) for the tool's typed
    parameters; a refusal's :class:`HandleError` is appended to ``errors``.
    Store failures raise :class:`~mcp_sessions.SessionStoreUnavailable`: answer
    those with the retryable error, never with a tool result.
    """
    arguments = tools_call_params.get("arguments") if isinstance(tools_call_params, dict) else None
    if not isinstance(arguments, dict):
        return None  # no arguments object: nothing named, and the server refuses the call itself
    found = list(handle_candidates(handles, arguments))
    if not found:
        return None
    if len(found) > handles.max_handles_per_call:
        return tool_error_result(
            f"this call carries {len(found)} handles; a call may carry at most {handles.max_handles_per_call}"
        )
    for path, value in sorted(found):
        if verified is not None and value in verified:
            continue
        try:
            handle = await handles.verify_digest(value, principal_digest)
        except HandleError as exc:
            if errors is not None:
                errors.append(exc)
            return tool_error_result(f"argument {path!r}: {exc.message}")
        if verified is not None:
            verified[value] = handle
    return None
