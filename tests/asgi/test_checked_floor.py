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
from starlette.types import Receive, Scope, Send

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _harness import (  # the benchmarks run as scripts: their directory is not a package
    NAME_HEADERS,
    SECRET,
    CheckedSessionFloor,
    call,
    create_session,
    http_headers,
    request,
    session_body,
    session_headers,
    token_claims,
    trivial_app,
)

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
    middleware = MCPSessionMiddleware(through_middleware, secret=SECRET)
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
