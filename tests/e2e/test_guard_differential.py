"""The middleware asks the wrapped SDK server first, and so refuses as it does: one table of requests, sent to both.

Each case goes, in process (Starlette's TestClient), to the bare ``mcp`` SDK
server with an ordinary method (``tools/list``) and to the same server wrapped in
the middleware with a session method (``sessions/create``, ``sessions/delete``)
in the same envelope. Where the SDK refuses the request, the middleware must
refuse it with the same status, content type and body, and create or delete
nothing; where the SDK accepts it, the middleware must answer the session
method. Two server configurations cover both response modes and both
2025-era transports: JSON and stateless, SSE and stateful. A second table
sends raw bodies that the middleware's parser reads and the SDK's may not
(other encodings, lone surrogates, nesting at the SDK's limit).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import pytest
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Scope

from _mcp import LEGACY, MCP_PATH, MODERN, SESSION_KEY, LegacyClient, legacy_request, modern_headers, modern_request
from conftest import SECRET, in_process
from mcp_sessions import MCPSessionMiddleware
from mcp_sessions._wire.jsonrpc import MAX_DEPTH
from mcp_sessions.stores import MemoryStore

Era = Literal["modern", "legacy"]
Mode = Literal["json", "sse"]
Headers = list[tuple[str, str]]
Body = Any
ACCEPT_BOTH = "application/json, text/event-stream"
FUTURE = "2099-01-01"  # a protocol version no server speaks
# The 2025-era SDK's parse and validation errors, which quote pydantic on the body it read.
PARSER_ERRORS = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"Validation error: ',
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: ',
)


def build_server() -> MCPServer:
    server = MCPServer("differential")

    @server.tool()
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    return server


def sdk_app(mode: Mode) -> ASGIApp:
    # JSON answers on a stateless 2025 transport; SSE answers on a stateful one (its handshake, its session id).
    return build_server().streamable_http_app(
        streamable_http_path=MCP_PATH, json_response=mode == "json", stateless_http=mode == "json"
    )


@dataclass
class Deployment:
    """The bare SDK server and the same server behind the middleware, in one mode."""

    mode: Mode
    bare: httpx.Client
    wrapped: httpx.Client
    store: MemoryStore
    transport_sessions: dict[str, str | None] = field(default_factory=dict)  # "bare" and "wrapped"


@pytest.fixture(scope="module", params=["json", "sse"])
def deployment(request: pytest.FixtureRequest) -> Iterator[Deployment]:
    mode: Mode = request.param
    store = MemoryStore()
    wrapped = MCPSessionMiddleware(sdk_app(mode), secret=SECRET, store=store)
    with in_process(sdk_app(mode)) as bare, in_process(wrapped) as wrapped_http:
        found = Deployment(mode, bare, wrapped_http, store)
        for name, http in (("bare", bare), ("wrapped", wrapped_http)):
            client = LegacyClient(http, "")
            client.initialize()  # the stateful transport's session id (None when stateless)
            found.transport_sessions[name] = client.transport_session_id
        yield found


# -- building the two requests ------------------------------------------------------------------------


def envelope(era: Era, method: str, meta: dict[str, Any] | None) -> tuple[Headers, dict[str, Any]]:
    """A well-formed request of ``era``: its body and the headers a conforming client sends with it."""
    if era == "modern":
        body = modern_request(method, meta=meta)
        return list(modern_headers(body).items()), body
    body = legacy_request(method, meta=meta)
    return [("Content-Type", "application/json"), ("Accept", ACCEPT_BOTH), ("MCP-Protocol-Version", LEGACY)], body


def replace_header(headers: Headers, name: str, value: str | None) -> Headers:
    kept = [(n, v) for n, v in headers if n.lower() != name.lower()]
    return kept if value is None else [*kept, (name, value)]


@dataclass(frozen=True)
class Case:
    """A change to a well-formed request; ``eras`` where it applies."""

    name: str
    headers: Callable[[Headers], Headers] = lambda headers: headers
    body: Callable[[dict[str, Any]], Body] = lambda body: body
    eras: tuple[Era, ...] = ("modern", "legacy")


def header(name: str, value: str | None) -> Callable[[Headers], Headers]:
    return lambda headers: replace_header(headers, name, value)


def with_id(value: Any) -> Callable[[dict[str, Any]], Body]:
    return lambda body: {**body, "id": value}


def with_version(version: str) -> Callable[[dict[str, Any]], Body]:
    def change(body: dict[str, Any]) -> Body:
        meta = {**body["params"]["_meta"], "io.modelcontextprotocol/protocolVersion": version}
        return {**body, "params": {**body["params"], "_meta": meta}}

    return change


def without_envelope(body: dict[str, Any]) -> Body:
    meta = {k: v for k, v in body["params"]["_meta"].items() if not k.startswith("io.modelcontextprotocol/p")}
    return {**body, "params": {**body["params"], "_meta": meta}}


CASES = [
    Case("well-formed"),
    Case("off-host", header("Host", "evil.example")),
    Case("host-without-port", header("Host", "127.0.0.1")),
    Case("host-localhost-any-port", header("Host", "localhost:1")),
    Case("off-origin", header("Origin", "http://evil.example")),
    Case("origin-localhost", header("Origin", "http://localhost:3000")),
    Case("accept-sse-only", header("Accept", "text/event-stream")),
    Case("accept-json-only", header("Accept", "application/json")),
    Case("accept-wildcards", header("Accept", "application/*, text/*")),
    Case("accept-anything", header("Accept", "*/*")),
    Case("content-type-in-capitals", header("Content-Type", "Application/JSON")),
    Case("content-type-with-charset", header("Content-Type", "application/json; charset=utf-8")),
    Case("id-null", body=with_id(None)),
    Case("id-object", body=with_id({"a": 1})),
    Case("id-array", body=with_id([1])),
    Case("id-float", body=with_id(1.5)),
    Case("id-boolean", body=with_id(True)),
    Case("id-string", body=with_id("a-string")),
    Case("batch", body=lambda body: [body]),
    Case("params-not-an-object", body=lambda body: {**body, "params": [1]}),
    Case("jsonrpc-1.0", body=lambda body: {**body, "jsonrpc": "1.0"}),
    Case("unsupported-version", header("Mcp-Protocol-Version", FUTURE), with_version(FUTURE), eras=("modern",)),
    Case("version-header-not-the-envelopes", header("Mcp-Protocol-Version", FUTURE), eras=("modern",)),
    Case("no-mcp-method", header("Mcp-Method", None), eras=("modern",)),
    Case("mcp-method-of-another-method", header("Mcp-Method", "prompts/list"), eras=("modern",)),
    Case("no-envelope", body=without_envelope, eras=("modern",)),
    Case("version-header-twice", lambda headers: [*headers, ("Mcp-Protocol-Version", MODERN)], eras=("modern",)),
]


def send(http: httpx.Client, era: Era, headers: Headers, body: Body, transport_session: str | None) -> httpx.Response:
    """POST ``body``: JSON, or bytes sent as they are; a 2025-era request in the transport session."""
    if era == "legacy" and transport_session is not None:
        headers = [*headers, ("Mcp-Session-Id", transport_session)]
    return http.post(MCP_PATH, content=body if isinstance(body, bytes) else json.dumps(body).encode(), headers=headers)


def new_session(http: httpx.Client) -> dict[str, Any]:
    """The ``_meta`` that names a new session of the middleware behind ``http``."""
    headers, body = envelope("modern", "sessions/create", None)
    token = http.post(MCP_PATH, json=body, headers=dict(headers)).json()["result"]["session"]["sessionId"]
    return {SESSION_KEY: {"sessionId": token}}


def deleted(http: httpx.Client, meta: dict[str, Any]) -> bool:
    """Whether a well-formed sessions/delete of the session ``meta`` names succeeds (it was still there)."""
    headers, body = envelope("modern", "sessions/delete", meta)
    return "error" not in http.post(MCP_PATH, json=body, headers=dict(headers)).json()


def same_method(body: Body, method: str) -> Body:
    """``body`` (or each element of a batch) with its method replaced."""
    if isinstance(body, list):
        return [same_method(element, method) for element in body]
    return {**body, "method": method} if isinstance(body, dict) and "method" in body else body


def exchange(
    deployment: Deployment, era: Era, case: Case, method: str, meta: dict[str, Any] | None
) -> tuple[httpx.Response, httpx.Response]:
    """The bare server's answer to ``tools/list``, and the middleware's to ``method``, in the case's envelope."""
    headers, body = envelope(era, method, meta)
    sent_headers, sent_body = case.headers(headers), case.body(body)
    ordinary_headers = [(n, "tools/list" if n == "Mcp-Method" and v == method else v) for n, v in sent_headers]
    sessions = deployment.transport_sessions
    bare = send(deployment.bare, era, ordinary_headers, same_method(sent_body, "tools/list"), sessions["bare"])
    return bare, send(deployment.wrapped, era, sent_headers, sent_body, sessions["wrapped"])


def assert_same_refusal(bare: httpx.Response, ours: httpx.Response) -> None:
    assert ours.status_code == bare.status_code, (bare.content, ours.content)
    assert ours.headers.get("content-type") == bare.headers.get("content-type")
    if bare.content.startswith(PARSER_ERRORS):
        # The server's parser read the probe, in the body's encoding: the same error, where it says the
        # parser stopped (a line and a column of the probe's text, or a validator's account) aside.
        theirs, mine = bare.json(), ours.json()
        assert mine["error"]["code"] == theirs["error"]["code"]
        assert mine["id"] is None
        assert list(mine) == list(theirs)
        assert list(mine["error"]) == list(theirs["error"])
    else:
        assert ours.content == bare.content


def accepted(bare: httpx.Response) -> bool:
    """Whether the bare server ran tools/list (a 200 answer with a result), rather than refuse the request."""
    if bare.status_code != 200:
        return False
    text = bare.text
    return '"result"' in text and '"error"' not in text


def cases_of(era: Era) -> list[Case]:
    return [case for case in CASES if era in case.eras]


# -- the differential ---------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_sessions_create_is_answered_only_where_the_sdk_would_answer(deployment: Deployment, era: Era) -> None:
    refused = 0
    for case in cases_of(era):
        stored = len(deployment.store)
        bare, ours = exchange(deployment, era, case, "sessions/create", None)
        if accepted(bare):
            assert ours.status_code == 200, (case.name, ours.text)
            assert "sessionId" in ours.json()["result"]["session"], case.name
            assert len(deployment.store) == stored, case.name  # creating a session stores nothing
        else:
            refused += 1
            assert_same_refusal(bare, ours)
            assert len(deployment.store) == stored, f"{case.name}: a refused sessions/create stored a session"
            assert b"sessionId" not in ours.content, case.name
            assert b"eyJ" not in ours.content, case.name
    assert refused >= (18 if era == "modern" else 13)  # the table exercises the refusals, not only the passes


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_sessions_delete_is_answered_only_where_the_sdk_would_answer(deployment: Deployment, era: Era) -> None:
    for case in cases_of(era):
        session = new_session(deployment.wrapped)
        bare, ours = exchange(deployment, era, case, "sessions/delete", session)
        if accepted(bare):
            assert ours.status_code == 200, (case.name, ours.text)
            assert "error" not in ours.json(), case.name
            continue
        assert_same_refusal(bare, ours)
        assert deleted(deployment.wrapped, session), case.name  # refused: the session is still there


def test_a_session_error_is_refused_as_the_sdk_would_refuse_the_request(deployment: Deployment) -> None:
    """The middleware's own errors (-32043 here) also come after the server's checks."""
    forged = {SESSION_KEY: {"sessionId": "forged.session.token"}}
    headers, body = envelope("modern", "tools/call", forged)
    body["params"].update(name="echo", arguments={"text": "x"})
    headers = replace_header(headers, "Mcp-Name", "echo")
    ours = deployment.wrapped.post(MCP_PATH, json=body, headers=replace_header(headers, "Host", "evil.example"))
    bare = deployment.bare.post(MCP_PATH, json=body, headers=replace_header(headers, "Host", "evil.example"))
    assert_same_refusal(bare, ours)
    assert ours.status_code == 421
    good = deployment.wrapped.post(MCP_PATH, json=body, headers=headers)
    assert good.json()["error"]["code"] == -32043  # with a proper Host, the middleware's own answer


# -- the server's JSON parser ---------------------------------------------------------------------------
#
# The middleware reads every body json.loads(bytes) reads (so that nothing the server reads passes as "not
# JSON"); the SDK's parsers read less: pydantic-core on the 2025 path, json.loads on 2026-07-28, called deeper
# in the stack, where Python's recursion limit leaves room for a nesting no copy could predict: past its own
# documented limit (MAX_DEPTH, pydantic-core's on the 2025 path) the middleware refuses every body, whatever
# its method, as the SDK does when a body is too deep for it. Each body goes, byte for byte, as tools/list to
# the SDK behind the middleware (forwarded untouched: its own answer) and as the session method, to the same
# middleware; for every body but the nested ones the bare server is asked too, and answers the same. "method"
# is written last, so a parser's message (a line and a column) is the same for both methods.

BOM = b"\xef\xbb\xbf"
CALLER_HEADER = "X-Caller"
RawBody = Callable[[str, int], bytes]  # (the request as JSON text, with "@" to replace; the limit) -> body


def nest(text: str, depth: int) -> bytes:
    """``text`` with ``"@"`` (a member of ``params``) replaced so that the body is ``depth`` deep."""
    return text.replace('"@"', "[" * (depth - 2) + "]" * (depth - 2)).encode()


RAW_BODIES: dict[str, RawBody] = {
    "utf-8": lambda text, limit: text.encode(),
    "utf-8-bom": lambda text, limit: BOM + text.encode(),
    "utf-16-le": lambda text, limit: text.encode("utf-16-le"),
    "utf-16-be": lambda text, limit: text.encode("utf-16-be"),
    "utf-16-with-bom": lambda text, limit: text.encode("utf-16"),
    "utf-32-le": lambda text, limit: text.encode("utf-32-le"),
    "utf-32-be": lambda text, limit: text.encode("utf-32-be"),
    "utf-32-with-bom": lambda text, limit: text.encode("utf-32"),
    "lone-surrogate-bytes": lambda text, limit: text.replace('"@"', '"\ud800"').encode("utf-8", "surrogatepass"),
    "lone-surrogate-escape": lambda text, limit: text.replace('"@"', '"\\ud800"').encode(),
    "nested-below-the-limit": lambda text, limit: nest(text, limit - 1),
    "nested-at-the-limit": nest,
    "nested-above-the-limit": lambda text, limit: nest(text, limit + 1),
}
# pydantic-core 2.50 (jiter) reads 201 levels, wherever it is called: the SDK's 2025-era limit.
LEGACY_NESTING_LIMIT = 202


def caller(scope: Scope) -> str | None:
    """The principal: the X-Caller header, so that each body has its own create limit."""
    return next((value.decode() for name, value in scope["headers"] if name == CALLER_HEADER.lower().encode()), None)


@pytest.fixture(scope="module")
def limited(deployment: Deployment) -> Iterator[LegacyClient]:
    """The SDK behind a middleware that creates at most one session per caller, ever; its transport session open."""
    app = MCPSessionMiddleware(sdk_app(deployment.mode), secret=SECRET, create_limit=(1, 86_400), principal=caller)
    with in_process(app) as http:
        client = LegacyClient(http, "")
        client.initialize()
        yield client


def written(era: Era, method: str, meta: dict[str, Any] | None, raw: RawBody, limit: int) -> tuple[Headers, bytes]:
    """A request of ``era`` whose body ``raw`` writes, with ``"@"`` in ``params`` and ``method`` last."""
    headers, body = envelope(era, method, meta)
    ordered = {"jsonrpc": "2.0", "id": body["id"], "params": {**body.get("params", {}), "note": "@"}, "method": method}
    return headers, raw(json.dumps(ordered), limit)


def the_sdks_answer(
    http: httpx.Client, era: Era, meta: dict[str, Any] | None, raw: RawBody, limit: int, session: str | None
) -> httpx.Response:
    """The SDK's own answer to ``tools/list`` in the body ``raw`` writes."""
    headers, body = written(era, "tools/list", meta, raw, limit)
    return send(http, era, headers, body, session)


def nesting_limit(http: httpx.Client, era: Era, session: str | None) -> int:
    """The shallowest body the SDK behind the middleware refuses as too deep."""
    low, high = 3, 3000
    while high - low > 1:
        middle = (low + high) // 2
        if accepted(the_sdks_answer(http, era, None, nest, middle, session)):
            low = middle
        else:
            high = middle
    return high


def nesting_limits(deployment: Deployment, era: Era) -> int:
    """The shallowest body that is too deep: pydantic-core's limit on 2025; past the middleware's documented
    limit on 2026-07-28, where the bare SDK's json.loads reads deeper (how deep depends on its stack)."""
    sdk_limit = nesting_limit(deployment.bare, era, deployment.transport_sessions["bare"])
    if era == "legacy":
        assert sdk_limit == LEGACY_NESTING_LIMIT
        return sdk_limit
    assert sdk_limit > MAX_DEPTH + 1
    return MAX_DEPTH + 1


def too_deep(name: str, ours: httpx.Response) -> bool:
    """Whether ``ours`` is the middleware's own refusal of a body past :data:`MAX_DEPTH`."""
    error = ours.json().get("error") or {}
    return name.startswith("nested") and (ours.status_code, error.get("code")) == (400, -32700)


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_sessions_create_is_refused_where_the_sdks_parser_refuses_the_body(
    deployment: Deployment, limited: LegacyClient, era: Era
) -> None:
    session = limited.transport_session_id
    limit = nesting_limits(deployment, era)
    refused = 0
    for name, raw in RAW_BODIES.items():
        theirs = the_sdks_answer(limited.http, era, None, raw, limit, session)
        if not name.startswith("nested"):
            bare_session = deployment.transport_sessions["bare"]
            bare = the_sdks_answer(deployment.bare, era, None, raw, limit, bare_session)
            assert (bare.status_code, bare.content) == (theirs.status_code, theirs.content), name
        headers, body = written(era, "sessions/create", None, raw, limit)
        this_caller = (CALLER_HEADER, f"{deployment.mode}-{era}-{name}")
        ours = send(limited.http, era, [*headers, this_caller], body, session)
        headers, well_formed = envelope("modern", "sessions/create", None)
        again = limited.http.post(MCP_PATH, json=well_formed, headers=[*headers, this_caller])
        if accepted(theirs) and not too_deep(name, ours):
            assert ours.status_code == 200, (name, ours.text)
            assert "sessionId" in ours.json()["result"]["session"], (name, ours.text)
            assert again.status_code == 429, name  # the caller's one create is spent: the check sees a create
            continue
        refused += 1
        if not accepted(theirs):
            assert_same_refusal(theirs, ours)
        assert b"sessionId" not in ours.content, name
        assert again.status_code == 200, f"{name}: a refused sessions/create spent the caller's one create"
    assert refused == (11 if era == "legacy" else 2)  # 2026-07-28 reads every encoding json.loads reads


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_sessions_delete_is_refused_where_the_sdks_parser_refuses_the_body(deployment: Deployment, era: Era) -> None:
    http, session = deployment.wrapped, deployment.transport_sessions["wrapped"]
    limit = nesting_limits(deployment, era)
    for name, raw in RAW_BODIES.items():
        meta = new_session(http)
        theirs = the_sdks_answer(http, era, meta, raw, limit, session)
        headers, content = written(era, "sessions/delete", meta, raw, limit)
        ours = send(http, era, headers, content, session)
        if accepted(theirs) and not too_deep(name, ours):
            assert ours.status_code == 200, (name, ours.text)
            assert "error" not in ours.json(), (name, ours.text)
            continue
        if not accepted(theirs):
            assert_same_refusal(theirs, ours)
        assert deleted(http, meta), name  # refused: the session is still there
