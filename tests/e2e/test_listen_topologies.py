"""Listen streams scoped to a session across two real replicas of examples/notifications.py on a real
3-master Redis Cluster: ``MCP_SESSIONS_STORE=redis+cluster://…`` keeps the sessions, and the bus the
example builds from the same URL carries the events with sharded pub/sub.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest

from _mcp import MCP_PATH, jwt_claims, modern_headers, modern_request, session_meta
from _redis_topologies import ClusterServers, client, redis_cluster
from _waits import Deadline
from e2e._listen import APP, NOTE
from e2e._listen import client as listening
from e2e._replicas import Replica, environ, json_and_sse

pytestmark = pytest.mark.anyio
PREFIX = f"listen-cluster-{uuid.uuid4().hex[:6]}:"


@pytest.fixture(scope="module")
def pair(cluster: ClusterServers) -> Iterator[list[Replica]]:
    with json_and_sse(environ(cluster.url, PREFIX), APP) as started:
        yield started


async def test_a_session_update_on_a_reaches_its_stream_on_b_through_its_slots_node_only(
    pair: list[Replica], cluster: ClusterServers
) -> None:
    a, b = (replica.url for replica in pair)

    def node(session: dict[str, object]) -> int:
        sid = jwt_claims(str(session["sessionId"]))["sid"]
        return cluster.nodes.index(cluster.node_for(f"{PREFIX}session:{{{sid}}}"))

    async with listening() as c:
        mine = await c.create(a)
        other = await c.create(b)
        for _ in range(30):  # another session, on another node
            if node(other) != node(mine):
                break
            other = await c.create(b)
        assert node(other) != node(mine)
        mine_b = await c.listen(b, "mine-b", mine)
        others = [await c.listen(b, "other-b", other), await c.listen(a, "global-a"), await c.listen(b, "global-b")]
        sid = jwt_claims(str(mine["sessionId"]))["sid"]
        with client(cluster.nodes[node(mine)].port) as owner:
            assert f"{PREFIX}session:{{{sid}}}" in owner.pubsub_shardchannels(PREFIX + "*")

        assert await c.tool(a, "edit_note", {"name": "plan", "text": "v2"}, mine) == "saved"
        await mine_b.wait(f"notifications/resources/updated {NOTE}")
        assert await c.tool(b, "add_tool", {}) == "announced"  # the marker: global, from the other replica
        for stream in [mine_b, *others]:
            await stream.wait("notifications/tools/list_changed")
        assert mine_b.events == [f"notifications/resources/updated {NOTE}", "notifications/tools/list_changed"]
        assert all(s.events == ["notifications/tools/list_changed"] for s in others), [s.events for s in others]


@pytest.mark.timeout(120)
async def test_a_sessions_open_stream_outlives_its_master_and_hears_the_next_update_from_its_replica() -> None:
    with redis_cluster(replicas=1) as replicated, json_and_sse(environ(replicated.url, PREFIX), APP) as pair:
        a, b = (replica.url for replica in pair)
        async with listening() as c:
            mine = await c.create(a)
            stream = await c.listen(b, "mine-b", mine)
            sid = jwt_claims(str(mine["sessionId"]))["sid"]
            lost = replicated.nodes.index(replicated.node_for(f"{PREFIX}session:{{{sid}}}"))
            replicated.nodes[lost].kill()
            await asyncio.to_thread(replicated.wait_for_promotion, lost)
            # Each edit on A succeeds, or gets the retryable 503 while the app replicas find the new master;
            # its event is dropped while B's bus reconnects. The stream stays open all along.
            updated, started = f"notifications/resources/updated {NOTE}", time.monotonic()
            edit = {"name": "edit_note", "arguments": {"name": "plan", "text": "v2"}}
            body = modern_request("tools/call", edit, session=session_meta(mine))
            heard = Deadline(lambda: f"the stream heard no update: {stream.events}", 90)
            while updated not in stream.events:
                assert not stream.ended.is_set(), stream.messages
                heard.check()
                response = await c.http.post(a + MCP_PATH, json=body, headers=modern_headers(body))
                assert response.status_code in (200, 503), response.text
                await asyncio.sleep(0.1)
            assert not stream.ended.is_set()
            assert stream.status == 200
            print(f"the stream heard an update {time.monotonic() - started:.1f} s after the promotion")
