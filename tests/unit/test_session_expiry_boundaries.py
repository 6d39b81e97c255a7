"""``SessionService.mint`` and ``resolve`` at the exact instant a session ends (absolute, idle, the promised
``Minted.expires_at``, deleted within the leeway), on a fixed clock, with the Memory and SQLite stores (whose
records live until the ``expires_at`` the service gives them): each boundary is checked at the last float before
it (``math.nextafter``) and at it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from mcp_sessions import KeySet
from mcp_sessions._session import _service
from mcp_sessions._session._service import Minted, SessionNotFound, SessionService
from mcp_sessions.stores import MemoryStore, SessionStore, SQLiteStore
from unit._instants import after, before

pytestmark = pytest.mark.anyio

SECRET = "session-expiry-boundary-secret-long-enough-for-hs256"
NOW = 1_900_000_000  # ahead of the wall clock: the stores' clock-driven clean-ups never meet these sessions
TTL = 3600
SCOPE: dict[str, Any] = {"type": "http", "headers": []}


class Clock:
    """Stands in for the ``time`` module in ``mcp_sessions._session._service``."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fixed = Clock(NOW)
    monkeypatch.setattr(_service, "time", fixed)
    return fixed


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    # touch_interval=0: SQLite writes the idle clock on every use, so idle expiry has no slack to hide in.
    opened: SessionStore = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s", touch_interval=0)
    yield opened
    await opened.aclose()


def service(store: SessionStore, *, idle_ttl: float | None = None, leeway: float = 0) -> SessionService:
    keys = KeySet.from_secret(SECRET, leeway=leeway)
    return SessionService(keys=keys, store=store, ttl=TTL, idle_ttl=idle_ttl, principal=None)


async def mint(sessions: SessionService, clock: Clock, at: float) -> Minted:
    clock.now = at
    return await sessions.mint(SCOPE, None)


async def resolves(sessions: SessionService, clock: Clock, token: str, at: float) -> str | None:
    """``None`` if ``token`` resolves at ``at``, else the reason it is refused."""
    clock.now = at
    try:
        await sessions.resolve(SCOPE, token, None)
    except SessionNotFound as refused:
        return refused.reason
    return None


@pytest.mark.parametrize("leeway", [0, 30, 0.25])
@pytest.mark.parametrize("idle_ttl", [None, 600])
async def test_a_session_resolves_until_exp_plus_leeway_and_is_expired_from_then_on(
    store: SessionStore, clock: Clock, leeway: float, idle_ttl: float | None
) -> None:
    """Pinned: ``exp + leeway - epsilon`` resolves (kept in use, so not idle), ``exp + leeway`` is expired."""
    sessions = service(store, idle_ttl=idle_ttl, leeway=leeway)
    minted = await mint(sessions, clock, NOW)
    end = minted.claims.expires_at + leeway
    assert minted.claims.expires_at == NOW + TTL
    for used in range(NOW + 500, NOW + TTL, 500):  # a use every 500 s
        assert await resolves(sessions, clock, minted.token, used) is None
    assert await resolves(sessions, clock, minted.token, before(end)) is None
    assert await resolves(sessions, clock, minted.token, end) == "expired"


@pytest.mark.parametrize(("probe", "refusal"), [(before, None), (lambda at: at, None), (after, "idle_expired")])
@pytest.mark.parametrize("first_use", [None, 10, 10.5], ids=["from-iat", "from-use", "from-fractional-use"])
async def test_a_session_idles_out_one_float_after_idle_ttl(
    store: SessionStore, clock: Clock, first_use: float | None, probe: Callable[[float], float], refusal: str | None
) -> None:
    """Pinned: last used at ``t`` (or, unused, issued at ``t``): ``t + idle_ttl`` resolves, one float later not."""
    sessions = service(store, idle_ttl=60)
    minted = await mint(sessions, clock, NOW)
    last: float = NOW
    if first_use is not None:
        last = NOW + first_use
        assert await resolves(sessions, clock, minted.token, last) is None
    assert await resolves(sessions, clock, minted.token, probe(last + 60)) == refusal


@pytest.mark.parametrize("minted_at", [NOW, NOW + 0.75], ids=["whole-second", "fractional"])
@pytest.mark.parametrize(
    ("idle_ttl", "bound"),
    [(None, "exp"), (60, "idle"), (90.5, "idle"), (TTL, "exp"), (TTL + 1, "exp"), (TTL - 0.5, "idle")],
)
async def test_a_session_is_never_refused_before_the_expiry_it_was_minted_with(
    store: SessionStore, clock: Clock, minted_at: float, idle_ttl: float | None, bound: str
) -> None:
    """Pinned: ``Minted.expires_at == min(exp, iat + idle_ttl)``; an unused session resolves up to it.

    At it exactly, an idle-bounded session still resolves (idle is "longer than"), an ``exp``-bounded one
    is expired (RFC 7519). ``iat`` is the mint clock's whole second: so is the idle clock's start.
    """
    sessions = service(store, idle_ttl=idle_ttl)
    minted = await mint(sessions, clock, minted_at)
    claims = minted.claims
    assert claims.issued_at == NOW
    promised = claims.expires_at if idle_ttl is None else min(claims.expires_at, claims.issued_at + idle_ttl)
    assert minted.expires_at == promised
    assert (promised == claims.expires_at) is (bound == "exp")
    assert await resolves(sessions, clock, minted.token, before(promised)) is None
    at_promise = await resolves(sessions, clock, minted.token, promised)
    assert at_promise == ("expired" if bound == "exp" else None)


@pytest.mark.parametrize("idle_ttl", [None, 600])
async def test_a_deleted_session_stays_deleted_until_exp_plus_leeway(
    store: SessionStore, clock: Clock, idle_ttl: float | None
) -> None:
    """Pinned: deleted, a session is refused as ``revoked`` up to ``exp + leeway``, not resurrected at ``exp``."""
    sessions = service(store, idle_ttl=idle_ttl, leeway=30)
    minted = await mint(sessions, clock, NOW + TTL - 100)
    clock.now = NOW + TTL - 50
    session = await sessions.resolve(SCOPE, minted.token, None)
    assert await sessions.revoke(session) is True
    exp = minted.claims.expires_at
    for now in (before(exp), exp, exp + 10, before(exp + 30)):
        assert await resolves(sessions, clock, minted.token, now) == "revoked"
    assert await resolves(sessions, clock, minted.token, exp + 30) == "expired"


async def test_the_idle_clock_runs_on_within_the_leeway(store: SessionStore, clock: Clock) -> None:
    """Pinned: used at ``exp - 5``, a session resolves at ``exp + 10`` (idle 15 s of 100), its clock not forgotten."""
    sessions = service(store, idle_ttl=100, leeway=30)
    minted = await mint(sessions, clock, NOW)
    exp = minted.claims.expires_at
    for used in range(NOW + 90, exp, 90):  # kept alive, a use every 90 s
        assert await resolves(sessions, clock, minted.token, used) is None
    assert await resolves(sessions, clock, minted.token, exp - 5) is None
    assert await resolves(sessions, clock, minted.token, exp + 10) is None
