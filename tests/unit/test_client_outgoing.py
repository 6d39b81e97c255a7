"""The client's pure parts: the caller's POST parsed with the server's JSON-RPC module, and one stamped attempt."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from _mcp import SESSION_KEY as KEY
from mcp_sessions._wire import jsonrpc
from mcp_sessions.client._messages import OutgoingPost, stamp

HEADERS = [("content-type", "application/json"), ("content-length", "999"), ("mcp-session-id", "stale")]


def post(body: bytes, version: str | None = "2026-07-28") -> OutgoingPost:
    headers = HEADERS if version is None else [*HEADERS, ("mcp-protocol-version", version)]
    parsed = OutgoingPost.parse(httpx.Request("POST", "http://mcp.test/mcp", headers=headers), body)
    assert parsed is not None
    return parsed


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b'{"method":"card"}', b'{"jsonrpc":"2.0","id":1,"result":{}}', b"[]", b"[1,2]"],
    ids=["empty", "not-json", "no-jsonrpc", "a-response", "empty-batch", "no-messages"],
)
def test_bodies_that_are_not_json_rpc_requests_are_not_parsed(body: bytes) -> None:
    assert OutgoingPost.parse(httpx.Request("POST", "http://mcp.test/mcp"), body) is None


def test_nothing_to_stamp_sends_the_callers_bytes() -> None:
    body = b'{ "jsonrpc" : "2.0", "id": 1, "method": "initialize", "params": {} }'
    attempt = stamp(post(body), "tok")

    assert attempt.body == body
    assert attempt.token is None
    assert attempt.stamped_ids == []
    assert ("content-length", str(len(body))) in attempt.headers
    assert ("mcp-session-id", "stale") in attempt.headers  # nothing names a session: left as it was


@pytest.mark.parametrize(("version", "header"), [("2026-07-28", "tok"), ("2025-11-25", "stale")])
def test_the_attempt_records_which_session_each_request_named(version: str, header: str) -> None:
    batch: list[Any] = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"_meta": {KEY: {"sessionId": "own"}}}},
        {"jsonrpc": "2.0", "method": "notifications/progress"},
    ]
    attempt = stamp(post(json.dumps(batch).encode(), version), "tok")

    assert attempt.stamped_ids == [1]
    assert attempt.named(1, "tok")
    assert attempt.named(2, "own")
    assert not attempt.named(2, "tok")
    assert not attempt.named(3, "tok")
    assert not attempt.named(1, None)
    assert [value for key, value in attempt.headers if key == "mcp-session-id"] == [header]


def test_json_rpc_frames_the_client_shares() -> None:
    assert jsonrpc.request(7, "sessions/create") == {"jsonrpc": "2.0", "id": 7, "method": "sessions/create"}
    assert jsonrpc.request(7, "m", {})["params"] == {}
    assert jsonrpc.requests_and_notifications([{"jsonrpc": "2.0", "method": "a"}, {"id": 1}, 3]) == [
        {"jsonrpc": "2.0", "method": "a"}
    ]
    assert jsonrpc.requests_and_notifications({"jsonrpc": "1.0", "method": "a"}) is None
    assert jsonrpc.is_response({"id": None, "result": {}})
    assert not jsonrpc.is_response({"id": 1, "method": "m"})
    assert jsonrpc.error_code({"error": {"code": -32043}}) == -32043
    assert jsonrpc.error_code({"error": {"code": True}}) is None
    assert jsonrpc.error_code(None) is None
    assert jsonrpc.meta({"_meta": []}) is None
