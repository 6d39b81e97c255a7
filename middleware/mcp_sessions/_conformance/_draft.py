"""The scenario ``sessions-draft``: the data-layer sessions draft (transports-wg PR #20, 2026-03-13).

The fixture it needs from the server: the quickstart's tools (``count``,
``set_mode``, ``get_mode``, ``countdown``), each needing a session except
``countdown``. A check whose tool is missing fails as not testable. The checks
of a session's creation and use are in ``_draft_session``; here are those of
its errors, of client-held state, of deletion and of batches.
"""

from __future__ import annotations

import json
from typing import Final

from ._draft_session import (
    KEY,
    NOT_FOUND,
    Draft,
    check_capability,
    check_context,
    check_create,
    check_echo,
    check_ids,
    check_legacy_header,
    check_required,
    check_sessionless,
    echo_of,
)
from ._model import MODERN, Recorder
from ._peer import MISMATCH, UNKNOWN_ID, Peer, member, tool_names, tool_text

INVALID_REQUEST: Final = -32600
LONG_UNKNOWN_ID: Final = "sess-conformance-" + "x" * 283
"""An unknown id of 300 characters: ``-32043`` sends back its first 256."""
NOT_FOUND_DATA_LIMIT: Final = 256
MADE_UP_STATE: Final = "eyJrIjoidiJ9"
"""The draft's test vector's state (``{"k":"v"}``), signed by nobody."""


def run_draft(peer: Peer, rec: Recorder) -> None:
    """Every check of the draft wire, in an order where each finds what it needs."""
    draft = Draft(peer, rec)
    check_capability(draft)
    first = check_create(draft)
    _, second = draft.create()
    check_ids(draft, first, second)
    listed = check_legacy_header(draft, first)
    draft.tools = tool_names(listed)
    sessionless = check_sessionless(draft)
    check_echo(draft, listed, sessionless, first)
    check_context(draft, first, second)
    check_required(draft)
    check_not_found(draft, first)
    check_malformed(draft)
    check_create_refusals(draft, first)
    check_mismatch(draft, first)
    check_state(draft, first, second)
    check_errors_carry_no_session(draft, first)
    if second is not None:
        check_delete(draft, second)
    else:
        for check in ("sessions-draft-delete", "sessions-draft-deleted-session", "sessions-draft-delete-unknown"):
            rec.untestable(check, "a second sessions/create returned no session to delete")
    check_batches(draft)
    check_not_found_data(draft)
    check_http_status(draft)


def tampered(token: str) -> str:
    """``token`` with its middle character changed: a forgery of a real session id, never the id itself."""
    middle = len(token) // 2
    return token[:middle] + ("B" if token[middle] == "A" else "A") + token[middle + 1 :]


def check_not_found(draft: Draft, session: str) -> None:
    """An id the server never minted, or a forgery of one it did, is SESSION_NOT_FOUND."""
    for case, sent in (("unknown", UNKNOWN_ID), ("forged", tampered(session))):
        problem = draft.error(draft.use("tools/list", session=sent), NOT_FOUND, sent)
        draft.rec.record("sessions-draft-session-not-found", problem and f"{case}: {problem}", {"case": case})


def check_malformed(draft: Draft) -> None:
    """Session metadata that is not an object, or a sessionId that is not a string, is an invalid request."""
    for case, value in (("not an object", "not-an-object"), ("sessionId not a string", {"sessionId": 5})):
        problem = draft.error(draft.peer.call("tools/list", meta={KEY: value}), INVALID_REQUEST)
        draft.rec.record("sessions-draft-malformed-metadata", problem and f"{case}: {problem}", {"case": case})


def check_create_refusals(draft: Draft, session: str) -> None:
    """``sessions/create`` with session metadata is invalid; with params it does not know, it still creates."""
    carrying = draft.peer.call("sessions/create", meta={KEY: {"sessionId": session}})
    draft.rec.record("sessions-draft-create-with-session", draft.error(carrying, INVALID_REQUEST), carrying.summary())
    extra = draft.peer.call("sessions/create", {"conformanceProbe": "an unknown param"})
    created = isinstance(member(extra.result, "session", "sessionId"), str)
    problem = None if created else f"sessions/create with an unknown param: {extra.summary()}"
    draft.rec.record("sessions-draft-create-ignores-unknown-params", problem)


def check_mismatch(draft: Draft, session: str) -> None:
    """2026-07-28: an ``Mcp-Session-Id`` that differs from the metadata's sessionId is a header mismatch."""
    if draft.rec.applies("sessions-draft-header-mismatch"):
        answer = draft.use("tools/list", session=session, header="sess-conformance-mismatch")
        draft.rec.record("sessions-draft-header-mismatch", draft.error(answer, MISMATCH), answer.summary())


def _state_set_by(draft: Draft, mode: str, session: str, state: str | None) -> str | None:
    echoed = member(echo_of(draft.tool("set_mode", {"mode": mode}, session=session, state=state)), "state")
    return echoed if isinstance(echoed, str) else None


def check_state(draft: Draft, first: str, second: str | None) -> None:
    """State goes out in the echo and comes back from the client; edited or borrowed state is refused."""
    forged = draft.use("tools/list", session=first, state=MADE_UP_STATE)
    problems = [draft.error(forged, NOT_FOUND, first)]
    if not {"set_mode", "get_mode"} <= draft.tools:
        draft.rec.untestable("sessions-draft-state", "the server has no set_mode and get_mode tools")
    else:
        alpha = _state_set_by(draft, "alpha", first, None)
        beta = _state_set_by(draft, "beta", first, alpha)
        seen = [tool_text(draft.tool("get_mode", session=first, state=state)) for state in (alpha, beta, alpha)]
        if alpha is None or beta is None:
            state_problem: str | None = "the echo of a tool that set the state carries no state"
        else:
            state_problem = None if seen == ["alpha", "beta", "alpha"] else f"get_mode saw {seen}"
        draft.rec.record("sessions-draft-state", state_problem, {"seen": seen})
        if alpha is not None and second is not None and second != first:
            borrowed = draft.use("tools/list", session=second, state=alpha)
            problems.append(draft.error(borrowed, NOT_FOUND, second))
    problem = next((p for p in problems if p), None)
    draft.rec.record("sessions-draft-state-protected", problem, {"cases": len(problems)})


def check_errors_carry_no_session(draft: Draft, session: str) -> None:
    """An error answer to a request in a live session carries no session metadata."""
    answer = draft.use("conformance/unknown-method", session=session)
    if answer.answer is None or "error" not in answer.answer:
        draft.rec.untestable("sessions-draft-no-echo-on-errors", "an unknown method in a session was not an error")
        return
    problem = "the error carries session metadata" if KEY in json.dumps(answer.answer) else None
    draft.rec.record("sessions-draft-no-echo-on-errors", problem, answer.summary())


def check_delete(draft: Draft, session: str) -> None:
    """``sessions/delete``: ``{}``; then every use of the session, and deleting an unknown one, is not found."""
    deleted = draft.use("sessions/delete", session=session)
    extra = None if deleted.result is None else sorted(set(deleted.result) - {"resultType", "_meta"})
    problem = None if extra == [] else f"the result is not {{}}: {deleted.summary()}"
    draft.rec.record("sessions-draft-delete", problem, deleted.summary())
    for case, method in (("a request", "tools/list"), ("sessions/delete again", "sessions/delete")):
        problem = draft.error(draft.use(method, session=session), NOT_FOUND, session)
        draft.rec.record("sessions-draft-deleted-session", problem and f"{case}: {problem}", {"case": case})
    unknown = draft.use("sessions/delete", session=LONG_UNKNOWN_ID)
    problem = draft.error(unknown, NOT_FOUND, LONG_UNKNOWN_ID)
    draft.rec.record("sessions-draft-delete-unknown", problem, unknown.summary())


def check_not_found_data(draft: Draft) -> None:
    """Every SESSION_NOT_FOUND the run saw says which session: what the client sent, cut to 256 characters."""
    if not draft.not_found:
        draft.rec.untestable("sessions-draft-not-found-data", "the run provoked no -32043")
        return
    wrong = [sent[:40] for sent, data in draft.not_found if member(data, "sessionId") != sent[:NOT_FOUND_DATA_LIMIT]]
    longest = max(len(sent) for sent, _ in draft.not_found)
    details = {"answers": len(draft.not_found), "cutExercised": longest > NOT_FOUND_DATA_LIMIT}
    problem = f"error.data.sessionId is not what was sent (cut to 256) for {wrong}" if wrong else None
    draft.rec.record("sessions-draft-not-found-data", problem, details)


def check_http_status(draft: Draft) -> None:
    """Each session error the run provoked came with the HTTP status of its era's table."""
    if not draft.errors:
        draft.rec.untestable("sessions-draft-error-http-status", "the run provoked no session error")
        return
    wrong = []
    for status, code in draft.errors:
        expected = 200
        if draft.peer.era == MODERN:
            expected = 404 if code == -32601 else 400 if code in (-32700, -32600, -32602, -32020) else 200
        if status != expected:
            wrong.append(f"{code} in HTTP {status} (expected {expected})")
    problem = "; ".join(sorted(set(wrong))) or None
    draft.rec.record("sessions-draft-error-http-status", problem, {"errors": len(draft.errors)})


def check_batches(draft: Draft) -> None:
    """2025 era: a batch naming a session method, or a bad session, is answered whole, and nothing of it runs."""
    if not draft.rec.applies("sessions-draft-batch-session-method"):
        return
    cases = (
        ("sessions-draft-batch-session-method", "sessions/create", None, INVALID_REQUEST),
        ("sessions-draft-batch-bad-session", "tools/list", {KEY: {"sessionId": UNKNOWN_ID}}, NOT_FOUND),
    )
    for check, method, meta, first_code in cases:
        batch = [draft.peer.message(method, meta=meta), draft.peer.message("tools/list")]
        answer = draft.peer.post(batch, draft.peer.headers({}))
        codes = {message.get("id"): member(message, "error", "code") for message in answer.messages}
        if len(answer.messages) == 1 and member(answer.messages[0], "id") is None:
            draft.rec.skip(check, "the server refuses every batch as a whole: nothing of it runs")
            continue
        expected = {batch[0]["id"]: first_code, batch[1]["id"]: INVALID_REQUEST}
        problem = None if codes == expected else f"answered {codes}, expected {expected}"
        draft.rec.record(check, problem, {"status": answer.status})
