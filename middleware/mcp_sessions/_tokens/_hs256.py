"""The direct HS256 check: a token whose header is exactly one we mint, verified without PyJWT.

PyJWT stays the reference (:meth:`~mcp_sessions.KeySet.verify_session_token`
falls back to it): whatever is accepted here, it accepts with the same
payload, and whatever this cannot decide the same way is left to it
(tests/unit/test_token_differential.py). Pure functions over a token and the
precomputed header segments of a key set.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from typing import Final

import jwt

from ._jws import InvalidToken
from ._keys import SessionKey

__all__ = [
    "minted_headers",
    "plain_registered_claims",
    "plain_session_claims",
    "strict_base64url",
    "verified_payload",
]

_JSON: Final = json.JSONDecoder()
# base64url to standard base64 for binascii's strict mode, and every character outside base64url
# (the standard alphabet's own "+" and "/", and "=") to one that mode refuses.
_FROM_BASE64URL: Final = bytes.maketrans(b"-_+/=", b"+/!!!")
_PADDING: Final = {0: b"", 2: b"==", 3: b"="}
# The last character of a canonical base64url segment, by the segment's length modulo 4:
# its unused low bits are zero (2 characters carry 1 byte, 3 carry 2).
_CANONICAL_LAST: Final = {0: None, 2: frozenset("AQgw"), 3: frozenset("AEIMQUYcgkosw048")}


def minted_headers(pyjwt: jwt.PyJWT, keys: Iterable[SessionKey], typ: str) -> dict[str, hmac.HMAC]:
    """The header segment each HS256 key writes for ``typ``, exactly as minted, and the key's MAC, keyed once."""
    headers = {}
    for key in keys:
        secret = key.verifying_key
        if key.algorithm != "HS256" or not isinstance(secret, bytes):  # an HS256 key's secret is always bytes
            continue
        try:
            token = pyjwt.encode({}, secret, algorithm="HS256", headers={"kid": key.kid, "typ": typ})
        except jwt.InvalidKeyError:
            continue  # a secret PyJWT refuses (it looks like a PEM or SSH key): the reference path judges
        headers[token.partition(".")[0]] = hmac.new(secret, digestmod=hashlib.sha256)
    return headers


def verified_payload(token: str, headers: Mapping[str, hmac.HMAC]) -> dict[str, object] | None:
    """The payload of an HS256 token whose header is exactly one of ``headers``, or ``None``.

    ``None`` leaves the token to PyJWT (the reference), which decides it and
    says why: another header, a segment PyJWT would not decode, a payload
    that is not a JSON object. A token that reaches the MAC check with
    well-formed segments and a wrong MAC is refused here, with the reason
    PyJWT's path gives.
    """
    header, _, rest = token.partition(".")
    mac = headers.get(header)
    if mac is None or not token.isascii():
        return None
    payload_segment, dot, signature = rest.partition(".")
    if not dot:
        return None
    signed = mac.copy()
    signed.update(token[: len(token) - len(signature) - 1].encode())
    expected = signed.digest()
    payload = strict_base64url(payload_segment)
    if payload is None:
        return None
    if not hmac.compare_digest(base64.urlsafe_b64encode(expected)[:-1].decode(), signature):
        if strict_base64url(signature) is None:
            return None
        raise InvalidToken("bad signature")
    try:
        # PyJWT runs json.loads on the bytes; for text that is strict UTF-8 (anything else is left
        # to it) and a JSON object, that detects UTF-8 and yields the same object as this does.
        text = payload.decode()
        # Minted payloads start with "{"; raw_decode then reading to the end is json.loads minus the
        # whitespace it allows around the value, which this leaves to PyJWT.
        claims, end = _JSON.raw_decode(text) if text[:1] == "{" else (None, 0)
    except (ValueError, RecursionError):
        return None
    return claims if end == len(text) and isinstance(claims, dict) else None


def plain_session_claims(payload: Mapping[str, object], *, issuer: str, audience: str) -> bool:
    """Whether PyJWT's claim checks on a session id pass by plain comparison; otherwise the reference judges."""
    return (
        payload.get("iss") == issuer
        and payload.get("aud") == audience
        and payload.get("sid") is not None
        and payload.get("iat") is not None
        and payload.get("exp") is not None
        and plain_registered_claims(payload)
    )


def plain_registered_claims(payload: Mapping[str, object]) -> bool:
    """Whether ``sub`` and ``jti``, which PyJWT checks when present, are absent or strings."""
    return isinstance(payload.get("sub", ""), str) and isinstance(payload.get("jti", ""), str)


def strict_base64url(segment: str) -> bytes | None:
    """The bytes of a base64url segment as PyJWT decodes one without padding; ``None`` where PyJWT refuses.

    Non-empty, the URL-safe alphabet only, no ``=``, not one character over a
    multiple of four, and canonical (the unused bits of the last character are
    zero, so the segment re-encodes to itself). ``segment`` is ASCII.
    """
    remainder = len(segment) % 4
    if remainder == 1 or not segment:
        return None
    last = _CANONICAL_LAST[remainder]
    if last is not None and segment[-1] not in last:
        return None
    try:
        return binascii.a2b_base64(segment.encode().translate(_FROM_BASE64URL) + _PADDING[remainder], strict_mode=True)
    except binascii.Error:
        return None
