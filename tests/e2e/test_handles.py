"""Handles through real servers and the real SDK client, in JSON and SSE response modes.

The basket example (examples/basket.py), in process (no socket is what these test): the
basket cycle (create, add, checkout, ended after it) is docs/handles.md's snippet (below); here
independence, every refused handle answered as a tool error
that names the problem (the tool never runs, the basket is untouched),
principal binding with Starlette's authentication, telemetry, and fastmcp; and every snippet of docs/handles.md.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Annotated, Any, cast

import httpx
import pytest
from examples.basket import BASKET, build_app, build_server
from fastmcp import FastMCP
from mcp import Client
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.testclient import TestClient

from _docs import ROOT, exec_snippet, snippet_with
from _lifespan import running, sdk_client
from _mcp import (
    LOCAL,
    LegacyClient,
    ModernClient,
    legacy_request,
    modern_headers,
    modern_request,
    session_meta,
    tool_text,
)
from _otel import recording_provider
from _users import signed_in
from conftest import SECRET
from mcp_sessions import KeySet, MCPSessionMiddleware
from mcp_sessions.handles import Handle, HandleKind, HandleMiddleware, Handles, current_handle_context
from mcp_sessions.handles._middleware import ATTRIBUTE_ID, ATTRIBUTE_KIND
from mcp_sessions.stores import MemoryStore

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}


@pytest.fixture(params=["json", "sse"])
def app(request: pytest.FixtureRequest) -> Any:
    return build_app(json_response=request.param == "json", environ=ENVIRON)


async def call(client: Client, tool: str, *, refused: bool = False, **arguments: Any) -> str:
    """The text of the tool's answer, a result (or, ``refused``, a tool error)."""
    result = await client.call_tool(tool, arguments)
    [content] = result.content
    assert content.type == "text"
    assert result.is_error is refused, content.text
    return content.text


# -- the basket cycle ------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_two_baskets_are_independent(app: Any) -> None:
    async with sdk_client(app) as client:
        first, second = await call(client, "create_basket"), await call(client, "create_basket")
        assert first != second
        assert re.fullmatch(BASKET.pattern, first)  # the text is the handle, nothing else
        await call(client, "add_item", basket=first, item="a")
        await call(client, "add_item", basket=second, item="x")
        await call(client, "add_item", basket=first, item="b")
        assert await call(client, "checkout", basket=second) == "x"
        assert await call(client, "add_item", basket=first, item="c") == "3"
        assert await call(client, "checkout", basket=first) == "a,b,c"


@pytest.mark.anyio
async def test_the_input_schema_shows_the_handle_pattern_and_a_description(app: Any) -> None:
    async with sdk_client(app) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    for name in ("add_item", "checkout"):
        schema = tools[name].input_schema["properties"]["basket"]
        assert schema["type"] == "string"
        assert schema["pattern"] == BASKET.pattern
        assert "create_basket" in schema["description"]


# -- refused handles ----------------------------------------------------------------------------------------------


def one_changed(handle: str, position: int) -> str:
    replacement = "B" if handle[position] != "B" else "C"
    return handle[:position] + replacement + handle[position + 1 :]


@pytest.mark.anyio
async def test_every_refused_handle_is_a_tool_error_naming_the_problem(app: Any) -> None:
    offline = Handles(KeySet.from_secret(SECRET), MemoryStore(), kinds=[BASKET])  # mints what the server's key signs
    async with sdk_client(app) as client:
        basket = await call(client, "create_basket")
        assert await call(client, "add_item", basket=basket, item="kept") == "1"
        checked_out = await call(client, "create_basket")
        await call(client, "checkout", basket=checked_out)
        cases = {
            "never issued or was mistyped": [one_changed(basket, p) for p in (4, 20, 37)]
            + ["bsk_" + "Q" * 34 + "A", "bsk_" + "abcdefghijklmnopqrstuvwxyz012345678A"[:35]],
            "incomplete or mistyped": [basket[:-1], basket + "A"],
            "has ended": [checked_out],
            "expired at": [await offline.mint(BASKET, ttl=1, now=time.time() - 60)],
        }
        for problem, values in cases.items():
            for value in values:
                for tool, arguments in (("add_item", {"item": "intruder"}), ("checkout", {})):
                    text = await call(client, tool, refused=True, basket=value, **arguments)
                    assert problem in text, (value, text)
                    assert "create_basket" in text
                    assert value[4:] not in text
                    assert basket[4:] not in text
        # Nothing reached the tools: the basket holds what it held.
        assert await call(client, "add_item", basket=basket, item="next") == "2"
        assert await call(client, "checkout", basket=basket) == "kept,next"


def test_a_refusal_is_answered_by_the_middleware_as_json_in_both_eras(app: Any) -> None:
    bad = "bsk_" + "Q" * 34 + "A"
    with TestClient(app, base_url=LOCAL) as http:
        modern = ModernClient(http, LOCAL)
        response, message = modern.call_tool("add_item", {"basket": bad, "item": "x"})
        assert (response.status_code, response.headers["content-type"]) == (200, "application/json")
        assert message["result"]["isError"] is True
        assert message["result"]["resultType"] == "complete"
        legacy = LegacyClient(http, LOCAL)
        legacy.initialize()
        body = legacy_request("tools/call", {"name": "checkout", "arguments": {"basket": bad}}, id="x-1")
        response = legacy.post(body)
        assert response.headers["content-type"] == "application/json"
        message = response.json()
        assert message["id"] == "x-1"
        assert message["result"]["isError"] is True
        assert "resultType" not in message["result"]
        # A client that accepts only a stream is refused as the SDK refuses it (406), before any answer of ours.
        response = legacy.post(body, Accept="text/event-stream")
        assert response.status_code == 406
        # In a transport session the server does not hold: the server's own refusal (404), not the isError result.
        outside = http.post(legacy.url, json=body, headers={**legacy.headers(), "Mcp-Session-Id": "not-a-session"})
        assert outside.status_code == 404


def sdk_behind(middleware: str) -> Any:
    """The basket tools on the bare SDK app (stateless, JSON), behind one of the middlewares or none."""
    keys, store = KeySet.from_secret(SECRET), MemoryStore()
    handles = Handles(keys, store, kinds=[BASKET])
    server = build_server(handles)
    sdk = server.streamable_http_app(streamable_http_path="/mcp", json_response=True, stateless_http=True)
    if middleware == "sessions":
        return MCPSessionMiddleware(sdk, keys=keys, store=store, path="/mcp", handles=handles)
    return HandleMiddleware(sdk, handles=handles) if middleware == "handles" else sdk


@pytest.mark.anyio
@pytest.mark.parametrize("version", [None, ""], ids=["absent", "empty"])
async def test_the_protocol_version_header_picks_the_sdks_path_through_either_middleware(version: str | None) -> None:
    """An absent ``Mcp-Protocol-Version`` is the SDK's 2025 path; an empty one, like any non-2025 value, its 2026 one.

    On the 2026-07-28 path the SDK answers an empty header with -32020 (it does not match the envelope), a
    code of that path only. The session middleware answers as the SDK does before any answer of its own;
    HandleMiddleware runs none of the server's checks and answers the refusal as a 2026-07-28 result.
    """
    body = modern_request("tools/call", {"name": "add_item", "arguments": {"basket": "bsk_" + "Q" * 34 + "A"}})
    headers = modern_headers(body)
    if version is None:
        del headers["Mcp-Protocol-Version"]
    else:
        headers["Mcp-Protocol-Version"] = version
    answers: dict[str, tuple[int, dict[str, Any]]] = {}
    for middleware in ("none", "sessions", "handles"):
        app = sdk_behind(middleware)  # in process: what is tested is the answer, not the socket
        async with running(app), httpx.AsyncClient(transport=httpx.ASGITransport(app)) as http:
            response = await http.post("http://127.0.0.1:8000/mcp", json=body, headers=headers)
            answers[middleware] = response.status_code, response.json()
    if version is None:  # the 2025 path: the tool's typed parameter refuses it, as the middlewares do first
        for status, message in answers.values():
            assert status == 200
            assert message["result"]["isError"] is True
            assert "resultType" not in message["result"]
        return
    status, message = answers["none"]
    assert (status, message["error"]["code"]) == (400, -32020)
    assert answers["sessions"] == answers["none"]
    status, message = answers["handles"]
    assert status == 200
    assert message["result"]["isError"] is True
    assert message["result"]["resultType"] == "complete"


# -- principals ---------------------------------------------------------------------------------------------------


def authenticated_app() -> tuple[Starlette, InMemorySpanExporter]:
    store = MemoryStore()
    handles = Handles(KeySet.from_secret(SECRET), store, kinds=[BASKET])
    server = build_server(handles)
    mcp_app = server.streamable_http_app(streamable_http_path="/mcp", json_response=True)
    provider, exporter = recording_provider()
    inner = Middleware(HandleMiddleware, handles=handles, tracer_provider=provider)
    return signed_in(server, mcp_app, inner, store=store, path="/mcp", tracer_provider=provider), exporter


def text_of(message: dict[str, Any]) -> tuple[bool, str]:
    result = message["result"]
    return result["isError"], result["content"][0]["text"]


def test_a_handle_used_by_another_principal_is_refused() -> None:
    app, exporter = authenticated_app()
    with TestClient(app, base_url=LOCAL) as http:
        client = ModernClient(http, LOCAL)
        basket = text_of(client.call_tool("create_basket", x_user="alice")[1])[1]
        assert text_of(client.call_tool("add_item", {"basket": basket, "item": "a"}, x_user="alice")[1]) == (False, "1")
        for intruder in ({"x_user": "bob"}, {}):
            is_error, text = text_of(client.call_tool("add_item", {"basket": basket, "item": "b"}, **intruder)[1])
            assert is_error
            assert "belongs to another user" in text
            is_error, text = text_of(client.call_tool("checkout", {"basket": basket}, **intruder)[1])
            assert is_error
            assert "belongs to another user" in text
        # An anonymous basket is anyone's who holds it.
        open_basket = text_of(client.call_tool("create_basket")[1])[1]
        assert text_of(client.call_tool("add_item", {"basket": open_basket, "item": "z"}, x_user="bob")[1]) == (
            False,
            "1",
        )
        assert text_of(client.call_tool("checkout", {"basket": basket}, x_user="alice")[1]) == (False, "a")

    spans = [span for span in exporter.get_finished_spans() if span.name == "mcp_sessions.handles.check"]
    assert spans, "no handle check span"
    for span in spans:
        attributes = dict(span.attributes or {})
        assert attributes[ATTRIBUTE_KIND] == ("basket",)
        [handle_id] = cast(tuple[str, ...], attributes[ATTRIBUTE_ID])  # the span records the ids as strings
        assert len(handle_id) == 16
        assert basket[4:] not in str(attributes)
        assert open_basket[4:] not in str(attributes)
    reasons = {dict(span.attributes or {}).get("mcp_sessions.handle.error") for span in spans}
    assert reasons == {None, "other_principal"}
    # The span that was current when the check ran (the session middleware's request span) has them too.
    request_spans = [
        span
        for span in exporter.get_finished_spans()
        if span.name.startswith("tools/call")
        and span.instrumentation_scope
        and span.instrumentation_scope.name == "mcp_sessions"
    ]
    with_handles = [span for span in request_spans if ATTRIBUTE_KIND in (span.attributes or {})]
    assert len(with_handles) == len(spans)
    assert len(request_spans) == len(spans) + 2  # two create_basket calls
    for span in with_handles:
        assert any(check.parent is not None and check.parent.span_id == span.context.span_id for check in spans)


# -- fastmcp --------------------------------------------------------------------------------------------------------

CART = HandleKind("cart", prefix="crt")


def fastmcp_app(handles: Handles, **http_options: Any) -> HandleMiddleware:
    mcp = FastMCP("carts")

    @mcp.tool
    async def create_cart() -> str:
        """A new cart's handle."""
        return await handles.mint(CART)

    @mcp.tool
    async def put(cart: Annotated[Handle, CART], item: str) -> str:
        """Put an item in a cart; returns the count and what the tool received."""
        items = await cart.data.update("items", lambda items: [*items, item], default=[])
        return f"{len(items)} {type(cart).__name__} {cart.kind}"

    @mcp.tool
    def peek(cart: Annotated[Handle, CART]) -> str:
        """A sync tool: the cart's stable id."""
        return cart.id

    return HandleMiddleware(mcp.http_app(path="/mcp", **http_options), handles=handles)


@pytest.mark.parametrize("options", [{}, {"stateless_http": True, "json_response": True}], ids=["sse", "json"])
@pytest.mark.anyio
async def test_fastmcp_tools_take_typed_handles(options: dict[str, Any]) -> None:
    handles = Handles(KeySet.from_secret(SECRET), MemoryStore(), kinds=[CART])
    async with sdk_client(fastmcp_app(handles, **options)) as client:
        schema = {t.name: t for t in (await client.list_tools()).tools}["put"].input_schema
        assert schema["properties"]["cart"]["pattern"] == CART.pattern
        cart = await call(client, "create_cart")
        assert await call(client, "put", cart=cart, item="a") == "1 Handle cart"
        assert await call(client, "put", cart=cart, item="b") == "2 Handle cart"
        assert len(await call(client, "peek", cart=cart)) == 16
        assert "never issued" in await call(client, "put", refused=True, cart=one_changed(cart, 10), item="c")
        # Not handle-shaped, so the pre-call scan leaves it to the typed parameter, which refuses it too.
        text = await call(client, "put", refused=True, cart="crt_ with spaces", item="c")
        assert "incomplete or mistyped" in text
        assert "with spaces" not in text
        assert await call(client, "put", cart=cart, item="c") == "3 Handle cart"


# -- docs/handles.md: every snippet runs --------------------------------------------------------------------------

PAGE = "docs/handles.md"


def load(name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The app of the docs/handles.md snippet that names ``MCPServer(name)``, run as printed."""
    monkeypatch.setenv("MCP_SESSIONS_SECRET", SECRET)
    return exec_snippet(snippet_with(PAGE, f'MCPServer("{name}")'), PAGE)["app"]


def test_the_quoted_snippet_is_examples_basket_line_for_line() -> None:
    example = (ROOT / "examples" / "basket.py").read_text()
    for line in filter(None, (line.strip() for line in snippet_with(PAGE, 'create="create_basket")').splitlines())):
        assert line in example, line


def test_the_session_version(monkeypatch: pytest.MonkeyPatch) -> None:
    with TestClient(load("basket-with-a-session", monkeypatch), base_url=LOCAL) as http:
        client = ModernClient(http, LOCAL)
        session = session_meta(client.create_session())
        counts = [tool_text(client.call_tool("add_item", {"item": i}, session=session)[1]) for i in ("a", "b")]
        assert counts == ["1", "2"]
        assert tool_text(client.call_tool("checkout", session=session)[1]) == "a,b"
        assert client.call_tool("add_item", {"item": "c"})[1]["error"]["code"] == -32044  # no session


@pytest.mark.anyio
async def test_the_handles_version(monkeypatch: pytest.MonkeyPatch) -> None:
    async with sdk_client(load("basket-with-handles", monkeypatch)) as client:
        basket = await call(client, "create_basket")
        for item in ("a", "b"):
            await call(client, "add_item", basket=basket, item=item)
        assert await call(client, "checkout", basket=basket) == "a,b"
        assert "has ended" in await call(client, "add_item", refused=True, basket=basket, item="c")


def test_both_a_handle_tied_to_a_session_ends_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with TestClient(load("baskets-in-a-session", monkeypatch), base_url=LOCAL) as http:
        client = ModernClient(http, LOCAL)
        session = session_meta(client.create_session())
        tied = tool_text(client.call_tool("create_basket", session=session)[1])
        free = tool_text(client.call_tool("create_basket")[1])
        for basket in (tied, free):
            assert tool_text(client.call_tool("add_item", {"basket": basket, "item": "a"})[1]) == "1"
        client.request("sessions/delete", session=session)
        result = client.call_tool("add_item", {"basket": tied, "item": "b"})[1]["result"]
        assert result["isError"] is True
        assert "its session ended" in result["content"][0]["text"]
        assert tool_text(client.call_tool("add_item", {"basket": free, "item": "b"})[1]) == "2"


def test_the_integration_snippet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SESSIONS_SECRET", SECRET)
    guarded = exec_snippet(snippet_with(PAGE, "call_with_handle_check"), PAGE)["call_with_handle_check"]
    kind = HandleKind("basket", prefix="bsk")
    handles = Handles(KeySet.from_secret(SECRET), MemoryStore(), kinds=[kind])
    reached: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        context = current_handle_context()
        reached.append(None if context is None else list(context.verified.values()))

    async def scenario() -> list[Any]:
        token = await handles.mint(kind, principal=None)
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        for value in (token, one_changed(token, 10)):
            message = {"id": 7, "params": {"name": "t", "arguments": {"basket": value}}}
            await guarded(app, handles, message, None, {}, None, send)
        return sent

    sent = asyncio.run(scenario())
    assert len(reached) == 1
    assert reached[0][0].kind == "basket"
    answer = json.loads(sent[1]["body"])
    assert answer["id"] == 7
    assert answer["result"]["isError"] is True
