"""Buses named by the store URLs: one scheme, one backend; a scheme added here is a bus across more topologies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from ..stores import REDIS_SCHEMES
from ._backend import MemoryBackend

if TYPE_CHECKING:
    from ._backend import Backend

_REDIS_DEFAULTS: Final = {"timeout": 2.0, "connect_timeout": 2.0, "max_connections": 8}
_HEALTH_CHECK: Final = "health_check_interval"  # the bus's own option: the rest are the client's
_REDIS_SCHEMES: Final = ", ".join(f"{scheme}://" for scheme in REDIS_SCHEMES)
_NOT_ACROSS_PROCESSES: Final = (
    "a sqlite:// store cannot carry listen events between processes: use memory:// for one process, or "
    f"{_REDIS_SCHEMES} (the Redis the store may share) for several replicas"
)


def backend_from_url(url: str, **options: object) -> Backend:
    """The backend ``url`` names; ``ValueError`` for a URL of no known scheme (the URL is never repeated)."""
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"a bus URL looks like scheme://…: memory://, {_REDIS_SCHEMES}")
    scheme = url.split("://", 1)[0].lower()
    if scheme == "memory":
        parts = urlsplit(url)
        if parts.netloc or parts.path not in ("", "/") or parts.query or parts.fragment or options:
            raise ValueError("the memory:// bus takes no host, path, query or option: memory://")
        return MemoryBackend()
    if scheme == "sqlite":
        raise ValueError(_NOT_ACROSS_PROCESSES)
    if scheme not in REDIS_SCHEMES:
        shown = scheme if scheme.isascii() and scheme.replace("+", "").isalnum() and len(scheme) <= 20 else "?"
        raise ValueError(f"unknown bus URL scheme {shown!r}: use memory://, {_REDIS_SCHEMES}")
    return _redis_backend(url, **options)


def _redis_backend(url: str, **options: object) -> Backend:
    """Redis, through the store's own client from the URL (checked part by part, the password never shown):
    one server or a master behind Sentinels (:class:`RedisBackend`), or a Cluster (:class:`ClusterBackend`)."""
    from redis.asyncio.cluster import RedisCluster

    from ..stores import redis_client
    from ._cluster import ClusterBackend
    from ._link import HEALTH_CHECK_INTERVAL, RedisBackend

    unknown = sorted(set(options) - {*_REDIS_DEFAULTS, _HEALTH_CHECK})
    if unknown:
        accepted = ", ".join([*_REDIS_DEFAULTS, _HEALTH_CHECK])
        raise TypeError(f"unknown option {unknown[0]!r} of a Redis bus (accepted: {accepted})")
    interval = options.pop(_HEALTH_CHECK, HEALTH_CHECK_INTERVAL)
    settings = {**_REDIS_DEFAULTS, **options}
    client = redis_client(url, **settings)  # type: ignore[arg-type]
    ready_timeout = float(settings["timeout"]) * 2  # type: ignore[arg-type]
    backend = ClusterBackend if isinstance(client, RedisCluster) else RedisBackend
    return backend(client, ready_timeout=ready_timeout, health_check_interval=interval)  # type: ignore[arg-type]
