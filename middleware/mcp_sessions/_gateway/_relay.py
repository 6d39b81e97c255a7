"""The response body, relayed: each chunk sent as it comes; the client watched; an event stream kept alive.

Whatever the answer (JSON, plain, an event stream, a 202 with no body), a client that disconnects ends it:
:func:`while_connected` cancels the work, so the upstream request is closed and the upstream sees the client
go. An event stream can stay open for hours. Proxies cut a connection that carried nothing for a while (often
60 s), so after ``keepalive`` seconds of silence the gateway sends an SSE comment, ``: keep-alive``, but only
between two events (a comment inside an event would split it). The upstream is read by a task of its own,
one chunk ahead, so that waiting can time out without cutting a read in half.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from starlette.types import Receive, Send

KEEPALIVE: Final = b": keep-alive\n\n"
_LINE_ENDS: Final = (b"\n", b"\r")
Errors = type[Exception] | tuple[type[Exception], ...]


async def while_connected(receive: Receive, work: Awaitable[None]) -> None:
    """Await ``work`` until it is done or the client disconnects, which cancels it; what it raises, raised.

    ``receive`` has given the request's body: all it has left to say is ``http.disconnect``.
    """
    failed: list[Exception] = []
    async with anyio.create_task_group() as group:
        group.start_soon(_watch, receive, group.cancel_scope)
        try:
            await work
        except Exception as exc:  # raised as it came, not in the task group's ExceptionGroup
            failed.append(exc)
        group.cancel_scope.cancel()  # the watcher: the answer is over
    if failed:
        raise failed[0]


async def relay(chunks: AsyncIterator[bytes], send: Send) -> None:
    """Send every chunk as the body, each as it comes, then end it."""
    async for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def relay_events(chunks: AsyncIterator[bytes], send: Send, keepalive: float | None, errors: Errors) -> None:
    """:func:`relay` for an event stream: kept alive when quiet.

    A read that fails (``errors``) is raised once what came before it is sent: the response has
    started, so the client sees the stream cut, never an error answer. So is a ``send`` that fails.
    """
    failed: list[Exception] = []
    ahead, arrived = anyio.create_memory_object_stream[bytes](0)
    async with anyio.create_task_group() as group, arrived:
        group.start_soon(_read, chunks, ahead, failed, errors)
        try:
            await _send_events(arrived, send, keepalive)
        except Exception as exc:  # raised as it came, not in the task group's ExceptionGroup
            failed.append(exc)
            group.cancel_scope.cancel()  # the reader
    if failed:
        raise failed[0]
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _send_events(arrived: MemoryObjectReceiveStream[bytes], send: Send, keepalive: float | None) -> None:
    """Send each chunk the reader hands on, and a keep-alive after ``keepalive`` seconds of silence between events."""
    tail = b"\n\n"  # the stream's last bytes: its start counts as between two events
    while True:
        chunk: bytes | None = None
        with anyio.move_on_after(keepalive):
            try:
                chunk = await arrived.receive()
            except anyio.EndOfStream:
                return
        if chunk is not None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            tail = (tail + chunk)[-4:]
        elif _between_events(tail):
            await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})


async def _read(
    chunks: AsyncIterator[bytes], ahead: MemoryObjectSendStream[bytes], failed: list[Exception], errors: Errors
) -> None:
    async with ahead:
        try:
            async for chunk in chunks:
                await ahead.send(chunk)
        except errors as exc:  # kept for the relay to raise: a task group would wrap it in an ExceptionGroup
            failed.append(exc)


async def _watch(receive: Receive, scope: anyio.CancelScope) -> None:
    """Cancel the work when the client disconnects (after the request's body, ``receive`` says nothing else)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def _between_events(tail: bytes) -> bool:
    """Whether a stream that ends with ``tail`` ends between two events: two line ends in a row.

    A CR LF is one line end; a CR at the very end may be the first half of one, and is still a line end.
    """
    if tail.endswith(b"\r\n"):
        rest = tail[:-2]
    elif tail.endswith(_LINE_ENDS):
        rest = tail[:-1]
    else:
        return False
    return rest.endswith(_LINE_ENDS)
