"""The response rewriter: the echo added to the parsed answer and the answer serialized again, in a JSON body
and in each SSE event that carries it, and what it holds bounded by ``max_response_size``.

Past the bound, the client gets a JSON-RPC error for the request in place of the answer (a JSON body: HTTP 502)
or of the event (an event stream ends with it), and the app's next ``send`` raises ``ResponseTooLarge`` so that
it stops. The gateway's behaviour over the wire is in tests/e2e/test_gateway_hostile_upstream.py.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.types import Message

from _mcp import SESSION_KEY, sse_events
from mcp_sessions._pipeline._response import ResponseRewriter, ResponseTooLarge, Target
from mcp_sessions.profiles import DRAFT, Era

LIMIT = 1000
TOO_LARGE = {"code": -32603, "message": f"Response too large (limit {LIMIT} bytes)"}
PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
ECHO = {"sessionId": "aaa.bbb.ccc", "expiresAt": "2027-01-15T08:00:00Z"}


class FakeSession:
    token = "aaa.bbb.ccc"
    state_token = None
    expires_at_timestamp = 1_800_000_000


class RecordingOperation:
    def __init__(self) -> None:
        self.seen: list[object] = []

    def observe_result(self, result: dict[str, object]) -> None:
        self.seen.append(result)

    def fail(self, code: int, message: str) -> None:
        self.seen.append((code, message))


def answered(
    chunks: list[bytes], content_type: bytes = b"application/json", *, operation: object = None, limit: int = LIMIT
) -> tuple[list[Message], bool]:
    """What the client got for the app's answer to request 7 in ``chunks``, and whether the app was stopped."""
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    target = Target(DRAFT, FakeSession(), (), {}, Era.MODERN, operation)  # type: ignore[arg-type]
    rewriter = ResponseRewriter(send, {7: target}, limit=limit, request_id=7)

    async def app() -> bool:
        start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]}
        try:
            await rewriter.send(start)
            for index, chunk in enumerate(chunks):
                await rewriter.send({"type": "http.response.body", "body": chunk, "more_body": index < len(chunks) - 1})
        except ResponseTooLarge:
            return True
        return False

    return sent, anyio.run(app)


def body_of(sent: list[Message]) -> bytes:
    return b"".join(message.get("body", b"") for message in sent if message["type"] == "http.response.body")


def rewrite(body: bytes) -> bytes:
    """``body``, a JSON answer, as the client gets it, with its ``Content-Length`` checked."""
    sent, _ = answered([body], limit=len(body) + 1)
    assert dict(sent[0]["headers"])[b"content-length"] == str(len(body_of(sent))).encode()
    return body_of(sent)


def expected(body: bytes) -> Any:
    message = json.loads(body)
    result = message["result"]
    if not isinstance(result.get("_meta"), dict):
        result["_meta"] = {}
    result["_meta"][SESSION_KEY] = ECHO
    return message


# -- the echo ---------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=12,
)
answer_keys = st.sampled_from(["content", "isError", "_meta", "result", "method", "x", "}", '"', "é"])


@PROPERTY
@given(
    result=st.dictionaries(answer_keys, json_values, max_size=4),
    answers=st.sampled_from([7, 8, "7", True]),
    indent=st.sampled_from([None, 1]),
    ascii_only=st.booleans(),
    extra=st.sampled_from([{}, {"method": "x"}, {"error": {"code": 1, "message": "m"}}]),
    repeated=st.sampled_from([b"", b',"result":{}', b',"result":{"a":1}', b',"id":8']),
)
def test_only_the_answer_to_the_request_gains_the_echo(
    result: dict[str, Any],
    answers: object,
    indent: int | None,
    ascii_only: bool,
    extra: dict[str, Any],
    repeated: bytes,
) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": answers, "result": result, **extra}
    body = json.dumps(message, indent=indent, ensure_ascii=ascii_only).encode()
    body = body[:-1] + repeated + b"}"  # a member repeated, as a careless server might write it
    out = rewrite(body)
    parsed = json.loads(body)  # a repeated name is read as the client reads it: the last one
    if parsed.get("id") != 7 or type(parsed.get("id")) is not int or "method" in parsed:
        assert out == body  # another request's answer, or not an answer: untouched
        return
    assert json.loads(out) == expected(body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":7,"result":{}}',
        b'{"jsonrpc":"2.0","id":7,"result":{"a":1}}',
        b'{"jsonrpc":"2.0","id":7,"result":{"_meta":{},"x":1}}',
        b'{"result":{"a":1},"jsonrpc":"2.0","id":7} ',
        b'{"jsonrpc":"2.0","id":7,"result":{"_meta":"not an object"}}',
        b'{"jsonrpc":"2.0","id":7,"result":{"_meta":{"' + SESSION_KEY.encode() + b'":1,"other":2}}}',
    ],
    ids=["empty", "no-meta", "meta-first", "result-first-and-whitespace", "meta-not-an-object", "echo-key-there"],
)
def test_the_echo_goes_into_result_meta_and_the_rest_stays(body: bytes) -> None:
    assert json.loads(rewrite(body)) == expected(body)


def test_a_batch_answer_gains_the_echo_in_its_element_only() -> None:
    other, ours = b'{"jsonrpc":"2.0","id":8,"result":{}}', b'{"jsonrpc":"2.0","id":7,"result":{}}'
    assert json.loads(rewrite(b"[" + other + b"," + ours + b"]")) == [json.loads(other), expected(ours)]


@pytest.mark.parametrize("body", [b"", b"not json", b"[]", b'{"jsonrpc":"2.0","id":7,"result":[1]}'])
def test_what_is_not_an_answer_to_rewrite_passes_as_it_came(body: bytes) -> None:
    assert rewrite(body) == body


def test_the_operation_observes_a_result_and_an_error() -> None:
    operation = RecordingOperation()
    answered([b'{"jsonrpc":"2.0","id":7,"result":{"isError":true}}'], operation=operation)
    sent, _ = answered([b'{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad"}}'], operation=operation)
    assert body_of(sent) == b'{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad"}}'  # no echo
    assert operation.seen[0] == {"isError": True, "_meta": {SESSION_KEY: ECHO}}  # observed, then annotated (one dict)
    assert operation.seen[1] == (-32602, "bad")


# -- SSE: one event, whatever its data lines and chunks ---------------------------------------------

RESPONSE = {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "a b"}], "isError": False}}


def with_echo(message: dict[str, Any]) -> dict[str, Any]:
    return {**message, "result": {**message["result"], "_meta": {SESSION_KEY: ECHO}}}


def test_two_data_lines_come_out_as_one_message_with_its_echo_and_other_events_as_they_came() -> None:
    progress = b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n'
    event = b'event: message\ndata: {"jsonrpc":"2.0","id":7,\ndata: "result":{"content":[]}}\n\n'
    sent, _ = answered([progress + event], b"text/event-stream")
    assert body_of(sent).startswith(progress)
    [_, data] = sse_events(body_of(sent).decode())
    assert json.loads(data) == with_echo({"jsonrpc": "2.0", "id": 7, "result": {"content": []}})


@pytest.mark.parametrize(
    "data",
    [
        b'{"jsonrpc":"2.0","id":7,"result":{}}',
        b'{"jsonrpc":"2.0","\\u0069d":7,"result":{}}',
        b'{"jsonrpc":"2.0","i\\u0064":7,"result":{}}',
        b'{"jsonrpc":"2.0","\\u0069\\u0064":7,"result":{}}',
        b'{"jsonrpc":"2.0","id":7,"result":{"text":"a\\nb"}}',
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"\\"id\\":7"}}',
        b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7}}',
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"a\\\\id\\n"}}',
    ],
    ids=[
        "answer",
        "answer-with-its-id-escaped",
        "answer-with-its-d-escaped",
        "answer-with-both-letters-escaped",
        "answer-with-escapes",
        "an-id-in-a-string",
        "notification",
        "notification-with-escapes",
    ],
)
def test_an_event_is_rewritten_as_the_same_json_body_is(data: bytes) -> None:
    """Only the events whose data holds an id member are read as JSON; an escaped name is still a name."""
    sent, _ = answered([b"data: " + data + b"\n\n"], b"text/event-stream")
    [event] = sse_events(body_of(sent).decode())
    assert event.encode() == rewrite(data)
    assert (SESSION_KEY in event) == ("method" not in json.loads(data))  # the answers gained the echo


@PROPERTY
@given(
    cuts=st.lists(st.integers(min_value=1, max_value=200), max_size=4),
    chunk_cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=4),
    eol=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    spaced=st.booleans(),
)
def test_any_line_split_in_is_a_valid_event_out(
    cuts: list[int], chunk_cuts: list[int], eol: bytes, spaced: bool
) -> None:
    """The answer cut into ``data:`` lines anywhere and sent in chunks cut anywhere comes out as one event: the
    answer with its echo where the cuts fell between tokens, as sent otherwise (a line break inside a string
    makes the data no JSON)."""
    text = json.dumps(RESPONSE, separators=(",", ":")).encode()
    points = sorted({min(cut, len(text) - 1) for cut in cuts})
    lines = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    prefix = b"data: " if spaced else b"data:"
    event = b"event: message" + eol + b"".join(prefix + line + eol for line in lines) + eol
    pieces = sorted({min(cut, len(event)) for cut in chunk_cuts})
    chunks = [event[a:b] for a, b in zip([0, *pieces], [*pieces, len(event)], strict=True)]
    [data] = sse_events(body_of(answered(chunks, b"text/event-stream", limit=len(event))[0]).decode())
    # What the client reads of it: SSE drops one space after "data:", so a line cut just before a space loses it.
    sent = b"\n".join(line if spaced else line.removeprefix(b" ") for line in lines).decode()
    try:
        json.loads(sent)
    except ValueError:
        assert data == sent
    else:
        assert json.loads(data) == with_echo(RESPONSE)


# -- the bound --------------------------------------------------------------------------------------


@pytest.mark.parametrize("pieces", [1, 7])
def test_a_json_answer_past_the_bound_is_a_502_with_the_requests_error(pieces: int) -> None:
    body = b'{"jsonrpc":"2.0","id":7,"result":{"text":"' + b"a" * LIMIT + b'"}}'
    size = -(-len(body) // pieces)
    sent, stopped = answered([body[i : i + size] for i in range(0, len(body), size)] + [b""])
    assert stopped
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 502
    assert json.loads(sent[1]["body"]) == {"jsonrpc": "2.0", "id": 7, "error": TOO_LARGE}


def test_a_json_answer_within_the_bound_in_pieces_is_rewritten() -> None:
    sent, stopped = answered([b'{"jsonrpc":"2.0","id":7,', b'"result":{}}'])
    assert not stopped
    assert sent[0]["status"] == 200
    assert json.loads(body_of(sent))["result"] == {"_meta": {SESSION_KEY: ECHO}}


def test_an_event_that_never_ends_is_refused_and_the_events_before_it_go_on() -> None:
    notification = b'event: message\ndata: {"jsonrpc":"2.0","method":"n"}\n\n'
    sent, stopped = answered([notification, b"data: " + b"x" * 600, b"x" * 600, b""], b"text/event-stream")
    assert stopped
    assert sent[-1]["more_body"] is False
    error = json.dumps({"jsonrpc": "2.0", "id": 7, "error": TOO_LARGE}, separators=(",", ":")).encode()
    assert body_of(sent) == notification + b"event: message\ndata: " + error + b"\n\n"
