"""The caller's JSON-RPC POST, and one attempt at sending it with the held session stamped in.

Pure: no I/O and no HTTP library. :class:`OutgoingPost` is the request as the
caller sent it (kept whole, because a retry sends it again); :func:`stamp`
builds the body and headers of one attempt and records which session each
request named, so that an answer can be matched to the session it concerns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, cast

from .._wire import jsonrpc
from .._wire.protocol import Era
from ..profiles import DRAFT, SessionCarrier, WireProfile
from ._answers import decodable_encodings

__all__ = ["SETUP_METHODS", "Attempt", "Era", "Headers", "OutgoingPost", "has_session_key", "own_session_id", "stamp"]

Headers = list[tuple[str, str]]

# Connection set-up: never stamped, never the reason to create a session. A
# stale saved session must not be able to fail the handshake itself.
SETUP_METHODS: Final = frozenset({"initialize", "notifications/initialized", "server/discover"})
# Stamped when a session is held, but never the reason to create one (with the wire's own methods).
_NO_CREATE_METHODS: Final = SETUP_METHODS | {"ping"}


@dataclass(slots=True)
class OutgoingPost:
    """A JSON-RPC POST as the caller sent it: its requests and notifications, and its era."""

    url: object  # the HTTP library's URL, passed back to it
    headers: Headers
    extensions: dict[str, object]
    body: bytes
    parsed: object
    messages: list[dict[str, object]]
    era: Era
    profile: WireProfile = DRAFT

    @classmethod
    def parse(
        cls,
        url: object,
        headers: Headers,
        extensions: dict[str, object],
        body: bytes,
        protocol_version: str | None,
        profile: WireProfile = DRAFT,
    ) -> OutgoingPost | None:
        """The POST, or ``None`` when its body is not JSON-RPC (an OAuth registration, a response to the server).

        The era comes from this request's own ``Mcp-Protocol-Version``, as the SDK server decides it.
        """
        parsed = jsonrpc.loads(body)
        messages = jsonrpc.requests_and_notifications(parsed)
        if messages is None:
            return None
        return cls(url, headers, extensions, body, parsed, messages, Era.of(protocol_version), profile)

    @property
    def request_ids(self) -> list[object]:
        """The ids of the requests (not notifications) in this POST."""
        return [m["id"] for m in self.messages if "id" in m]

    def method_of(self, request_id: object) -> str | None:
        """The method of the request with this id, if this POST sent one."""
        method = next((m["method"] for m in self.messages if "id" in m and m["id"] == request_id), None)
        return method if isinstance(method, str) else None  # always a str: parse kept only such messages

    @property
    def only_setup(self) -> bool:
        """Whether every message is connection set-up (such a POST does not teach the endpoint)."""
        return all(m["method"] in SETUP_METHODS for m in self.messages)

    @property
    def triggers_create(self) -> bool:
        """Whether this POST is a reason to create a session: a request that is part of a conversation."""
        own = self.profile.methods
        return any(
            "id" in m
            and m["method"] not in _NO_CREATE_METHODS
            and m["method"] not in own
            and not has_session_key(m, self.profile)
            for m in self.messages
        )

    @property
    def has_session_method(self) -> bool:
        """Whether the caller sent one of the wire's session methods (``sessions/create``, ...) itself."""
        return any(m["method"] in self.profile.methods for m in self.messages)

    @property
    def names_own_session(self) -> bool:
        """Whether the caller put session metadata (even ``null``) on any message itself."""
        return any(has_session_key(m, self.profile) for m in self.messages)

    @property
    def batch(self) -> bool:
        """Whether the body is a JSON-RPC batch (an array)."""
        return isinstance(self.parsed, list)


@dataclass(slots=True)
class Attempt:
    """One try at sending a POST: the bytes, and which session each of its requests named."""

    body: bytes
    headers: Headers
    token: str | None = None  # the held session's token, if it was stamped on any message
    stamped_ids: list[object] = field(default_factory=list)
    sessions_named: list[tuple[object, str]] = field(default_factory=list)

    def named(self, request_id: object, token: str | None) -> bool:
        """Whether the request ``request_id`` named the session ``token`` (stamped, or the caller's own)."""
        return token is not None and (request_id, token) in self.sessions_named


def stamp(post: OutgoingPost, token: str | None, session_meta: dict[str, str] | None) -> Attempt:
    """The attempt that sends ``post`` with the held session (``token``, ``session_meta``) where it belongs."""
    attempt = Attempt(b"", [])
    header_token: str | None = None
    elements = post.parsed if isinstance(post.parsed, list) else [post.parsed]  # post.batch, spelled out for mypy
    sent: list[object] = []
    for item in elements:
        if not jsonrpc.is_request_or_notification(item):
            sent.append(item)
            continue
        element = cast("dict[str, object]", item)  # is_request_or_notification checked that it is an object
        own = own_session_id(element, post.profile)
        if own is not None:
            header_token = header_token or own
            if "id" in element:
                attempt.sessions_named.append((element["id"], own))
        if token is None or session_meta is None or not _stampable(element, post.profile):
            sent.append(element)
            continue
        sent.append(_with_session(element, session_meta, post.profile))
        attempt.token = token
        header_token = header_token or token
        if "id" in element:
            attempt.stamped_ids.append(element["id"])
            attempt.sessions_named.append((element["id"], token))
    if attempt.token is None:
        attempt.body = post.body  # nothing stamped: the caller's bytes, exactly
    else:
        attempt.body = jsonrpc.dumps(sent if post.batch else sent[0])
    attempt.headers = _headers(post, header_token, len(attempt.body))
    return attempt


def _stampable(message: dict[str, object], profile: WireProfile) -> bool:
    params = message.get("params")
    return (
        message["method"] not in SETUP_METHODS
        and message["method"] != profile.create_method
        and not has_session_key(message, profile)
        and (params is None or isinstance(params, dict))
    )


def _with_session(message: dict[str, object], session_meta: dict[str, str], profile: WireProfile) -> dict[str, object]:
    carrier = profile.carrier
    assert isinstance(carrier, SessionCarrier)  # the shim speaks the wires that carry the session in _meta
    value = {carrier.id_member: session_meta["sessionId"]}
    if carrier.state_member is not None and "state" in session_meta:
        value[carrier.state_member] = session_meta["state"]
    params = message.get("params")
    params = dict(params) if isinstance(params, dict) else {}  # None or an object (_stampable checked)
    meta = params.get("_meta")
    params["_meta"] = {**(meta if isinstance(meta, dict) else {}), carrier.meta_key: value}
    return {**message, "params": params}


def _headers(post: OutgoingPost, header_token: str | None, length: int) -> Headers:
    headers: Headers = []
    for key, value in post.headers:
        lower = key.lower()
        if lower in ("content-length", "transfer-encoding"):
            continue
        if lower == "mcp-session-id" and post.era.session_header and header_token is not None:
            continue  # 2026-07-28: the header mirrors the session; 2025-era: the server's own, untouched
        headers.append((key, decodable_encodings(value) if lower == "accept-encoding" else value))
    if post.era.session_header and header_token is not None:
        headers.append(("mcp-session-id", header_token))
    headers.append(("content-length", str(length)))
    return headers


def has_session_key(message: dict[str, object], profile: WireProfile = DRAFT) -> bool:
    """Whether the caller put session metadata (even ``null``) on the message itself."""
    meta = jsonrpc.params_meta(message)
    carrier = profile.carrier
    return meta is not None and isinstance(carrier, SessionCarrier) and carrier.meta_key in meta


def own_session_id(message: dict[str, object], profile: WireProfile = DRAFT) -> str | None:
    """The session id the caller put on the message itself, if it is a string."""
    carrier = profile.carrier
    if not isinstance(carrier, SessionCarrier):
        return None
    meta = jsonrpc.params_meta(message)
    session = meta.get(carrier.meta_key) if meta is not None else None
    value = session.get(carrier.id_member) if isinstance(session, dict) else None
    return value if isinstance(value, str) else None
