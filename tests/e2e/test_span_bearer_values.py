"""No bearer value, and no unbounded client string, in a resource URI or a request id on the middleware's spans.

Through real uvicorn, the basket example (data-layer sessions and state handles, stateful 2025-era transport) and
the OpenTelemetry SDK's in-memory exporter. A client reads resources named after its bearer values (a session
token, a minted ``bsk_…`` handle, its transport session id), each with the same value as its JSON-RPC id: the
server answers ``Unknown resource: <uri>``, so the value is offered to the span three times (``mcp.resource.uri``,
``jsonrpc.request.id``, the status message).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from examples.basket import build_app

from _mcp import LegacyClient, ModernClient, session_meta, tool_text
from _otel import MIDDLEWARE_SCOPE, SpanLog, attrs, of_scope, span_strings
from conftest import SECRET, in_process

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}
MIB = 1024 * 1024
BOUND = 256  # the most characters of a client-chosen string a span keeps (docs/observability.md)


@pytest.fixture
def clients() -> Iterator[tuple[ModernClient, LegacyClient]]:
    with in_process(build_app(json_response=True, environ=ENVIRON)) as http:
        yield ModernClient(http, ""), LegacyClient(http, "")


def test_bearer_values_in_a_uri_or_an_id_never_reach_a_span(
    span_log: SpanLog, clients: tuple[ModernClient, LegacyClient]
) -> None:
    modern, legacy = clients
    token = modern.create_session()["sessionId"]
    basket = tool_text(modern.call_tool("create_basket")[1])
    legacy.initialize()
    transport = legacy.transport_session_id
    assert transport is not None and basket.startswith("bsk_")
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
