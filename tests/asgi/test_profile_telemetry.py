"""Sessions a wire opens or finds gone outside its local methods are counted like the draft's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from starlette.types import Receive, Scope, Send

from _otel import collect, points
from conftest import SECRET
from mcp_sessions import MCPSessionMiddleware

from ._direct import call, dumps, http_scope

HEADERS = [(b"content-type", b"application/json")]


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers every request with an empty result under its id."""
    request = json.loads((await receive())["body"])
    body = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {}}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": body})


async def post(middleware: MCPSessionMiddleware, message: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = (await call(middleware, dumps(message), http_scope(headers=HEADERS))).json()
    return answer


def total(reader: InMemoryMetricReader, name: str) -> int:
    return sum(point.value for point in points(collect(reader).get(name)))


@pytest.mark.anyio
async def test_alt2_initialize_counts_a_created_session_and_strawman_counts_a_gone_one() -> None:
    reader = InMemoryMetricReader()
    middleware = MCPSessionMiddleware(
        app, secret=SECRET, profiles="strawman,sep1364-alt2", meter_provider=MeterProvider(metric_readers=[reader])
    )
    opened = await post(middleware, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "sessionId": None})
    assert isinstance(opened["sessionId"], str)
    assert total(reader, "mcp_sessions.sessions.created") == 1

    meta = {"_meta": {"mcp/session": {"id": "not-a-session"}}}
    gone = await post(middleware, {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": meta})
    assert gone["result"]["_meta"] == {"mcp/session": None}
    assert total(reader, "mcp_sessions.sessions.rejected") == 1
