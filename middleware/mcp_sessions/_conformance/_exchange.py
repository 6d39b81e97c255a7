"""An answer from the server under test: read bounded, parsed in linear time, and never trusted.

JSON is read whole (at most ``MAX_BODY`` bytes). An event stream is read event
by event as it arrives, and only until the answer to the request has come: a
server that keeps its stream open after it, or sends comments forever, costs
one event, not the stream. What is not a JSON-RPC object is left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_BODY", "Exchange", "Message", "Reading", "member", "tool_names", "tool_text"]

MAX_BODY: Final = 1 << 20
"""The most bytes read of one answer: a session wire's answers are a few kilobytes."""
_EVENT_END: Final = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE: Final = re.compile(r"\r\n|\n|\r")

Message = dict[str, object]


def member(value: object, *path: str) -> object:
    """``value[path[0]][path[1]]…``, or ``None`` where a step is missing or not an object."""
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _decode(text: str | bytes) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _objects(value: object) -> list[Message]:
    listed = value if isinstance(value, list) else [value]
    return [item for item in listed if isinstance(item, dict)]


class Reading:
    """The body of one answer as it arrives; :meth:`feed` says when the request's answer is complete."""

    def __init__(self, sse: bool, request_id: object) -> None:
        self.sse, self.request_id = sse, request_id
        self.body = bytearray()
        self.messages: list[Message] = []
        self._event_start = self._searched = 0

    def feed(self, chunk: bytes) -> bool:
        """Add ``chunk``; whether the answer to the request has arrived (the rest need not be read)."""
        self.body += chunk
        if not self.sse:
            return False
        # Search only what no earlier search saw (less the 3 bytes an end marker may straddle): linear.
        while match := _EVENT_END.search(self.body, max(self._event_start, self._searched - 3)):
            before = len(self.messages)
            self._event(self.body[self._event_start : match.start()])
            self._event_start = self._searched = match.end()
            if any(self._answers(message) for message in self.messages[before:]):
                return True
        self._searched = len(self.body)
        return False

    def finish(self) -> list[Message]:
        """Every message read, in order, once the body has ended (or the answer came)."""
        if self.sse:
            self._event(self.body[self._event_start :])
        else:
            self.messages = _objects(_decode(bytes(self.body))) if self.body else []
        return self.messages

    def _event(self, event: bytes | bytearray) -> None:
        lines = _LINE.split(event.decode("utf-8", "replace"))
        data = [line[5:].removeprefix(" ") for line in lines if line.startswith("data:")]
        if data:
            self.messages += _objects(_decode("\n".join(data)))

    def _answers(self, message: Message) -> bool:
        return "method" not in message and "id" in message and message["id"] == self.request_id


@dataclass(frozen=True)
class Exchange:
    """One POST and its answer: status, headers (lower-case names, first value) and the JSON-RPC messages."""

    status: int
    headers: Mapping[str, str]
    messages: tuple[Message, ...]
    sse: bool
    request_id: object

    @property
    def answer(self) -> Message | None:
        """The response to the request (a message with its id and no method)."""
        for message in self.messages:
            if "method" not in message and "id" in message and message["id"] == self.request_id:
                return message
        return None

    @property
    def notifications(self) -> tuple[Message, ...]:
        """The messages the server sent before its answer (notifications, requests)."""
        return tuple(message for message in self.messages if "method" in message)

    @property
    def result(self) -> Message | None:
        """The answer's ``result`` when it is an object."""
        result = member(self.answer, "result")
        return result if isinstance(result, dict) else None

    @property
    def error_code(self) -> object:
        """The answer's ``error.code`` (``None`` when it is not an error)."""
        return member(self.answer, "error", "code")

    def summary(self) -> dict[str, object]:
        """What a check's ``details`` keep of the exchange: the status and the answer, cut short."""
        answer = json.dumps(self.answer, separators=(",", ":"))
        return {"status": self.status, "answer": answer if len(answer) <= 600 else answer[:600] + "…"}


def tool_names(exchange: Exchange) -> frozenset[str]:
    """The names of the tools a ``tools/list`` answer lists."""
    tools = member(exchange.result, "tools")
    names = (member(tool, "name") for tool in tools) if isinstance(tools, list) else ()
    return frozenset(name for name in names if isinstance(name, str))


def tool_text(exchange: Exchange) -> str | None:
    """The text of a successful tool result with a single text content, else ``None``."""
    result = exchange.result
    content = member(result, "content")
    if result is None or result.get("isError") is True or not isinstance(content, list) or len(content) != 1:
        return None
    text = member(content[0], "text")
    return text if isinstance(text, str) else None
