"""The drain that a stop (``_lifecycle.Gateway``: the whole gateway) and a reload (``_servers.Servers.replace``: each
server that goes) share: which requests it waits for (:func:`is_call`), and what it answers, once, for both: a
request it refuses (:data:`REFUSED`), and one its bound cut (:func:`cut`)."""

from __future__ import annotations

from typing import Final

from starlette.types import Scope, Send

from .._asgi import header
from .._pipeline import error_answer, unavailable
from .._wire.protocol import INTERNAL_ERROR, MCP_METHOD_HEADER
from ._serving import CUT, CUT_DATA, RESTARTING, RETRY_AFTER

REFUSED: Final = unavailable(503, RESTARTING, RETRY_AFTER, None, "shutting_down")
"""A request the drain refuses (a new conversation, a stream, a request to a server that goes): 503 with
``Retry-After`` (``-32014``), which a client sends again and the next gateway, or the server's new app, answers."""
_CUT: Final = error_answer(502, INTERNAL_ERROR, CUT, "cut", data=CUT_DATA)
"""A call cut before its answer started, its id unread here (``--stdio``'s name theirs: ``_server``): it may have run,
so no ``Retry-After``."""
_LISTEN: Final = b"subscriptions/listen"


def is_call(scope: Scope) -> bool:
    """Whether an HTTP request is a call, which the drain waits for: any but a ``GET`` stream or a
    ``subscriptions/listen``, which would hold it (their clients open them again elsewhere)."""
    return scope["method"] != "GET" and header(scope["headers"], MCP_METHOD_HEADER) != _LISTEN


async def cut(send: Send, *, call: bool, started: bool, ended: bool) -> None:
    """A request the drain's bound cut, told so: a call whose answer has not started, that it may have run; any
    other, to send it again (:data:`REFUSED`); an answer under way (a stream), ended where it is."""
    if not started:
        return await (_CUT if call else REFUSED).send(send)
    if not ended:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    return None
