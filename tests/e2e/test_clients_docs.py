"""docs/clients.md: its example runs as printed, and counts per host conversation (in process)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from _docs import exec_snippet, python_snippets
from _mcp import LOCAL, ModernClient, tool_text
from conftest import SECRET

DOC = Path(__file__).resolve().parents[2] / "docs" / "clients.md"


def test_the_per_conversation_example_counts_per_conversation(monkeypatch: pytest.MonkeyPatch) -> None:
    [code] = python_snippets("docs/clients.md")
    monkeypatch.setitem(os.environ, "MCP_SESSIONS_SECRET", SECRET)
    namespace = exec_snippet(code, "docs/clients.md")

    with TestClient(namespace["app"], base_url=LOCAL) as http:
        client = ModernClient(http, LOCAL)
        counts = [
            tool_text(client.call_tool("count", meta={"vscode.conversationId": conversation})[1])
            for conversation in ("chat-1", "chat-1", "chat-2")
        ]
        _, refused = client.call_tool("count")
    assert counts == ["1", "2", "1"]
    assert refused["error"]["code"] == -32044
