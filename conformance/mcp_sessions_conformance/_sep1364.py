"""The scenarios ``sessions-sep1364-alt1`` and ``sessions-sep1364-alt2``: SEP-1364's two alternatives.

Both put a top-level ``sessionId`` on requests and responses and have
``Mcp-Session-Id`` mirror it; alternative 1 opens a session with
``session/create`` beside ``initialize``, alternative 2 with ``initialize``
itself (so it exists only in the handshake era). Fixture tool: ``count`` (the
quickstart's counter), for a session's context; without it that check is SKIPPED.
The SEP names no code for a request whose ``Mcp-Session-Id`` does not mirror its
``sessionId``: any error refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._fixture import COUNTER, record_counts
from ._model import LEGACY, MODERN, Recorder
from ._peer import ACCEPT, CLIENT_INFO, UNKNOWN_ID, Exchange, Peer, member, tool_names, tool_text

MEMBER = "sessionId"
_OPEN = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT_INFO}


@dataclass(frozen=True)
class Session:
    """An open session of either alternative: its id, and the client (connection) it was opened on."""

    peer: Peer
    token: str

    def call(self, method: str, params: dict[str, object] | None = None, *, header: str | None = None) -> Exchange:
        """A request in the session: the top-level ``sessionId``, mirrored in ``Mcp-Session-Id``."""
        return self.peer.call(method, params, top={MEMBER: self.token}, session_header=header or self.token)

    def count(self) -> str | None:
        """The fixture's counter of this session, one higher; ``None`` when the call did not succeed."""
        return tool_text(self.call("tools/call", {"name": COUNTER, "arguments": {}}))


def _is_empty_result(exchange: Exchange) -> bool:
    """An answer that is the SEP's ``Result {}`` (``resultType`` and ``_meta`` aside)."""
    return exchange.result is not None and not set(exchange.result) - {"resultType", "_meta"}


def _check_session_use(rec: Recorder, wire: str, first: Session, second: Session | None) -> None:
    """What both alternatives share: the id comes back, is the context, and the header mirrors it."""
    listed = first.call("tools/list")
    echoed = member(listed.answer, MEMBER)
    mirrored = listed.headers.get("mcp-session-id", first.token)
    problem = None if echoed == first.token else f"the response's top-level sessionId is {echoed!r}"
    rec.record(f"sessions-{wire}-response-session-id", problem, listed.summary())
    if COUNTER not in tool_names(listed):
        reason = f"the server has no '{COUNTER}' tool (the quickstart's counter), the one tool whose answer shows it"
        rec.skip(f"sessions-{wire}-session-is-context", reason)
    else:
        counts = [first.count(), first.count(), *([second.count()] if second else [])]
        record_counts(rec, f"sessions-{wire}-session-is-context", counts)
    other = first.call("tools/list", header="sess-conformance-mismatch")
    if other.result is not None:
        problem = f"a request whose Mcp-Session-Id differs from its sessionId: {other.summary()}"
    else:
        problem = None if mirrored == first.token else f"the response's Mcp-Session-Id is {mirrored!r}"
    rec.record(f"sessions-{wire}-header-mirrors", problem, other.summary())


def _create(peer: Peer, params: dict[str, object], top: str | None = None) -> tuple[Exchange, str | None]:
    created = peer.call("session/create", params, top={MEMBER: top}, session_header=top if top else None)
    token = member(created.result, MEMBER)
    return created, token if isinstance(token, str) and token else None


def _second_client(peer: Peer) -> Peer:
    """Another client for a second session: on the 2025 era its own transport session, as a new client has."""
    if peer.era == MODERN:
        return peer
    fresh = peer.fresh()
    fresh.handshake()
    return fresh


def run_alt1(peer: Peer, rec: Recorder) -> None:
    """Every check of SEP-1364 alternative 1."""
    required = member(peer.server_capabilities(), "sessions", "required")
    problem = None if isinstance(required, bool) else f"capabilities.sessions.required is {required!r}"
    rec.record("sessions-sep1364-alt1-capability", problem)
    created, token = _create(peer, {"capabilities": {}})
    rec.gate("sessions-sep1364-alt1-create", None if token else "no result.sessionId", created.summary())
    assert token is not None
    other_peer = _second_client(peer)
    _, other = _create(other_peer, {"capabilities": {}})
    first, second = Session(peer, token), Session(other_peer, other) if other else None
    _check_session_use(rec, "sep1364-alt1", first, second)
    sessionless = peer.call("tools/list", top={MEMBER: None})
    served = sessionless.result is not None
    problem = None
    if served and required is True:
        problem = "sessions.required is true, yet a request with a null sessionId was served"
    elif not served and required is not True:
        problem = "sessions are not required, yet a request with a null sessionId was refused"
    rec.record("sessions-sep1364-alt1-required-matches-capability", problem, sessionless.summary())
    refreshed, same = _create(peer, {MEMBER: token, "capabilities": {}}, token)
    problem = None if same == token else f"refreshing named another session: {refreshed.summary()}"
    rec.record("sessions-sep1364-alt1-refresh", problem)
    invalid, _ = _create(peer, {MEMBER: UNKNOWN_ID, "capabilities": {}})
    problem = None if invalid.result is None else "session/create with an invalid sessionId was not an error"
    rec.record("sessions-sep1364-alt1-refresh-invalid", problem, invalid.summary())
    _check_end(rec, "sep1364-alt1", second, "session/delete")


def _check_end(rec: Recorder, wire: str, session: Session | None, method: str) -> None:
    """Ending a session: the SEP's empty result, and the session is gone."""
    ended, gone = f"sessions-{wire}-{method.rpartition('/')[2]}", f"sessions-{wire}-ended-session"
    if session is None:
        for check in (ended, gone):
            rec.untestable(check, "a second session could not be opened to end")
        return
    answer = session.call(method, {MEMBER: session.token})
    rec.record(ended, None if _is_empty_result(answer) else f"not an empty result: {answer.summary()}")
    after = session.call("tools/list")
    problem = None if after.result is None else f"a request in the ended session was served: {after.summary()}"
    rec.record(gone, problem)


def _open(peer: Peer, token: str | None) -> Exchange:
    """Alternative 2's ``initialize`` with a top-level ``sessionId`` (``None``: a new session)."""
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": _OPEN, MEMBER: token}
    return peer.post(body, ACCEPT, 0)


def _opened(peer: Peer) -> Session | None:
    """A new session of alternative 2 on a client of its own, ``notifications/initialized`` sent."""
    fresh = peer.fresh()
    opened = _open(fresh, None)
    token = member(opened.answer, MEMBER)
    if not isinstance(token, str) or not token or opened.result is None:
        return None
    fresh.initialized(top={MEMBER: token}, session_header=token)
    return Session(fresh, token)


def run_alt2(peer: Peer, rec: Recorder) -> None:
    """Every check of SEP-1364 alternative 2 (the handshake era only)."""
    first = _opened(peer)
    rec.gate("sessions-sep1364-alt2-open", None if first else "initialize with a null sessionId opened no session")
    assert first is not None
    second = _opened(peer)
    _check_session_use(rec, "sep1364-alt2", first, second)
    resumed = member(_open(first.peer, first.token).answer, MEMBER)
    problem = None if resumed == first.token else f"initialize with a valid sessionId answered {resumed!r}"
    rec.record("sessions-sep1364-alt2-resume", problem)
    invalid = _open(peer.fresh(), UNKNOWN_ID)
    problem = None if invalid.result is None else "initialize with an invalid sessionId was not an error"
    rec.record("sessions-sep1364-alt2-invalid", problem, invalid.summary())
    _check_end(rec, "sep1364-alt2", second, "terminate")
    if second is not None:
        again = member(_open(second.peer, second.token).answer, "result")
        problem = None if again is None else "initialize with a terminated sessionId was not an error"
        rec.record("sessions-sep1364-alt2-ended-session", problem)
