"""A 2025-era batch costs one check and one store round trip per distinct session it names, at most eight.

Called in process (Starlette's TestClient), around an app that takes batches (a 2025-03-26
server may; the mcp SDK's refuses them) on memory, SQLite and Redis. A property test
(hypothesis, derandomized, bounded) sends batches whose elements name valid and
forged session tokens, repeated at will, and counts, per request, the tokens the key
set verified and the store's touches: never more than the distinct sessions named,
never more than eight. A batch is forwarded only when every session it names is
valid and there are at most eight, and then each element is echoed its own.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from _backends import STORES, closing_store, open_backend
from _mcp import SESSION_KEY, AnswersProbes
from conftest import SECRET, in_process
from mcp_sessions import KeySet, MCPSessionMiddleware
from mcp_sessions._tokens import SessionClaims
from mcp_sessions.stores import SessionStatus, SessionStore

MOST = 8  # the documented bound: distinct sessions one request may name
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "Mcp-Protocol-Version": "2025-11-25",
}


class CountingKeys(KeySet):
    """The deployment's keys, counting the tokens verified in full (a token seen before is looked up, not checked)."""

    verified = 0

    def verify_session_token(self, token: str, **kwargs: Any) -> SessionClaims:
        self.verified += 1
        return super().verify_session_token(token, **kwargs)


class Touches:
    """Counts the touches of a real store (the round trip a request makes per session); the rest is the store's."""

    def __init__(self, store: SessionStore) -> None:
        self.count = 0
        touch = store.touch

        async def counted(session_id: str, **kwargs: Any) -> SessionStatus:
            self.count += 1
            return await touch(session_id, **kwargs)

        store.touch = counted  # type: ignore[method-assign]


class BatchApp:
    """A server that takes batches: an empty result for every request element, in order."""

    calls = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = await Request(scope, receive).body()
        self.calls += 1
        answers = [{"jsonrpc": "2.0", "id": m["id"], "result": {}} for m in json.loads(body) if "id" in m]
        raw = json.dumps(answers).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": raw})


class Server:
    def __init__(self, http: httpx.Client, keys: CountingKeys, touches: Touches, app: BatchApp) -> None:
        self.http, self.keys, self.touches, self.app = http, keys, touches, app
        self.valid = [keys.mint_session_token(ttl=3600)[0] for _ in range(MOST + 2)]
        # This deployment's tokens with a random signature: each verified in full, each refused.
        self.forged = [
            token.rpartition(".")[0] + "." + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()
            for token in (keys.mint_session_token(ttl=3600)[0] for _ in range(MOST + 2))
        ]


@pytest.fixture(scope="module", params=STORES)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    keys, app = CountingKeys.from_secret(SECRET), BatchApp()
    assert isinstance(keys, CountingKeys)
    with open_backend(request.param, tmp_path_factory.mktemp(request.param)) as backend:
        store = backend.open()
        touches = Touches(store)
        middleware = MCPSessionMiddleware(AnswersProbes(app), keys=keys, store=store, idle_ttl=3600)
        with in_process(closing_store(middleware, store)) as http:
            yield Server(http, keys, touches, app)


# Each element names a valid session, a forged one (each from a pool of ten, so repeats are common), or none.
elements = st.lists(
    st.tuples(st.sampled_from(["valid", "forged", "none"]), st.integers(0, MOST + 1)), min_size=1, max_size=40
)


@given(named=elements)
@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
def test_a_batch_checks_each_distinct_session_once_and_at_most_eight(
    server: Server, named: list[tuple[str, int]]
) -> None:
    batch: list[dict[str, Any]] = []
    tokens: list[str | None] = []
    for index, (kind, pick) in enumerate(named):
        token = None if kind == "none" else (server.valid if kind == "valid" else server.forged)[pick]
        params: dict[str, Any] = {"name": "echo", "arguments": {}}
        if token is not None:
            params["_meta"] = {SESSION_KEY: {"sessionId": token}}
        batch.append({"jsonrpc": "2.0", "id": index, "method": "tools/call", "params": params})
        tokens.append(token)
    distinct = list(dict.fromkeys(token for token in tokens if token is not None))
    refused = len(distinct) > MOST or any(token in server.forged for token in distinct)
    verified, touches, calls = server.keys.verified, server.touches.count, server.app.calls

    response = server.http.post("/mcp", content=json.dumps(batch), headers=HEADERS)

    assert response.status_code == 200, response.text
    assert server.keys.verified - verified <= min(len(distinct), MOST)
    valid_named = [token for token in distinct[:MOST] if token in server.valid]
    assert server.touches.count - touches <= len(valid_named)  # one round trip per session, not per element
    answers = response.json()
    if refused:
        assert server.app.calls == calls  # nothing forwarded
        assert all("error" in answer for answer in answers)
        return
    assert server.app.calls == calls + 1
    assert server.touches.count - touches == len(valid_named)
    for answer in answers:
        echoed = answer["result"].get("_meta", {}).get(SESSION_KEY, {}).get("sessionId")
        assert echoed == tokens[answer["id"]]
