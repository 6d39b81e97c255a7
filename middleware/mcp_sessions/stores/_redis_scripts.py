"""The Lua scripts ``RedisStore`` runs, and the keys they run on.

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

import hashlib
from typing import Final

REVOKED: Final = "r"


def session_keys(prefix: str, session_id: str) -> list[str]:
    """The session's status, data and listing keys, in one Cluster slot."""
    tagged = f"{prefix}{{{session_id}}}"
    return [tagged + ":s", tagged + ":d", tagged + ":l"]


def index_key(prefix: str, principal: str) -> str:
    """The principal's index of recorded sessions, named by a hash of the principal."""
    digest = hashlib.sha256(principal.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{prefix}p:{{{digest}}}"


# KEYS: status, data, listing. ARGV: now, idle_ttl, touch interval, ttl in ms, issued_at.
# Returns 0 active, 1 revoked (a status that is not a time: 'r'), 2 idle-expired (and revokes). Without a
# status key the idle clock started at issued_at: nothing is written while that is within the touch interval.
TOUCH: Final = """
local v = redis.call('GET', KEYS[1])
local seen = tonumber(v or ARGV[5])
if not seen then return 1 end
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[3])
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
REVOKE: Final = """
redis.call('DEL', KEYS[2], KEYS[3])
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


# KEYS: status, listing. ARGV: expires_at, JSON label ('' for none), ttl in ms. Returns 0 if revoked.
RECORD: Final = """
if redis.call('GET', KEYS[1]) == 'r' then return 0 end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'e', ARGV[1])
if ARGV[2] ~= '' then redis.call('HSET', KEYS[2], 'l', ARGV[2]) end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
"""

# KEYS: the principal's index (a sorted set, every score 0, ordered by session id). ARGV: session id, ttl in ms.
# The index lives as long as its longest-lived session.
INDEX: Final = """
redis.call('ZADD', KEYS[1], 0, ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""
