"""SSERewriter: byte-exact pass-through, one rewritten event, and no held-back complete event."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_sessions._wire.sse import SSERewriter

# Every event of the representative stream, as (bytes in, bytes out) for the
# transform below, which rewrites the JSON-RPC response with id 7 only.
RESPONSE_IN = (
    b'event: message\r\nid: 7\r\n: a comment inside\r\ndata: {"jsonrpc":"2.0","id":7,\r\ndata: "result":{}}\r\n\r\n'
)
RESPONSE_OUT = (
    b"event: message\r\nid: 7\r\n: a comment inside\r\n"
    b'data: {"jsonrpc":"2.0","id":7,"result":{"_meta":{"echo":true}}}\r\n\r\n'
)
EVENTS: list[tuple[bytes, bytes]] = [
    (b": ping\r\n\r\n", b": ping\r\n\r\n"),
    (b'event: message\nid: 1\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n',) * 2,
    (b"data: line one\rdata: line two\r\r",) * 2,
    (b"retry: 1000\n\n",) * 2,
    (b'data:{"jsonrpc":"2.0","id":8,"result":{}}\n\n',) * 2,
    (RESPONSE_IN, RESPONSE_OUT),
    (b": after\n\n",) * 2,
]  # fmt: skip
STREAM = b"".join(raw for raw, _ in EVENTS)
EXPECTED = b"".join(out for _, out in EVENTS)


def echo_id_7(data: str) -> str | None:
    try:
        message = json.loads(data)
    except ValueError:
        return None
    if type(message) is not dict or message.get("id") != 7 or "result" not in message:
        return None
    message["result"]["_meta"] = {"echo": True}
    return json.dumps(message, separators=(",", ":"))


def identity(data: str) -> None:
    return None


def run(chunks: list[bytes], transform: Callable[[str], str | None] = echo_id_7) -> bytes:
    rewriter = SSERewriter(transform)
    return b"".join(rewriter.feed(chunk) for chunk in chunks) + rewriter.flush()


def complete_prefix(data: bytes) -> int:
    """Reference: the length of the longest prefix of ``data`` that ends where an event ends.

    WHATWG lines end in CRLF, LF or CR; a CR that is the last byte so far ends its line.
    """
    pos = line_start = end = 0
    while pos < len(data):
        if data[pos] in b"\r\n":
            eol_end = pos + 2 if data[pos : pos + 2] == b"\r\n" else pos + 1
            if pos == line_start:
                end = eol_end
            pos = line_start = eol_end
        else:
            pos += 1
    return end


def test_only_the_rewritten_event_changes() -> None:
    out = run([STREAM])
    head, tail = STREAM.split(RESPONSE_IN)
    assert out.startswith(head)
    assert out.endswith(tail)
    assert out[len(head) : len(out) - len(tail)] == RESPONSE_OUT


@pytest.mark.parametrize("transform", [echo_id_7, identity], ids=["echo", "identity"])
def test_every_single_split_point(transform: Callable[[str], str | None]) -> None:
    expected = EXPECTED if transform is echo_id_7 else STREAM
    for i in range(len(STREAM) + 1):
        assert run([STREAM[:i], STREAM[i:]], transform) == expected, f"split at {i}"


def test_every_pair_of_split_points_of_a_short_stream() -> None:
    short = b': p\r\n\r\ndata: x\r\rid: 7\r\ndata: {"id":7,\r\ndata: "result":{}}\r\n\r\ndata: y\n\n'
    expected = b': p\r\n\r\ndata: x\r\rid: 7\r\ndata: {"id":7,"result":{"_meta":{"echo":true}}}\r\n\r\ndata: y\n\n'
    assert run([short]) == expected
    for i in range(len(short) + 1):
        for j in range(i, len(short) + 1):
            assert run([short[:i], short[i:j], short[j:]]) == expected, f"split at {i}, {j}"


def test_byte_by_byte() -> None:
    assert run([bytes([b]) for b in STREAM]) == EXPECTED


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'data: {"id":7,"result":{}}\n\n', b'data: {"id":7,"result":{"_meta":{"echo":true}}}\n\n'),
        (b'data:{"id":7,"result":{}}\r\n\r\n', b'data: {"id":7,"result":{"_meta":{"echo":true}}}\r\n\r\n'),
        (b'data: {"id":7,"result":{}}\r\r', b'data: {"id":7,"result":{"_meta":{"echo":true}}}\r\r'),
        (b'event: message\nid: e1\ndata: {"id":7,\ndata: "result":{}}\n\n',
         b'event: message\nid: e1\ndata: {"id":7,"result":{"_meta":{"echo":true}}}\n\n'),
        (b'data: {"id":7,\nid: e1\ndata: "result":{}}\n\n',
         b'data: {"id":7,"result":{"_meta":{"echo":true}}}\nid: e1\n\n'),
        (b'data:  {"id":7,"result":{}}\n\n', b'data: {"id":7,"result":{"_meta":{"echo":true}}}\n\n'),
        (b'datax: {"id":7,"result":{}}\n\n', b'datax: {"id":7,"result":{}}\n\n'),
        (b'data: {"id":7,"result":{}}\n', b'data: {"id":7,"result":{}}\n'),
        (b'data: {"id":7,"result":{}}', b'data: {"id":7,"result":{}}'),
        (b'data: {"id":7,"result":{"x":"\xff"}}\n\n', b'data: {"id":7,"result":{"x":"\xff"}}\n\n'),
        (b"data\n\n", b"data\n\n"),
        (b"\n\n\n", b"\n\n\n"),
    ],
    ids=["lf", "crlf-no-space", "cr", "fields-kept", "data-lines-joined-at-first", "one-space-stripped",
         "not-the-data-field", "unfinished-event-flushed", "no-line-end", "not-utf8", "empty-data", "blank-lines"],
)  # fmt: skip
def test_single_event(raw: bytes, expected: bytes) -> None:
    assert run([raw]) == expected
    assert run([bytes([b]) for b in raw]) == expected


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"data: a\r", b"\n\r\n"], [b"", b"data: a\r\n\r\n"]),
        ([b"data: a\r\n\r", b"\ndata: b\n\n"], [b"data: a\r\n\r", b"\ndata: b\n\n"]),
        ([b"data: a\r\n\r", b"", b"\n"], [b"data: a\r\n\r", b"", b"\n"]),
        ([b"data: a\r", b"", b"\n", b"\r\n"], [b"", b"", b"", b"data: a\r\n\r\n"]),
        ([b"data: a\r", b"\r"], [b"", b"data: a\r\r"]),
        ([b"data: a\n", b"\n"], [b"", b"data: a\n\n"]),
    ],
    ids=["cr-then-lf-inside", "cr-lf-across-blank-line", "empty-chunk-between-cr-and-lf", "empty-chunk-inside",
         "cr-cr", "lf-lf"],
)  # fmt: skip
def test_cr_at_the_end_of_a_chunk(chunks: list[bytes], expected: list[bytes]) -> None:
    rewriter = SSERewriter(identity)
    assert [rewriter.feed(chunk) for chunk in chunks] == expected
    assert rewriter.flush() == b""


def test_cr_lf_across_chunks_in_a_rewritten_event() -> None:
    rewriter = SSERewriter(echo_id_7)
    assert rewriter.feed(b'data: {"id":7,"result":{}}\r') == b""
    assert rewriter.feed(b"\n\r") == b'data: {"id":7,"result":{"_meta":{"echo":true}}}\r\n\r'
    assert rewriter.feed(b"\ndata: z\n\n") == b"\ndata: z\n\n"


def test_a_complete_event_leaves_with_the_feed_that_completes_it() -> None:
    rewriter = SSERewriter(identity)
    out = b""
    for k in range(len(STREAM)):
        out += rewriter.feed(STREAM[k : k + 1])
        assert out == STREAM[: complete_prefix(STREAM[: k + 1])], f"after byte {k}"


def test_the_rewritten_event_leaves_with_the_feed_that_completes_it() -> None:
    rewriter = SSERewriter(echo_id_7)
    before = STREAM.index(RESPONSE_IN)
    assert rewriter.feed(STREAM[:before]) == STREAM[:before]
    for k in range(len(RESPONSE_IN) - 2):  # all but the final "\r\n"
        assert rewriter.feed(RESPONSE_IN[k : k + 1]) == b""
    assert rewriter.feed(b"\r") == RESPONSE_OUT[:-1]
    assert rewriter.feed(b"\n") == b"\n"


def test_every_matching_event_is_rewritten() -> None:
    twice = b'data: {"id":7,"result":{}}\n\ndata: {"id":7,"result":{}}\n\n'
    assert run([twice]) == b'data: {"id":7,"result":{"_meta":{"echo":true}}}\n\n' * 2


def test_transform_sees_joined_data_and_only_events_with_data() -> None:
    seen: list[str] = []

    def transform(data: str) -> None:
        seen.append(data)

    run([b": c\n\nevent: x\n\ndata: a\ndata:b\ndata:  c\ndata\n\nid: 1\ndata: \xc3\xa9\n\n"], transform)
    assert seen == ["a\nb\n c\n", "é"]


def test_flush_returns_the_unfinished_tail_and_resets() -> None:
    rewriter = SSERewriter(identity)
    assert rewriter.feed(b"data: done\n\ndata: unfin") == b"data: done\n\n"
    assert rewriter.flush() == b"data: unfin"
    assert rewriter.flush() == b""
    assert rewriter.feed(b"data: next\n\n") == b"data: next\n\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=8))
def test_identity_transform_is_byte_identical_for_any_bytes_and_splits(data: bytes, cuts: list[int]) -> None:
    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert run(chunks, identity) == data


_SSE_ALPHABET = st.sampled_from([b"\r", b"\n", b"\r\n", b"data:", b"data: ", b"a", b":", b" ", b"id: 7", b"\xff"])


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(_SSE_ALPHABET, max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_splitting_never_changes_the_output(parts: list[bytes], cuts: list[int]) -> None:
    """Any split gives what one chunk gives, with a transform that rewrites events containing 'a'."""
    data = b"".join(parts)

    def transform(text: str) -> str | None:
        return f"R{len(text)}" if "a" in text else None

    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert run(chunks, transform) == run([data], transform)


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(_SSE_ALPHABET, max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_whole_events_the_transform_skips_pass_as_they_would_be_read(parts: list[bytes], cuts: list[int]) -> None:
    """``skips`` lets whole events with no '7' pass unread line by line: the output is what reading them gives, at
    any split."""
    data = b"".join(parts)

    def transform(text: str) -> str | None:
        return f"R{len(text)}" if "7" in text else None

    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    rewriter = SSERewriter(transform, skips=lambda raw: b"7" not in raw)
    assert b"".join(rewriter.feed(chunk) for chunk in chunks) + rewriter.flush() == run([data], transform)


def test_a_chunk_of_whole_events_the_transform_skips_is_the_chunk_itself() -> None:
    rewriter = SSERewriter(echo_id_7, skips=lambda raw: b'"id"' not in raw)
    notification = EVENTS[1][0]
    assert rewriter.feed(notification) is notification
    assert rewriter.feed(RESPONSE_IN) == RESPONSE_OUT  # an answer in it: read and rewritten
    assert rewriter.feed(b"data: a\r\r") == b"data: a\r\r"  # a CR last: read, its LF may follow
    assert rewriter.feed(b"\n" + notification) == b"\n" + notification


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"data: 7\n", b": c\n\n"], b"data: R1\n: c\n\n"),  # the event it ends is held: read
        ([b"data: 7\r", b"\n\n"], b"data: R1\r\n\n"),  # its LF belongs to a CR of the last chunk
        ([b"data: 7", b"\n\n"], b"data: R1\n\n"),  # an unfinished line
        ([b"data: x\n\n", b"data: 7\n\n"], b"data: x\n\ndata: R1\n\n"),
    ],
)
def test_a_chunk_the_transform_skips_that_ends_a_held_event_is_read(chunks: list[bytes], expected: bytes) -> None:
    rewriter = SSERewriter(lambda text: f"R{len(text)}" if "7" in text else None, skips=lambda raw: b"7" not in raw)
    assert b"".join(rewriter.feed(chunk) for chunk in chunks) + rewriter.flush() == expected
