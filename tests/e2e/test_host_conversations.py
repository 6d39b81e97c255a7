"""Host conversation ids and adopted 2025 transport sessions, through the quickstart over real HTTP.

The quickstart (examples/quickstart.py) with its default configuration, or one
``MCP_SESSIONS_*`` variable more, behind uvicorn on 127.0.0.1 in JSON and SSE
response modes; requests shaped as each host sends them (raw HTTP, both
eras), the real mcp 2.3 client in its 2025 mode, and the real OpenTelemetry
SDK with the SessionSpanProcessor.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import httpx
import pytest
from examples.quickstart import build_app, build_server
from mcp import Client
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from _mcp import (
    MCP_PATH,
    SESSION_REQUIRED,
    LegacyClient,
    ModernClient,
    session_meta,
    tool_text,
)
from _otel import (
    MIDDLEWARE_SCOPE,
    SDK_SCOPE,
    SpanLog,
    attrs,
    global_tracing,
    of_scope,
    parent_of,
    self_of,
    span_strings,
)
from conftest import SECRET, serve
from mcp_sessions import MCPSessionMiddleware
from mcp_sessions._tokens._digest import IdDigests

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}
SOURCE = "mcp_sessions.session.source"
TURN = "mcp_sessions.conversation.turn_id"
DIGEST = re.compile(r"(ts|cv)-[A-Za-z0-9_-]{24}")

Mode = Literal["json", "sse"]
Era = Literal["legacy", "modern"]
RawClient = LegacyClient | ModernClient

# Each host's shape: the source name it is recorded under, and how it sends a conversation id.
HOSTS: dict[str, tuple[str, Any]] = {
    "chatgpt": ("openai", lambda c: ({"openai/session": c, "openai/subject": "anon-user-7"}, {})),
    "vscode": ("vscode", lambda c: ({"vscode.conversationId": c, "vscode.requestId": "r-1"}, {})),
    "goose-header": ("goose", lambda c: ({}, {"agent_session_id": c})),
    "goose-meta": ("goose", lambda c: ({"agent-session-id": c}, {})),
    "opencode": ("opencode", lambda c: ({"sessionID": c}, {})),
    # Codex: every thread of one root shares session_id; each call is a new turn.
    "codex-turn": ("codex", lambda c: ({"x-codex-turn-metadata": codex_turn(c)}, {})),
    "codex-thread-id": ("codex", lambda c: ({"threadId": c}, {})),
    "baggage-header": ("baggage", lambda c: ({}, {"baggage": f"user.id=u-1, gen_ai.conversation.id = {c};p"})),
    "baggage-meta": ("baggage", lambda c: ({"baggage": f"gen_ai.conversation.id={c},k=v%20w"}, {})),
}
NEW_HOSTS = ["codex-turn", "codex-thread-id", "baggage-header", "baggage-meta"]


def codex_turn(thread: str) -> dict[str, str]:
    return {"session_id": "codex-root", "thread_id": thread, "turn_id": f"turn-{uuid.uuid4()}"}


@pytest.fixture(scope="module")
def span_log() -> Iterator[SpanLog]:
    with global_tracing() as exporter:
        yield SpanLog(exporter)


@pytest.fixture
def spans(span_log: SpanLog) -> SpanLog:
    span_log.clear()
    return span_log


class Quickstarts:
    """Quickstart servers by (extra environment, response mode), started on first use for the module."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._stack = stack
        self._urls: dict[tuple[tuple[tuple[str, str], ...], Mode], str] = {}
        self.apps: dict[str, MCPSessionMiddleware] = {}

    def url(self, mode: Mode, **environ: str) -> str:
        key = (tuple(sorted(environ.items())), mode)
        if key not in self._urls:
            app = build_app(json_response=mode == "json", environ={**ENVIRON, **environ})
            self._urls[key] = url = self._stack.enter_context(serve(app))
            self.apps[url] = app
        return self._urls[key]


@pytest.fixture(scope="module")
def quickstarts(span_log: SpanLog) -> Iterator[Quickstarts]:
    with contextlib.ExitStack() as stack:
        yield Quickstarts(stack)


def connect(era: Era, http: httpx.Client, url: str, spans: SpanLog) -> RawClient:
    if era == "modern":
        return ModernClient(http, url)
    client = LegacyClient(http, url)
    client.initialize()
    spans.wait_middleware(2)
    spans.clear()
    return client


def call(client: RawClient, tool: str, host: str, conversation: str, **kwargs: Any) -> dict[str, Any]:
    meta, headers = HOSTS[host][1](conversation)
    _, message = client.call_tool(tool, meta={**meta, **kwargs.pop("meta", {})}, **headers, **kwargs)
    return message


def middleware_spans(spans: Iterable[ReadableSpan], name: str) -> list[ReadableSpan]:
    """The middleware's spans of ``name``; a tool the server never answered is named by what the client sent."""
    method, _, tool = name.partition(" ")
    return [
        span
        for span in of_scope(spans, MIDDLEWARE_SCOPE)
        if span.name == name
        or (tool and span.name == method and (span.attributes or {}).get("mcp_sessions.target_original") == tool)
    ]


def sdk_child(spans: list[ReadableSpan], parent: ReadableSpan) -> ReadableSpan:
    [child] = [span for span in of_scope(spans, SDK_SCOPE) if parent_of(span) == self_of(parent)]
    return child


# -- traces for every conversation, by default ----------------------------------------------------


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("mode", ["json", "sse"])
@pytest.mark.parametrize("host", list(HOSTS))
def test_each_host_conversation_is_one_session_id_in_every_span(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog, host: str, mode: Mode, era: Era
) -> None:
    client = connect(era, http, quickstarts.url(mode), spans)
    source = HOSTS[host][0]
    first, second = f"conv-{uuid.uuid4()}", f"conv-{uuid.uuid4()}"

    answers = [
        call(client, "whoami", host, first, id=1),
        call(client, "whoami", host, second, id=2),
        call(client, "whoami", host, first, id=3),
        call(client, "count", host, first, id=4),
    ]
    finished = spans.wait_middleware(4)

    # Tracing only: the tool sees no session, and a session-required tool still asks for one.
    assert [tool_text(a) for a in answers[:3]] == ["none", "none", "none"]
    assert answers[3]["error"]["code"] == SESSION_REQUIRED
    whoamis = sorted(middleware_spans(finished, "tools/call whoami"), key=lambda s: attrs(s)["jsonrpc.request.id"])
    [count] = middleware_spans(finished, "tools/call count")
    assert [attrs(s)["session.id"] for s in (*whoamis, count)] == [first, second, first, first]
    for span in (*whoamis, count):
        assert attrs(span)["gen_ai.conversation.id"] == attrs(span)["session.id"]
        assert attrs(span)[SOURCE] == source
    assert attrs(count)["error.type"] == str(SESSION_REQUIRED)
    for whoami in whoamis:  # the baggage reaches the SDK's own span
        assert attrs(sdk_child(finished, whoami))["session.id"] == attrs(whoami)["session.id"]
    if host == "chatgpt":
        assert attrs(whoamis[0])["user.id"] == "anon-user-7"
    turns = {attrs(span).get(TURN) for span in (*whoamis, count)}
    if host == "codex-turn":  # each call a turn of its thread, on its span
        assert len(turns) == 4 and all(str(turn).startswith("turn-") for turn in turns)
    else:
        assert turns == {None}


@pytest.mark.parametrize("mode", ["json", "sse"])
def test_a_data_layer_session_wins_over_a_host_id(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog, mode: Mode
) -> None:
    client = connect("legacy", http, quickstarts.url(mode), spans)
    token = client.create_session()["sessionId"]
    spans.wait_middleware(1)
    spans.clear()
    conversation = f"conv-{uuid.uuid4()}"

    counted = call(client, "count", "vscode", conversation, session=session_meta(token))
    goose = call(client, "count", "goose-header", conversation, session=session_meta(token), id=2)
    finished = spans.wait_middleware(2)

    assert tool_text(counted) == "1" and tool_text(goose) == "2"
    for span in middleware_spans(finished, "tools/call count"):
        assert attrs(span)["session.id"] != conversation
        assert attrs(span)[SOURCE] == "data-layer"


def test_the_first_matching_host_wins_and_user_keys_come_first(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog
) -> None:
    url = quickstarts.url("json", MCP_SESSIONS_CONVERSATION_KEYS="meta:acme/chat, header:X-Chat-Id")
    client = connect("modern", http, url, spans)

    client.call_tool("whoami", meta={"sessionID": "oc-1", "openai/session": "oa-1"}, id=1)
    client.call_tool("whoami", meta={"sessionID": "oc-1", "acme/chat": "acme-1"}, id=2)
    client.call_tool("whoami", meta={"sessionID": "oc-1"}, X_Chat_Id="librechat-9", id=3)
    client.call_tool("whoami", meta={"sessionID": "oc-1"}, id=4)
    finished = spans.wait_middleware(4)

    by_id = {attrs(s)["jsonrpc.request.id"]: attrs(s) for s in middleware_spans(finished, "tools/call whoami")}
    assert [(by_id[i]["session.id"], by_id[i][SOURCE]) for i in "1234"] == [
        ("oa-1", "openai"),
        ("acme-1", "meta:acme/chat"),
        ("librechat-9", "header:x-chat-id"),
        ("oc-1", "opencode"),
    ]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("x" * 257, "too long"),
        ("two words", "a space"),
        ("semi;colon", "a baggage delimiter"),
        ("caf\u00e9", "not ASCII"),
        (42, "not a string"),
        ("", "empty"),
    ],
)
def test_a_bad_host_id_is_ignored_not_refused(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog, value: Any, why: str
) -> None:
    client = connect("modern", http, quickstarts.url("json"), spans)

    _, message = client.call_tool("whoami", meta={"vscode.conversationId": value})
    [span] = middleware_spans(spans.wait_middleware(1), "tools/call whoami")

    assert tool_text(message) == "none", why
    assert "session.id" not in attrs(span) and SOURCE not in attrs(span), why


def test_a_256_character_id_is_kept_verbatim(quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog) -> None:
    client = connect("modern", http, quickstarts.url("json"), spans)
    conversation = "v1/" + "a" * 247 + "_-.:=+"
    assert len(conversation) == 256

    client.call_tool("whoami", meta={"openai/session": conversation})
    [span] = middleware_spans(spans.wait_middleware(1), "tools/call whoami")

    assert attrs(span)["session.id"] == conversation


# -- per-conversation data, opt-in ------------------------------------------------------------------


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("mode", ["json", "sse"])
def test_anonymous_data_keeps_a_counter_per_host_conversation(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog, mode: Mode, era: Era
) -> None:
    url = quickstarts.url(mode, MCP_SESSIONS_CONVERSATION_DATA="anonymous")
    client = connect(era, http, url, spans)
    chat_a, chat_b = f"chat-{uuid.uuid4()}", f"chat-{uuid.uuid4()}"

    counts = [
        tool_text(call(client, "count", "chatgpt", chat_a)),
        tool_text(call(client, "count", "chatgpt", chat_a)),
        tool_text(call(client, "count", "chatgpt", chat_b)),
        tool_text(call(client, "count", "vscode", chat_a)),  # another host's conversation, same id
        tool_text(call(client, "count", "chatgpt", chat_a)),
    ]
    stable_id = tool_text(call(client, "whoami", "chatgpt", chat_a))
    finished = spans.wait_middleware(6)

    assert counts == ["1", "2", "1", "1", "3"]
    # The tool's session id is a keyed digest; telemetry keeps the host's id verbatim.
    assert DIGEST.fullmatch(stable_id) and chat_a not in stable_id
    [whoami] = middleware_spans(finished, "tools/call whoami")
    assert attrs(whoami)["session.id"] == chat_a
    # No data-layer echo: the host has no token to send back.
    answer = call(client, "count", "chatgpt", chat_a)
    assert "io.modelcontextprotocol/session" not in answer["result"].get("_meta", {})


def test_anonymous_data_lives_under_the_digest_never_the_raw_id(quickstarts: Quickstarts, http: httpx.Client) -> None:
    url = quickstarts.url("json", MCP_SESSIONS_CONVERSATION_DATA="anonymous")
    client = ModernClient(http, url)
    conversation = f"chat-{uuid.uuid4()}"
    call(client, "count", "opencode", conversation)
    app = quickstarts.apps[url]

    digest = IdDigests(app.keys).conversation("opencode", conversation, None)
    assert asyncio.run(app.store.items(digest)) == {"count": 1}
    assert asyncio.run(app.store.items(conversation)) == {}


def test_sessions_delete_never_ends_a_host_conversation(quickstarts: Quickstarts, http: httpx.Client) -> None:
    url = quickstarts.url("json", MCP_SESSIONS_CONVERSATION_DATA="anonymous")
    client = ModernClient(http, url)
    conversation = f"chat-{uuid.uuid4()}"
    assert tool_text(call(client, "count", "vscode", conversation)) == "1"

    _, refused = client.request("sessions/delete", meta={"vscode.conversationId": conversation})

    assert refused["error"]["code"] == SESSION_REQUIRED  # session methods act on data-layer sessions only
    assert tool_text(call(client, "count", "vscode", conversation)) == "2"


def test_principal_data_without_authentication_refuses_count(quickstarts: Quickstarts, http: httpx.Client) -> None:
    url = quickstarts.url("json", MCP_SESSIONS_CONVERSATION_DATA="principal")
    client = ModernClient(http, url)

    refused = call(client, "count", "vscode", "conv-1")
    whoami = call(client, "whoami", "vscode", "conv-1")

    assert refused["error"]["code"] == SESSION_REQUIRED
    assert "not authenticated" in refused["error"]["message"]
    assert tool_text(whoami) == "none"  # the conversation works, without data


def test_principal_data_is_per_user_and_conversation(http: httpx.Client) -> None:
    app = build_app(
        json_response=True,
        environ={**ENVIRON, "MCP_SESSIONS_CONVERSATION_DATA": "principal"},
        principal=lambda scope: dict(scope["headers"]).get(b"x-test-user", b"").decode() or None,
    )
    with serve(app) as url:
        client = ModernClient(http, url)
        counts = [
            tool_text(call(client, "count", "vscode", "conv-1", X_Test_User="alice")),
            tool_text(call(client, "count", "vscode", "conv-1", X_Test_User="alice")),
            tool_text(call(client, "count", "vscode", "conv-1", X_Test_User="bob")),
            tool_text(call(client, "count", "vscode", "conv-2", X_Test_User="alice")),
        ]
    assert counts == ["1", "2", "1", "1"]


def test_conversation_data_ends_when_idle(http: httpx.Client) -> None:
    environ = {**ENVIRON, "MCP_SESSIONS_CONVERSATION_DATA": "anonymous", "MCP_SESSIONS_IDLE_TTL": "0.3"}
    with serve(build_app(json_response=True, environ=environ)) as url:
        client = ModernClient(http, url)
        assert tool_text(call(client, "count", "goose-header", "g-1")) == "1"
        assert tool_text(call(client, "count", "goose-header", "g-1")) == "2"
        time.sleep(0.5)
        expired = call(client, "count", "goose-header", "g-1")
    assert expired["error"]["code"] == SESSION_REQUIRED


# -- 2025 transport sessions, adopted -------------------------------------------------------------


def raw_ids_absent(finished: list[ReadableSpan], raw_ids: list[str]) -> None:
    for span in finished:
        for text in span_strings(span):
            for raw in raw_ids:
                assert raw not in text, f"a raw transport session id in span {span.name!r}: {text!r}"


@pytest.mark.parametrize("mode", ["json", "sse"])
def test_a_raw_handshake_keeps_a_counter_per_transport_session(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog, mode: Mode
) -> None:
    url = quickstarts.url(mode, MCP_SESSIONS_ADOPT_TRANSPORT="1")
    first, second = LegacyClient(http, url), LegacyClient(http, url)
    first.initialize()
    second.initialize()

    counts = [tool_text(c.call_tool("count", id=i)[1]) for i, c in enumerate([first, first, second, first], 1)]
    stable = [tool_text(c.call_tool("whoami", id=9)[1]) for c in (first, second)]
    finished = spans.wait_middleware(4 + 4 + 2)

    assert counts == ["1", "2", "1", "3"]
    assert all(DIGEST.fullmatch(s) and s.startswith("ts-") for s in stable) and stable[0] != stable[1]
    tool_spans = [s for s in of_scope(finished, MIDDLEWARE_SCOPE) if s.name.startswith("tools/call")]
    assert {attrs(s)["session.id"] for s in tool_spans} == set(stable)
    for span in tool_spans:
        assert attrs(span)[SOURCE] == "transport"
        assert attrs(span)["mcp.session.id"] == attrs(span)["session.id"]
    assert first.transport_session_id and second.transport_session_id
    raw_ids_absent(finished, [first.transport_session_id, second.transport_session_id])

    app = quickstarts.apps[url]
    assert asyncio.run(app.store.items(stable[0])) == {"count": 3}
    deleted = http.delete(first.url, headers=first.headers())
    assert deleted.status_code == 200, deleted.text
    assert asyncio.run(app.store.items(stable[0])) == {}  # the transport session ended: its data went with it
    assert asyncio.run(app.store.items(stable[1])) == {"count": 1}
    # An adopted session has data but no client-held state: setting it fails in the tool (a TypeError).
    _, set_mode = second.call_tool("set_mode", {"mode": "terse"})
    assert set_mode["result"]["isError"] is True
    spans.wait(lambda s: bool(middleware_spans(s, "tools/call set_mode")), "the set_mode span")  # none leaks on


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["json", "sse"])
async def test_a_stock_sdk_client_keeps_a_counter_per_transport_session(
    quickstarts: Quickstarts, span_log: SpanLog, mode: Mode
) -> None:
    url = quickstarts.url(mode, MCP_SESSIONS_ADOPT_TRANSPORT="1") + MCP_PATH
    span_log.clear()
    async with Client(url, mode="legacy") as one, Client(url, mode="legacy") as other:
        results = [
            await one.call_tool("count", {}),
            await one.call_tool("count", {}),
            await other.call_tool("count", {}),
            await one.call_tool("count", {}),
        ]
        ids = [(await c.call_tool("whoami", {})).structured_content for c in (one, other)]
    finished = span_log.wait(
        lambda s: len([x for x in of_scope(s, MIDDLEWARE_SCOPE) if x.name.startswith("tools/call")]) >= 6,
        "six tool spans",
    )

    assert [r.structured_content for r in results] == [{"result": 1}, {"result": 2}, {"result": 1}, {"result": 3}]
    stable = [i["result"] for i in ids if i is not None]
    assert len(set(stable)) == 2 and all(s.startswith("ts-") for s in stable)
    tool_spans = [s for s in of_scope(finished, MIDDLEWARE_SCOPE) if s.name.startswith("tools/call")]
    assert {attrs(s)["session.id"] for s in tool_spans} == set(stable)
    # Every span of a transport session, the SDK's included, carries one session.id.
    sdk_tools = [
        s for s in of_scope(finished, SDK_SCOPE) if s.kind is SpanKind.SERVER and s.name.startswith("tools/call")
    ]
    assert len(sdk_tools) == 6 and {attrs(s).get("session.id") for s in sdk_tools} == set(stable)
    for span in finished:
        for key, value in attrs(span).items():
            assert not (isinstance(value, str) and re.fullmatch("[0-9a-f]{32}", value)), (span.name, key)
    # The client ended its transport sessions with DELETE on exit: their data went with them.
    app = quickstarts.apps[url.removesuffix(MCP_PATH)]
    assert [await app.store.items(s) for s in stable] == [{}, {}]


def test_without_adoption_a_stock_2025_client_still_needs_a_session(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog
) -> None:
    client = connect("legacy", http, quickstarts.url("json"), spans)
    _, refused = client.call_tool("count")
    [span] = middleware_spans(spans.wait_middleware(1), "tools/call count")

    assert refused["error"]["code"] == SESSION_REQUIRED
    assert "session.id" not in attrs(span)
    assert DIGEST.fullmatch(attrs(span)["mcp.session.id"])  # the transport session, as its digest


def test_an_id_the_server_never_minted_is_not_adopted(http: httpx.Client) -> None:
    environ = {**ENVIRON, "MCP_SESSIONS_ADOPT_TRANSPORT": "1", "QUICKSTART_STATELESS": "1"}
    with serve(build_app(json_response=True, environ=environ)) as url:
        client = LegacyClient(http, url)
        client.initialize()
        assert client.transport_session_id is None  # a stateless server mints none
        client.transport_session_id = uuid.uuid4().hex  # a client's own choice
        _, refused = client.call_tool("count")
    assert refused["error"]["code"] == SESSION_REQUIRED


# -- ordinary routes: the session in baggage ------------------------------------------------------


def test_an_ordinary_route_reading_the_session_has_its_spans_tagged(span_log: SpanLog, http: httpx.Client) -> None:
    tracer = trace.get_tracer("tests.route")

    async def profile(request: Request) -> PlainTextResponse:
        with tracer.start_as_current_span("load profile"):
            return PlainTextResponse("ok")

    server = build_server().streamable_http_app(streamable_http_path="/mcp")
    server.router.routes.append(Route("/profile", profile))  # an ordinary route beside the MCP endpoint
    app = MCPSessionMiddleware(server, secret=SECRET)
    with serve(app) as url:
        token = ModernClient(http, url).create_session()["sessionId"]
        span_log.clear()
        response = http.get(url + "/profile", headers={"Mcp-Session-Id": token})
    assert response.status_code == 200
    finished = span_log.wait(lambda s: any(x.name == "load profile" for x in s), "the route's span")
    [span] = [s for s in finished if s.name == "load profile"]
    sid = app.keys.verify_session_token(token).session_id
    assert attrs(span)["session.id"] == sid


# -- Codex threads and W3C baggage ------------------------------------------------------------------


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("host", NEW_HOSTS)
def test_anonymous_data_is_kept_per_thread(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog, host: str, era: Era
) -> None:
    url = quickstarts.url("json", MCP_SESSIONS_CONVERSATION_DATA="anonymous")
    client = connect(era, http, url, spans)
    thread_a, thread_b = f"thread-{uuid.uuid4()}", f"thread-{uuid.uuid4()}"

    counts = [tool_text(call(client, "count", host, thread)) for thread in (thread_a, thread_a, thread_b, thread_a)]
    stable_id = tool_text(call(client, "whoami", host, thread_a))
    finished = spans.wait_middleware(5)

    assert counts == ["1", "2", "1", "3"]
    assert DIGEST.fullmatch(stable_id) and thread_a not in stable_id
    digest = IdDigests(quickstarts.apps[url].keys).conversation(HOSTS[host][0], thread_a, None)
    assert asyncio.run(quickstarts.apps[url].store.items(digest)) == {"count": 3}
    [whoami] = middleware_spans(finished, "tools/call whoami")
    assert (attrs(whoami)["session.id"], attrs(whoami)[SOURCE]) == (thread_a, HOSTS[host][0])


def test_codex_turn_metadata_and_thread_id_name_one_thread(quickstarts: Quickstarts, http: httpx.Client) -> None:
    client = ModernClient(http, quickstarts.url("json", MCP_SESSIONS_CONVERSATION_DATA="anonymous"))
    thread = f"thread-{uuid.uuid4()}"

    counts = [
        tool_text(call(client, "count", "codex-turn", thread)),
        tool_text(call(client, "count", "codex-thread-id", thread)),
        # An older Codex without thread_id: the root's session_id names the conversation.
        tool_text(client.call_tool("count", meta={"x-codex-turn-metadata": {"session_id": thread}})[1]),
    ]

    assert counts == ["1", "2", "3"]


def test_host_keys_win_over_baggage_and_a_session_over_both(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog
) -> None:
    url = quickstarts.url(
        "json", MCP_SESSIONS_CONVERSATION_DATA="anonymous", MCP_SESSIONS_CONVERSATION_KEYS="header:x-chat"
    )
    client = connect("legacy", http, url, spans)
    token = client.create_session()["sessionId"]
    spans.wait_middleware(1)
    spans.clear()
    baggage = f"gen_ai.conversation.id=bg-{uuid.uuid4()}"

    client.call_tool("whoami", meta={"vscode.conversationId": "vs-1"}, baggage=baggage, id=1)
    client.call_tool("whoami", meta={"baggage": baggage, "threadId": "th-1"}, id=2)
    client.call_tool("whoami", X_Chat="x-1", baggage=baggage, id=3)
    client.call_tool("whoami", meta={"baggage": baggage}, session=session_meta(token), id=4)
    client.call_tool("whoami", baggage=baggage, id=5)
    finished = spans.wait_middleware(5)

    by_id = {attrs(s)["jsonrpc.request.id"]: attrs(s) for s in middleware_spans(finished, "tools/call whoami")}
    assert [by_id[i][SOURCE] for i in "12345"] == ["vscode", "codex", "header:x-chat", "data-layer", "baggage"]
    assert by_id["4"]["session.id"] != baggage.partition("=")[2]
    assert by_id["5"]["session.id"] == baggage.partition("=")[2]


@pytest.mark.parametrize("where", ["header", "meta"])
def test_a_client_sent_session_id_in_baggage_is_never_a_conversation(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog, where: str
) -> None:
    url = quickstarts.url("json", MCP_SESSIONS_CONVERSATION_DATA="anonymous")
    client = connect("modern", http, url, spans)
    # A stable id the middleware itself would put in baggage, sent back as if it were the client's.
    stolen = tool_text(call(client, "whoami", "vscode", f"conv-{uuid.uuid4()}"))
    spans.wait_middleware(1)
    spans.clear()
    own = f"conv-{uuid.uuid4()}"

    def send(baggage: str) -> dict[str, Any]:
        return {"baggage": baggage} if where == "header" else {"meta": {"baggage": baggage}}

    _, refused = client.call_tool("count", **send(f"session.id={stolen}"))
    _, whoami = client.call_tool("whoami", **send(f"session.id={stolen}"), id=2)
    _, counted = client.call_tool("count", **send(f"session.id={stolen},gen_ai.conversation.id={own}"), id=3)
    _, mine = client.call_tool("whoami", **send(f"session.id={stolen},gen_ai.conversation.id={own}"), id=4)
    finished = spans.wait_middleware(4)

    assert refused["error"]["code"] == SESSION_REQUIRED
    assert tool_text(whoami) == "none"
    assert tool_text(counted) == "1" and tool_text(mine) not in ("none", stolen)
    by_id = {attrs(s)["jsonrpc.request.id"]: attrs(s) for s in of_scope(finished, MIDDLEWARE_SCOPE)}
    assert [by_id[i].get("session.id") for i in "1234"] == [None, None, own, own]


@pytest.mark.parametrize(
    "baggage",
    [
        "gen_ai.conversation.id=conv-1,",
        "gen_ai.conversation.id=conv 1",
        "gen_ai.conversation.id=conv-1," + "k=v," * 180 + "k=v",
        "gen_ai.conversation.id=conv-1,k=" + "v" * 8192,
    ],
)
def test_malformed_baggage_is_ignored_not_refused(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog, baggage: str
) -> None:
    client = connect("modern", http, quickstarts.url("json"), spans)

    _, message = client.call_tool("whoami", baggage=baggage)
    client.call_tool("whoami", baggage="gen_ai.conversation.id=conv-1", id=2)  # well-formed: it names one
    by_id = {
        attrs(s)["jsonrpc.request.id"]: attrs(s)
        for s in middleware_spans(spans.wait_middleware(2), "tools/call whoami")
    }

    assert tool_text(message) == "none"
    assert "session.id" not in by_id["1"] and SOURCE not in by_id["1"]
    assert (by_id["2"]["session.id"], by_id["2"][SOURCE]) == ("conv-1", "baggage")
