"""The scenario ``sessions-strawman``: the working group's first shapes (``session/*``, ``_meta["mcp/session"]``).

The pack speaks as the group's reference client: it declares
``experimental.session`` in its capabilities, names its session as
``{"id"}`` under ``mcp/session`` and reads the cookie back from each result.
Fixture tools: ``count`` (needs a session) and ``whoami``.
"""

from __future__ import annotations

from ._draft_session import is_rfc3339_utc
from ._model import Bail, Recorder
from ._peer import UNKNOWN_ID, Exchange, Peer, member, tool_names, tool_text

COOKIE = "mcp/session"
REQUIRED = -32002
REQUIRED_MESSAGE = "Session required. Call session/create first."
LABEL = "conformance-workspace"


def _cookie_problem(result: object, token: str) -> str | None:
    """Why ``result`` does not carry the cookie ``{"id": token, "expiry": <RFC 3339>}``, if it does not."""
    cookie = member(result, "_meta", COOKIE)
    if not isinstance(cookie, dict) or cookie.get("id") != token or not is_rfc3339_utc(cookie.get("expiry")):
        return f'result._meta["{COOKIE}"] is {cookie!r}, not {{"id": <the session>, "expiry": <RFC 3339>}}'
    return None


def _null_cookie(result: object) -> bool:
    """Whether ``result`` says the session is gone: ``"mcp/session": null`` in its ``_meta``."""
    meta = member(result, "_meta")
    return isinstance(meta, dict) and COOKIE in meta and meta[COOKIE] is None


def _in(peer: Peer, method: str, params: dict[str, object] | None, token: str) -> Exchange:
    return peer.call(method, params, meta={COOKIE: {"id": token}})


def _create(peer: Peer, rec: Recorder) -> str:
    created = peer.call("session/create", {"hints": {"label": LABEL}})
    result, token = created.result, member(created.result, "id")
    if not isinstance(token, str) or not token:
        rec.record("sessions-strawman-create", "no result.id (a non-empty string)", created.summary())
        raise Bail("sessions-strawman-create")
    problem = None if is_rfc3339_utc(member(result, "expiry")) else "result.expiry is not RFC 3339"
    rec.record("sessions-strawman-create", problem or _cookie_problem(result, token), created.summary())
    label = member(result, "data", "label")
    rec.record("sessions-strawman-label-in-data", None if label == LABEL else f"result.data.label is {label!r}")
    return token


def _lifecycle(peer: Peer, rec: Recorder, features: list[object], token: str) -> None:
    """``session/resume`` and ``session/list``, each where the server lists the feature."""
    if "resume" not in features:
        rec.skip("sessions-strawman-resume", "the server does not list the resume feature")
    else:
        resumed = peer.call("session/resume", {"id": token})
        problem = None if member(resumed.result, "id") == token else "result.id is not the resumed session"
        rec.record("sessions-strawman-resume", problem or _cookie_problem(resumed.result, token), resumed.summary())
    if "list" not in features:
        rec.skip("sessions-strawman-list", "the server does not list the list feature")
        return
    listed = peer.call("session/list", {})
    sessions, cursor = member(listed.result, "sessions"), member(listed.result, "nextCursor")
    entries_ok = isinstance(sessions, list) and all(
        isinstance(member(entry, "id"), str) and is_rfc3339_utc(member(entry, "expiry")) for entry in sessions
    )
    shaped = entries_ok and (cursor is None or isinstance(cursor, str))
    problem = None if shaped else "not {sessions: [{id, expiry, data?}], nextCursor?}"
    rec.record("sessions-strawman-list", problem, listed.summary())


def _using(peer: Peer, rec: Recorder, tools: frozenset[str], token: str, other: str | None) -> None:
    if "count" not in tools:
        rec.untestable("sessions-strawman-session-is-context", "the server has no count tool")
        rec.untestable("sessions-strawman-session-required", "the server has no count tool (needing a session)")
    else:
        named = [token, token, *([other] if other else [])]
        counts = [tool_text(_in(peer, "tools/call", {"name": "count", "arguments": {}}, t)) for t in named]
        rec.record_counts("sessions-strawman-session-is-context", counts)
        refused = peer.call("tools/call", {"name": "count", "arguments": {}})
        message = member(refused.answer, "error", "message")
        right = refused.error_code == REQUIRED and isinstance(message, str) and message.startswith(REQUIRED_MESSAGE)
        rec.record("sessions-strawman-session-required", None if right else "not -32002 'Session required. …'")
    listed = _in(peer, "tools/list", None, token)
    rec.record("sessions-strawman-echo", _cookie_problem(listed.result, token), listed.summary())
    if "whoami" not in tools:
        rec.untestable("sessions-strawman-unknown-is-no-session", "the server has no whoami tool")
        return
    stranger = _in(peer, "tools/call", {"name": "whoami", "arguments": {}}, UNKNOWN_ID)
    problem = None if tool_text(stranger) == "none" else "a request naming an unknown id was not served sessionless"
    rec.record("sessions-strawman-unknown-is-no-session", problem, stranger.summary())


def _delete(peer: Peer, rec: Recorder, features: list[object], token: str) -> None:
    if "delete" not in features:
        rec.skip("sessions-strawman-delete", "the server does not list the delete feature")
        rec.skip("sessions-strawman-revoked", "the server does not list the delete feature")
        return
    deleted = peer.call("session/delete", {"id": token})
    right = member(deleted.result, "deleted") is True and _null_cookie(deleted.result)
    rec.record("sessions-strawman-delete", None if right else 'not {"deleted": true, "_meta": {"mcp/session": null}}')
    revoked = _null_cookie(_in(peer, "tools/list", None, token).result)
    rec.record("sessions-strawman-revoked", None if revoked else "a result in the deleted session: no null cookie")


def run_strawman(peer: Peer, rec: Recorder) -> None:
    """Every check of the strawman."""
    capability = member(peer.server_capabilities(), "experimental", "session")
    features = member(capability, "features")
    offered = features if isinstance(features, list) else [None]  # not a list: not shaped, and nothing offered
    shaped = member(capability, "version") == 1 and all(isinstance(feature, str) for feature in offered)
    rec.record("sessions-strawman-capability", None if shaped else f"experimental.session is {capability!r}")
    token = _create(peer, rec)
    other = member(peer.call("session/create", {"hints": {}}).result, "id")
    tools = tool_names(_in(peer, "tools/list", None, token))
    _lifecycle(peer, rec, offered, token)
    _using(peer, rec, tools, token, other if isinstance(other, str) else None)
    _delete(peer, rec, offered, token)
