"""Compact JWS verified through PyJWT, the reference, with RFC 8725's checks; the one verification error.

Every failure is an :class:`InvalidToken` whose ``reason`` is safe to log. The
direct HS256 check (``_hs256``) gives the same verdicts and reasons for the
tokens it decides.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

import jwt

from ._keys import SessionKey

__all__ = ["REQUIRED_CLAIMS", "InvalidToken", "verified_by_pyjwt"]

REQUIRED_CLAIMS: Final = ["iss", "aud", "sid", "iat", "exp"]
_SHAPE: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


class InvalidToken(Exception):
    """A session or state token failed verification.

    ``reason`` says why, in words safe to log: it never contains the token.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
    """The payload of ``token``: shape, header (``kid``, ``alg``, ``typ``) and signature checked.

    With an ``audience`` (a session id), ``iss``, ``aud`` and the required
    claims are checked too. Time claims are left to the caller, and so is the
    length bound.
    """
    key = _header_key(keys, token, typ)
    try:
        payload: dict[str, object] = pyjwt.decode(
            token,
            key.verifying_key,
            algorithms=[key.algorithm],
            audience=audience,
            issuer=issuer if audience is not None else None,
            leeway=leeway,
            options={
                "require": REQUIRED_CLAIMS if audience is not None else [],
                "verify_aud": audience is not None,
                "verify_iss": audience is not None,
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
