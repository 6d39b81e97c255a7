"""A failing store, through a real server: uvicorn, the mcp SDK's MCPServer (the quickstart).

A redis-server that stops is tests/e2e/test_replicas.py's outage (the retryable -32010 with HTTP 503 and
``Retry-After``, sessions/create still opening sessions, a malformed parameter still -32602). A tool
whose own ``session.data`` write fails (a full memory store, a read-only or locked SQLite
file) gets what the SDK makes of any tool's exception, an ``isError`` result; never a
500. The property over every method and store is tests/asgi/test_store_failures.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from examples.quickstart import build_app
from starlette.types import Scope

from _backends import closing_store as closing
from _failing_stores import failing_store
from _mcp import SESSION_KEY, answer, modern_headers, modern_request
from conftest import SECRET, serve
from mcp_sessions.stores import SessionStore

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}
ALICE = {"X-User": "alice"}


def user_of(scope: Scope) -> str | None:
    """The tests' principal: an ``X-User`` header (a stand-in for real authentication)."""
    return dict(scope["headers"]).get(b"x-user", b"").decode() or None


@contextlib.contextmanager
def served(store: SessionStore) -> Iterator[tuple[httpx.Client, str]]:
    app = build_app(json_response=True, stateless=True, environ=ENVIRON, store=store, principal=user_of)
    with serve(closing(app, store)) as url, httpx.Client(timeout=10) as http:
        yield http, url


def post_modern(http: httpx.Client, url: str, method: str, params: dict[str, Any], **meta: Any) -> httpx.Response:
    """A 2026-07-28 request as alice, with ``meta`` in its ``_meta`` (a session)."""
    body = modern_request(method, params, meta=meta)
    return http.post(url + "/mcp", json=body, headers=modern_headers(body, **ALICE))


@pytest.mark.parametrize("kind", ["memory-full", "sqlite-read-only", "sqlite-locked"])
def test_a_tool_whose_data_write_fails_gets_a_tool_error_and_session_methods_the_retryable_one(
    kind: str, tmp_path: Path
) -> None:
    with failing_store(kind, tmp_path) as store, served(store) as (http, url):
        created = answer(post_modern(http, url, "sessions/create", {}))  # stores nothing: a failing store opens it
        meta = {SESSION_KEY: {"sessionId": created["result"]["session"]["sessionId"]}}
        counted = post_modern(http, url, "tools/call", {"name": "count", "arguments": {}}, **meta)
        assert counted.status_code == 200, counted.text
        result = answer(counted)["result"]
        # What the SDK makes of any exception out of a tool: its words stay in the server's log.
        assert result["isError"] is True, result
        assert result["content"][0]["text"] == "Error executing tool count", result
        deleted = post_modern(http, url, "sessions/delete", {}, **meta)
        if kind == "memory-full":  # a deletion is recorded even past the cap: never forgotten
            assert deleted.status_code == 200
            assert answer(deleted)["result"] == {"resultType": "complete"}
        else:
            assert deleted.status_code == 503, deleted.text
            assert deleted.headers["retry-after"] == "1"
            assert answer(deleted)["error"]["code"] == -32010
