"""Stores for revocation, idle expiry and server-side session data, and the registry of the URLs that name them.

``RedisStore`` and ``SQLiteStore`` are imported on first use, so that ``import mcp_sessions``
works without the optional ``redis`` package and loads no more than it needs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ._base import (
    SessionStatus,
    SessionStore,
    SessionStoreUnavailable,
    url_integer,
    url_query,
)
from ._memory import MemoryStore, SessionStoreFull

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

    from ._redis import RedisStore
    from ._sqlite import SQLiteStore

__all__ = [
    "MemoryStore",
    "RedisStore",
    "SQLiteStore",
    "SessionStatus",
    "SessionStore",
    "SessionStoreFull",
    "SessionStoreUnavailable",
    "StoreFactory",
    "register_store",
    "store_from_url",
]


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        from ._redis import RedisStore

        return RedisStore
    if name == "SQLiteStore":
        from ._sqlite import SQLiteStore

        return SQLiteStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- the registry: which store a URL names

REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel")
"""The schemes of :class:`~mcp_sessions.stores.RedisStore`: one node, a Cluster, a master behind Sentinels."""

StoreFactory = Callable[..., SessionStore]
"""Builds a store from its URL and keyword options: ``factory(url, **options)``."""


_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_factories: dict[str, StoreFactory] = {}


def register_store(scheme: str, factory: StoreFactory) -> None:
    """Make :func:`store_from_url` build ``scheme://…`` URLs with ``factory(url, **options)``.

    ``scheme`` is lower case, without ``://``. Registering a scheme again replaces its factory.
    """
    if not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme):
        raise ValueError("a store scheme is lower-case letters, digits, '+', '-' or '.', starting with a letter")
    if not callable(factory):
        raise TypeError("a store factory must be callable as factory(url, **options)")
    _factories[scheme] = factory


def store_from_url(url: str, **options: object) -> SessionStore:
    """The store a URL names, built with ``options`` (keyword arguments of its class).

    ``memory://`` (``?max_sessions=N``), ``sqlite:///absolute/path.db`` or ``sqlite://relative/path.db``,
    ``redis://[user:password@]host[:port][/db]``, ``rediss://…`` (TLS), ``unix:///path/to/redis.sock[?db=N]``,
    ``redis+cluster://[user:password@]host:port[,host:port…]`` (a Redis Cluster) and
    ``redis+sentinel://[user:password@]host:port[,host:port…]/service_name[/db]`` (the master Sentinel
    names), with ``rediss+…`` for TLS.
    A bad URL raises ``ValueError`` naming the part at fault; the message never repeats a password.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"a store URL looks like scheme://…; known schemes: {_known()}")
    scheme = url.split("://", 1)[0].lower()
    factory = _factories.get(scheme)
    if factory is None:
        shown = scheme if _SCHEME.fullmatch(scheme) and len(scheme) <= 20 else "?"
        raise ValueError(f"unknown store URL scheme {shown!r}: use one of {_known()}")
    return factory(url, **options)


def _known() -> str:
    return ", ".join(f"{scheme}://" for scheme in _factories)


def memory_store(url: str, **options: Any) -> SessionStore:
    """``memory://`` with an optional ``?max_sessions=N``."""
    parts = urlsplit(url)
    if parts.netloc or parts.path not in ("", "/") or parts.fragment:
        raise ValueError("a memory:// URL has no host or path: memory:// or memory://?max_sessions=N")
    query = url_query(url, {"max_sessions"})
    if "max_sessions" in query:
        options.setdefault("max_sessions", url_integer(query["max_sessions"], "max_sessions in the memory:// URL"))
    return MemoryStore(**options)


def sqlite_store(url: str, **options: Any) -> SessionStore:
    """``sqlite:///absolute/path.db`` or ``sqlite://relative/path.db`` (relative to the working directory)."""
    from ._sqlite import SQLiteStore

    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError("a sqlite:// URL takes no query: pass options as keyword arguments")
    path = parts.netloc + parts.path
    if not path or path.endswith("/"):
        raise ValueError("a sqlite:// URL needs a file path: sqlite:///absolute/path.db or sqlite://relative.db")
    return SQLiteStore(Path(path), **options)


def redis_store(url: str, **options: Any) -> SessionStore:
    """One of :data:`REDIS_SCHEMES`: ``RedisStore`` checks the URL part by part."""
    from ._redis import RedisStore

    return RedisStore(url, **options)


def redis_client_from_url(
    url: str, *, timeout: float, connect_timeout: float, max_connections: int
) -> Redis | RedisCluster:
    """The redis-py client one of :data:`REDIS_SCHEMES` names, as ``RedisStore`` builds it: for the subscription
    bus too, which shares the store's URL. Internal (not in ``__all__``); imports redis when called."""
    from ._redis_client import client_from_url

    return client_from_url(url, timeout=timeout, connect_timeout=connect_timeout, max_connections=max_connections)


register_store("memory", memory_store)
register_store("sqlite", sqlite_store)
for _redis_scheme in REDIS_SCHEMES:
    register_store(_redis_scheme, redis_store)
