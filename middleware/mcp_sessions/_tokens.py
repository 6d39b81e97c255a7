"""Session ids and state tokens: compact JWS that any replica verifies without a lookup.

A session id is a JWT (RFC 7519) with the header ``typ`` of
``mcp-session+jwt``; the client-held state is a second JWS bound to the
session's stable id. Verification follows RFC 8725: one algorithm per key,
chosen by the key and never by the token, a required ``typ``, and shape and
size checks before anything is decoded.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

__all__ = [
    "InvalidToken",
    "KeySet",
    "SessionClaims",
    "SessionKey",
    "StateTooLarge",
]

SESSION_TOKEN_TYPE: Final = "mcp-session+jwt"  # noqa: S105 - a JOSE typ, not a secret
STATE_TOKEN_TYPE: Final = "mcp-session-state+jwt"  # noqa: S105
MIN_SECRET_BYTES: Final = 32
DEFAULT_MAX_TOKEN_LENGTH: Final = 2048
DEFAULT_MAX_STATE_SIZE: Final = 4096
MAX_CLOCK_SKEW: Final = 60  # seconds a verifying replica's clock may run behind the minting one's
_SESSION_ID_BYTES: Final = 18  # 144 random bits, 24 URL-safe characters
_SESSION_CACHE_SIZE: Final = 100_000  # verified session ids kept; about 0.6 KB each (docs/performance.md)
_STATE_CACHE_SIZE: Final = 10_000

_JWS_SHAPE: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_JSON: Final = json.JSONDecoder()
# base64url to standard base64 for binascii's strict mode, and every character outside base64url
# (the standard alphabet's own "+" and "/", and "=") to one that mode refuses.
_FROM_BASE64URL: Final = bytes.maketrans(b"-_+/=", b"+/!!!")
_PADDING: Final = {0: b"", 2: b"==", 3: b"="}
# The last character of a canonical base64url segment, by the segment's length modulo 4:
# its unused low bits are zero (2 characters carry 1 byte, 3 carry 2).
_CANONICAL_LAST: Final = {0: None, 2: frozenset("AQgw"), 3: frozenset("AEIMQUYcgkosw048")}
_SESSION_ID_SHAPE: Final = re.compile(r"[A-Za-z0-9_-]{16,128}")
_REQUIRED_CLAIMS: Final = ["iss", "aud", "sid", "iat", "exp"]
_REGISTERED_CLAIMS: Final = frozenset(_REQUIRED_CLAIMS)


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


class SessionKey:
    """One signing or verifying key, pinned to exactly one algorithm.

    Build it with :meth:`from_secret` (HS256), :meth:`from_private_key`
    (ES256 or EdDSA, signs and verifies) or :meth:`from_public_key`
    (verifies only).
    """

    __slots__ = ("algorithm", "kid", "signing_key", "verifying_key")

    def __init__(self, *, kid: str, algorithm: str, signing_key: Any, verifying_key: Any) -> None:
        if not kid or not isinstance(kid, str) or len(kid) > 64:
            raise ValueError("a key id (kid) must be a non-empty string of at most 64 characters")
        self.kid = kid
        """The key id, written in each token's header so that verifiers pick this key."""
        self.algorithm = algorithm
        """The one JWS algorithm this key signs and verifies with: ``HS256``, ``ES256`` or ``EdDSA``."""
        self.signing_key = signing_key
        """The key material that signs (``None`` for a verify-only key)."""
        self.verifying_key = verifying_key
        """The key material that verifies."""

    def __repr__(self) -> str:
        return f"SessionKey(kid={self.kid!r}, algorithm={self.algorithm!r}, can_sign={self.can_sign})"

    @property
    def can_sign(self) -> bool:
        """Whether this key holds the private or secret part, so it can sign as well as verify."""
        return self.signing_key is not None

    @classmethod
    def from_secret(cls, secret: str | bytes, *, kid: str | None = None) -> SessionKey:
        """An HS256 key keyed directly with the secret's bytes (UTF-8 for text).

        Any standard JWT tool given the same secret verifies the tokens.
        Without ``kid`` the key id is derived from a hash of the secret, so
        every replica that shares the secret agrees on it.
        """
        raw = secret.encode() if isinstance(secret, str) else bytes(secret)
        if len(raw) < MIN_SECRET_BYTES:
            raise ValueError(
                f"the session secret must be at least {MIN_SECRET_BYTES} bytes (RFC 7518 §3.2); "
                "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        if kid is None:
            kid = "hs-" + hashlib.sha256(b"mcp-sessions kid\x00" + raw).hexdigest()[:12]
        return cls(kid=kid, algorithm="HS256", signing_key=raw, verifying_key=raw)

    @classmethod
    def from_private_key(cls, key: Any, *, kid: str) -> SessionKey:
        """An ES256 (P-256) or EdDSA (Ed25519) key from a key object or PEM text."""
        if isinstance(key, str | bytes):
            key = load_pem_private_key(key.encode() if isinstance(key, str) else key, password=None)
        algorithm = _asymmetric_algorithm(key)
        return cls(kid=kid, algorithm=algorithm, signing_key=key, verifying_key=key.public_key())

    @classmethod
    def from_public_key(cls, key: Any, *, kid: str) -> SessionKey:
        """A verify-only ES256 or EdDSA key (another replica signs)."""
        if isinstance(key, str | bytes):
            key = load_pem_public_key(key.encode() if isinstance(key, str) else key)
        return cls(kid=kid, algorithm=_asymmetric_algorithm(key), signing_key=None, verifying_key=key)


def _asymmetric_algorithm(key: Any) -> str:
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise ValueError(f"ES256 needs a P-256 key, not {key.curve.name}")
        return "ES256"
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return "EdDSA"
    raise TypeError(f"unsupported key type {type(key).__name__}: use a P-256 or Ed25519 key")


_BASE64URL: Final = re.compile(r"[A-Za-z0-9_-]*={0,2}")
_PAIR_KID: Final = re.compile(r"[!-~]{1,64}")


def _keys_from_config(text: str, source: str) -> list[SessionKey]:
    """Parse ``MCP_SESSIONS_KEYS``-style text; :class:`ValueError` never quotes key material."""
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"{source} is empty: give a JWKS, kid:secret pairs, or @/path/to/a/file holding either")
    if stripped.startswith("@"):
        path = stripped[1:].strip()
        if not path:
            raise ValueError(f"{source}: '@' must be followed by the path of a key file")
        try:
            content = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"{source}: cannot read the key file {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ValueError(f"{source}: the key file {path} is not UTF-8 text") from None
        source = f"{source} (file {path})"
        stripped = content.strip()
        if not stripped:
            raise ValueError(f"{source} is empty: give a JWKS or kid:secret pairs")
    if stripped[0] in "{[":
        return _keys_from_jwks(stripped, source)
    return _keys_from_pairs(stripped, source)


def _keys_from_pairs(text: str, source: str) -> list[SessionKey]:
    keys = []
    entries = [entry.strip() for line in text.splitlines() for entry in line.split(",")]
    for number, entry in enumerate((e for e in entries if e and not e.startswith("#")), start=1):
        kid, colon, secret = entry.partition(":")
        kid, secret = kid.strip(), secret.strip()
        if not colon or not secret:
            raise ValueError(
                f"{source}: entry {number} is not kid:secret (write kid:secret pairs separated by commas, "
                "or a JWKS; a secret cannot contain a comma)"
            )
        if kid and not _PAIR_KID.fullmatch(kid):
            raise ValueError(f"{source}: entry {number} has a kid that is not 1 to 64 visible ASCII characters")
        try:
            keys.append(SessionKey.from_secret(secret, kid=kid or None))
        except ValueError as exc:
            raise ValueError(f"{source}: entry {number}{f' (kid {kid!r})' if kid else ''}: {exc}") from None
    if not keys:
        raise ValueError(f"{source} holds no key: give kid:secret pairs or a JWKS")
    return keys


def _keys_from_jwks(text: str, source: str) -> list[SessionKey]:
    try:
        document = json.loads(text)
    except ValueError as exc:
        line, column = getattr(exc, "lineno", "?"), getattr(exc, "colno", "?")
        raise ValueError(f"{source} is not valid JSON (line {line}, column {column})") from None
    if isinstance(document, dict) and "kty" in document:
        jwks: Any = [document]
    elif isinstance(document, dict):
        jwks = document.get("keys")
    else:
        jwks = document
    if not isinstance(jwks, list) or not jwks:
        raise ValueError(f'{source}: a JWKS is an object {{"keys": [...]}} with at least one key')
    return [_key_from_jwk(jwk, f"{source}: key {number}", source) for number, jwk in enumerate(jwks, start=1)]


def _key_from_jwk(jwk: Any, where: str, source: str) -> SessionKey:
    if not isinstance(jwk, dict):
        raise ValueError(f"{where} is not a JSON object")
    kid = jwk.get("kid")
    if not isinstance(kid, str) or not kid or len(kid) > 64:
        raise ValueError(f"{where} needs a 'kid' of 1 to 64 characters (each key needs its own key id)")
    where = f"{source}: key {kid!r}"
    if jwk.get("use", "sig") != "sig":
        raise ValueError(f"{where}: 'use' must be 'sig'")
    kty = jwk.get("kty")
    expected = {"oct": "HS256", "EC": "ES256", "OKP": "EdDSA"}.get(kty) if isinstance(kty, str) else None
    if expected is None:
        raise ValueError(
            f"{where}: unsupported kty {kty!r}: use 'oct' (HS256), 'EC' with crv P-256 (ES256) "
            "or 'OKP' with crv Ed25519 (EdDSA)"
        )
    if jwk.get("alg", expected) != expected:
        raise ValueError(f"{where}: a {kty!r} key here is {expected}, not {jwk.get('alg')!r}")
    if kty == "oct":
        try:
            return SessionKey.from_secret(_b64url(jwk, "k", where), kid=kid)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    has_private = "d" in jwk
    if kty == "EC":
        if jwk.get("crv") != "P-256":
            raise ValueError(f"{where}: an 'EC' key must have crv 'P-256' (ES256)")
        x, y = _b64url(jwk, "x", where, size=32), _b64url(jwk, "y", where, size=32)
        try:
            public = ec.EllipticCurvePublicNumbers(int.from_bytes(x), int.from_bytes(y), ec.SECP256R1())
            if has_private:
                d = _b64url(jwk, "d", where, size=32)
                private = ec.EllipticCurvePrivateNumbers(int.from_bytes(d), public).private_key()
                return SessionKey.from_private_key(private, kid=kid)
            return SessionKey.from_public_key(public.public_key(), kid=kid)
        except ValueError:
            raise ValueError(
                f"{where}: not a valid P-256 key (x and y must be on the curve, d must match them)"
            ) from None
    if jwk.get("crv") != "Ed25519":
        raise ValueError(f"{where}: an 'OKP' key must have crv 'Ed25519' (EdDSA)")
    x = _b64url(jwk, "x", where, size=32)
    if has_private:
        private_key = ed25519.Ed25519PrivateKey.from_private_bytes(_b64url(jwk, "d", where, size=32))
        if private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw) != x:
            raise ValueError(f"{where}: 'x' is not the public key of 'd'")
        return SessionKey.from_private_key(private_key, kid=kid)
    try:
        return SessionKey.from_public_key(ed25519.Ed25519PublicKey.from_public_bytes(x), kid=kid)
    except ValueError:
        raise ValueError(f"{where}: 'x' is not a valid Ed25519 public key") from None


def _b64url(jwk: dict[str, Any], member: str, where: str, *, size: int | None = None) -> bytes:
    value = jwk.get(member)
    if not isinstance(value, str) or not value or not _BASE64URL.fullmatch(value):
        raise ValueError(f"{where}: '{member}' must be a base64url string")
    try:
        raw = base64.urlsafe_b64decode(value.rstrip("=") + "=" * (-len(value.rstrip("=")) % 4))
    except (binascii.Error, ValueError):
        raise ValueError(f"{where}: '{member}' is not valid base64url") from None
    if size is not None and len(raw) != size:
        raise ValueError(f"{where}: '{member}' must decode to {size} bytes")
    return raw


class _BoundedCache(dict[str, Any]):
    """A dict that forgets its oldest entries past a size (insertion order)."""

    __slots__ = ("maxsize",)

    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def put(self, key: str, value: Any) -> None:
        if len(self) >= self.maxsize:
            for old in list(self)[: self.maxsize // 10 or 1]:
                del self[old]
        self[key] = value


class _HMACSHA256:
    """HMAC-SHA256 (RFC 2104) under one key, its padded key blocks hashed once, not on every token."""

    __slots__ = ("inner", "outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > 64:
            key = hashlib.sha256(key).digest()
        block = key.ljust(64, b"\0")
        self.inner = hashlib.sha256(bytes(byte ^ 0x36 for byte in block))
        self.outer = hashlib.sha256(bytes(byte ^ 0x5C for byte in block))

    def digest(self, message: bytes) -> bytes:
        inner = self.inner.copy()
        inner.update(message)
        outer = self.outer.copy()
        outer.update(inner.digest())
        return outer.digest()


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
        audience: str = "mcp-sessions",
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
        self._session_cache = _BoundedCache(_SESSION_CACHE_SIZE)
        self._state_cache = _BoundedCache(_STATE_CACHE_SIZE)
        self._session_headers = self._hs256_headers(SESSION_TOKEN_TYPE)
        self._state_headers = self._hs256_headers(STATE_TOKEN_TYPE)

    @property
    def keys(self) -> tuple[SessionKey, ...]:
        """Every key of the set, the signer among them, in the order given."""
        return tuple(self._keys.values())

    @classmethod
    def from_secret(cls, secret: str | bytes, **kwargs: Any) -> KeySet:
        """A set of one HS256 key (:meth:`SessionKey.from_secret`); ``kwargs`` go to :class:`KeySet`."""
        return cls([SessionKey.from_secret(secret)], **kwargs)

    @classmethod
    def from_config(
        cls,
        text: str,
        *,
        signer: str | None = None,
        issuer: str = "mcp-sessions",
        audience: str = "mcp-sessions",
        source: str = "MCP_SESSIONS_KEYS",
        **kwargs: Any,
    ) -> KeySet:
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
        keys = _keys_from_config(text, source)
        if signer is not None and not any(key.kid == signer and key.can_sign for key in keys):
            signing = ", ".join(repr(key.kid) for key in keys if key.can_sign) or "none"
            raise ValueError(
                f"{source}: the signer {signer!r} is not a key that can sign here (keys that can sign: {signing})"
            )
        try:
            return cls(keys, signer=signer, issuer=issuer, audience=audience, **kwargs)
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None

    # -- session ids ---------------------------------------------------------

    def mint_session_token(
        self, *, ttl: float, now: float | None = None, extra_claims: Mapping[str, Any] | None = None
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
        cached: SessionClaims | None = self._session_cache.get(token)
        if cached is not None:
            if cached.expires_at + self.leeway <= current:
                raise InvalidToken("expired")
            return cached
        if len(token) > self.max_token_length:
            raise InvalidToken("oversized")
        payload = self._verify_hs256(token, self._session_headers)
        if payload is None or not self._plain_session_claims(payload):
            payload = self._verify(token, SESSION_TOKEN_TYPE, audience=self.audience)
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

    # -- client-held state ---------------------------------------------------

    def sign_state(self, session_id: str, state: Mapping[str, Any]) -> str:
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
            payload = self._verify_hs256(token, self._state_headers)
            if payload is None or not _plain_registered_claims(payload):
                payload = self._verify(token, STATE_TOKEN_TYPE, audience=None)
            owner, state = payload.get("sid"), payload.get("st")
            if not isinstance(owner, str) or not isinstance(state, dict):
                raise InvalidToken("malformed state claims")
            cached = (owner, json.dumps(state, separators=(",", ":"), ensure_ascii=False))
            self._state_cache.put(token, cached)
        if cached[0] != session_id:
            raise InvalidToken("state belongs to another session")
        state_json: str = cached[1]
        return state_json

    # -- JWS -----------------------------------------------------------------

    def _sign(self, payload: dict[str, Any], typ: str) -> str:
        key = self.signer
        if key is None:
            raise ValueError("this KeySet is verify-only: no key in it can sign (add a secret or a private key)")
        return self._jwt.encode(payload, key.signing_key, algorithm=key.algorithm, headers={"kid": key.kid, "typ": typ})

    def _hs256_headers(self, typ: str) -> dict[str, _HMACSHA256]:
        """The header segment each HS256 key writes for ``typ``, exactly as minted, and the key's MAC."""
        headers = {}
        for key in self._keys.values():
            if key.algorithm != "HS256":
                continue
            try:
                token = self._jwt.encode({}, key.verifying_key, algorithm="HS256", headers={"kid": key.kid, "typ": typ})
            except jwt.InvalidKeyError:
                continue  # a secret PyJWT refuses (it looks like a PEM or SSH key): the reference path judges
            headers[token.partition(".")[0]] = _HMACSHA256(key.verifying_key)
        return headers

    def _verify_hs256(self, token: str, headers: Mapping[str, _HMACSHA256]) -> dict[str, Any] | None:
        """The payload of an HS256 token whose header is exactly one we mint, or ``None``.

        ``None`` leaves the token to :meth:`_verify` (PyJWT, the reference),
        which decides it and says why: another header, a segment PyJWT would
        not decode, a payload that is not a JSON object. A token that reaches
        the MAC check with well-formed segments and a wrong MAC is refused
        here, with the reason PyJWT's path gives. Whatever is accepted here,
        the reference accepts with the same payload (tests/unit/test_token_differential.py).
        """
        header, _, rest = token.partition(".")
        mac = headers.get(header)
        if mac is None or not token.isascii():
            return None
        payload_segment, dot, signature = rest.partition(".")
        if not dot:
            return None
        expected = mac.digest(token[: len(token) - len(signature) - 1].encode())
        payload = _strict_base64url(payload_segment)
        if payload is None:
            return None
        if not hmac.compare_digest(base64.urlsafe_b64encode(expected)[:-1].decode(), signature):
            if _strict_base64url(signature) is None:
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

    def _plain_session_claims(self, payload: dict[str, Any]) -> bool:
        """Whether PyJWT's claim checks pass by plain comparison; otherwise the reference path judges."""
        return (
            payload.get("iss") == self.issuer
            and payload.get("aud") == self.audience
            and payload.get("sid") is not None
            and payload.get("iat") is not None
            and payload.get("exp") is not None
            and _plain_registered_claims(payload)
        )

    def _verify(self, token: str, typ: str, *, audience: str | None) -> dict[str, Any]:
        """Check shape, header and signature; the caller has bounded the length."""
        if not _JWS_SHAPE.fullmatch(token):
            raise InvalidToken("not a compact JWS")
        try:
            header = jwt.get_unverified_header(token)
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
        try:
            payload: dict[str, Any] = self._jwt.decode(
                token,
                key.verifying_key,
                algorithms=[key.algorithm],
                audience=audience,
                issuer=self.issuer if audience is not None else None,
                leeway=self.leeway,
                options={
                    "require": _REQUIRED_CLAIMS if audience is not None else [],
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


def _strict_base64url(segment: str) -> bytes | None:
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


def _plain_registered_claims(payload: dict[str, Any]) -> bool:
    """Whether ``sub`` and ``jti``, which PyJWT checks when present, are absent or strings."""
    return isinstance(payload.get("sub", ""), str) and isinstance(payload.get("jti", ""), str)
