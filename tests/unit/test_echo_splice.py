"""The echo spliced into a response's bytes means exactly what reserializing it would.

Each body goes through both ways a rewriter knows the change: the usual request's
:class:`EchoOnly` (splice, else a :class:`Target` built then), and a :class:`Target` given.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_sessions.pipeline._echo import EchoOnly, Target, splice_point
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
