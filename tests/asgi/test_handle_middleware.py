"""HandleMiddleware by direct ASGI calls: what reaches the app, what is answered, and how."""

from __future__ import annotations

import json
from typing import Any

import pytest

from _mcp import AnswersProbes
from _redis import free_port
from conftest import SECRET
from mcp_sessions import KeySet, MCPSessionMiddleware
from mcp_sessions.handles import HandleKind, HandleMiddleware, Handles
from mcp_sessions.stores import MemoryStore, RedisStore

from ._direct import Downstream, Receiver, Sender, http_scope
from ._direct import call as sent_back

pytestmark = pytest.mark.anyio

BASKET = HandleKind("basket", prefix="bsk")


async def call(
    app: HandleMiddleware | MCPSessionMiddleware,
    body: bytes,
    *,
    method: str = "POST",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> tuple[int, dict[bytes, bytes], bytes]:
    scope = http_scope(method, headers=headers or [(b"content-type", b"application/json")])
    sender = await sent_back(app, [body[:7], body[7:]] if len(body) > 7 else [body], scope)
    return sender.status, dict(sender.headers), sender.body


def tools_call(arguments: dict[str, Any], request_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "t", "arguments": arguments}}


@pytest.fixture
def handles() -> Handles:
    return Handles(KeySet.from_secret(SECRET), MemoryStore(), kinds=[BASKET])


async def test_a_valid_handle_reaches_the_app_verified_and_the_body_intact(handles: Handles) -> None:
    downstream = Downstream()
    app = HandleMiddleware(downstream, handles=handles)
    token = await handles.mint(BASKET, principal=None)
    body = json.dumps(tools_call({"basket": token, "nested": {"list": [token]}})).encode()
    status, _, _ = await call(app, body)
    assert (status, downstream.calls, downstream.body) == (200, 1, body)
    context = downstream.handle_context
    assert context is not None
    assert list(context.verified) == [token]
    assert context.verified[token].kind == "basket"


async def test_sse_only_clients_get_the_refusal_as_one_event(handles: Handles) -> None:
    app = HandleMiddleware(Downstream(), handles=handles)
    headers = [(b"content-type", b"application/json"), (b"accept", b"text/event-stream")]
    body = json.dumps(tools_call({"b": "bsk_x" * 5})).encode()
    status, response_headers, content = await call(app, body, headers=headers)
    assert (status, response_headers[b"content-type"]) == (200, b"text/event-stream")
    assert content.startswith(b"event: message\r\ndata: {")
    assert content.endswith(b"\r\n\r\n")


@pytest.mark.parametrize(
    ("body", "method", "content_type"),
    [
        (b"not json", "POST", b"application/json"),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', "POST", b"application/json"),
        (json.dumps(tools_call({"item": "tea", "note": "bsk_"})).encode(), "POST", b"application/json"),
        (json.dumps(tools_call({"basket": "bsk_" + "Q" * 35})).encode(), "POST", b"text/plain"),
        (b"", "GET", b"application/json"),
    ],
)
async def test_everything_without_a_handle_to_check_passes_through(
    handles: Handles, body: bytes, method: str, content_type: bytes
) -> None:
    downstream = Downstream()
    app = HandleMiddleware(downstream, handles=handles)
    status, _, _ = await call(app, body, method=method, headers=[(b"content-type", content_type)])
    assert (status, downstream.calls, downstream.body) == (200, 1, body)
    assert downstream.handle_context is not None  # mint still finds the request's principal


async def test_an_oversized_body_is_refused_with_413(handles: Handles) -> None:
    downstream = Downstream()
    app = HandleMiddleware(downstream, handles=handles, max_body_size=64)
    status, _, content = await call(app, json.dumps(tools_call({"item": "x" * 100})).encode())
    assert status == 413
    assert json.loads(content)["error"]["code"] == -32600
    declared = [(b"content-type", b"application/json"), (b"content-length", b"1000")]
    assert (await call(app, b"{}", headers=declared))[0] == 413
    assert downstream.calls == 0


async def test_a_client_gone_before_its_body_gets_no_answer_and_reaches_no_tool(handles: Handles) -> None:
    downstream = Downstream()
    sender = Sender()
    await HandleMiddleware(downstream, handles=handles)(http_scope(), Receiver(), sender)
    assert sender.messages == []
    assert downstream.calls == 0


async def test_an_unreachable_store_is_a_retryable_503_never_a_verdict(handles: Handles) -> None:
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", timeout=0.3, connect_timeout=0.1)
    checking = Handles(KeySet.from_secret(SECRET), store, kinds=[BASKET])
    downstream = Downstream()
    try:
        app = HandleMiddleware(downstream, handles=checking, retry_after=3)
        token = await handles.mint(BASKET, principal=None)  # minted where the store answers
        status, headers, content = await call(app, json.dumps(tools_call({"basket": token})).encode())
    finally:
        await store.aclose()
    assert (status, headers[b"retry-after"]) == (503, b"3")
    assert json.loads(content)["error"]["code"] == -32010
    assert downstream.calls == 0


async def test_a_failing_principal_hook_is_an_internal_error(handles: Handles) -> None:
    def broken(scope: Any) -> str | None:
        raise RuntimeError("boom")

    downstream = Downstream()
    app = HandleMiddleware(downstream, handles=handles, principal=broken)
    status, _, content = await call(app, b"{}")
    assert status == 500
    assert b"boom" not in content
    assert json.loads(content)["error"]["code"] == -32603
    assert downstream.calls == 0


async def test_lifespan_and_other_scopes_pass_through(handles: Handles) -> None:
    downstream = Downstream()
    await HandleMiddleware(downstream, handles=handles)({"type": "lifespan"}, Receiver(), Sender())
    assert (downstream.calls, downstream.scope["type"]) == (1, "lifespan")


# -- the same check in the session middleware ------------------------------------------------------------------


def both(handles: Handles) -> list[tuple[Downstream, HandleMiddleware | MCPSessionMiddleware]]:
    """The two middlewares that run the handle check, each in front of its own app."""
    alone, behind = Downstream(), Downstream()
    return [
        (alone, HandleMiddleware(alone, handles=handles)),
        (behind, MCPSessionMiddleware(AnswersProbes(behind), secret=SECRET, handles=handles)),
    ]


FORGED = "bsk_" + "Q" * 34 + "A"


# The mcp SDK's server routes on the Mcp-Protocol-Version header alone (StreamableHTTPSessionManager._handle_request):
# absent, or a 2025-era version, is its 2025 path; any other value, an empty one too, its 2026-07-28 path.
SDK_PATHS = [(None, "2025"), ("2025-11-25", "2025"), ("2024-11-05", "2025"), ("", "2026"), ("2026-07-28", "2026")]


@pytest.mark.parametrize(("version", "path"), SDK_PATHS, ids=[repr(version) for version, _ in SDK_PATHS])
async def test_both_middlewares_answer_a_refusal_on_the_path_the_sdk_takes(
    handles: Handles, version: str | None, path: str
) -> None:
    headers = [(b"content-type", b"application/json")]
    if version is not None:
        headers.append((b"mcp-protocol-version", version.encode()))
    body = json.dumps(tools_call({"basket": FORGED}, "r-1")).encode()
    for downstream, app in both(handles):
        status, response_headers, content = await call(app, body, headers=headers)
        answer = json.loads(content)
        assert (status, response_headers[b"content-type"]) == (200, b"application/json")
        assert (answer["id"], answer["result"]["isError"]) == ("r-1", True)
        assert "never issued" in answer["result"]["content"][0]["text"]
        assert FORGED[4:] not in content.decode()
        assert answer["result"].get("resultType") == ("complete" if path == "2026" else None), type(app)
        assert downstream.calls == 0


async def test_both_middlewares_answer_a_refused_batch_alike(handles: Handles) -> None:
    token = await handles.mint(BASKET, principal=None)
    batch = [
        tools_call({"basket": token}, 1),
        tools_call({"basket": FORGED}, "two"),
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
        7,
    ]
    answers = []
    for downstream, app in both(handles):
        status, _, content = await call(app, json.dumps(batch).encode())
        assert status == 200
        assert downstream.calls == 0
        answers.append(json.loads(content))
    assert answers[0] == answers[1]
    by_id = {answer["id"]: answer for answer in answers[0]}
    assert len(answers[0]) == 4
    assert set(by_id) == {1, "two", 3, None}  # the notification gets no answer
    assert by_id["two"]["result"]["isError"] is True
    assert {by_id[key]["error"]["code"] for key in (1, 3, None)} == {-32600}


async def test_a_tools_call_notification_runs_no_tool_and_is_not_answered_by_either(handles: Handles) -> None:
    notification = tools_call({"basket": FORGED})
    del notification["id"]
    body = json.dumps(notification).encode()
    for downstream, app in both(handles):
        status, _, _ = await call(app, body)
        assert (status, downstream.calls, downstream.body) == (200, 1, body)  # the server's to ignore: it answers none


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32-be"])
async def test_a_body_the_sdk_reads_as_json_is_checked_whatever_its_encoding(handles: Handles, encoding: str) -> None:
    body = json.dumps(tools_call({"basket": FORGED})).encode(encoding)
    for downstream, app in both(handles):
        status, _, content = await call(app, body)
        assert status == 200
        assert json.loads(content)["result"]["isError"] is True
        assert downstream.calls == 0
