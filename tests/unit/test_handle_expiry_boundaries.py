"""Handles at the exact instant they end (absolute, idle, and revoked within the leeway), on a fixed clock
(``now=``) with a MemoryStore: each boundary is checked at the last float before it (``math.nextafter``) and at it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from mcp_sessions import KeySet
from mcp_sessions.handles import HandleError, HandleKind, Handles
from mcp_sessions.stores import MemoryStore
from unit._instants import after, before

pytestmark = pytest.mark.anyio

SECRET = "handle-expiry-boundary-secret-long-enough-0123456789"
NOW = 1_900_000_000  # ahead of the wall clock, which the MemoryStore's revoke reads
BASKET = HandleKind("basket", prefix="bsk", ttl=600)
CART = HandleKind("cart", prefix="crt", ttl=3600, idle_ttl=60)


def registry(leeway: float = 0) -> Handles:
    return Handles(KeySet.from_secret(SECRET, leeway=leeway), MemoryStore(), kinds=[BASKET, CART])


async def refusal(handles: Handles, token: str, now: float) -> str | None:
    """``None`` if ``token`` verifies at ``now``, else the reason it is refused."""
    try:
        await handles.verify(token, principal=None, now=now)
    except HandleError as refused:
        return refused.reason
    return None


@pytest.mark.parametrize("minted_at", [NOW, NOW + 0.25], ids=["whole-second", "fractional"])
@pytest.mark.parametrize("leeway", [0, 30, 0.25])
async def test_a_handle_verifies_until_expires_at_plus_leeway_and_is_expired_from_then_on(
    leeway: float, minted_at: float
) -> None:
    """Pinned: ``expires_at = ceil(now + ttl)``; ``expires_at + leeway - epsilon`` verifies, the instant does not."""
    handles = registry(leeway)
    token = await handles.mint(BASKET, principal=None, now=minted_at)
    _, payload = handles.authenticate(token, None, now=minted_at)
    assert payload.expires_at == math.ceil(minted_at + BASKET.ttl)
    end = payload.expires_at + leeway
    assert handles.authenticate(token, None, now=before(end))[1].handle_id == payload.handle_id
    with pytest.raises(HandleError) as refused:
        handles.authenticate(token, None, now=end)
    assert refused.value.reason == "expired"
    assert await refusal(handles, token, before(end)) is None
    assert await refusal(handles, token, end) == "expired"


@pytest.mark.parametrize("now", [NOW + 100, NOW + 99.5, before(NOW + 100)], ids=["at", "half-a-second-before", "float"])
async def test_a_handle_capped_by_its_session_is_minted_until_the_session_ends(now: float) -> None:
    """Pinned: capped by ``session_expires_at``, a handle is minted up to the last instant before it, not at it."""
    handles = registry()
    session_ends = NOW + 100
    mint = handles.mint(BASKET, principal=None, session_id="s1", session_expires_at=session_ends, now=now)
    if now >= session_ends:
        with pytest.raises(ValueError, match="born expired"):
            await mint
        return
    token = await mint
    assert handles.authenticate(token, None, now=now)[1].expires_at == session_ends


@pytest.mark.parametrize(("probe", "refused"), [(before, None), (lambda at: at, None), (after, "expired")])
async def test_a_handle_idles_out_one_float_after_idle_ttl(
    probe: Callable[[float], float], refused: str | None
) -> None:
    """Pinned: last used at ``t``, a handle verifies at ``t + idle_ttl``; one float later it is expired (unused)."""
    handles = registry()
    token = await handles.mint(CART, principal=None, now=NOW)
    used = NOW + 10.5
    assert await refusal(handles, token, used) is None
    assert await refusal(handles, token, probe(used + 60)) == refused


async def test_a_revoked_handle_stays_revoked_until_expires_at_plus_leeway() -> None:
    """Pinned: revoked, a handle is refused as ``revoked`` up to ``expires_at + leeway``, then ``expired``."""
    handles = registry(leeway=30)
    token = await handles.mint(BASKET, principal=None, now=NOW)
    expires_at = NOW + int(BASKET.ttl)
    handle = await handles.verify(token, principal=None, now=NOW)
    assert await handles.revoke(handle) is True
    for now in (before(expires_at), expires_at, expires_at + 10, before(expires_at + 30)):
        assert await refusal(handles, token, now) == "revoked"
    assert await refusal(handles, token, expires_at + 30) == "expired"


async def test_an_idle_clock_runs_on_within_the_leeway() -> None:
    """Pinned: used at ``expires_at - 5``, a handle verifies at ``expires_at + 10`` (idle 15 s of 60)."""
    handles = registry(leeway=30)
    token = await handles.mint(CART, principal=None, now=NOW)
    expires_at = NOW + int(CART.ttl)
    for used in range(NOW, expires_at, 50):  # kept alive, a use every 50 s
        assert await refusal(handles, token, used) is None
    assert await refusal(handles, token, expires_at - 5) is None
    assert await refusal(handles, token, expires_at + 10) is None


async def test_a_handle_never_used_is_not_idle_before_its_first_use() -> None:
    """As docs/handles.md says: minting stores nothing, so the idle clock starts at the first use."""
    handles = registry()
    token = await handles.mint(CART, principal=None, now=NOW)
    assert await refusal(handles, token, after(NOW + 60)) is None
