"""A store shared by many replicas: Redis, through ``redis.asyncio`` (the ``redis`` extra): :class:`RedisStore`,
the keys it keeps and the Lua scripts it runs (its client is built in ``_redis_client``).

Up to two keys per session, all named with the ``{sid}`` hash tag so that a
Redis Cluster keeps them in one slot and every script below runs on one node:

- ``<prefix>{<sid>}:s``, a string: the last-seen time (Unix seconds, as the
  replicas' clocks read it) while the session lives, ``r`` once it is revoked
  (``sessions/delete`` or idle expiry). Its TTL is the session's remaining
  lifetime plus ``expiry_margin``, so a revocation outlives the token.
- ``<prefix>{<sid>}:d``, a hash: ``session.data``, one JSON-encoded field per key,
  with the same TTL, refreshed on each write. Revocation deletes it.

Creation writes nothing. The status key appears when the idle clock must move
(a touch with an idle timeout, at most once per touch interval) or at revocation.

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
from typing import TYPE_CHECKING, Any, Final, TypeVar

from .._wire import ThrottledWarning
from ._base import (
    SessionStatus,
    SessionStore,
    SessionStoreUnavailable,
    encode_value,
)
from ._redis_client import ResponseError, check_client_options, client_from_url, reply_text

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster

_T = TypeVar("_T")


REVOKED: Final = "r"


# KEYS: status, data. ARGV: now, idle_ttl, touch interval, ttl in ms, issued_at.
# Returns 0 active, 1 revoked (a status that is not a time: 'r'), 2 idle-expired (and revokes). Without a
# status key the idle clock started at issued_at: nothing is written while that is within the touch interval.
TOUCH: Final = """
local v = redis.call('GET', KEYS[1])
local seen = tonumber(v or ARGV[5])
if not seen then return 1 end
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[3])
if now - seen > tonumber(ARGV[2]) + interval then
  if v or redis.call('EXISTS', KEYS[2]) > 0 then
    redis.call('SET', KEYS[1], 'r', 'PX', ARGV[4])
    redis.call('DEL', KEYS[2])
  end
  return 2
end
if now <= seen or now - seen < interval then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
return 0
"""

# KEYS: status, data. ARGV: ttl in ms. Returns 1 if this call revoked it, 0 if it already was.
REVOKE: Final = """
redis.call('DEL', KEYS[2])
if redis.call('GET', KEYS[1]) == 'r' then return 0 end
redis.call('SET', KEYS[1], 'r', 'PX', ARGV[1])
return 1
"""

# KEYS: status, data. ARGV: field, JSON value, ttl in ms. A revoked session's data goes nowhere.
SET: Final = """
if redis.call('GET', KEYS[1]) == 'r' then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
"""

# KEYS: status, data. ARGV: field, amount, ttl in ms.
# Returns the new value as text, or 'R' (revoked), 'N' (not an integer), 'O' (outside 64 bits).
INCR: Final = """
if redis.call('GET', KEYS[1]) == 'r' then return 'R' end
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if raw and not string.match(raw, '^%-?%d+$') then return 'N' end
local done = redis.pcall('HINCRBY', KEYS[2], ARGV[1], ARGV[2])
if type(done) == 'table' and done.err then return 'O' end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return redis.call('HGET', KEYS[2], ARGV[1])
"""

# KEYS: status, data. ARGV: field, the value read ('' if none: JSON text is never empty), new value, ttl in ms.
# Compare-and-set on one field. Returns 1 stored, 0 lost a race (read again), 2 revoked.
COMPARE_AND_SET: Final = """
if redis.call('GET', KEYS[1]) == 'r' then return 2 end
if (redis.call('HGET', KEYS[2], ARGV[1]) or '') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
"""


logger = logging.getLogger("mcp_sessions.redis")

_ERROR_TEXT_LIMIT: Final = 300


class RedisStore(SessionStore):
    """Revocations, idle expiry and ``session.data`` in Redis, shared by every replica.

    Give a URL (``redis://``, ``rediss://`` or ``unix://`` for one node,
    ``redis+cluster://`` for a Redis Cluster, ``redis+sentinel://`` for the
    master a set of Sentinels names, ``rediss+…`` for TLS; the store then owns
    the client and its bounded connections, and :meth:`aclose` closes them)
    or a ready ``redis.asyncio.Redis`` or ``RedisCluster`` client (custom TLS,
    …; the caller owns it). A session's keys share one Cluster slot, so each
    script runs on one node.

    Failure never waits long and never passes for a verdict: each call takes
    at most ``timeout`` seconds, pool wait, connect and reply included, and
    any failure of the client raises :class:`SessionStoreUnavailable`, which the
    middleware answers with the retryable error (HTTP 503), never -32043. The
    defaults (2 s, as the subscription bus's) suit a loaded Redis: on a two-core
    machine at a load average of 12, beside ``redis-benchmark``, a call took
    320 ms at p99.9 and a pool's 50 connects at once 850 ms (docs/deployment.md).
    Commands are not retried inside the store (a retried increment could
    count twice): the client retries the request. A Redis restart costs
    nothing once Redis answers again: the store's pool speaks RESP2, which
    keeps redis-py's check that replaces a pooled connection the server
    closed before any command is sent on it. A ``client=`` you build yourself
    should do the same (``protocol=2``) while redis-py 8 skips that check under
    RESP3 (redis/redis-py#4252); otherwise each of its pooled connections
    fails one command after a restart.

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
        client: aioredis.Redis | RedisCluster | None = None,
        prefix: str = "mcp-sessions:",
        timeout: float = 2.0,
        connect_timeout: float = 2.0,
        max_connections: int = 50,
        touch_interval: float = 10.0,
        expiry_margin: float = 300.0,
        update_timeout: float = 30.0,
    ) -> None:
        if (url is None) == (client is None):
            raise ValueError("RedisStore needs exactly one of url= (redis://host:port/db) or client= (redis.asyncio)")
        if not 0 <= touch_interval <= 3600:
            raise ValueError("touch_interval must be a number of seconds from 0 to 3600")
        if not 0 <= expiry_margin <= 86400:
            raise ValueError("expiry_margin must be a number of seconds from 0 to 86400")
        if not 0 < update_timeout <= 3600:
            raise ValueError("update_timeout must be a number of seconds above 0, at most 3600")
        if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
            raise ValueError("prefix must be a string without braces (the session id is the key's hash tag)")
        self.prefix = prefix
        self.timeout = float(timeout)
        self.touch_interval = float(touch_interval)
        self.expiry_margin = float(expiry_margin)
        self.update_timeout = float(update_timeout)
        self._owns_client = client is None
        self._unavailable_warning = ThrottledWarning(logger)
        if client is None:
            assert url is not None
            client = client_from_url(
                url, timeout=timeout, connect_timeout=connect_timeout, max_connections=max_connections
            )
        else:
            check_client_options(timeout=timeout, connect_timeout=connect_timeout, max_connections=max_connections)
        self._redis: aioredis.Redis | RedisCluster = client
        self._touch = client.register_script(TOUCH)
        self._revoke = client.register_script(REVOKE)
        self._set = client.register_script(SET)
        self._incr = client.register_script(INCR)
        self._compare_and_set = client.register_script(COMPARE_AND_SET)

    def __repr__(self) -> str:
        return f"RedisStore(prefix={self.prefix!r}, timeout={self.timeout})"

    def _keys(self, session_id: str) -> list[str]:
        """The session's status and data keys, in one Cluster slot."""
        tagged = f"{self.prefix}{{{session_id}}}"
        return [tagged + ":s", tagged + ":d"]

    def _ttl_ms(self, expires_at: float, now: float) -> int:
        return max(1, int((expires_at - now + self.expiry_margin) * 1000))

    async def _run(self, operation: Awaitable[_T]) -> _T:
        """Await one Redis operation within the deadline; every failure becomes SessionStoreUnavailable.

        The exception's message is safe to show a client (a tool's error may carry it): the exception's
        type and a Redis error code, no host, no key. The full error goes to the ``mcp_sessions.redis``
        log, at most every few seconds.
        """
        try:
            async with asyncio.timeout(self.timeout):
                return await operation
        except TimeoutError:
            reason = detail = f"redis did not answer within {self.timeout} s"
        except Exception as exc:  # RedisError, OSError, and more (RuntimeError from a closed event loop)
            reason, detail = f"redis failed: {type(exc).__name__}", f"{type(exc).__name__}: {exc}"[:_ERROR_TEXT_LIMIT]
            # A Redis error reply starts with its code (WRONGTYPE, OOM, NOAUTH, READONLY, LOADING, …).
            code = str(exc).split(" ", 1)[0]
            if isinstance(exc, ResponseError) and code.isalpha() and code.isupper():
                reason += f" {code}"
        self._unavailable_warning.warn("redis store unavailable: %s", detail)
        raise SessionStoreUnavailable(reason)

    async def ping(self) -> None:
        await self._run(self._redis.ping())

    async def aclose(self) -> None:
        """Close the pool the store built from its URL; a ``client=`` is left to its owner."""
        if self._owns_client:
            await self._redis.aclose()

    async def touch(
        self,
        session_id: str,
        *,
        expires_at: float,
        now: float,
        idle_ttl: float | None,
        issued_at: float | None = None,
    ) -> SessionStatus:
        """One command: a ``GET`` without idle timeout (nothing written), else one script."""
        keys = self._keys(session_id)
        if idle_ttl is None:
            status = await self._run(self._redis.get(keys[0]))
            revoked = status is not None and reply_text(status) == REVOKED
            return SessionStatus.REVOKED if revoked else SessionStatus.ACTIVE
        start = now if issued_at is None else issued_at
        idle: list[str | int] = [repr(float(now)), repr(float(idle_ttl)), repr(min(self.touch_interval, idle_ttl / 10))]
        args = [*idle, self._ttl_ms(expires_at, now), repr(float(start))]
        outcome = await self._run(self._touch(keys, args))
        if outcome == 0:
            return SessionStatus.ACTIVE
        return SessionStatus.IDLE_EXPIRED if outcome == 2 else SessionStatus.REVOKED

    async def revoke(self, session_id: str, *, expires_at: float) -> bool:
        """One script: the tombstone (until ``expires_at`` + ``expiry_margin``), data dropped."""
        outcome = await self._run(self._revoke(self._keys(session_id), [self._ttl_ms(expires_at, time.time())]))
        return bool(outcome == 1)

    async def get(self, session_id: str, key: str, default: object = None) -> Any:
        raw = await self._run(self._redis.hget(self._keys(session_id)[1], key))
        return default if raw is None else json.loads(raw)

    async def set(self, session_id: str, key: str, value: object, *, expires_at: float) -> None:
        encoded = encode_value(value)
        ttl = self._ttl_ms(expires_at, time.time())
        await self._run(self._set(self._keys(session_id), [key, encoded, ttl]))

    async def delete(self, session_id: str, key: str) -> None:
        await self._run(self._redis.hdel(self._keys(session_id)[1], key))

    async def incr(self, session_id: str, key: str, amount: int = 1, *, expires_at: float) -> int:
        """Add ``amount`` in one script (``HINCRBY``, exact within 64 bits); never sent twice."""
        if type(amount) is not int:
            raise TypeError("incr takes an integer amount")
        if not -(2**63) <= amount < 2**63:
            raise OverflowError("RedisStore counts in 64-bit integers")
        ttl = self._ttl_ms(expires_at, time.time())
        outcome = reply_text(await self._run(self._incr(self._keys(session_id), [key, amount, ttl])))
        if outcome == "R":
            return amount  # a request that outlives its session's deletion counts into the void
        if outcome == "N":
            raise TypeError(f"session data {key!r} is not an integer")
        if outcome == "O":
            raise OverflowError(f"session data {key!r} would leave the 64-bit range RedisStore counts in")
        return int(outcome)

    async def update(
        self, session_id: str, key: str, fn: Callable[[Any], object], *, expires_at: float, default: object = None
    ) -> object:
        """Read, apply ``fn``, compare-and-set; again after a random back-off if another write got in, for at most
        ``update_timeout`` seconds: bounded by time, not by a count, so that every writer of a busy key lands."""
        keys = self._keys(session_id)
        deadline = time.monotonic() + self.update_timeout
        attempt = 0
        while True:
            started = time.monotonic()
            raw = await self._run(self._redis.hget(keys[1], key))
            new = fn(default if raw is None else json.loads(raw))
            encoded = encode_value(new)
            ttl = self._ttl_ms(expires_at, time.time())
            outcome = await self._run(self._compare_and_set(keys, [key, raw or "", encoded, ttl]))
            if outcome != 0:  # stored, or revoked (the write goes nowhere)
                return new
            # Another request changed the value between our read and our write: back off, read again. The back-off
            # counts in this attempt's own time (longer under load, when writes collide more), up to 2**attempt of
            # them and at most 16 (full jitter), so that many writers spread out however slow each round trip is.
            now = time.monotonic()
            if now >= deadline:
                raise SessionStoreUnavailable(
                    f"session data {key!r} changed under every attempt to update it for {self.update_timeout:g} s"
                )
            window = (now - started) * 2 ** min(attempt, 4)
            await asyncio.sleep(min(random.uniform(0, window), deadline - now))  # noqa: S311 - jitter
            attempt += 1

    async def items(self, session_id: str) -> dict[str, Any]:
        raw = await self._run(self._redis.hgetall(self._keys(session_id)[1]))
        return {reply_text(key): json.loads(value) for key, value in raw.items()}
