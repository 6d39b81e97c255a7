"""The Redis client ``RedisStore`` builds from a URL, and what it says when Redis fails.

A Cluster or a Sentinel-watched master (``redis+cluster://``, ``redis+sentinel://``) is built by
``_redis_topologies`` with the same deadlines, protocol and no retries.

The URL is checked part by part before redis-py reads it, and no message repeats it
(it may hold a password). The pool is bounded, speaks RESP2 and never retries a
command: each call takes at most ``timeout`` seconds, pool wait, connect and reply
included. This is the one module of the store that imports ``redis``, so its absence
is reported here, naming the extra to install.
"""

from __future__ import annotations

from urllib.parse import urlsplit

try:
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import ResponseError
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without redis
    raise ImportError(
        "RedisStore needs the redis package: pip install 'redis>=5.2' (the redis extra of mcp-sessions)"
    ) from exc

from ._redis_topologies import (
    CLUSTER_SCHEMES,
    SENTINEL_SCHEMES,
    cluster_client,
    parse_topology,
    sentinel_client,
)
from ._urls import _query

__all__ = ["check_client_options", "check_url", "client_from_url", "describe_failure", "reply_text", "url_parameters"]

_INVALID_URL = "the Redis URL is not valid: use redis://[user:password@]host[:port][/db], rediss://… or unix://…"
# redis-py lets a URL's query override the options it is given: these the store sets itself
# (deadlines, the pool's bound and wait, RESP2, no retries, the reply shapes its scripts read).
_SET_BY_THE_STORE = frozenset(
    {
        "socket_timeout",
        "socket_connect_timeout",
        "timeout",
        "max_connections",
        "protocol",
        "retry_on_timeout",
        "legacy_responses",
    }
)
# TLS settings redis-py hands to a rediss:// connection as text (its typed URL arguments hold the rest).
_TLS_TEXT = frozenset({"ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_data", "ssl_certfile", "ssl_keyfile", "ssl_ciphers"})


def check_client_options(*, timeout: float, connect_timeout: float, max_connections: int) -> None:
    """Refuse a deadline outside (0, 60] seconds or a pool of no connections."""
    for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
        if not 0 < value <= 60:
            raise ValueError(f"{name} must be a number of seconds above 0 and at most 60")
    if type(max_connections) is not int or max_connections < 1:
        raise ValueError("max_connections must be a positive integer")


def check_url(url: str) -> None:
    """Refuse what redis-py would misread, silently accept or fail on at the first command: a bad port, a
    database that is not a number, a query parameter it does not take (see :func:`url_parameters`).

    The messages name the part at fault and never repeat the URL (it may hold a password).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError(_INVALID_URL)
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
        database = parts.path.lstrip("/")
        if database and not (database.isascii() and database.isdigit()):
            raise ValueError(f"the database number in the {parts.scheme}:// URL path must be a non-negative integer")
    query = _query(url, url_parameters(parts.scheme))
    db = query.get("db", "0")
    if not (db.isascii() and db.isdigit()):
        raise ValueError("the db parameter of the Redis URL must be a non-negative integer")
    if query.get("ssl_cert_reqs", "required") not in ("none", "optional", "required"):
        raise ValueError("the Redis URL parameter 'ssl_cert_reqs' must be none, optional or required")
    for name, value in query.items():
        try:
            URL_QUERY_ARGUMENT_PARSERS.get(name, str)(value)
        except (TypeError, ValueError):
            raise ValueError(f"the value of the Redis URL parameter {name!r} is not one redis-py reads") from None


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


def client_from_url(
    url: str, *, timeout: float, connect_timeout: float, max_connections: int
) -> aioredis.Redis | RedisCluster:
    """A client over a bounded pool of its own, after :func:`check_url`: RESP2, no retries, text replies.

    ``redis+cluster://`` and ``redis+sentinel://`` URLs (and their TLS forms) give a ``RedisCluster``
    or a client of the master the Sentinels name (see ``_redis_topologies``).
    """
    scheme = url.partition("://")[0].lower()
    if scheme in CLUSTER_SCHEMES + SENTINEL_SCHEMES:
        topology = parse_topology(url)
        build = cluster_client if scheme in CLUSTER_SCHEMES else sentinel_client
        return build(topology, timeout=timeout, connect_timeout=connect_timeout, max_connections=max_connections)
    check_url(url)
    try:
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=min(connect_timeout, timeout),
            retry=Retry(NoBackoff(), 0),
            # RESP2: with RESP3 (redis-py 8's default) the pool skips its check for connections
            # the server closed, so the first command after a Redis restart failed
            # (redis/redis-py#4252). RESP2 keeps the check: a dead pooled connection is
            # replaced before a command is sent on it, and no command is ever sent twice.
            protocol=2,
            decode_responses=True,
            client_name="mcp-sessions",
        )
    except ValueError:
        # redis-py's message may quote the URL, and a URL can hold a password.
        raise ValueError(_INVALID_URL) from None
    return aioredis.Redis.from_pool(pool)


def describe_failure(exc: Exception) -> str:
    """What failed, safe to show a client: the exception's type and a Redis error code, never a host or key."""
    reason = f"redis failed: {type(exc).__name__}"
    # A Redis error reply starts with its code (WRONGTYPE, OOM, NOAUTH, READONLY, LOADING, …).
    code = str(exc).split(" ", 1)[0]
    if isinstance(exc, ResponseError) and code.isalpha() and code.isupper():
        reason += f" {code}"
    return reason


def reply_text(value: str | bytes) -> str:
    """A reply as text, whether or not the client decodes responses (a caller's client may not)."""
    return value.decode() if isinstance(value, bytes) else value
