"""Session ids and state tokens: compact JWS that any replica verifies without a lookup.

A session id is a JWT (RFC 7519) with the header ``typ`` of
``mcp-session+jwt``; the client-held state is a second JWS bound to the
session's stable id. Verification follows RFC 8725: one algorithm per key,
chosen by the key and never by the token, a required ``typ``, and shape and
size checks before anything is decoded.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypedDict, TypeVar, Unpack

import jwt

from ._jws import REQUIRED_CLAIMS, InvalidToken, minted_headers, verified_by_pyjwt, verified_payload
from ._keys import SessionKey, keys_from_config

SESSION_TOKEN_TYPE: Final = "mcp-session+jwt"  # noqa: S105 - a JOSE typ, not a secret
STATE_TOKEN_TYPE: Final = "mcp-session-state+jwt"  # noqa: S105
DEFAULT_MAX_TOKEN_LENGTH: Final = 2048
DEFAULT_MAX_STATE_SIZE: Final = 4096
DEFAULT_AUDIENCE: Final = "mcp-sessions"
"""The audience of a deployment that names none: its sessions are then bound to the endpoint they were minted at."""
MAX_CLOCK_SKEW: Final = 60  # seconds a verifying replica's clock may run behind the minting one's
_SESSION_ID_BYTES: Final = 18  # 144 random bits, 24 URL-safe characters
_SESSION_CACHE_SIZE: Final = 100_000  # verified session ids kept; about 0.6 KB each (docs/performance.md)
_STATE_CACHE_SIZE: Final = 10_000

_SESSION_ID_SHAPE: Final = re.compile(r"[A-Za-z0-9_-]{16,128}")
_REGISTERED_CLAIMS: Final = frozenset(REQUIRED_CLAIMS)

_V = TypeVar("_V")


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


class _BoundedCache(dict[str, _V]):
    """A dict that forgets its oldest entries past a size (insertion order)."""

    __slots__ = ("maxsize",)

    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def put(self, key: str, value: _V) -> None:
        if len(self) >= self.maxsize:
            for old in list(self)[: self.maxsize // 10 or 1]:
                del self[old]
        self[key] = value


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
        self._jwt = jwt.PyJWT()
        self._session_cache: _BoundedCache[SessionClaims] = _BoundedCache(_SESSION_CACHE_SIZE)
        self._state_cache: _BoundedCache[tuple[str, str]] = _BoundedCache(_STATE_CACHE_SIZE)
        self._session_headers = minted_headers(self._jwt, self._keys.values(), SESSION_TOKEN_TYPE)
        self._state_headers = minted_headers(self._jwt, self._keys.values(), STATE_TOKEN_TYPE)

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
        self._session_cache.put(token, claims)
        return token, claims

    def verify_session_token(self, token: str, *, now: float | None = None) -> SessionClaims:
        """The claims of a valid session id; :class:`InvalidToken` for anything else."""
        current = time.time() if now is None else now
        cached = self._session_cache.get(token)
        if cached is not None:
            if cached.expires_at + self.leeway <= current:
                raise InvalidToken("expired")
            return cached
        if len(token) > self.max_token_length:
            raise InvalidToken("oversized")
        payload = self._payload(token, SESSION_TOKEN_TYPE)
        sid, iat, exp, nbf = payload["sid"], payload["iat"], payload["exp"], payload.get("nbf", 0)
        if not isinstance(sid, str) or not _SESSION_ID_SHAPE.fullmatch(sid):
            raise InvalidToken("malformed sid claim")
        # Checked here, against `current`, rather than by PyJWT against its own clock,
        # so that both paths (cached or not) answer the same for the same `now`.
        if type(iat) is not int or type(exp) is not int or type(nbf) is not int:
            raise InvalidToken("iat, exp and nbf must be integers")
        if exp + self.leeway <= current:
            raise InvalidToken("expired")
        # iat and nbf only refuse tokens from the future. Replicas' clocks disagree a little, and a
        # session minted on one that runs ahead is often used at once on one that runs behind.
        skew = self.leeway if self.leeway > MAX_CLOCK_SKEW else MAX_CLOCK_SKEW
        if iat > current + skew or nbf > current + skew:
            raise InvalidToken("not yet valid")
        extra = {k: v for k, v in payload.items() if k not in _REGISTERED_CLAIMS}
        claims = SessionClaims(session_id=sid, issued_at=iat, expires_at=exp, extra=extra)
        self._session_cache.put(token, claims)
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
        self._state_cache.put(token, (session_id, state_json))
        return token

    def verify_state(self, session_id: str, token: str) -> str:
        """The state's JSON text, if ``token`` is valid state of this session."""
        cached = self._state_cache.get(token)
        if cached is None:
            if len(token) > self.max_state_size:
                raise InvalidToken("state over the size limit")
            payload = self._payload(token, STATE_TOKEN_TYPE)
            owner, state = payload.get("sid"), payload.get("st")
            if not isinstance(owner, str) or not isinstance(state, dict):
                raise InvalidToken("malformed state claims")
            cached = (owner, json.dumps(state, separators=(",", ":"), ensure_ascii=False))
            self._state_cache.put(token, cached)
        if cached[0] != session_id:
            raise InvalidToken("state belongs to another session")
        return cached[1]

    def _sign(self, payload: dict[str, object], typ: str) -> str:
        key = self.signer
        if key is None or key.signing_key is None:  # a signer always holds its signing key
            raise ValueError("this KeySet is verify-only: no key in it can sign (add a secret or a private key)")
        return self._jwt.encode(payload, key.signing_key, algorithm=key.algorithm, headers={"kid": key.kid, "typ": typ})

    def _payload(self, token: str, typ: str) -> dict[str, object]:
        """The verified payload of a token whose length is bounded: the direct HS256 check, else PyJWT's."""
        session = typ == SESSION_TOKEN_TYPE
        payload = verified_payload(token, self._session_headers if session else self._state_headers)
        if payload is not None and self._plain_claims(payload, session=session):
            return payload
        return verified_by_pyjwt(
            self._jwt,
            self._keys,
            token,
            typ,
            audience=self.audience if session else None,
            issuer=self.issuer,
            leeway=self.leeway,
        )

    def _plain_claims(self, payload: Mapping[str, object], *, session: bool) -> bool:
        """Whether PyJWT's claim checks pass by plain comparison: ``sub`` and ``jti`` absent or strings, and
        for a session id ``iss`` and ``aud`` ours and every required claim present. Otherwise PyJWT judges."""
        if not isinstance(payload.get("sub", ""), str) or not isinstance(payload.get("jti", ""), str):
            return False
        if not session:
            return True
        return (
            payload.get("iss") == self.issuer
            and payload.get("aud") == self.audience
            and all(payload.get(claim) is not None for claim in ("sid", "iat", "exp"))
        )
