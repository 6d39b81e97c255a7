"""Bounded metric cardinality: made-up methods, tools and versions cannot exhaust the SDK's series limit.

The OpenTelemetry SDK keeps at most 2,000 attribute sets per instrument; past
that, every new measurement lands in one ``otel.metric.overflow`` series and
real traffic loses its own. Through the real MCPServer, in process, and the
SDK's MeterProvider: 2,100 POSTs with made-up methods, then made-up tool names
and protocol versions, and a real ``tools/call`` still has its own series.
"""

from __future__ import annotations

import json

import httpx
import pytest
from examples.quickstart import build_server
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from _mcp import MCP_PATH, MODERN, answer, modern_headers, modern_request, tool_text
from _otel import collect, points, wait_metric_count
from conftest import SECRET, asgi_client
from mcp_sessions import MCPSessionMiddleware

MADE_UP_METHODS = 2_100
MADE_UP_OTHERS = 200


async def post(http: httpx.AsyncClient, body: dict[str, object], headers: dict[str, str]) -> httpx.Response:
    response = await http.post(MCP_PATH, content=json.dumps(body).encode(), headers=headers)
    assert response.status_code < 500, response.text
    return response


@pytest.mark.anyio
async def test_made_up_names_do_not_push_real_traffic_into_overflow() -> None:
    reader = InMemoryMetricReader()
    inner = build_server().streamable_http_app(streamable_http_path=MCP_PATH, json_response=True)
    app = MCPSessionMiddleware(inner, secret=SECRET, meter_provider=MeterProvider(metric_readers=[reader]))
    async with asgi_client(app) as http:
        for i in range(MADE_UP_METHODS):
            # A notification each (the SDK acknowledges it at once), and every tenth a request it answers -32601.
            body = modern_request(f"made-up/{i}", id=i if i % 10 == 0 else None)
            await post(http, body, modern_headers(body))
        for i in range(MADE_UP_OTHERS):
            call = modern_request("tools/call", {"name": f"made-up-tool-{i}", "arguments": {}})
            await post(http, call, modern_headers(call))
            version = f"2099-01-{i:02d}"
            discover = modern_request("server/discover", meta={"io.modelcontextprotocol/protocolVersion": version})
            await post(http, discover, modern_headers(discover, Mcp_Protocol_Version=version))
        listed = modern_request("tools/list")  # what a client does first: the server's names become known
        await post(http, listed, modern_headers(listed))
        whoami = modern_request("tools/call", {"name": "whoami", "arguments": {}})
        assert tool_text(answer(await post(http, whoami, modern_headers(whoami)))) == "none"
    total = MADE_UP_METHODS + 2 * MADE_UP_OTHERS + 2
    metrics = wait_metric_count(reader, "mcp.server.operation.duration", total)

    series = [dict(point.attributes or {}) for point in points(metrics["mcp.server.operation.duration"])]
    assert not any(attributes.get("otel.metric.overflow") for attributes in series)
    assert len(series) < 20, series  # a handful of bounded attribute sets, not thousands
    methods = {attributes["mcp.method.name"] for attributes in series}
    assert methods == {"_OTHER", "tools/call", "tools/list", "server/discover"}
    [whoami] = [
        point
        for point in points(collect(reader)["mcp.server.operation.duration"])
        if dict(point.attributes or {}).get("gen_ai.tool.name") == "whoami"
    ]
    assert whoami.count == 1
    assert "error.type" not in dict(whoami.attributes or {})
    tools = {
        attributes.get("gen_ai.tool.name") for attributes in series if attributes["mcp.method.name"] == "tools/call"
    }
    assert tools == {"_OTHER", "whoami"}
    versions = {attributes.get("mcp.protocol.version") for attributes in series}
    assert versions == {MODERN, "_OTHER"}
