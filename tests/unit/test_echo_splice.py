"""The echo spliced into a response's bytes means exactly what serializing the message again would."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_sessions._pipeline._echo import Target, rewritten, splice_point
from mcp_sessions._pipeline._response import ResponseRewriter
from mcp_sessions._wire.protocol import Era
from mcp_sessions.profiles import DRAFT, STRAWMAN, Echo

KEY = "io.modelcontextprotocol/session"
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


async def _never_sent(message: Any) -> None:
    raise AssertionError("nothing is sent")


def target(operation: object = None) -> Target:
    return Target(DRAFT, FakeSession(), (), {}, Era.MODERN, operation)  # type: ignore[arg-type]


def rewrite(body: bytes) -> bytes:
    """``body``, the answer to request 7, as the rewriter sends it: whole, in one body message."""
    sent = ResponseRewriter(_never_sent, {7: target()})._whole_body(
        {"type": "http.response.body", "body": body, "more_body": False}
    )
    assert sent is not None  # the whole body came: it is sent, rewritten or not
    return sent


def expected(body: bytes) -> Any:
    message = json.loads(body)
    result = message["result"]
    if not isinstance(result.get("_meta"), dict):
        result["_meta"] = {}
    result["_meta"][KEY] = ECHO
    return message


def test_an_answer_to_another_request_gains_nothing() -> None:
    body = b'{"jsonrpc":"2.0","id":8,"result":{"a":1}}'
    assert rewrite(body) is body


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=12,
)
results = st.dictionaries(st.sampled_from(["content", "isError", "_meta", "x", "}", '"']), json_values, max_size=4)


@settings(max_examples=150, deadline=None)
@given(result=results, compact=st.booleans(), result_first=st.booleans())
def test_splice_and_reserialize_agree(result: dict[str, Any], compact: bool, result_first: bool) -> None:
    message: dict[str, Any] = {"result": result, "jsonrpc": "2.0", "id": 7}
    if not result_first:
        message = {"jsonrpc": "2.0", "id": 7, "result": result}
    body = (json.dumps(message, separators=(",", ":")) if compact else json.dumps(message, indent=1)).encode()
    assert json.loads(rewrite(body)) == expected(body)


answer_keys = st.sampled_from(["content", "isError", "_meta", "result", "method", "x", "}", '"', "é"])


@settings(max_examples=300, deadline=None)
@given(
    result=st.dictionaries(answer_keys, json_values, max_size=4),
    answers=st.sampled_from([7, 8, "7", True]),
    ascii_only=st.booleans(),
    extra=st.sampled_from([{}, {"method": "x"}, {"error": {"code": 1, "message": "m"}}]),
    repeated=st.sampled_from([b"", b',"result":{}', b',"result":{"a":1}', b',"id":8']),
)
def test_only_the_answer_to_the_request_gains_the_echo(
    result: dict[str, Any], answers: object, ascii_only: bool, extra: dict[str, Any], repeated: bytes
) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": answers, "result": result, **extra}
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=ascii_only).encode()
    body = body[:-1] + repeated + b"}"  # a member repeated, as a careless server might write it
    out = rewrite(body)
    parsed = json.loads(body)  # a repeated name is read as the client reads it: the last one
    if parsed.get("id") != 7 or type(parsed.get("id")) is not int or "method" in parsed:
        assert out is body  # another request's answer, or not an answer: untouched
        return
    assert json.loads(out) == expected(body)


def test_the_sdk_shape_is_spliced_not_reserialized() -> None:
    body = (
        b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"x"}],'
        b'"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":""}}}}'
    )
    assert splice_point(body, json.loads(body), KEY) == (len(body) - 3, b",", b"")
    out = rewrite(body)
    # Everything the server wrote stays byte for byte; the echo is appended to its _meta.
    assert out.startswith(body[:-3]) and out.endswith(b"}}}")
    assert json.loads(out) == expected(body)


@pytest.mark.parametrize(
    ("body", "point"),
    [
        (b'{"jsonrpc":"2.0","id":7,"result":{}}', (34, b'"_meta":{', b"}")),
        (b'{"jsonrpc":"2.0","id":7,"result":{"a":1}}', (39, b',"_meta":{', b"}")),
    ],
)
def test_a_result_without_meta_gets_a_new_one_last(body: bytes, point: tuple[int, bytes, bytes]) -> None:
    assert splice_point(body, json.loads(body), KEY) == point
    assert rewrite(body).startswith(body[: point[0]] + point[1] + b'"' + KEY.encode() + b'":')


def test_shapes_that_are_not_safe_to_splice_are_reserialized() -> None:
    for body in (
        b'{"jsonrpc":"2.0","id":7,"result":{"_meta":{},"x":1}}',  # _meta not last
        b'{"jsonrpc":"2.0","id":7,"result":{"a":1} }',  # trailing whitespace
        b'{"result":{"a":1},"jsonrpc":"2.0","id":7}',  # result not last
        b'{"jsonrpc":"2.0","id":7,"result":{"_meta":{}}}',  # empty _meta: no comma to add
        b'{"jsonrpc":"2.0","id":7,"result":{"_meta":{"' + KEY.encode() + b'":1}}}',  # the echo's key already there
    ):
        assert splice_point(body, json.loads(body), KEY) is None
        assert json.loads(rewrite(body)) == expected(body)


def test_the_operation_observes_a_spliced_result_and_an_error() -> None:
    operation = RecordingOperation()
    body = b'{"jsonrpc":"2.0","id":7,"result":{"isError":true}}'
    assert rewritten(target(operation), body, json.loads(body)) is not None
    error = b'{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad"}}'
    assert rewritten(target(operation), error, json.loads(error)) is None  # an error gains no echo
    assert operation.seen == [{"isError": True}, (-32602, "bad")]


@pytest.mark.parametrize("echo", [DRAFT.echo, STRAWMAN.echo])
@pytest.mark.parametrize("state", [None, "s.t.u"])
def test_the_spliced_member_is_the_echo_built(echo: Echo, state: str | None) -> None:
    member = echo.member_json("aaa.bbb.ccc", state, "2027-01-15T08:00:00Z")
    assert json.loads(b"{" + member + b"}") == {echo.meta_key: echo.build("aaa.bbb.ccc", state, "2027-01-15T08:00:00Z")}
