"""Session ids and state tokens: minting, the claims, and every way a token must be refused."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from jwt.algorithms import ECAlgorithm

from _mcp import DROP, b64, hs_jws, jwt_claims, jwt_header, members, unb64, with_claims
from conftest import signer_of
from mcp_sessions import InvalidToken, KeySet, SessionClaims, SessionKey, StateTooLarge
from mcp_sessions._tokens import decode_unverified, is_session_token

SECRET = "unit-test-secret-that-is-long-enough-for-hs256!"
SECRET_BYTES = SECRET.encode()
SESSION_TYP = "mcp-session+jwt"
STATE_TYP = "mcp-session-state+jwt"
SID = "AAAAAAAAAAAAAAAAAAAAAAAA"


def segments(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return jwt_header(token), jwt_claims(token)


def forge(header: dict[str, Any], payload: dict[str, Any] | bytes, *, key: bytes = SECRET_BYTES, **options: Any) -> str:
    """A compact JWS built by hand, HMAC-signed with ``key`` (this module's secret) unless ``signature`` is given."""
    return hs_jws(header, payload, key, **options)


def refused(verify: Callable[..., object], *args: Any) -> InvalidToken:
    """The :class:`InvalidToken` that ``verify(*args)`` must raise."""
    with pytest.raises(InvalidToken) as info:
        verify(*args)
    return info.value


def keyset(**kwargs: Any) -> KeySet:
    return KeySet.from_secret(SECRET, **kwargs)


KID = signer_of(keyset()).kid


def header(**changes: Any) -> dict[str, Any]:
    return members({"alg": "HS256", "kid": KID, "typ": SESSION_TYP, **changes})


def claims(now: int, **changes: Any) -> dict[str, Any]:
    return members({"iss": "mcp-sessions", "aud": "mcp-sessions", "sid": SID, "iat": now, "exp": now + 3600, **changes})


# -- minting -------------------------------------------------------------------


def test_minted_claims_are_exactly_the_registered_ones() -> None:
    now = 1_900_000_000.7
    token, minted = keyset().mint_session_token(ttl=600, now=now)
    head, payload = segments(token)
    assert head == {"alg": "HS256", "kid": KID, "typ": SESSION_TYP}
    assert payload == {
        "iss": "mcp-sessions",
        "aud": "mcp-sessions",
        "sid": minted.session_id,
        "iat": 1_900_000_000,
        "exp": 1_900_000_600,
    }
    assert minted == SessionClaims(
        session_id=minted.session_id, issued_at=1_900_000_000, expires_at=1_900_000_600, extra={}
    )


def test_sid_is_random_url_safe_and_at_least_128_bits() -> None:
    keys = keyset()
    sids = [keys.mint_session_token(ttl=60)[1].session_id for _ in range(500)]
    assert len(set(sids)) == 500
    for sid in sids:
        assert re.fullmatch(r"[A-Za-z0-9_-]+", sid)
        assert len(unb64(sid)) * 8 >= 128


def test_kid_is_derived_from_the_secret_and_stable_across_replicas() -> None:
    assert re.fullmatch(r"hs-[0-9a-f]{12}", KID)
    assert SessionKey.from_secret(SECRET).kid == KID
    assert SessionKey.from_secret(SECRET_BYTES).kid == KID
    assert SessionKey.from_secret(SECRET + "x").kid != KID
    assert SessionKey.from_secret(SECRET, kid="2026-q1").kid == "2026-q1"


def test_a_standard_jwt_library_verifies_a_minted_token_with_the_raw_secret() -> None:
    token, minted = keyset().mint_session_token(ttl=600)
    payload = jwt.decode(token, SECRET, algorithms=["HS256"], audience="mcp-sessions", issuer="mcp-sessions")
    assert payload["sid"] == minted.session_id
    assert payload["exp"] == minted.expires_at


def test_extra_claims_cannot_override_the_registered_ones() -> None:
    now = 1_900_000_000
    token, minted = keyset().mint_session_token(
        ttl=60, now=now, extra_claims={"tenant": "t1", "sid": "attacker-chosen-sid-0000", "exp": 1}
    )
    _, payload = segments(token)
    assert payload["tenant"] == "t1"
    assert payload["sid"] == minted.session_id != "attacker-chosen-sid-0000"
    assert payload["exp"] == now + 60
    assert minted.extra == {"tenant": "t1", "sid": "attacker-chosen-sid-0000", "exp": 1}


def test_custom_issuer_and_audience_are_required_on_verify() -> None:
    keys = keyset(issuer="https://mcp.example", audience="tenant-a")
    token, _ = keys.mint_session_token(ttl=60)
    _, payload = segments(token)
    assert (payload["iss"], payload["aud"]) == ("https://mcp.example", "tenant-a")
    other_audience = keyset(issuer="https://mcp.example", audience="tenant-b")
    assert refused(other_audience.verify_session_token, token).reason == "wrong audience"
    other_issuer = keyset(issuer="https://other.example", audience="tenant-a")
    assert refused(other_issuer.verify_session_token, token).reason == "wrong issuer"


ACCEPTED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("baseline", header(), {}),
    ("header-members-in-another-order", {"typ": SESSION_TYP, "kid": KID, "alg": "HS256"}, {}),
    (
        "jku-x5u-jwk-headers-ignored",
        header(jku="https://attacker.example/jwks.json", x5u="https://attacker.example/cert.pem", jwk={"kty": "oct"}),
        {},
    ),
    ("aud-a-list-holding-ours", header(), {"aud": ["other", "mcp-sessions"]}),
    ("sid-16-chars", header(), {"sid": "A" * 16}),
    ("sid-128-chars", header(), {"sid": "A" * 128}),
    ("exp-beyond-64-bits", header(), {"exp": 2**70}),
    ("nbf-in-the-past-and-extra-claims", header(), {"nbf": 0, "tenant": "t1", "sub": "u", "jti": "j"}),
]


@pytest.mark.parametrize(("head", "changes"), [(h, c) for _, h, c in ACCEPTED], ids=[n for n, _, _ in ACCEPTED])
def test_accepted(head: dict[str, Any], changes: dict[str, Any]) -> None:
    """The rejection table below changes one thing at a time from the baseline; these change what may change."""
    now = int(time.time())
    payload = claims(now, **changes)
    verified = keyset().verify_session_token(forge(head, payload))
    extra = {k: v for k, v in payload.items() if k not in ("iss", "aud", "sid", "iat", "exp")}
    assert verified == SessionClaims(session_id=payload["sid"], issued_at=now, expires_at=payload["exp"], extra=extra)


def _valid_token(now: int) -> str:
    return forge(header(), claims(now))


NOT_ALLOWED = "algorithm not allowed for this key"
NOT_INTEGERS = "iat, exp and nbf must be integers"
REJECTIONS: list[tuple[str, Callable[[int], str], str]] = [
    (
        "alg-none-empty-signature",
        lambda now: forge(header(alg="none"), claims(now), signature=b""),
        "not a compact JWS",
    ),
    ("alg-none-junk-signature", lambda now: forge(header(alg="none"), claims(now), signature=b"x"), NOT_ALLOWED),
    ("alg-HS512", lambda now: forge(header(alg="HS512"), claims(now), digest=hashlib.sha512), NOT_ALLOWED),
    ("alg-HS384", lambda now: forge(header(alg="HS384"), claims(now), digest=hashlib.sha384), NOT_ALLOWED),
    ("alg-RS256", lambda now: forge(header(alg="RS256"), claims(now)), NOT_ALLOWED),
    ("alg-lowercase", lambda now: forge(header(alg="hs256"), claims(now)), NOT_ALLOWED),
    ("alg-missing", lambda now: forge(header(alg=DROP), claims(now)), NOT_ALLOWED),
    ("alg-list", lambda now: forge(header(alg=["HS256"]), claims(now)), NOT_ALLOWED),
    ("kid-unknown", lambda now: forge(header(kid="hs-000000000000"), claims(now)), "unknown key id"),
    ("kid-path-traversal", lambda now: forge(header(kid="../../../../etc/passwd"), claims(now)), "unknown key id"),
    ("kid-very-long", lambda now: forge(header(kid="k" * 1000), claims(now)), "unknown key id"),
    ("kid-int", lambda now: forge(header(kid=123), claims(now)), "unreadable header"),
    ("kid-list", lambda now: forge(header(kid=[KID]), claims(now)), "unreadable header"),
    ("kid-object", lambda now: forge(header(kid={"kid": KID}), claims(now)), "unreadable header"),
    ("kid-null", lambda now: forge(header(kid=None), claims(now)), "unreadable header"),
    ("kid-missing", lambda now: forge(header(kid=DROP), claims(now)), "unknown key id"),
    ("typ-JWT", lambda now: forge(header(typ="JWT"), claims(now)), "wrong token type"),
    ("typ-state", lambda now: forge(header(typ=STATE_TYP), claims(now)), "wrong token type"),
    ("a-state-token", lambda now: keyset().sign_state(SID, {"mode": "x"}), "wrong token type"),
    ("typ-missing", lambda now: forge(header(typ=DROP), claims(now)), "wrong token type"),
    ("aud-wrong", lambda now: forge(header(), claims(now, aud="someone-else")), "wrong audience"),
    ("iss-wrong", lambda now: forge(header(), claims(now, iss="someone-else")), "wrong issuer"),
    ("expired", lambda now: forge(header(), claims(now - 7200, exp=now - 1)), "expired"),
    ("expired-now", lambda now: forge(header(), claims(now - 7200, exp=now)), "expired"),
    ("iat-in-future", lambda now: forge(header(), claims(now + 600)), "not yet valid"),
    ("nbf-in-future", lambda now: forge(header(), claims(now, nbf=now + 600)), "not yet valid"),
    ("nbf-string", lambda now: forge(header(), claims(now, nbf=str(now))), NOT_INTEGERS),
    ("missing-iss", lambda now: forge(header(), claims(now, iss=DROP)), "missing claim iss"),
    ("missing-aud", lambda now: forge(header(), claims(now, aud=DROP)), "missing claim aud"),
    ("missing-sid", lambda now: forge(header(), claims(now, sid=DROP)), "missing claim sid"),
    ("missing-iat", lambda now: forge(header(), claims(now, iat=DROP)), "missing claim iat"),
    ("missing-exp", lambda now: forge(header(), claims(now, exp=DROP)), "missing claim exp"),
    ("exp-numeric-string-past", lambda now: forge(header(), claims(now, exp="123")), NOT_INTEGERS),
    ("exp-numeric-string-future", lambda now: forge(header(), claims(now, exp=str(now + 3600))), NOT_INTEGERS),
    ("exp-non-numeric-string", lambda now: forge(header(), claims(now, exp="tomorrow")), NOT_INTEGERS),
    ("exp-float", lambda now: forge(header(), claims(now, exp=now + 3600.5)), NOT_INTEGERS),
    ("exp-bool", lambda now: forge(header(), claims(now, exp=True)), NOT_INTEGERS),
    ("exp-null", lambda now: forge(header(), claims(now, exp=None)), "missing claim exp"),
    ("iat-float", lambda now: forge(header(), claims(now, iat=now + 0.5)), NOT_INTEGERS),
    ("iat-string", lambda now: forge(header(), claims(now, iat=str(now))), NOT_INTEGERS),
    ("exp-infinity", lambda now: forge(header(), claims(now, exp=float("inf"))), NOT_INTEGERS),
    ("sub-not-a-string", lambda now: forge(header(), claims(now, sub=1)), "invalid token"),
    ("jti-not-a-string", lambda now: forge(header(), claims(now, jti=["j"])), "invalid token"),
    ("aud-a-list-without-ours", lambda now: forge(header(), claims(now, aud=["other"])), "wrong audience"),
    ("sid-int", lambda now: forge(header(), claims(now, sid=12345678901234567890)), "malformed sid claim"),
    ("sid-too-short", lambda now: forge(header(), claims(now, sid="abc")), "malformed sid claim"),
    ("sid-15-chars", lambda now: forge(header(), claims(now, sid="A" * 15)), "malformed sid claim"),
    ("sid-too-long", lambda now: forge(header(), claims(now, sid="A" * 129)), "malformed sid claim"),
    ("sid-bad-chars", lambda now: forge(header(), claims(now, sid="AAAAAAAA/../AAAAAAAAAAAA")), "malformed sid claim"),
    ("sid-null", lambda now: forge(header(), claims(now, sid=None)), "missing claim sid"),
    ("payload-not-object", lambda now: forge(header(), b"[1,2,3]"), "invalid token"),
    ("payload-not-json", lambda now: forge(header(), b"not json"), "invalid token"),
    ("header-not-object", lambda now: f"{b64(b'[]')}.{_valid_token(now).split('.', 1)[1]}", "unreadable header"),
    ("header-not-json", lambda now: f"{b64(b'{nope')}.{_valid_token(now).split('.', 1)[1]}", "unreadable header"),
    (
        "payload-deeply-nested-forged",
        lambda now: forge(header(), b'{"a":' + b"[" * 600 + b"]" * 600 + b"}", signature=b"\0" * 32),
        "bad signature",
    ),
    (
        "signed-with-another-secret",
        lambda now: forge(header(), claims(now), key=b"another-secret-of-thirty-two-bytes!!"),
        "bad signature",
    ),
    ("signature-zeroed", lambda now: forge(header(), claims(now), signature=b"\0" * 32), "bad signature"),
    ("signature-trailing-junk", lambda now: _valid_token(now) + "AAAA", "bad signature"),
    ("signature-one-extra-char", lambda now: _valid_token(now) + "A", "bad signature"),
    ("signature-two-extra-chars", lambda now: _valid_token(now) + "AA", "invalid token"),
    ("signature-truncated", lambda now: _valid_token(now)[:-11], "bad signature"),
    ("signature-non-canonical-base64", lambda now: _flip_unused_bits(_valid_token(now)), "invalid token"),
    ("signature-extra-padding", lambda now: _valid_token(now) + "=", "not a compact JWS"),
    ("signature-double-padding", lambda now: _valid_token(now) + "==", "not a compact JWS"),
    ("payload-edited", lambda now: with_claims(_valid_token(now), sid="BBBBBBBBBBBBBBBBBBBBBBBB"), "bad signature"),
    ("non-base64-characters", lambda now: "eyJh$GciOi.J!UzI1NiJ9.sig+nature/", "not a compact JWS"),
    ("base64-shaped-garbage", lambda now: "a.b.c", "unreadable header"),
    ("two-parts", lambda now: ".".join(_valid_token(now).split(".")[:2]), "not a compact JWS"),
    ("four-parts", lambda now: _valid_token(now) + ".AAAA", "not a compact JWS"),
    ("empty-string", lambda now: "", "not a compact JWS"),
    ("whitespace-around", lambda now: f" {_valid_token(now)} ", "not a compact JWS"),
    ("non-ascii", lambda now: _valid_token(now) + "é", "not a compact JWS"),
    ("sess-abc123", lambda now: "sess-abc123", "not a compact JWS"),
    ("token-one-over-the-limit", lambda now: "A" * 2049, "oversized"),
    ("token-1MB", lambda now: _padded(_valid_token(now), 1024 * 1024), "oversized"),
    ("token-8MB", lambda now: _padded(_valid_token(now), 8 * 1024 * 1024), "oversized"),
    ("token-1MB-unparsable", lambda now: "A" * (1024 * 1024 - 4) + ".A.A", "oversized"),
    ("token-8MB-unparsable", lambda now: "A" * (8 * 1024 * 1024 - 4) + ".A.A", "oversized"),
]


def _flip_unused_bits(token: str) -> str:
    """The same signature bytes spelled differently: the last character's unused low bits set."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    assert len(token.rsplit(".", 1)[1]) == 43  # 256 bits: the last character carries 4 unused bits
    flipped = alphabet[alphabet.index(token[-1]) ^ 1]
    assert unb64(token.rsplit(".", 1)[1][:-1] + flipped) == unb64(token.rsplit(".", 1)[1])
    return token[:-1] + flipped


def _padded(token: str, size: int) -> str:
    """A well-formed JWS of ``size`` characters: the valid token with a huge extra claim, re-signed."""
    head, payload, _ = token.split(".")
    body = json.loads(unb64(payload))
    body["pad"] = ""
    overhead = len(forge(json.loads(unb64(head)), body))
    body["pad"] = "x" * ((size - overhead) * 3 // 4)
    return forge(json.loads(unb64(head)), body)


@pytest.mark.parametrize(("build", "reason"), [(b, r) for _, b, r in REJECTIONS], ids=[n for n, _, _ in REJECTIONS])
def test_rejected_with_invalid_token(build: Callable[[int], str], reason: str, monkeypatch: pytest.MonkeyPatch) -> None:
    token = build(int(time.time()))
    if reason == "oversized":  # refused by its size, before the JWS decoder sees it
        monkeypatch.setattr(jwt, "get_unverified_header", _no_decoding)
        monkeypatch.setattr(jwt, "decode", _no_decoding)
    error = refused(keyset().verify_session_token, token)
    assert error.reason == reason
    assert token not in str(error) or token == ""


def _no_decoding(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("an oversized token reached the JWS decoder")


NESTED = b"[" * 100_000 + b"]" * 100_000


def _nested_payload(now: int) -> str:
    return forge(header(), json.dumps(claims(now, exp=now + 60)).encode()[:-1] + b',"n":' + NESTED + b"}")


def _nested_header(now: int) -> str:
    nested = b64(b'{"alg":"HS256","x":' + NESTED + b"}")
    return f"{nested}.{_valid_token(now).split('.', 1)[1]}"


@pytest.mark.parametrize(
    ("build", "reason"),
    [(_nested_payload, "invalid token"), (_nested_header, "unreadable header")],
    ids=["payload-signed-with-our-key", "header"],
)
def test_deeply_nested_json_is_refused_not_crashed(build: Callable[[int], str], reason: str) -> None:
    assert refused(keyset(max_token_length=10**6).verify_session_token, build(int(time.time()))).reason == reason


@pytest.mark.parametrize("kid", [KID, "attacker-key"])
def test_token_signed_by_an_embedded_attacker_jwk_is_refused(kid: str) -> None:
    attacker_secret = b"attacker-secret-of-at-least-32-bytes!!"
    jwk = {"kty": "oct", "k": b64(attacker_secret), "kid": kid, "alg": "HS256"}
    token = forge(
        header(kid=kid, jwk=jwk, jku="https://attacker.example/jwks.json"),
        claims(int(time.time())),
        key=attacker_secret,
    )
    assert refused(keyset().verify_session_token, token).reason == ("bad signature" if kid == KID else "unknown key id")


def test_es256_token_signed_by_an_embedded_attacker_jwk_is_refused() -> None:
    ours = SessionKey.from_private_key(ec.generate_private_key(ec.SECP256R1()), kid="es-1")
    attacker = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(ECAlgorithm.to_jwk(attacker.public_key()))
    token = jwt.encode(
        claims(int(time.time())), attacker, algorithm="ES256", headers={"kid": "es-1", "typ": SESSION_TYP, "jwk": jwk}
    )
    assert refused(KeySet([ours]).verify_session_token, token).reason == "bad signature"


def test_hs256_keyed_with_our_es256_public_pem_is_refused() -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    public_pem = private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    keys = KeySet([SessionKey.from_private_key(private, kid="es-1")])
    token = forge(header(kid="es-1"), claims(int(time.time())), key=public_pem)
    assert refused(keys.verify_session_token, token).reason == "algorithm not allowed for this key"


def test_cache_is_bounded() -> None:
    keys = keyset()
    assert keys._session_cache.maxsize == 100_000
    keys._session_cache.maxsize = 1000
    for _ in range(1050):
        keys.mint_session_token(ttl=60)
    assert len(keys._session_cache) == 1000


# -- key sets, rotation and asymmetric keys -------------------------------------


def _pem(private: Any) -> tuple[bytes, bytes]:
    return (
        private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()),
        private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo),
    )


@pytest.mark.parametrize(
    ("make", "algorithm"),
    [(lambda: ec.generate_private_key(ec.SECP256R1()), "ES256"), (ed25519.Ed25519PrivateKey.generate, "EdDSA")],
    ids=["ES256", "EdDSA"],
)
@pytest.mark.parametrize("form", ["object", "pem-bytes", "pem-text"])
def test_asymmetric_keys_sign_and_verify_only_keys_verify(make: Callable[[], Any], algorithm: str, form: str) -> None:
    private = make()
    private_pem, public_pem = _pem(private)
    if form == "object":
        priv_in, pub_in = private, private.public_key()
    elif form == "pem-bytes":
        priv_in, pub_in = private_pem, public_pem
    else:
        priv_in, pub_in = private_pem.decode(), public_pem.decode()

    signing = SessionKey.from_private_key(priv_in, kid="k1")
    assert (signing.algorithm, signing.can_sign) == (algorithm, True)
    token, minted = KeySet([signing]).mint_session_token(ttl=600)
    head, _ = segments(token)
    assert head == {"alg": algorithm, "kid": "k1", "typ": SESSION_TYP}

    verifying = SessionKey.from_public_key(pub_in, kid="k1")
    assert (verifying.algorithm, verifying.can_sign) == (algorithm, False)
    other_signer = SessionKey.from_secret(SECRET, kid="local")
    assert KeySet([verifying, other_signer]).signer is other_signer  # the first key that can sign
    assert KeySet([verifying, other_signer]).verify_session_token(token) == minted

    verify_only = KeySet([verifying])
    assert verify_only.signer is None
    assert verify_only.verify_session_token(token) == minted
    with pytest.raises(ValueError, match="verify-only"):
        verify_only.mint_session_token(ttl=60)
    with pytest.raises(ValueError, match="verify-only"):
        verify_only.sign_state(minted.session_id, {"a": 1})
    with pytest.raises(ValueError, match="is not a signing key"):
        KeySet([verifying, other_signer], signer="k1")


@pytest.mark.parametrize("curve", [ec.SECP384R1(), ec.SECP521R1(), ec.SECP256K1()], ids=lambda c: c.name)
def test_wrong_curve_is_a_value_error(curve: ec.EllipticCurve) -> None:
    private = ec.generate_private_key(curve)
    with pytest.raises(ValueError, match=f"ES256 needs a P-256 key, not {curve.name}"):
        SessionKey.from_private_key(private, kid="k")
    with pytest.raises(ValueError, match="ES256 needs a P-256 key"):
        SessionKey.from_public_key(_pem(private)[1], kid="k")


def test_rsa_key_is_refused() -> None:
    with pytest.raises(TypeError, match="unsupported key type"):
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        SessionKey.from_private_key(rsa_key, kid="k")  # type: ignore[arg-type]  # the wrong type is the point


@pytest.mark.parametrize("secret", ["", "short", "x" * 31, b"\0" * 31])
def test_short_secret_is_a_value_error_that_says_what_to_do(secret: str | bytes) -> None:
    with pytest.raises(ValueError) as info:
        SessionKey.from_secret(secret)
    assert "at least 32 bytes" in str(info.value)
    assert "secrets.token_urlsafe(32)" in str(info.value)


def test_secret_length_counts_utf8_bytes() -> None:
    assert SessionKey.from_secret("é" * 16).algorithm == "HS256"  # 32 bytes, 16 characters


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: KeySet([]), "at least one key"),
        (lambda: KeySet([SessionKey.from_secret(SECRET, kid="a")] * 2), "share the kid"),
        (lambda: KeySet([SessionKey.from_secret(SECRET, kid="a")], signer="b"), "is not a signing key"),
        (lambda: KeySet.from_secret(SECRET, issuer=""), "issuer and audience"),
        (lambda: KeySet.from_secret(SECRET, audience=""), "issuer and audience"),
        (lambda: SessionKey.from_secret(SECRET, kid=""), "key id"),
        (lambda: SessionKey.from_secret(SECRET, kid="k" * 65), "key id"),
    ],
    ids=["empty", "duplicate-kid", "unknown-signer", "empty-issuer", "empty-audience", "empty-kid", "long-kid"],
)  # fmt: skip
def test_bad_key_configuration_is_a_value_error(build: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


# -- client-held state ---------------------------------------------------------

STATE_HEADER = {"alg": "HS256", "kid": KID, "typ": STATE_TYP}


def test_state_round_trip() -> None:
    keys = keyset()
    state = {"mode": "fast", "lang": "fr", "n": 3, "nested": {"a": [1, 2]}, "unicode": "é✓"}
    token = keys.sign_state(SID, state)
    expected = json.dumps(state, separators=(",", ":"), ensure_ascii=False)
    assert keys.verify_state(SID, token) == expected
    assert keyset().verify_state(SID, token) == expected  # uncached
    head, payload = segments(token)
    assert head == {"alg": "HS256", "kid": KID, "typ": STATE_TYP}
    assert payload == {"sid": SID, "st": state}


@pytest.mark.parametrize("cached", [True, False], ids=["cached", "uncached"])
def test_state_is_bound_to_its_session(cached: bool) -> None:
    minter = keyset()
    token = minter.sign_state(SID, {"mode": "x"})
    verifier = minter if cached else keyset()
    assert (
        refused(verifier.verify_state, "BBBBBBBBBBBBBBBBBBBBBBBB", token).reason == "state belongs to another session"
    )
    assert verifier.verify_state(SID, token) == '{"mode":"x"}'


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (lambda t: with_claims(t, st={"mode": "admin"}), "bad signature"),
        (lambda t: with_claims(t, sid="BBBBBBBBBBBBBBBBBBBBBBBB"), "bad signature"),
        (lambda t: forge(STATE_HEADER, {"sid": SID, "st": {"mode": "x"}}, key=b"y" * 32), "bad signature"),
        (lambda t: forge(header(), {"sid": SID, "st": {}}), "wrong token type"),
        (lambda t: forge(STATE_HEADER, {"sid": SID, "st": "not an object"}), "malformed state claims"),
        (lambda t: forge(STATE_HEADER, {"sid": 1, "st": {}}), "malformed state claims"),
        (lambda t: forge(STATE_HEADER, {"st": {}}), "malformed state claims"),
        (lambda t: keyset().mint_session_token(ttl=60)[0], "wrong token type"),
        (lambda t: t + "=", "not a compact JWS"),
        (lambda t: "", "not a compact JWS"),
        (lambda t: "x" * 4097, "state over the size limit"),
        (lambda t: keyset(max_state_size=100_000).sign_state(SID, {"v": "x" * 5000}), "state over the size limit"),
    ],
    ids=["edited-state", "edited-sid", "other-secret", "session-typ", "st-not-object", "sid-not-string",
         "sid-missing", "a-session-id", "padding", "empty", "oversized", "oversized-and-validly-signed"],
)  # fmt: skip
def test_bad_state_is_invalid_token(build: Callable[[str], str], reason: str) -> None:
    token = build(keyset().sign_state(SID, {"mode": "x"}))
    assert refused(keyset().verify_state, SID, token).reason == reason


def test_sign_state_over_the_limit_is_state_too_large() -> None:
    keys = keyset(max_state_size=300)
    assert keys.verify_state(SID, keys.sign_state(SID, {"v": "x" * 10})) == '{"v":"xxxxxxxxxx"}'
    with pytest.raises(StateTooLarge) as info:
        keys.sign_state(SID, {"v": "x" * 300})
    assert isinstance(info.value, ValueError)
    assert "over the limit of 300" in str(info.value)


@pytest.mark.parametrize(
    "state",
    [{"when": object()}, {"n": float("nan")}, {"n": float("inf")}, {"s": {1, 2}}, {"b": b"bytes"}],
    ids=["object", "nan", "inf", "set", "bytes"],
)
def test_non_json_state_is_a_type_error(state: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="session state must be JSON-serializable"):
        keyset().sign_state(SID, state)


def test_state_carries_no_time_claims_of_its_own() -> None:
    """State lives as long as the session it is bound to: an ``exp`` in it is not checked."""
    token = forge(STATE_HEADER, {"sid": SID, "st": {}, "exp": 1, "nbf": 2**40})
    assert keyset().verify_state(SID, token) == "{}"


# -- reading a token without verifying it, and telling one from a transport session id ---------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda t: "not-a-token", "expected 3 dot-separated parts, found 1"),
        (lambda t: t + ".AAAA", "expected 3 dot-separated parts, found 4"),
        (lambda t: "a.b.c", "not base64url-encoded JSON objects"),
        (lambda t: f"{b64(b'[]')}.{t.split('.', 1)[1]}", "not base64url-encoded JSON objects"),
        (lambda t: f"{t.split('.')[0]}.{b64(b'[1]')}.x", "not base64url-encoded JSON objects"),
        (lambda t: t + "A" * 65_536, "longer than 65536 characters"),
    ],
    ids=["one-part", "four-parts", "not-base64url-json", "header-not-object", "claims-not-object", "too-long"],
)
def test_decode_unverified_says_why_without_quoting_the_token(build: Callable[[str], str], message: str) -> None:
    token = build(keyset().mint_session_token(ttl=60)[0])
    with pytest.raises(ValueError, match=message) as info:
        decode_unverified(token)
    assert token not in str(info.value)


def test_decode_unverified_reads_any_signature() -> None:
    token, minted = keyset().mint_session_token(ttl=60)
    forged = token.rsplit(".", 1)[0] + ".forgedAA"
    assert decode_unverified(forged) == (header(), segments(token)[1])
    assert decode_unverified(forged)[1]["sid"] == minted.session_id


@pytest.mark.parametrize(
    ("session_id", "is_token"),
    [(b"a.b.c", True), (b"e3b0c442-98fc-1c14-9afb-f4c8996fb924", False), (b"a.b", False), (b"a.b.c.d", False)],
)
def test_is_session_token(session_id: bytes, is_token: bool) -> None:
    assert is_session_token(session_id) is is_token
