"""No bearer value in any span, metric or log: session and state tokens, handles, the 2025 transport session id;
and no unbounded client string in a resource URI or a request id on the middleware's spans.

In process, the real MCPServer in both response modes and both 2025-era transports, on the OpenTelemetry SDK.
Clients put bearer values where a careless recorder would pick them up (a session or state token in
``Mcp-Session-Id`` in both eras, refused ones); every span string, metric attribute and log record is scanned.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest
from examples.basket import build_app
from examples.quickstart import SESSION_TOOLS, build_server
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from _mcp import MCP_PATH, SESSION_KEY, LegacyClient, ModernClient, jwt_claims, session_meta, tool_text, with_claims
from _otel import (
    MIDDLEWARE_SCOPE,
    SDK_SCOPE,
    SpanLog,
    attrs,
    metric_attribute_values,
    of_scope,
    span_strings,
    wait_metric_count,
)
from conftest import SECRET, in_process
from mcp_sessions import MCPSessionMiddleware

TRANSPORT_DIGEST = re.compile(r"ts-[A-Za-z0-9_-]{24}")


@pytest.mark.parametrize("mode", ["json-stateless", "sse-stateful"])
def test_no_bearer_value_is_recorded_anywhere(span_log: SpanLog, caplog: pytest.LogCaptureFixture, mode: str) -> None:
    json_response = mode.startswith("json")
    reader = InMemoryMetricReader()
    inner = build_server().streamable_http_app(
        streamable_http_path=MCP_PATH, json_response=json_response, stateless_http=json_response
    )
    app = MCPSessionMiddleware(
        inner,
        secret=SECRET,
        require_session_tools=SESSION_TOOLS,
        meter_provider=MeterProvider(metric_readers=[reader]),
    )
    caplog.set_level(logging.DEBUG)
    span_log.clear()
    with in_process(app) as http:
        legacy, modern = LegacyClient(http, ""), ModernClient(http, "")
        legacy.initialize()
        transport_id = legacy.transport_session_id
        token = legacy.create_session()["sessionId"]
        forged = with_claims(token, sid="A" * 24)
        _, answered = legacy.call_tool("set_mode", {"mode": "terse"}, session=session_meta(token))
        state = answered["result"]["_meta"][SESSION_KEY]["state"]
        _, answered = legacy.call_tool("get_mode", session=session_meta(token, state=state))
        assert tool_text(answered) == "terse"
        # Bearer values where only a transport session id belongs: the token, then the state token.
        legacy.transport_session_id = token
        legacy.request("sessions/create", id=7)  # answered by the middleware
        legacy.post({"jsonrpc": "2.0", "id": 8, "method": "tools/list"})  # forwarded: the SDK sees the header too
        legacy.transport_session_id = state
        legacy.request("sessions/create", id=9)
        legacy.transport_session_id = transport_id
        # 2026-07-28: the header carries the token, as the draft asks, and once a state token instead.
        modern.call_tool("count", session=session_meta(token), Mcp_Session_Id=token)
        modern.call_tool("count", session=session_meta(token), Mcp_Session_Id=state)
        # Refused: a forged token, an edited state, and the token once deleted.
        modern.call_tool("count", session=session_meta(forged))
        modern.call_tool("get_mode", session=session_meta(token, state=state[:-4] + "AAAA"))
        modern.request("sessions/delete", session=session_meta(token), Mcp_Session_Id=token)
        legacy.call_tool("count", session=session_meta(token, state=state))
        finished = span_log.wait_middleware(14)
        metrics = wait_metric_count(reader, "mcp.server.operation.duration", 14)

    secrets_ = {
        "session token": token,
        "session token payload": token.split(".")[1],
        "session token signature": token.rsplit(".", 1)[1],
        "state token": state,
        "state token signature": state.rsplit(".", 1)[1],
        "forged token": forged,
    }
    if transport_id is not None:
        secrets_["transport session id"] = transport_id
    recorded_digests = {attrs(span)["mcp.session.id"] for span in finished if "mcp.session.id" in attrs(span)}
    assert recorded_digests, "the 2025-era spans record the transport session"
    assert all(TRANSPORT_DIGEST.fullmatch(digest) for digest in recorded_digests), recorded_digests
    # One digest per distinct header value: the transport id (stateful), the token, the state token.
    assert len(recorded_digests) == (3 if transport_id is not None else 2)
    assert len(of_scope(finished, MIDDLEWARE_SCOPE)) == 14
    assert of_scope(finished, SDK_SCOPE)  # the scan covers the SDK's spans too
    for span in finished:
        for text in span_strings(span):
            for what, secret in secrets_.items():
                assert secret not in text, f"the {what} is in span {span.name!r}: {text!r}"
    assert metric_attribute_values(metrics)
    for name, key, value in metric_attribute_values(metrics):
        for what, secret in {**secrets_, "session id": jwt_claims(token)["sid"]}.items():
            assert secret not in str(value), f"the {what} is in metric {name} attribute {key}"
    ours = [record for record in caplog.records if record.name.startswith("mcp_sessions")]
    assert ours, "the middleware logged (at DEBUG) what it did"
    for record in caplog.records:
        logged = record.getMessage() + str(record.exc_text or "")
        for what, secret in secrets_.items():
            if what != "transport session id" or record in ours:  # the SDK logs its transport ids (docs/security.md)
                assert secret not in logged, f"the {what} is in a {record.name} log record: {logged!r}"


# -- a resource URI or a request id: the basket example (data-layer sessions and state handles, stateful 2025
# transport) reads resources named after a client's bearer values, each with the same value as its JSON-RPC id;
# the server answers ``Unknown resource: <uri>``, so each value is offered to the span three times.

MIB = 1024 * 1024
BOUND = 256  # the most characters of a client-chosen string a span keeps (docs/observability.md)


@pytest.fixture
def clients() -> Iterator[tuple[ModernClient, LegacyClient]]:
    with in_process(build_app(json_response=True, environ={"MCP_SESSIONS_SECRET": SECRET})) as http:
        yield ModernClient(http, ""), LegacyClient(http, "")


def test_bearer_values_in_a_uri_or_an_id_never_reach_a_span(
    span_log: SpanLog, clients: tuple[ModernClient, LegacyClient]
) -> None:
    modern, legacy = clients
    token = modern.create_session()["sessionId"]
    basket = tool_text(modern.call_tool("create_basket")[1])
    legacy.initialize()
    transport = legacy.transport_session_id
    assert transport is not None
    assert basket.startswith("bsk_")
    span_log.clear()

    _, answered = modern.request("resources/read", {"uri": f"note://{token}"}, session=session_meta(token), id=token)
    assert answered["error"]["message"] == f"Unknown resource: note://{token}"  # the server repeats it
    modern.request("resources/read", {"uri": f"basket://{basket}"}, id=basket)
    legacy.request("resources/read", {"uri": f"note://{transport}"}, id=transport)
    spans = of_scope(span_log.wait_middleware(3), MIDDLEWARE_SCOPE)

    bearers = {
        "session token": token,
        "session token payload": token.split(".")[1],
        "session token signature": token.rsplit(".", 1)[1],
        "handle": basket,
        "handle payload": basket.removeprefix("bsk_"),
        "transport session id": transport,
    }
    assert len(spans) == 3
    for span in spans:
        for text in span_strings(span):
            for what, bearer in bearers.items():
                assert bearer not in text, f"the {what} is in span {span.name!r}: {text!r}"
    by_uri = {attrs(span)["mcp.resource.uri"]: span for span in spans}
    assert set(by_uri) >= {"basket://[redacted]", "note://[redacted]"}
    handle_span = by_uri["basket://[redacted]"]
    assert attrs(handle_span)["jsonrpc.request.id"] == "[redacted]"
    assert handle_span.status.description == "Unknown resource: basket://[redacted]"


def test_a_huge_uri_or_id_is_bounded_on_the_span(span_log: SpanLog, clients: tuple[ModernClient, LegacyClient]) -> None:
    _, legacy = clients  # no Mcp-Name header: the URI is in the body only
    legacy.initialize()
    span_log.clear()
    legacy.request("resources/read", {"uri": "note://" + "n/" * (MIB // 2)}, id="i " * (MIB // 2))
    [span] = of_scope(span_log.wait_middleware(1), MIDDLEWARE_SCOPE)

    assert all(len(text) <= BOUND for text in span_strings(span))
    assert attrs(span)["mcp.resource.uri"].startswith("note://n/n/")
    assert attrs(span)["jsonrpc.request.id"].startswith("i i ")
