"""Keyed digests: stable ids for ids that must never be recorded raw, or keyed raw.

A 2025-era transport session id is a bearer value (whoever holds it speaks in
that session); a host's conversation id is not, but a store key made of it
would let anyone reading the store find the conversation. Both are replaced by
an HMAC-SHA256 under a key derived from the signing key of the
:class:`~mcp_sessions.KeySet`, so every replica sharing the keys computes the
same digest, and nobody without them can compute or reverse one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Final

from cryptography.hazmat.primitives import serialization

from ._keys import SessionKey
from ._tokens import KeySet

_LABEL: Final = b"mcp-sessions id digest\x00"


def derived_key(key: SessionKey, label: bytes) -> bytes:
    """A key for ``label``'s use alone: the HMAC-SHA256 of ``label`` under ``key``'s secret material.

    ``key`` must hold that material (an HS256 secret, or a private key, as its PKCS#8 DER): a verify-only
    key has none. Every process given the same key derives the same key for the same label.
    """
    material = key.signing_key
    if material is None:
        raise ValueError("a derived key needs a key that can sign")
    if not isinstance(material, bytes):
        material = material.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    return hmac.new(material, label, hashlib.sha256).digest()


class IdDigests:
    """Digests of transport session ids, host conversation ids and principals (``user.id``), under one key."""

    __slots__ = ("_key",)

    def __init__(self, keys: KeySet) -> None:
        signer = keys.signer
        if signer is None or signer.signing_key is None:  # a KeySet's signer always holds its signing key
            raise ValueError("id digests need a KeySet that can sign")
        self._key = derived_key(signer, _LABEL + keys.audience.encode())

    def _digest(self, *parts: bytes) -> str:
        mac = hmac.new(self._key, b"\x00".join(parts), hashlib.sha256).digest()[:18]
        return base64.urlsafe_b64encode(mac).decode()

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
