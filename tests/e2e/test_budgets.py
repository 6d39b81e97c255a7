"""What one caller can make the store keep without a token of its own is bounded, on memory, SQLite and Redis.

Through real servers (uvicorn on 127.0.0.1, the real MCPServer): the quickstart with
``conversation_data="anonymous"``, and a basket server with handles. Property tests
(hypothesis, derandomized, bounded) send made-up host conversations and handle mints
from a few callers, each a loopback address of its own, and check every answer
against a model of the budget, then the store's size, then that a caller from
elsewhere is unaffected.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from typing import Annotated, Any

import httpx
import pytest
from examples.quickstart import build_app
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp

from _backends import STORES, Backend, client_from, closing_store, new_address, open_backend
from _mcp import SESSION_REQUIRED, ModernClient, tool_text
from conftest import SECRET, serve
from mcp_sessions import KeySet, MCPSessionMiddleware
from mcp_sessions.handles import Handle, HandleKind, HandleMiddleware, Handles

TOO_MANY = -32011
BUDGET = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
MOST_CONVERSATIONS = 2
MOST_HANDLES = 2
BASKET = HandleKind("basket", prefix="bsk", create="create_basket")


@pytest.fixture(scope="module", params=STORES)
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with open_backend(request.param, tmp_path_factory.mktemp(request.param)) as opened:
        yield opened


# -- made-up host conversations -----------------------------------------------------------------------------


class Quickstart:
    """The quickstart with anonymous conversation data on ``backend``'s store, and what one conversation stores."""

    def __init__(self, url: str, backend: Backend) -> None:
        self.url = url
        self.backend = backend
        with client_from(new_address()) as http:
            before = backend.footprint()
            assert count(http, url, "conversation-to-measure") == 1
            assert count(http, url, "conversation-to-measure") == 2
            self.per_conversation = backend.footprint() - before


def count(http: Any, url: str, conversation: str) -> int | str:
    """Call the quickstart's ``count`` in ChatGPT's ``conversation``: the count, or the error's message."""
    _, message = ModernClient(http, url).call_tool("count", meta={"openai/session": conversation})
    if "error" in message:
        assert message["error"]["code"] == SESSION_REQUIRED, message
        return str(message["error"]["message"])
    return int(tool_text(message))


@pytest.fixture(scope="module")
def quickstart(backend: Backend) -> Iterator[Quickstart]:
    environ = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_CONVERSATION_DATA": "anonymous"}
    store = backend.open()
    app = build_app(
        json_response=True,
        environ=environ,
        store=store,
        idle_ttl=3600,  # every first request of a conversation writes its idle clock: the most a store is asked
        max_conversations_per_caller=MOST_CONVERSATIONS,
    )
    with serve(closing_store(app, store)) as url:
        yield Quickstart(url, backend)


# Each step: which of three callers sends it, and which conversation (an index into that caller's own ids:
# most steps make one up, some come back to one already used).
conversation_steps = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5)), min_size=1, max_size=12)


@given(steps=conversation_steps)
@BUDGET
def test_made_up_conversations_get_data_only_within_their_callers_budget(
    quickstart: Quickstart, steps: list[tuple[int, int]]
) -> None:
    before = quickstart.backend.footprint()
    example = uuid.uuid4().hex  # conversation ids of this example's own
    callers = [client_from(new_address()) for _ in range(3)]
    admitted: list[dict[str, int]] = [{}, {}, {}]  # per caller: its conversations with data, and their counts
    with contextlib.ExitStack() as stack:
        for http in callers:
            stack.enter_context(http)
        for caller, pick in steps:
            conversation = f"made-up-{example}-{caller}-{pick}"
            answered = count(callers[caller], quickstart.url, conversation)
            counts = admitted[caller]
            if conversation in counts or len(counts) < MOST_CONVERSATIONS:
                counts[conversation] = counts.get(conversation, 0) + 1
                assert answered == counts[conversation], (caller, conversation, answered)
            else:  # one more new conversation: no data, and the error says why
                assert isinstance(answered, str), (caller, conversation, answered)
                assert re.search(rf"already has {MOST_CONVERSATIONS} conversations with data.*retry in \d+ s", answered)
        # Someone else, from elsewhere, is never turned away.
        with client_from(new_address()) as elsewhere:
            assert count(elsewhere, quickstart.url, f"legitimate-{example}") == 1
    stored = quickstart.backend.footprint() - before
    started = sum(len(counts) for counts in admitted) + 1
    assert stored <= started * quickstart.per_conversation, (stored, started, quickstart.per_conversation)


# -- handle mints -------------------------------------------------------------------------------------------------


def basket_server(handles: Handles) -> ASGIApp:
    """``create_basket`` (the kind's own ``create`` tool) and ``gift_basket`` (another tool that mints one)."""
    mcp = MCPServer("baskets")

    @mcp.tool()
    async def create_basket() -> str:
        """An empty basket's handle."""
        return await handles.mint(BASKET)

    @mcp.tool()
    async def gift_basket(item: str) -> str:
        """A basket with ``item`` already in it."""
        return await handles.mint(BASKET, data={"items": [item]})

    @mcp.tool()
    async def add_item(basket: Annotated[Handle, BASKET], item: str) -> str:
        """Add an item; how many the basket holds."""
        items = await basket.data.update("items", lambda items: [*items, item], default=[])
        return str(len(items))

    app: ASGIApp = mcp.streamable_http_app(streamable_http_path="/mcp", json_response=True)
    return app


@pytest.fixture(scope="module", params=["session middleware", "handle middleware"])
def baskets(request: pytest.FixtureRequest, backend: Backend) -> Iterator[tuple[str, Backend, int]]:
    keys, store = KeySet.from_secret(SECRET), backend.open()
    handles = Handles(keys, store, kinds=[BASKET], max_handles_per_caller=MOST_HANDLES)
    inner = basket_server(handles)
    app: ASGIApp
    if request.param == "session middleware":
        app = MCPSessionMiddleware(inner, keys=keys, store=store, handles=handles)
    else:
        app = HandleMiddleware(inner, handles=handles)
    with serve(closing_store(app, store)) as url, client_from(new_address()) as http:
        before = backend.footprint()
        response, _ = mint(http, url, "gift_basket")
        assert response.status_code == 200
        yield url, backend, backend.footprint() - before  # what one basket with an item stores


def mint(http: Any, url: str, tool: str) -> tuple[httpx.Response, dict[str, Any]]:
    arguments = {"item": "tea"} if tool == "gift_basket" else {}
    return ModernClient(http, url).call_tool(tool, arguments)


@given(steps=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["create_basket", "gift_basket"])), max_size=10))
@BUDGET
def test_handle_mints_stop_at_their_callers_maximum(
    baskets: tuple[str, Backend, int], steps: list[tuple[int, str]]
) -> None:
    url, backend, per_basket = baskets
    before = backend.footprint()
    callers = [client_from(new_address()) for _ in range(3)]
    minted = [0, 0, 0]
    with contextlib.ExitStack() as stack:
        for http in callers:
            stack.enter_context(http)
        for caller, tool in steps:
            response, message = mint(callers[caller], url, tool)
            if minted[caller] < MOST_HANDLES:
                minted[caller] += 1
                assert response.status_code == 200, message
                assert not message["result"]["isError"], message
                assert re.fullmatch(BASKET.pattern, tool_text(message))
            elif tool == "create_basket":  # the kind's create tool: refused before it runs, like a create
                assert response.status_code == 429, message
                assert int(response.headers["retry-after"]) > 0, message
                assert message["error"]["code"] == TOO_MANY
                assert "holds 2 live handles" in message["error"]["message"]
            else:  # any other tool that mints: its mint raises, answered by the SDK as the same error
                assert message["error"]["code"] == TOO_MANY, message
                assert re.search(r"no handle was created: .*retry in \d+ s", message["error"]["message"])
                assert message["error"]["data"]["retryAfter"] > 0
        with client_from(new_address()) as elsewhere:
            response, message = mint(elsewhere, url, "gift_basket")
            assert response.status_code == 200, message
            assert not message["result"]["isError"], message
    # A gift basket holds data; a bare one holds nothing until it is used.
    assert backend.footprint() - before <= (sum(minted) + 1) * per_basket
