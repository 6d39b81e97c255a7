"""Host conversation ids and adopted 2025 transport sessions, through the quickstart over real HTTP.

The quickstart (examples/quickstart.py) with its default configuration, or one ``MCP_SESSIONS_*`` variable
more, behind uvicorn on 127.0.0.1 in JSON and SSE response modes; requests shaped as each host sends them (raw
HTTP, both eras), and the real OpenTelemetry SDK with the SessionSpanProcessor. The stock SDK client in its 2025
mode, one counter per connection, is a cell of tests/e2e/test_interop.py (and of tests/e2e/test_viewers.py);
what the server does with its transport sessions, the raw handshake's case here.
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
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from _hosts import HOSTS, NEW_HOSTS
from _mcp import SESSION_REQUIRED, LegacyClient, ModernClient, session_meta, tool_text
from _otel import MIDDLEWARE_SCOPE, SpanLog, attrs, connect, of_scope, sdk_child, span_strings
from conftest import SECRET, in_process, serve
from mcp_sessions import MCPSessionMiddleware
from mcp_sessions._tokens import IdDigests

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}
SOURCE = "mcp_sessions.session.source"
TURN = "mcp_sessions.conversation.turn_id"
DIGEST = re.compile(r"(ts|cv)-[A-Za-z0-9_-]{24}")

Mode = Literal["json", "sse"]
Era = Literal["legacy", "modern"]
RawClient = LegacyClient | ModernClient


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
        assert len(turns) == 4
        assert all(str(turn).startswith("turn-") for turn in turns)
    elif host == "vscode":  # its chat request's id (the same in each call here)
        assert turns == {"r-1"}
    else:
        assert turns == {None}


def test_the_first_matching_host_wins_user_keys_first_baggage_last_and_a_session_over_all(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog
) -> None:
    url = quickstarts.url(
        "json",
        MCP_SESSIONS_CONVERSATION_DATA="anonymous",
        MCP_SESSIONS_CONVERSATION_KEYS="meta:acme/chat, header:X-Chat-Id",
    )
    client = connect("legacy", http, url, spans)
    token = client.create_session()["sessionId"]
    spans.wait_middleware(1)
    spans.clear()
    baggage = f"gen_ai.conversation.id=bg-{uuid.uuid4()}"

    client.call_tool("whoami", meta={"sessionID": "oc-1", "openai/session": "oa-1"}, id=1)
    client.call_tool("whoami", meta={"sessionID": "oc-1", "acme/chat": "acme-1"}, id=2)
    client.call_tool("whoami", meta={"sessionID": "oc-1"}, X_Chat_Id="librechat-9", id=3)
    client.call_tool("whoami", meta={"sessionID": "oc-1"}, id=4)
    client.call_tool("whoami", meta={"vscode.conversationId": "vs-1"}, baggage=baggage, id=5)
    client.call_tool("whoami", meta={"baggage": baggage, "threadId": "th-1"}, id=6)
    client.call_tool("whoami", X_Chat_Id="x-1", baggage=baggage, id=7)
    host_ids = {"baggage": baggage, "vscode.conversationId": "vs-1"}
    _, mine = client.call_tool("whoami", meta=host_ids, session=session_meta(token), agent_session_id="g-1", id=8)
    client.call_tool("whoami", baggage=baggage, id=9)
    finished = spans.wait_middleware(9)

    by_id = {attrs(s)["jsonrpc.request.id"]: attrs(s) for s in middleware_spans(finished, "tools/call whoami")}
    assert [(by_id[i]["session.id"], by_id[i][SOURCE]) for i in "1234567"] == [
        ("oa-1", "openai"),
        ("acme-1", "meta:acme/chat"),
        ("librechat-9", "header:x-chat-id"),
        ("oc-1", "opencode"),
        ("vs-1", "vscode"),
        ("th-1", "codex"),
        ("x-1", "header:x-chat-id"),
    ]
    assert by_id["8"][SOURCE] == "data-layer"
    assert tool_text(mine) == by_id["8"]["session.id"]  # the session's data
    assert by_id["8"]["session.id"] not in (baggage.partition("=")[2], "vs-1", "g-1")
    assert (by_id["9"]["session.id"], by_id["9"][SOURCE]) == (baggage.partition("=")[2], "baggage")


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        pytest.param({"meta": {"vscode.conversationId": "x" * 257}}, None, id="too-long"),
        pytest.param({"meta": {"vscode.conversationId": "two words"}}, None, id="a-space"),
        pytest.param({"meta": {"vscode.conversationId": "semi;colon"}}, None, id="a-baggage-delimiter"),
        pytest.param({"meta": {"vscode.conversationId": "caf\u00e9"}}, None, id="not-ascii"),
        pytest.param({"meta": {"vscode.conversationId": 42}}, None, id="not-a-string"),
        pytest.param({"meta": {"vscode.conversationId": ""}}, None, id="empty"),
        pytest.param({"baggage": "gen_ai.conversation.id=conv-1,"}, None, id="baggage-trailing-comma"),
        pytest.param({"baggage": "gen_ai.conversation.id=conv 1"}, None, id="baggage-space"),
        pytest.param({"baggage": "gen_ai.conversation.id=conv-1," + "k=v," * 180 + "k=v"}, None, id="baggage-181"),
        pytest.param({"baggage": "gen_ai.conversation.id=conv-1,k=" + "v" * 8192}, None, id="baggage-8k"),
        pytest.param({"meta": {"openai/session": "v1/" + "a" * 193 + "_-.:"}}, "v1/" + "a" * 193 + "_-.:", id="200"),
    ],
)
def test_a_bad_host_id_is_ignored_not_refused_and_a_200_character_one_kept(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog, sent: dict[str, Any], expected: str | None
) -> None:
    client = connect("modern", http, quickstarts.url("json"), spans)

    _, message = client.call_tool("whoami", **sent)
    [span] = middleware_spans(spans.wait_middleware(1), "tools/call whoami")

    assert tool_text(message) == "none"
    if expected is None:
        assert "session.id" not in attrs(span)
        assert SOURCE not in attrs(span)
    else:
        assert len(expected) == 200
        assert attrs(span)["session.id"] == expected


@pytest.mark.parametrize(
    ("host_id", "kept"),
    [
        pytest.param("v1/" + "a" * 247 + "_-.:=+", False, id="256-a-bearer-shaped-run"),
        pytest.param("/".join(f"part-{n:03}" for n in range(25)), True, id="224-short-parts"),
    ],
)
def test_a_host_id_over_200_characters_is_a_digest_in_session_id(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog, host_id: str, kept: bool
) -> None:
    """Langfuse drops a session id over 200 characters: such an id is the key set's digest of the conversation,
    the one its data would be kept under, and itself only where nothing in it would be redacted."""
    url = quickstarts.url("json")
    client = connect("modern", http, url, spans)

    client.call_tool("whoami", meta={"openai/session": host_id})
    [span] = middleware_spans(spans.wait_middleware(1), "tools/call whoami")

    digest = IdDigests(quickstarts.apps[url].keys).conversation("openai", host_id, None)
    assert len(host_id) > 200
    assert attrs(span)["session.id"] == attrs(span)["gen_ai.conversation.id"] == digest
    assert attrs(span).get("mcp_sessions.conversation.id") == (host_id if kept else None)


# -- per-conversation data, opt-in ------------------------------------------------------------------


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize(
    ("host", "mode"), [("chatgpt", "json"), ("chatgpt", "sse"), *((host, "json") for host in NEW_HOSTS)]
)
def test_anonymous_data_keeps_a_counter_per_host_conversation_under_its_digest(
    quickstarts: Quickstarts, http: httpx.Client, spans: SpanLog, host: str, mode: Mode, era: Era
) -> None:
    url = quickstarts.url(mode, MCP_SESSIONS_CONVERSATION_DATA="anonymous")
    client = connect(era, http, url, spans)
    chat_a, chat_b = f"chat-{uuid.uuid4()}", f"chat-{uuid.uuid4()}"

    counts = [
        tool_text(call(client, "count", host, chat_a)),
        tool_text(call(client, "count", host, chat_a)),
        tool_text(call(client, "count", host, chat_b)),
        tool_text(call(client, "count", "vscode", chat_a)),  # another host's conversation, same id
        tool_text(call(client, "count", host, chat_a)),
    ]
    stable_id = tool_text(call(client, "whoami", host, chat_a))
    finished = spans.wait_middleware(6)

    assert counts == ["1", "2", "1", "1", "3"]
    # The tool's session id is a keyed digest; telemetry keeps the host's id verbatim.
    assert DIGEST.fullmatch(stable_id)
    assert chat_a not in stable_id
    [whoami] = middleware_spans(finished, "tools/call whoami")
    assert (attrs(whoami)["session.id"], attrs(whoami)[SOURCE]) == (chat_a, HOSTS[host][0])
    store = quickstarts.apps[url].store
    digest = IdDigests(quickstarts.apps[url].keys).conversation(HOSTS[host][0], chat_a, None)
    assert asyncio.run(store.items(digest)) == {"count": 3}
    assert asyncio.run(store.items(chat_a)) == {}  # never under the raw id
    # No data-layer echo: the host has no token to send back.
    answer = call(client, "count", host, chat_a)
    assert "io.modelcontextprotocol/session" not in answer["result"].get("_meta", {})


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


def test_conversation_data_ends_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {**ENVIRON, "MCP_SESSIONS_CONVERSATION_DATA": "anonymous", "MCP_SESSIONS_IDLE_TTL": "60"}
    # The clock the middleware and store read, stopped: a second of a busy machine between two calls must not
    # turn 59 s of idleness into 60.
    start, idle = time.time(), [0.0]
    monkeypatch.setattr(time, "time", lambda: start + idle[0])
    with in_process(build_app(json_response=True, environ=environ)) as http:
        client = ModernClient(http, "")
        assert tool_text(call(client, "count", "goose-header", "g-1")) == "1"
        idle[0] = 59.0
        assert tool_text(call(client, "count", "goose-header", "g-1")) == "2"
        idle[0] = 59.0 + 61.0
        expired = call(client, "count", "goose-header", "g-1")
    assert expired["error"]["code"] == SESSION_REQUIRED


# -- 2025 transport sessions, adopted -------------------------------------------------------------


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
    assert all(DIGEST.fullmatch(s) and s.startswith("ts-") for s in stable)
    assert stable[0] != stable[1]
    tool_spans = [s for s in of_scope(finished, MIDDLEWARE_SCOPE) if s.name.startswith("tools/call")]
    assert {attrs(s)["session.id"] for s in tool_spans} == set(stable)
    for span in tool_spans:
        assert attrs(span)[SOURCE] == "transport"
        assert attrs(span)["mcp.session.id"] == attrs(span)["session.id"]
        assert attrs(sdk_child(finished, span))["session.id"] == attrs(span)["session.id"]  # the SDK's span too
    assert first.transport_session_id
    assert second.transport_session_id
    raw_ids = [first.transport_session_id, second.transport_session_id]
    for span in finished:
        for text in span_strings(span):
            assert not any(raw in text for raw in raw_ids), (
                f"a raw transport session id in span {span.name!r}: {text!r}"
            )

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
    assert tool_text(counted) == "1"
    assert tool_text(mine) not in ("none", stolen)
    by_id = {attrs(s)["jsonrpc.request.id"]: attrs(s) for s in of_scope(finished, MIDDLEWARE_SCOPE)}
    assert [by_id[i].get("session.id") for i in "1234"] == [None, None, own, own]
