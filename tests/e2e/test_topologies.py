"""Two replicas of the quickstart on Redis past one node: a real 3-master Cluster (``redis+cluster://``) and a
real master, replica and three Sentinels (``redis+sentinel://``). What is tested is the store's topology, so each
replica is the quickstart built from its environment on a real uvicorn in a thread of this process.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from _mcp import ModernClient, jwt_claims, session_meta, tool_text
from _redis import RedisServer
from _redis_topologies import ClusterServers, client, redis_cluster, sentinel_group
from _waits import Deadline, until
from e2e._replicas import (
    STORE_UNAVAILABLE,
    ServedReplica,
    a_delete_on_b_is_refused_on_a_at_once,
    clients,
    count,
    counts_exactly_under_concurrency,
    environ,
    served_json_and_sse,
)


def outcome(response: httpx.Response, message: dict[str, Any]) -> int | None:
    """The counter a successful ``count`` returned, or None for the retryable -32010; anything else fails."""
    if response.status_code == 503:
        assert response.headers["retry-after"] == "1", response.headers
        assert message["error"]["code"] == STORE_UNAVAILABLE, message
        return None
    assert response.status_code == 200, response.text
    assert "error" not in message, message
    return int(tool_text(message))


PREFIX = f"cluster-{uuid.uuid4().hex[:6]}:"


@pytest.fixture(scope="module")
def pair(cluster: ClusterServers) -> Iterator[list[ServedReplica]]:
    """Replicas A (JSON responses) and B (SSE responses) on the one Cluster. Both serve in this process, beside
    the client of 50 concurrent calls: on a loaded two-core machine a reply waited past 2 s there, and the exact
    count is the subject here, not the store's bound (a killed node refuses at once, whatever the bound)."""
    with served_json_and_sse(environ(cluster.url, PREFIX, MCP_SESSIONS_REDIS_TIMEOUT="10")) as started:
        yield started


def node_of(cluster: ClusterServers, session: dict[str, Any]) -> int:
    """The index of the Cluster node that holds the session's keys (they share the ``{sid}`` slot)."""
    sid = jwt_claims(session["sessionId"])["sid"]
    return cluster.nodes.index(cluster.node_for(f"{PREFIX}{{{sid}}}:s"))


def one_session_per_node(replica: ModernClient, cluster: ClusterServers) -> dict[int, dict[str, Any]]:
    """New sessions until each of the three masters holds one (random ids: 12 miss a node 2% of the time)."""
    by_node: dict[int, dict[str, Any]] = {}
    for _ in range(60):
        session = replica.create_session()
        by_node.setdefault(node_of(cluster, session), session)
        if len(by_node) == 3:
            return by_node
    raise AssertionError("60 sessions did not spread over the three nodes")


def test_a_session_lives_on_every_replica_and_its_keys_on_one_node(
    http: httpx.Client, pair: list[ServedReplica], cluster: ClusterServers
) -> None:
    a, b = clients(http, pair)
    for node, session in one_session_per_node(a, cluster).items():
        assert [count((a, b)[i % 2], session) for i in range(4)] == [1, 2, 3, 4]
        # The session's keys all live on the master its slot names.
        with client(cluster.nodes[node].port) as owner:
            sid = jwt_claims(session["sessionId"])["sid"]
            assert owner.hget(f"{PREFIX}{{{sid}}}:d", "count") == "4"


def test_concurrent_calls_across_both_replicas_count_exactly(pair: list[ServedReplica]) -> None:
    counts_exactly_under_concurrency(pair, 50)


def test_a_delete_on_b_is_refused_on_a_at_once(http: httpx.Client, pair: list[ServedReplica]) -> None:
    a_delete_on_b_is_refused_on_a_at_once(http, pair)


def test_a_lost_node_costs_only_its_own_sessions_and_returns(
    http: httpx.Client, pair: list[ServedReplica], cluster: ClusterServers
) -> None:
    """Last in the module: the node comes back empty (no persistence), as after a crash without a disk."""
    a, b = clients(http, pair)
    by_node = one_session_per_node(a, cluster)
    for session in by_node.values():
        assert count(a, session) == 1
    lost = cluster.nodes[0]
    lost.kill()
    try:
        for round_ in range(3):
            for replica in (a, b):
                # Its node is down: the retryable -32010, never -32043, never a 500.
                assert outcome(*replica.call_tool("count", session=session_meta(by_node[0]))) is None
                for index in (1, 2):  # the others' nodes answer (cluster-require-full-coverage no)
                    assert count(replica, by_node[index]) == 2 + 2 * round_ + (replica is b)
    finally:
        lost.start()  # same port and node identity (nodes.conf); empty
    cluster.wait_ok()
    until(
        lambda: outcome(*a.call_tool("count", session=session_meta(by_node[0]))) is not None,
        "the restarted node's sessions did not come back",
    )
    # From then on, every request succeeds, on both replicas; the lost node's counter started over.
    for replica in (b, a, b):
        for index in (1, 2):
            assert outcome(*replica.call_tool("count", session=session_meta(by_node[index]))) is not None
        assert outcome(*replica.call_tool("count", session=session_meta(by_node[0]))) is not None


@pytest.mark.timeout(180)
def test_a_sentinel_failover_answers_only_retryable_errors_then_succeeds(http: httpx.Client) -> None:
    with sentinel_group() as group:
        common = environ(group.url, f"sentinel-{uuid.uuid4().hex[:6]}:")
        with served_json_and_sse(common) as pair:
            a, b = clients(http, pair)
            old = group.master.port
            failover(a, b, a.create_session(), group.master, lambda: group.failed_over(old))


@pytest.mark.timeout(180)
def test_a_cluster_failover_answers_only_retryable_errors_then_succeeds(http: httpx.Client) -> None:
    """The session's master is killed; its replica, promoted by the Cluster itself, serves the session."""
    with redis_cluster(replicas=1) as replicated:
        common = environ(replicated.url, PREFIX)
        with served_json_and_sse(common) as pair:
            a, b = clients(http, pair)
            session = a.create_session()
            lost = node_of(replicated, session)
            failover(a, b, session, replicated.nodes[lost], lambda: replicated.promoted(lost) is not None)


def failover(
    a: ModernClient, b: ModernClient, session: dict[str, Any], master: RedisServer, failed_over: Callable[[], bool]
) -> None:
    """Kill ``master``, the session's, amid its requests, until ``failed_over()``: retryable errors, then successes."""
    before = [count((a, b)[i % 2], session) for i in range(6)]
    assert before == [1, 2, 3, 4, 5, 6]
    with client(master.port) as node:
        # The replica has every write so far (each WAIT shorter than the client's socket timeout).
        until(lambda: node.execute_command("WAIT", 1, 1000) == 1, "the replica did not acknowledge the writes")
    master.kill()

    # The window: requests alternate between the app replicas until the Redis replica is promoted and each app
    # has succeeded since (its client learns the new topology at a request; on a busy machine, a later one).
    successes, unavailable, over, served = 0, 0, False, set[int]()
    promoted = Deadline("no failover")
    for i in itertools.count():
        answered = outcome(*(a, b)[i % 2].call_tool("count", session=session_meta(session)))
        if answered is None:
            unavailable += 1
        else:
            successes += 1
        over = over or failed_over()
        if over and answered is not None:
            served.add(i % 2)
        if served == {0, 1}:
            break
        promoted.check()
        time.sleep(0.05)
    assert unavailable >= 1  # the kill was seen: the first request after it cannot have succeeded

    # After it: every request succeeds on both replicas (the same apps), and the counter kept what
    # the replica had. An increment whose answer was -32010 may or may not have been applied (a reply lost
    # in flight), so the count lies between the successes alone and the successes plus those.
    after = [count((a, b)[i % 2], session) for i in range(6)]
    assert after == list(range(after[0], after[0] + 6))
    lowest = 6 + successes + 1
    assert lowest <= after[0] <= lowest + unavailable, (after, successes, unavailable)
    fresh = b.create_session()
    assert [count(a, fresh), count(b, fresh)] == [1, 2]
