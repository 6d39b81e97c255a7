"""The handle format and the kinds that use it: the string, its keys and MAC, and the tool parameter it types.

``<prefix>_<35 base64url characters>``: 26 bytes, the random part (the source of the stable id), the
version, flags, key hint and expiry XORed with a hash of the random part (so that handles minted together
look nothing alike to a model), and a truncated HMAC-SHA256; docs/handles.md has the layout. No I/O here: a
typed parameter, validated synchronously, takes only the handles the request's check verified (:data:`REQUEST`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import struct
from contextvars import ContextVar
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from .._tokens import KeySet, SessionKey

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

    from .._session import RateLimit

VERSION: Final = 1
PAYLOAD_BYTES: Final = 26
PAYLOAD_CHARS: Final = 35
RANDOM_BYTES: Final = 10
MAC_BYTES: Final = 11
MAX_PREFIX_CHARS: Final = 4
"""The longest prefix a kind may have."""
MAX_HANDLE_CHARS: Final = MAX_PREFIX_CHARS + 1 + PAYLOAD_CHARS
"""The longest handle string: the longest prefix, ``_`` and the payload."""
SESSION_FLAG: Final = 0x20
PRINCIPAL_FLAG: Final = 0x10
HINT_MASK: Final = 0x0F
MAX_EXPIRY: Final = 2**32 - 1
DEFAULT_TTL: Final = 24 * 3600
MAX_TTL: Final = 10 * 365 * 24 * 3600

# 26 bytes are 208 bits; 35 characters hold 210: the last one must leave its two low bits at zero,
# so that exactly one string encodes each payload.
LAST_CHARS: Final = "AEIMQUYcgkosw048"
PAYLOAD_PATTERN: Final = f"[A-Za-z0-9_-]{{{PAYLOAD_CHARS - 1}}}[{LAST_CHARS}]"
PREFIX_SHAPE: Final = re.compile(r"[a-z][a-z0-9]{0,3}")
_PAYLOAD_SHAPE: Final = re.compile(PAYLOAD_PATTERN)
_HEADER: Final = struct.Struct(">BI")
_FIELDS: Final = slice(RANDOM_BYTES, RANDOM_BYTES + _HEADER.size)
_DERIVE_DOMAIN: Final = b"mcp-sessions handle id and mask\x00"
_MAC_KEY_DOMAIN: Final = b"mcp-sessions handle mac key v1\x00"
_HINT_DOMAIN: Final = b"mcp-sessions handle key hint\x00"
_MAC_DOMAIN: Final = b"mcp-sessions handle v1\x00"

KindMacs = dict[str, tuple[int, hmac.HMAC]]
"""Key id to (key hint, HMAC already fed the domain, the audience and one kind's name)."""


class Payload(NamedTuple):
    """The decoded fields of a handle's payload (not yet authenticated)."""

    version: int
    hint: int
    expires_at: int
    session_bound: bool
    principal_bound: bool
    mac: bytes
    signed: bytes  # what the MAC covers after the kind: the random part and bytes 10-14 unmasked
    handle_id: str


def pattern(prefix: str) -> str:
    """The JSON Schema (ECMA 262) ``pattern`` every handle of ``prefix`` matches."""
    return f"^{prefix}_{PAYLOAD_PATTERN}$"


def mac_keys(keys: KeySet) -> dict[str, tuple[int, bytes]]:
    """Key id to (key hint, handle MAC key) for each key of ``keys`` that holds secret material."""
    derived: dict[str, tuple[int, bytes]] = {}
    for key in keys.keys:
        material = _secret_material(key)
        if material is not None:
            hint = hashlib.sha256(_HINT_DOMAIN + key.kid.encode("utf-8", "surrogatepass")).digest()[0] & HINT_MASK
            derived[key.kid] = (hint, hmac.new(material, _MAC_KEY_DOMAIN, hashlib.sha256).digest())
    return derived


def _secret_material(key: SessionKey) -> bytes | None:
    if isinstance(key.signing_key, bytes):
        return key.signing_key
    if isinstance(key.signing_key, ec.EllipticCurvePrivateKey):
        return key.signing_key.private_numbers().private_value.to_bytes(32, "big")
    if isinstance(key.signing_key, ed25519.Ed25519PrivateKey):
        return key.signing_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return None  # a verify-only key


def kind_macs(keys: dict[str, tuple[int, bytes]], audience: str, kind_name: str) -> KindMacs:
    """One kind's MAC under each key (from :func:`mac_keys`), fed what every handle of the kind shares."""
    prefix = _MAC_DOMAIN + audience.encode() + b"\x00" + kind_name.encode() + b"\x00"
    return {kid: (hint, hmac.new(key, prefix, hashlib.sha256)) for kid, (hint, key) in keys.items()}


def mac(base: hmac.HMAC, signed: bytes, principal: str | None) -> bytes:
    """The truncated MAC of ``signed`` and the principal's digest, if bound; ``base`` is left as it was."""
    h = base.copy()
    h.update(signed)
    if principal is not None:
        h.update(b"\x00" + principal.encode("utf-8", "surrogatepass"))
    return h.digest()[:MAC_BYTES]


def authentic(macs: KindMacs, payload: Payload, principal: str | None) -> bool:
    """Whether a key of the kind made ``payload``'s MAC, for ``principal`` (required) if the handle is bound."""
    if payload.version != VERSION or (payload.principal_bound and principal is None):
        return False
    covered = principal if payload.principal_bound else None
    return any(
        hint == payload.hint and hmac.compare_digest(mac(base, payload.signed, covered), payload.mac)
        for hint, base in macs.values()
    )


def _derive(random: bytes) -> tuple[int, str]:
    """The mask of bytes 10-14 and the stable id, both one-way functions of the random part."""
    digest = hashlib.sha256(_DERIVE_DOMAIN + random).digest()
    return int.from_bytes(digest[:5]), base64.urlsafe_b64encode(digest[5:17]).decode()


def stable_id(signed: bytes) -> str:
    """The stable id of a new handle (its signed bytes): safe to log and to key storage by."""
    return _derive(signed[:RANDOM_BYTES])[1]


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
    return f"{prefix}_{base64.urlsafe_b64encode(random + masked + tag).rstrip(b'=').decode()}"


def decode(payload: str) -> Payload | None:
    """The fields of a payload string, or ``None`` when it is not exactly one canonical payload."""
    if not _PAYLOAD_SHAPE.fullmatch(payload):
        return None
    raw = base64.urlsafe_b64decode(payload + "=")
    random = raw[:RANDOM_BYTES]
    mask, handle_id = _derive(random)
    fields = (int.from_bytes(raw[_FIELDS]) ^ mask).to_bytes(_HEADER.size)
    header, expires_at = _HEADER.unpack(fields)
    session, principal = bool(header & SESSION_FLAG), bool(header & PRINCIPAL_FLAG)
    tag = raw[PAYLOAD_BYTES - MAC_BYTES :]
    return Payload(header >> 6, header & HINT_MASK, expires_at, session, principal, tag, random + fields, handle_id)


def check_ttl(name: str, value: float) -> None:
    """Refuse a lifetime that is not a positive number of seconds up to ten years."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TTL:
        raise ValueError(f"{name} must be a positive number of seconds, at most {MAX_TTL} (ten years)")


class HandleKind:
    """One kind of handle (``basket``): its name, prefix, lifetimes and the tool that creates one.

    Register it with :meth:`Handles.register`. As a tool parameter's metadata, ``Annotated[Handle, basket]``,
    it shows the model a string of its ``pattern`` and gives the tool the verified :class:`Handle`.
    """

    def __init__(
        self,
        name: str,
        *,
        prefix: str,
        ttl: float = DEFAULT_TTL,
        idle_ttl: float | None = None,
        create: str | None = None,
        description: str | None = None,
    ) -> None:
        if not isinstance(name, str) or not name or len(name) > 64 or not name.isprintable():
            raise ValueError("a handle kind's name must be 1 to 64 printable characters")
        if not isinstance(prefix, str) or not PREFIX_SHAPE.fullmatch(prefix):
            raise ValueError(
                f"the prefix {prefix!r} is not 1 to {MAX_PREFIX_CHARS} characters of [a-z0-9] "
                "starting with a letter (it keeps handles within 40 characters)"
            )
        check_ttl("ttl", ttl)
        if idle_ttl is not None:
            check_ttl("idle_ttl", idle_ttl)
        self.name = name
        """The kind's name, unique in its registry."""
        self.prefix = prefix
        """What every handle of the kind starts with, before ``_``: 1 to 4 characters of ``[a-z][a-z0-9]*``."""
        self.ttl = float(ttl)
        """The default lifetime of a handle, in seconds."""
        self.idle_ttl = None if idle_ttl is None else float(idle_ttl)
        """Seconds unused after which a handle ends (``None``: never for being idle)."""
        self.create = create or f"create_{name}"
        """The tool that creates a handle of the kind, which refusals tell the model to call."""
        self.description = description or (
            f"A {name} handle ({prefix}_…) as {self.create} returned it; pass it exactly as returned, "
            f"or call {self.create} for a new one."
        )
        """What the JSON Schema of a typed parameter tells the model."""
        self.pattern = pattern(prefix)
        """The JSON Schema ``pattern`` every handle of the kind matches."""
        self.length = len(prefix) + 1 + PAYLOAD_CHARS
        """The length of every handle of the kind."""

    def __repr__(self) -> str:
        return f"HandleKind({self.name!r}, prefix={self.prefix!r})"

    @property
    def shown(self) -> str:
        """How messages name a handle of this kind: its prefix and an ellipsis."""
        return f"{self.prefix}_…"

    def __get_pydantic_core_schema__(self, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema  # pydantic is asking: the package itself does not need it

        # A string in, redacted for pydantic's error texts, then the verified Handle out; serialized as the string.
        return core_schema.chain_schema(
            [
                core_schema.str_schema(),
                core_schema.no_info_plain_validator_function(_Redacted),
                core_schema.no_info_plain_validator_function(self._argument),
            ],
            serialization=core_schema.plain_serializer_function_ser_schema(_token, when_used="always"),
        )

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {
            "type": "string",
            "pattern": self.pattern,
            "minLength": self.length,
            "maxLength": self.length,
            "description": self.description,
        }

    def _argument(self, value: _Redacted) -> object:
        request = REQUEST.get()
        if request is None:
            from pydantic_core import PydanticCustomError

            raise PydanticCustomError(
                "handle_unchecked",
                "{kind} handles cannot be checked here: the server runs no handle middleware "
                "(its operator must install HandleMiddleware)",
                {"kind": self.name},
            )
        return request.typed_argument(str.__str__(value), self)


class _Redacted(str):
    """A handle string whose repr shows only its prefix (what pydantic prints as ``input_value``)."""

    def __repr__(self) -> str:
        prefix, sep, _ = self.partition("_")
        return f"'{prefix}_…'" if sep and len(prefix) <= MAX_PREFIX_CHARS else "'…'"


def _token(value: object) -> str:
    return str(getattr(value, "token", value))


class RequestHandles(Protocol):
    """A request's :class:`HandleContext` as the code below the registry reads it (it need not know the registry)."""

    principal_digest: str | None
    caller: str | None
    create_limit: RateLimit | None

    def typed_argument(self, value: str, kind: HandleKind) -> object: ...


class _Current:
    def __repr__(self) -> str:
        return "CURRENT"


CURRENT: Final = _Current()
"""Take the principal from the current request's handle context (the default)."""
REQUEST: ContextVar[RequestHandles | None] = ContextVar("mcp_sessions.handles", default=None)
"""The current request's :class:`HandleContext`; :func:`current_handle_context` is the public way to read it."""
