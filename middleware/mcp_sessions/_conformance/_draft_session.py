"""The draft wire's run (its client, codes and findings) and its checks of advertising, creating and using a session."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from ._model import LEGACY, MODERN, Recorder
from ._peer import Exchange, Peer, member, tool_text

KEY: Final = "io.modelcontextprotocol/session"
EXTENSION: Final = "io.modelcontextprotocol/sessions"
NOT_FOUND: Final = -32043
REQUIRED: Final = -32044
_RFC3339: Final = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]00:00)")


def echo_of(exchange: Exchange) -> object:
    """The session metadata a result carries, ``None`` when there is none."""
    return member(exchange.result, "_meta", KEY)


def is_rfc3339_utc(value: object) -> bool:
    """Whether ``value`` is an RFC 3339 timestamp in UTC (``Z`` or a zero offset) naming a real instant."""
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
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
    errors: list[tuple[int, object]] = field(default_factory=list)
    """``(HTTP status, error code)`` of each session error the run provoked."""
    not_found: list[tuple[str, object]] = field(default_factory=list)
    """``(the sessionId sent, error.data)`` of each ``-32043`` answer."""
    echoes: int = 0

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
        value = {"sessionId": session, **({"state": state} if state is not None else {})}
        if self.peer.era == MODERN and header is None:
            header = session
        return self.peer.call(method, params, meta={**(meta or {}), KEY: value}, session_header=header)

    def tool(
        self, name: str, arguments: Mapping[str, object] | None = None, *, session: str, state: str | None = None
    ) -> Exchange:
        return self.use("tools/call", {"name": name, "arguments": dict(arguments or {})}, session=session, state=state)

    def error(self, exchange: Exchange, expected: int, sent: str | None = None) -> str | None:
        """Note a session error the run provoked (``sent``: the sessionId it named); the problem if not ``expected``."""
        code = exchange.error_code
        self.errors.append((exchange.status, code))
        if code == NOT_FOUND and sent is not None:
            self.not_found.append((sent, member(exchange.answer, "error", "data")))
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
    problem = None if isinstance(sessions, dict) else f"capabilities.sessions is {sessions!r}, not an object"
    draft.rec.record("sessions-draft-capability", problem, {"sessions": sessions})
    extension = member(capabilities, "extensions", EXTENSION)
    problem = None if isinstance(extension, dict) else f'capabilities.extensions["{EXTENSION}"] is {extension!r}'
    draft.rec.record("sessions-draft-capability-extension", problem, {"extension": extension})
    experimental = member(capabilities, "experimental", "sessions")
    problem = None if isinstance(experimental, dict) else f"capabilities.experimental.sessions is {experimental!r}"
    draft.rec.record("sessions-draft-capability-experimental", problem, {"experimental": experimental})


def check_create(draft: Draft) -> str:
    """``sessions/create`` as the draft's vector sends it: the gate of everything after it."""
    exchange, token = draft.create()
    problem = None if token else "no result.session.sessionId (a non-empty string) in the answer"
    draft.rec.gate("sessions-draft-create", problem, exchange.summary())
    assert token is not None
    expires = member(exchange.result, "session", "expiresAt")
    problem = None if is_rfc3339_utc(expires) else "expiresAt is not RFC 3339 UTC"
    draft.rec.record("sessions-draft-expires-at", problem, {"expiresAt": expires})
    return token


def check_ids(draft: Draft, first: str, second: str | None) -> None:
    """Two sessions created one after the other: visible ASCII, and not the same."""
    for token in filter(None, (first, second)):
        bad = sorted({f"0x{ord(char):02x}" for char in token if not 0x21 <= ord(char) <= 0x7E})
        problem = f"sessionId contains {', '.join(bad)}" if bad else None
        draft.rec.record("sessions-draft-session-id-visible-ascii", problem, {"length": len(token)})
    if second is None:
        draft.rec.untestable("sessions-draft-session-id-unique", "a second sessions/create returned no session")
        return
    same = "two sessions/create answered with the same sessionId" if first == second else None
    draft.rec.record("sessions-draft-session-id-unique", same)


def check_legacy_header(draft: Draft, session: str) -> Exchange:
    """2025 era: the server's transport session in ``Mcp-Session-Id`` does not stop a request in a session.

    The gate of the rest of the era on a stateful server: every request there carries that header.
    Its ``tools/list`` is the one the run reads the fixture tools from.
    """
    listed = draft.use("tools/list", session=session)
    if draft.peer.era != LEGACY:
        return listed
    if draft.peer.transport_id is None:
        draft.rec.skip("sessions-draft-legacy-header-ignored", "the server keeps no transport session (stateless)")
        return listed
    problem = None if listed.result is not None else "a request in a session, with the transport's header, refused"
    draft.rec.gate("sessions-draft-legacy-header-ignored", problem, listed.summary())
    return listed


def _check_echo_on(draft: Draft, exchange: Exchange, session: str, case: str) -> None:
    """The echo on one successful result: present, and naming the very session the request named."""
    details = {"case": case, "sse": exchange.sse, **exchange.summary()}
    if exchange.result is None:
        draft.rec.untestable("sessions-draft-echo", f"{case}: no successful result to look for the echo in")
        return
    echo = echo_of(exchange)
    if not isinstance(echo, dict):
        draft.rec.record("sessions-draft-echo", f'{case}: no result._meta["{KEY}"] object', details)
        return
    draft.rec.record("sessions-draft-echo", None, details)
    draft.echoes += 1
    rotated = f"{case}: the echo names another sessionId than the request" if echo.get("sessionId") != session else None
    draft.rec.record("sessions-draft-echo-same-session-id", rotated, {"case": case})


def check_echo(draft: Draft, listed: Exchange, sessionless: Exchange, session: str) -> None:
    """The echo, on a JSON answer and on a streamed one, merged into the server's own ``_meta``."""
    _check_echo_on(draft, listed, session, "tools/list")
    own, theirs = member(sessionless.result, "_meta"), member(listed.result, "_meta")
    if not isinstance(own, dict) or not own:
        draft.rec.skip("sessions-draft-echo-merges-meta", "the server puts nothing of its own in result._meta")
    else:
        lost = sorted(set(own) - set(theirs if isinstance(theirs, dict) else ()))
        problem = f"the echo replaced the server's result._meta: {', '.join(lost)} lost" if lost else None
        draft.rec.record("sessions-draft-echo-merges-meta", problem, {"server": sorted(own)})
    if "countdown" not in draft.tools:
        draft.rec.untestable("sessions-draft-no-echo-in-notifications", "the server has no countdown tool")
    else:
        countdown = {"name": "countdown", "arguments": {"n": 1}}
        streamed = draft.use("tools/call", countdown, session=session, meta={"progressToken": "p"})
        _check_echo_on(draft, streamed, session, "countdown")
        if not streamed.notifications:
            reason = "the server sent no notification before its answer (a JSON answer)"
            draft.rec.skip("sessions-draft-no-echo-in-notifications", reason)
        else:
            carrying = [n.get("method") for n in streamed.notifications if member(n, "params", "_meta", KEY)]
            problem = f"notifications carry session metadata: {carrying}" if carrying else None
            draft.rec.record("sessions-draft-no-echo-in-notifications", problem, {"notifications": carrying})
    if draft.echoes == 0:
        draft.rec.untestable("sessions-draft-echo-same-session-id", "no result carried an echo to compare")


def check_context(draft: Draft, first: str, second: str | None) -> None:
    """The session is the request's context: its counter goes on, another session's starts over."""
    if "count" not in draft.tools:
        draft.rec.untestable("sessions-draft-session-is-context", "the server has no count tool")
        return
    sessions = [first, first, *([second] if second is not None and second != first else [])]
    counts = [tool_text(draft.tool("count", session=session)) for session in sessions]
    draft.rec.record_counts("sessions-draft-session-is-context", counts)


def check_sessionless(draft: Draft) -> Exchange:
    """A request without session metadata is served as it would be without sessions, and says nothing of one."""
    plain = draft.peer.call("tools/list")
    if plain.result is None:
        problem: str | None = f"a request without session metadata was refused: {plain.summary()}"
    else:
        problem = "a sessionless result carries session metadata" if echo_of(plain) is not None else None
    draft.rec.record("sessions-draft-sessionless", problem, plain.summary())
    return plain


def check_required(draft: Draft) -> None:
    """An operation that needs a session, without one, answers SESSION_REQUIRED."""
    if "count" not in draft.tools:
        draft.rec.untestable("sessions-draft-session-required", "the server has no count tool (needing a session)")
        return
    refused = draft.peer.call("tools/call", {"name": "count", "arguments": {}})
    draft.rec.record("sessions-draft-session-required", draft.error(refused, REQUIRED), refused.summary())
