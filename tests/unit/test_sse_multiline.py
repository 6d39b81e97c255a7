"""An SSE event whose data spans several ``data:`` lines is read as one message and still one after the echo.

Property: the serialized response cut into ``data:`` lines anywhere (any valid line split in), sent in
chunks cut anywhere, comes out of the response rewriter as events whose data, joined as the SSE grammar
joins it, is each a whole JSON text: the response with its echo where the cuts fell between tokens,
the response as sent otherwise (a line break inside a string makes the data no JSON, left untouched).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from hypothesis import given
from hypothesis import strategies as st
from starlette.types import Message

from asgi.test_fuzz import FUZZ
from mcp_sessions._pipeline._echo import Target
from mcp_sessions._pipeline._response import ResponseRewriter
from mcp_sessions._wire.protocol import Era
from mcp_sessions.profiles import DRAFT

from .test_echo_splice import ECHO, KEY, FakeSession

RESPONSE = {"jsonrpc": "2.0", "id": 5, "result": {"content": [{"type": "text", "text": "a b"}], "isError": False}}


def events(stream: bytes) -> list[str]:
    """Each event's data, as a client joins its ``data:`` lines (WHATWG: one space after the colon dropped)."""
    found = []
    for block in stream.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:")]
        if lines:
            found.append(b"\n".join(lines).decode())
    return found


def rewritten(chunks: list[bytes]) -> bytes:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    target = Target(DRAFT, FakeSession(), advertised=(), capability={}, era=Era.MODERN, operation=None)  # type: ignore[arg-type]
    rewriter = ResponseRewriter(send, {5: target})  # type: ignore[arg-type]

    async def stream() -> None:
        await rewriter.send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
        )
        for index, chunk in enumerate(chunks):
            await rewriter.send({"type": "http.response.body", "body": chunk, "more_body": index < len(chunks) - 1})

    anyio.run(stream)
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def with_echo(message: dict[str, Any]) -> dict[str, Any]:
    result = dict(message["result"])
    result["_meta"] = {KEY: ECHO}
    return {**message, "result": result}


def test_two_data_lines_come_out_as_one_message_with_its_echo() -> None:
    event = b'event: message\ndata: {"jsonrpc":"2.0","id":5,\ndata: "result":{"content":[]}}\n\n'
    [data] = events(rewritten([event]))
    assert json.loads(data) == with_echo({"jsonrpc": "2.0", "id": 5, "result": {"content": []}})


@FUZZ
@given(
    cuts=st.lists(st.integers(min_value=1, max_value=200), max_size=4),
    chunk_cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=4),
    eol=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    spaced=st.booleans(),
)
def test_any_line_split_in_is_a_valid_event_out(
    cuts: list[int], chunk_cuts: list[int], eol: bytes, spaced: bool
) -> None:
    text = json.dumps(RESPONSE, separators=(",", ":")).encode()
    points = sorted({min(cut, len(text) - 1) for cut in cuts})
    lines = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    prefix = b"data: " if spaced else b"data:"
    event = b"event: message" + eol + b"".join(prefix + line + eol for line in lines) + eol
    pieces = sorted({min(cut, len(event)) for cut in chunk_cuts})
    chunks = [event[a:b] for a, b in zip([0, *pieces], [*pieces, len(event)], strict=True)]
    [data] = events(rewritten(chunks).replace(b"\r\n", b"\n").replace(b"\r", b"\n"))
    sent = b"\n".join(lines).decode()
    try:
        json.loads(sent)
    except ValueError:
        assert data == sent  # no JSON once joined (a break inside a string): passed on as it came
    else:
        assert json.loads(data) == with_echo(RESPONSE)  # one message, with its echo
