"""What travels between replicas: an event or an order to end a session's streams, as a few bytes of JSON.

A message names its kind and, for a resource, its URI; never a session token (a
session's channel names it by its stable id). What cannot be read is dropped,
as a listen stream drops what it cannot deliver: events are level triggers.
"""

from __future__ import annotations

import json
from typing import Final

from mcp.shared.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)

__all__ = ["END", "MAX_MESSAGE_BYTES", "decode", "encode"]

MAX_MESSAGE_BYTES: Final = 16 * 1024
"""The largest message published or read: a resource URI longer than about 16 KB is refused."""

END: Final = b'{"end":"session"}'
"""The order, on a session's channel, to end that session's listen streams (it was deleted)."""

_KINDS: Final[dict[str, ServerEvent]] = {
    "tools": ToolsListChanged(),
    "prompts": PromptsListChanged(),
    "resources": ResourcesListChanged(),
}
_NAMES: Final = {type(event): name for name, event in _KINDS.items()}


def encode(event: ServerEvent) -> bytes:
    """``event`` as a message; ``ValueError`` for a resource URI too long to send."""
    if isinstance(event, ResourceUpdated):
        if not isinstance(event.uri, str):
            raise TypeError("a ResourceUpdated event's uri is a string")
        data = json.dumps({"resource": event.uri}, separators=(",", ":")).encode()
        if len(data) > MAX_MESSAGE_BYTES:
            raise ValueError(f"the resource URI is too long to publish (the message is at most {MAX_MESSAGE_BYTES} B)")
        return data
    name = _NAMES.get(type(event))
    if name is None:
        raise TypeError(f"not a ServerEvent: {type(event).__name__}")
    return b'{"event":"' + name.encode() + b'"}'


def decode(data: bytes | str) -> ServerEvent | bytes | None:
    """The event a message carries, :data:`END`, or ``None`` for a message this version cannot read."""
    if len(data) > MAX_MESSAGE_BYTES:
        return None
    raw = data.encode() if isinstance(data, str) else data
    if raw == END:
        return END
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or len(message) != 1:
        return None
    if isinstance(uri := message.get("resource"), str):
        return ResourceUpdated(uri=uri)
    name = message.get("event")
    return _KINDS.get(name) if isinstance(name, str) else None
