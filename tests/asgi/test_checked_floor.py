"""The checked floor (``benchmarks/_harness.py``) makes the session checks the middleware makes.

``docs/performance.md`` reads the session path against ``CheckedSessionFloor``, the
hand-written minimum plus the checks a session-bearing call must make. A floor that
let through what the middleware refuses would be cheaper for doing less; each body
here reaches the app through both or through neither. (The floor also makes the
``mcp`` SDK server's own Host and Origin checks, which the middleware leaves to the
server it wraps: the trivial app here has none, so they are not compared.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.types import Receive, Scope, Send

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _harness import (  # the benchmarks run as scripts: their directory is not a package
    NAME_HEADERS,
    SECRET,
    CheckedSessionFloor,
    Lifespans,
    SessionFloor,
    _echo_member,
    _spliced,
    _spliced_event,
    call,
    create_session,
    http_headers,
    request,
    session_body,
    session_headers,
    token_claims,
    trivial_app,
)

from _mcp import AnswersProbes
from mcp_sessions import MCPSessionMiddleware

pytestmark = pytest.mark.anyio

MEMBER = "io.modelcontextprotocol/session"


class Reached:
    """The trivial app, counting the requests that reach it."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.count += 1
        await trivial_app(scope, receive, send)


def text(token: str, *, meta: str | None = None, params: str | None = None, top: str = "") -> bytes:
    """A ``tools/call`` spelled by hand, so that a member name can be repeated."""
    session = f'{{"sessionId":{json.dumps(token)}}}'
    meta = meta or f'{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","{MEMBER}":{session}}}'
    params = params or f'{{"name":"echo","arguments":{{"text":"hi"}},"_meta":{meta}}}'
    return f'{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{params}{top}}}'.encode()


def cases(token: str, other: str) -> dict[str, tuple[bytes, list[tuple[bytes, bytes]]]]:
    headers = session_headers(token)
    plain_meta = '{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}'
    twice = f'{{"sessionId":{json.dumps(other)},"sessionId":{json.dumps(token)}}}'
    return {
        "a session": (json.dumps(session_body(token)).encode(), headers),
        "no session": (text(token, meta=plain_meta), NAME_HEADERS),
        "sessionId twice": (text(token, meta=f'{{"{MEMBER}":{twice}}}'), headers),
        "the session member twice": (
            text(token, meta=f'{{"{MEMBER}":{{"sessionId":"x"}},"{MEMBER}":{{"sessionId":{json.dumps(token)}}}}}'),
            headers,
        ),
        "_meta twice": (
            text(token, params=f'{{"_meta":{{}},"_meta":{{"{MEMBER}":{{"sessionId":{json.dumps(token)}}}}}}}'),
            headers,
        ),
        "params twice": (text(token, top=',"params":{"name":"echo"}'), headers),
        "an unknown session": (json.dumps(session_body(other)).encode(), session_headers(other)),
        "a header naming another session": (json.dumps(session_body(token)).encode(), session_headers(other)),
    }


def scope_for(raw: bytes, headers: list[tuple[bytes, bytes]]) -> Scope:
    scope, _ = request({})
    scope["headers"] = http_headers(raw, headers)
    return scope


@pytest.fixture
async def apps() -> tuple[Any, Reached, Any, Reached, str]:
    through_middleware, through_floor = Reached(), Reached()
    middleware = MCPSessionMiddleware(AnswersProbes(through_middleware), secret=SECRET)  # probes are not counted
    token = await create_session(middleware)
    floor = CheckedSessionFloor(through_floor, {token: token_claims(token)})
    return middleware, through_middleware, floor, through_floor, token


async def test_the_checked_floor_forwards_exactly_what_the_middleware_forwards(
    apps: tuple[Any, Reached, Any, Reached, str],
) -> None:
    middleware, through_middleware, floor, through_floor, token = apps
    other = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")  # same shape, no live session
    reached = {}
    for name, (raw, headers) in cases(token, other).items():
        before = through_middleware.count, through_floor.count
        await call(middleware, scope_for(raw, headers), raw)
        await call(floor, scope_for(raw, headers), raw)
        reached[name] = (through_middleware.count - before[0], through_floor.count - before[1])
    assert reached == {
        "a session": (1, 1),
        "no session": (1, 1),
        "sessionId twice": (0, 0),
        "the session member twice": (0, 0),
        "_meta twice": (0, 0),
        "params twice": (0, 0),
        "an unknown session": (0, 0),
        "a header naming another session": (0, 0),
    }


@pytest.mark.parametrize("floor", ["session floor", "checked floor"])
@pytest.mark.parametrize("server", ["MCPServer", "trivial app"])
async def test_the_floors_echo_is_where_the_middleware_puts_it(floor: str, server: str) -> None:
    """On the ``mcp`` SDK's results, which end with a ``_meta`` of their own, as on the trivial app's.

    A floor that put a second ``_meta`` first in the result would pay less for an echo a client never
    reads (its parser keeps the last of a repeated name): the wire merges the echo into the server's.
    """
    lifespans = Lifespans()
    try:
        if server == "MCPServer":
            through_middleware = await lifespans.own_mcp_app(lambda app: MCPSessionMiddleware(app, secret=SECRET))
            inner = await lifespans.own_mcp_app(lambda app: app)
        else:
            through_middleware, inner = MCPSessionMiddleware(trivial_app, secret=SECRET), trivial_app
        token = await create_session(through_middleware)
        if floor == "session floor":
            app: Any = SessionFloor(inner, {token: object()})
        else:
            app = CheckedSessionFloor(inner, {token: token_claims(token)})
        raw = json.dumps(session_body(token)).encode()
        status, answer = await call(app, scope_for(raw, session_headers(token)), raw)
        _, expected = await call(through_middleware, scope_for(raw, session_headers(token)), raw)
    finally:
        await lifespans.shutdown()
    assert status == 200
    meta, reference = json.loads(answer)["result"]["_meta"], json.loads(expected)["result"]["_meta"]
    assert meta[MEMBER] == {"sessionId": token}  # the floors echo the id alone: no expiry
    assert reference[MEMBER]["sessionId"] == token
    assert meta.keys() == reference.keys()  # the server's own members kept beside it, as the middleware keeps them
    if server == "MCPServer":
        assert "io.modelcontextprotocol/serverInfo" in meta


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    result=st.dictionaries(st.sampled_from(["content", "_meta", "x", "}", '"', MEMBER]), json_values, max_size=4),
    answers=st.sampled_from([7, 8, "7"]),
    compact=st.booleans(),
    error=st.booleans(),
)
def test_the_floors_splice_means_what_merging_the_echo_means(
    result: dict[str, Any], answers: object, compact: bool, error: bool
) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": answers, "error" if error else "result": result}
    raw = (json.dumps(message, separators=(",", ":")) if compact else json.dumps(message, indent=1)).encode()
    spliced = _spliced(raw, 7, _echo_member("aaa.bbb.ccc"))
    if answers != 7 or error:
        assert spliced is None  # another request's answer, or an error: no echo
        return
    assert spliced is not None
    meta = result.get("_meta")
    result["_meta"] = {**(meta if isinstance(meta, dict) else {}), MEMBER: {"sessionId": "aaa.bbb.ccc"}}
    assert json.loads(spliced) == message


def test_the_floors_splice_the_event_that_answers_and_no_other() -> None:
    member = _echo_member("aaa.bbb.ccc")
    answer = b'event: message\r\ndata: {"jsonrpc":"2.0","id":7,"result":{"_meta":{"a":1}}}\r\n\r\n'
    spliced = _spliced_event(answer, 7, member)
    assert spliced is not None and spliced.startswith(b"event: message\r\ndata: ") and spliced.endswith(b"}\r\n\r\n")
    data = spliced.split(b"data: ")[1].split(b"\r\n")[0]
    assert json.loads(data)["result"]["_meta"] == {"a": 1, MEMBER: {"sessionId": "aaa.bbb.ccc"}}
    progress = b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\r\n\r\n'
    assert _spliced_event(progress, 7, member) is None
    assert _spliced_event(answer.replace(b'"id":7', b'"id":8'), 7, member) is None
