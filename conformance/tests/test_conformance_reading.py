"""How the pack reads an answer: every framing, any chunking, stopping at the answer, in linear time."""

from __future__ import annotations

import json
import time

import pytest

from mcp_sessions_conformance._events import EventReader
from mcp_sessions_conformance._peer import Reading

ANSWER = {"jsonrpc": "2.0", "id": 7, "result": {"ok": True}}
NOTE = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}


def read(body: bytes, *, sse: bool, size: int) -> tuple[bool, list[dict[str, object]]]:
    reading = Reading(sse, 7)
    done = any(reading.feed(body[i : i + size]) for i in range(0, len(body), size))
    return done, reading.finish()


# A line's end, then the blank line's: every pair the SSE grammar allows, mixed ones too (issue 50, finding 22).
LINE_ENDS = [("\n", "\n"), ("\r\n", "\r\n"), ("\r", "\r"), ("\n", "\r\n"), ("\n", "\r"), ("\r\n", "\r")]


@pytest.mark.parametrize(("end", "blank"), LINE_ENDS, ids=lambda end: repr(end))
@pytest.mark.parametrize("size", [1, 3, 4096])
def test_an_event_stream_in_any_chunks_and_line_ends(end: str, blank: str, size: int) -> None:
    events = [": ping", f"event: message{end}data: {json.dumps(NOTE)}", f"data: {json.dumps(ANSWER)}"]
    body = "".join(event + end + blank for event in events).encode()

    assert read(body, sse=True, size=size) == (True, [NOTE, ANSWER])


def test_reading_stops_at_the_answer_and_keeps_nothing_that_is_not_a_message() -> None:
    body = (f"data: [1, {json.dumps(ANSWER)}]\n\ndata: not json\n\n" + ": ping\n\n" * 1000).encode()
    reading = Reading(True, 7)

    assert reading.feed(body[:40]) is False
    assert reading.feed(body[40:]) is True
    assert reading.finish() == [ANSWER]


def test_json_is_read_whole() -> None:
    assert read(json.dumps([NOTE, ANSWER, 3]).encode(), sse=False, size=5) == (False, [NOTE, ANSWER])
    assert read(b"", sse=False, size=5) == (False, [])
    assert read(b"[" * 100_000, sse=False, size=100_000) == (False, [])


def test_linear_in_what_arrives() -> None:
    """One event of a megabyte in 16-byte chunks: each byte is searched a bounded number of times."""
    body = ("data: " + json.dumps({**ANSWER, "result": {"text": "x" * (1 << 20)}}) + "\n\n").encode()
    started = time.perf_counter()

    done, messages = read(body, sse=True, size=16)

    assert done and messages[0]["id"] == 7
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize(
    ("chunks", "events"),
    [
        # A CRLF split across chunks ends one line, not two: no blank line, no event yet.
        ([b"data: 1\r", b"\ndata: 2\r", b"\n\r", b"\n"], ["1\n2"]),
        # A CR then a CR is a line's end and a blank line, whichever chunks they come in.
        ([b"data: 1\r", b"\r"], ["1"]),
        # An empty chunk between the halves of a CRLF changes nothing.
        ([b"data: 1\r", b"", b"\n", b"\r\n"], ["1"]),
        # A data line with no colon is an empty line of data; one leading space is dropped, no more.
        ([b"data\ndata:  x\n\n"], ["\n x"]),
        # Comments, other fields and an event with no data give nothing; undecodable data is left out.
        ([b": hi\nevent: e\nid: 1\n\n", b"data: \xff\n\n", b"data: ok\n\n"], ["ok"]),
    ],
)
def test_the_event_reader_follows_the_whatwg_grammar(chunks: list[bytes], events: list[str]) -> None:
    reader = EventReader()

    assert [data for chunk in chunks for data in reader.feed(chunk)] == events
