"""Pure: signing keys, session and state tokens (mint, verify: RFC 8725), and keyed digests of ids."""

from ._keys import IdDigests as IdDigests
from ._keys import SessionKey as SessionKey
from ._keys import derived_key as derived_key
from ._keys import keyed_digest as keyed_digest
from ._keys import keys_from_config as keys_from_config
from ._tokens import DEFAULT_AUDIENCE as DEFAULT_AUDIENCE
from ._tokens import DEFAULT_MAX_STATE_SIZE as DEFAULT_MAX_STATE_SIZE
from ._tokens import SESSION_TOKEN_TYPE as SESSION_TOKEN_TYPE
from ._tokens import STATE_TOKEN_TYPE as STATE_TOKEN_TYPE
from ._tokens import InvalidToken as InvalidToken
from ._tokens import KeySet as KeySet
from ._tokens import SessionClaims as SessionClaims
from ._tokens import StateTooLarge as StateTooLarge
from ._tokens import decode_unverified as decode_unverified
from ._tokens import is_session_token as is_session_token
