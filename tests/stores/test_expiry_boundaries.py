"""Store expiry at the exact instant, for every store (the ``backend`` fixture): idle, absolute, listing.

The rules pinned (``stores/_base.py``):

- idle: a session ends when idle for *longer* than ``idle_ttl`` (``touch_verdict``): used at ``t``,
  it is alive at ``t + idle_ttl`` and idle-expired one float later. Without a record the clock
  starts at ``issued_at``. A store that writes the clock at most once per touch interval adds
  that interval to ``idle_ttl`` (never earlier), and moves the clock once a full interval has passed;
- absolute: a store honours a record (a tombstone, an idle clock) while ``now < expires_at``.
  Memory and SQLite forget it from ``now == expires_at`` on, as the token itself is refused from
  ``exp`` on; Redis lets its keys expire by its own clock plus ``expiry_margin`` (the contract allows
  a margin), so it is not asked about ``now >= expires_at`` here;

Each boundary is checked at the last float before it (``math.nextafter``) and at it, so a ``<``
turned into ``<=`` (or ``>`` into ``>=``) fails here. ``NOW`` is years ahead of the wall clock,
so that no store's own clock-driven cleanup can meet these records.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import pytest

from mcp_sessions.stores import MemoryStore, RedisStore, SessionStatus, SessionStore, SessionStoreFull, SQLiteStore
from mcp_sessions.stores import _sqlite as sqlite_store
from mcp_sessions.stores._sqlite import delete_expired, open_connection
from unit._instants import after, before

from .conftest import ACTIVE, IDLE_EXPIRED, NOW, REVOKED, Closing, unique_prefix

pytestmark = pytest.mark.anyio

IDLE_TTLS = [60, 90.25, 0.5]


PROBES = pytest.mark.parametrize(
    ("probe", "expected"),
    [(before, ACTIVE), (lambda at: at, ACTIVE), (after, IDLE_EXPIRED)],
    ids=["just-before", "at", "just-after"],
)


@PROBES
@pytest.mark.parametrize("idle_ttl", IDLE_TTLS)
async def test_idle_expiry_from_the_last_use(
    store: SessionStore, idle_ttl: float, probe: Callable[[float], float], expected: SessionStatus
) -> None:
    """Pinned: last used at ``t``; ``t + idle_ttl`` is still alive (inclusive), one float later is not."""
    touch = {"expires_at": NOW + 7200, "idle_ttl": idle_ttl, "issued_at": NOW}
    used = NOW + idle_ttl / 4 + 0.125  # the clock moves off issued_at, to a fraction of a second
    assert await store.touch("s1", now=used, **touch) is ACTIVE
    assert await store.touch("s1", now=probe(used + idle_ttl), **touch) is expected


@PROBES
@pytest.mark.parametrize("issued_at", [NOW, NOW + 0.75])
@pytest.mark.parametrize("idle_ttl", IDLE_TTLS)
async def test_idle_expiry_of_the_first_use_counts_from_issued_at(
    store: SessionStore, idle_ttl: float, issued_at: float, probe: Callable[[float], float], expected: SessionStatus
) -> None:
    """Pinned: no record; a first use at ``issued_at + idle_ttl`` is alive, one float later it is idle-expired."""
    now = probe(issued_at + idle_ttl)
    assert await store.touch("s1", expires_at=NOW + 7200, now=now, idle_ttl=idle_ttl, issued_at=issued_at) is expected


async def test_a_tombstone_is_honoured_until_the_last_instant_before_expires_at(store: SessionStore) -> None:
    """Pinned: revoked, a session reads ``REVOKED`` at ``expires_at - epsilon``, with or without an idle clock."""
    expires_at = NOW + 600
    assert await store.revoke("s1", expires_at=expires_at) is True
    for idle_ttl in (None, 3600):
        status = await store.touch("s1", expires_at=expires_at, now=before(expires_at), idle_ttl=idle_ttl)
        assert status is REVOKED


async def test_an_idle_clock_is_honoured_until_the_last_instant_before_expires_at(store: SessionStore) -> None:
    """Pinned: at ``expires_at - epsilon`` the idle clock is the last use's, not ``issued_at``'s."""
    expires_at = NOW + 600
    touch = {"expires_at": expires_at, "idle_ttl": 100, "issued_at": expires_at - 120}
    assert await store.touch("s1", now=expires_at - 50, **touch) is ACTIVE  # moves the clock off issued_at
    assert await store.touch("s1", now=before(expires_at), **touch) is ACTIVE  # idle 50 s, not 120 s


@pytest.mark.parametrize("backend", ["memory", "sqlite"], indirect=True)  # Redis: its own clock, plus a margin
async def test_memory_and_sqlite_forget_a_record_at_expires_at(store: SessionStore) -> None:
    """Pinned: from ``now == expires_at`` on, the tombstone and the idle clock are gone (the token is refused too)."""
    expires_at = NOW + 600
    assert await store.revoke("revoked", expires_at=expires_at) is True
    assert await store.touch("revoked", expires_at=expires_at, now=expires_at, idle_ttl=None) is ACTIVE
    touch = {"expires_at": expires_at, "idle_ttl": 100, "issued_at": expires_at - 120}
    assert await store.touch("used", now=expires_at - 50, **touch) is ACTIVE
    assert await store.touch("used", now=expires_at, **touch) is IDLE_EXPIRED  # 120 s from issued_at again


INTERVAL = 1.0  # touch_interval; with idle_ttl = 60 the stores use min(1.0, 60 / 10) = 1.0


@pytest.fixture(params=["redis", "sqlite"])
async def slack_store(request: pytest.FixtureRequest, tmp_path: Path, closing: Closing) -> SessionStore:
    """A store that writes the idle clock at most once a second (Memory writes it on every touch)."""
    if request.param == "redis":
        url = request.getfixturevalue("redis").url
        store = RedisStore(
            url, prefix=unique_prefix(), touch_interval=INTERVAL, expiry_margin=0, timeout=5, connect_timeout=5
        )
        return closing(store)
    return closing(SQLiteStore(tmp_path / "sessions.db", touch_interval=INTERVAL))


@PROBES
async def test_the_touch_interval_is_slack_on_idle_expiry(
    slack_store: SessionStore, probe: Callable[[float], float], expected: SessionStatus
) -> None:
    """Pinned: last written at ``t``; alive at ``t + idle_ttl + interval``, idle-expired one float later."""
    touch = {"expires_at": NOW + 7200, "idle_ttl": 60, "issued_at": NOW}
    written = NOW + 10
    assert await slack_store.touch("s1", now=written, **touch) is ACTIVE
    assert await slack_store.touch("s1", now=probe(written + 60 + INTERVAL), **touch) is expected


@pytest.mark.parametrize(
    ("second_use", "expected"),
    [(NOW + 10 + INTERVAL, ACTIVE), (before(NOW + 10 + INTERVAL), IDLE_EXPIRED)],
    ids=["a-full-interval-later-moves-the-clock", "a-float-sooner-does-not"],
)
async def test_the_idle_clock_moves_once_a_full_interval_has_passed(
    slack_store: SessionStore, second_use: float, expected: SessionStatus
) -> None:
    """Pinned: a use exactly one interval after the last write moves the clock; one float sooner does not.

    Seen through idle expiry: 62 s after the first write (more than 60 + 1 s) the session is alive only if
    the second use moved the clock.
    """
    touch = {"expires_at": NOW + 7200, "idle_ttl": 60, "issued_at": NOW}
    assert await slack_store.touch("s1", now=NOW + 10, **touch) is ACTIVE
    assert await slack_store.touch("s1", now=second_use, **touch) is ACTIVE
    assert await slack_store.touch("s1", now=NOW + 10 + 62, **touch) is expected


async def test_the_memory_store_evicts_a_record_from_expires_at_on_not_before() -> None:
    """Pinned: at its cap, a store makes room by evicting a record whose ``expires_at <= now``, and no other."""
    store = MemoryStore(max_sessions=1)
    expires_at = NOW + 600
    assert await store.touch("old", expires_at=expires_at, now=NOW, idle_ttl=3600, issued_at=NOW) is ACTIVE
    touch = {"expires_at": NOW + 7200, "idle_ttl": 3600, "issued_at": NOW}
    with pytest.raises(SessionStoreFull):
        await store.touch("new", now=before(expires_at), **touch)
    assert await store.touch("new", now=expires_at, **touch) is ACTIVE
    assert len(store) == 1


def test_the_sqlite_clean_up_deletes_a_row_from_expires_at_on_not_before(tmp_path: Path) -> None:
    """Pinned: ``delete_expired`` deletes rows whose ``expires_at <= now`` (the reads' ``expires_at > now``)."""
    expires_at = NOW + 600
    with contextlib.closing(open_connection(tmp_path / "sessions.db", timeout=1)) as connection:
        connection.execute(sqlite_store.INSERT, ("s1", expires_at, NOW))
        delete_expired(connection, 10, before(expires_at))
        assert connection.execute(sqlite_store.ROW, ("s1", before(expires_at))).fetchall() != []
        assert connection.execute(sqlite_store.ROW, ("s1", expires_at)).fetchall() == []
        delete_expired(connection, 10, expires_at)
        assert connection.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0
