"""The draft wire's run (its client, codes and findings) and its checks of advertising, creating and using a session.

A request "in a session" is sent on the probe: ``tools/list``, or a call of the fixture tool when the
server checks sessions only where they are used (``tools/list`` in an unknown session was served); each
check's details say which.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from ._fixture import COUNTER, NO_TOOL, Code, call_params, not_found_code, record_counts, required_code
from ._model import MODERN, Recorder
from ._peer import UNKNOWN_ID, Exchange, Peer, member, tool_text

KEY: Final = "io.modelcontextprotocol/session"
EXTENSION: Final = "io.modelcontextprotocol/sessions"
NOT_FOUND: Final = -32043
NOT_FOUND_SENTENCE: Final = "Unknown sessions MUST result in a `-32043 SESSION_NOT_FOUND` Error. (PR #20)"
REQUIRED: Final = -32044
REQUIRED_SENTENCE: Final = 'the draft\'s test vector: {"error":{"code":-32044,"message":"Session required"}}'
_DATE: Final = r"\d{4}-\d{2}-\d{2}"
_RFC3339: Final = re.compile(_DATE + r"[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]00:00)")
_ISO8601: Final = re.compile(_DATE + r"([Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}:?\d{2})?)?")


def echo_of(exchange: Exchange) -> object:
    """The session metadata a result carries, ``None`` when there is none."""
    return member(exchange.result, "_meta", KEY)


def is_iso8601(value: object) -> bool:
    """Whether ``value`` is an ISO 8601 date or date-time (extended format) naming a real day and time."""
    return _names_a_real_time(value, _ISO8601)


def is_rfc3339_utc(value: object) -> bool:
    """Whether ``value`` is an RFC 3339 timestamp in UTC (``Z`` or a zero offset) naming a real instant."""
    return _names_a_real_time(value, _RFC3339)


def _names_a_real_time(value: object, form: re.Pattern[str]) -> bool:
    if not isinstance(value, str) or not form.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


@dataclass
class Draft:
    """One run of the draft wire: the client, the recorder, and what the checks found on the way."""

    peer: Peer
    rec: Recorder
    tools: frozenset[str] = frozenset()
    tool: str | None = None
    """The tool the checks call (``--tool``, or one ``tools/list`` offers that takes no arguments)."""
    probe: tuple[str, dict[str, object] | None] = ("tools/list", None)
    """The request sent "in a session": ``tools/list``, or the tool's call where only tools check sessions."""
    validated: bool = True
    """Whether the probe in an unknown session was refused (the server checks sessions there)."""
    errors: list[tuple[int, object]] = field(default_factory=list)
    """``(HTTP status, error code)`` of each session error the run provoked."""
    not_found: list[tuple[str, object]] = field(default_factory=list)
    """``(the sessionId sent, error.data)`` of each ``-32043`` answer."""
    echoes: int = 0

    def __post_init__(self) -> None:
        settings = self.rec.settings
        self.not_found_code: Code = not_found_code(NOT_FOUND, NOT_FOUND_SENTENCE, settings)
        self.required_code: Code = required_code(REQUIRED, REQUIRED_SENTENCE, settings)

    @property
    def probe_name(self) -> str:
        """The probe as a check's details name it."""
        method, params = self.probe
        return method if params is None else f"{method} {params.get('name')}"

    def in_session(
        self,
        session: str,
        *,
        state: str | None = None,
        header: str | None = None,
    ) -> Exchange:
        """The probe in ``session``."""
        method, params = self.probe
        return self.use(method, params, session=session, state=state, header=header)

    def use(
        self,
        method: str,
        params: Mapping[str, object] | None = None,
        *,
        session: str,
        state: str | None = None,
        header: str | None = None,
        meta: Mapping[str, object] | None = None,
    ) -> Exchange:
        """A request in a session: its metadata in ``params._meta`` and, on 2026-07-28, the ``Mcp-Session-Id``."""
        value = {"sessionId": session}
        if state is not None:
            value["state"] = state
        if self.peer.era == MODERN and header is None:
            header = session
        with_session = {**(meta or {}), KEY: value}
        return self.peer.call(method, params, meta=with_session, session_header=header)

    def tool_call(
        self,
        name: str,
        arguments: Mapping[str, object] | None = None,
        *,
        session: str,
        state: str | None = None,
    ) -> Exchange:
        """``tools/call`` of ``name`` in ``session``."""
        params = {"name": name, "arguments": dict(arguments or {})}
        return self.use("tools/call", params, session=session, state=state)

    def error(self, exchange: Exchange, expected: int | Code, sent: str | None = None) -> str | None:
        """Note a session error the run provoked (``sent``: the sessionId it named); the problem if not ``expected``."""
        code = exchange.error_code
        self.errors.append((exchange.status, code))
        if self.not_found_code.matches(code) and sent is not None:
            self.not_found.append((sent, member(exchange.answer, "error", "data")))
        if isinstance(expected, Code):
            return expected.problem(exchange)
        return None if code == expected else f"expected error {expected}, got {exchange.summary()}"

    def create(self) -> tuple[Exchange, str | None]:
        """``sessions/create`` as the draft's vector sends it (2026-07-28: with the envelope); its id, if any."""
        exchange = self.peer.call("sessions/create")
        token = member(exchange.result, "session", "sessionId")
        return exchange, token if isinstance(token, str) and token else None


def check_capability(draft: Draft) -> None:
    """The capability, where each era's clients look for it (the recorder keeps the checks of the run's era)."""
    capabilities = draft.peer.server_capabilities()
    sessions = capabilities.get("sessions")
    shaped = isinstance(sessions, dict)
    problem = None if shaped else f"capabilities.sessions is {sessions!r}, not an object"
    draft.rec.record("sessions-draft-capability", problem, {"sessions": sessions})
    extension = member(capabilities, "extensions", EXTENSION)
    shaped = isinstance(extension, dict)
    problem = None if shaped else f'capabilities.extensions["{EXTENSION}"] is {extension!r}'
    draft.rec.record("sessions-draft-capability-extension", problem, {"extension": extension})
    experimental = member(capabilities, "experimental", "sessions")
    shaped = isinstance(experimental, dict)
    problem = None if shaped else f"capabilities.experimental.sessions is {experimental!r}"
    details = {"experimental": experimental}
    draft.rec.record("sessions-draft-capability-experimental", problem, details)


def check_create(draft: Draft) -> str:
    """``sessions/create`` as the draft's vector sends it: the gate of everything after it."""
    exchange, token = draft.create()
    problem = None if token else "no result.session.sessionId (a non-empty string) in the answer"
    draft.rec.gate("sessions-draft-create", problem, exchange.summary())
    assert token is not None
    _check_expires_at(draft, member(exchange.result, "session", "expiresAt"))
    return token


def _check_expires_at(draft: Draft, expires: object) -> None:
    """A new session's ``expiresAt``, if it has one, is ISO 8601; with ``--conventions``, RFC 3339 in UTC."""
    details = {"expiresAt": expires}
    if expires is None:
        draft.rec.skip("sessions-draft-expires-at", "the session has no expiresAt (optional)")
    else:
        problem = None if is_iso8601(expires) else "expiresAt is not an ISO 8601 timestamp"
        draft.rec.record("sessions-draft-expires-at", problem, details)
    if draft.rec.applies("sessions-draft-expires-at-utc"):
        utc = is_rfc3339_utc(expires)
        problem = None if utc else "expiresAt is not an RFC 3339 UTC timestamp"
        draft.rec.record("sessions-draft-expires-at-utc", problem, details)


def check_ids(draft: Draft, first: str, second: str | None) -> None:
    """Two sessions created one after the other: visible ASCII, and not the same."""
    visible = "sessions-draft-session-id-visible-ascii"
    for token in filter(None, (first, second)):
        outside = {char for char in token if not 0x21 <= ord(char) <= 0x7E}
        bad = sorted(f"0x{ord(char):02x}" for char in outside)
        problem = f"sessionId contains {', '.join(bad)}" if bad else None
        draft.rec.record(visible, problem, {"length": len(token)})
    check = "sessions-draft-session-id-unique"
    if second is None:
        draft.rec.untestable(check, "a second sessions/create returned no session")
        return
    same = "two sessions/create answered with the same sessionId" if first == second else None
    draft.rec.record(check, same)


def check_legacy_header(draft: Draft, session: str) -> Exchange:
    """2025 era: the server's transport session in ``Mcp-Session-Id`` does not stop a request in a session.

    The gate of the rest of the era on a stateful server, with ``--conventions``: every request there carries
    that header. Its ``tools/list`` is the one the run reads the tools from.
    """
    check = "sessions-draft-legacy-header-ignored"
    listed = draft.use("tools/list", session=session)
    if not draft.rec.applies(check):
        return listed
    if draft.peer.transport_id is None:
        draft.rec.skip(check, "the server keeps no transport session (stateless)")
        return listed
    served = listed.result is not None
    problem = None if served else "a request in a session, with the transport's header, refused"
    draft.rec.gate(check, problem, listed.summary())
    return listed


def find_probe(draft: Draft) -> None:
    """Where the server checks sessions: ``tools/list`` in an unknown session is refused, or only the tool's call.

    The probe stays ``tools/list`` when that was refused, or when no tool can be called to see.
    """
    if draft.use("tools/list", session=UNKNOWN_ID).answer_is_error:
        return
    if draft.tool is not None:
        called = draft.use("tools/call", call_params(draft.tool), session=UNKNOWN_ID)
        if called.answer_is_error:
            draft.probe = ("tools/call", call_params(draft.tool))
            return
    draft.validated = False


def _check_echo_on(draft: Draft, exchange: Exchange, session: str, case: str) -> None:
    """The echo on one successful result: present, and naming the very session the request named."""
    check = "sessions-draft-echo"
    details = {"case": case, "sse": exchange.sse, **exchange.summary()}
    if exchange.result is None:
        draft.rec.skip(check, f"{case}: no successful result to look for the echo in", details)
        return
    echo = echo_of(exchange)
    if not isinstance(echo, dict):
        draft.rec.record(check, f'{case}: no result._meta["{KEY}"] object', details)
        return
    draft.rec.record(check, None, details)
    draft.echoes += 1
    same = echo.get("sessionId") == session
    rotated = None if same else f"{case}: the echo names another sessionId than the request"
    draft.rec.record("sessions-draft-echo-same-session-id", rotated, {"case": case})


def check_echo(draft: Draft, listed: Exchange, sessionless: Exchange | None, session: str) -> None:
    """The echo, on the probe and on the tool's call (often a streamed answer); with ``--conventions``, merged
    into the server's own ``_meta``, and never in notifications."""
    on_list = draft.probe_name == "tools/list"
    probed = listed if on_list else draft.in_session(session)
    _check_echo_on(draft, probed, session, draft.probe_name)
    if draft.tool is not None and on_list:
        params = call_params(draft.tool)
        called = draft.use("tools/call", params, session=session, meta={"progressToken": "p"})
        _check_echo_on(draft, called, session, f"tools/call {draft.tool}")
    if draft.echoes == 0:
        draft.rec.skip("sessions-draft-echo-same-session-id", "no result carried an echo to compare")
    merges = "sessions-draft-echo-merges-meta"
    if not draft.rec.applies(merges) or sessionless is None:
        return
    own = member(sessionless.result, "_meta")
    theirs = member(listed.result, "_meta")
    if not isinstance(own, dict) or not own:
        draft.rec.skip(merges, "the server puts nothing of its own in result._meta")
    else:
        kept = theirs if isinstance(theirs, dict) else {}
        lost = sorted(set(own) - set(kept))
        named = ", ".join(lost)
        problem = f"the echo replaced the server's result._meta: {named} lost" if lost else None
        draft.rec.record(merges, problem, {"server": sorted(own)})
    check_notifications(draft, session)


def check_notifications(draft: Draft, session: str) -> None:
    """With ``--conventions``: ``countdown`` (the quickstart's) streams progress; no notification names the session."""
    check = "sessions-draft-no-echo-in-notifications"
    if "countdown" not in draft.tools:
        draft.rec.skip(check, "the server has no countdown tool (the quickstart's)")
        return
    countdown = {"name": "countdown", "arguments": {"n": 1}}
    streamed = draft.use("tools/call", countdown, session=session, meta={"progressToken": "p"})
    _check_echo_on(draft, streamed, session, "tools/call countdown (streamed)")
    if not streamed.notifications:
        reason = "the server sent no notification before its answer (a JSON answer)"
        draft.rec.skip(check, reason)
        return
    carrying = [n.get("method") for n in streamed.notifications if member(n, "params", "_meta", KEY)]
    problem = f"notifications carry session metadata: {carrying}" if carrying else None
    draft.rec.record(check, problem, {"notifications": carrying})


def check_context(draft: Draft, first: str, second: str | None) -> None:
    """The session is the request's context: the quickstart's counter goes on, another session's starts over."""
    check = "sessions-draft-session-is-context"
    if COUNTER not in draft.tools:
        reason = f"the server has no '{COUNTER}' tool (the quickstart's counter), the one tool whose answer shows it"
        draft.rec.skip(check, reason)
        return
    sessions = [first, first]
    if second is not None and second != first:
        sessions.append(second)
    counts = [tool_text(draft.tool_call(COUNTER, session=session)) for session in sessions]
    record_counts(draft.rec, check, counts)


def check_sessionless(draft: Draft) -> Exchange | None:
    """With ``--conventions``: a request without session metadata is served as without sessions, and says nothing
    of one."""
    check = "sessions-draft-sessionless"
    if not draft.rec.applies(check):
        return None
    plain = draft.peer.call("tools/list")
    if plain.result is None:
        problem: str | None = f"a request without session metadata was refused: {plain.summary()}"
    else:
        echoed = echo_of(plain) is not None
        problem = "a sessionless result carries session metadata" if echoed else None
    draft.rec.record(check, problem, plain.summary())
    return plain


def check_required(draft: Draft, session: str) -> None:
    """A tool that needs a session, called without one, answers SESSION_REQUIRED.

    Which tool needs one only the server knows: the tool is refused without a session and served in one.
    With ``--conventions``, the quickstart's ``count`` is known to need one.
    """
    check = "sessions-draft-session-required"
    known = draft.rec.conventions and COUNTER in draft.tools
    tool = COUNTER if known else draft.tool
    if tool is None:
        draft.rec.skip(check, NO_TOOL)
        return
    refused = draft.peer.call("tools/call", call_params(tool))
    details = {"tool": tool, **draft.required_code.details(), **refused.summary()}
    if tool != COUNTER or not draft.rec.conventions:
        if not refused.answer_is_error:
            reason = f"the tool '{tool}' was served without a session: it requires none"
            draft.rec.skip(check, reason, details)
            return
        if draft.use("tools/call", call_params(tool), session=session).result is None:
            reason = f"the tool '{tool}' is refused in a session too: not for want of one"
            draft.rec.skip(check, reason, details)
            return
    draft.rec.record(check, draft.error(refused, draft.required_code), details)
