"""A store shared by many replicas: Redis, through ``redis.asyncio`` (the ``redis`` extra).

Two keys per session, both named with the ``{sid}`` hash tag so that a Redis
Cluster keeps them in one slot and every script below runs on one node:

- ``<prefix>{<sid>}:s``, a string: the last-seen time (Unix seconds, as the
  replicas' clocks read it) while the session lives, ``r`` once it is revoked
  (``sessions/delete`` or idle expiry). Its TTL is the session's remaining
  lifetime plus ``expiry_margin``, so a revocation outlives the token.
- ``<prefix>{<sid>}:d``, a hash: ``session.data``, one JSON-encoded field per key,
  with the same TTL, refreshed on each write. Revocation deletes it.

Every check, and every write that must not follow a revocation, is one Lua
script (``EVALSHA``, loaded again by redis-py after ``NOSCRIPT``), so each is
atomic and costs one round trip.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

try:
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import ResponseError
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without redis
    raise ImportError(
        "RedisStore needs the redis package: install the extra with pip install 'mcp-sessions[redis]'"
    ) from exc

from ._base import SessionStatus, SessionStore, SessionStoreUnavailable
from .memory import _encode

__all__ = ["RedisStore"]

_T = TypeVar("_T")

logger = logging.getLogger("mcp_sessions.redis")

_REVOKED: Final = "r"
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_ERROR_TEXT_LIMIT: Final = 300
_LOG_INTERVAL: Final = 10.0

# KEYS: status, data. ARGV: now, idle_ttl ("" when off), touch interval, ttl in ms.
# Returns 0 active, 1 revoked, 2 idle-expired (and revokes).
_TOUCH: Final = """
local v = redis.call('GET', KEYS[1])
if v == 'r' then return 1 end
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[3])
if v then
  local seen = tonumber(v)
  if not seen then return 1 end
  if ARGV[2] ~= '' and now - seen > tonumber(ARGV[2]) + interval then
    redis.call('SET', KEYS[1], 'r', 'PX', ARGV[4])
    redis.call('DEL', KEYS[2])
    return 2
  end
  if now <= seen or now - seen < interval then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
return 0
"""

# KEYS: status, data. ARGV: ttl in ms. Returns 1 if this call revoked it, 0 if it already was.
_REVOKE: Final = """
redis.call('DEL', KEYS[2])
if redis.call('GET', KEYS[1]) == 'r' then return 0 end
redis.call('SET', KEYS[1], 'r', 'PX', ARGV[1])
return 1
"""

# KEYS: status, data. ARGV: field, JSON value, ttl in ms. A revoked session's data goes nowhere.
_SET: Final = """
if redis.call('GET', KEYS[1]) == 'r' then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
"""

# KEYS: status, data. ARGV: field, amount, ttl in ms.
# Returns the new value as text, or 'R' (revoked), 'N' (not an integer), 'O' (outside 64 bits).
_INCR: Final = """
if redis.call('GET', KEYS[1]) == 'r' then return 'R' end
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if raw and not string.match(raw, '^%-?%d+$') then return 'N' end
local done = redis.pcall('HINCRBY', KEYS[2], ARGV[1], ARGV[2])
if type(done) == 'table' and done.err then return 'O' end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return redis.call('HGET', KEYS[2], ARGV[1])
"""

# KEYS: status, data. ARGV: field, '1' if a value was read ('0' if none), the value read, new value, ttl in ms.
# Compare-and-set on one field. Returns 1 stored, 0 lost a race (read again), 2 revoked.
_COMPARE_AND_SET: Final = """
if redis.call('GET', KEYS[1]) == 'r' then return 2 end
local current = redis.call('HGET', KEYS[2], ARGV[1])
if ARGV[2] == '0' then
  if current then return 0 end
elseif current ~= ARGV[3] then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
"""


def _text(value: str | bytes) -> str:
    """A reply as text, whether or not the client decodes responses (a caller's client may not)."""
    return value.decode() if isinstance(value, bytes) else value


class RedisStore(SessionStore):
    """Revocations, idle expiry and ``session.data`` in Redis, shared by every replica.

    Give a URL (``redis://``, ``rediss://`` or ``unix://``; the store then owns a
    bounded connection pool and :meth:`aclose` closes it) or a ready
    ``redis.asyncio.Redis`` client (for Sentinel, custom TLS, …; the caller
    owns it).

    Failure never waits long and never passes for a verdict: each call takes
    at most ``timeout`` seconds, pool wait, connect and reply included, and
    any failure of the client raises :class:`SessionStoreUnavailable`, which the
    middleware answers with the retryable error (HTTP 503), never -32043.
    Commands are not retried inside the store (a retried increment could
    count twice): the client retries the request.

    The last-seen time is written at most once per ``touch_interval`` seconds
    (or a tenth of ``idle_ttl`` if that is shorter) per session; a session
    therefore ends between ``idle_ttl`` and ``idle_ttl`` + that interval after
    its last use, never earlier. Keys outlive the session's absolute expiry by
    ``expiry_margin`` seconds, so that a replica whose clock runs behind
    still finds the revocation (keep it above the worst clock skew between
    replicas plus the ``KeySet``'s ``leeway``).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: aioredis.Redis | None = None,
        prefix: str = "mcp-sessions:",
        timeout: float = 0.5,
        connect_timeout: float = 0.25,
        max_connections: int = 50,
        touch_interval: float = 10.0,
        expiry_margin: float = 300.0,
        max_update_attempts: int = 32,
    ) -> None:
        if (url is None) == (client is None):
            raise ValueError("RedisStore needs exactly one of url= (redis://host:port/db) or client= (redis.asyncio)")
        for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if not 0 < value <= 60:
                raise ValueError(f"{name} must be a number of seconds above 0 and at most 60")
        if type(max_connections) is not int or max_connections < 1:
            raise ValueError("max_connections must be a positive integer")
        if not 0 <= touch_interval <= 3600:
            raise ValueError("touch_interval must be a number of seconds from 0 to 3600")
        if not 0 <= expiry_margin <= 86400:
            raise ValueError("expiry_margin must be a number of seconds from 0 to 86400")
        if type(max_update_attempts) is not int or max_update_attempts < 1:
            raise ValueError("max_update_attempts must be a positive integer")
        if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
            raise ValueError("prefix must be a string without braces (the session id is the key's hash tag)")
        self.prefix = prefix
        self.timeout = float(timeout)
        self.touch_interval = float(touch_interval)
        self.expiry_margin = float(expiry_margin)
        self.max_update_attempts = max_update_attempts
        self._owns_client = client is None
        self._last_logged = -_LOG_INTERVAL
        if client is None:
            assert url is not None
            try:
                pool = aioredis.BlockingConnectionPool.from_url(
                    url,
                    max_connections=max_connections,
                    timeout=timeout,
                    socket_timeout=timeout,
                    socket_connect_timeout=min(connect_timeout, timeout),
                    retry=Retry(NoBackoff(), 0),
                    decode_responses=True,
                    client_name="mcp-sessions",
                )
            except ValueError:
                # redis-py's message may quote the URL, and a URL can hold a password.
                raise ValueError(
                    "the Redis URL is not valid: use redis://[user:password@]host[:port][/db], rediss://… or unix://…"
                ) from None
            client = aioredis.Redis.from_pool(pool)
        self._redis: aioredis.Redis = client
        self._touch = client.register_script(_TOUCH)
        self._revoke = client.register_script(_REVOKE)
        self._set = client.register_script(_SET)
        self._incr = client.register_script(_INCR)
        self._compare_and_set = client.register_script(_COMPARE_AND_SET)

    def __repr__(self) -> str:
        return f"RedisStore(prefix={self.prefix!r}, timeout={self.timeout})"

    # -- plumbing --------------------------------------------------------------

    def _keys(self, session_id: str) -> list[str]:
        tagged = f"{self.prefix}{{{session_id}}}"
        return [tagged + ":s", tagged + ":d"]

    def _ttl_ms(self, expires_at: float, now: float) -> int:
        return max(1, int((expires_at - now + self.expiry_margin) * 1000))

    async def _run(self, operation: Awaitable[_T]) -> _T:
        """Await one Redis operation within the deadline; every failure becomes SessionStoreUnavailable.

        The exception's message is safe to show a client (a tool's error may carry it): no host,
        no key. The full error goes to the ``mcp_sessions.redis`` log, at most every few seconds.
        """
        try:
            async with asyncio.timeout(self.timeout):
                return await operation
        except TimeoutError:
            reason = f"redis did not answer within {self.timeout} s"
            raise self._unavailable(reason, reason) from None
        except Exception as exc:  # RedisError, OSError, and more (RuntimeError from a closed event loop)
            reason = f"redis failed: {type(exc).__name__}"
            # A Redis error reply starts with its code (WRONGTYPE, OOM, NOAUTH, READONLY, LOADING, …).
            code = str(exc).split(" ", 1)[0]
            if isinstance(exc, ResponseError) and code.isalpha() and code.isupper():
                reason += f" {code}"
            raise self._unavailable(reason, f"{type(exc).__name__}: {exc}"[:_ERROR_TEXT_LIMIT]) from None

    def _unavailable(self, reason: str, detail: str) -> SessionStoreUnavailable:
        now = time.monotonic()
        if now - self._last_logged >= _LOG_INTERVAL:
            self._last_logged = now
            logger.warning(
                "redis store unavailable: %s (next such message in %.0f s at the earliest)", detail, _LOG_INTERVAL
            )
        return SessionStoreUnavailable(reason)

    async def ping(self) -> None:
        """Raise :class:`SessionStoreUnavailable` unless Redis answers now (for readiness probes)."""
        await self._run(self._redis.ping())

    async def aclose(self) -> None:
        """Close the connection pool built from ``url``; a ``client`` you passed in stays open."""
        if self._owns_client:
            await self._redis.aclose()

    # -- sessions --------------------------------------------------------------

    async def create(self, session_id: str, *, expires_at: float, now: float) -> None:
        status_key = self._keys(session_id)[0]
        await self._run(self._redis.set(status_key, repr(float(now)), px=self._ttl_ms(expires_at, now), nx=True))

    async def touch(self, session_id: str, *, expires_at: float, now: float, idle_ttl: float | None) -> SessionStatus:
        interval = self.touch_interval if idle_ttl is None else min(self.touch_interval, idle_ttl / 10)
        args = ["" if idle_ttl is None else repr(float(idle_ttl)), repr(interval)]
        outcome = await self._run(
            self._touch(self._keys(session_id), [repr(float(now)), *args, self._ttl_ms(expires_at, now)])
        )
        if outcome == 0:
            return SessionStatus.ACTIVE
        return SessionStatus.IDLE_EXPIRED if outcome == 2 else SessionStatus.REVOKED

    async def revoke(self, session_id: str, *, expires_at: float) -> bool:
        outcome = await self._run(self._revoke(self._keys(session_id), [self._ttl_ms(expires_at, time.time())]))
        return bool(outcome == 1)

    # -- data ------------------------------------------------------------------

    async def get(self, session_id: str, key: str, default: Any = None) -> Any:
        raw = await self._run(self._redis.hget(self._keys(session_id)[1], key))
        return default if raw is None else json.loads(raw)

    async def set(self, session_id: str, key: str, value: Any, *, expires_at: float) -> None:
        encoded = _encode(value)
        ttl = self._ttl_ms(expires_at, time.time())
        await self._run(self._set(self._keys(session_id), [key, encoded, ttl]))

    async def delete(self, session_id: str, key: str) -> None:
        await self._run(self._redis.hdel(self._keys(session_id)[1], key))

    async def incr(self, session_id: str, key: str, amount: int = 1, *, expires_at: float) -> int:
        if type(amount) is not int:
            raise TypeError("incr takes an integer amount")
        if not _INT64_MIN <= amount <= _INT64_MAX:
            raise OverflowError("RedisStore counts in 64-bit integers")
        ttl = self._ttl_ms(expires_at, time.time())
        outcome = _text(await self._run(self._incr(self._keys(session_id), [key, amount, ttl])))
        if outcome == "R":
            return amount  # a request that outlives its session's deletion counts into the void
        if outcome == "N":
            raise TypeError(f"session data {key!r} is not an integer")
        if outcome == "O":
            raise OverflowError(f"session data {key!r} would leave the 64-bit range RedisStore counts in")
        return int(outcome)

    async def update(
        self, session_id: str, key: str, fn: Callable[[Any], Any], *, expires_at: float, default: Any = None
    ) -> Any:
        keys = self._keys(session_id)
        for attempt in range(self.max_update_attempts):
            raw = await self._run(self._redis.hget(keys[1], key))
            new = fn(default if raw is None else json.loads(raw))
            encoded = _encode(new)
            ttl = self._ttl_ms(expires_at, time.time())
            read = ["0", ""] if raw is None else ["1", raw]
            outcome = await self._run(self._compare_and_set(keys, [key, *read, encoded, ttl]))
            if outcome != 0:  # stored, or revoked (the write goes nowhere)
                return new
            # Another request changed the value between our read and our write: back off, read again.
            await asyncio.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))  # noqa: S311 - jitter
        raise SessionStoreUnavailable(
            f"session data {key!r} changed under {self.max_update_attempts} attempts to update it"
        )

    async def items(self, session_id: str) -> dict[str, Any]:
        raw = await self._run(self._redis.hgetall(self._keys(session_id)[1]))
        return {_text(key): json.loads(value) for key, value in raw.items()}
