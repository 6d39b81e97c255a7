"""The scenario ``sessions-hosts``: conversation ids hosts already send, as docs/clients.md documents them.

A host's id is the client's word: never an error, never echoed, and beaten by a
data-layer session. The whole wire is this project's convention: it runs only
with ``--conventions``, and SKIPS its checks where the server lacks the tools.
Whether it also gives the conversation data is the server's choice
(``conversation_data``): the pack finds out from ``whoami`` and runs the
checks of that choice, reporting the others as not applicable.
Fixture tools: ``whoami`` (the session's stable id, or ``none``) and ``count``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ._draft_session import KEY
from ._fixture import call_params
from ._model import MODERN, Recorder
from ._peer import Exchange, Peer, member, tool_names, tool_text

Request = tuple[dict[str, object], dict[str, str]]
"""What a host adds to a request: its ``_meta`` members and its HTTP headers."""
Form = Callable[[str], Request]
"""How a host names a conversation in a request, from its id."""

HOSTS: Mapping[str, Form] = {
    "openai": lambda id_: ({"openai/session": id_}, {}),
    "vscode": lambda id_: ({"vscode.conversationId": id_}, {}),
    "goose header": lambda id_: ({}, {"agent-session-id": id_}),
    "goose meta": lambda id_: ({"agent-session-id": id_}, {}),
    "opencode": lambda id_: ({"sessionID": id_}, {}),
    "codex turn": lambda id_: ({"x-codex-turn-metadata": {"thread_id": id_, "turn_id": "t1"}}, {}),
    "codex thread": lambda id_: ({"threadId": id_}, {}),
    "baggage header": lambda id_: ({}, {"baggage": f"gen_ai.conversation.id={id_}"}),
    "baggage meta": lambda id_: ({"baggage": f"gen_ai.conversation.id={id_}"}, {}),
}
UNUSABLE_IDS: Mapping[str, object] = {
    "257 characters": "c" * 257,
    "a space": "has space",
    "a quote": 'has"quote',
    "a backslash": "has\\backslash",
    "a comma": "has,comma",
    "a semicolon": "has;semicolon",
    "a control character": "has\x01control",
    "empty": "",
}


@dataclass
class Hosts:
    """One run: the client, the recorder, and a fresh prefix so that no id repeats across runs."""

    peer: Peer
    rec: Recorder
    prefix: str = field(default_factory=lambda: "conformance-" + secrets.token_hex(6))

    def id(self, name: str) -> str:
        """A conversation id of this run; a space in ``name`` becomes a dash, as a usable id has none."""
        return f"{self.prefix}-{name.replace(' ', '-')}"

    def call(self, tool: str, meta: Mapping[str, object], headers: Mapping[str, str] | None = None) -> Exchange:
        """``tools/call`` of a fixture tool with ``meta`` in ``_meta``, as a host sends it."""
        session = member(meta, KEY, "sessionId")
        header = session if isinstance(session, str) and self.peer.era == MODERN else None
        params = call_params(tool)
        return self.peer.call("tools/call", params, meta=meta, session_header=header, headers=headers)

    def whoami(self, meta: Mapping[str, object], headers: Mapping[str, str] | None = None) -> str | None:
        return tool_text(self.call("whoami", meta, headers))


def _check_never_an_error(hosts: Hosts) -> None:
    bad: dict[str, Request] = {}
    for case, value in UNUSABLE_IDS.items():
        bad[f"openai/session with {case}"] = ({"openai/session": value}, {})
    bad |= {
        "openai/session a number": ({"openai/session": 5}, {}),
        "vscode.conversationId an object": ({"vscode.conversationId": {"an": "object"}}, {}),
        "baggage over 8,192 bytes": ({}, {"baggage": "gen_ai.conversation.id=" + "b" * 9000}),
    }
    refused = []
    for case, (meta, headers) in bad.items():
        if hosts.call("whoami", meta, headers).result is None:
            refused.append(case)
    problem = f"refused: {refused}" if refused else None
    hosts.rec.record("sessions-hosts-never-an-error", problem, {"cases": len(bad)})


def _check_never_echoed(hosts: Hosts) -> None:
    echoing = []
    for host, form in HOSTS.items():
        meta, headers = form(hosts.id(f"echo-{host}"))
        answer = hosts.call("whoami", meta, headers)
        meta_seen = member(answer.result, "_meta")
        said = isinstance(meta_seen, dict) and (KEY in meta_seen or "mcp/session" in meta_seen)
        if said or "sessionId" in (answer.answer or {}):
            echoing.append(host)
    hosts.rec.record("sessions-hosts-never-echoed", f"echoed for {echoing}" if echoing else None)


def _check_data_layer_wins(hosts: Hosts) -> None:
    check = "sessions-hosts-data-layer-wins"
    created = member(hosts.peer.call("sessions/create").result, "session", "sessionId")
    if not isinstance(created, str):
        hosts.rec.skip(check, "the server answers no sessions/create (the draft's)")
        return
    session = {KEY: {"sessionId": created}}
    alone = hosts.whoami(session)
    counts = [tool_text(hosts.call("count", session))]
    both = {**session, "openai/session": hosts.id("beside-a-session")}
    counts.append(tool_text(hosts.call("count", both)))
    together = hosts.whoami(both)
    right = counts == ["1", "2"] and together == alone
    problem = None if right else f"count {counts}, whoami {alone} → {together}"
    hosts.rec.record(check, problem, {"counts": counts})


def _check_without_data(hosts: Hosts) -> None:
    count = hosts.call("count", {"openai/session": hosts.id("no-data")})
    required = count.error_code == -32044
    problem = None if required else f"a session-required tool, with a host's id: {count.summary()}"
    hosts.rec.record("sessions-hosts-tracing-only", problem, count.summary())
    for check in _DATA_CHECKS:
        hosts.rec.skip(check, "the server keeps no data per host conversation (conversation_data is off)")


def _check_with_data(hosts: Hosts) -> None:
    reason = "the server keeps data per host conversation (conversation_data)"
    hosts.rec.skip("sessions-hosts-tracing-only", reason)
    _check_data_per_conversation(hosts)
    _check_first_host_wins(hosts)
    _check_usable_id(hosts)
    _check_baggage_member_only(hosts)


def _check_data_per_conversation(hosts: Hosts) -> None:
    wrong = []
    for host, form in HOSTS.items():
        meta, headers = form(hosts.id(f"data-{host}"))
        seen = [hosts.whoami(meta, headers), hosts.whoami(meta, headers)]
        counts = [tool_text(hosts.call("count", meta, headers)) for _ in range(2)]
        if seen[0] in (None, "none") or seen[0] != seen[1] or counts != ["1", "2"]:
            wrong.append(f"{host}: whoami {seen}, count {counts}")
    other = tool_text(hosts.call("count", {"openai/session": hosts.id("data-another")}))
    if other != "1":
        wrong.append(f"another conversation counted {other}")
    hosts.rec.record("sessions-hosts-data-per-conversation", "; ".join(wrong) or None)


def _check_first_host_wins(hosts: Hosts) -> None:
    first, second, third = hosts.id("first"), hosts.id("second"), hosts.id("third")
    cases = {
        "openai before vscode": (
            {"openai/session": first, "vscode.conversationId": second},
            {"openai/session": first},
        ),
        "vscode before baggage": (
            {"vscode.conversationId": second, "baggage": f"gen_ai.conversation.id={third}"},
            {"vscode.conversationId": second},
        ),
        "the first usable": (
            {"openai/session": "not usable", "vscode.conversationId": second},
            {"vscode.conversationId": second},
        ),
    }
    wrong = []
    for case, (together, winner) in cases.items():
        if hosts.whoami(together) != hosts.whoami(winner):
            wrong.append(case)
    hosts.rec.record("sessions-hosts-first-host-wins", f"another host won: {wrong}" if wrong else None)


def _check_usable_id(hosts: Hosts) -> None:
    longest = hosts.prefix + "-" + "u" * (256 - len(hosts.prefix) - 1)
    usable = hosts.whoami({"openai/session": longest}) not in (None, "none")
    kept = []
    for case, value in UNUSABLE_IDS.items():
        if hosts.whoami({"openai/session": value}) != "none":
            kept.append(case)
    right = usable and not kept
    problem = None if right else f"256 characters usable: {usable}; unusable ids kept: {kept}"
    hosts.rec.record("sessions-hosts-usable-id", problem)


def _check_baggage_member_only(hosts: Hosts) -> None:
    member_only = [
        hosts.whoami({}, {"baggage": f"session.id={hosts.id('baggage-header')}"}),
        hosts.whoami({"baggage": f"session.id={hosts.id('baggage-meta')}"}),
    ]
    named = member_only != ["none", "none"]
    problem = f"a session.id baggage member named a conversation: {member_only}" if named else None
    hosts.rec.record("sessions-hosts-baggage-member-only", problem)


_DATA_CHECKS = (
    "sessions-hosts-data-per-conversation",
    "sessions-hosts-first-host-wins",
    "sessions-hosts-usable-id",
    "sessions-hosts-baggage-member-only",
)


def run_hosts(peer: Peer, rec: Recorder) -> None:
    """Every check of the host conversation ids."""
    hosts = Hosts(peer, rec)
    tools = tool_names(peer.call("tools/list"))
    if not {"whoami", "count"} <= tools:
        reason = "the server has no whoami and count tools (the quickstart's, which it needs)"
        for requirement in rec.traceability.requirements:
            rec.skip(requirement.check, reason)
        return
    _check_never_an_error(hosts)
    _check_never_echoed(hosts)
    _check_data_layer_wins(hosts)
    if hosts.whoami({"openai/session": hosts.id("probe")}) == "none":
        _check_without_data(hosts)
    else:
        _check_with_data(hosts)
