"""How a request the handle check refused is answered, instead of running any tool.

Shared by the session middleware's pipeline and :class:`HandleMiddleware`. A
refused call gets its ``isError`` result (with ``resultType: "complete"`` on
the 2026-07-28 path); the other elements of a batch are refused as a whole
(-32600), as for an invalid session; a store that cannot answer gets every
element the retryable error (-32010, HTTP 503), and so does a caller who may
mint no handle now (-32011, HTTP 429). Notifications are never answered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from ..asgi import send_json, send_result
from ..wire import Refusal, batch_refused, jsonrpc
from ..wire.protocol import SESSION_STORE_UNAVAILABLE, TOO_MANY_SESSIONS, Era
from ._check import ToolErrorResult

if TYPE_CHECKING:
    from asgiref.typing import ASGISendCallable

__all__ = ["BATCH_REFUSED", "Answer", "answer_elements", "send_answers"]

BATCH_REFUSED: Final = "batch refused: another element's handle is invalid"


class Answer(NamedTuple):
    """How one element of a refused request is answered."""

    frame: dict[str, Any] | None
    """Its JSON-RPC response; ``None`` for a notification, which is never answered."""
    refusal: Refusal | None
    """Why it is refused, when it is not given its own ``isError`` result."""


def answer_elements(
    messages: Sequence[object],
    answers: Mapping[int, ToolErrorResult],
    *,
    era: Era,
    batch: bool,
    retryable: Refusal | None = None,
) -> list[Answer]:
    """The answer of each element of ``messages`` (one message when not ``batch``), in order.

    ``answers`` are the ``isError`` results of the refused calls, by element
    index; ``retryable`` a retryable refusal, which every element gets.
    """
    others = retryable or batch_refused(BATCH_REFUSED)
    elements: list[Answer] = []
    for index, message in enumerate(messages):
        # One message's id is repeated as sent; a batch element's only when JSON-RPC allows it.
        request_id = message.get("id") if not batch and isinstance(message, dict) else jsonrpc.request_id_of(message)
        answer = answers.get(index) if retryable is None else None
        if answer is not None:
            result = dict(answer)
            if era is Era.PER_REQUEST:
                result["resultType"] = "complete"
            elements.append(Answer(jsonrpc.result(request_id, result), None))
            continue
        # Requests are answered, and so is anything that is no call at all; notifications are not.
        answered = (isinstance(message, dict) and "id" in message) or not jsonrpc.is_request_or_notification(message)
        elements.append(Answer(others.frame(request_id) if answered else None, others))
    return elements


async def send_answers(
    send: ASGISendCallable, answers: Sequence[Answer], *, batch: bool, accept: bytes, retry_after: bytes = b""
) -> None:
    """Send ``answers`` (from :func:`answer_elements`): a batch as an array, one message as itself.

    A refusal by an unavailable store is a 503 with ``Retry-After``, one over
    the caller's handle budget a 429 with its own ``Retry-After``; anything
    else goes out as a result, as JSON or as one SSE event to a client that
    accepts only a stream.
    """
    frames = [answer.frame for answer in answers if answer.frame is not None]
    payload: object = frames if batch else frames[0]
    for refusal in {answer.refusal for answer in answers if answer.refusal is not None}:
        if refusal.code == SESSION_STORE_UNAVAILABLE:
            return await send_json(send, 503, payload, retry_after)
        if refusal.code == TOO_MANY_SESSIONS:
            return await send_json(send, 429, payload, str(refusal.retry_after or 1).encode())
    await send_result(send, payload, accept=accept)
