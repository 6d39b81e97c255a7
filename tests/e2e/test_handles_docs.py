"""Every Python snippet of docs/handles.md runs: complete apps are used in process, fragments are checked."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mcp_types import CallToolResult, TextContent
from starlette.testclient import TestClient

from _docs import exec_snippet, one_with, python_snippets
from _lifespan import sdk_client
from _mcp import LOCAL, ModernClient, session_meta, tool_text
from conftest import SECRET
from mcp_sessions import KeySet
from mcp_sessions.handles import HandleKind, Handles
from mcp_sessions.stores import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = python_snippets("docs/handles.md")


def load(snippet: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("MCP_SESSIONS_SECRET", SECRET)
    return exec_snippet(snippet, "docs/handles.md")


def by_server_name(name: str) -> str:
    return one_with(SNIPPETS, f'MCPServer("{name}")')


def first_text(result: CallToolResult) -> str:
    """The text of a tool result's first content, which is text for the basket's tools."""
    content = result.content[0]
    assert isinstance(content, TextContent), content
    return content.text


def test_the_quoted_snippet_is_examples_basket_line_for_line() -> None:
    example = (ROOT / "examples" / "basket.py").read_text()
    for line in filter(None, (line.strip() for line in one_with(SNIPPETS, 'create="create_basket")').splitlines())):
        assert line in example, line


def test_the_session_version(monkeypatch: pytest.MonkeyPatch) -> None:
    app = load(by_server_name("basket-with-a-session"), monkeypatch)["app"]
    with TestClient(app, base_url=LOCAL) as http:
        client = ModernClient(http, LOCAL)
        session = session_meta(client.create_session())
        counts = [tool_text(client.call_tool("add_item", {"item": i}, session=session)[1]) for i in ("a", "b")]
        assert counts == ["1", "2"]
        assert tool_text(client.call_tool("checkout", session=session)[1]) == "a,b"
        assert client.call_tool("add_item", {"item": "c"})[1]["error"]["code"] == -32044  # no session


@pytest.mark.anyio
async def test_the_handles_version(monkeypatch: pytest.MonkeyPatch) -> None:
    app = load(by_server_name("basket-with-handles"), monkeypatch)["app"]
    async with sdk_client(app) as client:
        basket = first_text(await client.call_tool("create_basket", {}))
        for item in ("a", "b"):
            await client.call_tool("add_item", {"basket": basket, "item": item})
        assert first_text(await client.call_tool("checkout", {"basket": basket})) == "a,b"
        refused = await client.call_tool("add_item", {"basket": basket, "item": "c"})
        assert refused.is_error and "has ended" in first_text(refused)


def test_both_a_handle_tied_to_a_session_ends_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    app = load(by_server_name("baskets-in-a-session"), monkeypatch)["app"]
    with TestClient(app, base_url=LOCAL) as http:
        client = ModernClient(http, LOCAL)
        session = session_meta(client.create_session())
        tied = tool_text(client.call_tool("create_basket", session=session)[1])
        free = tool_text(client.call_tool("create_basket")[1])
        for basket in (tied, free):
            assert tool_text(client.call_tool("add_item", {"basket": basket, "item": "a"})[1]) == "1"
        client.request("sessions/delete", session=session)
        result = client.call_tool("add_item", {"basket": tied, "item": "b"})[1]["result"]
        assert result["isError"] is True and "its session ended" in result["content"][0]["text"]
        assert tool_text(client.call_tool("add_item", {"basket": free, "item": "b"})[1]) == "2"


def test_the_integration_snippet(monkeypatch: pytest.MonkeyPatch) -> None:
    snippet = one_with(SNIPPETS, "call_with_handle_check")
    guarded = load(snippet, monkeypatch)["call_with_handle_check"]
    kind = HandleKind("basket", prefix="bsk")
    handles = Handles(KeySet.from_secret(SECRET), MemoryStore(), kinds=[kind])
    reached: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        from mcp_sessions.handles import current_handle_context

        context = current_handle_context()
        reached.append(None if context is None else list(context.verified.values()))

    async def scenario() -> list[Any]:
        token = await handles.mint(kind, principal=None)
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        for value in (token, token[:10] + ("B" if token[10] != "B" else "C") + token[11:]):
            message = {"id": 7, "params": {"name": "t", "arguments": {"basket": value}}}
            await guarded(app, handles, message, None, {}, None, send)
        return sent

    sent = asyncio.run(scenario())
    assert len(reached) == 1 and reached[0][0].kind == "basket"
    answer = json.loads(sent[1]["body"])
    assert answer["id"] == 7 and answer["result"]["isError"] is True
