"""Signing keys: one key pinned to one algorithm, keys read from configuration, and keys derived from them.

A :class:`SessionKey` is an HS256 secret, or an ES256 (P-256) or EdDSA
(Ed25519) key, signing or verify-only. ``MCP_SESSIONS_KEYS``-style text (a
JWKS, read by PyJWT's ``PyJWK``, ``kid:secret`` pairs, or ``@/path`` to a file
holding either) becomes a list of them; its errors name their source and the
entry at fault, and never quote a secret, a key file's path or a pair's kid
(after a comma inside a secret, the rest reads as a kid). :class:`IdDigests`
are keyed digests of ids that must never be recorded raw.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from pathlib import Path
from typing import Final, Protocol, TypeAlias, cast

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
    load_pem_public_key,
)
from jwt import PyJWK, PyJWTError

MIN_SECRET_BYTES: Final = 32
_DIGEST_LABEL: Final = b"mcp-sessions id digest\x00"

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
        algorithm = _asymmetric_algorithm(key)
        return cls(kid=kid, algorithm=algorithm, signing_key=key, verifying_key=key.public_key())

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


# The algorithm of each key type, and what its members must be, in words: a JWK PyJWT cannot read is
# refused with these, never with PyJWT's own message (which may quote the key).
_JWK_TYPES: Final = {
    "oct": ("HS256", "'k' is not valid base64url (the secret, at least 32 bytes)"),
    "EC": ("ES256", "not a valid P-256 key: crv 'P-256', x and y (base64url, 32 bytes each) on the curve, d matching"),
    "OKP": ("EdDSA", "not a valid Ed25519 key: crv 'Ed25519', x (base64url, 32 bytes), d matching it"),
}


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
    if not isinstance(kty, str) or kty not in _JWK_TYPES:
        raise ValueError(
            f"{where}: unsupported kty {kty!r}: use 'oct' (HS256), 'EC' with crv P-256 (ES256) "
            "or 'OKP' with crv Ed25519 (EdDSA)"
        )
    algorithm, members = _JWK_TYPES[kty]
    if jwk.get("alg", algorithm) != algorithm:
        raise ValueError(f"{where}: a {kty!r} key here is {algorithm}, not {jwk.get('alg')!r}")
    try:
        key = PyJWK(jwk, algorithm).key
    except (PyJWTError, LookupError, TypeError, ValueError):
        raise ValueError(f"{where}: {members}") from None
    try:
        if isinstance(key, bytes):
            return SessionKey.from_secret(key, kid=kid)
        if isinstance(key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
            return SessionKey.from_private_key(key, kid=kid)
        return SessionKey.from_public_key(key, kid=kid)
    except (TypeError, ValueError) as exc:  # a secret too short, a key on another curve
        raise ValueError(f"{where}: {exc}") from None


def derived_key(key: SessionKey, label: bytes) -> bytes:
    """A key for ``label``'s use alone: the HMAC-SHA256 of ``label`` under ``key``'s secret material.

    ``key`` must hold that material (an HS256 secret, or a private key, as its PKCS#8 DER): a verify-only
    key has none. Every process given the same key derives the same key for the same label.
    """
    material = key.signing_key
    if material is None:
        raise ValueError("a derived key needs a key that can sign")
    if not isinstance(material, bytes):
        material = material.private_bytes(Encoding.DER, PrivateFormat.PKCS8, NoEncryption())
    return hmac.new(material, label, hashlib.sha256).digest()


def keyed_digest(key: bytes, data: bytes) -> str:
    """The HMAC-SHA256 of ``data`` under ``key``, its first 144 bits as 24 base64url characters."""
    return base64.urlsafe_b64encode(hmac.new(key, data, hashlib.sha256).digest()[:18]).decode()


class SigningKeys(Protocol):
    """What :class:`IdDigests` reads of a :class:`~mcp_sessions.KeySet` (``_tokens.py``, which imports this module)."""

    @property
    def signer(self) -> SessionKey | None: ...
    @property
    def audience(self) -> str: ...


class IdDigests:
    """Digests of transport session ids, host conversation ids and principals (``user.id``), under one key.

    A 2025-era transport session id is a bearer value (whoever holds it speaks in that session); a host's
    conversation id is not, but a store key made of it would let anyone reading the store find the
    conversation. Both are replaced by an HMAC-SHA256 under a key derived from the signing key of the
    :class:`~mcp_sessions.KeySet`, so every replica sharing the keys computes the same digest, and nobody
    without them can compute or reverse one.
    """

    def __init__(self, keys: SigningKeys) -> None:
        signer = keys.signer
        if signer is None or signer.signing_key is None:  # a KeySet's signer always holds its signing key
            raise ValueError("id digests need a KeySet that can sign")
        self._key = derived_key(signer, _DIGEST_LABEL + keys.audience.encode())

    def _digest(self, *parts: bytes) -> str:
        return keyed_digest(self._key, b"\x00".join(parts))

    def transport(self, transport_session_id: bytes) -> str:
        """The stable id of a 2025-era transport session: ``ts-`` and 24 characters."""
        return "ts-" + self._digest(b"transport", transport_session_id)

    def user(self, principal: str) -> str:
        """The stable id of an authenticated principal, as a span's ``user.id`` records it: ``u-`` and 24 characters."""
        return "u-" + self._digest(b"user", principal.encode("utf-8", "surrogatepass"))

    def conversation(self, source: str, conversation_id: str, principal: str | None) -> str:
        """The stable id of a host conversation (with ``principal``, of that user's conversation)."""
        parts = [b"conversation", source.encode(), conversation_id.encode()]
        if principal is not None:
            parts.append(principal.encode())
        return "cv-" + self._digest(*parts)
