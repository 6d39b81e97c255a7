"""An incremental ``text/event-stream`` rewriter that never holds back a complete event.

Lines are read as the WHATWG parser reads them (each ends in CRLF, LF or CR; a blank line ends an event),
each byte looked at a bounded number of times (each chunk is split into lines once, by ``bytes.splitlines``;
an unfinished line waits for the rest of it): a line is taken when its end arrives, its ``data`` value kept
for the event. Each complete event leaves with the chunk that completes it, byte for byte as it arrived
unless its data is rewritten; only the bytes of an unfinished event wait for the next chunk, and only up
to ``max_event`` of them: past it the rewriter holds nothing more and says so
(:attr:`SSERewriter.overflowed`), for its caller to end the stream.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

_EOL: Final = re.compile(rb"\r\n|\r|\n")
_CR, _LF = 13, 10
_LINE_ENDS: Final = (b"\n", b"\r")
# How a chunk that ends between two events ends: a blank line after a line (a LF is a line end of its own, after a CR
# too); a CR last may be half of a CRLF, and is read line by line.
_EVENT_ENDS: Final = (b"\n\n", b"\r\n\r\n")

Transform = Callable[[str], "str | None"]
Skips = Callable[[bytes], bool]


class SSERewriter:
    """Feed raw chunks, get back the bytes to send now.

    ``transform`` receives each event's data (the ``data:`` lines joined by ``\\n``) and returns new
    data, or ``None`` to leave the event untouched; ``skips``, if given, says from whole events' bytes that it
    would leave each of them untouched, so that they pass unread line by line. An unfinished event longer than
    ``max_event`` bytes is dropped, and :attr:`overflowed` set: the stream cannot go on, as what follows is the
    rest of an event never sent.
    """

    def __init__(self, transform: Transform, *, max_event: int | None = None, skips: Skips | None = None) -> None:
        self._transform = transform
        self._skips = skips
        self._max_event = max_event
        self._lines: list[bytes] = []  # the unfinished event's complete lines, each with its line end
        self._size = 0  # their bytes
        self._partial = bytearray()  # its unfinished line
        self._data: list[bytes] = []  # the values of its data lines so far
        self._after_cr = False  # the last byte seen was a CR that ended a line: an LF next belongs to it
        self.overflowed = False

    def feed(self, chunk: bytes) -> bytes:
        if self.overflowed:
            return b""  # the rest of an event that was never sent
        lines, partial = self._lines, self._partial
        # Whole events, none of which has data the transform would change: as they came, unread line by line.
        skips = self._skips
        if skips and not (lines or partial or self._after_cr) and chunk.endswith(_EVENT_ENDS) and skips(chunk):
            return chunk
        out: list[bytes] = []
        if self._after_cr and chunk:
            self._after_cr = False
            if chunk[0] == _LF:  # the LF of a CRLF split across chunks: it goes where its CR went
                chunk = chunk[1:]
                if lines:
                    lines[-1] += b"\n"
                    self._size += 1
                else:
                    out.append(b"\n")
        pieces = chunk.splitlines(keepends=True)  # bytes end lines at CRLF, LF and CR only, as WHATWG does
        rest = pieces.pop() if pieces and pieces[-1][-1] not in b"\r\n" else b""
        for line in pieces:
            if partial:
                line = bytes(partial + line)
                partial.clear()
            if line[0] in b"\r\n":  # a blank line: the event ends with it
                lines.append(line)
                raw = b"".join(lines)
                out.append(self._event(raw, len(raw) - len(line)))
                lines.clear()
                self._size, self._data = 0, []
                continue
            lines.append(line)
            self._size += len(line)
            if line.startswith(b"data"):
                field, _, value = line.rstrip(b"\r\n").partition(b":")
                if field == b"data":
                    self._data.append(value[1:] if value.startswith(b" ") else value)
        partial += rest
        if chunk:
            self._after_cr = chunk[-1] == _CR
        if self._max_event is not None and self._size + len(partial) > self._max_event:  # counted as it arrives
            self.overflowed = True
            self.flush()
        return b"".join(out)

    def flush(self) -> bytes:
        """Whatever is left at the end of the stream, unchanged."""
        rest = b"".join(self._lines) + self._partial
        self._lines, self._size, self._partial, self._data = [], 0, bytearray(), []
        self._after_cr = False
        return rest

    def _event(self, raw: bytes, blank: int) -> bytes:
        """One complete event, rewritten or as it came; ``raw[blank:]`` is the blank line that ends it."""
        if not self._data:
            return raw
        data = b"\n".join(self._data)
        if self._skips and self._skips(data):
            return raw
        try:
            text = data.decode()
        except UnicodeDecodeError:
            return raw
        if (new_data := self._transform(text)) is None:
            return raw
        # The data lines replaced by one "data:" line per line of the new data (data spliced into an event
        # that came in several keeps their line breaks; a bare line would be a field of its own), the
        # other fields kept, each line ended as the event's first one is.
        lines = _EOL.split(raw[:blank])[:-1]
        eol = _EOL.search(raw).group()  # type: ignore[union-attr]  # an event ends in line ends
        out = []
        wrote_data = False
        for line in lines:
            if line.partition(b":")[0] != b"data":
                out.append(line + eol)
            elif not wrote_data:
                out.extend(b"data: " + data_line + eol for data_line in _EOL.split(new_data.encode()))
                wrote_data = True
        return b"".join(out) + raw[blank:]


def between_events(tail: bytes) -> bool:
    """Whether a stream that ends with ``tail`` ends between two events: two line ends in a row.

    A CR LF is one line end; a CR at the very end may be the first half of one, and is still a line end.
    """
    if tail.endswith(b"\r\n"):
        rest = tail[:-2]
    elif tail.endswith(_LINE_ENDS):
        rest = tail[:-1]
    else:
        return False
    return rest.endswith(_LINE_ENDS)
