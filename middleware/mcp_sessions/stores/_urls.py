"""Stores named by URL: ``store_from_url("sqlite:///var/lib/mcp/sessions.db")``, and a registry for more schemes."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ._base import SessionStore

REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel")
"""The schemes of :class:`~mcp_sessions.stores.RedisStore`: one node, a Cluster, a master behind Sentinels."""

StoreFactory = Callable[..., SessionStore]
"""Builds a store from its URL and keyword options: ``factory(url, **options)``."""


_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_PARAMETER = re.compile(r"[a-z][a-z0-9_]{0,39}")
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


def _query(url: str, allowed: Collection[str]) -> dict[str, str]:
    """The URL's query parameters, each given once, all among ``allowed``; a message never repeats a value."""
    try:
        query = parse_qs(urlsplit(url).query, keep_blank_values=True, strict_parsing=False)
    except ValueError:
        raise ValueError("the store URL's query is not valid") from None
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        accepted = ", ".join(sorted(allowed)) or "none"
        # A name that is not a plain word may be a piece of a password that holds an unescaped '&'.
        if not _PARAMETER.fullmatch(unknown[0]):
            raise ValueError(
                f"a store URL parameter has a name that is not a plain word (accepted: {accepted}); "
                "percent-encode '&', '?' and '#' in a password"
            )
        raise ValueError(
            f"unknown store URL parameter {unknown[0]!r} (accepted: {accepted}): "
            "pass the store's own options as keyword arguments"
        )
    for name, values in query.items():
        if len(values) != 1:
            raise ValueError(f"store URL parameter {name!r} is given more than once")
    return {name: values[0] for name, values in query.items()}


def _integer(text: str, what: str) -> int:
    """``text`` as a non-negative integer; else a ``ValueError`` that says ``what`` must be one."""
    if not text.isascii() or not text.isdigit():
        raise ValueError(f"{what} must be a non-negative integer")
    return int(text)


def memory_store(url: str, **options: Any) -> SessionStore:
    """``memory://`` with an optional ``?max_sessions=N``."""
    from ._memory import MemoryStore

    parts = urlsplit(url)
    if parts.netloc or parts.path not in ("", "/") or parts.fragment:
        raise ValueError("a memory:// URL has no host or path: memory:// or memory://?max_sessions=N")
    query = _query(url, {"max_sessions"})
    if "max_sessions" in query:
        options.setdefault("max_sessions", _integer(query["max_sessions"], "max_sessions in the memory:// URL"))
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


register_store("memory", memory_store)
register_store("sqlite", sqlite_store)
for _redis_scheme in REDIS_SCHEMES:
    register_store(_redis_scheme, redis_store)
