"""A store that stalls under the gateway (issue 110): wherever the gateway waits on it, the client gets the retryable
-32010 with HTTP 503 and ``Retry-After``, as the sessions answer every store failure, never the SDK's -32603.

A real redis-server that answers reads and holds writes (``CLIENT PAUSE WRITE``), as a loaded one does: the
sessions' check of a host conversation (a read) passes, and the stdio table's claim of that conversation for this
start (a write, ``Table.claim``) outlives the store's timeout."""

from __future__ import annotations

import httpx
import pytest

from _failing_stores import writes_paused
from _mcp import legacy_request, modern_headers, modern_request
from _redis import redis_server
from _waits import WITHIN
from conftest import SECRET
from e2e._gateway import legacy_initialize, result_of
from e2e._stdio import COUNT, stdio_gateway
from mcp_sessions import SessionsConfig
from mcp_sessions.stores import RedisStore

STALLED = {"code": -32010, "message": "Session store unavailable, retry later"}


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
def test_a_host_conversation_claimed_on_a_stalled_store_is_told_to_retry(era: str) -> None:
    """110.4: a host conversation's first call through ``--stdio`` on a Redis that holds writes: -32010, 503,
    ``Retry-After`` (was -32603, "Internal server error", and on the 2025 path error code 0 with the store's words in
    a 200 event stream). Once Redis writes again, the same call is served."""
    with (
        redis_server() as server,
        stdio_gateway(config=SessionsConfig(secret=SECRET, store=RedisStore(server.url))) as url,
        httpx.Client(timeout=WITHIN) as http,
    ):
        meta = {"vscode.conversationId": "chat-1"}
        if era == "2025-11-25":
            headers = legacy_initialize(http, url)
            body = legacy_request("tools/call", COUNT, id=2, meta=meta)
        else:
            body = modern_request("tools/call", COUNT, id=2, meta=meta)
            headers = modern_headers(body)
        with writes_paused(server):
            stalled = http.post(url, json=body, headers=headers)
        served = http.post(url, json=body, headers=headers)

    assert (stalled.status_code, stalled.headers.get("retry-after")) == (503, "1"), stalled.text
    assert stalled.json() == {"jsonrpc": "2.0", "id": 2, "error": STALLED}
    assert result_of(served, 2)["result"]["content"][0]["text"] == "1"
