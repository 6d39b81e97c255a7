"""A store outage is said a bounded number of times, however many requests it refuses.

The quickstart app over a ``RedisStore`` whose URL names a closed port (connection refused, at
once, as in a burst of resets), called through ``httpx.ASGITransport``: 500 requests in a session,
each refused with the retryable -32010. The middleware's warning and the store's own are each
logged once an interval (``WARNING_INTERVAL``), and the next line says how many were not logged.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from examples.quickstart import build_app

from _mcp import answer, modern_headers, modern_request
from _redis import free_port
from conftest import SECRET, asgi_client
from mcp_sessions._wire import ThrottledWarning
from mcp_sessions._wire import jsonrpc as refusal
from mcp_sessions.stores import RedisStore

pytestmark = pytest.mark.anyio

REQUESTS = 500


async def post(http: httpx.AsyncClient, method: str, params: dict[str, Any], **meta: Any) -> httpx.Response:
    body = modern_request(method, params, meta=meta)
    return await http.post("/mcp", json=body, headers=modern_headers(body))


async def test_five_hundred_refused_requests_log_one_line_per_condition_then_a_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A warning of its own for this test: one an earlier test logged less than an interval ago would hold this one back.
    warning = ThrottledWarning(refusal.logger)
    monkeypatch.setattr(refusal, "unavailable_warning", warning)
    store = RedisStore(url=f"redis://127.0.0.1:{free_port()}/0", timeout=1.0)
    warning.interval = store._unavailable_warning.interval = 3600  # outlasts the 500 requests on a busy machine too
    app = build_app(json_response=True, stateless=True, environ={"MCP_SESSIONS_SECRET": SECRET}, store=store)
    try:
        async with asgi_client(app) as http:  # the server runs: the middleware asks it before answering
            created = answer(await post(http, "sessions/create", {}))  # creating a session stores nothing
            session = {"io.modelcontextprotocol/session": {"sessionId": created["result"]["session"]["sessionId"]}}
            caplog.set_level(logging.WARNING, logger="mcp_sessions")

            async def refused() -> None:
                response = await post(http, "tools/call", {"name": "count", "arguments": {}}, **session)
                assert response.status_code == 503, response.text
                assert answer(response)["error"]["code"] == -32010

            for _ in range(REQUESTS):
                await refused()
            lines = [r.getMessage() for r in caplog.records if r.name.startswith("mcp_sessions")]
            lines = [line for line in lines if not line.startswith("the session store does not answer at startup")]
            assert len(lines) == 2, lines[:5]
            assert sorted(line.split(":", 1)[0] for line in lines) == [
                "redis store unavailable",
                "session store unavailable",
            ]
            assert all("(0 more not logged since the last such message" in line for line in lines)

            warning.interval = 0  # the interval has passed: the next refusal's line counts the ones held back
            caplog.clear()
            await refused()
            [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("session store unavailable")]
            assert f"({REQUESTS - 1} more not logged since the last such message" in line
    finally:
        await store.aclose()
