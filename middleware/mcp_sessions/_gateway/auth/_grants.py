"""Users' grants, as the sign-ins keep them (``_oauth``): one a user, authorization server and resource, in this
process's memory and, given a ``_kept.KeptGrants``, sealed in the gateway's store, read there at each use (so that
a grant another replica revoked or refreshed is seen before its token goes out again); and who a grant is for."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, TypeVar

import anyio
from starlette.types import Scope

from ..._bounded import BoundedDict
from ..._pipeline import Rejection, error_answer, store_refused, unavailable
from ..._wire.protocol import INVALID_REQUEST
from ._exchange import ExchangeRefused

if TYPE_CHECKING:
    from ._kept import KeptGrants

MAX_GRANTS: Final = 100_000
"""Users' grants kept, one per user and server; the least recently stored are forgotten first (she signs in again)."""
STORE_FAILED: Final = "store_unavailable"
"""The ``error`` of a :class:`GrantFailed` for a store that failed or stalled: answered -32010, as the sessions do."""
LEASE_POLL: Final = 0.1
"""How often a replica looks in the store for the grant another replica is refreshing."""
User = tuple[str, str]
"""Who a grant is for: her token's issuer (or the auth proxy's header) and her principal."""
GrantKey = tuple[User, str]
"""A user and the authorization server her grant is at."""
_T = TypeVar("_T")


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


def server_error(description: str, status: int = 502) -> GrantFailed:
    """A server's failure, as the sign-ins raise it: the client's 502 (504 for no answer in time)."""
    return GrantFailed(status, "server_error", description)


@dataclass
class Grant:
    """A user's tokens at one server, and when to refresh the access token; what her view and the operator's show
    of it: when she granted it and when its access token expires (all on the sign-in's clock, ``None`` where
    unknown: kept before either was, or no lifetime said), and the scope granted."""

    access: str = field(repr=False)
    refresh: str | None = field(repr=False)
    renew_at: float
    granted_at: float | None = None
    expires_at: float | None = None
    scope: str | None = None


def _who(key: GrantKey) -> str:
    """A user and server, as the store's record is named from (``_kept.record``)."""
    (issuer, principal), server = key
    return f"{issuer}\0{principal}\0{server}"


def user_of(scope: Scope) -> User | None:
    """Who asks: her verified token's issuer and principal (an auth proxy's user: its header's name and hers)."""
    access = getattr(scope.get("user"), "access_token", None)
    subject = getattr(access, "subject", None) or getattr(access, "client_id", None)
    claims = getattr(access, "claims", None) or {}
    if not isinstance(subject, str) or not subject:
        return None
    return (str(claims.get("iss", "")), subject)


class UserGrants:
    """The users' grants of one sign-in, by :data:`GrantKey`: in memory (at most :data:`MAX_GRANTS`, the least
    recently stored forgotten first) and, given ``kept``, sealed in the store under the record ``record`` names
    from a user and server (``_kept.record`` digests it), entered in the store's index as ``listed_as``'s (which
    a gateway's sign-ins and a file's servers share). A grant is due for renewal as ``clock`` says (its
    ``renew_at``), one renewal at a time across replicas, each lease ``timeout`` seconds long
    (:meth:`renewed`)."""

    def __init__(
        self,
        kept: KeptGrants | None,
        record: Callable[[str], str],
        listed_as: str,
        *,
        clock: Callable[[], float],
        timeout: float,
    ) -> None:
        self.kept = kept
        self._record = record
        self._listed_as = listed_as
        self._clock = clock
        self._timeout = timeout
        self._held: BoundedDict[GrantKey, Grant] = BoundedDict(MAX_GRANTS)

    def held(self, key: GrantKey) -> Grant | None:
        """The grant this process holds (what it last read, stored or learned), the store not asked."""
        return self._held.get(key)

    def record(self, key: GrantKey) -> str:
        """What names the user's grant at a server in the store."""
        return self._record(_who(key))

    async def current(self, key: GrantKey) -> Grant | None:
        """The user's grant at the server: the store's where grants are kept, read at each use (one read of its
        record and one AES-GCM open a call), so that a grant another replica revoked or refreshed is seen before
        this one sends its token again; what this replica learned of the same token (a 401 to it) holds. Else
        this process's memory."""
        grant = self._held.get(key)
        if self.kept is None:
            return grant
        loaded = await stored(self.kept.load(self.record(key)))
        if loaded is None:
            self._held.pop(key, None)
            return None
        found = Grant(*loaded)
        if grant is not None and found.access == grant.access:
            found.renew_at = min(found.renew_at, grant.renew_at)
        self._held[key] = found
        return found

    async def put(self, key: GrantKey, grant: Grant, shown: dict[str, object]) -> None:
        """``grant`` held, and kept in the store where there is one, entered in its index as ``shown`` (who, the
        server, the resource, the scope, when granted and when it expires: no token)."""
        self._held[key] = grant
        if self.kept is not None:
            listed = shown | {"sign_in": self._listed_as}
            await stored(self.kept.save(self.record(key), grant.access, grant.refresh, grant.renew_at, listed))

    async def drop(self, key: GrantKey) -> None:
        """The user's grant forgotten, here and in the store: she signs in again."""
        self._held.pop(key, None)
        if self.kept is not None:
            await stored(self.kept.forget(self.record(key)))

    def distrust(self, key: GrantKey) -> None:
        """The server refused the grant's access token: its next use refreshes it (or signs her in)."""
        grant = self._held.get(key)
        if grant is not None:
            grant.renew_at = 0.0

    async def renewed(self, key: GrantKey, renew: Callable[[Grant], Awaitable[Grant]]) -> Grant | None:
        """The user's grant, renewed by ``renew`` where it is still due; ``None`` where there is none to renew
        (revoked, refused, or no refresh token: she signs in again). Where grants are kept, under the store's lease
        on the grant, taken before the grant is read (a grant read before it may hold a refresh token another
        replica has rotated out since, which a server that rotates them answers by revoking the grant; two store
        updates a renewal); where another replica holds the lease, the grant its renewal keeps (:meth:`_elsewhere`)."""
        if self.kept is None:
            return await self._renewed_here(key, renew)
        record = self.record(key)
        if (lease := await stored(self.kept.lease(record, self._timeout))) is None:
            return await self._elsewhere(key)  # another replica renews it: its grant, from the store
        try:
            return await self._renewed_here(key, renew)
        finally:
            with anyio.CancelScope(shield=True):
                await stored(self.kept.release(record, lease))

    async def _renewed_here(self, key: GrantKey, renew: Callable[[Grant], Awaitable[Grant]]) -> Grant | None:
        grant = await self.current(key)  # another replica may have refreshed (rotated) it, or revoked it
        if grant is None or grant.refresh is None:
            return None
        if self._clock() < grant.renew_at:  # renewed while this request waited for its turn, or elsewhere
            return grant
        return await renew(grant)

    async def _elsewhere(self, key: GrantKey) -> Grant | None:
        """The grant another replica's renewal keeps in the store: looked for every :data:`LEASE_POLL` seconds
        until the lease it holds runs out (the store tells no one when a value changes)."""
        for _ in range(math.ceil(self._timeout / LEASE_POLL)):
            await anyio.sleep(LEASE_POLL)
            grant = await self.current(key)
            if grant is None:  # revoked or refused there
                return None
            if self._clock() < grant.renew_at:
                return grant
        raise GrantFailed(503, "server_error", "another replica's refresh of this grant did not end in time")

    async def everyone(self, shown: Callable[[GrantKey, Grant], dict[str, object]]) -> list[dict[str, object]]:
        """Every user's grant, as ``shown`` says each, with no server asked: the store's index (another replica's,
        or a gateway's before a restart, too) where they are kept, its entries of this sign-in, else this
        process's memory."""
        if self.kept is None:
            return [shown(key, grant) for key, grant in self._held.items()]
        listed = await stored(self.kept.listed())
        return [
            {name: value for name, value in entry.items() if name != "sign_in"}
            for entry in listed
            if entry.get("sign_in") == self._listed_as
        ]


async def stored(step: Awaitable[_T]) -> _T:
    """``step`` of the store's, whose failure is the client's 503 (the store's failures are retried)."""
    from ._kept import StoreFailed  # with the store's seal: cryptography's AES-GCM, loaded as grants are kept

    try:
        return await step
    except StoreFailed as failed:
        raise GrantFailed(503, STORE_FAILED, "the gateway's store is unavailable") from failed.__cause__
