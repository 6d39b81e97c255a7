"""ASGI plumbing the middlewares share: the bounded body read and its replay, the answers sent directly."""

from ._answers import send_accepted, send_json, send_refusal, send_result, send_status
from ._body import TOO_LARGE, Replay, read_body

__all__ = [
    "TOO_LARGE",
    "Replay",
    "read_body",
    "send_accepted",
    "send_json",
    "send_refusal",
    "send_result",
    "send_status",
]
