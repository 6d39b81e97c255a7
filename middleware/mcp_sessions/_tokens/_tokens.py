"""Session ids and state tokens: compact JWS that any replica verifies without a lookup.

A session id is a JWT (RFC 7519) with the header ``typ`` of
``mcp-session+jwt``; the client-held state is a second JWS bound to the
session's stable id. Verification follows RFC 8725: the size and the shape are
checked before anything is decoded, the header's ``kid`` picks the key, the key
pins the one algorithm, ``typ`` is required, and PyJWT checks the signature,
``iss``, ``aud`` and the required claims. The time claims are checked here,
against the caller's ``now``, by the same rule for a token verified now and one
verified earlier (a replica verifies a session once and keeps its claims).
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypedDict, Unpack

import jwt
from jwt.types import Options

from .._bounded import BoundedDict
from ._keys import SessionKey, keys_from_config

SESSION_TOKEN_TYPE: Final = "mcp-session+jwt"  # noqa: S105 - a JOSE typ, not a secret
STATE_TOKEN_TYPE: Final = "mcp-session-state+jwt"  # noqa: S105
DEFAULT_MAX_TOKEN_LENGTH: Final = 2048
DEFAULT_MAX_STATE_SIZE: Final = 4096
DEFAULT_AUDIENCE: Final = "mcp-sessions"
"""The audience of a deployment that names none: its sessions are then bound to the endpoint they were minted at."""
MAX_CLOCK_SKEW: Final = 60  # seconds a verifying replica's clock may run behind the minting one's
MAX_UNVERIFIED_LENGTH: Final = 65_536  # the longest token read without verification (by a client or the CLI)
_SESSION_ID_BYTES: Final = 18  # 144 random bits, 24 URL-safe characters
_SESSION_CACHE_SIZE: Final = 100_000  # verified session ids kept; about 0.6 KB each (docs/performance.md)
_STATE_CACHE_SIZE: Final = 10_000

_REQUIRED_CLAIMS: Final = ("iss", "aud", "sid", "iat", "exp")
_SHAPE: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_SESSION_ID_SHAPE: Final = re.compile(r"[A-Za-z0-9_-]{16,128}")
# What PyJWT checks of a session id; the time claims are checked by KeySet.verify_session_token.
_SESSION_OPTIONS: Final[Options] = {
    "require": list(_REQUIRED_CLAIMS),
    "verify_exp": False,
    "verify_iat": False,
    "verify_nbf": False,
}
_STATE_OPTIONS: Final[Options] = {**_SESSION_OPTIONS, "require": [], "verify_aud": False, "verify_iss": False}


class InvalidToken(Exception):
    """A session or state token failed verification.

    ``reason`` says why, in words safe to log: it never contains the token.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StateTooLarge(ValueError):
    """The application tried to store more client-held state than the limit allows."""


@dataclass(frozen=True, slots=True)
class SessionClaims:
    """The verified content of a session id."""

    session_id: str
    """The stable session id (the ``sid`` claim)."""
    issued_at: int
    """When the token was minted (``iat``), in Unix seconds."""
    expires_at: int
    """When the token expires (``exp``), in Unix seconds."""
    extra: Mapping[str, Any]
    """Every other claim, beyond ``iss``, ``aud``, ``sid``, ``iat`` and ``exp``."""


def is_session_token(session_id: bytes) -> bool:
    """Whether an ``Mcp-Session-Id`` value is shaped as a session token (a JWT: three dot-separated parts),
    not as a server's own transport session id."""
    return session_id.count(b".") == 2


def decode_unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and the claims of a compact JWS, decoded WITHOUT verification: for display, never for trust.

    Anything else is a :class:`ValueError` whose message never quotes the token.
    """
    if len(token) > MAX_UNVERIFIED_LENGTH:
        raise ValueError(f"not a compact JWS: longer than {MAX_UNVERIFIED_LENGTH} characters")
    parts = token.count(".") + 1
    if parts != 3:
        raise ValueError(f"not a compact JWS: expected 3 dot-separated parts, found {parts}")
    try:
        decoded = jwt.decode_complete(token, options={"verify_signature": False})
    except Exception:  # PyJWT raises more than DecodeError on hostile input
        raise ValueError("not a compact JWS: the header or the claims are not base64url-encoded JSON objects") from None
    return decoded["header"], decoded["payload"]


class KeySetOptions(TypedDict, total=False):
    """The keyword arguments of :class:`KeySet` that its two factories pass on."""

    signer: str | None
    issuer: str
    audience: str
    max_token_length: int
    max_state_size: int
    leeway: float


class KeySet:
    """The keys a deployment signs and verifies with.

    One key signs (the ``signer``, by default the first key that can sign);
    every key verifies, chosen by the token's ``kid``. Rotation: add the new
    key everywhere as a verifier, make it the signer, retire the old key once
    the longest session lifetime has passed.
    """

    def __init__(
        self,
        keys: Iterable[SessionKey],
        *,
        signer: str | None = None,
        issuer: str = "mcp-sessions",
        audience: str = DEFAULT_AUDIENCE,
        max_token_length: int = DEFAULT_MAX_TOKEN_LENGTH,
        max_state_size: int = DEFAULT_MAX_STATE_SIZE,
        leeway: float = 0.0,
    ) -> None:
        self._keys: dict[str, SessionKey] = {}
        for key in keys:
            if key.kid in self._keys:
                raise ValueError(f"two keys share the kid {key.kid!r}")
            self._keys[key.kid] = key
        if not self._keys:
            raise ValueError("a KeySet needs at least one key")
        if signer is None:
            # Without any key that can sign, the set is verify-only (a tool such as
            # `mcp-sessions inspect`); the middleware itself refuses one.
            signer = next((k.kid for k in self._keys.values() if k.can_sign), None)
        elif signer not in self._keys or not self._keys[signer].can_sign:
            raise ValueError(f"the signer {signer!r} is not a signing key of this KeySet")
        if not issuer or not audience:
            raise ValueError("issuer and audience must be non-empty strings")
        self.signer: SessionKey | None = None if signer is None else self._keys[signer]
        self.issuer = issuer
        self.audience = audience
        self.max_token_length = max_token_length
        self.max_state_size = max_state_size
        self.leeway = leeway
        self._session_cache: BoundedDict[str, SessionClaims] = BoundedDict(_SESSION_CACHE_SIZE)
        self._state_cache: BoundedDict[str, tuple[str, str]] = BoundedDict(_STATE_CACHE_SIZE)

    @property
    def keys(self) -> tuple[SessionKey, ...]:
        """Every key of the set, the signer among them, in the order given."""
        return tuple(self._keys.values())

    @classmethod
    def from_secret(cls, secret: str | bytes, **kwargs: Unpack[KeySetOptions]) -> KeySet:
        """A set of one HS256 key (:meth:`SessionKey.from_secret`); ``kwargs`` go to :class:`KeySet`."""
        return cls([SessionKey.from_secret(secret)], **kwargs)

    @classmethod
    def from_config(cls, text: str, *, source: str = "MCP_SESSIONS_KEYS", **kwargs: Unpack[KeySetOptions]) -> KeySet:
        """A key set from configuration text, as in ``MCP_SESSIONS_KEYS``.

        ``text`` is one of:

        - a JWKS (RFC 7517): ``{"keys": [...]}``, a JSON list of keys, or one key.
          ``"oct"`` keys (``k``, base64url, at least 32 bytes) are HS256;
          ``"EC"`` keys on ``P-256`` are ES256 and ``"OKP"`` keys on ``Ed25519``
          are EdDSA, signing with ``d`` and verify-only without it. Every key
          needs a ``kid``;
        - ``kid:secret`` pairs separated by commas or newlines (HS256, the
          secret's UTF-8 bytes; ``:secret`` with no kid derives the kid from
          the secret, as ``MCP_SESSIONS_SECRET`` does; lines starting with
          ``#`` are comments);
        - ``@/path/to/file``, a file holding either.

        ``signer`` is the kid that signs (default: the first key that can).
        Errors are :class:`ValueError` naming ``source`` and never quoting key
        material. Other keyword arguments go to the constructor.
        """
        keys = keys_from_config(text, source)
        signer = kwargs.get("signer")
        if signer is not None and not any(key.kid == signer and key.can_sign for key in keys):
            signing = sum(key.can_sign for key in keys)  # counted, not named: a kid may be half a comma-split secret
            raise ValueError(f"{source}: the signer {signer!r} is none of the {signing} keys that can sign here")
        try:
            return cls(keys, **kwargs)
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None

    def mint_session_token(
        self, *, ttl: float, now: float | None = None, extra_claims: Mapping[str, object] | None = None
    ) -> tuple[str, SessionClaims]:
        """A new session id (the token) and its claims."""
        issued_at = int(time.time() if now is None else now)
        claims = SessionClaims(
            session_id=secrets.token_urlsafe(_SESSION_ID_BYTES),
            issued_at=issued_at,
            expires_at=issued_at + int(ttl),
            extra=dict(extra_claims or {}),
        )
        payload = {
            **claims.extra,
            "iss": self.issuer,
            "aud": self.audience,
            "sid": claims.session_id,
            "iat": claims.issued_at,
            "exp": claims.expires_at,
        }
        token = self._sign(payload, SESSION_TOKEN_TYPE)
        self._session_cache[token] = claims
        return token, claims

    def verify_session_token(self, token: str, *, now: float | None = None) -> SessionClaims:
        """The claims of a valid session id; :class:`InvalidToken` for anything else."""
        current = time.time() if now is None else now
        claims = self._session_cache.get(token)
        if claims is None:
            claims = self._verified_session(token, current)
        if claims.expires_at + self.leeway <= current:
            raise InvalidToken("expired")
        return claims

    def _verified_session(self, token: str, current: float) -> SessionClaims:
        """The claims of a session id not verified here before, kept once they verify (expired or not)."""
        if len(token) > self.max_token_length:
            raise InvalidToken("oversized")
        payload = self._decode(token, SESSION_TOKEN_TYPE)
        sid, iat, exp, nbf = payload["sid"], payload["iat"], payload["exp"], payload.get("nbf", 0)
        if not isinstance(sid, str) or not _SESSION_ID_SHAPE.fullmatch(sid):
            raise InvalidToken("malformed sid claim")
        if type(iat) is not int or type(exp) is not int or type(nbf) is not int:
            raise InvalidToken("iat, exp and nbf must be integers")
        # iat and nbf only refuse tokens from the future. Replicas' clocks disagree a little, and a
        # session minted on one that runs ahead is often used at once on one that runs behind.
        skew = max(self.leeway, MAX_CLOCK_SKEW)
        if iat > current + skew or nbf > current + skew:
            raise InvalidToken("not yet valid")
        extra = {k: v for k, v in payload.items() if k not in _REQUIRED_CLAIMS}
        claims = SessionClaims(session_id=sid, issued_at=iat, expires_at=exp, extra=extra)
        self._session_cache[token] = claims
        return claims

    def sign_state(self, session_id: str, state: Mapping[str, object]) -> str:
        """A state token bound to ``session_id``; :class:`StateTooLarge` past the limit."""
        try:
            state_json = json.dumps(state, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"session state must be JSON-serializable: {exc}") from None
        token = self._sign({"sid": session_id, "st": state}, STATE_TOKEN_TYPE)
        if len(token) > self.max_state_size:
            raise StateTooLarge(
                f"the encoded session state is {len(token)} bytes, over the limit of "
                f"{self.max_state_size}: keep large or growing values in session.data (server-side)"
            )
        self._state_cache[token] = (session_id, state_json)
        return token

    def verify_state(self, session_id: str, token: str) -> str:
        """The state's JSON text, if ``token`` is valid state of this session."""
        cached = self._state_cache.get(token)
        if cached is None:
            if len(token) > self.max_state_size:
                raise InvalidToken("state over the size limit")
            payload = self._decode(token, STATE_TOKEN_TYPE)
            owner, state = payload.get("sid"), payload.get("st")
            if not isinstance(owner, str) or not isinstance(state, dict):
                raise InvalidToken("malformed state claims")
            cached = (owner, json.dumps(state, separators=(",", ":"), ensure_ascii=False))
            self._state_cache[token] = cached
        if cached[0] != session_id:
            raise InvalidToken("state belongs to another session")
        return cached[1]

    def _sign(self, payload: dict[str, object], typ: str) -> str:
        key = self.signer
        if key is None or key.signing_key is None:  # a signer always holds its signing key
            raise ValueError("this KeySet is verify-only: no key in it can sign (add a secret or a private key)")
        return jwt.encode(payload, key.signing_key, algorithm=key.algorithm, headers={"kid": key.kid, "typ": typ})

    def _decode(self, token: str, typ: str) -> dict[str, Any]:
        """The payload of a token of type ``typ`` whose length is bounded, verified by the key its header names."""
        if not _SHAPE.fullmatch(token):
            raise InvalidToken("not a compact JWS")
        try:  # the header segment alone: the rest is decoded once, by jwt.decode
            header = jwt.get_unverified_header(token.partition(".")[0] + "..")
        except Exception:
            raise InvalidToken("unreadable header") from None
        kid = header.get("kid")
        key = self._keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise InvalidToken("unknown key id")
        if header.get("alg") != key.algorithm:
            raise InvalidToken("algorithm not allowed for this key")
        if header.get("typ") != typ:
            raise InvalidToken("wrong token type")
        session = typ == SESSION_TOKEN_TYPE
        try:
            payload: dict[str, Any] = jwt.decode(
                token,
                key.verifying_key,
                algorithms=[key.algorithm],
                audience=self.audience if session else None,
                issuer=self.issuer if session else None,
                options=_SESSION_OPTIONS if session else _STATE_OPTIONS,
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
