"""Two real uvicorn processes serving the quickstart, sharing one real Redis and one key set, through raw HTTP
(2026-07-28) and the real SDK client."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import mcp_types as types
import pytest
from examples.quickstart import build_app
from mcp import Client
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from _mcp import (
    INVALID_PARAMS,
    MCP_PATH,
    SESSION_KEY,
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    DeleteSessionRequest,
    ModernClient,
    create_session,
    jwt_claims,
    jwt_header,
    sdk_meta,
    session_meta,
    tool_text,
)
from _redis import RedisServer
from conftest import serve
from e2e._replicas import (
    NEW,
    OLD,
    STORE_UNAVAILABLE,
    Replica,
    ServedReplica,
    a_delete_on_b_is_refused_on_a_at_once,
    base_environ,
    clients,
    count,
    counts_exactly_under_concurrency,
    json_and_sse,
    refused,
    served_replicas,
)
from mcp_sessions import KeySet
from mcp_sessions.stores import RedisStore, SessionStatus


@pytest.fixture(scope="module")
def pair(redis: RedisServer) -> Iterator[list[Replica]]:
    """Replicas A (JSON responses) and B (SSE responses), same keys, same Redis, same prefix."""
    with json_and_sse(base_environ(redis)) as started:
        yield started


def test_a_session_created_on_a_works_on_b(http: httpx.Client, pair: list[Replica]) -> None:
    a, b = clients(http, pair)
    session = a.create_session()
    sid = jwt_claims(session["sessionId"])["sid"]
    _, whoami = b.call_tool("whoami", session=session_meta(session))
    assert tool_text(whoami) == sid
    assert whoami["result"]["_meta"][SESSION_KEY]["sessionId"] == session["sessionId"]
    # Calls alternate between the replicas; the counter lives in Redis.
    assert [count((a, b)[i % 2], session) for i in range(10)] == list(range(1, 11))
    # Client-held state signed on B verifies on A.
    _, set_mode = b.call_tool("set_mode", {"mode": "terse"}, session=session_meta(session))
    state = set_mode["result"]["_meta"][SESSION_KEY]["state"]
    _, get_mode = a.call_tool("get_mode", session=session_meta(session, state=state))
    assert tool_text(get_mode) == "terse"


def test_fifty_concurrent_calls_across_both_replicas_count_exactly(pair: list[Replica]) -> None:
    counts_exactly_under_concurrency(pair, 50)


def test_a_delete_on_b_is_refused_on_a_at_once(http: httpx.Client, pair: list[Replica]) -> None:
    a_delete_on_b_is_refused_on_a_at_once(http, pair)


@pytest.mark.anyio
async def test_the_sdk_client_across_replicas(pair: list[Replica]) -> None:
    async with Client(pair[0].url + MCP_PATH) as on_a, Client(pair[1].url + MCP_PATH) as on_b:
        created = await create_session(on_a)
        meta = sdk_meta({SESSION_KEY: {"sessionId": created["sessionId"]}})
        counts = []
        for client in (on_a, on_b, on_a, on_b):
            result = await client.call_tool("count", {}, meta=meta)
            assert result.meta is not None
            assert result.meta[SESSION_KEY]["sessionId"] == created["sessionId"]
            counts.append(result.structured_content)
        assert counts == [{"result": n} for n in (1, 2, 3, 4)]
        await on_b.session.send_request(DeleteSessionRequest(params=types.RequestParams(_meta=meta)), types.EmptyResult)
        with pytest.raises(MCPError) as raised:
            await on_a.call_tool("count", {}, meta=meta)
    assert raised.value.code == SESSION_NOT_FOUND


def test_redis_outage_is_retryable_and_ends_without_a_restart(
    http: httpx.Client, pair: list[Replica], redis: RedisServer
) -> None:
    a, b = clients(http, pair)
    session = a.create_session()
    assert count(b, session) == 1
    redis.stop()
    try:
        for client in (a, b, a, b):
            for method, params in (
                ("tools/call", {"name": "count", "arguments": {}}),
                ("tools/call", {"name": "whoami", "arguments": {}}),
                ("sessions/delete", None),
            ):
                response, message = client.request(method, params, session=session_meta(session))
                assert response.status_code == 503, response.text
                assert response.headers["retry-after"] == "1"
                assert message["error"]["code"] == STORE_UNAVAILABLE  # retryable, never -32043
            # Creation stores nothing, and sessionless requests do not need the store; a bad parameter is still one.
            assert "session" in client.request("sessions/create")[1]["result"]
            assert client.request("sessions/create", {"label": 5})[1]["error"]["code"] == INVALID_PARAMS
            _, whoami = client.call_tool("whoami")
            assert tool_text(whoami) == "none"
            _, discover = client.request("server/discover")
            assert "capabilities" in discover["result"]
            _, required = client.call_tool("count")
            assert required["error"]["code"] == SESSION_REQUIRED
    finally:
        redis.start()  # same port, empty: this Redis keeps nothing on disk
    # Same replica processes: service resumes on the first request. The restarted Redis is empty,
    # so the session is tracked again from its first use and its counter starts over.
    assert count(a, session) == 1
    assert count(b, session) == 2
    fresh = b.create_session()
    assert count(a, fresh) == 1


class Later(RedisStore):
    """The real Redis store, told a time ``ahead[0]`` seconds past the replica's clock: replicas sharing ``ahead``
    see their sessions' idle clocks run as far as the test moves it, with no wait. A store passed in is its caller's
    to close: :meth:`closing` closes it as its app's lifespan ends, on its server's event loop."""

    def __init__(self, environ: Mapping[str, str], ahead: list[float]) -> None:
        super().__init__(environ["MCP_SESSIONS_REDIS_URL"], prefix=environ["MCP_SESSIONS_REDIS_PREFIX"], timeout=2.0)
        self.ahead = ahead

    async def touch(
        self, session_id: str, *, expires_at: float, now: float, idle_ttl: float | None, issued_at: float | None = None
    ) -> SessionStatus:
        later = now + self.ahead[0]
        return await super().touch(session_id, expires_at=expires_at, now=later, idle_ttl=idle_ttl, issued_at=issued_at)

    def closing(self, app: ASGIApp) -> ASGIApp:
        async def closes(scope: Scope, receive: Receive, send: Send) -> None:
            async def sent(message: Message) -> None:
                if message["type"] == "lifespan.shutdown.complete":
                    await self.aclose()
                await send(message)

            await app(scope, receive, sent if scope["type"] == "lifespan" else send)

        return closes


def test_idle_expiry_ends_an_unused_session_on_both_replicas(http: httpx.Client, redis: RedisServer) -> None:
    """idle_ttl 2 s, on the replicas' clock as the test moves it (:class:`Later`): what expires is in Redis."""
    environ = base_environ(redis, MCP_SESSIONS_IDLE_TTL="2", QUICKSTART_JSON="1")
    ahead = [0.0]
    with contextlib.ExitStack() as stack:
        urls = [
            stack.enter_context(serve(store.closing(build_app(environ=environ, store=store))))
            for store in (Later(environ, ahead), Later(environ, ahead))
        ]
        a, b = (ModernClient(http, url) for url in urls)
        used, unused = a.create_session(), a.create_session()
        # Used every 0.4 s, alternately on each replica, for longer than the idle timeout: it lives.
        for i in range(8):
            assert count((a, b)[i % 2], used) == i + 1
            ahead[0] += 0.4
        # Unused for longer than idle_ttl plus the last-seen write interval (0.2 s here): it has ended.
        ahead[0] += 2.6
        refused(b, unused)
        refused(a, unused)
        refused(a, used)
        refused(b, used)


def test_rolling_key_rotation_rejects_nothing_that_should_live(http: httpx.Client, redis: RedisServer) -> None:
    """The runbook: the new key verifies everywhere, then signs everywhere, then the old one retires.

    Replicas restart one at a time, so every step also runs with a mixed fleet. What changes is each replica's
    configuration, not its process: each is the quickstart built from its environment on a uvicorn in a thread.
    Every session carries client-held state signed on the other replica, and
    every check sends it, so state tokens cross the rotation too. Step 3 of the
    runbook waits out the longest lifetime before the old key retires; the test
    checks what that wait protects instead of timing it: once the old key is
    retired, every session it signed is refused and every one the new key
    signed still works. No step depends on how fast the replicas restart.
    """
    common = base_environ(redis, QUICKSTART_JSON="1")

    step0 = {**common, "MCP_SESSIONS_KEYS": f"old:{OLD}"}
    step1 = {**common, "MCP_SESSIONS_KEYS": f"old:{OLD},new:{NEW}"}  # the first key, old, still signs
    step2 = {**common, "MCP_SESSIONS_KEYS": f"old:{OLD},new:{NEW}", "MCP_SESSIONS_SIGNER": "new"}
    step3 = {**common, "MCP_SESSIONS_KEYS": f"new:{NEW}"}
    # Long-lived sessions minted outside the fleet with each key: what the key set alone decides.
    old_outsider = KeySet.from_config(f"old:{OLD}").mint_session_token(ttl=3600)[0]
    new_outsider = KeySet.from_config(f"new:{NEW}").mint_session_token(ttl=3600)[0]
    live: dict[str, dict[str, Any]] = {}  # sessionId -> {"state": ..., "count": ...}

    def kid(token: str) -> str:
        return str(jwt_header(token)["kid"])

    def create(replica: ServedReplica, signed_by: str, state_on: ServedReplica) -> None:
        session = ModernClient(http, replica.url).create_session()
        assert kid(session["sessionId"]) == signed_by
        _, set_mode = ModernClient(http, state_on.url).call_tool(
            "set_mode", {"mode": replica.name}, session=session_meta(session)
        )
        live[session["sessionId"]] = {"state": set_mode["result"]["_meta"][SESSION_KEY]["state"], "count": 0}

    def every_live_session_works(fleet: list[ServedReplica]) -> None:
        for token, held in live.items():
            for replica in fleet:
                meta = session_meta(token, state=held["state"])
                response, message = ModernClient(http, replica.url).call_tool("count", session=meta)
                assert response.status_code == 200, response.text
                held["count"] += 1
                assert tool_text(message) == str(held["count"]), (replica.name, kid(token), message)

    with served_replicas(step0, step0) as fleet:
        a, b = fleet
        create(a, "old", state_on=b)
        every_live_session_works(fleet)
        # A replica with a stale key set refuses what it cannot verify: why step 1 comes first.
        refused(ModernClient(http, a.url), {"sessionId": new_outsider}, tool="whoami")

        # Step 1: the new key verifies everywhere; the old one still signs.
        for replica in fleet:
            replica.restart(step1)
            every_live_session_works(fleet)
        create(b, "old", state_on=a)

        # Step 2: the new key signs. While B still runs step 1, it verifies A's new sessions,
        # and signs their state with the old key.
        for replica, other in ((a, b), (b, a)):
            replica.restart(step2)
            create(replica, "new", state_on=other)
            every_live_session_works(fleet)
        for token in (old_outsider, new_outsider):
            assert tool_text(ModernClient(http, b.url).call_tool("whoami", session={"sessionId": token})[1])

        # Step 3: the old key retires. An operator first waits the longest lifetime, so that nothing it
        # signed is still alive; here the sessions of steps 0 to 2 are kept, to show what that wait is for.
        before = dict(live)
        live.clear()
        create(a, "new", state_on=b)
        create(b, "new", state_on=a)
        for replica in fleet:
            replica.restart(step3)
            every_live_session_works(fleet)
        create(a, "new", state_on=b)
        every_live_session_works(fleet)
        # The retired key verifies nothing any more; every session the new key signed still lives.
        refused(ModernClient(http, b.url), {"sessionId": old_outsider}, tool="whoami")
        for token in [*before, new_outsider]:
            for replica in fleet:
                if kid(token) == "old":
                    refused(ModernClient(http, replica.url), {"sessionId": token}, tool="whoami")
                else:
                    assert tool_text(
                        ModernClient(http, replica.url).call_tool("whoami", session={"sessionId": token})[1]
                    )
        assert {kid(token) for token in before} == {"old", "new"}
