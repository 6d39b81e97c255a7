"""Each user's grant at an upstream's authorization server, and the client the gateway registered there, kept in the
gateway's store, sealed (``_oauth``).

A grant (her access and refresh tokens, and when to refresh) is one value of the store the sessions use
(``MCP_SESSIONS_STORE``: memory, SQLite, Redis), under a record named by a SHA-256 digest of who she is and the
server (never her name, never a token), so that a restarted gateway, or another replica on the same store, serves
her without asking her to sign in again. The value is sealed with AES-GCM (``cryptography``'s, which PyJWT's
``crypto`` extra brings) under a key derived by HKDF-SHA256 from the signing key of the sessions' key set, named
by its ``kid``; a grant sealed by a key the set still holds opens after a rotation (the old key kept as a
verifier), one sealed by a key it no longer holds does not, and she signs in again. The record's name is the
seal's associated data: a value moved to another user's record does not open. What the store holds reads as
neither token. The client the gateway registered (RFC 7591) is kept the same way: a server binds a grant's refresh
token to its client, which a replica or a restart that registered anew could not use. A refresh takes a lease on
the grant's record first (the store's atomic update), so that two replicas never refresh one grant at once: a
server that rotates refresh tokens ends a grant whose old one comes back.

What an operator lists (every user's grants, ``_operator``) is an index record of its own, one field a grant,
named as the grant's record is and sealed the same way (the field's name the associated data): who, the server,
the resource, the scope, when granted and when its access token expires, and the sign-in whose it is (named by its
configuration, so that listing finds no server first), never a token. The store lists no
records, so a grant is entered there as it is kept and dropped as it is forgotten; an entry outlives its grant's
record by no more than :data:`KEPT_FOR` (each says until when it is kept, and is not listed past it).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import os
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from ...stores import SessionStoreUnavailable
from ._answer import now

if TYPE_CHECKING:
    from ..._tokens import KeySet
    from ...stores import SessionStore

logger = logging.getLogger("mcp_sessions.gateway")

KEPT_FOR: Final = 90 * 24 * 3600.0
"""How long a grant is kept in the store since it was last granted or refreshed (its refresh token's life is the
server's to say, and most do not)."""
_INFO: Final = b"mcp-sessions gateway: a user's grant at an upstream's authorization server"
_FIELD: Final = "grant"
_LEASE: Final = "refreshing"
_INDEX: Final = "oauth-grants"
"""The index record: a field per grant kept, what the operator's view lists (see the module)."""


class StoreFailed(Exception):
    """The store could not be read or written now: the request is answered as the store's failures are."""


class KeptGrants:
    """Grants sealed in ``store`` with the keys of ``keys`` (see the module): :meth:`load`, :meth:`save`,
    :meth:`forget`, and every user's as listed (:meth:`listed`); and the registered clients: :meth:`client`,
    :meth:`keep_client`. A grant is ``(access, refresh, renew_at, granted_at, expires_at, scope)``, each time on
    ``clock`` (``_answer.now``), as what it keeps and lists is held until."""

    def __init__(self, store: SessionStore, keys: KeySet, clock: Callable[[], float] = now) -> None:
        self._store = store
        self._clock = clock
        self._sealing: dict[str, AESGCM] = {}
        for key in keys.keys:
            material = key.signing_key
            if material is None:  # a verifier alone has no secret to derive from
                continue
            if not isinstance(material, bytes):
                material = material.private_bytes(Encoding.DER, PrivateFormat.PKCS8, NoEncryption())
            derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(material)
            self._sealing[key.kid] = AESGCM(derived)
        if keys.signer is None:
            raise ValueError("the gateway keeps users' grants sealed with the sessions' signing key: give one")
        self._signer = keys.signer.kid

    async def load(self, who: str) -> tuple[str, str | None, float, float | None, float | None, str | None] | None:
        """The grant kept for ``who`` (a user and server, as :func:`record` names them), or ``None``; one kept before
        grants said when they were granted says ``None`` for what it lacks."""
        opened = await self._read(record(who))
        if opened is None or len(opened) not in (3, 6):
            return None
        access, refresh, renew_at, granted_at, expires_at, scope = [*opened, None, None, None][:6]
        if not isinstance(access, str) or not (refresh is None or isinstance(refresh, str)):
            return None
        if not (renew_at is None or isinstance(renew_at, int | float)):
            return None
        said = scope if isinstance(scope, str) else None
        renews = math.inf if renew_at is None else float(renew_at)
        return access, refresh, renews, _when(granted_at), _when(expires_at), said

    async def save(
        self,
        who: str,
        access: str,
        refresh: str | None,
        renew_at: float,
        listed: dict[str, object],
    ) -> None:
        """Keep ``who``'s grant, sealed, for :data:`KEPT_FOR` seconds, and enter it in the
        index as ``listed`` says it (who, the server, the resource, ``scope``, ``granted_at``, ``expires_at``: no
        token)."""
        renews = None if renew_at == math.inf else renew_at
        shown = [listed.get("granted_at"), listed.get("expires_at"), listed.get("scope")]
        await self._write(record(who), [access, refresh, renews, *shown])
        until = self._clock() + KEPT_FOR
        await self._write(_INDEX, [{**listed, "until": until}], field=record(who))

    async def forget(self, who: str) -> None:
        """Drop ``who``'s grant (revoked, refused), and its entry in the index: she signs in again."""
        try:
            await self._store.delete(record(who), _FIELD)
            await self._store.delete(_INDEX, record(who))
        except SessionStoreUnavailable as exc:
            raise StoreFailed from exc

    async def listed(self) -> list[dict[str, object]]:
        """Every grant the index holds, as :meth:`save` entered it, but those past their time (see the module),
        which are dropped as they are read, so the index holds no more than the grants kept; an entry that does not
        open (its key gone from the set) is left out, and left for a gateway that holds its key."""
        try:
            entries = await self._store.items(_INDEX)
        except SessionStoreUnavailable as exc:
            raise StoreFailed from exc
        now = self._clock()
        found = []
        for name, sealed in entries.items():
            opened = self._opened(name, sealed) if isinstance(sealed, dict) else None
            entry = opened[0] if opened is not None and len(opened) == 1 else None
            until = entry.pop("until", None) if isinstance(entry, dict) else None
            if isinstance(entry, dict) and isinstance(until, int | float) and until > now:
                found.append(entry)
            elif isinstance(until, int | float):  # its grant's record is gone by now: so is the entry
                await self._dropped(name)
        return found

    async def _dropped(self, name: str) -> None:
        try:
            await self._store.delete(_INDEX, name)
        except SessionStoreUnavailable as exc:
            raise StoreFailed from exc

    async def lease(self, who: str, seconds: float) -> str | None:
        """This replica's lease on ``who``'s refresh for ``seconds``, taken where no other's is still running (the
        store's atomic update: two replicas never both hold one); ``None`` while another's runs."""
        mine = secrets.token_hex(8)
        now = self._clock()

        def taken(old: object) -> object:
            running = isinstance(old, list) and len(old) == 2 and isinstance(old[1], int | float) and old[1] > now
            return old if running else [mine, now + seconds]

        try:
            held = await self._store.update(record(who), _LEASE, taken, expires_at=now + KEPT_FOR)
        except SessionStoreUnavailable as exc:
            raise StoreFailed from exc
        return mine if isinstance(held, list) and held[0] == mine else None

    async def release(self, who: str, lease: str) -> None:
        """``lease`` given back (if it is still this replica's), so that the next refresh need not wait it out."""

        def released(old: object) -> object:
            return None if isinstance(old, list) and old[:1] == [lease] else old

        try:
            await self._store.update(record(who), _LEASE, released, expires_at=self._clock() + KEPT_FOR)
        except SessionStoreUnavailable as exc:
            raise StoreFailed from exc

    async def client(self, registered_at: str) -> tuple[str, str | None, str | None] | None:
        """The client the gateway registered (RFC 7591) as ``registered_at`` names it (a server and the callback):
        its id, and its secret and method if it was given one; ``None`` if none is kept."""
        opened = await self._read(_client_record(registered_at))
        if opened is None or len(opened) != 3:
            return None
        client_id, secret, method = opened
        if not isinstance(client_id, str) or not isinstance(secret, str | None) or not isinstance(method, str | None):
            return None
        return client_id, secret, method

    async def keep_client(self, registered_at: str, client_id: str, secret: str | None, method: str | None) -> None:
        """Keep the client registered as ``registered_at`` names it, so that every replica and restart uses it (a
        server binds a grant's refresh token to the client it was issued to)."""
        await self._write(_client_record(registered_at), [client_id, secret, method])

    async def _read(self, name: str) -> list[object] | None:
        try:
            sealed = await self._store.get(name, _FIELD)
        except SessionStoreUnavailable as exc:
            raise StoreFailed from exc
        if not isinstance(sealed, dict):
            return None
        opened = self._opened(name, sealed)
        if opened is None:
            logger.warning("mcp-sessions gateway: a kept grant does not open with the sessions' keys: asked again")
        return opened

    async def _write(self, name: str, value: list[object], field: str = _FIELD) -> None:
        """``value`` sealed under ``name``'s ``field``: the grant's record's name its associated data, or in the
        index the field's (an entry moved to another field does not open)."""
        nonce = os.urandom(12)
        bound = name if field == _FIELD else field
        sealed = self._sealing[self._signer].encrypt(nonce, json.dumps(value).encode(), bound.encode())
        kept = {"kid": self._signer, "nonce": _b64(nonce), "sealed": _b64(sealed)}
        try:
            await self._store.set(name, field, kept, expires_at=self._clock() + KEPT_FOR)
        except SessionStoreUnavailable as exc:
            raise StoreFailed from exc

    def _opened(self, name: str, sealed: dict[str, object]) -> list[object] | None:
        kid = sealed.get("kid")
        nonce = sealed.get("nonce")
        data = sealed.get("sealed")
        key = self._sealing.get(kid) if isinstance(kid, str) else None
        if key is None or not isinstance(nonce, str) or not isinstance(data, str):
            return None
        try:
            plain = key.decrypt(base64.urlsafe_b64decode(nonce), base64.urlsafe_b64decode(data), name.encode())
            opened = json.loads(plain)
        except (InvalidTag, ValueError):
            return None
        return opened if isinstance(opened, list) else None


def record(who: str) -> str:
    """The store's record for a user's grant at a server: a digest, so that the store names neither."""
    return "oauth-grant-" + hashlib.sha256(who.encode()).hexdigest()


def _client_record(registered_at: str) -> str:
    return "oauth-client-" + hashlib.sha256(registered_at.encode()).hexdigest()


def _when(value: object) -> float | None:
    """A time kept (wall-clock seconds), if it is one."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")
