"""One broken rule per check of the conformance pack: the hooks that break it, and the table of faults.

Each hook is a server that gets one rule wrong, as a real implementation might:
it mints one id twice, answers a deleted session, forgets to echo on SSE. A
request hook edits the request (or answers in the server's place); a response
hook edits each message of the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from e2e._broken import KEY, Call, Fault, Memory, Reply, RequestHook, ResponseHook, member
from e2e._pack import LEGACY, MODERN

HOST_KEYS = ("openai/session", "vscode.conversationId", "agent-session-id", "sessionID", "threadId", "baggage")


def calling(tool: str, call: Call) -> bool:
    return call.method == "tools/call" and bool(member(call.message, "params", "name") == tool)


def drop_draft_session(call: Call) -> None:
    call.meta.pop(KEY, None)
    call.headers.pop("mcp-session-id", None)


# -- hooks made to measure ----------------------------------------------------------------------------


def in_place_of(method: str, result: dict[str, Any]) -> RequestHook:
    """``method`` for a live session the server minted is answered with ``result``, and never done."""

    def hook(call: Call, memory: Memory) -> Reply | None:
        if call.method == method and call.session_id in memory.minted:
            return call.reply(result=result)
        return None

    return hook


def error_after(method: str) -> ResponseHook:
    """``method`` is done, then answered with an error anyway."""

    def hook(message: dict[str, Any], call: Call, memory: Memory, sse: bool) -> None:
        if call.method == method and "result" in message:
            message["error"] = {"code": -32603, "message": "broken"}
            del message["result"]

    return hook


def on_result(method: str, edit: Callable[[dict[str, Any]], object]) -> ResponseHook:
    def hook(message: dict[str, Any], call: Call, memory: Memory, sse: bool) -> None:
        if call.method == method and isinstance(message.get("result"), dict):
            edit(message["result"])

    return hook


def on_capabilities(edit: Callable[[dict[str, Any]], object]) -> ResponseHook:
    def hook(message: dict[str, Any], call: Call, memory: Memory, sse: bool) -> None:
        found = member(message, "result", "capabilities")
        if call.method in ("server/discover", "initialize") and isinstance(found, dict):
            edit(found)

    return hook


def on_echo(edit: Callable[[dict[str, Any], dict[str, Any]], object], *, sse_only: bool = False) -> ResponseHook:
    """Edit the draft's echo (and the result that carries it)."""

    def hook(message: dict[str, Any], call: Call, memory: Memory, sse: bool) -> None:
        echo = member(message, "result", "_meta", KEY)
        if isinstance(echo, dict) and (sse or not sse_only):
            edit(echo, message["result"])

    return hook


def echo_added_where(condition: Callable[[Call], bool]) -> ResponseHook:
    def hook(message: dict[str, Any], call: Call, memory: Memory, sse: bool) -> None:
        if condition(call) and isinstance(message.get("result"), dict):
            message["result"].setdefault("_meta", {})[KEY] = {"sessionId": "sess-made-up"}

    return hook


def answered_instead(condition: Callable[[Call, Memory], bool], **answer: Any) -> RequestHook:
    """Requests that meet ``condition`` get ``answer`` (``result=`` or ``error=``) from the broken server itself."""

    def hook(call: Call, memory: Memory) -> Reply | None:
        return call.reply(**answer) if condition(call, memory) else None

    return hook


def edited(condition: Callable[[Call], bool], edit: Callable[[Call], object]) -> RequestHook:
    def hook(call: Call, memory: Memory) -> None:
        if condition(call):
            edit(call)

    return hook


# -- single rules ---------------------------------------------------------------------------------------


def id_with_a_space(token: str) -> str:
    return token[:10] + " " + token[10:]


def id_without_the_space(token: Any) -> Any:
    return token[:10] + token[11:] if isinstance(token, str) and len(token) > 10 and token[10] == " " else token


def ids_in(call: Call, memory: Memory) -> None:
    """Sessions are minted with a space in their id: what comes in loses it again."""
    if isinstance(call.meta.get(KEY), dict):
        call.notes["sent"] = call.meta[KEY].get("sessionId")
        call.meta[KEY]["sessionId"] = id_without_the_space(call.notes["sent"])
    if "mcp-session-id" in call.headers:
        call.headers["mcp-session-id"] = id_without_the_space(call.headers["mcp-session-id"])


def ids_out(message: dict[str, Any], call: Call, memory: Memory, sse: bool) -> None:
    for holder in (member(message, "result", "session"), member(message, "result", "_meta", KEY)):
        if isinstance(holder, dict) and isinstance(holder.get("sessionId"), str):
            holder["sessionId"] = id_with_a_space(holder["sessionId"])
    data, sent = member(message, "error", "data"), call.notes.get("sent")
    if isinstance(data, dict) and isinstance(sent, str):
        data["sessionId"] = sent[:256]


def second_create_repeats_the_first(message: dict[str, Any], call: Call, memory: Memory, sse: bool) -> None:
    if call.method == "sessions/create" and "result" in message:
        memory.creates.append(message["result"])
        if len(memory.creates) == 2:
            message["result"] = memory.creates[0]


def transport_header_compared(call: Call, memory: Memory) -> Reply | None:
    if isinstance(call.session_id, str) and call.headers.get("mcp-session-id") not in (None, call.session_id):
        return call.reply(error=(-32020, "header mismatch"))
    return None


def echo_in_notifications(message: dict[str, Any], call: Call, memory: Memory, sse: bool) -> None:
    if "method" in message and call.session_id:
        message.setdefault("params", {}).setdefault("_meta", {})[KEY] = {"sessionId": call.session_id}


def unknown_is_sessionless(call: Call, memory: Memory) -> None:
    if call.method != "sessions/delete" and isinstance(call.session_id, str) and call.session_id not in memory.minted:
        drop_draft_session(call)


def not_found_without_data(message: dict[str, Any], call: Call, memory: Memory, sse: bool) -> None:
    if member(message, "error", "code") == -32043:
        message["error"].pop("data", None)


def unseen_state_dropped(call: Call, memory: Memory) -> None:
    value = call.meta.get(KEY)
    if isinstance(value, dict) and "state" in value and (value.get("sessionId"), value["state"]) not in memory.echoed:
        del value["state"]


def echo_on_errors(message: dict[str, Any], call: Call, memory: Memory, sse: bool) -> None:
    if "error" in message and call.session_id in memory.minted:
        data = message["error"].get("data")
        message["error"]["data"] = {**(data if isinstance(data, dict) else {}), "_meta": {KEY: call.session_id}}


def not_found_in_404(status: int, messages: list[dict[str, Any]]) -> int:
    return 404 if any(member(m, "error", "code") == -32043 for m in messages) else status


def batch_session_methods_run(call: Call, memory: Memory) -> Reply | None:
    if isinstance(call.body, list) and any(str(m.get("method")).startswith("sessions/") for m in call.body):
        return Reply(200, [{"jsonrpc": "2.0", "id": m["id"], "result": {}} for m in call.body])
    return None


def batch_bad_sessions_run(call: Call, memory: Memory) -> None:
    for element in call.body if isinstance(call.body, list) else []:
        named = member(element, "params", "_meta", KEY, "sessionId")
        if isinstance(named, str) and named not in memory.minted:
            element["params"]["_meta"].pop(KEY)


def hosts_dropped(call: Call) -> None:
    for key in (*HOST_KEYS, "x-codex-turn-metadata"):
        call.meta.pop(key, None)
    call.headers.pop("agent-session-id", None)
    call.headers.pop("baggage", None)


def baggage_session_id_read(call: Call, memory: Memory) -> None:
    if "baggage" in call.headers:
        call.headers["baggage"] = call.headers["baggage"].replace("session.id=", "gen_ai.conversation.id=")
    if isinstance(call.meta.get("baggage"), str):
        call.meta["baggage"] = call.meta["baggage"].replace("session.id=", "gen_ai.conversation.id=")


def long_ids_cut(call: Call, memory: Memory) -> None:
    if isinstance(call.meta.get("openai/session"), str):
        call.meta["openai/session"] = call.meta["openai/session"][:256]


def fault(
    name: str,
    wire: str,
    *breaks: str,
    era: str = MODERN,
    base: str | None = None,
    conventions: bool = False,
    **hooks: Any,
) -> Fault:
    """A fault of ``wire`` that breaks the checks ``sessions-<wire>-<break>``, on ``base`` (the wire's quickstart);
    ``conventions``: a rule of this project's own, which the pack checks only with ``--conventions``."""
    checks = frozenset(f"sessions-{wire}-{b}" for b in breaks)
    return Fault(name, base or wire, wire, era, checks, conventions or wire == "hosts", **hooks)


def not_found_data_whole(message: dict[str, Any], call: Call, memory: Memory, sse: bool) -> None:
    """``data.sessionId`` is the whole id the client sent, however long (the middleware cuts it to 256)."""
    if member(message, "error", "code") == -32043 and isinstance(call.session_id, str):
        message["error"]["data"] = {"sessionId": call.session_id}


def _counting(call: Call) -> bool:
    return calling("count", call)


_ONE = {"content": [{"type": "text", "text": "1"}], "isError": False}
D, H = "draft", "hosts"
DRAFT_FAULTS = [
    fault("no-capability", D, "capability", response=on_capabilities(lambda c: c.pop("sessions"))),
    fault(
        "no-extension",
        D,
        "capability-extension",
        conventions=True,
        response=on_capabilities(lambda c: c["extensions"].clear()),
    ),
    fault(
        "no-experimental",
        D,
        "capability-experimental",
        era=LEGACY,
        conventions=True,
        response=on_capabilities(lambda c: c["experimental"].pop("sessions")),
    ),
    fault(
        "no-create",
        D,
        "create",
        request=answered_instead(
            lambda call, memory: call.method == "sessions/create" and set(call.message.get("params", {})) <= {"_meta"},
            error=(-32601, "Method not found"),
        ),
    ),
    fault("id-with-a-space", D, "session-id-visible-ascii", request=ids_in, response=ids_out),
    fault("id-repeated", D, "session-id-unique", response=second_create_repeats_the_first),
    fault(
        "expiry-not-rfc3339",
        D,
        "expires-at",
        response=on_result("sessions/create", lambda r: r["session"].update(expiresAt="tomorrow")),
    ),
    fault(
        "expiry-not-utc",
        D,
        "expires-at-utc",
        conventions=True,
        response=on_result("sessions/create", lambda r: r["session"].update(expiresAt="2026-03-01T02:00:00+02:00")),
    ),
    fault(
        "transport-header-compared",
        D,
        "legacy-header-ignored",
        era=LEGACY,
        request=transport_header_compared,
        conventions=True,
    ),
    fault("count-ignores-session", D, "session-is-context", request=edited(_counting, drop_draft_session)),
    fault(
        "no-echo-in-sse",
        D,
        "echo",
        conventions=True,
        response=on_echo(lambda echo, result: result["_meta"].pop(KEY), sse_only=True),
    ),
    fault("echo-rotated", D, "echo-same-session-id", response=on_echo(lambda echo, _: echo.update(sessionId="x"))),
    fault(
        "echo-replaces-meta",
        D,
        "echo-merges-meta",
        response=on_echo(lambda echo, result: result.update(_meta={KEY: echo})),
        conventions=True,
    ),
    fault("echo-in-notifications", D, "no-echo-in-notifications", response=echo_in_notifications, conventions=True),
    fault(
        "echo-without-session",
        D,
        "sessionless",
        response=echo_added_where(lambda call: call.method == "tools/list" and KEY not in call.meta),
        conventions=True,
    ),
    fault(
        "runs-without-session",
        D,
        "session-required",
        request=answered_instead(lambda call, memory: _counting(call) and KEY not in call.meta, result=_ONE),
        conventions=True,
    ),
    fault("unknown-is-sessionless", D, "session-not-found", request=unknown_is_sessionless),
    fault("not-found-without-data", D, "not-found-data", response=not_found_without_data),
    fault("not-found-data-whole", D, "not-found-data-cut", conventions=True, response=not_found_data_whole),
    fault(
        "malformed-ignored",
        D,
        "malformed-metadata",
        request=edited(lambda call: KEY in call.meta and not isinstance(call.session_id, str), drop_draft_session),
        conventions=True,
    ),
    fault(
        "create-takes-a-session",
        D,
        "create-with-session",
        request=edited(lambda call: call.method == "sessions/create", drop_draft_session),
        conventions=True,
    ),
    fault(
        "create-refuses-unknown-params",
        D,
        "create-ignores-unknown-params",
        request=answered_instead(
            lambda call, memory: "conformanceProbe" in (member(call.message, "params") or {}),
            error=(-32602, "unknown param"),
        ),
        conventions=True,
    ),
    fault(
        "header-not-compared",
        D,
        "header-mismatch",
        request=edited(lambda call: True, lambda call: call.headers.pop("mcp-session-id", None)),
        conventions=True,
    ),
    fault("no-state-in-echo", D, "state", response=on_echo(lambda echo, _: echo.pop("state", None)), conventions=True),
    fault("state-unverified", D, "state-protected", request=unseen_state_dropped, conventions=True),
    fault("echo-on-errors", D, "no-echo-on-errors", response=echo_on_errors, conventions=True),
    fault("delete-errs", D, "delete", response=error_after("sessions/delete")),
    fault("deletions-forgotten", D, "deleted-session", request=in_place_of("sessions/delete", {})),
    fault(
        "unknown-deleted",
        D,
        "delete-unknown",
        request=answered_instead(
            lambda call, memory: call.method == "sessions/delete" and call.session_id not in memory.minted, result={}
        ),
    ),
    fault("not-found-in-404", D, "error-http-status", status=not_found_in_404, conventions=True),
    fault(
        "batch-session-methods-run",
        D,
        "batch-session-method",
        era=LEGACY,
        base="batches",
        request=batch_session_methods_run,
        conventions=True,
    ),
    fault(
        "batch-bad-sessions-run",
        D,
        "batch-bad-session",
        era=LEGACY,
        base="batches",
        request=batch_bad_sessions_run,
        conventions=True,
    ),
]
OTHER_FAULTS = [
    fault(
        "bad-id-refused",
        H,
        "never-an-error",
        base=D,
        request=answered_instead(
            lambda call, memory: not isinstance(call.meta.get("openai/session", ""), str), error=(-32602, "bad id")
        ),
    ),
    fault(
        "host-echoed",
        H,
        "never-echoed",
        base=D,
        response=echo_added_where(lambda call: "openai/session" in call.meta and KEY not in call.meta),
    ),
    fault(
        "host-beats-session",
        H,
        "data-layer-wins",
        base=D,
        request=edited(lambda call: "openai/session" in call.meta, drop_draft_session),
    ),
    fault(
        "host-runs-session-tools",
        H,
        "tracing-only",
        base=D,
        request=answered_instead(
            lambda call, memory: _counting(call) and "openai/session" in call.meta and KEY not in call.meta,
            result=_ONE,
        ),
    ),
    fault(
        "no-conversation-data",
        H,
        "data-per-conversation",
        base="hosts-data",
        request=edited(lambda call: _counting(call) and KEY not in call.meta, hosts_dropped),
    ),
    fault(
        "later-host-wins",
        H,
        "first-host-wins",
        base="hosts-data",
        request=edited(
            lambda call: "vscode.conversationId" in call.meta, lambda call: call.meta.pop("openai/session", None)
        ),
    ),
    fault("long-ids-cut", H, "usable-id", base="hosts-data", request=long_ids_cut),
    fault("baggage-session-id-read", H, "baggage-member-only", base="hosts-data", request=baggage_session_id_read),
]
FAULTS = DRAFT_FAULTS + OTHER_FAULTS

# The strawman's rules that fast-agent 0.5.3's server, the one server left that speaks it, keeps in the default run
# (tests/e2e/test_conformance_strawman.py): broken in front of it, on the 2025 wire it speaks.
S = "strawman"
STRAWMAN_FAULTS = [
    fault(
        "no-capability",
        S,
        "capability",
        era=LEGACY,
        response=on_capabilities(lambda c: c["experimental"].pop("session")),
    ),
    fault(
        "create-without-cookie", S, "create", era=LEGACY, response=on_result("session/create", lambda r: r.pop("_meta"))
    ),
    fault("list-misshapen", S, "list", era=LEGACY, response=on_result("session/list", lambda r: r.update(sessions={}))),
    fault("delete-errs", S, "delete", era=LEGACY, response=error_after("session/delete")),
]
