"""A store shared by many replicas: Redis, through ``redis.asyncio`` (the ``redis`` extra).

Up to three keys per session, all named with the ``{sid}`` hash tag so that a
Redis Cluster keeps them in one slot and every script below runs on one node:

- ``<prefix>{<sid>}:s``, a string: the last-seen time (Unix seconds, as the
  replicas' clocks read it) while the session lives, ``r`` once it is revoked
  (``sessions/delete`` or idle expiry). Its TTL is the session's remaining
  lifetime plus ``expiry_margin``, so a revocation outlives the token.
- ``<prefix>{<sid>}:d``, a hash: ``session.data``, one JSON-encoded field per key,
  with the same TTL, refreshed on each write. Revocation deletes it.
- ``<prefix>{<sid>}:l``, a hash, only for sessions recorded for listing: the
  expiry (``e``) and the JSON label (``l``). Revocation deletes it.

and, per principal with recorded sessions, ``<prefix>p:{<hash of the principal>}``,
a sorted set of session ids (every score 0, so ordered by id), cleaned lazily as
it is listed and expiring with its longest-lived session.

Creation writes nothing. The status key appears when the idle clock must move
(a touch with an idle timeout, at most once per touch interval) or at revocation.

Every check, and every write that must not follow a revocation, is one Lua
script (``EVALSHA``, loaded again by redis-py after ``NOSCRIPT``), so each is
atomic and costs one round trip.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar
from urllib.parse import parse_qs, urlsplit

try:
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import ResponseError
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without redis
    raise ImportError(
        "RedisStore needs the redis package: pip install 'redis>=5.2' (the redis extra of mcp-sessions)"
    ) from exc

from ._base import (
    SessionRecord,
    SessionStatus,
    SessionStore,
    SessionStoreUnavailable,
    check_page_size,
    decode_cursor,
    encode_cursor,
)
from .memory import _encode

__all__ = ["RedisStore"]

_T = TypeVar("_T")

logger = logging.getLogger("mcp_sessions.redis")

_REVOKED: Final = "r"
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_ERROR_TEXT_LIMIT: Final = 300
_LOG_INTERVAL: Final = 10.0

# KEYS: status, data, listing. ARGV: now, idle_ttl, touch interval, ttl in ms, issued_at.
# Returns 0 active, 1 revoked, 2 idle-expired (and revokes). Without a status key the idle clock
# started at issued_at: nothing is written while that is within the touch interval.
_TOUCH: Final = """
local v = redis.call('GET', KEYS[1])
if v == 'r' then return 1 end
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[3])
local seen = tonumber(ARGV[5])
if v then
  seen = tonumber(v)
  if not seen then return 1 end
end
if now - seen > tonumber(ARGV[2]) + interval then
  if v or redis.call('EXISTS', KEYS[2], KEYS[3]) > 0 then
    redis.call('SET', KEYS[1], 'r', 'PX', ARGV[4])
    redis.call('DEL', KEYS[2], KEYS[3])
  end
  return 2
end
if now <= seen or now - seen < interval then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
return 0
"""

# KEYS: status, data, listing. ARGV: ttl in ms. Returns 1 if this call revoked it, 0 if it already was.
_REVOKE: Final = """
redis.call('DEL', KEYS[2], KEYS[3])
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


# KEYS: status, listing. ARGV: expires_at, JSON label ('' for none), ttl in ms. Returns 0 if revoked.
_RECORD: Final = """
if redis.call('GET', KEYS[1]) == 'r' then return 0 end
redis.call('DEL', KEYS[2])
if ARGV[2] == '' then
  redis.call('HSET', KEYS[2], 'e', ARGV[1])
else
  redis.call('HSET', KEYS[2], 'e', ARGV[1], 'l', ARGV[2])
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
"""

# KEYS: the principal's index (a sorted set, every score 0, ordered by session id). ARGV: session id, ttl in ms.
# The index lives as long as its longest-lived session.
_INDEX: Final = """
redis.call('ZADD', KEYS[1], 0, ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""


def _check_url(url: str) -> None:
    """Refuse what redis-py would misread or silently accept: a bad port, a database that is not a number.

    The messages name the part at fault and never repeat the URL (it may hold a password).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError(
            "the Redis URL is not valid: use redis://[user:password@]host[:port][/db], rediss://… or unix://…"
        )
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
    for value in parse_qs(parts.query, keep_blank_values=True).get("db", []):
        if not (value.isascii() and value.isdigit()):
            raise ValueError("the db parameter of the Redis URL must be a non-negative integer")


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
            _check_url(url)
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
        self._record = client.register_script(_RECORD)
        self._index = client.register_script(_INDEX)

    def __repr__(self) -> str:
        return f"RedisStore(prefix={self.prefix!r}, timeout={self.timeout})"

    # -- plumbing --------------------------------------------------------------

    def _keys(self, session_id: str) -> list[str]:
        """The session's status, data and listing keys, in one Cluster slot."""
        tagged = f"{self.prefix}{{{session_id}}}"
        return [tagged + ":s", tagged + ":d", tagged + ":l"]

    def _index_key(self, principal: str) -> str:
        digest = hashlib.sha256(principal.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"{self.prefix}p:{{{digest}}}"

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
        """Close the pool the store built from its URL; a ``client=`` is left to its owner."""
        if self._owns_client:
            await self._redis.aclose()

    # -- sessions --------------------------------------------------------------

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
            return SessionStatus.ACTIVE if status is None or _text(status) != _REVOKED else SessionStatus.REVOKED
        interval = min(self.touch_interval, idle_ttl / 10)
        start = now if issued_at is None else issued_at
        args: list[str | int] = [repr(float(now)), repr(float(idle_ttl)), repr(interval)]
        outcome = await self._run(self._touch(keys, [*args, self._ttl_ms(expires_at, now), repr(float(start))]))
        if outcome == 0:
            return SessionStatus.ACTIVE
        return SessionStatus.IDLE_EXPIRED if outcome == 2 else SessionStatus.REVOKED

    async def revoke(self, session_id: str, *, expires_at: float) -> bool:
        """One script: the tombstone (until ``expires_at`` + ``expiry_margin``), data and listing dropped."""
        outcome = await self._run(self._revoke(self._keys(session_id), [self._ttl_ms(expires_at, time.time())]))
        return bool(outcome == 1)

    # -- data ------------------------------------------------------------------

    async def get(self, session_id: str, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default``: one ``HGET``."""
        raw = await self._run(self._redis.hget(self._keys(session_id)[1], key))
        return default if raw is None else json.loads(raw)

    async def set(self, session_id: str, key: str, value: Any, *, expires_at: float) -> None:
        """Store a copy of ``value`` (one script); a no-op once the session is revoked."""
        encoded = _encode(value)
        ttl = self._ttl_ms(expires_at, time.time())
        await self._run(self._set(self._keys(session_id)[:2], [key, encoded, ttl]))

    async def delete(self, session_id: str, key: str) -> None:
        """Remove ``key`` if present: one ``HDEL``."""
        await self._run(self._redis.hdel(self._keys(session_id)[1], key))

    async def incr(self, session_id: str, key: str, amount: int = 1, *, expires_at: float) -> int:
        """Add ``amount`` in one script (``HINCRBY``, exact within 64 bits); never sent twice."""
        if type(amount) is not int:
            raise TypeError("incr takes an integer amount")
        if not _INT64_MIN <= amount <= _INT64_MAX:
            raise OverflowError("RedisStore counts in 64-bit integers")
        ttl = self._ttl_ms(expires_at, time.time())
        outcome = _text(await self._run(self._incr(self._keys(session_id)[:2], [key, amount, ttl])))
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
        """Read, apply ``fn``, compare-and-set; again after a short random back-off if another write got in."""
        keys = self._keys(session_id)[:2]
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
        """Every key and value of the session's data: one ``HGETALL``."""
        raw = await self._run(self._redis.hgetall(self._keys(session_id)[1]))
        return {_text(key): json.loads(value) for key, value in raw.items()}

    # -- listing ---------------------------------------------------------------

    async def record(
        self,
        session_id: str,
        *,
        principal: str,
        expires_at: float,
        now: float,
        data: Mapping[str, str] | None = None,
    ) -> None:
        """Two commands: the session's listing hash (unless revoked), then the principal's index."""
        keys = self._keys(session_id)
        ttl = self._ttl_ms(expires_at, now)
        label = "" if data is None else json.dumps(dict(data), separators=(",", ":"), ensure_ascii=False)
        recorded = await self._run(self._record([keys[0], keys[2]], [repr(float(expires_at)), label, ttl]))
        if recorded:
            await self._run(self._index([self._index_key(principal)], [session_id, ttl]))

    async def list_sessions(
        self, principal: str, *, now: float, cursor: str | None = None, limit: int = 100
    ) -> tuple[list[SessionRecord], str | None]:
        """Two round trips a page: the ids from the principal's index, then their listing hashes (pipelined)."""
        check_page_size(limit)
        index = self._index_key(principal)
        start = "-" if cursor is None else "(" + decode_cursor(cursor)
        members = await self._run(self._redis.zrange(index, start, "+", bylex=True, offset=0, num=limit))
        ids = [_text(member) for member in members if isinstance(member, str | bytes)]
        if not ids:
            return [], None
        pipe = self._redis.pipeline(transaction=False)
        for session_id in ids:
            pipe.hgetall(self._keys(session_id)[2])
        listings = await self._run(pipe.execute())
        page: list[SessionRecord] = []
        gone: list[str] = []
        for session_id, listing in zip(ids, listings, strict=True):
            fields = {_text(k): _text(v) for k, v in listing.items()}
            if "e" not in fields:  # revoked, or past its expiry and margin
                gone.append(session_id)
                continue
            expires_at = float(fields["e"])
            if expires_at > now:
                label = json.loads(fields["l"]) if "l" in fields else None
                page.append(SessionRecord(session_id, expires_at, label))
        if gone:
            await self._run(self._redis.zrem(index, *gone))
        return page, encode_cursor(ids[-1]) if len(ids) == limit else None
