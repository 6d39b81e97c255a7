"""Signing keys: one key pinned to one algorithm, and keys read from configuration.

A :class:`SessionKey` is an HS256 secret, or an ES256 (P-256) or EdDSA
(Ed25519) key, signing or verify-only. ``MCP_SESSIONS_KEYS``-style text (a
JWKS, ``kid:secret`` pairs, or ``@/path`` to a file holding either) becomes a
list of them; its errors name their source and the entry at fault, and never
quote a secret, a key file's path or a pair's kid (after a comma inside a secret,
the rest reads as a kid).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final, TypeAlias, cast

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

MIN_SECRET_BYTES: Final = 32

PrivateKey: TypeAlias = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
"""The asymmetric keys that sign: P-256 (ES256) or Ed25519 (EdDSA)."""
PublicKey: TypeAlias = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey
"""The asymmetric keys that only verify."""


class SessionKey:
    """One signing or verifying key, pinned to exactly one algorithm.

    Build it with :meth:`from_secret` (HS256), :meth:`from_private_key`
    (ES256 or EdDSA, signs and verifies) or :meth:`from_public_key`
    (verifies only).
    """

    __slots__ = ("algorithm", "kid", "signing_key", "verifying_key")

    def __init__(
        self, *, kid: str, algorithm: str, signing_key: bytes | PrivateKey | None, verifying_key: bytes | PublicKey
    ) -> None:
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
    def from_private_key(cls, key: str | bytes | PrivateKey, *, kid: str) -> SessionKey:
        """An ES256 (P-256) or EdDSA (Ed25519) key from a key object or PEM text."""
        if isinstance(key, str | bytes):
            key = cast(PrivateKey, load_pem_private_key(_pem(key), password=None))  # its type is checked next
        return cls(kid=kid, algorithm=_asymmetric_algorithm(key), signing_key=key, verifying_key=key.public_key())

    @classmethod
    def from_public_key(cls, key: str | bytes | PublicKey, *, kid: str) -> SessionKey:
        """A verify-only ES256 or EdDSA key (another replica signs)."""
        if isinstance(key, str | bytes):
            key = cast(PublicKey, load_pem_public_key(_pem(key)))  # its type is checked next
        return cls(kid=kid, algorithm=_asymmetric_algorithm(key), signing_key=None, verifying_key=key)


def _pem(key: str | bytes) -> bytes:
    return key.encode() if isinstance(key, str) else key


def _asymmetric_algorithm(key: object) -> str:
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise ValueError(f"ES256 needs a P-256 key, not {key.curve.name}")
        return "ES256"
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return "EdDSA"
    raise TypeError(f"unsupported key type {type(key).__name__}: use a P-256 or Ed25519 key")


_BASE64URL: Final = re.compile(r"[A-Za-z0-9_-]*={0,2}")
_PAIR_KID: Final = re.compile(r"[!-~]{1,64}")


def keys_from_config(text: str, source: str) -> list[SessionKey]:
    """Parse ``MCP_SESSIONS_KEYS``-style text; a :class:`ValueError` says where, never quoting key material.

    ``@path`` names a key file only when it holds no ``:``; with one, as in ``@k2026:<secret>``, it is
    ``kid:secret`` pairs whose first kid starts with ``@``.
    """
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"{source} is empty: give a JWKS, kid:secret pairs, or @/path/to/a/file holding either")
    if stripped.startswith("@") and ":" not in stripped:
        stripped = _read_key_file(stripped[1:].strip(), source)
        source = f"{source} (its key file)"
        if not stripped:
            raise ValueError(f"{source} is empty: give a JWKS or kid:secret pairs")
    if stripped[0] in "{[":
        return _keys_from_jwks(stripped, source)
    return _keys_from_pairs(stripped, source)


def _read_key_file(path: str, source: str) -> str:
    """The key file's text, stripped; the messages leave out the path (a mistyped value may be a secret)."""
    if not path:
        raise ValueError(f"{source}: '@' must be followed by the path of a key file")
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(
            f"{source}: cannot read the key file named after '@' ({exc.strerror or type(exc).__name__}): "
            "check the path, and that the service may read it"
        ) from None
    except UnicodeDecodeError:
        raise ValueError(f"{source}: the key file named after '@' is not UTF-8 text") from None


def _keys_from_pairs(text: str, source: str) -> list[SessionKey]:
    """HS256 keys from ``kid:secret`` entries; a message names an entry by its position, never by its kid.

    A secret that holds a comma is split there, and the piece after it reads as an entry whose
    "kid" is part of the secret.
    """
    keys = []
    numbers: dict[str, int] = {}
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
            key = SessionKey.from_secret(secret, kid=kid or None)
        except ValueError as exc:
            raise ValueError(f"{source}: entry {number}: {exc}") from None
        if key.kid in numbers:
            raise ValueError(f"{source}: entries {numbers[key.kid]} and {number} have the same kid: give each its own")
        numbers[key.kid] = number
        keys.append(key)
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
        jwks: object = [document]
    elif isinstance(document, dict):
        jwks = document.get("keys")
    else:
        jwks = document
    if not isinstance(jwks, list) or not jwks:
        raise ValueError(f'{source}: a JWKS is an object {{"keys": [...]}} with at least one key')
    return [_key_from_jwk(jwk, f"{source}: key {number}", source) for number, jwk in enumerate(jwks, start=1)]


def _key_from_jwk(jwk: object, where: str, source: str) -> SessionKey:
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


def _b64url(jwk: Mapping[str, object], member: str, where: str, *, size: int | None = None) -> bytes:
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
