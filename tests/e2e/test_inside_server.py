"""The wrapped server decides: its own auth, allowed hosts and endpoints, for every session method (issue 21).

Each app here is wrapped the way users wrap one, ``MCPSessionMiddleware(app, secret=...)``,
with no other option: the middleware finds the MCP endpoint inside the app and
does its session work there, inside the server's authentication and routing.
Real ``MCPServer`` apps and the SDK's own bearer auth, called in process with raw HTTP requests. A foreign
Host or Origin is a row of tests/e2e/test_guard_differential.py (both eras, both transports); a session created
anonymously and used once signed in, docs/security.md's snippet in either order (test_docs.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from mcp import types
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError, BaseUser, SimpleUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse
from starlette.routing import Host, Mount, Route, Router

from _mcp import (
    LEGACY,
    MODERN,
    SESSION_KEY,
    SESSION_NOT_FOUND,
    LegacyClient,
    ModernClient,
    answer,
    era_post,
    era_request,
    era_session,
    jwt_claims,
    legacy_request,
    modern_headers,
    modern_request,
    session_meta,
    tool_text,
)
from _users import HeaderUser, User, bearer_auth
from _waits import WITHIN
from conftest import SECRET, in_process, serve
from mcp_sessions import MCPSessionMiddleware, get_session


def notes_server(**options: Any) -> MCPServer:
    server = MCPServer("inside", **options)

    @server.tool()
    async def note(text: str = "") -> str:
        """Append to this session's notes; answer them all (or "none" without a session)."""
        session = get_session()
        if session is None:
            return "none"
        if text:
            await session.data.set("notes", [*(await session.data.get("notes") or []), text])
        return json.dumps(await session.data.get("notes") or [])

    return server


def tool(era: str, text: str, session: str | None) -> Any:
    meta = {} if session is None else {SESSION_KEY: {"sessionId": session}}
    return era_request(era, "tools/call", {"name": "note", "arguments": {"text": text}}, **meta)


def delete(era: str, session: str) -> Any:
    return era_request(era, "sessions/delete", **{SESSION_KEY: {"sessionId": session}})


def bearer(user: str | None) -> dict[str, str]:
    return {} if user is None else {"Authorization": f"Bearer {user}-token"}


# -- the SDK's own bearer auth -----------------------------------------------------------------------


def explicitly_placed() -> Starlette:
    """The explicit form (docs/deployment.md): the app built from the SDK's public classes, the middleware
    around the transport inside the route's ``RequireAuthMiddleware``, as ``streamable_http_app()`` builds it."""
    options = bearer_auth()
    server, auth = notes_server(**options), options["auth"]
    server.streamable_http_app(stateless_http=True, json_response=True)  # builds server.session_manager
    sessions = MCPSessionMiddleware(StreamableHTTPASGIApp(server.session_manager), secret=SECRET)
    metadata = build_resource_metadata_url(auth.resource_server_url)
    return Starlette(
        routes=[Route("/mcp", RequireAuthMiddleware(sessions, auth.required_scopes, metadata))],
        middleware=[
            Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(options["token_verifier"])),
            Middleware(AuthContextMiddleware),
        ],
        lifespan=lambda app: server.session_manager.run(),
    )


@pytest.fixture(scope="module", params=["found", "explicit"])
def authed(request: pytest.FixtureRequest) -> Iterator[httpx.Client]:
    if request.param == "explicit":
        app: Any = explicitly_placed()
    else:
        app = MCPSessionMiddleware(
            notes_server(**bearer_auth()).streamable_http_app(stateless_http=True, json_response=True), secret=SECRET
        )
    with in_process(app) as http:
        yield http


@pytest.mark.parametrize("era", [MODERN, LEGACY])
@pytest.mark.parametrize("credentials", [None, "Bearer nobody-token", "Basic YWxpY2U6eA=="])
def test_the_servers_auth_refuses_every_session_method_as_it_refuses_a_tool(
    authed: httpx.Client, era: str, credentials: str | None
) -> None:
    alices = era_session(authed, "/mcp", era, **bearer("alice"))
    headers = {} if credentials is None else {"Authorization": credentials}
    refused = era_post(authed, "/mcp", era, tool(era, "x", None), **headers)
    assert refused.status_code == 401
    for body in [era_request(era, "sessions/create"), delete(era, alices), delete(era, "x")]:
        response = era_post(authed, "/mcp", era, body, **headers)
        assert (response.status_code, response.content) == (refused.status_code, refused.content), body
        assert response.headers.get("www-authenticate") == refused.headers.get("www-authenticate")
    # The unauthenticated delete ended nothing: alice's session is still hers.
    kept = era_post(authed, "/mcp", era, tool(era, "still here", alices), **bearer("alice"))
    assert json.loads(tool_text(answer(kept))) == ["still here"]


@pytest.mark.parametrize("era", [MODERN, LEGACY])
def test_a_session_belongs_to_the_principal_the_server_authenticated(authed: httpx.Client, era: str) -> None:
    alices = era_session(authed, "/mcp", era, **bearer("alice"))
    assert "pbh" in jwt_claims(alices)  # bound with no principal= hook written
    era_post(authed, "/mcp", era, tool(era, "alice's secret", alices), **bearer("alice"))
    stolen = answer(era_post(authed, "/mcp", era, tool(era, "", alices), **bearer("bob")))
    unknown = answer(era_post(authed, "/mcp", era, tool(era, "", alices[:-4] + "AAAA"), **bearer("bob")))
    assert stolen["error"]["code"] == SESSION_NOT_FOUND
    assert stolen["error"]["message"] == unknown["error"]["message"]  # the same answer as for an unknown session
    deleted = answer(era_post(authed, "/mcp", era, delete(era, alices), **bearer("bob")))
    assert deleted["error"]["code"] == SESSION_NOT_FOUND
    mine = answer(era_post(authed, "/mcp", era, tool(era, "", alices), **bearer("alice")))
    assert json.loads(tool_text(mine)) == ["alice's secret"]


# -- allowed hosts: the server's own ---------------------------------------------------------------


@pytest.mark.parametrize("era", [MODERN, LEGACY])
def test_a_public_host_server_gets_sessions_with_no_option(era: str) -> None:
    server = notes_server()
    app = MCPSessionMiddleware(server.streamable_http_app(host="0.0.0.0", stateless_http=True), secret=SECRET)
    with in_process(app) as http:
        public = {"Host": "mcp.example.com", "Origin": "https://chat.example"}
        session = era_session(http, "/mcp", era, **public)
        answered = era_post(http, "/mcp", era, tool(era, "hi", session), **public)
        assert json.loads(tool_text(answer(answered))) == ["hi"]


@pytest.mark.parametrize("era", [MODERN, LEGACY])
def test_the_servers_body_limit_refuses_session_methods_as_it_refuses_a_tool(era: str) -> None:
    server = notes_server()
    app = MCPSessionMiddleware(
        server.streamable_http_app(stateless_http=True, max_request_body_size=2048), secret=SECRET
    )
    with in_process(app) as http:
        padding = {"padding": "x" * 4096}
        refused = era_post(http, "/mcp", era, era_request(era, "tools/call", {"name": "note", **padding}))
        created = era_post(http, "/mcp", era, era_request(era, "sessions/create", padding))
        assert refused.status_code == 413
        assert (created.status_code, created.content) == (refused.status_code, refused.content)
        assert era_session(http, "/mcp", era)  # a body within the server's limit still gets a session


# -- endpoints: every routing Starlette offers, and no session across them (issue 36, items 1-2) -------------


ALICE = {"X-User": "alice"}


def two_servers(*, one_middleware: bool, by_hand: bool = False) -> Starlette:
    servers = [notes_server(), notes_server()]
    apps: list[Any] = [s.streamable_http_app(stateless_http=True) for s in servers]
    if not one_middleware:
        apps = [MCPSessionMiddleware(a, secret=SECRET) for a in apps]
    if by_hand:  # each placed at its endpoint by hand (docs/deployment.md), with the SDK's public classes
        apps = [
            Router([Route("/mcp", MCPSessionMiddleware(StreamableHTTPASGIApp(s.session_manager), secret=SECRET))])
            for s in servers
        ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for server in servers:
                await stack.enter_async_context(server.session_manager.run())
            yield

    parent = Starlette(routes=[Mount("/a", apps[0]), Mount("/b", apps[1])], lifespan=lifespan)
    return MCPSessionMiddleware(parent, secret=SECRET) if one_middleware else parent  # type: ignore[return-value]


def tenant_app(server: MCPServer, routes: list[Any]) -> Starlette:
    return Starlette(routes=routes, lifespan=lambda app: server.session_manager.run())


def templated_mount() -> MCPSessionMiddleware:
    server = notes_server()
    app = tenant_app(server, [Mount("/{tenant}", server.streamable_http_app(stateless_http=True, json_response=True))])
    return MCPSessionMiddleware(app, secret=SECRET)


def host_route() -> MCPSessionMiddleware:
    """A server behind a ``Host`` route, beside another endpoint."""
    hosted, other = notes_server(), notes_server()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with hosted.session_manager.run(), other.session_manager.run():
            yield

    routes = [
        Mount("/other", other.streamable_http_app(stateless_http=True, json_response=True)),
        Host("127.0.0.1", hosted.streamable_http_app(stateless_http=True, json_response=True)),
    ]
    return MCPSessionMiddleware(Starlette(routes=routes, lifespan=lifespan), secret=SECRET)


def routers() -> MCPSessionMiddleware:
    """Routers inside routers, and two routes to one transport."""
    server = notes_server()
    transport = server.streamable_http_app(stateless_http=True, json_response=True)
    inner = Router(routes=[Mount("/v1", routes=[Mount("/deep", transport)])])
    return MCPSessionMiddleware(tenant_app(server, [Mount("/api", inner), Mount("/alias", transport)]), secret=SECRET)


FOUND = "the session work runs at the MCP endpoints /mcp, /other/mcp"  # what the middleware found, said


@pytest.mark.parametrize(
    ("build", "home", "away", "said"),
    [
        pytest.param(partial(two_servers, one_middleware=True), "/a/mcp", "/b/mcp", "", id="one-middleware"),
        pytest.param(partial(two_servers, one_middleware=False), "/a/mcp", "/b/mcp", "", id="one-each"),
        pytest.param(partial(two_servers, one_middleware=False, by_hand=True), "/a/mcp", "/b/mcp", "", id="by-hand"),
        pytest.param(templated_mount, "/t2/mcp", "/t1/mcp", "", id="templated-mount"),
        pytest.param(host_route, "/mcp", "/other/mcp", FOUND, id="host-route"),
        pytest.param(routers, "/api/v1/deep/mcp", "/alias/mcp", "", id="routers-inside-routers"),
        pytest.param(routers, "/alias/mcp", "/api/v1/deep/mcp", "", id="two-routes-to-one-transport"),
    ],
)
def test_a_session_is_bound_to_the_endpoint_it_was_minted_at(
    caplog: pytest.LogCaptureFixture, build: Callable[[], Any], home: str, away: str, said: str
) -> None:
    """Elsewhere it is not found, cannot be deleted, and its id in the ``Mcp-Session-Id`` header attaches nothing."""
    with caplog.at_level(logging.INFO, logger="mcp_sessions"):
        app = build()
    assert said in caplog.text
    with in_process(app) as http:
        session = era_session(http, home, MODERN)
        at_home = answer(era_post(http, home, MODERN, tool(MODERN, "mine", session)))
        assert json.loads(tool_text(at_home)) == ["mine"]
        elsewhere = answer(era_post(http, away, MODERN, tool(MODERN, "theirs", session)))
        assert elsewhere["error"]["code"] == SESSION_NOT_FOUND
        gone = answer(era_post(http, away, MODERN, delete(MODERN, session)))
        assert gone["error"]["code"] == SESSION_NOT_FOUND
        by_header = era_post(http, away, MODERN, tool(MODERN, "", None), **{"Mcp-Session-Id": session})
        assert tool_text(answer(by_header)) == "none"
        again = answer(era_post(http, home, MODERN, tool(MODERN, "", session)))
        assert json.loads(tool_text(again)) == ["mine"]


def test_the_same_app_cannot_get_two_session_middlewares() -> None:
    app = notes_server().streamable_http_app()
    MCPSessionMiddleware(app, secret=SECRET)
    with pytest.raises(ValueError, match="already has an MCPSessionMiddleware"):
        MCPSessionMiddleware(app, secret=SECRET)


# -- FastAPI with its own authentication --------------------------------------------------------------------


class BearerOrAnonymous(AuthenticationBackend):
    """The app's own auth: a known bearer signs in, none is anonymous, an unknown one is refused (400)."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
        header = conn.headers.get("authorization")
        if header is None:
            return None
        user = {"Bearer alice-token": "alice", "Bearer bob-token": "bob"}.get(header)
        if user is None:
            raise AuthenticationError("unknown bearer")
        return AuthCredentials(["authenticated"]), SimpleUser(user)


def test_fastapi_with_its_own_auth_decides_for_the_session_methods() -> None:
    server = notes_server()
    api = FastAPI(lifespan=lambda app: server.session_manager.run())
    api.mount("/", server.streamable_http_app(stateless_http=True, json_response=True))
    api.add_middleware(MCPSessionMiddleware, secret=SECRET)
    api.add_middleware(AuthenticationMiddleware, backend=BearerOrAnonymous())
    with in_process(api) as http:
        endpoint = "/mcp"
        forged = {"Authorization": "Bearer mallory-token"}
        refused = era_post(http, endpoint, MODERN, tool(MODERN, "x", None), **forged)
        created = era_post(http, endpoint, MODERN, era_request(MODERN, "sessions/create"), **forged)
        assert refused.status_code == 400
        assert (created.status_code, created.content) == (refused.status_code, refused.content)
        alices = era_session(http, endpoint, MODERN, **bearer("alice"))
        assert "pbh" in jwt_claims(alices)
        era_post(http, endpoint, MODERN, tool(MODERN, "hers", alices), **bearer("alice"))
        stolen = answer(era_post(http, endpoint, MODERN, tool(MODERN, "", alices), **bearer("bob")))
        assert stolen["error"]["code"] == SESSION_NOT_FOUND
        mine = answer(era_post(http, endpoint, MODERN, tool(MODERN, "", alices), **bearer("alice")))
        assert json.loads(tool_text(mine)) == ["hers"]


# -- principals: never a field a user chooses (issue 36, item 3) -------------------------------------------


class NumberedUsers(AuthenticationBackend):
    """``X-User: 7 Alice`` signs in user 7, who calls themselves Alice."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        number, _, name = conn.headers.get("x-user", "").partition(" ")
        return None if not number else (AuthCredentials(["authenticated"]), User(int(number), name))


def test_two_users_who_share_a_display_name_never_share_a_session() -> None:
    server = notes_server()
    app = Starlette(
        routes=[Mount("/", server.streamable_http_app(stateless_http=True, json_response=True))],
        middleware=[Middleware(AuthenticationMiddleware, backend=NumberedUsers())],
        lifespan=lambda app: server.session_manager.run(),
    )
    with in_process(MCPSessionMiddleware(app, secret=SECRET)) as http:
        endpoint = "/mcp"
        victims = era_session(http, endpoint, MODERN, **{"X-User": "7 Alice"})
        era_post(http, endpoint, MODERN, tool(MODERN, "hers", victims), **{"X-User": "7 Alice"})
        stolen = answer(era_post(http, endpoint, MODERN, tool(MODERN, "", victims), **{"X-User": "8 Alice"}))
        assert stolen["error"]["code"] == SESSION_NOT_FOUND
        mine = answer(era_post(http, endpoint, MODERN, tool(MODERN, "", victims), **{"X-User": "7 Someone else"}))
        assert json.loads(tool_text(mine)) == ["hers"]


# -- ordinary routes read a session once the app's auth has run (issue 36, item 4) -------------------------


async def status(request: Request) -> PlainTextResponse:
    """An ordinary route that writes to the caller's session: what fixation would hand an attacker."""
    session = get_session(request)
    if session is None:
        return PlainTextResponse("none")
    await session.data.set("notes", ["written by the route"])
    return PlainTextResponse(session.id)


@pytest.mark.parametrize("sessions_first", [True, False], ids=["sessions-outer", "auth-outer"])
def test_an_ordinary_route_gets_the_signed_in_users_session_and_never_an_anonymous_one(sessions_first: bool) -> None:
    server = notes_server()
    middleware = [
        Middleware(MCPSessionMiddleware, secret=SECRET),
        Middleware(AuthenticationMiddleware, backend=HeaderUser()),
    ]
    app = Starlette(
        routes=[
            Route("/status", status),
            Mount("/", server.streamable_http_app(stateless_http=True, json_response=True)),
        ],
        middleware=middleware if sessions_first else middleware[::-1],
        lifespan=lambda app: server.session_manager.run(),
    )
    with in_process(app) as http:
        attackers = era_session(http, "/mcp", MODERN)
        fixed = http.get("/status", headers={"Mcp-Session-Id": attackers, **ALICE})
        assert fixed.text == "none"
        assert tool_text(answer(era_post(http, "/mcp", MODERN, tool(MODERN, "", attackers)))) == "[]"
        alices = era_session(http, "/mcp", MODERN, **ALICE)
        assert http.get("/status", headers={"Mcp-Session-Id": alices, **ALICE}).text == jwt_claims(alices)["sid"]
        assert http.get("/status", headers={"Mcp-Session-Id": alices}).text == "none"
        assert http.get("/status", headers={"Mcp-Session-Id": attackers}).text == jwt_claims(attackers)["sid"]


def test_a_custom_route_behind_the_sdks_bearer_auth_sees_the_users_bound_session() -> None:
    server = notes_server(**bearer_auth())
    server.custom_route("/status", methods=["GET"])(status)
    app = MCPSessionMiddleware(server.streamable_http_app(stateless_http=True, json_response=True), secret=SECRET)
    with in_process(app) as http:
        alices = era_session(http, "/mcp", MODERN, **bearer("alice"))
        seen = http.get("/status", headers={"Mcp-Session-Id": alices, **bearer("alice")})
        assert seen.text == jwt_claims(alices)["sid"]
        assert http.get("/status", headers={"Mcp-Session-Id": alices, **bearer("bob")}).text == "none"


def test_a_server_behind_an_app_that_is_not_starlettes_is_asked_through_it_and_the_outer_form_is_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No endpoint can be found inside a dispatcher of one's own: the outer form, said once; the server behind
    it still judges every request the middleware answers itself (its loopback Host check, here)."""
    server = notes_server()
    transport = server.streamable_http_app(stateless_http=True, json_response=True)

    async def dispatch(scope: Any, receive: Any, send: Any) -> None:
        await transport(scope, receive, send)

    with caplog.at_level(logging.WARNING, logger="mcp_sessions"):
        app = MCPSessionMiddleware(dispatch, secret=SECRET, path="/mcp")
    assert "found no MCP endpoint inside function, so the session methods are answered in front" in caplog.text
    with in_process(app) as http:  # the lifespan goes through the dispatcher to the server's app
        body = modern_request("sessions/create")
        foreign = http.post("/mcp", json=body, headers={**modern_headers(body), "Host": "evil.example"})
        assert (foreign.status_code, foreign.text) == (421, "Invalid Host header")
        assert "sessionId" in answer(era_post(http, "/mcp", MODERN, body))["result"]["session"]


def lowlevel_app(*, stateless: bool) -> Starlette:
    """The ``mcp`` SDK's low-level ``Server`` behind its own ``StreamableHTTPSessionManager``, mounted by a
    function, as the SDK's low-level examples serve one: its ``count`` tool counts in the session it reads."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="count", input_schema={"type": "object"})])

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        session = get_session()
        counted = -1 if session is None else await session.data.incr("n")
        return types.CallToolResult(content=[types.TextContent(type="text", text=str(counted))])

    manager = StreamableHTTPSessionManager(
        app=Server("low", on_list_tools=list_tools, on_call_tool=call_tool), stateless=stateless, json_response=True
    )

    async def handle(scope: Any, receive: Any, send: Any) -> None:
        await manager.handle_request(scope, receive, send)

    return Starlette(routes=[Mount("/mcp", app=handle)], lifespan=lambda app: manager.run())


@pytest.mark.parametrize("stateless", [False, True], ids=["stateful", "stateless"])
def test_a_lowlevel_server_behind_its_own_session_manager_counts_in_a_session_on_both_wires(
    caplog: pytest.LogCaptureFixture, stateless: bool
) -> None:
    """A handler mounted by a function is no endpoint the middleware can find: the outer form, said once, and the
    tool's ``get_session()`` sees the session on both wires. The clients follow ``/mcp`` to ``/mcp/``, where
    ``Mount`` serves it, as the SDK's client does."""
    with caplog.at_level(logging.WARNING, logger="mcp_sessions"):
        app = MCPSessionMiddleware(lowlevel_app(stateless=stateless), secret=SECRET)
    assert "found no MCP endpoint inside Starlette, so the session methods are answered in front" in caplog.text
    with in_process(app, follow_redirects=True) as http:
        modern = ModernClient(http, "")
        legacy = LegacyClient(http, "")
        legacy.initialize()
        for client in (modern, legacy):
            session = session_meta(client.create_session())
            assert [tool_text(client.call_tool("count", session=session)[1]) for _ in range(2)] == ["1", "2"]


def test_the_http_sse_transport_of_2024_gets_no_session_and_its_answers_as_bare() -> None:
    """The transport before Streamable HTTP (``sse_app()``: ``GET /sse``, ``POST /messages/``) answers every
    POST 202 and sends the answers on the stream, so the server's answer to the probe is the one the client
    gets for ``sessions/create``: "method not found". No session is handed out; tools answer as bare."""
    server = notes_server()
    app = MCPSessionMiddleware(server.sse_app(), secret=SECRET)

    async def scenario(url: str) -> None:
        async with httpx.AsyncClient(timeout=10) as http, http.stream("GET", url + "/sse") as stream:
            lines = stream.aiter_lines()
            endpoint = url + await _next_data(lines)

            async def answer(body: dict[str, Any]) -> Any:
                posted = await http.post(endpoint, json=body)
                assert posted.status_code == 202, posted.text
                return json.loads(await _next_data(lines))

            hello = {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}
            assert "result" in await answer(legacy_request("initialize", hello, id=0))
            initialized = await http.post(endpoint, json=legacy_request("notifications/initialized", id=None))
            assert initialized.status_code == 202
            created = await answer(legacy_request("sessions/create", id=1))
            assert (created["id"], created["error"]["code"]) == (1, -32601), created
            called = await answer(legacy_request("tools/call", {"name": "note", "arguments": {}}, id=2))
            assert tool_text(called) == "none"

    with serve(app) as url:  # a GET stream open while POSTs answer on it: a real server
        asyncio.run(asyncio.wait_for(scenario(url), WITHIN))


async def _next_data(lines: AsyncIterator[str]) -> str:
    """The next SSE event's data."""
    async for line in lines:
        if line.startswith("data:"):
            return line[5:].strip()
    raise AssertionError("the stream ended")
