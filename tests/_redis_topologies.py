"""Redis past one node, real and on loopback: a 3-master Cluster, and a master, a replica and three Sentinels.

Context managers (``redis_cluster()``, ``sentinel_group()``), not only fixtures, so that a benchmark can start
them too. Each starts in a few seconds (the Sentinels take longest: they find each other through the
master, every 2 s), stops every process it started and removes its directory, whatever
happens; every wait is bounded and says what it waited for. A binary that is missing skips
the test, or fails it under CI (``_redis.missing``).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.crc import key_slot

from _redis import RedisServer, free_port, redis_server_binary
from _waits import until

REDIS_DOWN = (redis.RedisError, OSError)
"""What a wait on a Redis topology counts as "not yet" (``_waits.until``'s ``ignoring``): a node still starting."""
SERVICE = "mymaster"
SLOTS = 16384


def start_fresh(make: Callable[[], RedisServer], attempts: int = 3) -> RedisServer:
    """``make()`` a server and start it; on new free ports again if it exits at start (a port taken meanwhile)."""
    for attempt in range(attempts):
        server = make()
        try:
            server.start()
            return server
        except RuntimeError as exc:
            if "exited at start" not in str(exc) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def client(port: int) -> redis.Redis:
    """A short-lived plain client of one node, for the fixtures' own commands."""
    return redis.Redis(port=port, decode_responses=True, socket_timeout=2, socket_connect_timeout=2)


def info(port: int, section: str) -> dict[str, object]:
    with client(port) as node:
        return node.info(section)  # type: ignore[no-any-return]


@dataclass
class ClusterServers:
    """A running Redis Cluster: masters with the slots split evenly, and each one's replicas, if any."""

    nodes: list[RedisServer]
    """The masters, as the cluster was created."""
    ranges: list[tuple[int, int]]
    replicas: list[list[RedisServer]]
    """Each master's replicas, in the masters' order."""

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def node_for(self, key: str) -> RedisServer:
        """The node that serves ``key``'s slot (as the cluster was created: no slot moves here)."""
        slot = key_slot(key.encode())
        return next(node for node, (low, high) in zip(self.nodes, self.ranges, strict=True) if low <= slot <= high)

    def wait_ok(self) -> None:
        """Every node reports ``cluster_state:ok`` and knows every other one."""
        everyone = [*self.nodes, *(node for replicas in self.replicas for node in replicas)]
        for node in everyone:

            def ready(port: int = node.port) -> bool:
                with client(port) as c:
                    state = c.cluster("INFO")
                return state["cluster_state"] == "ok" and int(state["cluster_known_nodes"]) == len(everyone)

            until(ready, f"cluster_state:ok on node {node.port}", ignoring=REDIS_DOWN)

    def promoted(self, index: int) -> RedisServer | None:
        """The replica of master ``index`` (killed) that every other node sees serving its slots; ``None`` yet.

        Every node, replicas too: a client reads the slot map again from whichever node answers it first."""
        others = [node for i, node in enumerate(self.nodes) if i != index]
        others += [replica for replicas in self.replicas for replica in replicas]
        try:
            for replica in self.replicas[index]:
                if info(replica.port, "replication")["role"] == "master" and all(
                    _serves(node.port, replica.port) for node in others
                ):
                    return replica
        except (redis.RedisError, OSError):
            pass
        return None

    def wait_for_promotion(self, index: int) -> RedisServer:
        """Wait until :meth:`promoted`; that replica."""
        return until(lambda: self.promoted(index), f"a replica of master {index}", ignoring=REDIS_DOWN)


def _serves(port: int, master: int) -> bool:
    """Whether the node on ``port`` has its cluster ``ok`` and sees the node on ``master`` as a master with slots."""
    with client(port) as c:
        if c.cluster("INFO")["cluster_state"] != "ok":
            return False
        nodes = c.execute_command("CLUSTER", "NODES")
    for line in nodes.splitlines():  # id, address, flags, master id, ping, pong, epoch, link state, slots...
        fields = line.split()
        if fields[1].startswith(f"127.0.0.1:{master}@"):
            return "master" in fields[2].split(",") and len(fields) > 8
    return False


@contextlib.contextmanager
def redis_cluster(masters: int = 3, binary: str | None = None, replicas: int = 0) -> Iterator[ClusterServers]:
    """A Redis Cluster of ``masters`` nodes on loopback, each with ``replicas`` replicas, stopped and removed
    when the block ends.

    Each node's cluster bus port is chosen free (a port plus 10,000 can pass 65,535). A node down
    does not stop the others (``cluster-require-full-coverage no``): only its slots are unavailable
    until it returns, or until one of its replicas is promoted. ``cluster-node-timeout`` is 1 s, so a
    lost node is seen as failed quickly. The block begins once every replica is in sync with its master.
    """
    binary = binary or redis_server_binary()
    with tempfile.TemporaryDirectory(prefix="mcp-sessions-cluster-") as directory:
        started: list[RedisServer] = []
        try:

            def cluster_node() -> RedisServer:
                node = RedisServer(binary, Path(directory))
                node.arguments = [
                    "--cluster-enabled", "yes",
                    "--cluster-port", str(free_port()),
                    "--cluster-config-file", f"nodes-{node.port}.conf",
                    "--cluster-node-timeout", "1000",
                    "--cluster-require-full-coverage", "no",
                ]  # fmt: skip
                return node

            for _ in range(masters * (1 + replicas)):
                started.append(start_fresh(cluster_node))
            nodes, spares = started[:masters], started[masters:]
            size = SLOTS // masters
            ranges = [(i * size, SLOTS - 1 if i == masters - 1 else (i + 1) * size - 1) for i in range(masters)]
            for epoch, (node, (low, high)) in enumerate(zip(nodes, ranges, strict=True), start=1):
                with client(node.port) as c:
                    c.execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
                    c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
            with client(nodes[0].port) as first:
                for node in [*nodes[1:], *spares]:
                    bus = node.arguments[node.arguments.index("--cluster-port") + 1]
                    first.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, bus)
            cluster = ClusterServers(nodes, ranges, [spares[i::masters] for i in range(masters)])
            cluster.wait_ok()
            for master, replicas_of in zip(nodes, cluster.replicas, strict=True):
                with client(master.port) as c:
                    master_id = c.execute_command("CLUSTER", "MYID")
                for replica in replicas_of:
                    with client(replica.port) as c:
                        c.execute_command("CLUSTER", "REPLICATE", master_id)

                    def synced(port: int = replica.port) -> bool:
                        return info(port, "replication")["master_link_status"] == "up"

                    until(synced, f"replica {replica.port} to sync with its master", ignoring=REDIS_DOWN)
            yield cluster
        finally:
            for node in started:
                node.stop()


@dataclass
class SentinelGroup:
    """A master, one replica of it and three Sentinels watching it (quorum 2, down after 1 s)."""

    master: RedisServer
    replica: RedisServer
    sentinels: list[RedisServer]

    @property
    def url(self) -> str:
        return f"redis+sentinel://{','.join(f'127.0.0.1:{s.port}' for s in self.sentinels)}/{SERVICE}/0"

    def master_port(self) -> int:
        """The master's port, as the first Sentinel that answers names it."""
        for sentinel in self.sentinels:
            with contextlib.suppress(redis.RedisError, OSError), client(sentinel.port) as c:
                _, port = c.sentinel_get_master_addr_by_name(SERVICE)
                return int(port)
        raise RuntimeError("no Sentinel answered")

    def failed_over(self, old_port: int) -> bool:
        """Every Sentinel names a master other than ``old_port``, and that master says it is one."""
        try:
            for sentinel in self.sentinels:
                with client(sentinel.port) as c:
                    if int(c.sentinel_get_master_addr_by_name(SERVICE)[1]) == old_port:
                        return False
            return info(self.master_port(), "replication")["role"] == "master"
        except (redis.RedisError, OSError):
            return False

    def wait_for_failover(self, old_port: int) -> int:
        """Wait until :meth:`failed_over`; the new master's port."""
        until(lambda: self.failed_over(old_port), "the Sentinels to promote the replica", ignoring=REDIS_DOWN)
        return self.master_port()


def sentinel_configuration(directory: Path, port: int, master_port: int) -> Path:
    path = directory / f"sentinel-{port}.conf"
    path.write_text(
        f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n"
        f"sentinel down-after-milliseconds {SERVICE} 1000\n"
        f"sentinel failover-timeout {SERVICE} 5000\n"
        f"sentinel parallel-syncs {SERVICE} 1\n"
    )
    return path


@contextlib.contextmanager
def sentinel_group(binary: str | None = None) -> Iterator[SentinelGroup]:
    """A master, a replica and three Sentinels on loopback, all stopped and removed when the block ends.

    Started in order: the replica is in sync before the Sentinels start (a Sentinel asks the master
    for its replicas when it connects, then only every 10 s), and the block begins once every
    Sentinel knows the replica and the two other Sentinels, so that a failover can be agreed on.
    """
    binary = binary or redis_server_binary()
    with tempfile.TemporaryDirectory(prefix="mcp-sessions-sentinel-") as name:
        directory = Path(name)
        started: list[RedisServer] = []
        try:
            master = start_fresh(lambda: RedisServer(binary, directory))
            started.append(master)
            replica = start_fresh(
                lambda: RedisServer(binary, directory, ["--replicaof", "127.0.0.1", str(master.port)])
            )
            started.append(replica)
            until(
                lambda: info(replica.port, "replication")["master_link_status"] == "up",
                "the replica to sync with its master",
                ignoring=REDIS_DOWN,
            )
            sentinels = []

            def sentinel_node() -> RedisServer:
                sentinel = RedisServer(binary, directory, ["--sentinel"])
                sentinel.configuration = [str(sentinel_configuration(directory, sentinel.port, master.port))]
                return sentinel

            for _ in range(3):
                sentinel = start_fresh(sentinel_node)
                started.append(sentinel)
                sentinels.append(sentinel)
            for sentinel in sentinels:

                def knows_everyone(port: int = sentinel.port) -> bool:
                    with client(port) as c:
                        state = c.sentinel_master(SERVICE)
                    return int(state["num-other-sentinels"]) == 2 and int(state["num-slaves"]) == 1

                until(knows_everyone, f"Sentinel {sentinel.port} to find the others", ignoring=REDIS_DOWN)
            yield SentinelGroup(master, replica, sentinels)
        finally:
            for server in reversed(started):
                server.stop()
