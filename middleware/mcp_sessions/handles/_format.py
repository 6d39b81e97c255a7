"""The handle format: ``<prefix>_<35 base64url characters>``, at most 40 characters in all.

The 35 characters carry 26 bytes (the last character's two low bits are zero):

====== ======= ==============================================================
bytes  bits    content
====== ======= ==============================================================
0-9    80      random (CSPRNG), the source of the stable id
10     2       format version (``01``)
10     1       tied to a session (the store holds the link)
10     1       bound to a principal (the MAC covers the principal's digest)
10     4       key hint: which key of the key set made the MAC
11-14  32      expiry, Unix seconds, big-endian
15-25  88      truncated HMAC-SHA256 over the kind, the bytes above and the principal digest
====== ======= ==============================================================

Bytes 10-14 are sent XORed with a hash of the random part, so that two
handles minted in the same second differ everywhere: a model juggling several
never sees two that look alike.

Nothing here does I/O: parsing, minting and MAC checks are pure functions.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import struct
from typing import Final, NamedTuple

VERSION: Final = 1
PAYLOAD_BYTES: Final = 26
PAYLOAD_CHARS: Final = 35
RANDOM_BYTES: Final = 10
MAC_BYTES: Final = 11
MAX_PREFIX_CHARS: Final = 4
MAX_HANDLE_CHARS: Final = MAX_PREFIX_CHARS + 1 + PAYLOAD_CHARS
SESSION_FLAG: Final = 0x20
PRINCIPAL_FLAG: Final = 0x10
HINT_MASK: Final = 0x0F
MAX_EXPIRY: Final = 2**32 - 1

# 26 bytes are 208 bits; 35 characters hold 210: the last one must leave its two low bits at zero,
# so that exactly one string encodes each payload.
LAST_CHARS: Final = "AEIMQUYcgkosw048"
PAYLOAD_PATTERN: Final = f"[A-Za-z0-9_-]{{{PAYLOAD_CHARS - 1}}}[{LAST_CHARS}]"
PREFIX_SHAPE: Final = re.compile(r"[a-z][a-z0-9]{0,3}")
_PAYLOAD_SHAPE: Final = re.compile(PAYLOAD_PATTERN)
_HEADER: Final = struct.Struct(">BI")
_DERIVE_DOMAIN: Final = b"mcp-sessions handle id and mask\x00"
_MAC_KEY_DOMAIN: Final = b"mcp-sessions handle mac key v1\x00"
_HINT_DOMAIN: Final = b"mcp-sessions handle key hint\x00"
_FIELDS: Final = slice(RANDOM_BYTES, RANDOM_BYTES + _HEADER.size)


class Payload(NamedTuple):
    """The decoded fields of a handle's payload (not yet authenticated)."""

    version: int
    flags: int
    hint: int
    expires_at: int
    random: bytes
    mac: bytes
    signed: bytes  # the bytes the MAC covers, after the kind: random, header, expiry
    handle_id: str

    @property
    def session_bound(self) -> bool:
        return bool(self.flags & SESSION_FLAG)

    @property
    def principal_bound(self) -> bool:
        return bool(self.flags & PRINCIPAL_FLAG)


def pattern(prefix: str) -> str:
    """The JSON Schema (ECMA 262) ``pattern`` every handle of ``prefix`` matches."""
    return f"^{prefix}_{PAYLOAD_PATTERN}$"


def mac_key(material: bytes) -> bytes:
    """The handle MAC key derived from a signing key's secret material (HKDF-style extract)."""
    return hmac.new(material, _MAC_KEY_DOMAIN, hashlib.sha256).digest()


def key_hint(kid: str) -> int:
    """Four bits naming a key by its kid; keys that share a hint are all tried."""
    return hashlib.sha256(_HINT_DOMAIN + kid.encode("utf-8", "surrogatepass")).digest()[0] & HINT_MASK


def _derive(random: bytes) -> tuple[int, str]:
    """The mask of bytes 10-14 and the stable id, both one-way functions of the random part."""
    digest = hashlib.sha256(_DERIVE_DOMAIN + random).digest()
    return int.from_bytes(digest[:5]), base64.urlsafe_b64encode(digest[5:17]).decode()


def stable_id(random: bytes) -> str:
    """The handle's stable id: a one-way function of its random part, safe to log and to key storage by."""
    return _derive(random)[1]


def mac(base: hmac.HMAC, signed: bytes, principal: str | None) -> bytes:
    """The truncated MAC; ``base`` is the kind's HMAC already fed the domain, audience and kind."""
    h = base.copy()
    h.update(signed)
    if principal is not None:
        h.update(b"\x00" + principal.encode("utf-8", "surrogatepass"))
    return h.digest()[:MAC_BYTES]


def pack(*, flags: int, hint: int, expires_at: int, random: bytes | None = None) -> bytes:
    """The signed bytes of a new payload (random, header, expiry); add the MAC to finish it."""
    if not 0 < expires_at <= MAX_EXPIRY:
        raise ValueError("a handle's expiry must fit in 32 bits of Unix seconds")
    header = (VERSION << 6) | (flags & (SESSION_FLAG | PRINCIPAL_FLAG)) | (hint & HINT_MASK)
    random = secrets.token_bytes(RANDOM_BYTES) if random is None else random
    return random + _HEADER.pack(header, expires_at)


def encode(prefix: str, signed: bytes, tag: bytes) -> str:
    """The handle string for signed bytes (from :func:`pack`) and their MAC."""
    random = signed[:RANDOM_BYTES]
    masked = (int.from_bytes(signed[_FIELDS]) ^ _derive(random)[0]).to_bytes(_HEADER.size)
    wire = random + masked + tag
    return f"{prefix}_{base64.urlsafe_b64encode(wire).rstrip(b'=').decode()}"


def decode(payload: str) -> Payload | None:
    """The fields of a payload string, or ``None`` when it is not exactly one canonical payload."""
    if len(payload) != PAYLOAD_CHARS or not _PAYLOAD_SHAPE.fullmatch(payload):
        return None
    # The shape check leaves nothing a decoder could refuse or skip.
    raw = binascii.a2b_base64(payload.replace("-", "+").replace("_", "/") + "=")
    random = raw[:RANDOM_BYTES]
    mask, handle_id = _derive(random)
    fields = (int.from_bytes(raw[_FIELDS]) ^ mask).to_bytes(_HEADER.size)
    header, expires_at = _HEADER.unpack(fields)
    return Payload(
        header >> 6,
        header & (SESSION_FLAG | PRINCIPAL_FLAG),
        header & HINT_MASK,
        expires_at,
        random,
        raw[PAYLOAD_BYTES - MAC_BYTES :],
        random + fields,
        handle_id,
    )
