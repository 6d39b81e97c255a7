"""Bounded metric cardinality: made-up methods, tools and versions cannot exhaust the SDK's series limit.

The OpenTelemetry SDK keeps at most 2,000 attribute sets per instrument; past
that, every new measurement lands in one ``otel.metric.overflow`` series and
real traffic loses its own. Through real uvicorn, the real MCPServer and the
SDK's MeterProvider: 2,100 POSTs with made-up methods, then made-up tool names
and protocol versions, and a real ``tools/call`` still has its own series.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest
from examples.quickstart import build_server
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from _mcp import MCP_PATH, MODERN, ModernClient, modern_headers, modern_request, tool_text
from _otel import collect, points, wait_metric_count
from conftest import SECRET, serve
from mcp_sessions import MCPSessionMiddleware

MADE_UP_METHODS = 2_100
MADE_UP_OTHERS = 200
SECONDS = 180.0  # the whole flood, on a loaded machine; it takes about ten


@pytest.fixture
def metered() -> Iterator[tuple[ModernClient, InMemoryMetricReader]]:
    reader = InMemoryMetricReader()
    inner = build_server().streamable_http_app(streamable_http_path=MCP_PATH, json_response=True)
    app = MCPSessionMiddleware(inner, secret=SECRET, meter_provider=MeterProvider(metric_readers=[reader]))
    with serve(app) as url, httpx.Client(timeout=10) as http:
        yield ModernClient(http, url), reader


def post(client: ModernClient, body: dict[str, object], headers: dict[str, str]) -> None:
    response = client.http.post(client.url, content=json.dumps(body).encode(), headers=headers)
    assert response.status_code < 500, response.text


def test_made_up_names_do_not_push_real_traffic_into_overflow(
    metered: tuple[ModernClient, InMemoryMetricReader],
) -> None:
    client, reader = metered
    deadline = time.monotonic() + SECONDS
    for i in range(MADE_UP_METHODS):
        # A notification each (the SDK acknowledges it at once), and every tenth a request it answers -32601.
        body = modern_request(f"made-up/{i}", id=i if i % 10 == 0 else None)
        post(client, body, modern_headers(body))
        assert time.monotonic() < deadline, f"only {i} POSTs in {SECONDS} s"
    for i in range(MADE_UP_OTHERS):
        call = modern_request("tools/call", {"name": f"made-up-tool-{i}", "arguments": {}})
        post(client, call, modern_headers(call))
        version = f"2099-01-{i:02d}"
        discover = modern_request("server/discover", meta={"io.modelcontextprotocol/protocolVersion": version})
        post(client, discover, modern_headers(discover, Mcp_Protocol_Version=version))
        assert time.monotonic() < deadline
    client.request("tools/list")  # what a client does first: the server's names become known
    _, answered = client.call_tool("whoami")
    assert tool_text(answered) == "none"
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
    assert whoami.count == 1 and "error.type" not in dict(whoami.attributes or {})
    tools = {
        attributes.get("gen_ai.tool.name") for attributes in series if attributes["mcp.method.name"] == "tools/call"
    }
    assert tools == {"_OTHER", "whoami"}
    versions = {attributes.get("mcp.protocol.version") for attributes in series}
    assert versions == {MODERN, "_OTHER"}
