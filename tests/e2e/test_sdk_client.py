"""The real mcp 2.3 client through the middleware, in process (its HTTP through httpx2.ASGITransport), in both eras.

Without sessions the middleware must be invisible. With sessions, the SDK client over real HTTP is
tests/e2e/test_interop.py's matrix (count, state, progress, delete, refused after delete, -32044 without a
session, each era and response mode); its refusals are rows of tests/e2e/test_attacks.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from examples.quickstart import build_app, build_server
from mcp.client.client import ConnectMode

from _lifespan import sdk_client
from _mcp import LEGACY, MCP_PATH, MODERN, SERVER_INFO_KEY, SESSIONS_EXTENSION
from conftest import SECRET

pytestmark = pytest.mark.anyio

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}
QUICKSTART_TOOLS = ["count", "whoami", "set_mode", "get_mode", "countdown"]
QUICKSTART_INFO = {"name": "quickstart", "version": ""}


@pytest.fixture(params=["json", "sse"])
def app(request: pytest.FixtureRequest) -> Any:
    """The quickstart (stateful legacy path) in either response mode."""
    return build_app(json_response=request.param == "json", environ=ENVIRON)


@pytest.fixture(params=["auto", "legacy"])
def mode(request: pytest.FixtureRequest) -> ConnectMode:
    mode: ConnectMode = request.param
    return mode


# -- without sessions: invisible ------------------------------------------------------------


async def test_listing_and_sessionless_tools_match_the_bare_server(app: Any, mode: ConnectMode) -> None:
    """It connects in the era ``mode`` asks for, advertising sessions; the rest is the bare server's."""
    bare_app = build_server().streamable_http_app(streamable_http_path=MCP_PATH, json_response=True)
    async with sdk_client(bare_app, mode) as bare, sdk_client(app, mode) as wrapped:
        assert wrapped.protocol_version == (MODERN if mode == "auto" else LEGACY)
        assert wrapped.server_info is not None
        assert wrapped.server_info.name == "quickstart"
        capabilities = wrapped.server_capabilities
        if mode == "auto":
            assert capabilities.extensions == {SESSIONS_EXTENSION: {}}
        else:
            assert capabilities.experimental == {"sessions": {}}
        assert capabilities.tools is not None
        bare_tools = await bare.list_tools()
        wrapped_tools = await wrapped.list_tools()
        bare_whoami = await bare.call_tool("whoami", {})
        wrapped_whoami = await wrapped.call_tool("whoami", {})
        bare_prompts = await bare.list_prompts()
        wrapped_prompts = await wrapped.list_prompts()

    assert [tool.name for tool in wrapped_tools.tools] == QUICKSTART_TOOLS
    assert wrapped_tools.model_dump() == bare_tools.model_dump()
    assert wrapped_whoami.structured_content == {"result": "none"}
    assert wrapped_whoami.model_dump() == bare_whoami.model_dump()
    assert wrapped_prompts.model_dump() == bare_prompts.model_dump()
    assert wrapped_whoami.meta == ({SERVER_INFO_KEY: QUICKSTART_INFO} if mode == "auto" else None)
