"""The real mcp 2.3 client through the middleware, in process (its HTTP through httpx2.ASGITransport), in both eras.

Without sessions the middleware must be invisible; with sessions, a client that
knows nothing of them but can send a custom request and ``meta=`` gets the whole
feature.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from examples.quickstart import build_app, build_server
from mcp.client.client import ConnectMode
from mcp.shared.exceptions import MCPError

from _lifespan import sdk_client
from _mcp import (
    INVALID_REQUEST,
    LEGACY,
    MCP_PATH,
    MODERN,
    SERVER_INFO_KEY,
    SESSION_KEY,
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    SESSIONS_EXTENSION,
    CreateSessionRequest,
    CreateSessionResult,
    DeleteSessionRequest,
    DeleteSessionResult,
    create_session,
    jwt_claims,
    sdk_meta,
    sdk_session_meta,
)
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


async def test_connects_in_the_expected_era(app: Any, mode: ConnectMode) -> None:
    async with sdk_client(app, mode) as client:
        assert client.protocol_version == (MODERN if mode == "auto" else LEGACY)
        assert client.server_info is not None
        assert client.server_info.name == "quickstart"
        capabilities = client.server_capabilities
        if mode == "auto":
            assert capabilities.extensions == {SESSIONS_EXTENSION: {}}
        else:
            assert capabilities.experimental == {"sessions": {}}
        assert capabilities.tools is not None


async def test_listing_and_sessionless_tools_match_the_bare_server(app: Any, mode: ConnectMode) -> None:
    bare_app = build_server().streamable_http_app(streamable_http_path=MCP_PATH, json_response=True)
    async with sdk_client(bare_app, mode) as bare, sdk_client(app, mode) as wrapped:
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


async def test_required_tool_without_session_raises_session_required(app: Any, mode: ConnectMode) -> None:
    async with sdk_client(app, mode) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("count", {})

    assert raised.value.code == SESSION_REQUIRED
    assert raised.value.data == {"create": "sessions/create"}


# -- with sessions ----------------------------------------------------------------------------


async def test_create_and_count_with_the_echo(app: Any, mode: ConnectMode) -> None:
    async with sdk_client(app, mode) as client:
        session = await create_session(client)
        other = await create_session(client)
        results = [
            await client.call_tool("count", {}, meta=sdk_session_meta(session)),
            await client.call_tool("count", {}, meta=sdk_session_meta(session)),
            await client.call_tool("count", {}, meta=sdk_session_meta(other)),
        ]
        whoami = await client.call_tool("whoami", {}, meta=sdk_session_meta(session))

    assert [r.structured_content for r in results] == [{"result": 1}, {"result": 2}, {"result": 1}]
    echo = {"sessionId": session["sessionId"], "expiresAt": session["expiresAt"]}
    expected_meta = {SESSION_KEY: echo, SERVER_INFO_KEY: QUICKSTART_INFO} if mode == "auto" else {SESSION_KEY: echo}
    assert results[0].meta == expected_meta
    assert results[2].meta is not None
    assert results[2].meta[SESSION_KEY]["sessionId"] == other["sessionId"]
    assert whoami.structured_content == {"result": jwt_claims(session["sessionId"])["sid"]}


async def test_state_round_trip(app: Any, mode: ConnectMode) -> None:
    async with sdk_client(app, mode) as client:
        session = await create_session(client)
        set_mode = await client.call_tool("set_mode", {"mode": "terse"}, meta=sdk_session_meta(session))
        assert set_mode.meta is not None
        state = set_mode.meta[SESSION_KEY]["state"]
        get_mode = await client.call_tool("get_mode", {}, meta=sdk_session_meta(session, state))
        without_state = await client.call_tool("get_mode", {}, meta=sdk_session_meta(session))

    assert get_mode.structured_content == {"result": "terse"}
    assert without_state.structured_content == {"result": "unset"}


async def test_progress_callback_and_echo_together(mode: ConnectMode) -> None:
    reported: list[tuple[float, float | None, str | None]] = []

    # The parameter names are the SDK's (ProgressFnT): a callback may be called with them as keywords.
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total, message))

    async with sdk_client(build_app(json_response=False, environ=ENVIRON), mode) as client:
        session = await create_session(client)
        result = await client.call_tool(
            "countdown", {"n": 2}, progress_callback=on_progress, meta=sdk_session_meta(session)
        )

    assert reported == [(1, 2, "1 to go"), (2, 2, "0 to go")]
    assert result.structured_content == {"result": "done"}
    assert result.meta is not None
    assert result.meta[SESSION_KEY]["sessionId"] == session["sessionId"]


async def test_delete_then_the_session_is_gone(app: Any, mode: ConnectMode) -> None:
    async with sdk_client(app, mode) as client:
        session = await create_session(client)
        await client.call_tool("count", {}, meta=sdk_session_meta(session))
        deleted = await client.session.send_request(
            DeleteSessionRequest(params=types.RequestParams(_meta=sdk_session_meta(session))), DeleteSessionResult
        )
        with pytest.raises(MCPError) as after_delete:
            await client.call_tool("count", {}, meta=sdk_session_meta(session))
        with pytest.raises(MCPError) as deleted_twice:
            await client.session.send_request(
                DeleteSessionRequest(params=types.RequestParams(_meta=sdk_session_meta(session))), DeleteSessionResult
            )

    assert deleted.meta is None
    assert after_delete.value.code == SESSION_NOT_FOUND
    assert after_delete.value.data == {"sessionId": session["sessionId"][:256]}
    assert deleted_twice.value.code == SESSION_NOT_FOUND


async def test_unknown_session_raises_session_not_found(app: Any, mode: ConnectMode) -> None:
    async with sdk_client(app, mode) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("whoami", {}, meta=sdk_meta({SESSION_KEY: {"sessionId": "sess-invalid"}}))

    assert raised.value.code == SESSION_NOT_FOUND
    assert raised.value.data == {"sessionId": "sess-invalid"}


async def test_create_with_session_metadata_raises_invalid_request(app: Any, mode: ConnectMode) -> None:
    async with sdk_client(app, mode) as client:
        session = await create_session(client)
        with pytest.raises(MCPError) as raised:
            await client.session.send_request(
                CreateSessionRequest(params=types.RequestParams(_meta=sdk_session_meta(session))), CreateSessionResult
            )

    assert raised.value.code == INVALID_REQUEST
