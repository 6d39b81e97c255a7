"""The tool policy (``--tool-allow``, ``--tool-deny``) as a value, and in front of an app in process: its decisions
(deny over allow, list-valued claims, ``*``, a caller no allow rule names), its spellings refused, and what it does to
requests and answers (a refused call never reaches the app, a batch refused whole, a list filtered in JSON and in an
event stream with its cursor kept, an answer it cannot read refused)."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.types import Message, Receive, Scope, Send

from mcp_sessions._gateway.auth._tools import ToolPolicy, ToolRule

pytestmark = pytest.mark.anyio

POLICY = ToolPolicy.from_specs(
    allow=["groups=eng:*", "roles=reader:read_*,search", "team=a:b:c:search"],
    deny=["groups=contractors:write_*", "*:drop_*"],
)
TOOLS = ["read_file", "write_file", "search", "drop_table"]
LIST_JSON = "application/json"
BEARER = "a-bearer-value-never-logged"


@pytest.mark.parametrize(
    ("claims", "tools"),
    [
        ({"groups": ["eng"]}, ["read_file", "write_file", "search"]),  # every tool but the one denied to all
        ({"groups": ["eng", "contractors"]}, ["read_file", "search"]),  # deny wins over allow
        ({"groups": "eng"}, ["read_file", "write_file", "search"]),  # a claim that is a string
        ({"roles": "reader"}, ["read_file", "search"]),
        ({"roles": ["writer", "reader"]}, ["read_file", "search"]),  # a list that holds the value
        ({"team": "a:b:c"}, ["search"]),  # a value with a colon: the patterns are after the last
        ({"groups": ["Eng"]}, []),  # values as they are, case and all
        ({"groups": [["eng"]], "roles": 1}, []),  # no string, no value
        ({}, []),  # allow rules exist, and none names her
    ],
)
def test_a_callers_tools(claims: dict[str, Any], tools: list[str]) -> None:
    assert POLICY is not None
    allowed = POLICY.of(claims)
    assert [tool for tool in TOOLS if allowed(tool)] == tools


def test_without_allow_rules_every_tool_but_the_denied() -> None:
    policy = ToolPolicy.from_specs(deny=["*:drop_*,Write_?ile"])
    assert policy is not None
    allowed = policy.of({})
    assert [tool for tool in [*TOOLS, "Write_file"] if allowed(tool)] == ["read_file", "write_file", "search"]
    assert ToolPolicy.from_specs() is None  # no rule: no policy, every tool as before


def test_a_pattern_costs_time_linear_in_the_name() -> None:
    """fnmatch's translation matches each ``*`` in an atomic group: a long name that fails late fails fast."""
    policy = ToolPolicy.from_specs(allow=["*:*a*a*a*a*a*a*a*a*a*b"])
    assert policy is not None
    assert not policy.of({})("a" * 100_000)


@pytest.mark.parametrize(
    "spec",
    ["groups=eng", "groups:read_*", "=eng:read_*", "groups=:read_*", "groups=eng:", "groups=eng:read_*,", "*:a, b c"],
)
def test_a_bad_rule_says_how_to_spell_one(spec: str) -> None:
    with pytest.raises(ValueError, match="--tool-deny"):
        ToolPolicy.from_specs(deny=[spec])


def test_a_file_s_lists_are_named_by_their_keys() -> None:
    with pytest.raises(ValueError, match=r"^servers.notes.tools.deny takes CLAIM=VALUE:PATTERN"):
        ToolPolicy.from_specs(deny=["groups"], names=("servers.notes.tools.allow", "servers.notes.tools.deny"))


def test_a_rule_names_a_claim_and_its_value_or_neither() -> None:
    with pytest.raises(ValueError, match="names a claim and its value"):
        ToolRule("groups", None, ("x",))


# -- in front of an app -------------------------------------------------------------------------------------------


class Server:
    """An MCP server's stand-in: it records every body it gets, and answers a ``tools/list`` with ``TOOLS`` and a
    cursor (as JSON, or as ``event-stream``), anything else with a result."""

    def __init__(self, answers: str = LIST_JSON, coding: bytes | None = None) -> None:
        self.bodies: list[Any] = []
        self.answers, self.coding = answers, coding

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        message = await receive()
        body = json.loads(message["body"])
        self.bodies.append(body)
        result = {"tools": [{"name": name} for name in TOOLS], "nextCursor": "page2"}
        answer = {"jsonrpc": "2.0", "id": body.get("id"), "result": result if body["method"] == "tools/list" else {}}
        data = json.dumps(answer).encode()
        headers = [(b"content-type", self.answers.encode())]
        if self.coding is not None:
            headers.append((b"content-encoding", self.coding))
        if self.answers == LIST_JSON:
            chunks = [data[:10], data[10:]]  # a body in two messages: held whole
        else:
            chunks = [b": primed\n\nevent: message\ndata: ", data[:5], data[5:] + b"\n\n"]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for index, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": index < len(chunks) - 1})


class Signed:
    """The gateway's authentication as the policy sees it: ``scope["user"]`` with ``claims``."""

    def __init__(self, app: Any, claims: dict[str, Any]) -> None:
        self.app, self.claims = app, claims

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = AccessToken(token=BEARER, client_id="alice\x1b[2J", scopes=[], subject="alice", claims=self.claims)
        scope["user"] = AuthenticatedUser(token)
        await self.app(scope, receive, send)


async def posted(server: Server, body: Any, claims: dict[str, Any], **headers: str) -> httpx.Response:
    assert POLICY is not None
    app = Signed(POLICY.wrap(server, max_body=1 << 20, max_response=1 << 20), claims)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gateway") as http:
        return await http.post("/mcp", json=body, headers=headers)


def call(tool: str, request_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": tool, "arguments": {}}}


def data_of(response: httpx.Response) -> Any:
    """The answer: the JSON body, or the one event's data."""
    if response.headers["content-type"].startswith("text/event-stream"):
        [data] = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        return json.loads(data)
    return response.json()


@pytest.mark.parametrize("answers", [LIST_JSON, "text/event-stream"])
async def test_a_list_shows_her_tools_alone_and_keeps_its_cursor(answers: str) -> None:
    server = Server(answers)
    listed = {"jsonrpc": "2.0", "id": "l", "method": "tools/list", "params": {"cursor": "page1"}}
    response = await posted(server, listed, {"groups": ["eng", "contractors"]})
    result = data_of(response)["result"]
    assert result == {"tools": [{"name": "read_file"}, {"name": "search"}], "nextCursor": "page2"}
    assert int(response.headers.get("content-length", len(response.content))) == len(response.content)
    assert server.bodies == [listed]  # the cursor went as it came


async def test_a_refused_call_never_reaches_the_server_and_names_the_policy() -> None:
    server = Server()
    response = await posted(server, call("write_file"), {"groups": ["eng", "contractors"]})
    assert response.status_code == 200
    error = response.json()["error"]
    assert error["code"] == -32602
    assert "tool policy" in error["message"]
    assert error["data"] == {"reason": "tool_policy"}
    modern = {"Mcp-Protocol-Version": "2026-07-28"}
    assert (await posted(server, call("write_file"), {}, **modern)).status_code == 400  # as -32602 is in 2026-07-28
    notified = {key: value for key, value in call("write_file").items() if key != "id"}
    assert (await posted(server, notified, {})).status_code == 202  # a notification: no answer, not forwarded
    assert server.bodies == []
    assert (await posted(server, call("read_file"), {"groups": ["eng"]})).json()["result"] == {}
    assert server.bodies == [call("read_file")]


async def test_a_refusal_is_logged_once_per_caller_her_name_escaped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "mcp_sessions.gateway")
    assert POLICY is not None
    app = Signed(POLICY.wrap(Server(), max_body=1 << 20, max_response=1 << 20), {})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gateway") as http:
        for _ in range(3):
            assert (await http.post("/mcp", json=call("drop_table"))).json()["error"]["code"] == -32602
    [logged] = [record.getMessage() for record in caplog.records]
    assert logged.startswith("mcp-sessions gateway: refused to alice\\x1b[2J: Tool 'drop_table' is not one"), logged
    assert BEARER not in caplog.text


async def test_a_batch_with_a_refused_call_is_refused_whole() -> None:
    server = Server()
    batch = [call("read_file", 1), call("drop_table", 2), {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    response = await posted(server, batch, {"groups": ["eng"]})
    assert [(answer["id"], answer["error"]["code"]) for answer in response.json()] == [(1, -32600), (2, -32602)]
    assert server.bodies == []


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        # a name the header says otherwise: a server that read the header would run that one
        (call("read_file"), {"Mcp-Name": "drop_table"}),
        (call("read_file"), [("Mcp-Name", "read_file"), ("Mcp-Name", "drop_table")]),  # the last, to another reader
        # a name given twice: parsers differ on which one counts
        ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"drop_table","name":"read_file"}}', {}),
        ('{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"ping","params":{"name":"drop_table"}}', {}),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": ["read_file"]}}, {}),
    ],
)
async def test_what_two_readers_could_read_two_ways_is_refused(body: Any, headers: Any) -> None:
    server = Server()
    content = body if isinstance(body, str) else json.dumps(body)
    assert POLICY is not None
    app = Signed(POLICY.wrap(server, max_body=1 << 20, max_response=1 << 20), {"groups": ["eng"]})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gateway") as http:
        sent = [("content-type", LIST_JSON), *(headers.items() if isinstance(headers, dict) else headers)]
        response = await http.post("/mcp", content=content, headers=sent)
    assert response.json()["error"]["code"] in (-32600, -32602)
    assert server.bodies == []


async def test_a_list_it_cannot_read_is_refused_never_passed() -> None:
    server = Server(coding=b"gzip")
    listed = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    with pytest.raises(OSError, match="coded"):  # the app is stopped: a proxy closes its upstream request
        await posted(server, listed, {"groups": ["eng"]})


async def test_an_answer_past_the_bound_is_an_error() -> None:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    assert POLICY is not None
    app = Signed(POLICY.wrap(Server(), max_body=1 << 20, max_response=50), {"groups": ["eng"]})
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [(b"content-type", b"application/json")]}
    with pytest.raises(OSError, match="too large"):
        await app(scope, receive, send)
    assert sent[0]["status"] == 502
    assert json.loads(sent[1]["body"])["error"]["code"] == -32603


async def test_a_resumed_stream_lists_her_tools_alone_and_a_coded_body_is_refused() -> None:
    """A stream resumed with ``Last-Event-ID`` replays answers whose requests the gateway did not see: any list in it
    is filtered; a request body it could not read reaches nothing."""
    listed = {"jsonrpc": "2.0", "id": 3, "result": {"tools": [{"name": name} for name in TOOLS]}}
    reached: list[str] = []

    async def replaying(scope: Scope, receive: Receive, send: Send) -> None:
        reached.append(scope["method"])
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        event = b"id: 9\nevent: message\ndata: " + json.dumps(listed).encode() + b"\n\n"
        await send({"type": "http.response.body", "body": event, "more_body": False})

    assert POLICY is not None
    app = Signed(POLICY.wrap(replaying, max_body=1 << 20, max_response=1 << 20), {"roles": ["reader"]})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gateway") as http:
        resumed = await http.get("/mcp", headers={"Last-Event-ID": "8", "Accept": "text/event-stream"})
        coded = await http.post("/mcp", content=b"\x1f\x8b", headers={"Content-Encoding": "gzip"})
    assert [tool["name"] for tool in data_of(resumed)["result"]["tools"]] == ["read_file", "search"]
    assert coded.status_code == 415
    assert reached == ["GET"]
