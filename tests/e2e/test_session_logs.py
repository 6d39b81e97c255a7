"""SessionLogFilter: every log record of a request names its conversation, through uvicorn and a real MCPServer.

The filter sits on a handler of the root logger (and of ``uvicorn.access``,
which does not propagate), as ``docs/observability.md`` configures it; the
server runs in uvicorn's thread, so the records come from there: the tool's,
the SDK's, the middleware's, uvicorn's access line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from examples.quickstart import SESSION_TOOLS, build_server

from _mcp import MCP_PATH, LegacyClient, ModernClient, jwt_claims, session_meta, tool_text
from conftest import SECRET, serve
from mcp_sessions import MCPSessionMiddleware, SessionLogFilter

TOOL_LOGGER = "tests.session_logs.tool"


@dataclass
class Records(logging.Handler):
    """Keeps every record it is handed (after its filters ran)."""

    kept: list[logging.LogRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(logging.DEBUG)

    def __hash__(self) -> int:  # a Handler is kept in sets and weak references
        return id(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.kept.append(record)

    def of(self, name: str) -> list[logging.LogRecord]:
        return [record for record in self.kept if record.name == name]


def logging_app(**options: Any) -> MCPSessionMiddleware:
    server = build_server()

    @server.tool()
    async def note(text: str) -> str:
        """Log ``text`` through the standard logging module, as application code does."""
        logging.getLogger(TOOL_LOGGER).info("note: %s", text)
        return "noted"

    inner = server.streamable_http_app(streamable_http_path=MCP_PATH, json_response=True)
    return MCPSessionMiddleware(inner, secret=SECRET, require_session_tools=SESSION_TOOLS, **options)


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    with serve(logging_app()) as plain, serve(logging_app(conversation_data="anonymous")) as hosts:
        yield {"plain": plain, "hosts": hosts}


@pytest.fixture
def records() -> Iterator[Records]:
    """Every record logged while the test runs, at DEBUG, with the filter on the handler."""
    handler = Records()
    handler.addFilter(SessionLogFilter())
    root, access = logging.getLogger(), logging.getLogger("uvicorn.access")
    levels = root.level, access.level
    root.addHandler(handler)
    access.addHandler(handler)
    root.setLevel(logging.DEBUG)
    access.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        access.removeHandler(handler)
        root.setLevel(levels[0])
        access.setLevel(levels[1])


def named(record: logging.LogRecord) -> tuple[str, str]:
    """What the filter set on ``record``: (session_id, session_source)."""
    return record.__dict__["session_id"], record.__dict__["session_source"]


def tool_record(records: Records, text: str) -> logging.LogRecord:
    [record] = [r for r in records.of(TOOL_LOGGER) if r.getMessage() == f"note: {text}"]
    return record


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_a_tools_log_line_carries_its_sessions_stable_id(
    servers: dict[str, str], http: httpx.Client, records: Records, era: str
) -> None:
    client: ModernClient | LegacyClient = ModernClient(http, servers["plain"])
    if era == "legacy":
        client = LegacyClient(http, servers["plain"])
        client.initialize()
    token = client.create_session()["sessionId"]
    sid = jwt_claims(token)["sid"]
    _, answer = client.call_tool("note", {"text": "in a session"}, session=session_meta(token))
    assert tool_text(answer) == "noted"
    _, answer = client.call_tool("note", {"text": "without one"})
    assert tool_text(answer) == "noted"

    record = tool_record(records, "in a session")
    assert named(record) == (sid, "data-layer")
    record = tool_record(records, "without one")
    assert named(record) == ("-", "-")
    # uvicorn writes its access line while the app sends the response: inside the request, so named too.
    assert [named(r) for r in records.of("uvicorn.access")][-2:] == [
        (sid, "data-layer"),
        ("-", "-"),
    ]
    if era == "legacy":  # the SDK's own records of the request carry it too (its stateful transport logs at DEBUG)
        assert any(r.name.startswith("mcp.") and named(r)[0] == sid for r in records.kept)
    # The token is a bearer value: never an attribute the filter sets.
    assert all(token not in named(r) for r in records.kept)
    assert all(token not in r.getMessage() for r in records.kept if r.name.startswith("mcp_sessions"))


def test_a_hosts_conversation_is_named_as_its_spans_name_it(
    servers: dict[str, str], http: httpx.Client, records: Records
) -> None:
    client = ModernClient(http, servers["hosts"])
    client.call_tool("note", {"text": "vscode"}, meta={"vscode.conversationId": "chat-17"})
    assert named(tool_record(records, "vscode")) == ("chat-17", "vscode")


def test_the_dash_is_an_option() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    assert SessionLogFilter(default="").filter(record) is True
    assert named(record) == ("", "")
