"""The echo spliced into a response's bytes means exactly what reserializing it would.

Each body goes through both ways a rewriter knows the change: the usual request's
:class:`EchoOnly` (splice, else a :class:`Target` built then), and a :class:`Target` given.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_sessions.pipeline._echo import EchoOnly, Target, leading_splice_point, splice_point
from mcp_sessions.pipeline._response import ResponseRewriter
from mcp_sessions.profiles import DRAFT
from mcp_sessions.wire.protocol import Era

KEY = "io.modelcontextprotocol/session"
ECHO = {"sessionId": "aaa.bbb.ccc", "expiresAt": "2027-01-15T08:00:00Z"}


class FakeSession:
    token = "aaa.bbb.ccc"
    state_token = None
    expires_at_timestamp = 1_800_000_000


async def _never_sent(message: Any) -> None:
    raise AssertionError("rewrite() sends nothing")


def rewrite(body: bytes) -> bytes:
    """``body`` rewritten as the usual request's rewriter does it; the same bytes as a general target's."""
    session: Any = FakeSession()
    only = EchoOnly(7, session, DRAFT.echo, DRAFT, Era.PER_REQUEST, None)  # type: ignore[arg-type]  # a spliceable echo
    usual = ResponseRewriter(_never_sent, {}, only).rewrite(body, json.loads(body)) or body
    target = Target(DRAFT, session, advertised=(), capability={}, era=Era.PER_REQUEST, operation=None)
    general = ResponseRewriter(_never_sent, {7: target}).rewrite(body, json.loads(body)) or body
    assert usual == general
    return usual


def test_an_answer_to_another_request_gains_nothing() -> None:
    body = b'{"jsonrpc":"2.0","id":8,"result":{"a":1}}'
    assert rewrite(body) == body


def expected(body: bytes) -> Any:
    message = json.loads(body)
    result = message["result"]
    if not isinstance(result.get("_meta"), dict):
        result["_meta"] = {}
    result["_meta"][KEY] = ECHO
    return message


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


def test_the_sdk_shape_is_spliced_not_reserialized() -> None:
    body = (
        b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"x"}],'
        b'"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":""}}}}'
    )
    assert splice_point(body, json.loads(body), KEY) == (len(body) - 3, b',"' + KEY.encode() + b'":', b"")
    out = rewrite(body)
    # Everything the server wrote stays byte for byte; the echo is appended to its _meta.
    assert out.startswith(body[:-3]) and out.endswith(b"}}}")
    assert json.loads(out) == expected(body)


def test_shapes_that_are_not_safe_to_splice_are_reserialized() -> None:
    for body in (
        b'{"jsonrpc":"2.0","id":7,"result":{"_meta":{},"x":1}}',  # _meta not last
        b'{"jsonrpc":"2.0","id":7,"result":{"a":1} }',  # trailing whitespace
        b'{"result":{"a":1},"jsonrpc":"2.0","id":7}',  # result not last
        b'{"jsonrpc":"2.0","id":7,"result":{"_meta":{}}}',  # empty _meta: no comma to add
    ):
        assert splice_point(body, json.loads(body), KEY) is None
        assert json.loads(rewrite(body)) == expected(body)


def whole_body(body: bytes) -> bytes:
    """``body`` as the usual request's rewriter sends it: the bytes decide first, else the parsed answer."""
    session: Any = FakeSession()
    only = EchoOnly(7, session, DRAFT.echo, DRAFT, Era.PER_REQUEST, None)  # type: ignore[arg-type]  # a spliceable echo
    sent = ResponseRewriter(_never_sent, {}, only)._whole_body(
        {"type": "http.response.body", "body": body, "more_body": False}
    )
    assert sent is not None  # the whole body came: it is sent, rewritten or not
    return sent


answer_keys = st.sampled_from(["content", "isError", "_meta", "result", "method", "x", "}", '"', "é"])


@settings(max_examples=300, deadline=None)
@given(
    result=st.dictionaries(answer_keys, json_values, max_size=4),
    answers=st.sampled_from([7, 8, "7", True]),
    ascii_only=st.booleans(),
    extra=st.sampled_from([{}, {"method": "x"}, {"error": {"code": 1, "message": "m"}}]),
    repeated=st.sampled_from([b"", b',"result":{}', b',"result":{"a":1}', b',"id":8']),
)
def test_what_the_bytes_decide_is_what_the_parsed_answer_decides(
    result: dict[str, Any], answers: object, ascii_only: bool, extra: dict[str, Any], repeated: bytes
) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": answers, "result": result, **extra}
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=ascii_only).encode()
    body = body[:-1] + repeated + b"}"  # a member repeated, as a careless server might write it
    out = whole_body(body)
    parsed = json.loads(body)  # a repeated name is read as the client reads it: the last one
    if parsed.get("id") != 7 or type(parsed.get("id")) is not int or "method" in parsed:
        assert out == body  # another request's answer, or not an answer: untouched
        return
    if leading_splice_point(body, 7, KEY) is not None:
        assert out.startswith(body[: len(b'{"jsonrpc":"2.0","id":7,"result":{')] + b'"_meta":{')
    assert json.loads(out) == expected(body)


def test_the_usual_answer_is_spliced_by_its_bytes_alone() -> None:
    body = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"x"}],"isError":false}}'
    assert leading_splice_point(body, 7, KEY) == (34, b'"_meta":{"' + KEY.encode() + b'":', b"},")
    assert json.loads(whole_body(body)) == expected(body)
    for undecided in (
        body.replace(b'"x"', b'"\\u0078"'),  # an escape, which could spell a name
        body.replace(b'"isError"', b'"_meta":{},"isError"'),  # a _meta: the parsed answer decides
        body.replace(b"false}}", b'false},"result":{}}'),  # a second result
        body.replace(b'"id":7', b'"id":8'),  # another request's
        body.replace(b'{"content"', b'{ "content"'),  # not compact
    ):
        assert leading_splice_point(undecided, 7, KEY) is None
