"""The draft's session errors under both code sets (``error_codes=``), straight through the middleware;
and the "required" message of a request whose host named a conversation, with conversation data off."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from ._direct import JSON, Downstream, call, dumps, http_scope, middleware

pytestmark = pytest.mark.anyio

TOOL = {"name": "count", "arguments": {}}
SESSIONLESS = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": TOOL}
UNKNOWN = {**SESSIONLESS, "params": {**TOOL, "_meta": {"io.modelcontextprotocol/session": {"sessionId": "sess-x"}}}}


@pytest.mark.parametrize(
    ("error_codes", "not_found", "required"), [("seeds", -32043, -32044), ("spec-safe", -32012, -32013)]
)
async def test_the_draft_answers_its_errors_with_the_chosen_codes(
    error_codes: str, not_found: int, required: int
) -> None:
    app = Downstream()
    mw = middleware(app, require_session=True, error_codes=error_codes)

    refused = (await call(mw, dumps(SESSIONLESS))).json()["error"]
    gone = (await call(mw, dumps(UNKNOWN))).json()["error"]

    assert (refused["code"], gone["code"]) == (required, not_found)
    assert refused["message"].startswith("Session required: call sessions/create")
    assert gone["message"].startswith("Session not found: the session ended or is not this caller's; call ")
    assert app.calls == 0


def host_request(**meta: Any) -> bytes:
    return dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**TOOL, "_meta": meta}})


@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
async def test_a_host_id_with_data_off_is_told_how_to_turn_it_on(traced: bool) -> None:
    options: dict[str, Any] = {"tracer_provider": TracerProvider()} if traced else {}
    mw = middleware(Downstream(), require_session_tools={"count"}, **options)

    error = (await call(mw, host_request(**{"openai/session": "v1/conv-1"}))).json()["error"]

    assert error["code"] == -32044
    assert error["message"] == (
        "Session required: conversation data is off, so the host's conversation id (openai) names this "
        'conversation in traces only; to keep data per conversation set conversation_data="anonymous" or '
        '"principal" (MCP_SESSIONS_CONVERSATION_DATA); or call sessions/create and send its sessionId in '
        'params._meta["io.modelcontextprotocol/session"]'
    )


async def test_a_host_id_in_a_header_is_told_too_and_a_request_without_one_is_not() -> None:
    mw = middleware(Downstream(), require_session_tools={"count"})
    scope = http_scope(headers=[*JSON, (b"agent-session-id", b"goose-1")])

    goose = (await call(mw, host_request(), scope)).json()["error"]["message"]
    plain = (await call(mw, host_request())).json()["error"]["message"]

    assert "conversation id (goose)" in goose
    assert "MCP_SESSIONS_CONVERSATION_DATA" in goose
    assert "conversation data" not in plain
    assert plain.startswith("Session required: call sessions/create")
