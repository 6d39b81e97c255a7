"""Typed tool parameters: ``Annotated[Handle, basket]`` in MCPServer and fastmcp tools.

Pydantic validates a tool's arguments synchronously, so the validator cannot
reach the store: it accepts only handles that the request's middleware check
already verified (:class:`HandleContext.verified`), and otherwise refuses with
the reason a pure check finds. The rejected value travels through pydantic's
error as a redacted stand-in, so no error text repeats a handle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic_core import PydanticCustomError, core_schema

from ._context import current_handle_context
from ._errors import HandleError
from ._messages import message

if TYPE_CHECKING:
    from ._handle import Handle
    from ._kind import HandleKind

__all__ = ["core_schema_for"]


class _Redacted(str):
    """A handle string whose repr shows only its prefix (what pydantic prints as ``input_value``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        prefix, sep, _ = self.partition("_")
        return f"'{prefix}_…'" if sep and len(prefix) <= 4 else "'…'"


def _redact(value: str) -> _Redacted:
    return _Redacted(value)


def core_schema_for(kind: HandleKind) -> core_schema.CoreSchema:
    """A string in, the verified :class:`Handle` out; serialized back to the handle string."""

    def validate(value: _Redacted) -> Handle:
        raw = str.__str__(value)
        context = current_handle_context()
        if context is None:
            raise PydanticCustomError(
                "handle_unchecked",
                "{kind} handles cannot be checked here: the server runs no handle middleware "
                "(its operator must install HandleMiddleware)",
                {"kind": kind.name},
            )
        handle = context.verified.get(raw)
        if handle is not None:
            if handle.kind == kind.name:
                return handle
            other = context.handles.kinds[handle.kind]
            raise PydanticCustomError("handle_wrong_kind", message("wrong_kind", kind, other=other))
        try:
            context.handles.authenticate(raw, context.principal_digest, expected=kind)
        except HandleError as exc:
            raise PydanticCustomError(f"handle_{exc.reason}", exc.message) from None
        # Authentic, but never checked against the store for this request: refuse rather than skip
        # revocation. HandleMiddleware (or the session middleware) checks every tools/call first.
        raise PydanticCustomError(
            "handle_unchecked",
            "this {kind} handle was not checked for this request; the server's operator must install "
            "HandleMiddleware inside the session middleware",
            {"kind": kind.name},
        )

    return core_schema.chain_schema(
        [
            core_schema.str_schema(),
            core_schema.no_info_plain_validator_function(_redact),
            core_schema.no_info_plain_validator_function(validate),
        ],
        serialization=core_schema.plain_serializer_function_ser_schema(_serialize, when_used="always"),
    )


def _serialize(value: object) -> str:
    token = getattr(value, "token", value)
    return str(token)
