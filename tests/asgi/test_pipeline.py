"""One code path for a single message and a batch, and the policy's documented forms, by direct ASGI calls.

Each test here pins a divergence the restructuring removed: a one-element
batch was planned differently from the same message alone.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from _mcp import REQUIRED_MESSAGE, AnswersProbes
from _otel import collect, points
from conftest import SECRET
from mcp_sessions import KeySet, MCPSessionMiddleware, SessionKey
from mcp_sessions._pipeline import REQUEST_ID

from ._direct import (
    HANDSHAKE,
    PER_REQUEST,
    CountingStore,
    Downstream,
    call,
    dumps,
    http_scope,
    json_response,
    middleware,
)

pytestmark = pytest.mark.anyio

INITIALIZE_RESULT = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "s"}}


def message(method: str, request_id: object = 1, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
@pytest.mark.parametrize(
    ("headers", "method", "advertised"),
    [(HANDSHAKE, "initialize", True), (PER_REQUEST, "initialize", False), (PER_REQUEST, "server/discover", True)],
    ids=["2025-initialize", "2026-initialize", "2026-discover"],
)
async def test_the_capability_is_added_alike_to_a_message_and_a_one_element_batch(
    batch: bool, headers: list[tuple[bytes, bytes]], method: str, advertised: bool
) -> None:
    result = {"jsonrpc": "2.0", "id": 1, "result": INITIALIZE_RESULT}
    app = Downstream(json_response([result] if batch else result))
    body = dumps([message(method)] if batch else message(method))
    sender = await call(middleware(app, batches=True), body, http_scope(headers=headers))
    response = sender.json()[0] if batch else sender.json()
    assert app.calls == 1
    assert ("sessions" in response["result"]["capabilities"]) is advertised


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
async def test_a_refusal_is_counted_with_the_same_attributes_alone_or_in_a_batch(batch: bool) -> None:
    reader = InMemoryMetricReader()
    mw = middleware(
        Downstream(),
        meter_provider=MeterProvider(metric_readers=[reader]),
        require_session=True,
        batches=True,  # the mcp SDK refuses batches before any session rule applies
    )
    body = dumps([message("tools/list")] if batch else message("tools/list"))
    sender = await call(mw, body)
    assert sender.status == 200
    (point,) = points(collect(reader).get("mcp_sessions.sessions.rejected"))
    assert dict(point.attributes or {}) == {"mcp_sessions.reason": "required", "mcp.method.name": "tools/list"}


@pytest.mark.parametrize(
    ("policy", "refused", "allowed"),
    [
        (["tools/call"], message("tools/call", name="count"), message("tools/list")),
        (frozenset({"resources/read"}), message("resources/read", uri="x"), message("tools/call", name="count")),
        (
            lambda method, params: isinstance(params, dict) and params.get("name") == "count",
            message("tools/call", name="count"),
            message("tools/call", name="whoami"),
        ),
    ],
    ids=["list", "frozenset", "callable"],
)
async def test_the_collection_and_callable_policies_refuse_and_allow(
    policy: Any, refused: dict[str, Any], allowed: dict[str, Any]
) -> None:
    app = Downstream()
    mw = middleware(app, require_session=policy)
    sender = await call(mw, dumps(refused))
    assert app.calls == 0
    assert sender.json()["error"] == {
        "code": -32044,
        "message": REQUIRED_MESSAGE,
        "data": {"create": "sessions/create"},
    }
    sender = await call(mw, dumps(allowed))
    assert app.calls == 1
    assert json.loads(sender.body)["result"] == {}


class CountingKeys(KeySet):
    """The real key set, counting the session ids it is asked to verify."""

    verified = 0

    def verify_session_token(self, token: str, *, now: float | None = None) -> Any:
        CountingKeys.verified += 1
        return super().verify_session_token(token, now=now)


async def test_a_batch_the_2026_server_refuses_costs_no_session_work() -> None:
    """Every element names a session (some forged): refused whole by the server's rule, nothing verified."""
    keys = CountingKeys([SessionKey.from_secret(SECRET)])
    store = CountingStore()
    token = keys.mint_session_token(ttl=600)[0]
    forged = token[:-6] + "AAAAAA"
    meta = {"_meta": {"io.modelcontextprotocol/session": {"sessionId": token}}}
    batch = [message("tools/call", i, name="t", **meta) for i in range(50)]
    batch += [
        message("tools/call", 100 + i, name="t", _meta={"io.modelcontextprotocol/session": {"sessionId": forged}})
        for i in range(50)
    ]
    app = Downstream(json_response({}))
    CountingKeys.verified = 0
    mw = MCPSessionMiddleware(AnswersProbes(app, batches=False), keys=keys, store=store)
    sender = await call(mw, dumps(batch), http_scope(headers=PER_REQUEST))
    assert sender.status == 400
    assert sender.json()["error"]["code"] == -32600  # the SDK's own answer
    assert (app.calls, CountingKeys.verified, store.touches) == (0, 0, 0)


@pytest.mark.parametrize(
    ("body", "request_id"),
    [
        (message("tools/list", 7), 7),
        (message("tools/list", "7"), "7"),  # as sent: not "7" for 7, nor 7 for "7"
        (message("tools/list", 1.5), None),  # an id no answer can repeat (the mcp SDK reads strings and integers)
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, "absent"),
        ([message("tools/list", 7)], "absent"),
        ({"jsonrpc": "2.0", "id": 7, "result": {}}, "absent"),  # an answer to the server's request
    ],
    ids=["integer", "string", "float", "notification", "batch", "response"],
)
async def test_the_app_is_told_the_id_of_the_one_request_the_middleware_parsed(body: Any, request_id: object) -> None:
    """``REQUEST_ID``: what a layer inside the sessions reads instead of the body (``gateway --stdio``'s, which
    answers a call its stop cuts with its id), set for one request alone."""
    app = Downstream()
    await call(middleware(app, batches=True), dumps(body), http_scope(headers=HANDSHAKE))
    assert app.calls == 1
    found = app.scope.get(REQUEST_ID, "absent")
    assert (found, type(found)) == (request_id, type(request_id))
