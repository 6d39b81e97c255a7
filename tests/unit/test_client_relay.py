"""The client's SSE relay: ``first``, the message a retry may replace, is the first one held with the first event."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator

import pytest

from mcp_sessions.client._messages import MAX_DECODED, AnswerTooLarge, Inflater
from mcp_sessions.client._transport import Relay

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


def test_a_chunk_that_decodes_past_the_bound_is_refused() -> None:
    bomb = gzip.compress(bytes(MAX_DECODED + 1))
    with pytest.raises(AnswerTooLarge, match="decodes to over"):
        Inflater("gzip")(bomb)
    assert Inflater("gzip")(gzip.compress(b"{}")) == b"{}"


async def test_a_whole_body_past_the_bound_goes_on_unread() -> None:
    async def after_chunk() -> None:
        pass

    relay = Relay(Chunks(b"a" * 3, b"b" * 3, b"c"), Inflater(None), [1], lambda message: None, after_chunk, sse=False)
    assert await relay.read_whole(4) is None
    assert b"".join([chunk async for chunk in relay]) == b"aaabbbc"
    whole = Relay(Chunks(b"a" * 3, b"b"), Inflater(None), [1], lambda message: None, after_chunk, sse=False)
    assert await whole.read_whole(4) == b"aaab"
