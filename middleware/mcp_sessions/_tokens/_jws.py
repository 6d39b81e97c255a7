"""Compact JWS verified two ways, with RFC 8725's checks; the one verification error.

PyJWT is the reference. The direct HS256 check reads only a token whose header
is exactly one we mint: whatever it accepts, PyJWT accepts with the same
payload, and whatever it cannot decide the same way it leaves to PyJWT
(tests/unit/test_token_differential.py). Every failure is an
:class:`InvalidToken` whose ``reason`` is safe to log.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping
from typing import Final

import jwt

from ._keys import SessionKey

REQUIRED_CLAIMS: Final = ["iss", "aud", "sid", "iat", "exp"]
_SHAPE: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_JSON: Final = json.JSONDecoder()
# base64url to standard base64 for binascii's strict mode, and every character outside base64url
# (the standard alphabet's own "+" and "/", and "=") to one that mode refuses.
_FROM_BASE64URL: Final = bytes.maketrans(b"-_+/=", b"+/!!!")
_PADDING: Final = (b"", b"", b"==", b"=")  # by the segment's length modulo 4
# The last character of a canonical segment, by its length modulo 4: its unused low bits are zero.
_CANONICAL_LAST: Final = ("", "", "AQgw", "AEIMQUYcgkosw048")


class InvalidToken(Exception):
    """A session or state token failed verification.

    ``reason`` says why, in words safe to log: it never contains the token.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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


def _decoded(segment: str) -> bytes | None:
    """The bytes of a base64url segment as PyJWT decodes one without padding; ``None`` where PyJWT refuses.

    Non-empty, the URL-safe alphabet only, no ``=``, not one character over a
    multiple of four, and canonical (the unused bits of the last character are
    zero, so the segment re-encodes to itself). ``segment`` is ASCII.
    """
    remainder = len(segment) % 4
    if remainder == 1 or not segment or (remainder and segment[-1] not in _CANONICAL_LAST[remainder]):
        return None
    try:
        return binascii.a2b_base64(segment.encode().translate(_FROM_BASE64URL) + _PADDING[remainder], strict_mode=True)
    except binascii.Error:
        return None


def _encoded(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def verified_payload(token: str, headers: Mapping[str, hmac.HMAC]) -> dict[str, object] | None:
    """The payload of an HS256 token whose header is exactly one of ``headers``, or ``None``.

    ``None`` leaves the token to PyJWT, which decides it and says why: another
    header, a segment it would decode differently, a payload that is not a
    plain JSON object. A well-formed token with a wrong MAC is refused here,
    with the reason PyJWT's path gives.
    """
    header, _, rest = token.partition(".")
    mac = headers.get(header)
    if mac is None or not token.isascii():
        return None
    payload_segment, _, signature = rest.partition(".")
    payload = _decoded(payload_segment)
    if payload is None or payload[:1] != b"{":  # minted payloads start with "{": whitespace is left to PyJWT
        return None
    signed = mac.copy()
    signed.update(token[: len(token) - len(signature) - 1].encode())
    if not hmac.compare_digest(_encoded(signed.digest()), signature):
        if _decoded(signature) is None:
            return None
        raise InvalidToken("bad signature")
    try:
        # PyJWT runs json.loads on the bytes: for strict UTF-8 (anything else is left to it) holding one
        # JSON object and nothing after it, that is this object.
        text = payload.decode()
        claims, end = _JSON.raw_decode(text)
    except (ValueError, RecursionError):
        return None
    return claims if end == len(text) else None


def verified_by_pyjwt(
    pyjwt: jwt.PyJWT,
    keys: Mapping[str, SessionKey],
    token: str,
    typ: str,
    *,
    audience: str | None,
    issuer: str,
    leeway: float,
) -> dict[str, object]:
    """The payload of ``token``: shape, header (``kid``, ``alg``, ``typ``) and signature checked by PyJWT.

    With an ``audience`` (a session id), ``iss``, ``aud`` and the required
    claims are checked too. Time claims are left to the caller, and so is the
    length bound.
    """
    key = _header_key(keys, token, typ)
    session = audience is not None
    try:
        payload: dict[str, object] = pyjwt.decode(
            token,
            key.verifying_key,
            algorithms=[key.algorithm],
            audience=audience,
            issuer=issuer if session else None,
            leeway=leeway,
            options={
                "require": REQUIRED_CLAIMS if session else [],
                "verify_aud": session,
                "verify_iss": session,
                # Time claims are checked by the caller, against its own `now`.
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
            },
        )
    except jwt.InvalidSignatureError:
        raise InvalidToken("bad signature") from None
    except jwt.InvalidAudienceError:
        raise InvalidToken("wrong audience") from None
    except jwt.InvalidIssuerError:
        raise InvalidToken("wrong issuer") from None
    except jwt.MissingRequiredClaimError as exc:
        raise InvalidToken(f"missing claim {exc.claim}") from None
    except Exception:
        # PyJWT raises more than InvalidTokenError (binascii, ValueError, TypeError
        # on hostile claims): every failure is a rejected token, never a 500.
        raise InvalidToken("invalid token") from None
    return payload


def _header_key(keys: Mapping[str, SessionKey], token: str, typ: str) -> SessionKey:
    """The key that may verify ``token``: its shape and its header's ``kid``, ``alg`` and ``typ`` checked."""
    if not _SHAPE.fullmatch(token):
        raise InvalidToken("not a compact JWS")
    try:
        header = jwt.get_unverified_header(token)
    except Exception:
        raise InvalidToken("unreadable header") from None
    kid = header.get("kid")
    key = keys.get(kid) if isinstance(kid, str) else None
    if key is None:
        raise InvalidToken("unknown key id")
    if header.get("alg") != key.algorithm:
        raise InvalidToken("algorithm not allowed for this key")
    if header.get("typ") != typ:
        raise InvalidToken("wrong token type")
    return key
