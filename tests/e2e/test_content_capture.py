"""Content capture, end to end: a tools/call span carries its arguments and result, redacted and bounded.

Through a real MCPServer in process, in JSON and SSE answers, with the OpenTelemetry SDK's
in-memory exporter: with ``capture_content=True`` the middleware's span has the GenAI attributes and
the ones Phoenix and MLflow show as input and output; without it, none of them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from examples.quickstart import SESSION_TOOLS, build_server

from _mcp import MCP_PATH, SESSION_KEY, ModernClient, session_meta
from _otel import MIDDLEWARE_SCOPE, SpanLog, attrs, by_request_id, span_strings
from conftest import SECRET, in_process
from mcp_sessions import MCPSessionMiddleware

CAPTURED = (
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "input.value",
    "input.mime_type",
    "output.value",
    "output.mime_type",
)
BOUND = 4096
HANDLE = "bsk_" + "Q" * 34 + "E"  # the handle shape (handles/_format.py), as a tool might return one


def app(*, json_response: bool, capture_content: bool) -> MCPSessionMiddleware:
    server = build_server()

    @server.tool()
    async def repeat(text: str) -> str:
        """Answer the text, and a handle: what a careless tool might put in its result."""
        return f"you said {text}; your basket is {HANDLE}"

    inner = server.streamable_http_app(streamable_http_path=MCP_PATH, json_response=json_response)
    return MCPSessionMiddleware(
        inner, secret=SECRET, require_session_tools=SESSION_TOOLS, capture_content=capture_content
    )


def calls(span_log: SpanLog, mode: str, *, capture_content: bool) -> dict[str, dict[str, Any]]:
    """A session's calls whose arguments and results name its tokens (none in any span), answered in ``mode``: the
    span attributes by request id."""
    with in_process(app(json_response=mode == "json", capture_content=capture_content)) as http:
        client = ModernClient(http, "")
        span_log.clear()
        token = client.create_session()["sessionId"]
        _, set_mode = client.call_tool("set_mode", {"mode": "terse"}, session=session_meta(token), id="mode")
        state = set_mode["result"]["_meta"][SESSION_KEY]["state"]
        _, repeated = client.call_tool(
            "repeat",
            {"text": f"my token is {token} and my state {state}"},
            session=session_meta(token, state=state),
            id="r",
        )
        assert HANDLE in json.dumps(repeated["result"])  # the client gets the handle: only the span must not
        client.call_tool("repeat", {"text": "é" * 5000}, session=session_meta(token, state=state), id="big")
        finished = span_log.wait_middleware(4)
    secrets = [token, token.rsplit(".", 1)[1], state, state.rsplit(".", 1)[1], HANDLE]
    for span in finished:
        for text in span_strings(span):
            for secret in secrets:
                assert secret not in text, f"a bearer value in span {span.name!r}: {text!r}"
    return {rid: attrs(by_request_id(finished, MIDDLEWARE_SCOPE, rid)) for rid in ("mode", "r", "big")}


@pytest.mark.parametrize("mode", ["json", "sse"])
def test_with_capture_a_tool_call_span_shows_its_arguments_and_result_redacted(span_log: SpanLog, mode: str) -> None:
    spans = calls(span_log, mode, capture_content=True)

    repeated = spans["r"]
    assert json.loads(repeated["gen_ai.tool.call.arguments"]) == {
        "text": "my token is [redacted] and my state [redacted]"
    }
    # The result as a person reads it (its text), not the envelope: no isError, resultType or _meta (the echo).
    assert (
        repeated["gen_ai.tool.call.result"]
        == "you said my token is [redacted] and my state [redacted]; your basket is [redacted]"
    )
    assert repeated["input.value"] == repeated["gen_ai.tool.call.arguments"]
    assert repeated["output.value"] == repeated["gen_ai.tool.call.result"]
    assert repeated["input.mime_type"] == "application/json"
    assert repeated["output.mime_type"] == "text/plain"
    assert json.loads(spans["mode"]["gen_ai.tool.call.arguments"]) == {"mode": "terse"}

    big = spans["big"]
    for name in ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result"):
        assert len(str(big[name]).encode()) <= BOUND
        assert str(big[name]).endswith("…[truncated]")
    assert big["input.mime_type"] == big["output.mime_type"] == "text/plain"


@pytest.mark.parametrize("mode", ["json", "sse"])
def test_without_capture_no_span_has_content(span_log: SpanLog, mode: str) -> None:
    spans = calls(span_log, mode, capture_content=False)

    for span in spans.values():
        assert not set(CAPTURED) & set(span)
