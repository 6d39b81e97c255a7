"""Where each host puts its conversation id: a ``_meta`` key or a header, the built-in table and the configured keys."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final, Literal, NamedTuple

MAX_CONVERSATION_ID_LENGTH: Final = 256
# Printable ASCII without space, quotes, backslash, comma and semicolon: safe in an attribute,
# a log line and a baggage value; anything else is not a conversation id and is ignored.
_CONVERSATION_ID: Final = re.compile(rf"[!#-+\--:<-\[\]-~]{{1,{MAX_CONVERSATION_ID_LENGTH}}}")
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class HostKey(NamedTuple):
    """Where one host puts its conversation id: a ``_meta`` key or an HTTP header, and the source's name."""

    name: str
    """The source's name in telemetry (``openai``, ``meta:acme/chat``…)."""
    place: Literal["meta", "header"]
    """Whether the id is in ``params._meta`` or in a header."""
    key: str
    """The ``_meta`` key, or the header's name in lower case."""
    member: str | None = None
    """With a member, the id is that member of the object at ``_meta[key]`` (Codex's turn metadata)."""


BUILT_IN_HOSTS: Final = (
    HostKey("openai", "meta", "openai/session"),
    HostKey("vscode", "meta", "vscode.conversationId"),
    HostKey("goose", "header", "agent-session-id"),
    HostKey("goose", "meta", "agent-session-id"),
    HostKey("opencode", "meta", "sessionID"),
    HostKey("codex", "meta", "x-codex-turn-metadata", "thread_id"),
    HostKey("codex", "meta", "x-codex-turn-metadata", "session_id"),  # a root thread's, shared by its sub-agents
    HostKey("codex", "meta", "threadId"),
)
"""The hosts recognised without configuration, in the order they are tried."""

# What some hosts send beside the conversation (a _meta key, and a member of the object there): the user
# (ChatGPT's anonymized user, telemetry's user.id) and the turn of the conversation (a span attribute).
USER_KEYS: Final = {"openai": ("openai/subject", None)}
TURN_KEYS: Final = {"codex": ("x-codex-turn-metadata", "turn_id")}


def host_keys_from_config(config: str | Iterable[str], *, source: str = "conversation_keys") -> tuple[HostKey, ...]:
    """User-defined host keys from ``meta:KEY`` and ``header:NAME`` entries (a list, or one comma-separated text)."""
    keys: list[HostKey] = []
    for entry in config.split(",") if isinstance(config, str) else list(config):
        if not isinstance(entry, str):
            raise TypeError(f"{source}: each entry is a 'meta:KEY' or 'header:NAME' string, got {entry!r}")
        if not (text := entry.strip()):
            continue
        place, _, key = text.partition(":")
        place, key = place.strip().lower(), key.strip()
        if place == "meta" and key:
            keys.append(HostKey(f"meta:{key}", "meta", key))
        elif place == "header" and _HEADER_NAME.fullmatch(key):
            keys.append(HostKey(f"header:{key.lower()}", "header", key.lower()))
        else:
            raise ValueError(
                f"{source}: {text!r} is not 'meta:KEY' or 'header:NAME' (e.g. meta:acme/chat,header:x-chat)"
            )
    return tuple(keys)


def conversation_id(value: object) -> str | None:
    """``value`` if it can be a conversation id (a bounded string of safe characters), else ``None``."""
    return value if type(value) is str and _CONVERSATION_ID.fullmatch(value) else None


def member_of(meta: dict[str, object], key: str, member: str | None) -> object:
    """``meta[key]``, or with ``member`` that member of the object there (``None`` if absent)."""
    value = meta.get(key)
    if member is None or value is None:
        return value
    return value.get(member) if isinstance(value, dict) else None
