"""The Redis client built from a store URL, for ``RedisStore`` and the subscription bus: one node, a Cluster,
or the master Sentinels name.

A Cluster client follows ``MOVED`` and ``ASK`` (a redirected command was not run, so following it runs it
once); a Sentinel client asks the Sentinels for the master whenever a connection opens, so after a failover
the next connection goes to the new master. No client retries a command: a retried ``EVALSHA`` whose reply
was lost could count an increment twice. The URL is checked part by part before redis-py reads it, and no
message repeats it (it may hold a password). Without ``redis`` installed, importing this module names
the extra to install.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

try:
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import ClusterNode, RedisCluster
    from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS
    from redis.asyncio.retry import Retry
    from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
    from redis.backoff import NoBackoff
    from redis.exceptions import ResponseError as ResponseError
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without redis
    raise ImportError(
        "RedisStore needs the redis package: pip install 'redis>=8.1' (the redis extra of mcp-sessions)"
    ) from exc

from ._base import url_integer, url_query

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
_INVALID_URL = "the Redis URL is not valid: use redis://[user:password@]host[:port][/db], rediss://… or unix://…"
# redis-py lets a URL's query override the options it is given: these the store sets itself
# (deadlines, the pool's bound and wait, RESP2, no retries, the reply shapes its scripts read).
_SET_BY_THE_STORE = {"socket_timeout", "socket_connect_timeout", "timeout", "max_connections", "protocol"}
_SET_BY_THE_STORE |= {"retry_on_timeout", "legacy_responses"}
# TLS settings redis-py hands to a rediss:// connection as text (its typed URL arguments hold the rest).
_TLS_TEXT = {"ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_data", "ssl_certfile", "ssl_keyfile", "ssl_ciphers"}


def check_client_options(*, timeout: float, connect_timeout: float, max_connections: int) -> None:
    """Refuse a deadline outside (0, 60] seconds or a pool of no connections."""
    for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
        if not 0 < value <= 60:
            raise ValueError(f"{name} must be a number of seconds above 0 and at most 60")
    if type(max_connections) is not int or max_connections < 1:
        raise ValueError("max_connections must be a positive integer")


def url_parameters(scheme: str) -> frozenset[str]:
    """The query parameters a ``redis://``, ``rediss://`` or ``unix://`` URL may hold.

    redis-py's typed URL arguments, less those the store sets itself; the TLS ones (and the TLS
    files and settings it takes as text) for ``rediss://`` only; for ``unix://``, no keepalive and
    the ``password`` redis-py's own example puts in the query. Any other name redis-py would pass to
    the connection, to fail with ``TypeError`` at the first command.
    """
    typed = set(URL_QUERY_ARGUMENT_PARSERS) - _SET_BY_THE_STORE
    if scheme == "rediss":
        return frozenset(typed | _TLS_TEXT)
    plain = {name for name in typed if not name.startswith("ssl_")}
    if scheme == "unix":
        return frozenset(plain - {"socket_keepalive"} | {"password"})
    return frozenset(plain)


def check_url(url: str) -> None:
    """Refuse in a ``redis://``, ``rediss://`` or ``unix://`` URL what redis-py would misread, silently accept
    or fail on at the first command: a bad port, a database that is not a number, a query parameter it does
    not take (see :func:`url_parameters`)."""
    parts = urlsplit(url)
    if parts.fragment:
        raise ValueError("a Redis URL has no #fragment")
    if parts.scheme == "unix":
        if not parts.path:
            raise ValueError("a unix:// Redis URL needs the socket's path: unix:///path/to/redis.sock")
    else:
        if not parts.hostname:
            raise ValueError(f"the {parts.scheme}:// URL needs a host: {parts.scheme}://host[:port][/db]")
        try:
            parts.port  # noqa: B018 - urllib checks the port when it is read
        except ValueError:
            raise ValueError(f"the port in the {parts.scheme}:// URL must be an integer from 0 to 65535") from None
        if database := parts.path.lstrip("/"):
            url_integer(database, f"the database number in the {parts.scheme}:// URL path")
    query = url_query(url, url_parameters(parts.scheme))
    url_integer(query.get("db", "0"), "the db parameter of the Redis URL")
    if query.get("ssl_cert_reqs", "required") not in ("none", "optional", "required"):
        raise ValueError("the Redis URL parameter 'ssl_cert_reqs' must be none, optional or required")
    for name, value in query.items():
        try:
            URL_QUERY_ARGUMENT_PARSERS.get(name, str)(value)
        except (TypeError, ValueError):
            raise ValueError(f"the value of the Redis URL parameter {name!r} is not one redis-py reads") from None


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
    """A Cluster or Sentinel URL, part by part; a ``ValueError`` names the part at fault, never its value."""
    parts = urlsplit(url)
    scheme = parts.scheme
    if parts.fragment:
        raise ValueError(f"a {scheme}:// URL has no #fragment")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    sentinel = scheme in SENTINEL_SCHEMES
    kind, default_port = ("Sentinel", 26379) if sentinel else ("Cluster node", 6379)
    nodes = _nodes(scheme, hosts, kind=kind, default_port=default_port)
    user, secret = unquote(username) or None, unquote(password) or None
    if not sentinel:
        url_query(url, set())
        if parts.path not in ("", "/", "/0"):
            raise ValueError(f"a Redis Cluster has only database 0: the {scheme}:// URL takes no path but /0")
        return Topology(scheme, nodes, user, secret)
    query = url_query(url, {"sentinel_username", "sentinel_password"})
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


def _nodes(scheme: str, hosts: str, *, kind: str, default_port: int) -> tuple[tuple[str, int], ...]:
    """``host[:port]`` pairs, comma-separated (an IPv6 address in brackets)."""
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


class _BlockingSentinelPool(SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """Sentinel's master pool that waits for a free connection (``timeout``) as ``redis://``'s pool does,
    and closes its Sentinel clients with itself (the store owns them both)."""

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            await self.sentinel_manager.aclose()


def client_from_url(
    url: str, *, timeout: float, connect_timeout: float, max_connections: int
) -> aioredis.Redis | RedisCluster:
    """A client over a bounded pool of its own, after the URL and options are checked: RESP2, no retries, text
    replies. ``RedisStore`` builds its client so, and so does the subscription bus."""
    check_client_options(timeout=timeout, connect_timeout=connect_timeout, max_connections=max_connections)
    options: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": min(connect_timeout, timeout),
        "retry": Retry(NoBackoff(), 0),
        # RESP2 keeps the pool's check for connections a restarted server closed (see RedisStore).
        "protocol": 2,
        "decode_responses": True,
        "client_name": "mcp-sessions",
    }
    scheme = url.partition("://")[0].lower()
    if scheme in CLUSTER_SCHEMES:
        return _cluster_client(parse_topology(url), max_connections, options)
    if scheme in SENTINEL_SCHEMES:
        return _sentinel_client(parse_topology(url), max_connections, timeout, options)
    if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise ValueError(_INVALID_URL)
    check_url(url)
    try:
        pool = aioredis.BlockingConnectionPool.from_url(
            url, max_connections=max_connections, timeout=timeout, **options
        )
    except ValueError:
        # redis-py's message may quote the URL, and a URL can hold a password.
        raise ValueError(_INVALID_URL) from None
    return aioredis.Redis.from_pool(pool)


def _cluster_client(topology: Topology, max_connections: int, options: dict[str, Any]) -> RedisCluster:
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
        **options,
    )


def _sentinel_client(
    topology: Topology, max_connections: int, timeout: float, options: dict[str, Any]
) -> aioredis.Redis:
    """A client of the master Sentinel names, asked again each time a connection opens."""
    sentinel_options = {key: options[key] for key in ("socket_timeout", "socket_connect_timeout", "retry")}
    sentinel_options.update(
        username=topology.sentinel_username,
        password=topology.sentinel_password,
        ssl=topology.tls,
        protocol=2,
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


def reply_text(value: str | bytes) -> str:
    """A reply as text, whether or not the client decodes responses (a caller's client may not)."""
    return value.decode() if isinstance(value, bytes) else value
