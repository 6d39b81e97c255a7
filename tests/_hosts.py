"""How each host names a conversation on a call, for the tests that send calls shaped as each host sends them."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

# Each host's shape: the source name it is recorded under, and how it sends a conversation id.
HOSTS: dict[str, tuple[str, Callable[[str], tuple[dict[str, Any], dict[str, Any]]]]] = {
    "chatgpt": ("openai", lambda c: ({"openai/session": c, "openai/subject": "anon-user-7"}, {})),
    "vscode": ("vscode", lambda c: ({"vscode.conversationId": c, "vscode.requestId": "r-1"}, {})),
    "goose-header": ("goose", lambda c: ({}, {"agent_session_id": c})),
    "goose-meta": ("goose", lambda c: ({"agent-session-id": c}, {})),
    "opencode": ("opencode", lambda c: ({"sessionID": c}, {})),
    # Codex: every thread of one root shares session_id; each call is a new turn.
    "codex-turn": ("codex", lambda c: ({"x-codex-turn-metadata": codex_turn(c)}, {})),
    "codex-thread-id": ("codex", lambda c: ({"threadId": c}, {})),
    "baggage-header": ("baggage", lambda c: ({}, {"baggage": f"user.id=u-1, gen_ai.conversation.id = {c};p"})),
    "baggage-meta": ("baggage", lambda c: ({"baggage": f"gen_ai.conversation.id={c},k=v%20w"}, {})),
}
NEW_HOSTS = ["codex-turn", "codex-thread-id", "baggage-header", "baggage-meta"]


def codex_turn(thread: str) -> dict[str, str]:
    return {"session_id": "codex-root", "thread_id": thread, "turn_id": f"turn-{uuid.uuid4()}"}
