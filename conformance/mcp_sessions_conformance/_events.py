"""The events of a ``text/event-stream`` answer, read as it arrives, by the WHATWG grammar.

HTML's "Server-sent events" (section 9.2.6, "Interpreting an event stream"): a line ends at
CRLF, LF or CR; a blank line ends an event; a line starting with a colon is a comment; ``data``
lines, each with one leading space dropped, are joined by LF into the event's data. A CR at
the end of a chunk may be the first half of a CRLF whose LF starts the next chunk: that LF ends
no second line. Each byte is looked at a bounded number of times, so reading is linear in the
stream; its caller bounds how many bytes it feeds.

The pack reads only the data of each event (the messages in it): ``event``, ``id`` and
``retry`` fields are not its business. An event whose data is not UTF-8 is left out, as the
pack leaves out whatever is not a JSON-RPC object.
"""

from __future__ import annotations

import re
from typing import Final

_EOL: Final = re.compile(rb"\r\n|\r|\n")


class EventReader:
    """Feed the chunks of an event stream; get back the data of each event they complete."""

    def __init__(self) -> None:
        self._line = bytearray()
        """The start of a line a chunk left unended."""
        self._data: list[bytes] = []
        """The ``data`` lines of the event under way."""
        self._after_cr = False
        """Whether the last chunk ended with a CR (a LF first in the next one is its CRLF's)."""

    def feed(self, chunk: bytes) -> list[str]:
        """The data of each event ``chunk`` completes, in order."""
        if chunk:
            if self._after_cr and chunk.startswith(b"\n"):
                chunk = chunk[1:]
            self._after_cr = chunk.endswith(b"\r")
        events: list[str] = []
        start = 0
        for match in _EOL.finditer(chunk):
            line = chunk[start : match.start()]
            if self._line:
                line = bytes(self._line + line)
                self._line.clear()
            start = match.end()
            data = self._line_read(line)
            if data is not None:
                events.append(data)
        self._line += chunk[start:]
        return events

    def _line_read(self, line: bytes) -> str | None:
        """Take one whole line; the event's data when the line is blank and ends an event with data."""
        if line:
            field, _, value = line.partition(b":")
            if field == b"data":
                self._data.append(value[1:] if value.startswith(b" ") else value)
            return None
        data, self._data = self._data, []
        if not data:
            return None
        try:
            return b"\n".join(data).decode()
        except UnicodeDecodeError:
            return None
