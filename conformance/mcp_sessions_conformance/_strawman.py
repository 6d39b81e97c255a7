"""The scenario ``sessions-strawman``: the working group's first shapes (``session/*``, ``_meta["mcp/session"]``).

The pack speaks as the group's reference client: it declares
``experimental.session`` in its capabilities, names its session as
``{"id"}`` under ``mcp/session`` and reads the cookie back from each result.
The default run checks what PR #20 itself says of these shapes; the reference
server's details (version 1, RFC 3339 expiries, the label in ``data.label``,
the null cookie on delete and after it, ``-32002``) are this project's reading,
checked with ``--conventions``. Fixture tools: ``count`` (the session's
counter), and with ``--conventions`` ``whoami``; a check whose tool is missing
is SKIPPED.
"""

from __future__ import annotations

from ._draft_session import is_rfc3339_utc
from ._fixture import COUNTER, record_counts, required_code
from ._model import Bail, Recorder
from ._peer import UNKNOWN_ID, Exchange, Peer, member, tool_names, tool_text

COOKIE = "mcp/session"
REQUIRED = -32002
REQUIRED_MESSAGE = "Session required. Call session/create first."
LABEL = "conformance-workspace"


def _cookie_problem(result: object, token: str) -> str | None:
    """Why ``result`` does not carry the cookie ``{"id": token, …}``, if it does not."""
    cookie = member(result, "_meta", COOKIE)
    if not isinstance(cookie, dict) or cookie.get("id") != token:
        return f'result._meta["{COOKIE}"] is {cookie!r}, not {{"id": <the session>, …}}'
    return None


def _check_expiry(rec: Recorder, created: Exchange) -> None:
    """With ``--conventions``: the expiry of a new session, in its result and its cookie, is RFC 3339."""
    if not rec.applies("sessions-strawman-expiry"):
        return
    expiries = [member(created.result, "expiry"), member(created.result, "_meta", COOKIE, "expiry")]
    problem = None if all(map(is_rfc3339_utc, expiries)) else f"expiry and the cookie's are {expiries}"
    rec.record("sessions-strawman-expiry", problem, {"expiries": expiries})


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
    rec.record("sessions-strawman-create", _cookie_problem(result, token), created.summary())
    _check_expiry(rec, created)
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
    entries_ok = isinstance(sessions, list) and all(isinstance(member(entry, "id"), str) for entry in sessions)
    shaped = entries_ok and (cursor is None or isinstance(cursor, str))
    problem = None if shaped else "not {sessions: [{id, …}], nextCursor?}"
    rec.record("sessions-strawman-list", problem, listed.summary())


def _using(peer: Peer, rec: Recorder, tools: frozenset[str], token: str, other: str | None) -> None:
    if COUNTER not in tools:
        reason = f"the server has no '{COUNTER}' tool (the quickstart's counter), the one tool whose answer shows it"
        rec.skip("sessions-strawman-session-is-context", reason)
    else:
        named = [token, token, *([other] if other else [])]
        counts = [tool_text(_in(peer, "tools/call", {"name": COUNTER, "arguments": {}}, t)) for t in named]
        record_counts(rec, "sessions-strawman-session-is-context", counts)
    if not rec.conventions:
        return
    listed = _in(peer, "tools/list", None, token)
    rec.record("sessions-strawman-echo", _cookie_problem(listed.result, token), listed.summary())
    if COUNTER not in tools:
        rec.skip("sessions-strawman-session-required", f"the server has no '{COUNTER}' tool (the quickstart's)")
    else:
        refused = peer.call("tools/call", {"name": COUNTER, "arguments": {}})
        message = member(refused.answer, "error", "message")
        code = required_code(REQUIRED, f"'{REQUIRED_MESSAGE}' (the reference server)", rec.settings)
        right = code.matches(refused.error_code) and isinstance(message, str) and message.startswith(REQUIRED_MESSAGE)
        problem = None if right else f"not {REQUIRED} '{REQUIRED_MESSAGE[:16]} …': {refused.summary()}"
        rec.record("sessions-strawman-session-required", problem, code.details())
    if "whoami" not in tools:
        rec.skip("sessions-strawman-unknown-is-no-session", "the server has no whoami tool (the quickstart's)")
        return
    stranger = _in(peer, "tools/call", {"name": "whoami", "arguments": {}}, UNKNOWN_ID)
    problem = None if tool_text(stranger) == "none" else "a request naming an unknown id was not served sessionless"
    rec.record("sessions-strawman-unknown-is-no-session", problem, stranger.summary())


def _delete(peer: Peer, rec: Recorder, features: list[object], token: str) -> None:
    checks = ("sessions-strawman-delete", "sessions-strawman-delete-null-cookie", "sessions-strawman-revoked")
    if "delete" not in features:
        for check in checks:
            rec.skip(check, "the server does not list the delete feature")
        return
    deleted = peer.call("session/delete", {"id": token})
    rec.record(checks[0], None if deleted.result is not None else "session/delete failed", deleted.summary())
    right = member(deleted.result, "deleted") is True and _null_cookie(deleted.result)
    rec.record(checks[1], None if right else 'not {"deleted": true, "_meta": {"mcp/session": null}}')
    if rec.applies(checks[2]):
        revoked = _null_cookie(_in(peer, "tools/list", None, token).result)
        rec.record(checks[2], None if revoked else "a result in the deleted session: no null cookie")


def run_strawman(peer: Peer, rec: Recorder) -> None:
    """Every check of the strawman."""
    capability = member(peer.server_capabilities(), "experimental", "session")
    features = member(capability, "features")
    offered = features if isinstance(features, list) else []
    listed = features is None or (isinstance(features, list) and all(isinstance(name, str) for name in features))
    shaped = isinstance(capability, dict) and listed
    rec.record("sessions-strawman-capability", None if shaped else f"experimental.session is {capability!r}")
    version = member(capability, "version")
    rec.record("sessions-strawman-capability-version", None if version == 1 else f"version is {version!r}, not 1")
    token = _create(peer, rec)
    other = member(peer.call("session/create", {"hints": {}}).result, "id")
    tools = tool_names(_in(peer, "tools/list", None, token))
    _lifecycle(peer, rec, offered, token)
    _using(peer, rec, tools, token, other if isinstance(other, str) else None)
    _delete(peer, rec, offered, token)
