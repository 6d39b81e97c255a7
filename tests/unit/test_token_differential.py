"""The direct HS256 check against PyJWT, the reference: the same verdict, the same claims, the same reason.

Every token is judged twice, by a ``KeySet`` as the middleware uses it and by
one whose direct path is switched off (so PyJWT decides everything). Tokens
are real minted ones, mutated: characters flipped, inserted and dropped,
segments swapped, headers rewritten, payloads rewritten and re-signed with
our key under the exact minted header (so the direct path reads them), other
keys, ``alg: none``, padding, non-canonical base64, times in the past, wrong
audiences and issuers, odd claim types, other text encodings; and arbitrary
strings.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_sessions import InvalidToken, KeySet, SessionKey
from mcp_sessions._tokens._jws import verified_payload

NOW = 1_900_000_000
SECRET_A = b"differential-secret-a-0123456789abcdef"
SECRET_B = b"differential-secret-b-0123456789abcdef"
LONG_SECRET = b"a-secret-longer-than-one-sha256-block-" * 3  # HMAC hashes keys over 64 bytes first
OTHER_SECRET = b"a-secret-this-key-set-does-not-hold!!"
SESSION_TYP = "mcp-session+jwt"
STATE_TYP = "mcp-session-state+jwt"
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
EDDSA_KEY = ed25519.Ed25519PrivateKey.generate()
EXAMPLES = settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def make_keys(*, direct: bool, signer: str = "a") -> KeySet:
    keys = KeySet(
        [
            SessionKey.from_secret(SECRET_A, kid="a"),
            SessionKey.from_secret(SECRET_B, kid="b"),
            SessionKey.from_secret(LONG_SECRET, kid="long"),
            SessionKey.from_private_key(EDDSA_KEY, kid="ed"),
        ],
        signer=signer,
    )
    if not direct:
        keys._session_headers = {}
        keys._state_headers = {}
    return keys


SECRETS = {"a": SECRET_A, "b": SECRET_B, "long": LONG_SECRET, "other": OTHER_SECRET}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def sign(header_segment: str, payload: bytes, secret: bytes) -> str:
    signing_input = f"{header_segment}.{b64(payload)}"
    return f"{signing_input}.{b64(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())}"


def header_segment(kid: str, typ: str) -> str:
    """The header exactly as the minting code writes it (PyJWT's encoding)."""
    return jwt.encode({}, SECRETS.get(kid, SECRET_A), algorithm="HS256", headers={"kid": kid, "typ": typ}).split(".")[0]


def outcome(verify: Any) -> tuple[str, Any]:
    try:
        return "accepted", verify()
    except InvalidToken as exc:
        return "rejected", exc.reason


def judge_session(token: str) -> tuple[str, Any]:
    """Both verdicts on a session id, each by a fresh key set (empty caches), asserted equal."""
    direct = outcome(lambda: make_keys(direct=True).verify_session_token(token, now=NOW))
    reference = outcome(lambda: make_keys(direct=False).verify_session_token(token, now=NOW))
    assert direct == reference
    # The direct path on its own: a payload PyJWT agrees with, None, or InvalidToken; nothing else.
    keys = make_keys(direct=True)
    try:
        payload = verified_payload(token, keys._session_headers)
    except InvalidToken:
        assert reference[0] == "rejected"
    else:
        if payload is not None and keys._plain_claims(payload, session=True):
            assert payload == make_keys(direct=False)._payload(token, SESSION_TYP)
    return direct


def judge_state(session_id: str, token: str) -> tuple[str, Any]:
    direct = outcome(lambda: make_keys(direct=True).verify_state(session_id, token))
    reference = outcome(lambda: make_keys(direct=False).verify_state(session_id, token))
    assert direct == reference
    return direct


# -- what to mutate ----------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
claim_values = st.one_of(
    json_values,
    st.sampled_from(
        [
            NOW - 10**6,
            NOW - 1,
            NOW,
            NOW + 1,
            NOW + 59,
            NOW + 61,
            NOW + 10**6,
            2**70,
            -(2**70),
            1.5,
            float("inf"),
            "1900000000",
        ]
    ),
    st.sampled_from(["mcp-sessions", ["mcp-sessions"], ["other", "mcp-sessions"], "", [], ["mcp-sessions", 1]]),
    st.sampled_from(["AAAAAAAAAAAAAAAAAAAAAAAA", "A" * 15, "A" * 16, "A" * 128, "A" * 129, "A/A" * 8, "é" * 20]),
)
claim_names = st.sampled_from(["iss", "aud", "sid", "iat", "exp", "nbf", "sub", "jti", "cnf", "x"])


@st.composite
def minted_session(draw: st.DrawFn) -> str:
    extra = draw(st.dictionaries(st.text(max_size=6), json_values, max_size=3))
    ttl = draw(st.sampled_from([-100, 0, 1, 60, 3600, 10**7]))
    minted_at = draw(st.sampled_from([NOW - 7200, NOW - 60, NOW, NOW + 30, NOW + 3600]))
    signer = draw(st.sampled_from(["a", "b", "long"]))
    return make_keys(direct=True, signer=signer).mint_session_token(ttl=ttl, now=minted_at, extra_claims=extra)[0]


@st.composite
def resigned_payload(draw: st.DrawFn) -> str:
    """New claims under the exact minted header, signed by a key in the set or not: the direct path reads these."""
    claims: dict[str, Any] = {
        "iss": "mcp-sessions",
        "aud": "mcp-sessions",
        "sid": "A" * 24,
        "iat": NOW,
        "exp": NOW + 60,
    }
    for name in draw(st.lists(claim_names, max_size=3)):
        if draw(st.booleans()):
            claims[name] = draw(claim_values)
        else:
            claims.pop(name, None)
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "utf-16", "utf-32"]))
    text = json.dumps(claims, ensure_ascii=draw(st.booleans()))
    payload = draw(
        st.sampled_from([text.encode(encoding), b"[1,2]", b"not json", b"", b"\xff\xfe{}", b'{"a":' * 3 + b"1}}}"])
        if draw(st.integers(0, 9)) == 0
        else st.just(text.encode(encoding))
    )
    kid = draw(st.sampled_from(["a", "a", "b", "long", "other", "ed"]))
    signed_by = draw(st.sampled_from([kid, kid, "other", "a"]))
    typ = draw(st.sampled_from([SESSION_TYP, SESSION_TYP, STATE_TYP]))
    return sign(header_segment(kid, typ), payload, SECRETS.get(signed_by, OTHER_SECRET))


@st.composite
def rewritten_header(draw: st.DrawFn) -> str:
    """A minted token under another header: other alg, kid, typ, members, order or spacing."""
    token = draw(minted_session())
    _, payload, signature = token.split(".")
    header: dict[str, Any] = {"alg": "HS256", "kid": "a", "typ": SESSION_TYP}
    for name in draw(st.lists(st.sampled_from(["alg", "kid", "typ", "jku", "b64", "crit", "x"]), max_size=3)):
        header[name] = draw(
            st.sampled_from(["HS256", "none", "HS512", "ES256", "EdDSA", "a", "b", "ed", "nope", SESSION_TYP, None, 1])
            | json_values
        )
    text = json.dumps(
        header, separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])), sort_keys=draw(st.booleans())
    )
    segment = b64(text.encode())
    if draw(st.booleans()):  # re-sign under the new header, with a key of the set or not
        return sign(segment, unb64(payload), SECRETS[draw(st.sampled_from(["a", "b", "other"]))])
    if header.get("alg") == "none" and draw(st.booleans()):
        return f"{segment}.{payload}."
    return f"{segment}.{payload}.{signature}"


@st.composite
def character_mutation(draw: st.DrawFn) -> str:
    token = draw(minted_session() | resigned_payload())
    for _ in range(draw(st.integers(1, 3))):
        position = draw(st.integers(0, len(token)))
        kind = draw(st.sampled_from(["flip", "insert", "delete"]))
        char = draw(st.sampled_from(ALPHABET) | st.sampled_from(["=", ".", " ", "+", "/", "é", "\0", "\ud800"]))
        if kind == "flip" and position < len(token):
            token = token[:position] + char + token[position + 1 :]
        elif kind == "insert":
            token = token[:position] + char + token[position:]
        else:
            token = token[:position] + token[position + 1 :]
    return token


@st.composite
def segment_mutation(draw: st.DrawFn) -> str:
    first, second = draw(minted_session()), draw(minted_session() | resigned_payload())
    parts, others = first.split("."), second.split(".")
    choice = draw(st.sampled_from(["swap", "mix", "pad", "unused-bits", "drop", "extra", "empty"]))
    if choice == "swap":
        parts = draw(st.permutations(parts))
    elif choice == "mix":
        index = draw(st.integers(0, 2))
        parts[index] = others[index]
    elif choice == "pad":
        index = draw(st.integers(0, 2))
        parts[index] += draw(st.sampled_from(["=", "==", "===", "A", "AA", "AAA", "AAAA"]))
    elif choice == "unused-bits":  # the same bytes spelled differently: non-canonical base64url
        index = draw(st.integers(0, 2))
        if len(parts[index]) % 4 in (2, 3):
            last = ALPHABET.index(parts[index][-1])
            parts[index] = parts[index][:-1] + ALPHABET[last ^ draw(st.sampled_from([1, 2, 3]))]
    elif choice == "drop":
        del parts[draw(st.integers(0, 2))]
    elif choice == "extra":
        parts.insert(draw(st.integers(0, 3)), draw(st.sampled_from(["", "AAAA", others[0]])))
    else:
        parts[draw(st.integers(0, 2))] = ""
    return ".".join(parts)


tokens = st.one_of(
    minted_session(),
    resigned_payload(),
    rewritten_header(),
    character_mutation(),
    segment_mutation(),
    st.text(max_size=60),
    st.text(alphabet=ALPHABET + ".=", max_size=120),
)


@EXAMPLES
@given(tokens)
def test_session_ids_judged_as_pyjwt_judges_them(token: str) -> None:
    judge_session(token)


@EXAMPLES
@given(resigned_payload())
def test_resigned_claims_judged_as_pyjwt_judges_them(token: str) -> None:
    judge_session(token)


@st.composite
def state_tokens(draw: st.DrawFn) -> tuple[str, str]:
    session_id = "A" * 24
    keys = make_keys(direct=True, signer=draw(st.sampled_from(["a", "b", "long"])))
    state = draw(st.dictionaries(st.text(max_size=6), json_values, max_size=3))
    token = keys.sign_state(session_id, state)
    choice = draw(st.sampled_from(["as-signed", "resigned", "flip", "other-session", "session-id"]))
    if choice == "resigned":
        payload: Any = draw(
            st.sampled_from([{"sid": session_id, "st": state}, {"sid": session_id}, {"st": state}, {}])
            | st.fixed_dictionaries({"sid": claim_values, "st": json_values})
        )
        if draw(st.booleans()):
            payload = dict(payload, **{draw(st.sampled_from(["sub", "jti", "aud", "iss", "exp"])): draw(claim_values)})
        typ = draw(st.sampled_from([STATE_TYP, STATE_TYP, SESSION_TYP]))
        token = sign(
            header_segment("a", typ), json.dumps(payload).encode(), SECRETS[draw(st.sampled_from(["a", "other"]))]
        )
    elif choice == "flip":
        position = draw(st.integers(0, len(token) - 1))
        token = token[:position] + draw(st.sampled_from(ALPHABET + ".=")) + token[position + 1 :]
    elif choice == "other-session":
        session_id = "B" * 24
    elif choice == "session-id":
        token = keys.mint_session_token(ttl=60, now=NOW)[0]
    return session_id, token


@EXAMPLES
@given(state_tokens())
def test_state_judged_as_pyjwt_judges_it(case: tuple[str, str]) -> None:
    judge_state(*case)


def test_the_direct_path_reads_minted_tokens() -> None:
    """The generators above reach the direct path: a minted token is accepted there, not by PyJWT."""
    keys = make_keys(direct=True)
    token, claims = make_keys(direct=True).mint_session_token(ttl=60, now=NOW)
    payload = verified_payload(token, keys._session_headers)
    assert payload is not None and payload["sid"] == claims.session_id
    assert keys.verify_session_token(token, now=NOW) == claims
    state = keys.sign_state(claims.session_id, {"k": [1, 2]})
    assert verified_payload(state, keys._state_headers) == {"sid": claims.session_id, "st": {"k": [1, 2]}}


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ({"alg": "HS256", "kid": "a", "typ": SESSION_TYP}, None),  # PyJWT's own order: sorted, no spaces
        ({"typ": SESSION_TYP, "kid": "a", "alg": "HS256"}, None),  # another order: PyJWT judges, and accepts
        ({"alg": "none", "kid": "a", "typ": SESSION_TYP}, "algorithm not allowed for this key"),
        ({"alg": "HS256", "kid": "ed", "typ": SESSION_TYP}, "algorithm not allowed for this key"),
        ({"alg": "HS256", "kid": "b", "typ": SESSION_TYP}, "bad signature"),
    ],
)
def test_only_the_exact_minted_header_takes_the_direct_path(header: dict[str, Any], reason: str | None) -> None:
    keys = make_keys(direct=True)
    minted = keys.mint_session_token(ttl=60, now=NOW)[0]
    segment = b64(json.dumps(header, separators=(",", ":")).encode())
    token = sign(segment, unb64(minted.split(".")[1]), SECRET_A)
    exact = segment == minted.split(".")[0] or segment == header_segment("b", SESSION_TYP)
    assert (segment in keys._session_headers) == exact
    assert judge_session(token) == (
        ("rejected", reason) if reason else ("accepted", keys.verify_session_token(minted, now=NOW))
    )


def test_a_secret_pyjwt_refuses_is_left_to_pyjwt() -> None:
    """PyJWT will not use a secret that looks like a PEM key for HMAC: no direct path for it either."""
    pem_like = b"-----BEGIN PUBLIC KEY-----\nnot really a key, but long enough\n-----END PUBLIC KEY-----"
    keys = KeySet([SessionKey.from_secret(pem_like, kid="pem")])
    assert keys._session_headers == {} and keys._state_headers == {}


@pytest.mark.parametrize(
    ("mutate", "direct"),
    [
        (lambda head, payload, sig: f"{head}.{payload}.{sig}", "accepted"),
        (lambda head, payload, sig: f"{head}.{payload}.{b64(b'x' * 32)}", "bad signature"),  # forged MAC
        (lambda head, payload, sig: f"{head}.{payload}.{sig}AAAA", "bad signature"),  # longer, still well-formed
        (lambda head, payload, sig: f"{head}.{payload}.{sig[:-1]}{ALPHABET[ALPHABET.index(sig[-1]) ^ 1]}", None),
        (lambda head, payload, sig: f"{head}.{payload}.{sig}=", None),  # padding: PyJWT's shape check says why
        (lambda head, payload, sig: f"{head}.{payload}=.{sig}", None),
        (lambda head, payload, sig: f"{head}.{payload}.{sig}.AAAA", None),
        (lambda head, payload, sig: f"{head}.{payload}", None),
        (lambda head, payload, sig: f"{head}..{sig}", None),
    ],
    ids=["as-minted", "forged-mac", "mac-plus-junk", "non-canonical-mac", "padded", "padded-payload", "four-parts",
         "two-parts", "empty-payload"],
)  # fmt: skip
def test_what_the_direct_path_decides_itself(mutate: Any, direct: str | None) -> None:
    """It accepts, refuses a well-formed token with a wrong MAC, or leaves the token to PyJWT (None)."""
    keys = make_keys(direct=True)
    token = mutate(*keys.mint_session_token(ttl=60, now=NOW)[0].split("."))
    try:
        payload = verified_payload(token, keys._session_headers)
    except InvalidToken as exc:
        assert exc.reason == direct
    else:
        assert ("accepted" if payload is not None else None) == direct
    judge_session(token)
