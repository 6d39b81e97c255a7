"""Users' grants, as the sign-ins keep them (``_oauth``): one a user, authorization server and resource, in memory
and sealed in the gateway's store (``_kept``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from starlette.types import Scope

from ..._pipeline import Rejection, error_answer, store_refused, unavailable
from ..._wire.protocol import INVALID_REQUEST
from ._exchange import ExchangeRefused

MAX_GRANTS: Final = 100_000
"""Users' grants kept, one per user and server; the least recently stored are forgotten first (she signs in again)."""
STORE_FAILED: Final = "store_unavailable"
"""The ``error`` of a :class:`GrantFailed` for a store that failed or stalled: answered -32010, as the sessions do."""
User = tuple[str, str]
"""Who a grant is for: her token's issuer (or the auth proxy's header) and her principal."""


class GrantFailed(ExchangeRefused):
    """The user's grant could not be used: a server failed (502, 504), the store did (503, :data:`STORE_FAILED`),
    or the request names no user (401); ``description`` says which, with no token in it."""

    def answer(self, request_id: object = None, retry_after: bytes = b"1") -> Rejection:
        if self.error == STORE_FAILED:  # as every store failure of the gateway: the retryable -32010
            return store_refused(self.__cause__ or self, retry_after, request_id)
        message = f"The upstream's authorization failed: {self.description}"
        if self.status >= 500:
            return unavailable(self.status, message, retry_after, request_id, "upstream_authorization_failed")
        header = (b"www-authenticate", b'Bearer error="invalid_token"')
        return error_answer(self.status, INVALID_REQUEST, message, "upstream_authorization_refused", request_id, header)


@dataclass
class _Grant:
    """A user's tokens at one server, and when (monotonic) to refresh the access token; what her view and the
    operator's show of it: when she granted it and when its access token expires (wall-clock seconds, ``None``
    where unknown: kept before either was, or no lifetime said), and the scope granted."""

    access: str = field(repr=False)
    refresh: str | None = field(repr=False)
    renew_at: float
    granted_at: float | None = None
    expires_at: float | None = None
    scope: str | None = None


def _who(key: tuple[User, str]) -> str:
    """A user and server, as the store's record is named from (``_kept.record``)."""
    (issuer, principal), server = key
    return f"{issuer}\0{principal}\0{server}"


def _user_of(scope: Scope) -> User | None:
    """Who asks: her verified token's issuer and principal (an auth proxy's user: its header's name and hers)."""
    access = getattr(scope.get("user"), "access_token", None)
    subject = getattr(access, "subject", None) or getattr(access, "client_id", None)
    claims = getattr(access, "claims", None) or {}
    if not isinstance(subject, str) or not subject:
        return None
    return (str(claims.get("iss", "")), subject)
