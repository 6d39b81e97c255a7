"""A fourth session source, added exactly as docs/architecture.md says, sees every request shape.

The toy source names a session by a custom header (``X-Toy-Conversation``). It
is one class and one entry in ``sources=``; nothing else of the package changes.
Called in process (no socket changes what it reads), it must give the tool its session (``get_session()``)
on the usual JSON request, on an SSE response, on the 2025 handshake wire and on
the 2026-07-28 wire, and with an OpenTelemetry SDK recording, where the call's
span is named by it.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from mcp.server.mcpserver import MCPServer
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind
from starlette.types import Scope

from _mcp import LegacyClient, ModernClient, tool_text
from _otel import recording_provider
from conftest import SECRET, in_process
from mcp_sessions import MCPSessionMiddleware, Session, get_session
from mcp_sessions.sources import DEFAULT_SOURCES, CallView, RequestView, SourceContext

HEADER = b"x-toy-conversation"


class ToySource:
    """A session named by the ``X-Toy-Conversation`` header: the client's word, kept by its digest."""

    name = "toy"

    def __init__(self, context: SourceContext) -> None:
        self._sessions = context.sessions
        self._digests = context.digests

    async def session_for(self, scope: Scope, call: CallView, request: RequestView) -> Session | None:
        raw = request.headers.get(HEADER)
        if raw is None:
            return None  # not mine: the next source is asked
        session_id = self._digests.conversation(self.name, raw.decode("latin-1"), None)
        return await self._sessions.adopt(scope, session_id, self.name)


def build(
    *, json_response: bool, stateless: bool, tracer_provider: TracerProvider | None = None
) -> MCPSessionMiddleware:
    server = MCPServer("toy-source")

    @server.tool()
    async def who() -> str:
        """Which source named this call's session, and a counter kept in its data."""
        session = get_session()
        if session is None:
            return "none"
        return f"{session.source}:{await session.data.incr('calls')}"

    app = server.streamable_http_app(streamable_http_path="/mcp", json_response=json_response, stateless_http=stateless)
    return MCPSessionMiddleware(
        app, secret=SECRET, sources=[*DEFAULT_SOURCES, ToySource], tracer_provider=tracer_provider
    )


SHAPES = [
    pytest.param(True, "2026-07-28", id="json-2026"),
    pytest.param(False, "2026-07-28", id="sse-2026"),
    pytest.param(True, "2025", id="json-2025"),
    pytest.param(False, "2025", id="sse-2025"),
]


def who(http: httpx.Client, era: str, conversation: str | None) -> str:
    client = LegacyClient(http, "") if era == "2025" else ModernClient(http, "")
    headers: dict[str, Any] = {} if conversation is None else {"X_Toy_Conversation": conversation}
    return tool_text(client.call_tool("who", **headers)[1])


@pytest.mark.parametrize(("json_response", "era"), SHAPES)
def test_the_toy_source_names_the_session_on_every_request_shape(json_response: bool, era: str) -> None:
    with in_process(build(json_response=json_response, stateless=True)) as http:
        assert who(http, era, "a") == "toy:1"
        assert who(http, era, "a") == "toy:2"  # the same conversation: its data kept
        assert who(http, era, "b") == "toy:1"  # another one: its own
        assert who(http, era, None) == "none"  # no header: no source claims the call


@pytest.mark.parametrize(("json_response", "era"), SHAPES)
def test_with_an_sdk_recording_the_span_is_named_by_the_toy_session(json_response: bool, era: str) -> None:
    provider, exporter = recording_provider()
    with in_process(build(json_response=json_response, stateless=True, tracer_provider=provider)) as http:
        assert who(http, era, "traced") == "toy:1"
    [span] = [s for s in exporter.get_finished_spans() if s.name == "tools/call who" and s.kind is SpanKind.SERVER]
    attributes = dict(span.attributes or {})
    assert attributes["mcp_sessions.session.source"] == "toy"
    assert str(attributes["session.id"]).startswith("cv-")  # the digest, never the header's value
    assert "traced" not in str(attributes)
