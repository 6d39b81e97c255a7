"""The draft wire's checks of advertising, creating and using a session, and of the echo."""

from __future__ import annotations

from ._draft_context import EXTENSION, KEY, REQUIRED, Draft, echo_of, is_rfc3339_utc
from ._exchange import Exchange, member, tool_text
from ._model import LEGACY, MODERN

__all__ = [
    "check_capability",
    "check_context",
    "check_create",
    "check_echo",
    "check_echo_cases",
    "check_ids",
    "check_legacy_header",
    "check_required",
    "check_sessionless",
]


def check_capability(draft: Draft) -> None:
    """The capability, where each era's clients look for it."""
    capabilities = draft.peer.server_capabilities()
    sessions = capabilities.get("sessions")
    draft.rec.record(
        "sessions-draft-capability",
        None if isinstance(sessions, dict) else f"capabilities.sessions is {sessions!r}, not an object",
        {"sessions": sessions},
    )
    if draft.peer.era == MODERN:
        extension = member(capabilities, "extensions", EXTENSION)
        problem = None if isinstance(extension, dict) else f'capabilities.extensions["{EXTENSION}"] is {extension!r}'
        draft.rec.record("sessions-draft-capability-extension", problem, {"extension": extension})
    else:
        experimental = member(capabilities, "experimental", "sessions")
        problem = None if isinstance(experimental, dict) else f"capabilities.experimental.sessions is {experimental!r}"
        draft.rec.record("sessions-draft-capability-experimental", problem, {"experimental": experimental})


def check_create(draft: Draft) -> str:
    """``sessions/create`` as the draft's vector sends it: the gate of everything after it."""
    exchange, token = draft.create()
    draft.rec.gate(
        "sessions-draft-create",
        None if token else "no result.session.sessionId (a non-empty string) in the answer",
        exchange.summary(),
    )
    assert token is not None
    draft.rec.record(
        "sessions-draft-expires-at",
        None if is_rfc3339_utc(member(exchange.result, "session", "expiresAt")) else "expiresAt is not RFC 3339 UTC",
        {"expiresAt": member(exchange.result, "session", "expiresAt")},
    )
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


def check_echo_cases(draft: Draft, exchange: Exchange, session: str, case: str) -> None:
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
    rotated = echo.get("sessionId") != session
    draft.rec.record(
        "sessions-draft-echo-same-session-id",
        f"{case}: the echo names another sessionId than the request" if rotated else None,
        {"case": case},
    )


def check_echo(draft: Draft, listed: Exchange, sessionless: Exchange, session: str) -> None:
    """The echo, on a JSON answer and on a streamed one, merged into the server's own ``_meta``."""
    check_echo_cases(draft, listed, session, "tools/list")
    own = member(sessionless.result, "_meta")
    theirs = member(listed.result, "_meta")
    if not isinstance(own, dict) or not own:
        draft.rec.skip("sessions-draft-echo-merges-meta", "the server puts nothing of its own in result._meta")
    else:
        lost = sorted(set(own) - set(theirs if isinstance(theirs, dict) else ()))
        problem = f"the echo replaced the server's result._meta: {', '.join(lost)} lost" if lost else None
        draft.rec.record("sessions-draft-echo-merges-meta", problem, {"server": sorted(own)})
    if "countdown" not in draft.tools:
        draft.rec.untestable("sessions-draft-no-echo-in-notifications", "the server has no countdown tool")
    else:
        streamed = draft.use(
            "tools/call", {"name": "countdown", "arguments": {"n": 1}}, session=session, meta={"progressToken": "p"}
        )
        check_echo_cases(draft, streamed, session, "countdown")
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
    counts = [tool_text(draft.tool("count", session=first)) for _ in range(2)]
    expected = ["1", "2"]
    if second is not None and second != first:
        counts.append(tool_text(draft.tool("count", session=second)))
        expected.append("1")
    problem = None if counts == expected else f"count answered {counts}, expected {expected}"
    draft.rec.record("sessions-draft-session-is-context", problem, {"counts": counts})


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
