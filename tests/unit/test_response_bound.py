"""The response rewriter holds at most ``max_response_size`` of an answer, counted as the bytes arrive.

Past it, the client gets a JSON-RPC error for the request in place of the answer (a JSON body: HTTP 502) or
of the event (an event stream ends with it), and the app's next ``send`` raises ``ResponseTooLarge`` so that
it stops. The gateway's behaviour over the wire is in tests/e2e/test_gateway_hostile_upstream.py.
"""

from __future__ import annotations

import json

import anyio
import pytest
from starlette.types import Message

from mcp_sessions._pipeline._echo import Target
from mcp_sessions._pipeline._response import ResponseRewriter, ResponseTooLarge
from mcp_sessions._wire.protocol import Era
from mcp_sessions.profiles import DRAFT

from .test_echo_splice import FakeSession

LIMIT = 1000
ERROR = {"code": -32603, "message": f"Response too large (limit {LIMIT} bytes)"}


def answered(content_type: bytes, chunks: list[bytes]) -> tuple[list[Message], bool]:
    """What the client got for the app's answer in ``chunks``, and whether the app was stopped."""
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    target = Target(DRAFT, FakeSession(), advertised=(), capability={}, era=Era.MODERN, operation=None)  # type: ignore[arg-type]
    rewriter = ResponseRewriter(send, {5: target}, limit=LIMIT, request_id=5)  # type: ignore[arg-type]

    async def app() -> bool:
        try:
            await rewriter.send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]}
            )
            for chunk in chunks:
                await rewriter.send({"type": "http.response.body", "body": chunk, "more_body": True})
            await rewriter.send({"type": "http.response.body", "body": b"", "more_body": False})
        except ResponseTooLarge:
            return True
        return False

    return sent, anyio.run(app)


@pytest.mark.parametrize("pieces", [1, 7])
def test_a_json_answer_past_the_bound_is_a_502_with_the_requests_error(pieces: int) -> None:
    body = b'{"jsonrpc":"2.0","id":5,"result":{"text":"' + b"a" * LIMIT + b'"}}'
    size = -(-len(body) // pieces)
    sent, stopped = answered(b"application/json", [body[i : i + size] for i in range(0, len(body), size)])
    assert stopped and [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 502 and json.loads(sent[1]["body"]) == {"jsonrpc": "2.0", "id": 5, "error": ERROR}


def test_a_json_answer_within_the_bound_is_rewritten() -> None:
    sent, stopped = answered(b"application/json", [b'{"jsonrpc":"2.0","id":5,', b'"result":{}}'])
    assert not stopped and sent[0]["status"] == 200 and "_meta" in json.loads(sent[1]["body"])["result"]


def test_an_event_that_never_ends_is_refused_and_the_events_before_it_go_on() -> None:
    notification = b'event: message\ndata: {"jsonrpc":"2.0","method":"n"}\n\n'
    sent, stopped = answered(b"text/event-stream", [notification, b"data: " + b"x" * 600, b"x" * 600])
    stream = b"".join(m.get("body", b"") for m in sent[1:])
    assert stopped and sent[-1]["more_body"] is False
    assert (
        stream
        == notification
        + b"event: message\ndata: "
        + json.dumps({"jsonrpc": "2.0", "id": 5, "error": ERROR}, separators=(",", ":")).encode()
        + b"\n\n"
    )
