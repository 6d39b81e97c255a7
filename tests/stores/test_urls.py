"""store_from_url: every scheme, and a clear ValueError naming the part of the URL at fault."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import SentinelConnectionPool

from _redis import RedisServer
from mcp_sessions import stores
from mcp_sessions.stores import (
    MemoryStore,
    RedisStore,
    SessionStore,
    SQLiteStore,
    register_store,
    store_from_url,
)
from mcp_sessions.stores._redis_client import Topology, client_from_url, parse_topology, url_parameters

from .conftest import Closing

pytestmark = pytest.mark.anyio


async def test_memory() -> None:
    store = store_from_url("memory://")
    assert isinstance(store, MemoryStore)
    assert store.max_sessions == 100_000
    sized = store_from_url("memory://?max_sessions=7")
    assert isinstance(sized, MemoryStore)
    assert sized.max_sessions == 7


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://:pw@localhost",
        "rediss://user:pw@host:6380/2",
        "unix:///run/redis.sock?db=3",
        "redis+cluster://127.0.0.1:7000",
        "rediss+cluster://user:pw@a:7000,b:7001",
        "redis+sentinel://127.0.0.1:26379/mymaster",
        "rediss+sentinel://:pw@a,b:26380/mymaster/2?sentinel_password=spw",
    ],
)
async def test_redis_schemes(url: str) -> None:
    store = store_from_url(url, prefix="app:", timeout=0.2)
    assert isinstance(store, RedisStore)
    assert (store.prefix, store.timeout) == ("app:", 0.2)
    await store.aclose()


async def test_sqlite_absolute_and_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absolute = store_from_url(f"sqlite://{tmp_path}/a.db", timeout=1.0)
    assert isinstance(absolute, SQLiteStore)
    assert absolute.path == tmp_path / "a.db"
    assert absolute.timeout == 1.0
    await absolute.aclose()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    for url, expected in (("sqlite://relative.db", "relative.db"), ("sqlite://sub/b.db", "sub/b.db")):
        store = store_from_url(url)
        assert isinstance(store, SQLiteStore)
        assert store.path == Path(expected)
        await store.aclose()
        assert (tmp_path / expected).exists()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nothing", r"a store URL looks like scheme://…; known schemes: memory://, sqlite://, redis://"),
        (
            "http://h/0",
            r"unknown store URL scheme 'http': use one of memory://, sqlite://, redis://, rediss://, unix://",
        ),
        ("memory://host", r"a memory:// URL has no host or path"),
        ("memory://?max_sessions=ten", r"max_sessions in the memory:// URL must be a non-negative integer"),
        ("memory://?size=1", r"unknown store URL parameter 'size' \(accepted: max_sessions\)"),
        ("memory://?max_sessions=1&max_sessions=2", r"'max_sessions' is given more than once"),
        ("memory://?max_sessions=0", r"max_sessions must be at least 1"),
        ("redis://host/abc", r"the database number in the redis:// URL path must be a non-negative integer"),
        ("redis://host/0/1", r"the database number in the redis:// URL path must be"),
        ("redis://:hunter2@host:port/0", r"the port in the redis:// URL must be an integer from 0 to 65535"),
        ("rediss://host:99999", r"the port in the rediss:// URL must be an integer from 0 to 65535"),
        ("redis:///0", r"the redis:// URL needs a host"),
        ("redis://host/0?db=x", r"the db parameter of the Redis URL must be a non-negative integer"),
        ("redis://host/0#frag", r"a Redis URL has no #fragment"),
        ("unix://", r"a unix:// Redis URL needs the socket's path"),
        ("redis+cluster://", r"the redis\+cluster:// URL needs at least one Cluster node"),
        ("redis+cluster://:hunter2@", r"needs at least one Cluster node: redis\+cluster://host:port"),
        ("redis+cluster://:hunter2@h:1,:2", r"Cluster node 2 in the redis\+cluster:// URL has no host"),
        ("redis+cluster://h:1,", r"Cluster node 2 in the redis\+cluster:// URL has no host"),
        ("redis+cluster://:hunter2@h:port", r"the port of Cluster node 1 in the redis\+cluster:// URL must be"),
        ("rediss+cluster://h:1,h:70000", r"the port of Cluster node 2 in the rediss\+cluster:// URL must be"),
        ("redis+cluster://h:0", r"the port of Cluster node 1 .* from 1 to 65535"),
        ("redis+cluster://h:1/2", r"a Redis Cluster has only database 0"),
        ("redis+cluster://h:1/0#x", r"a redis\+cluster:// URL has no #fragment"),
        ("redis+cluster://h:1?db=1", r"unknown store URL parameter 'db' \(accepted: none\)"),
        ("redis+cluster:///tmp/redis.sock", r"needs at least one Cluster node"),
        ("unix+cluster:///tmp/redis.sock", r"unknown store URL scheme 'unix\+cluster'"),
        ("redis+sentinel://:hunter2@h:26379", r"needs the master's service name: redis\+sentinel://host:port/"),
        ("redis+sentinel://h/", r"the redis\+sentinel:// URL needs the master's service name"),
        ("redis+sentinel://h/m/x", r"the database number after the service name in the redis\+sentinel:// URL"),
        ("redis+sentinel://h/m/0/1", r"the database number after the service name"),
        ("redis+sentinel://h:99999/m", r"the port of Sentinel 1 in the redis\+sentinel:// URL must be"),
        ("redis+sentinel:///m", r"the redis\+sentinel:// URL needs at least one Sentinel"),
        ("redis+sentinel://h/m?password=hunter2", r"unknown store URL parameter 'password' \(accepted: sentinel_"),
        ("redis+sentinel://h/m?sentinel_password=a&sentinel_password=b", r"given more than once"),
        ("rediss+sentinel://h/m#hunter2", r"a rediss\+sentinel:// URL has no #fragment"),
        ("sqlite://", r"a sqlite:// URL needs a file path"),
        ("sqlite:///tmp/", r"a sqlite:// URL needs a file path"),
        ("sqlite:///tmp/a.db?timeout=1", r"a sqlite:// URL takes no query"),
        ("sqlite:///no/such/directory/a.db", r"the SQLite store's directory does not exist: /no/such/directory"),
        # Query parameters: refused when the store is built, not at its first command.
        ("redis://:hunter2@h/0?db=1&prefix=a&prefix=b", r"unknown store URL parameter 'prefix'"),
        ("unix://:hunter2@/run/redis.sock?socket_keepalive=true", r"unknown store URL parameter 'socket_keepalive'"),
        ("unix:///run/redis.sock?password=hunter2&password=x", r"'password' is given more than once"),
        ("rediss://:hunter2@h?ssl_cert_reqs=hunter2", r"the Redis URL parameter 'ssl_cert_reqs' must be none, option"),
        ("redis://:hunter2@h?health_check_interval=hunter2", r"the value of the Redis URL parameter 'health_check_in"),
        ("redis://:hunter2@h?socket_read_size=big", r"the value of the Redis URL parameter 'socket_read_size'"),
        ("rediss://h?ssl_min_version=hunter2", r"the value of the Redis URL parameter 'ssl_min_version'"),
        # A name that is not a plain word may be a piece of a password (an unescaped '&' in it): not quoted.
        ("unix:///s.sock?password=a&hunter2@x=1", r"a store URL parameter has a name that is not a plain word"),
        ("memory://?max_sessions=1&bogus=2", r"unknown store URL parameter 'bogus' \(accepted: max_sessions"),
        ("sqlite:///tmp/a.db?prefix=x", r"a sqlite:// URL takes no query"),
        ("redis+cluster://:hunter2@h:1?prefix=x", r"unknown store URL parameter 'prefix' \(accepted: none"),
        ("redis+sentinel://:hunter2@h/m?db=1", r"unknown store URL parameter 'db' \(accepted: sentinel_"),
    ],
)
def test_bad_urls_name_the_part_at_fault(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        store_from_url(url)
    assert "hunter2" not in str(info.value)


# -- query parameters: what redis-py would read is checked when the store is built, not at its first command --


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("db=1&db=2", "db"),
        ("prefix=app1:", "prefix"),
        ("bogus=1", "bogus"),
        ("max_sessions=5", "max_sessions"),
        ("sentinel_password=hunter2", "sentinel_password"),
        ("password=hunter2", "password"),
        ("ssl_cert_reqs=none", "ssl_cert_reqs"),  # TLS settings are for rediss:// only
        # What the store sets itself: from the URL, redis-py would let it override the store's options.
        ("socket_timeout=30", "socket_timeout"),
        ("socket_connect_timeout=30", "socket_connect_timeout"),
        ("timeout=30", "timeout"),
        ("max_connections=1000", "max_connections"),
        ("protocol=3", "protocol"),
        ("retry_on_timeout=true", "retry_on_timeout"),
        ("decode_responses=false", "decode_responses"),
        ("client_name=hunter2", "client_name"),
        ("legacy_responses=false", "legacy_responses"),
    ],
)
def test_a_parameter_redis_py_would_fail_on_or_that_overrides_the_store_is_refused_by_name(
    redis: RedisServer, query: str, name: str
) -> None:
    """Each of these built a store: redis-py then failed at every first command (-32010 until someone read the
    logs), or read the URL in a way the store did not choose (which db, its deadlines, its protocol)."""
    url = f"redis://:hunter2@127.0.0.1:{redis.port}/0?{query}"
    refusal = rf"store URL parameter '{name}' (\(accepted: db, |is given more than once)"
    with pytest.raises(ValueError, match=refusal) as info:
        store_from_url(url, prefix="app:")
    assert "hunter2" not in str(info.value)
    assert query.partition("=")[2] not in str(info.value)  # nor any value


def test_the_subscription_bus_client_refuses_them_too() -> None:
    """``client_from_url`` (the subscription bus's) checks the URL as the store does."""
    with pytest.raises(ValueError, match="unknown store URL parameter 'prefix'") as info:
        client_from_url("redis://:hunter2@h/0?prefix=app1:", timeout=1.0, connect_timeout=1.0, max_connections=2)
    assert "hunter2" not in str(info.value)


async def test_a_url_with_accepted_parameters_works(redis: RedisServer, closing: Closing) -> None:
    url = f"redis://127.0.0.1:{redis.port}?db=3&health_check_interval=5&socket_keepalive=true&socket_read_size=65536"
    store = closing(store_from_url(url, prefix="accepted:"))
    await store.ping()
    await store.set("s1", "k", "v", expires_at=time.time() + 60)
    assert await store.get("s1", "k") == "v"
    async with aioredis.Redis(port=redis.port, db=3, decode_responses=True) as client:
        assert [key async for key in client.scan_iter("accepted:*")]  # ?db=3 reached redis-py


_VALUES = {
    "db": "1",
    "health_check_interval": "5",
    "socket_keepalive": "true",
    "socket_read_size": "65536",
    "password": "pw",
    "ssl_cert_reqs": "none",
    "ssl_ca_certs": "/etc/ssl/ca.pem",
    "ssl_ca_data": "pem",
    "ssl_certfile": "/etc/ssl/client.pem",
    "ssl_keyfile": "/etc/ssl/client.key",
    "ssl_ciphers": "ECDHE+AESGCM",
    "ssl_check_hostname": "false",
    "ssl_min_version": "771",
    "ssl_include_verify_flags": "VERIFY_X509_STRICT",
    "ssl_exclude_verify_flags": "VERIFY_X509_STRICT",
}


@pytest.mark.parametrize("scheme", ["redis", "rediss", "unix"])
async def test_every_accepted_parameter_is_one_redis_py_builds_a_connection_with(scheme: str) -> None:
    """Each name the store accepts, with a valid value, gives a connection redis-py can build (no TypeError)."""
    accepted = url_parameters(scheme)
    assert "db" in accepted
    base = "unix:///run/redis.sock" if scheme == "unix" else f"{scheme}://h"
    for name in sorted(accepted):
        store = RedisStore(f"{base}?{name}={_VALUES[name]}")
        assert isinstance(store._redis, aioredis.Redis)
        pool = store._redis.connection_pool
        pool.connection_class(**pool.connection_kwargs)  # what the first command would do
        await store.aclose()


def test_cluster_and_sentinel_urls_part_by_part() -> None:
    cluster = parse_topology("rediss+cluster://u%40x:p%3Aw@a:7000,[::1]:7001,c")
    assert cluster == Topology("rediss+cluster", (("a", 7000), ("::1", 7001), ("c", 6379)), "u@x", "p:w")
    assert cluster.tls
    assert "p:w" not in repr(cluster)
    sentinel = parse_topology(
        "redis+sentinel://:pw@s1:26380,s2/my%20master/3?sentinel_username=su&sentinel_password=top-secret"
    )
    assert sentinel == Topology(
        "redis+sentinel", (("s1", 26380), ("s2", 26379)), None, "pw", "my master", 3, "su", "top-secret"
    )
    assert not sentinel.tls
    assert "top-secret" not in repr(sentinel)
    assert parse_topology("redis+sentinel://s/m/").db == 0


async def test_cluster_and_sentinel_clients_are_bounded_and_never_retry() -> None:
    """What the URL builds, before any connection: the same deadlines, RESP2 and no retries as redis://."""
    cluster = RedisStore("rediss+cluster://u:pw@127.0.0.1:7000,127.0.0.1:7001", timeout=0.4, max_connections=7)
    assert isinstance(cluster._redis, RedisCluster)
    assert cluster._redis.retry.get_retries() == 0  # a connection error or timeout is raised, not resent
    assert cluster._redis.reinitialize_steps == 0  # MOVED patches the map; never a reset of every connection
    for node in cluster._redis.nodes_manager.startup_nodes.values():
        assert node.max_connections == 7
        options = node.connection_kwargs
        assert (options["socket_timeout"], options["socket_connect_timeout"]) == (0.4, 0.4)
        assert (options["protocol"], options["decode_responses"], options["password"]) == (2, True, "pw")
        assert node.connection_class.__name__ == "SSLConnection"  # rediss+cluster: TLS
    await cluster.aclose()

    url = "redis+sentinel://:master-pw@127.0.0.1:26379,127.0.0.1:26380/svc/2?sentinel_password=sentinel-pw"
    sentinel = RedisStore(url, timeout=0.4, max_connections=7)
    assert isinstance(sentinel._redis, aioredis.Redis)
    pool = sentinel._redis.connection_pool
    assert isinstance(pool, aioredis.BlockingConnectionPool)  # waits for a free connection, as redis:// does
    assert isinstance(pool, SentinelConnectionPool)  # asks the Sentinels for the master at each new connection
    assert (pool.max_connections, pool.timeout, pool.service_name) == (7, 0.4, "svc")
    options = pool.connection_kwargs
    assert (options["password"], options["db"], options["protocol"]) == ("master-pw", 2, 2)
    assert options["retry"]._retries == 0
    sentinels = pool.sentinel_manager.sentinels
    assert [s.connection_pool.connection_kwargs["port"] for s in sentinels] == [26379, 26380]
    assert {s.connection_pool.connection_kwargs["password"] for s in sentinels} == {"sentinel-pw"}
    await sentinel.aclose()


def test_a_registered_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stores, "_factories", dict(stores._factories))
    made: list[tuple[str, dict[str, Any]]] = []

    def factory(url: str, **options: Any) -> SessionStore:
        made.append((url, options))
        return MemoryStore(max_sessions=3)

    register_store("mystore", factory)
    store = store_from_url("mystore://anything", flavour="x")
    assert isinstance(store, MemoryStore)
    assert made == [("mystore://anything", {"flavour": "x"})]
    with pytest.raises(ValueError, match="mystore://"):
        store_from_url("other://")


@pytest.mark.parametrize("scheme", ["", "Upper", "1abc", "a b", "redis://"])
def test_register_store_refuses_a_bad_scheme(scheme: str) -> None:
    with pytest.raises(ValueError, match="a store scheme is lower-case"):
        register_store(scheme, MemoryStore)


def test_register_store_refuses_what_cannot_be_called() -> None:
    with pytest.raises(TypeError, match="must be callable"):
        register_store("x", "not callable")  # type: ignore[arg-type]


def test_exported() -> None:
    for name in ("store_from_url", "register_store", "SQLiteStore", "SessionStatus"):
        assert name in stores.__all__
        assert getattr(stores, name) is not None
