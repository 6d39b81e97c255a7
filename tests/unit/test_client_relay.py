"""The client's SSE relay: ``first``, the message a retry may replace, is the first one held with the first event."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from mcp_sessions.client._incoming import Inflater
from mcp_sessions.client._verdict import Relay

pytestmark = pytest.mark.anyio

ANSWER = b'{"jsonrpc":"2.0","id":1,"error":{"code":-32043,"message":"Session not found"}}'


class Chunks:
    """A server's event stream, as the client library hands it over."""

    def __init__(self, *chunks: bytes) -> None:
        self._chunks = chunks

    async def _iterate(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iterate()

    async def aclose(self) -> None:
        pass


async def first_of(*chunks: bytes) -> object:
    async def after_chunk() -> None:
        pass

    relay = Relay(Chunks(*chunks), Inflater(None), [1], lambda message: None, after_chunk)
    await relay.hold_first_event()
    return relay.first


@pytest.mark.parametrize(
    ("chunks", "decides"),
    [
        ((b"data: " + ANSWER + b"\n\n",), True),
        ((b"data: " + ANSWER[:20], ANSWER[20:] + b"\n\n"), True),
        ((b"id: 0\ndata: \n\ndata: " + ANSWER + b"\n\n",), True),  # the SDK's priming event first
        ((b"data: not json-rpc\n\ndata: " + ANSWER + b"\n\n",), True),  # its data is no message
        ((b"id: 0\ndata: \n\n", b"data: " + ANSWER + b"\n\n"), False),  # the answer comes after the held event
        ((b": a comment\n\nevent: ping\n\ndata: " + ANSWER + b"\n\n",), False),  # the first event has no data
    ],
)
async def test_first_is_the_first_message_held_with_a_first_event_that_has_data(
    chunks: tuple[bytes, ...], decides: bool
) -> None:
    assert await first_of(*chunks) == (json.loads(ANSWER) if decides else None)
