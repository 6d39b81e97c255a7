"""A masked host's answer, scrubbed (``_scrub``, ``_edge._exchange``, issue 103): each value the proxy gave the host
comes back to the process as its placeholder, in the head and in a body however its reads split it; what may begin a
value at a read's end is held, and never sent when the answer is cut there. The proxy's exchange is driven here
over loopback against a scripted host: a renewed value of another length, an answer coded anyway, a cut one."""

from __future__ import annotations

import base64
from collections.abc import Sequence

import anyio
import anyio.abc
import h11
import pytest

from _waits import WITHIN
from mcp_sessions._gateway.sealed._edge import _exchange, _next
from mcp_sessions._gateway.sealed._masks import Swap, placeholder
from mcp_sessions._gateway.sealed._scrub import Scrub

VALUE = b"ghp_" + b"Re4lT0kenValue" * 2 + b"0123456789"
SHOWN = placeholder(VALUE.decode()).encode()
BODY = b'{"echo": "Bearer ' + VALUE + b'", "again": "' + VALUE + b'"}'
SCRUBBED = BODY.replace(VALUE, SHOWN)


def _through(scrub: Scrub, reads: Sequence[bytes]) -> tuple[list[bytes], bytes]:
    """What each read sent on, and what the end sent."""
    return [scrub.read(each) for each in reads], scrub.end()


@pytest.mark.parametrize("cut", range(len(BODY) + 1))
def test_a_value_split_at_any_offset_across_two_reads_comes_out_as_the_placeholder(cut: int) -> None:
    sent, rest = _through(Scrub([(VALUE, SHOWN)]), [BODY[:cut], BODY[cut:]])
    assert b"".join(sent) + rest == SCRUBBED
    assert VALUE not in sent[0]


def test_a_body_a_byte_a_read_comes_out_whole_and_holds_less_than_a_value() -> None:
    scrub = Scrub([(VALUE, SHOWN)])
    sent, held = [], []
    for at in range(len(BODY)):
        sent.append(scrub.read(BODY[at : at + 1]))
        held.append(len(scrub.held))
    assert b"".join(sent) + scrub.end() == SCRUBBED
    assert max(held) == len(VALUE) - 1


@pytest.mark.parametrize("cut", range(len(BODY)))
def test_an_answer_cut_anywhere_never_sends_a_byte_of_a_value(cut: int) -> None:
    """What a cut answer sent on (its reads, never its end), however its reads split it, is the scrubbed answer's
    beginning, and stops before a value the cut is inside: not a byte of it goes on until it is whole (and
    replaced). The placeholder is as long as the value: offsets are the same in both."""
    inside = [at for at in (BODY.index(VALUE), BODY.rindex(VALUE)) if at < cut < at + len(VALUE)]
    for split in range(cut + 1):
        sent = b"".join(_through(Scrub([(VALUE, SHOWN)]), [BODY[:split], BODY[split:cut]])[0])
        assert SCRUBBED.startswith(sent), (split, cut)
        assert len(sent) <= min(inside, default=cut), (split, cut)


def test_several_values_the_leftmost_first_and_the_longest_of_those_that_start_there() -> None:
    """Values of one host, several: one inside another (the longer wins where both start), one whose beginning
    overlaps another's end; a value that is its own placeholder is nothing to scrub."""
    pairs = [(b"abcdef", b"ABCDEF"), (b"abc", b"XYZ"), (b"efgh", b"EFGH"), (b"***", b"***")]
    text = b"abcdefgh abc efgh abcd ***"
    for cut in range(len(text) + 1):
        sent, rest = _through(Scrub(pairs), [text[:cut], text[cut:]])
        assert b"".join(sent) + rest == b"ABCDEFgh XYZ EFGH XYZd ***", cut


def test_a_stream_s_events_go_on_at_once_and_a_field_is_scrubbed_whole() -> None:
    """An event of ``text/event-stream`` ends in ``\\n\\n``, no value's beginning: nothing of it is held. A head's
    field (a header, the reason) is whole: nothing held either."""
    scrub = Scrub([(VALUE, SHOWN)])
    event = b"data: " + VALUE[:10] + b"\n\n"
    assert (scrub.read(event), scrub.held) == (event, b"")
    assert scrub.field(b"Bearer " + VALUE) == b"Bearer " + SHOWN
    assert scrub.field(b"Bearer " + VALUE[:10]) == b"Bearer " + VALUE[:10]


def test_a_placeholder_of_another_length_than_its_value_says_so() -> None:
    assert Scrub([(VALUE, SHOWN)]).same_length
    assert not Scrub([(VALUE + b"x", SHOWN)]).same_length


async def _relayed(answer: bytes, asked: bytes, swaps: tuple[Swap, ...]) -> tuple[bytes, bytes, bool]:
    """``asked`` through the proxy's exchange to a host that answers ``answer`` and closes: what the host got, what
    the client got (until the proxy closed), and whether the exchange ended whole."""
    got: list[bytes] = []

    async def host(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head:
                head += await stream.receive()
            got.append(head)
            await stream.send(answer)

    outcome: list[bool] = []
    hosting = await anyio.create_tcp_listener(local_host="127.0.0.1")
    front = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = hosting.extra(anyio.abc.SocketAttribute.local_port)

    async def proxy(client: anyio.abc.SocketStream) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", port) as server:
            down, up = h11.Connection(h11.SERVER), h11.Connection(h11.CLIENT)
            request = await _next(down, client)
            assert isinstance(request, h11.Request)
            outcome.append(await _exchange(down, client, up, server, request, swaps))

    received = b""
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hosting.serve, host)
            tasks.start_soon(front.serve, proxy)
            with anyio.fail_after(WITHIN):
                async with await anyio.connect_tcp("127.0.0.1", front.extra(anyio.abc.SocketAttribute.local_port)) as c:
                    await c.send(asked)
                    while True:  # until the proxy closes, its one exchange done
                        try:
                            received += await c.receive()
                        except (anyio.EndOfStream, anyio.BrokenResourceError):
                            break
            tasks.cancel_scope.cancel()
    finally:
        await hosting.aclose()
        await front.aclose()
    return got[0], received, outcome == [True]


SWAP = Swap("API_TOKEN", SHOWN.decode(), VALUE.decode(), frozenset({("api.test", 443)}))
ASKED = (
    b"GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + SHOWN + b"\r\n"
    b"Accept-Encoding: gzip, br\r\nRange: bytes=0-9\r\n\r\n"
)


def _answer(body: bytes, *headers: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\n" + b"".join(each + b"\r\n" for each in headers) + b"\r\n" + body


@pytest.mark.anyio
async def test_the_host_is_asked_for_a_whole_uncoded_answer_and_its_echo_comes_back_as_the_placeholder() -> None:
    echoed = b"X-Echo: Bearer " + VALUE
    got, received, whole = await _relayed(_answer(BODY, b"Content-Length: %d" % len(BODY), echoed), ASKED, (SWAP,))
    head, _, body = received.partition(b"\r\n\r\n")
    assert b"authorization: Bearer " + VALUE in got
    assert b"accept-encoding: identity\r\n" in got
    assert b"range:" not in got.lower()
    assert (body, whole) == (SCRUBBED, True)
    assert b"x-echo: Bearer " + SHOWN in head
    assert f"content-length: {len(BODY)}".encode() in head.lower()


@pytest.mark.anyio
async def test_a_basic_pair_the_proxy_encoded_comes_back_as_the_process_s() -> None:
    mine = base64.b64encode(b"x-access-token:" + SHOWN)
    theirs = base64.b64encode(b"x-access-token:" + VALUE)
    asked = b"GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Basic " + mine + b"\r\n\r\n"
    body = b'{"authorization": "Basic ' + theirs + b'"}'
    got, received, _ = await _relayed(_answer(body, b"Content-Length: %d" % len(body)), asked, (SWAP,))
    assert theirs in got
    assert received.partition(b"\r\n\r\n")[2] == body.replace(theirs, mine)


@pytest.mark.anyio
async def test_a_renewed_value_of_another_length_is_scrubbed_and_its_answer_reframed() -> None:
    """An ``exchange:`` value renewed keeps its placeholder, whose length is the first value's: the body's length
    changes, so its ``Content-Length`` goes and h11 frames it chunked (the client speaks HTTP/1.1)."""
    longer = VALUE + b"-renewed"
    renewed = Swap("API_TOKEN", SHOWN.decode(), longer.decode(), frozenset({("api.test", 443)}))
    body = BODY.replace(VALUE, longer)
    _, received, whole = await _relayed(_answer(body, b"Content-Length: %d" % len(body)), ASKED, (renewed,))
    head, _, framed = received.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    assert b"content-length" not in head.lower()
    assert b"".join(_chunks(framed)) == SCRUBBED
    assert whole


def _chunks(framed: bytes) -> list[bytes]:
    """A chunked body's pieces (no extensions, no trailers)."""
    pieces = []
    while framed:
        size, _, framed = framed.partition(b"\r\n")
        pieces.append(framed[: int(size, 16)])
        framed = framed[int(size, 16) + 2 :]
    return pieces


@pytest.mark.anyio
async def test_an_answer_coded_anyway_is_refused_and_none_of_it_goes_on() -> None:
    body = b"\x1f\x8b" + VALUE
    answer = _answer(body, b"Content-Length: %d" % len(body), b"Content-Encoding: gzip")
    _, received, whole = await _relayed(answer, ASKED, (SWAP,))
    assert received.startswith(b"HTTP/1.1 502 ")
    assert b"came coded" in received
    assert VALUE not in received
    assert b"\x1f\x8b" not in received
    assert not whole


@pytest.mark.anyio
async def test_an_answer_cut_inside_a_value_ends_the_connection_without_its_beginning() -> None:
    """The host closes 20 bytes into the value (its ``Content-Length`` says more): the client gets the body up to
    the value's first byte and the connection's end, never the 20 bytes (the proxy once forwarded them)."""
    at = BODY.index(VALUE) + 20
    answer = _answer(BODY[:at], b"Content-Length: %d" % len(BODY))
    _, received, whole = await _relayed(answer, ASKED, (SWAP,))
    assert received.partition(b"\r\n\r\n")[2] == BODY[: BODY.index(VALUE)]
    assert not whole


@pytest.mark.anyio
async def test_an_unmasked_host_s_answer_goes_as_it_came() -> None:
    """No value went there (a plain request through ``HTTP_PROXY`` to another host): its headers asked stay, and
    its answer, coded or not, is its own."""
    body = b"\x1f\x8b" + VALUE
    answer = _answer(body, b"Content-Length: %d" % len(body), b"Content-Encoding: gzip")
    got, received, whole = await _relayed(answer, ASKED, ())
    assert b"accept-encoding: gzip, br" in got.lower()
    assert received.partition(b"\r\n\r\n")[2] == body
    assert whole
