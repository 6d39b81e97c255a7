"""The handle MAC keys, derived from the session key set's secret material, and each kind's keyed MAC."""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from ..tokens import KeySet, SessionKey
from . import _format as fmt

__all__ = ["derive_mac_keys", "kind_macs"]

_MAC_DOMAIN: Final = b"mcp-sessions handle v1\x00"


def _key_material(key: SessionKey) -> bytes | None:
    """The secret bytes a key's handle MAC key is derived from; ``None`` for a verify-only key."""
    if key.signing_key is None:
        return None
    if isinstance(key.signing_key, bytes):
        return key.signing_key
    if isinstance(key.signing_key, ec.EllipticCurvePrivateKey):
        return key.signing_key.private_numbers().private_value.to_bytes(32, "big")
    if isinstance(key.signing_key, ed25519.Ed25519PrivateKey):
        return key.signing_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return None  # pragma: no cover - SessionKey admits no other kind


def derive_mac_keys(keys: KeySet) -> dict[str, tuple[int, bytes]]:
    """Key id to (key hint, handle MAC key) for each key of ``keys`` that holds secret material."""
    mac_keys: dict[str, tuple[int, bytes]] = {}
    for key in keys.keys:
        material = _key_material(key)
        if material is not None:
            mac_keys[key.kid] = (fmt.key_hint(key.kid), fmt.mac_key(material))
    return mac_keys


def kind_macs(
    mac_keys: dict[str, tuple[int, bytes]], audience: str, kind_name: str
) -> dict[str, tuple[int, hmac.HMAC]]:
    """Key id to (key hint, HMAC already fed the domain, the audience and the kind's name) for one kind."""
    prefix = _MAC_DOMAIN + audience.encode() + b"\x00" + kind_name.encode() + b"\x00"
    return {kid: (hint, hmac.new(key, prefix, hashlib.sha256)) for kid, (hint, key) in mac_keys.items()}
