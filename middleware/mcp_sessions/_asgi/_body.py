"""The request body: read once, bounded, then replayed once to the app."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from starlette.types import Message, Receive

if TYPE_CHECKING:
    from asgiref.typing import ASGIReceiveCallable

DEFAULT_MAX_BODY_SIZE: Final = 4 * 1024 * 1024
"""The largest body either middleware reads by default (``max_body_size``)."""
TOO_LARGE: Final = object()


async def read_body(receive: ASGIReceiveCallable, declared_length: bytes | None, limit: int) -> bytes | object | None:
    """The whole body; :data:`TOO_LARGE` over ``limit``; ``None`` when the client went away."""
    if declared_length is not None and declared_length.isdigit() and int(declared_length) > limit:
        return TOO_LARGE
    message = await receive()
    if message["type"] != "http.request":
        return None  # http.disconnect: the client is gone, nothing to forward
    body: bytes = message.get("body", b"")
    if message.get("more_body", False):
        buffer = bytearray(body)
        while True:
            if len(buffer) > limit:
                return TOO_LARGE
            message = await receive()
            if message["type"] != "http.request":
                return None
            buffer += message.get("body", b"")
            if not message.get("more_body", False):
                break
        body = bytes(buffer)
    return TOO_LARGE if len(body) > limit else body


class Replay:
    """A ``receive`` that hands the app the body once (possibly rewritten), then the real ``receive``.

    So ``http.disconnect`` still reaches the app after the body.
    """

    __slots__ = ("body", "receive")

    def __init__(self, body: bytes, receive: Receive) -> None:
        self.body: bytes | None = body
        self.receive = receive

    async def __call__(self) -> Message:
        if self.body is None:
            return await self.receive()
        body, self.body = self.body, None
        return {"type": "http.request", "body": body, "more_body": False}

    def rewrite(self, body: bytes) -> None:
        """Replay ``body`` instead, if the app has not read the original yet."""
        if self.body is not None:
            self.body = body
