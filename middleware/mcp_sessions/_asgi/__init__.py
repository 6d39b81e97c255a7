"""ASGI plumbing the middlewares share: the bounded body read and its replay, the answers sent directly."""

from collections.abc import Iterable

from ._answers import send_accepted, send_json, send_result, send_status
from ._body import DEFAULT_MAX_BODY_SIZE, TOO_LARGE, Replay, read_body

__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "TOO_LARGE",
    "Replay",
    "header",
    "read_body",
    "send_accepted",
    "send_json",
    "send_result",
    "send_status",
]


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower case, as ASGI gives names), or ``None``."""
    return next((value for key, value in headers if key == name), None)
