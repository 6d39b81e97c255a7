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

from dataclasses import dataclass

from ._draft_session import is_rfc3339_utc
from ._fixture import COUNTER, call_params, record_counts, required_code
from ._model import Bail, Recorder
from ._peer import UNKNOWN_ID, Exchange, Peer, member, tool_names, tool_text

COOKIE = "mcp/session"
REQUIRED = -32002
REQUIRED_MESSAGE = "Session required. Call session/create first."
LABEL = "conformance-workspace"


@dataclass
class Strawman:
    """One run: the client, the recorder, and what the server offers."""

    peer: Peer
    rec: Recorder
    features: list[object]
    """What ``experimental.session.features`` lists: ``resume``, ``list``, ``delete``."""
    tools: frozenset[str] = frozenset()

    def call_in(self, token: str, method: str, params: dict[str, object] | None = None) -> Exchange:
        """``method`` called in the session ``token`` names."""
        return self.peer.call(method, params, meta={COOKIE: {"id": token}})

    def tool_in(self, token: str, tool: str) -> Exchange:
        """``tool`` called, with no arguments, in the session ``token`` names."""
        return self.call_in(token, "tools/call", call_params(tool))

    def unlisted(self, feature: str, *checks: str) -> bool:
        """Whether the server does not list ``feature``: then each of ``checks`` is SKIPPED, saying so."""
        if feature in self.features:
            return False
        for check in checks:
            self.rec.skip(check, f"the server does not list the {feature} feature")
        return True


def _cookie_problem(result: object, token: str) -> str | None:
    """Why ``result`` does not carry the cookie ``{"id": token, …}``, if it does not."""
    cookie = member(result, "_meta", COOKIE)
    if not isinstance(cookie, dict) or cookie.get("id") != token:
        return f'result._meta["{COOKIE}"] is {cookie!r}, not {{"id": <the session>, …}}'
    return None


def _null_cookie(result: object) -> bool:
    """Whether ``result`` says the session is gone: ``"mcp/session": null`` in its ``_meta``."""
    meta = member(result, "_meta")
    return isinstance(meta, dict) and COOKIE in meta and meta[COOKIE] is None


def _check_capability(rec: Recorder, capability: object) -> None:
    """``experimental.session``: an object, its ``features`` (if any) a list of names, at version 1."""
    features = member(capability, "features")
    names = isinstance(features, list) and all(isinstance(name, str) for name in features)
    shaped = isinstance(capability, dict) and (features is None or names)
    problem = None if shaped else f"experimental.session is {capability!r}"
    rec.record("sessions-strawman-capability", problem)
    version = member(capability, "version")
    problem = None if version == 1 else f"version is {version!r}, not 1"
    rec.record("sessions-strawman-capability-version", problem)


def _create(run: Strawman) -> str:
    """A session, created with a label: its id, its cookie, its expiry and its label."""
    check = "sessions-strawman-create"
    created = run.peer.call("session/create", {"hints": {"label": LABEL}})
    result = created.result
    token = member(result, "id")
    if not isinstance(token, str) or not token:
        run.rec.record(check, "no result.id (a non-empty string)", created.summary())
        raise Bail(check)
    run.rec.record(check, _cookie_problem(result, token), created.summary())
    _check_expiry(run.rec, created)
    label = member(result, "data", "label")
    problem = None if label == LABEL else f"result.data.label is {label!r}"
    run.rec.record("sessions-strawman-label-in-data", problem)
    return token


def _check_expiry(rec: Recorder, created: Exchange) -> None:
    """With ``--conventions``: the expiry of a new session, in its result and its cookie, is RFC 3339."""
    if not rec.applies("sessions-strawman-expiry"):
        return
    in_result = member(created.result, "expiry")
    in_cookie = member(created.result, "_meta", COOKIE, "expiry")
    expiries = [in_result, in_cookie]
    rfc3339 = all(map(is_rfc3339_utc, expiries))
    problem = None if rfc3339 else f"expiry and the cookie's are {expiries}"
    rec.record("sessions-strawman-expiry", problem, {"expiries": expiries})


def _resume(run: Strawman, token: str) -> None:
    """``session/resume``, where the server lists the feature, answers the session and its cookie."""
    check = "sessions-strawman-resume"
    if run.unlisted("resume", check):
        return
    resumed = run.peer.call("session/resume", {"id": token})
    same = member(resumed.result, "id") == token
    problem = None if same else "result.id is not the resumed session"
    problem = problem or _cookie_problem(resumed.result, token)
    run.rec.record(check, problem, resumed.summary())


def _list(run: Strawman) -> None:
    """``session/list``, where the server lists the feature: ``{sessions: [{id, …}], nextCursor?}``."""
    check = "sessions-strawman-list"
    if run.unlisted("list", check):
        return
    listed = run.peer.call("session/list", {})
    sessions = member(listed.result, "sessions")
    cursor = member(listed.result, "nextCursor")
    ids = [member(entry, "id") for entry in sessions] if isinstance(sessions, list) else None
    entries_ok = ids is not None and all(isinstance(id_, str) for id_ in ids)
    shaped = entries_ok and (cursor is None or isinstance(cursor, str))
    problem = None if shaped else "not {sessions: [{id, …}], nextCursor?}"
    run.rec.record(check, problem, listed.summary())


def _session_is_context(run: Strawman, named: list[str]) -> None:
    """The counter, called in each session of ``named``, counts each session's calls."""
    check = "sessions-strawman-session-is-context"
    if COUNTER not in run.tools:
        reason = f"the server has no '{COUNTER}' tool (the quickstart's counter), the one tool whose answer shows it"
        run.rec.skip(check, reason)
        return
    counts = [tool_text(run.tool_in(token, COUNTER)) for token in named]
    record_counts(run.rec, check, counts)


def _echo(run: Strawman, token: str) -> None:
    """A result in a session carries its cookie."""
    listed = run.call_in(token, "tools/list")
    problem = _cookie_problem(listed.result, token)
    run.rec.record("sessions-strawman-echo", problem, listed.summary())


def _session_required(run: Strawman) -> None:
    """The counter called outside a session is refused with the reference server's code and message."""
    check = "sessions-strawman-session-required"
    if COUNTER not in run.tools:
        run.rec.skip(check, f"the server has no '{COUNTER}' tool (the quickstart's)")
        return
    refused = run.peer.call("tools/call", call_params(COUNTER))
    message = member(refused.answer, "error", "message")
    sentence = f"'{REQUIRED_MESSAGE}' (the reference server)"
    code = required_code(REQUIRED, sentence, run.rec.settings)
    said = isinstance(message, str) and message.startswith(REQUIRED_MESSAGE)
    right = code.matches(refused.error_code) and said
    expected = f"{REQUIRED} '{REQUIRED_MESSAGE[:16]} …'"
    problem = None if right else f"not {expected}: {refused.summary()}"
    run.rec.record(check, problem, code.details())


def _unknown_is_no_session(run: Strawman) -> None:
    """A request naming an id the server never gave is served without a session."""
    check = "sessions-strawman-unknown-is-no-session"
    if "whoami" not in run.tools:
        run.rec.skip(check, "the server has no whoami tool (the quickstart's)")
        return
    stranger = run.tool_in(UNKNOWN_ID, "whoami")
    sessionless = tool_text(stranger) == "none"
    problem = None if sessionless else "a request naming an unknown id was not served sessionless"
    run.rec.record(check, problem, stranger.summary())


def _delete(run: Strawman, token: str) -> None:
    """``session/delete``, where the server lists the feature: deleted, the null cookie, and after it."""
    checks = (
        "sessions-strawman-delete",
        "sessions-strawman-delete-null-cookie",
        "sessions-strawman-revoked",
    )
    if run.unlisted("delete", *checks):
        return
    deleted = run.peer.call("session/delete", {"id": token})
    problem = None if deleted.result is not None else "session/delete failed"
    run.rec.record(checks[0], problem, deleted.summary())
    right = member(deleted.result, "deleted") is True and _null_cookie(deleted.result)
    problem = None if right else 'not {"deleted": true, "_meta": {"mcp/session": null}}'
    run.rec.record(checks[1], problem)
    if run.rec.applies(checks[2]):
        revoked = _null_cookie(run.call_in(token, "tools/list").result)
        problem = None if revoked else "a result in the deleted session: no null cookie"
        run.rec.record(checks[2], problem)


def run_strawman(peer: Peer, rec: Recorder) -> None:
    """Every check of the strawman."""
    capability = member(peer.server_capabilities(), "experimental", "session")
    features = member(capability, "features")
    run = Strawman(peer, rec, features if isinstance(features, list) else [])
    _check_capability(rec, capability)
    token = _create(run)
    other = member(peer.call("session/create", {"hints": {}}).result, "id")
    run.tools = tool_names(run.call_in(token, "tools/list"))
    _resume(run, token)
    _list(run)
    named = [token, token]
    if isinstance(other, str) and other:
        named.append(other)
    _session_is_context(run, named)
    if rec.conventions:
        _echo(run, token)
        _session_required(run)
        _unknown_is_no_session(run)
    _delete(run, token)
