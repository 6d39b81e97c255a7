"""Session ids at the exact instant they stop being valid, verified now or earlier.

The rule (``KeySet.verify_session_token``, RFC 7519 section 4.1.4): a session id is accepted while
``now < exp + leeway`` and refused from ``now == exp + leeway`` on. Each test checks the last float before that
instant (``math.nextafter``) and the instant itself, so a ``<=`` turned into ``<`` (or the leeway dropped) fails.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mcp_sessions import InvalidToken, KeySet, SessionClaims, SessionKey
from unit._instants import after, before

SECRET = "expiry-boundary-secret-that-is-long-enough-for-hs256"
NOW = 1_800_000_000
TTL = 600


def minted(path: str, leeway: float, now: float) -> tuple[str, SessionClaims, Callable[[], KeySet]]:
    """A session id minted at ``now``, its claims, and how to get a key set that verifies it by ``path``: the
    verification cache (filled by minting, or by a first verification), or PyJWT for a token new to the key set."""
    signer = KeySet.from_secret(SECRET, leeway=leeway)
    token, claims = signer.mint_session_token(ttl=TTL, now=now)
    if path == "cached-by-verifying":
        signer = KeySet.from_secret(SECRET, leeway=leeway)
        assert signer.verify_session_token(token, now=now) == claims  # fills the cache, well before the boundary

    def verifier() -> KeySet:
        keys = KeySet.from_secret(SECRET, leeway=leeway) if path == "uncached" else signer
        # So that each case tests what its id says; the cache holds the claims alone, no verdict.
        assert keys._session_cache.get(token) == (None if path == "uncached" else claims)
        return keys

    return token, claims, verifier


@pytest.mark.parametrize("minted_at", [NOW, NOW + 0.75])  # iat and exp are whole seconds: the clock's integer part
@pytest.mark.parametrize("leeway", [0, 30, 0.25])
@pytest.mark.parametrize("path", ["cached-by-minting", "cached-by-verifying", "uncached"])
def test_valid_until_the_last_instant_before_exp_plus_leeway_and_refused_from_it_on(
    path: str, leeway: float, minted_at: float
) -> None:
    """Pinned: ``now = exp + leeway - epsilon`` is accepted, with the very claims minted; ``now = exp + leeway``
    exactly, and after, is refused as ``expired``; a refusal leaves the cached claims, and the instant before it
    is accepted still."""
    token, claims, verifier = minted(path, leeway, minted_at)
    assert claims.expires_at == NOW + TTL
    end = claims.expires_at + leeway
    assert verifier().verify_session_token(token, now=before(end)) == claims
    for now in (end, after(end)):
        with pytest.raises(InvalidToken) as refused:
            verifier().verify_session_token(token, now=now)
        assert refused.value.reason == "expired"
    assert verifier().verify_session_token(token, now=before(end)) == claims


# -- the other end: iat and nbf from the future -----------------------------------------------------

SKEW = 60  # tokens._tokens.MAX_CLOCK_SKEW: how far ahead a minting replica's clock may run


@pytest.mark.parametrize("leeway", [0, 30, 90.5])
@pytest.mark.parametrize("claim", ["iat", "nbf"])
def test_iat_and_nbf_may_be_ahead_by_the_skew_and_not_an_instant_more(claim: str, leeway: float) -> None:
    """Pinned: a token whose ``iat`` (or ``nbf``) is ``max(60, leeway)`` s ahead is accepted, one float more is not."""
    skew = max(SKEW, leeway)
    ahead = NOW + 3600
    key = SessionKey.from_secret(SECRET)
    minted_at, extra = (ahead, None) if claim == "iat" else (NOW, {"nbf": ahead})
    token, _ = KeySet([key]).mint_session_token(ttl=7200, now=minted_at, extra_claims=extra)
    assert KeySet([key], leeway=leeway).verify_session_token(token, now=ahead - skew).session_id
    with pytest.raises(InvalidToken) as refused:
        KeySet([key], leeway=leeway).verify_session_token(token, now=before(ahead - skew))
    assert refused.value.reason == "not yet valid"
