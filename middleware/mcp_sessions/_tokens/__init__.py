"""Pure: signing keys, session and state tokens (mint, verify: RFC 8725), and keyed digests of ids."""

from ._digest import IdDigests, derived_key
from ._jws import InvalidToken
from ._keys import SessionKey, keys_from_config
from ._tokens import (
    DEFAULT_AUDIENCE,
    DEFAULT_MAX_STATE_SIZE,
    SESSION_TOKEN_TYPE,
    STATE_TOKEN_TYPE,
    KeySet,
    SessionClaims,
    StateTooLarge,
)

__all__ = [
    "DEFAULT_AUDIENCE",
    "DEFAULT_MAX_STATE_SIZE",
    "SESSION_TOKEN_TYPE",
    "STATE_TOKEN_TYPE",
    "IdDigests",
    "InvalidToken",
    "KeySet",
    "SessionClaims",
    "SessionKey",
    "StateTooLarge",
    "derived_key",
    "keys_from_config",
]
