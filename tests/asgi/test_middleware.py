"""Direct ASGI calls: a recording downstream app, a recording ``send`` and anyio.Event gates."""

from __future__ import annotations

import copy
import gzip
from typing import Any

import anyio
import pytest
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from _mcp import NOT_FOUND_MESSAGE, SESSION_KEY
from _waits import WITHIN
from mcp_sessions import Session, get_session
from mcp_sessions._session import SCOPE_KEY, HeaderSession, current_conversation, current_session, header_session
from mcp_sessions.stores import MemoryStore

from ._direct import (
    JSON,
    Downstream,
    Message,
    Receiver,
    Sender,
    call,
    create_session,
    dumps,
    echo_for,
    http_scope,
    json_response,
    middleware,
    modern_headers,
    request,
    with_envelope,
)

pytestmark = pytest.mark.anyio


async def test_lifespan_passes_through_untouched() -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen["scope"], seen["receive"], seen["send"] = scope, receive, send
        seen["messages"] = [await receive()]
        await send({"type": "lifespan.startup.complete"})
        seen["messages"].append(await receive())
        await send({"type": "lifespan.shutdown.complete"})

    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    before = copy.deepcopy(scope)
    queue = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def receive() -> Message:
        return queue.pop(0)

    sender = Sender()
    await middleware(app)(scope, receive, sender)
    assert seen["scope"] is scope
    assert scope == before
    assert seen["receive"] is receive  # send is wrapped (the store is checked at startup), messages are not
    assert seen["messages"] == [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    assert sender.messages == [{"type": "lifespan.startup.complete"}, {"type": "lifespan.shutdown.complete"}]


async def test_websocket_passes_through_untouched() -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen["scope"], seen["receive"], seen["send"] = scope, receive, send
        seen["connect"] = await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": '{"jsonrpc":"2.0"}'})

    scope = {**http_scope("GET"), "type": "websocket", "scheme": "ws", "subprotocols": []}
    del scope["method"]
    before = copy.deepcopy(scope)

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    sender = Sender()
    await middleware(app)(scope, receive, sender)
    assert seen["scope"] is scope
    assert scope == before
    assert (seen["receive"], seen["send"]) == (receive, sender)
    assert seen["connect"] == {"type": "websocket.connect"}
    assert sender.messages == [{"type": "websocket.accept"}, {"type": "websocket.send", "text": '{"jsonrpc":"2.0"}'}]


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "HEAD", "OPTIONS"])
async def test_non_post_passes_through(method: str) -> None:
    downstream = Downstream(json_response({"anything": 1}, status=405))
    scope = http_scope(method, headers=[*JSON, (b"mcp-session-id", b"0123456789abcdef")])
    receive = Receiver(b'{"jsonrpc":"2.0","id":1,"method":"sessions/create"}')
    sender = Sender()
    await middleware(downstream)(scope, receive, sender)
    assert downstream.calls == 1
    assert downstream.scope is scope
    assert downstream.receive is receive
    assert SCOPE_KEY not in scope
    assert downstream.body == b'{"jsonrpc":"2.0","id":1,"method":"sessions/create"}'
    assert sender.messages == downstream.response


@pytest.mark.parametrize(
    "headers",
    [
        [(b"content-type", b"text/plain")],
        [(b"content-type", b"application/x-www-form-urlencoded")],
        [(b"content-type", b"multipart/form-data; boundary=x")],
        [(b"content-type", b"text/event-stream")],
        [],
    ],
    ids=["text", "form", "multipart", "sse", "none"],
)
async def test_post_that_is_not_json_passes_through_with_body_intact(headers: list[tuple[bytes, bytes]]) -> None:
    downstream = Downstream(json_response({"ok": True}))
    chunks = [b'{"jsonrpc":"2.0","id":1,', b'"method":"sessions/create"', b"}"]
    receive = Receiver(*chunks)
    sender = Sender()
    await middleware(downstream)(http_scope(headers=headers), receive, sender)
    assert downstream.calls == 1
    assert downstream.receive is receive
    assert downstream.received == [
        {"type": "http.request", "body": chunks[0], "more_body": True},
        {"type": "http.request", "body": chunks[1], "more_body": True},
        {"type": "http.request", "body": chunks[2], "more_body": False},
        {"type": "http.disconnect"},
    ]
    assert sender.messages == downstream.response


async def test_path_filter_leaves_other_paths_alone() -> None:
    downstream = Downstream()
    mw = middleware(downstream, path="/mcp")
    token = await create_session(mw)
    body = dumps(request(1, token))
    sender = await call(mw, body, http_scope(path="/other"))
    assert downstream.calls == 1
    assert downstream.body == body
    assert downstream.seen == (None, None, None)
    assert sender.messages == downstream.response


async def test_streamed_body_over_the_limit_is_413_and_reading_stops() -> None:
    downstream = Downstream()
    receive = Receiver(*[b" " * 1000] * 100)
    sender = Sender()
    await middleware(downstream, max_body_size=5000)(http_scope(), receive, sender)
    assert downstream.calls == 0
    assert receive.calls == 6  # 6000 bytes read: the first chunk past the limit ends reading
    assert sender.status == 413
    assert sender.json()["error"] == {"code": -32600, "message": "Request body too large (limit 5000 bytes)"}


async def test_body_exactly_at_the_limit_is_forwarded() -> None:
    downstream = Downstream()
    body = b'{"a":"' + b"x" * (5000 - 8) + b'"}'
    assert len(body) == 5000
    scope = http_scope(headers=[*JSON, (b"content-length", b"5000")])
    sender = await call(middleware(downstream, max_body_size=5000), [body[:2500], body[2500:]], scope)
    assert downstream.calls == 1
    assert downstream.body == body
    assert sender.status == 200


async def test_body_is_replayed_once_then_the_real_receive_is_used() -> None:
    downstream = Downstream()
    chunks = [b'{"jsonrpc":"2.0",', b'"id":1,"method":"tools/list"', b"}"]
    receive = Receiver(*chunks)
    await middleware(downstream)(http_scope(), receive, Sender())
    assert downstream.receive is not receive
    assert downstream.received == [
        {"type": "http.request", "body": b"".join(chunks), "more_body": False},
        {"type": "http.disconnect"},
    ]
    assert receive.calls == 4  # three chunks read by the middleware, the disconnect by the app


async def test_client_disconnect_while_reading_the_body_ends_quietly() -> None:
    downstream = Downstream()
    sender = Sender()
    await middleware(downstream)(http_scope(), Receiver(b'{"jsonrpc":', more_body=True), sender)
    assert downstream.calls == 0
    assert sender.messages == []


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"", b"\xff\xfe", b'"a string"', b"42", b"null", b"[]", b"[1,2]", b'{"hello":"world"}',
     b'{"jsonrpc":"2.0","id":1,"method":7}', b'{"jsonrpc":"2.0","id":1,"result":{}}',
     b'{"id":1,"method":"sessions/create"}', b'{"jsonrpc":"1.0","id":1,"method":"sessions/create"}',
     b'[{"id":1,"method":"sessions/create"},{"jsonrpc":2,"id":2,"method":"sessions/delete"}]',
     b'[{"jsonrpc":"2.0","id":1,"result":{}}]'],
    ids=["broken", "empty", "not-utf8", "string", "number", "null", "empty-array", "array-of-numbers",
         "object-no-method", "method-not-string", "a-response", "no-jsonrpc-member", "jsonrpc-1.0",
         "batch-of-non-json-rpc-2.0", "batch-of-responses"],
)  # fmt: skip
async def test_body_that_is_not_a_json_rpc_request_passes_through(body: bytes) -> None:
    downstream = Downstream(json_response({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "x"}}))
    sender = await call(middleware(downstream), [body[:1], body[1:]] if body else [body])
    assert downstream.calls == 1
    assert downstream.body == body
    assert downstream.seen == (None, None, None)
    assert sender.messages == downstream.response


@pytest.mark.parametrize("version", [None, "2025-11-25", "2026-07-28"])
async def test_sessions_create_is_answered_without_the_app(version: str | None) -> None:
    downstream = Downstream()
    mw = middleware(downstream, ttl=600)
    create: Message = {"jsonrpc": "2.0", "id": "c1", "method": "sessions/create"}
    headers = JSON if version is None else [*JSON, (b"mcp-protocol-version", version.encode())]
    if version == "2026-07-28":
        create, headers = with_envelope(create), modern_headers(create)
    sender = await call(mw, dumps(create), http_scope(headers=headers))
    assert downstream.calls == 0
    assert sender.status == 200
    assert sender.header(b"content-type") == b"application/json"
    assert sender.header(b"content-length") == str(len(sender.body)).encode()
    answer = sender.json()
    session = answer["result"]["session"]
    claims = mw.keys.verify_session_token(session["sessionId"])
    assert claims.expires_at - claims.issued_at == 600
    expected_result: dict[str, Any] = {"session": echo_for(mw, session["sessionId"])}
    if version == "2026-07-28":
        expected_result["resultType"] = "complete"
    assert answer == {"jsonrpc": "2.0", "id": "c1", "result": expected_result}


@pytest.mark.parametrize(
    "message",
    [{"jsonrpc": "2.0", "method": "sessions/create"}, request(..., "bad.session.token", method="notifications/x")],
    ids=["sessions-create", "invalid-session"],
)
async def test_a_notification_the_middleware_answers_is_202_and_creates_nothing(message: Message) -> None:
    downstream = Downstream()
    store = MemoryStore()
    sender = await call(middleware(downstream, store=store), dumps(message))
    assert downstream.calls == 0
    assert len(store) == 0
    assert sender.messages == [
        {"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0")], "trailers": False},
        {"type": "http.response.body", "body": b"", "more_body": False},
    ]


async def test_batch_with_a_session_method_is_answered_with_invalid_request_per_element() -> None:
    downstream = Downstream()
    mw = middleware(downstream, batches=True)
    token = await create_session(mw)
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "sessions/create"},
        request("two", token),
        request(..., token, method="notifications/progress"),
        "not an object",
        {"jsonrpc": "2.0", "id": 4, "method": "sessions/delete"},
    ]
    sender = await call(mw, dumps(batch))
    assert downstream.calls == 0
    assert sender.status == 200
    message = "session methods are not allowed in a batch"
    assert sender.json() == [
        {"jsonrpc": "2.0", "id": rid, "error": {"code": -32600, "message": message}} for rid in (1, "two", None, 4)
    ]


async def test_batch_with_one_invalid_session_is_answered_whole() -> None:
    downstream = Downstream()
    mw = middleware(downstream, batches=True)
    token = await create_session(mw)
    batch = [
        request(1, token),
        request(2, "forged.token.value"),
        request(3),
        request(..., token, method="notifications/cancelled"),
        request("four", token),
    ]
    sender = await call(mw, dumps(batch))
    assert downstream.calls == 0
    assert sender.status == 200
    refused = "batch refused: another element's session is invalid"
    assert sender.json() == [
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": refused}},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "error": {"code": -32043, "message": NOT_FOUND_MESSAGE, "data": {"sessionId": "forged.token.value"}},
        },
        {"jsonrpc": "2.0", "id": 3, "error": {"code": -32600, "message": refused}},
        {"jsonrpc": "2.0", "id": "four", "error": {"code": -32600, "message": refused}},
    ]


async def test_batch_with_all_sessions_valid_is_forwarded_and_echoed_per_element() -> None:
    downstream = Downstream()
    mw = middleware(downstream)
    token = await create_session(mw)
    batch = [request(1, token), request(2), request(..., token, method="notifications/progress"), request(3, token)]
    downstream.response = json_response(
        [
            {"jsonrpc": "2.0", "id": 1, "result": {"content": []}},
            {"jsonrpc": "2.0", "id": 2, "result": {"content": []}},
            {"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "bad"}},
        ]
    )
    sender = await call(mw, dumps(batch))
    assert downstream.calls == 1
    assert downstream.body == dumps(batch)
    session = downstream.seen[0]
    assert isinstance(session, Session)
    assert session.token == token
    assert sender.json() == [
        {"jsonrpc": "2.0", "id": 1, "result": {"content": [], "_meta": {SESSION_KEY: echo_for(mw, token)}}},
        {"jsonrpc": "2.0", "id": 2, "result": {"content": []}},
        {"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "bad"}},
    ]
    assert sender.header(b"content-length") == str(len(sender.body)).encode()


async def test_batch_with_two_sessions_has_no_single_request_session() -> None:
    downstream = Downstream(json_response([]))
    mw = middleware(downstream)
    first, second = await create_session(mw), await create_session(mw)
    await call(mw, dumps([request(1, first), request(2, second)]))
    assert downstream.calls == 1
    assert downstream.seen == (None, None, None)


async def test_batch_without_sessions_passes_through_untouched() -> None:
    downstream = Downstream()
    batch = dumps([request(1), request(2)])
    sender = await call(middleware(downstream), batch)
    assert downstream.body == batch
    assert sender.messages == downstream.response


@pytest.mark.parametrize("mode", ["pass-through", "json-with-session", "sse-with-session"])
async def test_app_error_after_response_start_propagates_without_a_second_start(mode: str) -> None:
    content_type = b"text/event-stream" if mode == "sse-with-session" else b"application/json"
    sent_by_app: list[Message] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        for message in (
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]},
            {"type": "http.response.body", "body": b": ping\n\n", "more_body": True},
        ):
            sent_by_app.append(message)
            await send(message)
        raise RuntimeError("the app broke mid-response")

    mw = middleware(app)
    token = None if mode == "pass-through" else await create_session(mw)
    sender = Sender()
    with pytest.raises(RuntimeError, match="the app broke mid-response"):
        await mw(http_scope(), Receiver(dumps(request(1, token))), sender)
    assert len(sender.starts) == (0 if mode == "json-with-session" else 1)
    assert [m for m in sender.messages if m["type"] == "http.response.start" and m["status"] != 200] == []
    if mode == "pass-through":
        assert sender.messages == sent_by_app


async def test_sse_events_are_forwarded_as_soon_as_each_is_complete() -> None:
    """Each event leaves in the send call that completed it, while the app still holds the stream open."""
    mw = middleware(Downstream())
    token = await create_session(mw)
    chunks = [
        b": ping\n\n",
        b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n',
        b'event: message\ndata: {"jsonrpc":"2.0","id":1,"res',
        b'ult":{"content":[]}}\n',
        b"\n",
        b": after the response\n\n",
    ]
    final = {"jsonrpc": "2.0", "id": 1, "result": {"content": [], "_meta": {SESSION_KEY: echo_for(mw, token)}}}
    expected = [chunks[0], chunks[1], b"", b"", b"event: message\ndata: " + dumps(final) + b"\n\n", chunks[5]]
    gates = [anyio.Event() for _ in chunks]
    end = anyio.Event()
    forwarded: list[bytes] = []
    arrivals = [anyio.Event() for _ in range(len(chunks) + 1)]
    sender = Sender()

    async def send(message: Message) -> None:
        await sender(message)
        if message["type"] == "http.response.body":
            forwarded.append(message["body"])
            arrivals[len(forwarded) - 1].set()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), (b"content-length", b"9")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for gate, chunk in zip(gates, chunks, strict=True):
            await gate.wait()
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await end.wait()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    mw.app = app
    with anyio.fail_after(WITHIN):
        async with anyio.create_task_group() as tg:
            tg.start_soon(mw, http_scope(), Receiver(dumps(request(1, token))), send)
            for i, gate in enumerate(gates):
                gate.set()
                await arrivals[i].wait()
                assert forwarded == expected[: i + 1]
                assert all(not g.is_set() for g in gates[i + 1 :])  # the app is still waiting for its next gate
            end.set()
    assert forwarded == [*expected, b""]
    assert sender.headers == [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
    assert sender.messages[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_sse_unfinished_tail_is_flushed_at_the_end() -> None:
    mw = middleware(Downstream())
    token = await create_session(mw)
    mw.app = Downstream(
        [
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]},
            {"type": "http.response.body", "body": b"data: not finished", "more_body": False},
        ]
    )
    sender = await call(mw, dumps(request(1, token)))
    assert sender.body == b"data: not finished"


async def test_json_response_is_rewritten_and_content_length_fixed() -> None:
    downstream = Downstream()
    mw = middleware(downstream)
    token = await create_session(mw)
    server_info = {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "1"}}
    original: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"content": [{"type": "text", "text": "é"}], "_meta": server_info},
    }
    body = dumps(original)
    downstream.response = [
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"Content-Length", str(len(body)).encode()),
                (b"x-app", b"1"),
            ],
        },
        {"type": "http.response.body", "body": body[:10], "more_body": True},
        {"type": "http.response.body", "body": body[10:], "more_body": False},
    ]
    sender = await call(mw, dumps(request(1, token)))
    meta = {**server_info, SESSION_KEY: echo_for(mw, token)}
    expected = {**original, "result": {**original["result"], "_meta": meta}}
    assert sender.json() == expected
    assert len(sender.starts) == 1
    assert sender.headers == [
        (b"content-type", b"application/json"),
        (b"x-app", b"1"),
        (b"content-length", str(len(sender.body)).encode()),
    ]
    assert [m["type"] for m in sender.messages] == ["http.response.start", "http.response.body"]


GZIP_BODY = gzip.compress(dumps({"jsonrpc": "2.0", "id": 1, "result": {}}))


@pytest.mark.parametrize(
    "response",
    [
        json_response({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad"}}),
        json_response({"jsonrpc": "2.0", "id": 2, "result": {}}),
        json_response({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}),
        json_response({"jsonrpc": "2.0", "id": 1, "result": "not an object"}),
        [
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-encoding", b"gzip"),
                    (b"content-length", str(len(GZIP_BODY)).encode()),
                ],
            },
            {"type": "http.response.body", "body": GZIP_BODY, "more_body": False},
        ],
        [
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]},
            {"type": "http.response.body", "body": b'{"jsonrpc":"2.0","id":1,"result":{}}', "more_body": False},
            {"type": "http.response.trailers", "headers": [], "more_trailers": False},
        ],
    ],
    ids=["error", "another-id", "notification", "result-not-object", "gzip-encoded", "another-content-type"],
)
async def test_responses_not_ours_or_unreadable_pass_through_unmodified(response: list[Message]) -> None:
    mw = middleware(Downstream(response))
    token = await create_session(mw)
    sender = await call(mw, dumps(request(1, token)))
    assert sender.messages == response


async def test_session_is_in_scope_state_and_context_during_the_call_only() -> None:
    downstream = Downstream()
    mw = middleware(downstream)
    token = await create_session(mw)
    claims = mw.keys.verify_session_token(token)
    scope = http_scope()
    await mw(scope, Receiver(dumps(request(1, token))), Sender())
    in_scope, in_state, in_context = downstream.seen
    assert isinstance(in_scope, Session)
    assert in_scope is in_state is in_context
    assert (in_scope.id, in_scope.token, in_scope.token_expires_at) == (claims.session_id, token, claims.expires_at)
    assert get_session(Request(scope)) is in_scope
    assert get_session() is None


async def test_header_session_on_non_post_requests_is_read_by_get_session_alone() -> None:
    """Whose session it is is asked when the route reads it (after the app's auth), so the scope holds none."""
    downstream = Downstream(json_response({}))
    mw = middleware(downstream)
    token = await create_session(mw)
    scope = http_scope("GET", headers=[(b"mcp-session-id", token.encode())])
    await mw(scope, Receiver(b""), Sender())
    assert downstream.calls == 1
    in_scope, in_state, in_context = downstream.seen
    assert in_scope is None
    assert in_state is None
    assert isinstance(in_context, Session)
    assert in_context.token == token
    assert in_context.id == mw.keys.verify_session_token(token).session_id
    assert get_session() is None  # nothing is left behind once the route has answered


@pytest.mark.parametrize("leaked", ["session", "header session", "conversation"])
@pytest.mark.parametrize("method", ["POST", "GET"])
async def test_a_request_started_in_another_requests_context_sees_none_of_it(leaked: str, method: str) -> None:
    """Whatever an outer middleware misread, or a request before it left (under asyncio a request's task may start in
    the previous request's context: python/cpython#140947, uvicorn without --reset-contextvars), the app sees what
    this request names: a JSON-RPC request its _meta's, an ordinary route its header's; here none."""
    downstream = Downstream(None if method == "POST" else json_response({}))
    conversations: list[object] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        conversations.append(current_conversation.get())
        await downstream(scope, receive, send)

    mw = middleware(app)
    session = await mw._sessions.resolve(http_scope("GET"), await create_session(mw), None, owner_later=True)
    variable, value = {
        "session": (current_session, session),
        "header session": (header_session, HeaderSession(session, http_scope("GET"), lambda session, scope: True)),
        "conversation": (current_conversation, ("the previous request's", "vscode")),
    }[leaked]
    token = variable.set(value)  # type: ignore[attr-defined]
    try:
        await mw(http_scope(method), Receiver(dumps(request(1)) if method == "POST" else b""), Sender())
    finally:
        variable.reset(token)  # type: ignore[attr-defined]
    assert (downstream.calls, downstream.seen, conversations) == (1, (None, None, None), [None])


@pytest.mark.parametrize(
    "header",
    [b"a.b.c", b"eyJhbGciOiJIUzI1NiJ9.eyJzaWQiOiJ4In0.AAAA", b"0123456789abcdef0123456789abcdef", b"", b"revoked"],
    ids=["garbage", "forged", "transport-session-uuid", "empty", "revoked"],
)
async def test_invalid_header_session_is_not_attached_and_the_request_still_reaches_the_app(header: bytes) -> None:
    downstream = Downstream(json_response({}))
    mw = middleware(downstream)
    if header == b"revoked":
        token = await create_session(mw)
        await call(mw, dumps(request(1, token, method="sessions/delete")))
        header = token.encode()
    scope = http_scope("GET", headers=[(b"mcp-session-id", header)])
    sender = await call(mw, b"", scope)
    assert downstream.calls == 1
    assert downstream.seen == (None, None, None)
    assert get_session(Request(scope)) is None
    assert sender.messages == downstream.response
