"""The wire profile "strawman": the transports working group's first session shapes.

From transports-wg PR #20's first commits (the api-shapes file and the group's
Python reference server and client; fast-agent 0.5.0-0.5.3 spoke it too):
``session/create``, ``session/resume``, ``session/list`` and ``session/delete``;
a request names its session in ``params._meta["mcp/session"]`` as ``{"id"}``
and results echo ``{"id", "expiry"}`` there. A session that is gone makes the
request sessionless, and its result carries ``"mcp/session": null``: the
strawman's revocation signal. The capability is
``experimental.session = {"version": 1, "features": [...]}``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Final

from .._session import PRINCIPAL_CLAIM, Session, SessionNotFound
from .._wire import Refusal, iso, jsonrpc, store_unavailable
from .._wire.protocol import CLIENT_CAPABILITIES_META_KEY, INVALID_PARAMS, METHOD_NOT_FOUND
from ..stores import InvalidCursor, SessionStoreUnavailable
from ._base import (
    SESSION_NOT_FOUND,
    SESSIONLESS,
    Capability,
    Claim,
    ClientSide,
    LocalCall,
    LocalMethod,
    WireProfile,
    ended_hint,
    required_codes,
    session_object,
)
from ._carriers import Echo, SessionCarrier

COOKIE_KEY: Final = "mcp/session"
"""The ``_meta`` key of the session cookie, in requests (``{"id"}``) and results (``{"id", "expiry"}``)."""
METHOD_CREATE: Final = "session/create"
METHOD_RESUME: Final = "session/resume"
METHOD_LIST: Final = "session/list"
METHOD_DELETE: Final = "session/delete"
FEATURES: Final = ("create", "resume", "list", "delete")
SESSION_REQUIRED: Final = -32002
"""The strawman's "session required" code (retired by MCP 2026-07-28: ``error_codes="spec-safe"`` moves it).

It names no "not found" code: ``session/resume`` of a session that is gone gets the draft's.
"""
MAX_LABEL_LENGTH: Final = 256
MAX_DATA_ENTRIES: Final = 32
MAX_DATA_VALUE_LENGTH: Final = 1024
PAGE_SIZE: Final = 100
_REQUIRED: Final = "Session required. Call session/create first."


def _is_create(message: dict[str, object]) -> bool:
    """``session/create`` in this wire's shape: no params, or only ``hints`` (and the ``_meta`` envelope)."""
    params = message.get("params")
    return params is None or (isinstance(params, dict) and params.keys() <= {"hints", "_meta"})


def _has_id(message: dict[str, object]) -> bool:
    """``session/resume`` and ``session/delete`` in this wire's shape: ``params.id``."""
    params = message.get("params")
    return isinstance(params, dict) and "id" in params


def _declared(message: dict[str, object]) -> bool:
    """Whether a 2026-07-28 request's client declared ``experimental.session`` in its capabilities."""
    meta = jsonrpc.meta(message.get("params"))
    capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
    experimental = capabilities.get("experimental") if isinstance(capabilities, dict) else None
    return isinstance(experimental, dict) and experimental.get("session") is not None


def _hints(call: LocalCall) -> dict[str, str]:
    """The session's data from ``hints``: ``data`` (strings only), with ``label`` joining it as ``label``."""
    hints = call.params.get("hints")
    if hints is None:
        return {}
    if not isinstance(hints, dict):
        raise Refusal(INVALID_PARAMS, "hints must be an object")
    label = hints.get("label")
    if label is not None and (type(label) is not str or len(label) > MAX_LABEL_LENGTH):
        raise Refusal(INVALID_PARAMS, f"hints.label must be a string of at most {MAX_LABEL_LENGTH} characters")
    data = hints.get("data")
    if data is None:
        data = {}
    if (
        not isinstance(data, dict)
        or len(data) > MAX_DATA_ENTRIES
        or not all(type(v) is str and len(v) <= MAX_DATA_VALUE_LENGTH for v in data.values())
    ):
        raise Refusal(
            INVALID_PARAMS,
            f"hints.data must be an object of at most {MAX_DATA_ENTRIES} strings"
            f" of at most {MAX_DATA_VALUE_LENGTH} characters",
        )
    chosen = dict(data)
    if label is not None:
        chosen.setdefault("label", label)
    return chosen


def _entry(token: str, expiry: str, data: Mapping[str, object] | None) -> dict[str, object]:
    """A session as create, resume and list show it: ``{"id", "expiry", "data"?}``."""
    entry: dict[str, object] = {"id": token, "expiry": expiry}
    if data:
        entry["data"] = data
    return entry


def _session_object(token: str, expiry: str, data: Mapping[str, object] | None) -> dict[str, object]:
    """The result of create and resume: the session in the body, and the cookie in ``_meta``."""
    return {**_entry(token, expiry, data), "_meta": {COOKIE_KEY: {"id": token, "expiry": expiry}}}


async def _named(call: LocalCall) -> Session | None:
    """The live session ``params.id`` names for this caller, ``None`` when it is gone or never was."""
    token = call.params.get("id")
    if type(token) is not str:
        raise Refusal(INVALID_PARAMS, "params.id must be the session's id, a string")
    try:
        return await call.sessions.resolve(call.scope, token, None)
    except SessionNotFound:
        return None


async def create(call: LocalCall) -> dict[str, object]:
    """``session/create``: a new session; its data (from ``hints``) is kept for ``session/list``."""
    data = _hints(call)
    minted = await call.mint()
    expiry = iso(int(minted.expires_at))
    principal = minted.claims.extra.get(PRINCIPAL_CLAIM)
    if principal is not None:
        # A record holds strings: the wire id to list, and the data as JSON text.
        record = {"id": minted.token, "data": json.dumps(data, separators=(",", ":"))}
        try:
            await call.sessions.store.record(
                minted.claims.session_id,
                principal=principal,
                expires_at=minted.claims.expires_at,
                now=time.time(),
                data=record,
            )
        except NotImplementedError:
            pass  # a store that cannot list: session/list says so
        except SessionStoreUnavailable as exc:  # full, unreachable, read-only: retryable, never a 500
            raise store_unavailable(exc) from None
    return _session_object(minted.token, expiry, data)


async def resume(call: LocalCall) -> dict[str, object]:
    """``session/resume``: the same shape as create, for a live session (its idle clock restarts)."""
    session = await _named(call)
    if session is None:
        raise call.profile.not_found_refusal(call.params.get("id"), "gone")
    return _session_object(session.token, iso(int(session.expires_at_timestamp)), None)


async def list_sessions(call: LocalCall) -> dict[str, object]:
    """``session/list``: the caller's own live sessions, by authenticated principal; none without one."""
    cursor = call.params.get("cursor")
    if cursor is not None and type(cursor) is not str:
        raise Refusal(INVALID_PARAMS, "cursor must be a string")
    principal = await call.sessions.principal_of(call.scope)
    if principal is None:
        return {"sessions": []}
    try:
        records, next_cursor = await call.sessions.store.list_sessions(
            principal, now=time.time(), cursor=cursor, limit=PAGE_SIZE
        )
    except NotImplementedError:
        raise Refusal(METHOD_NOT_FOUND, "listing not supported by this store") from None
    except InvalidCursor:
        raise Refusal(INVALID_PARAMS, "cursor is not one this server returned: start again without it") from None
    except SessionStoreUnavailable as exc:
        raise store_unavailable(exc) from None
    sessions = []
    for record in records:
        recorded = record.data or {}
        if "id" in recorded:  # else recorded by another wire: it has no strawman id to list
            data = json.loads(recorded.get("data") or "{}")
            sessions.append(_entry(recorded["id"], iso(int(record.expires_at)), data))
    result: dict[str, object] = {"sessions": sessions}
    if next_cursor is not None:
        result["nextCursor"] = next_cursor
    return result


async def delete(call: LocalCall) -> dict[str, object]:
    """``session/delete``: end the named session; ``deleted`` says whether it was live."""
    session = await _named(call)
    deleted = session is not None and await call.revoke(session)
    return {"deleted": deleted, "_meta": {COOKIE_KEY: None}}


def _capability(required: bool) -> dict[str, object]:
    return {"version": 1, "features": list(FEATURES)}


def _client_create_params(label: str | None) -> dict[str, object]:
    return {"hints": {}} if label is None else {"hints": {"label": label}}


def _created(result: dict[str, object]) -> tuple[str, dict[str, object]] | None:
    meta = jsonrpc.meta(result)
    return session_object(meta.get(COOKIE_KEY) if isinstance(meta, dict) else None, "id")


def _advertised(capabilities: dict[str, object]) -> bool:
    experimental = capabilities.get("experimental")
    return isinstance(experimental, dict) and isinstance(experimental.get("session"), dict)


class Strawman(WireProfile):
    """The strawman's differences from the draft: its methods' shapes, the "required" error of a client that
    declared it, and a session that is gone making the request sessionless, which its result says."""

    def claim(self, message: dict[str, object], method: str) -> tuple[Claim, LocalMethod | None] | None:
        """The draft's claims, and a message of a client that declared ``experimental.session``."""
        claim = super().claim(message, method)
        return (Claim.DECLARED, None) if claim is None and _declared(message) else claim

    def in_shape(self, message: dict[str, object], method: str) -> bool:
        """``session/create`` without params or with ``hints``; ``session/resume`` and ``session/delete`` with
        ``params.id`` (SEP-1364 has methods of the same names)."""
        if method == METHOD_CREATE:
            return _is_create(message)
        return _has_id(message) if method in (METHOD_RESUME, METHOD_DELETE) else True

    def unknown_session(self, token: str, gone: SessionNotFound) -> Refusal | None:
        """None: the request goes on without a session, and its result carries ``"mcp/session": null``."""
        return None

    def required_text(self, why: str | None = None) -> str:
        """The strawman's sentence, then why there is no session and what to do, each a sentence."""
        parts = [part for part in (why, self.required_hint) if part]
        return " ".join([_REQUIRED, *(f"{part[0].upper()}{part[1:]}." for part in parts)])

    def gone_codes(self) -> frozenset[int]:
        """A "required" error to a request that carried a session says it is gone too."""
        return super().gone_codes() | required_codes(self)

    def echo_ends(self, echo: object) -> bool:
        """A ``null`` echo: the server revoked the session."""
        return echo is None


STRAWMAN: Final = Strawman(
    name="strawman",
    carrier=SessionCarrier(meta_key=COOKIE_KEY, id_member="id"),
    echo=Echo(meta_key=COOKIE_KEY, id_member="id", expiry_member="expiry"),
    capability=Capability(
        per_request=(("experimental", "session"),), handshake=(("experimental", "session"),), settings=_capability
    ),
    methods={
        METHOD_CREATE: LocalMethod(needs_session=False, answer=create),
        METHOD_RESUME: LocalMethod(needs_session=False, answer=resume),
        METHOD_LIST: LocalMethod(needs_session=False, answer=list_sessions),
        METHOD_DELETE: LocalMethod(needs_session=False, answer=delete),
    },
    sessionless=SESSIONLESS | {METHOD_CREATE, METHOD_RESUME},
    not_found=SESSION_NOT_FOUND,
    required=SESSION_REQUIRED,
    required_hint=f'send its id in params._meta["{COOKIE_KEY}"]',
    not_found_hint=ended_hint(METHOD_CREATE),
    create_method=METHOD_CREATE,
    client=ClientSide(
        create_params=_client_create_params,
        created=_created,
        delete_method=METHOD_DELETE,
        delete_params=lambda token: {"id": token},
        deleted=lambda result: result.get("deleted") is True,
        advertised=_advertised,
    ),
)
"""The strawman (``session/*``, ``_meta["mcp/session"]``, revocation by ``null``)."""
