"""Session ids at the exact instant they stop being valid, verified now or earlier.

The rule (``KeySet.verify_session_token``, RFC 7519 section 4.1.4): a session id is
accepted while ``now < exp + leeway`` and refused from ``now == exp + leeway`` on. Each
test checks the last float before that instant (``math.nextafter``) and the instant
itself, so a ``<=`` turned into ``<`` (or the leeway dropped) fails here. The paths:
the verification cache (filled by minting, or by a first verification), and a token
new to the key set (PyJWT verifies it).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mcp_sessions import InvalidToken, KeySet, SessionClaims, SessionKey
from unit._instants import after, before

SECRET = "expiry-boundary-secret-that-is-long-enough-for-hs256"
NOW = 1_800_000_000
TTL = 600

Verifier = Callable[[], KeySet]


def minted(path: str, leeway: float, now: float) -> tuple[str, SessionClaims, Verifier]:
    """A session id minted at ``now``, its claims, and how to get a key set that verifies it by ``path``."""
    signer = KeySet.from_secret(SECRET, leeway=leeway)
    token, claims = signer.mint_session_token(ttl=TTL, now=now)
    if path == "cached-by-minting":
        return token, claims, lambda: signer
    if path == "cached-by-verifying":
        verifier = KeySet.from_secret(SECRET, leeway=leeway)
        assert verifier.verify_session_token(token, now=now) == claims  # fills the cache, well before the boundary
        return token, claims, lambda: verifier
    assert path == "uncached"
    return token, claims, lambda: KeySet.from_secret(SECRET, leeway=leeway)


PATHS = ["cached-by-minting", "cached-by-verifying", "uncached"]
LEEWAYS = [0, 30, 0.25]
MINTED_AT = [NOW, NOW + 0.75]  # a fractional clock: iat and exp are whole seconds, taken from its integer part


def on_path(path: str, token: str, verifier: KeySet) -> bool:
    """Whether ``verifier`` will judge ``token`` by ``path`` (so that each case tests what its id says)."""
    return (token in verifier._session_cache) == (path != "uncached")


@pytest.mark.parametrize("minted_at", MINTED_AT)
@pytest.mark.parametrize("leeway", LEEWAYS)
@pytest.mark.parametrize("path", PATHS)
def test_valid_until_the_last_instant_before_exp_plus_leeway_and_refused_from_it_on(
    path: str, leeway: float, minted_at: float
) -> None:
    """Pinned: ``now = exp + leeway - epsilon`` is accepted, with the very claims minted; ``now = exp + leeway``
    exactly, and after, is refused as ``expired`` (RFC 7519: not on or after ``exp``)."""
    token, claims, verifier = minted(path, leeway, minted_at)
    assert claims.expires_at == NOW + TTL
    keys = verifier()
    assert on_path(path, token, keys)
    assert keys.verify_session_token(token, now=before(claims.expires_at + leeway)) == claims
    for now in (claims.expires_at + leeway, after(claims.expires_at + leeway)):
        keys = verifier()
        assert on_path(path, token, keys)
        with pytest.raises(InvalidToken) as refused:
            keys.verify_session_token(token, now=now)
        assert refused.value.reason == "expired"


@pytest.mark.parametrize("leeway", LEEWAYS)
def test_the_cached_claims_carry_no_verdict_and_exp_plus_leeway_is_still_the_boundary(leeway: float) -> None:
    """Pinned: the claims cache answers without the clock; the cached path checks it at the same instant.

    A refusal at the boundary leaves the claims cached, and the last instant before it is still accepted.
    """
    keys = KeySet.from_secret(SECRET, leeway=leeway)
    token, claims = keys.mint_session_token(ttl=TTL, now=NOW)
    assert keys._session_cache[token] == claims
    with pytest.raises(InvalidToken, match="expired"):
        keys.verify_session_token(token, now=claims.expires_at + leeway)
    assert keys._session_cache[token] == claims
    assert keys.verify_session_token(token, now=before(claims.expires_at + leeway)) == claims


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
