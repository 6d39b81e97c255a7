"""The ids of 2025-era transport sessions the gateway gives clients: which replica issued one, and signed.

A transport session lives in the memory of the replica that minted it, so the client gets the upstream's id
with the issuing replica's tag in front, and a MAC behind: ``TAG~ID~MAC``. The MAC is HMAC-SHA256 over
everything before it, cut to 16 bytes (22 base64url characters), under a key derived from the deployment's
session keys (its ``KeySet``, with its audience): every gateway given the same keys signs and accepts the
same ids, and nothing else can make one. An upstream id that is not visible ASCII, or holds a dot, travels
base64url-encoded, ``TAG!B64~MAC``: the gateway's ids are visible ASCII, never hold a dot (a session
token's JWT shape has two), and are at most 256 characters (the bound the session pipeline and the spec's
examples use), so an upstream id of at most 224 characters (168 bytes encoded) fits.

An id is signed by the key set's signer and accepted under any of its keys that can sign (a rotation adds
the new key everywhere first). Checking is constant-time (``hmac.compare_digest``) and bounded in length
before any MAC is computed; an id that does not verify names no replica, as one the gateway never gave out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Final

from .._tokens import KeySet, derived_key

TAG_LENGTH: Final = 8
MAX_ID: Final = 256
"""The longest id the gateway gives a client or accepts from one."""
_PLAIN: Final = b"~"  # after the tag: the upstream's id as it is
_ENCODED: Final = b"!"  # after the tag: the upstream's id base64url-encoded
_MAC_SEPARATOR: Final = b"~"
_MAC_BYTES: Final = 16
_MAC_LENGTH: Final = 22  # base64url of 16 bytes, unpadded
_OVERHEAD: Final = TAG_LENGTH + 1 + 1 + _MAC_LENGTH
MAX_UPSTREAM_ID: Final = MAX_ID - _OVERHEAD
"""The longest upstream id the gateway can carry as it is (224): an encoded one must fit in as many characters."""
_LABEL: Final = b"mcp-sessions gateway transport session id\x00"


class TransportIds:
    """Signs the transport session ids replicas issue, for clients, and checks those clients send back."""

    def __init__(self, keys: KeySet) -> None:
        label = _LABEL + keys.audience.encode()
        if keys.signer is None:
            raise ValueError("the gateway signs transport session ids: give it a key that can sign")
        self._signing = derived_key(keys.signer, label)
        others = (derived_key(key, label) for key in keys.keys if key.can_sign and key is not keys.signer)
        self._checking = (self._signing, *others)

    def sign(self, tag: bytes, upstream_id: bytes) -> bytes | None:
        """The id a client gets for ``upstream_id``, issued by the replica tagged ``tag``; ``None`` if too long."""
        if b"." not in upstream_id and all(0x21 <= octet <= 0x7E for octet in upstream_id):
            signed = tag + _PLAIN + upstream_id
        else:
            signed = tag + _ENCODED + base64.urlsafe_b64encode(upstream_id).rstrip(b"=")
        if not upstream_id or len(signed) > MAX_ID - len(_MAC_SEPARATOR) - _MAC_LENGTH:
            return None
        return signed + _MAC_SEPARATOR + _mac(self._signing, signed)

    def verify(self, client_id: bytes) -> tuple[bytes, bytes] | None:
        """The tag of the replica that issued ``client_id`` and the upstream's own id, if the gateway signed it."""
        if not _OVERHEAD < len(client_id) <= MAX_ID or client_id[-_MAC_LENGTH - 1 : -_MAC_LENGTH] != _MAC_SEPARATOR:
            return None
        signed, mac = client_id[: -_MAC_LENGTH - 1], client_id[-_MAC_LENGTH:]
        if not any(hmac.compare_digest(_mac(key, signed), mac) for key in self._checking):
            return None
        tag, form, upstream_id = signed[:TAG_LENGTH], signed[TAG_LENGTH : TAG_LENGTH + 1], signed[TAG_LENGTH + 1 :]
        if form == _PLAIN:
            return tag, upstream_id
        try:  # the gateway encoded it: decodes, as any id it signed
            return tag, base64.urlsafe_b64decode(upstream_id + b"=" * (-len(upstream_id) % 4))
        except (binascii.Error, ValueError):
            return None


def _mac(key: bytes, signed: bytes) -> bytes:
    return base64.urlsafe_b64encode(hmac.new(key, signed, hashlib.sha256).digest()[:_MAC_BYTES]).rstrip(b"=")
