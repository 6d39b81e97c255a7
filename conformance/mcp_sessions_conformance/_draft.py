"""The scenario ``sessions-draft``: the data-layer sessions draft (transports-wg PR #20).

The default run checks the draft's own sentences: what it needs of the server beyond the wire is one
tool it can call (``--tool``, or one ``tools/list`` offers) and, for a session's context, the
quickstart's counter ``count``; a check whose fixture is missing is SKIPPED. ``--conventions`` adds
this project's own rules (exact codes where the draft names none, batches, signed state, the HTTP
status table) and the quickstart's other tools (``set_mode``, ``get_mode``, ``countdown``). The
checks of a session's creation and use are in ``_draft_session``; here are those of its errors, of
client-held state, of deletion and of batches.
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
    find_probe,
)
from ._fixture import NO_TOOL, pick_tool
from ._model import MODERN, Recorder
from ._peer import MISMATCH, UNKNOWN_ID, Peer, member, tool_names, tool_text

INVALID_REQUEST: Final = -32600
LONG_UNKNOWN_ID: Final = "sess-conformance-" + "x" * 283
"""An unknown id of 300 characters: ``-32043`` sends back its first 256."""
NOT_FOUND_DATA_LIMIT: Final = 256
NOT_FOUND_DATA: Final = "sessions-draft-not-found-data"
MADE_UP_STATE: Final = "eyJrIjoidiJ9"
"""The draft's test vector's state (``{"k":"v"}``), signed by nobody."""
_DELETE_CHECKS: Final = (
    "sessions-draft-delete",
    "sessions-draft-deleted-session",
    "sessions-draft-delete-unknown",
)


def run_draft(peer: Peer, rec: Recorder) -> None:
    """Every check of the draft wire, in an order where each finds what it needs."""
    draft = Draft(peer, rec)
    check_capability(draft)
    first = check_create(draft)
    _, second = draft.create()
    check_ids(draft, first, second)
    listed = check_legacy_header(draft, first)
    if listed.result is None:  # a server that lists its tools only outside a session
        listed = peer.call("tools/list")
    draft.tools = tool_names(listed)
    draft.tool = pick_tool(listed, rec.settings)
    find_probe(draft)
    check_context(draft, first, second)  # first: the counter starts at 1 in a new session
    sessionless = check_sessionless(draft)
    check_echo(draft, listed, sessionless, first)
    check_required(draft, first)
    check_not_found(draft, first)
    check_malformed(draft)
    check_create_refusals(draft, first)
    check_mismatch(draft, first)
    check_state(draft, first, second)
    check_errors_carry_no_session(draft, first)
    if second is not None:
        check_delete(draft, second)
    else:
        for check in _DELETE_CHECKS:
            rec.untestable(check, "a second sessions/create returned no session to delete")
    check_batches(draft)
    check_not_found_data(draft)
    check_http_status(draft)


def tampered(token: str) -> str:
    """``token`` with its middle character changed: a forgery of a real session id, never the id itself."""
    middle = len(token) // 2
    return token[:middle] + ("B" if token[middle] == "A" else "A") + token[middle + 1 :]


def check_not_found(draft: Draft, session: str) -> None:
    """An id the server never minted, or a forgery of one it did, is SESSION_NOT_FOUND, on the probe."""
    check = "sessions-draft-session-not-found"
    if not draft.validated and draft.tool is None:
        reason = (
            "tools/list in an unknown session was served: the server may check sessions only where "
            f"they are used, and {NO_TOOL}"
        )
        draft.rec.skip(check, reason)
        return
    code = draft.not_found_code
    for case, sent in (("unknown", UNKNOWN_ID), ("forged", tampered(session))):
        answer = draft.in_session(sent)
        problem = draft.error(answer, code, sent)
        details = {"case": case, "probe": draft.probe_name, **code.details(), **answer.summary()}
        problem = problem and f"{case}, on {draft.probe_name}: {problem}"
        draft.rec.record(check, problem, details)


def check_malformed(draft: Draft) -> None:
    """Session metadata that is not an object, or a sessionId that is not a string, is an invalid request."""
    check = "sessions-draft-malformed-metadata"
    if not draft.rec.applies(check):
        return
    cases = (("not an object", "not-an-object"), ("sessionId not a string", {"sessionId": 5}))
    for case, value in cases:
        answer = draft.peer.call("tools/list", meta={KEY: value})
        problem = draft.error(answer, INVALID_REQUEST)
        draft.rec.record(check, problem and f"{case}: {problem}", {"case": case})


def check_create_refusals(draft: Draft, session: str) -> None:
    """``sessions/create`` with session metadata is invalid; with params it does not know, it still creates."""
    check = "sessions-draft-create-with-session"
    if not draft.rec.applies(check):
        return
    carrying = draft.peer.call("sessions/create", meta={KEY: {"sessionId": session}})
    draft.rec.record(check, draft.error(carrying, INVALID_REQUEST), carrying.summary())
    extra = draft.peer.call("sessions/create", {"conformanceProbe": "an unknown param"})
    created = isinstance(member(extra.result, "session", "sessionId"), str)
    problem = None if created else f"sessions/create with an unknown param: {extra.summary()}"
    draft.rec.record("sessions-draft-create-ignores-unknown-params", problem)


def check_mismatch(draft: Draft, session: str) -> None:
    """2026-07-28: an ``Mcp-Session-Id`` that differs from the metadata's sessionId is a header mismatch."""
    check = "sessions-draft-header-mismatch"
    if draft.rec.applies(check):
        answer = draft.use("tools/list", session=session, header="sess-conformance-mismatch")
        draft.rec.record(check, draft.error(answer, MISMATCH), answer.summary())


def _state_set_by(draft: Draft, mode: str, session: str, state: str | None) -> str | None:
    """The state the echo carries after ``set_mode`` to ``mode``, called with ``state``."""
    answer = draft.tool_call("set_mode", {"mode": mode}, session=session, state=state)
    echoed = member(echo_of(answer), "state")
    return echoed if isinstance(echoed, str) else None


def _mode_seen(draft: Draft, session: str, state: str | None) -> str | None:
    """What ``get_mode``, called with ``state``, answers."""
    return tool_text(draft.tool_call("get_mode", session=session, state=state))


def check_state(draft: Draft, first: str, second: str | None) -> None:
    """State goes out in the echo and comes back from the client; edited or borrowed state is refused."""
    check = "sessions-draft-state"
    if not draft.rec.applies(check):
        return
    forged = draft.in_session(first, state=MADE_UP_STATE)
    problems = [draft.error(forged, draft.not_found_code, first)]
    if not {"set_mode", "get_mode"} <= draft.tools:
        draft.rec.skip(check, "the server has no set_mode and get_mode tools (the quickstart's)")
    else:
        alpha = _state_set_by(draft, "alpha", first, None)
        beta = _state_set_by(draft, "beta", first, alpha)
        seen = [_mode_seen(draft, first, state) for state in (alpha, beta, alpha)]
        if alpha is None or beta is None:
            state_problem: str | None = "the echo of a tool that set the state carries no state"
        else:
            state_problem = None if seen == ["alpha", "beta", "alpha"] else f"get_mode saw {seen}"
        draft.rec.record(check, state_problem, {"seen": seen})
        if alpha is not None and second is not None and second != first:
            borrowed = draft.in_session(second, state=alpha)
            problems.append(draft.error(borrowed, draft.not_found_code, second))
    problem = next((p for p in problems if p), None)
    draft.rec.record("sessions-draft-state-protected", problem, {"cases": len(problems)})


def check_errors_carry_no_session(draft: Draft, session: str) -> None:
    """An error answer to a request in a live session carries no session metadata."""
    check = "sessions-draft-no-echo-on-errors"
    if not draft.rec.applies(check):
        return
    answer = draft.use("conformance/unknown-method", session=session)
    if answer.answer is None or "error" not in answer.answer:
        draft.rec.skip(check, "an unknown method in a session was not an error")
        return
    problem = "the error carries session metadata" if KEY in json.dumps(answer.answer) else None
    draft.rec.record(check, problem, answer.summary())


def check_delete(draft: Draft, session: str) -> None:
    """``sessions/delete``: ``{}``; then every use of the session, and deleting an unknown one, is not found."""
    deleted = draft.use("sessions/delete", session=session)
    result = deleted.result
    extra = None if result is None else sorted(set(result) - {"resultType", "_meta"})
    problem = None if extra == [] else f"the result is not {{}}: {deleted.summary()}"
    draft.rec.record("sessions-draft-delete", problem, deleted.summary())
    code = draft.not_found_code
    after = {
        "the probe": draft.in_session(session),
        "sessions/delete again": draft.use("sessions/delete", session=session),
    }
    for case, answer in after.items():
        problem = draft.error(answer, code, session)
        details = {"case": case, "probe": draft.probe_name, **code.details(), **answer.summary()}
        problem = problem and f"{case}: {problem}"
        draft.rec.record("sessions-draft-deleted-session", problem, details)
    unknown_id = LONG_UNKNOWN_ID if draft.rec.conventions else UNKNOWN_ID  # the 256-character cut is ours
    unknown = draft.use("sessions/delete", session=unknown_id)
    problem = draft.error(unknown, code, unknown_id)
    details = {**code.details(), **unknown.summary()}
    draft.rec.record("sessions-draft-delete-unknown", problem, details)


def check_not_found_data(draft: Draft) -> None:
    """Every SESSION_NOT_FOUND the run saw says which session: what the client sent. An id over 256 characters is
    compared only with ``--conventions``, which cut it to 256 (``sessions-draft-not-found-data-cut``)."""
    short = [(sent, data) for sent, data in draft.not_found if len(sent) <= NOT_FOUND_DATA_LIMIT]
    long = [(sent, data) for sent, data in draft.not_found if len(sent) > NOT_FOUND_DATA_LIMIT]
    for check, seen, limit in ((NOT_FOUND_DATA, short, None), (f"{NOT_FOUND_DATA}-cut", long, 256)):
        if not seen:
            draft.rec.skip(check, "the run provoked no SESSION_NOT_FOUND for such an id")
            continue
        wrong = [sent[:40] for sent, data in seen if member(data, "sessionId") != sent[:limit]]
        problem = f"error.data.sessionId is not what was sent for {wrong}" if wrong else None
        draft.rec.record(check, problem, {"answers": len(seen)})


def check_http_status(draft: Draft) -> None:
    """Each session error the run provoked came with the HTTP status of its era's table."""
    check = "sessions-draft-error-http-status"
    if not draft.rec.applies(check):
        return
    if not draft.errors:
        draft.rec.skip(check, "the run provoked no session error")
        return
    wrong = []
    for status, code in draft.errors:
        expected = _http_status(draft.peer.era, code)
        if status != expected:
            wrong.append(f"{code} in HTTP {status} (expected {expected})")
    problem = "; ".join(sorted(set(wrong))) or None
    draft.rec.record(check, problem, {"errors": len(draft.errors)})


def _http_status(era: str, code: object) -> int:
    """The HTTP status of a session error: 200 in the 2025 era; on 2026-07-28, by its code."""
    if era != MODERN:
        return 200
    if code == -32601:
        return 404
    return 400 if code in (-32700, -32600, -32602, -32020) else 200


def check_batches(draft: Draft) -> None:
    """2025 era: a batch naming a session method, or a bad session, is answered whole, and nothing of it runs."""
    if not draft.rec.applies("sessions-draft-batch-session-method"):
        return
    unknown = {KEY: {"sessionId": UNKNOWN_ID}}
    cases = (
        ("sessions-draft-batch-session-method", "sessions/create", None, INVALID_REQUEST),
        ("sessions-draft-batch-bad-session", "tools/list", unknown, NOT_FOUND),
    )
    for check, method, meta, first_code in cases:
        batch = [draft.peer.message(method, meta=meta), draft.peer.message("tools/list")]
        answer = draft.peer.post(batch, draft.peer.headers({}))
        codes = {message.get("id"): member(message, "error", "code") for message in answer.messages}
        if not {element["id"] for element in batch} & set(codes):  # whatever id the refusal carries
            reason = "the server refuses every batch as a whole (batches left JSON-RPC over MCP in 2025-06-18)"
            draft.rec.skip(check, reason, answer.summary())
            continue
        expected = {batch[0]["id"]: first_code, batch[1]["id"]: INVALID_REQUEST}
        problem = None if codes == expected else f"answered {codes}, expected {expected}"
        draft.rec.record(check, problem, {"status": answer.status})
