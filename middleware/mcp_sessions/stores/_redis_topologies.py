"""Redis past one node, named by URL: a Cluster (``redis+cluster://``) or a master behind Sentinels (``redis+sentinel://``).

- ``redis+cluster://[user:password@]host:port[,host:port…]`` and ``rediss+cluster://…`` (TLS): the
  listed nodes are where the client starts; it reads the slot map from them, follows ``MOVED`` and
  ``ASK`` (a redirected command was not run, so following it runs it once), and reads the map again
  after a node fails. It never sends a command twice: a connection error or a timeout is raised, not
  retried (a retried ``EVALSHA`` whose reply was lost could count an increment twice). A session's
  keys share one slot, so every script runs on one node.
- ``redis+sentinel://[user:password@]host:port[,host:port…]/service_name[/db]`` and
  ``rediss+sentinel://…``: the Sentinels are asked for the master of ``service_name`` whenever a
  connection opens, so after a failover the next connection goes to the new master (connections
  to the old one fail, and are dropped, once). The user and password are the master's (where the
  data is); Sentinels that require their own take ``?sentinel_username=`` and
  ``?sentinel_password=``. TLS (``rediss+``) applies to the master and the Sentinels alike.

The port defaults to 6379 for a Cluster node and 26379 for a Sentinel. Every part is checked
before a client is built, and no message repeats the URL (it may hold a password).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff

from ._urls import _query

__all__ = ["CLUSTER_SCHEMES", "SENTINEL_SCHEMES", "Topology", "cluster_client", "parse_topology", "sentinel_client"]

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
_SENTINEL_PARAMETERS = {"sentinel_username", "sentinel_password"}


@dataclass(frozen=True)
class Topology:
    """What a ``redis+cluster://`` or ``redis+sentinel://`` URL names; the passwords are left out of its repr."""

    scheme: str
    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    service: str = ""
    db: int = 0
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)

    @property
    def tls(self) -> bool:
        return self.scheme.startswith("rediss+")


def parse_topology(url: str) -> Topology:
    """The URL part by part; a ``ValueError`` names the part at fault, never its value."""
    parts = urlsplit(url)
    scheme = parts.scheme
    if scheme not in CLUSTER_SCHEMES + SENTINEL_SCHEMES:
        raise ValueError(f"not a Redis Cluster or Sentinel URL: use {', '.join(CLUSTER_SCHEMES + SENTINEL_SCHEMES)}")
    if parts.fragment:
        raise ValueError(f"a {scheme}:// URL has no #fragment")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    sentinel = scheme in SENTINEL_SCHEMES
    nodes = _nodes(scheme, hosts, default_port=26379 if sentinel else 6379)
    user, secret = unquote(username) or None, unquote(password) or None
    if not sentinel:
        _query(url, set())
        if parts.path not in ("", "/", "/0"):
            raise ValueError(f"a Redis Cluster has only database 0: the {scheme}:// URL takes no path but /0")
        return Topology(scheme, nodes, user, secret)
    query = _query(url, _SENTINEL_PARAMETERS)
    service, _, database = parts.path.removeprefix("/").partition("/")
    if not service:
        raise ValueError(f"the {scheme}:// URL needs the master's service name: {scheme}://host:port/service_name")
    if database and not (database.isascii() and database.isdigit()):
        raise ValueError(f"the database number after the service name in the {scheme}:// URL must be an integer")
    return Topology(
        scheme,
        nodes,
        user,
        secret,
        service=unquote(service),
        db=int(database or 0),
        sentinel_username=query.get("sentinel_username") or None,
        sentinel_password=query.get("sentinel_password") or None,
    )


def _nodes(scheme: str, hosts: str, *, default_port: int) -> tuple[tuple[str, int], ...]:
    """``host[:port]`` pairs, comma-separated (an IPv6 address in brackets)."""
    kind = "Sentinel" if scheme in SENTINEL_SCHEMES else "Cluster node"
    if not hosts:
        raise ValueError(f"the {scheme}:// URL needs at least one {kind}: {scheme}://host:port[,host:port…]")
    nodes: list[tuple[str, int]] = []
    for position, item in enumerate(hosts.split(","), start=1):
        node = urlsplit("//" + item)
        if not node.hostname:
            raise ValueError(f"{kind} {position} in the {scheme}:// URL has no host")
        try:
            port = node.port
        except ValueError:
            port = 0
        if port == 0:
            raise ValueError(f"the port of {kind} {position} in the {scheme}:// URL must be an integer from 1 to 65535")
        nodes.append((node.hostname, port or default_port))
    return tuple(nodes)


def _connection_options(*, timeout: float, connect_timeout: float) -> dict[str, Any]:
    """What every connection to a data node shares with ``redis://``: deadlines, RESP2, text, no retries."""
    return {
        "socket_timeout": timeout,
        "socket_connect_timeout": min(connect_timeout, timeout),
        "retry": Retry(NoBackoff(), 0),
        "protocol": 2,  # see _redis_client.client_from_url
        "decode_responses": True,
        "client_name": "mcp-sessions",
    }


def cluster_client(topology: Topology, *, timeout: float, connect_timeout: float, max_connections: int) -> RedisCluster:
    """A ``RedisCluster`` over the URL's startup nodes, at most ``max_connections`` to each node.

    Past that bound a command fails at once (redis-py's cluster pool does not wait), which the store
    reports as unavailable, like a pool wait that runs out.
    """
    return RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in topology.nodes],
        username=topology.username,
        password=topology.password,
        ssl=topology.tls,
        max_connections=max_connections,
        # A MOVED reply patches that slot's owner. Left at its default (5), redis-py would close every
        # connection of the client at each fifth MOVED, failing the commands other requests have in
        # flight: a fresh client's first concurrent commands, sent before the slot map is read, did so.
        reinitialize_steps=0,
        **_connection_options(timeout=timeout, connect_timeout=connect_timeout),
    )


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Sentinel's master pool that waits for a free connection (``timeout``) as ``redis://``'s pool does,
    and closes its Sentinel clients with itself (the store owns them both)."""

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            await self.sentinel_manager.aclose()


def sentinel_client(
    topology: Topology, *, timeout: float, connect_timeout: float, max_connections: int
) -> aioredis.Redis:
    """A client of the master Sentinel names, asked again each time a connection opens."""
    options = _connection_options(timeout=timeout, connect_timeout=connect_timeout)
    sentinel_options = {key: options[key] for key in ("socket_timeout", "socket_connect_timeout", "retry")}
    sentinel_options.update(
        username=topology.sentinel_username, password=topology.sentinel_password, ssl=topology.tls, protocol=2
    )
    sentinel = Sentinel(list(topology.nodes), sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call]
    client: aioredis.Redis = sentinel.master_for(
        topology.service,
        connection_pool_class=_BlockingSentinelPool,
        username=topology.username,
        password=topology.password,
        db=topology.db,
        ssl=topology.tls,
        max_connections=max_connections,
        timeout=timeout,
        **options,
    )
    return client
