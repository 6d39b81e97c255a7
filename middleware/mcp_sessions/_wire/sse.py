"""An incremental ``text/event-stream`` rewriter that never holds back a complete event.

Events are found by the WHATWG grammar (lines end in CRLF, LF or CR; a blank
line ends an event). Every event the caller does not rewrite leaves byte for
byte as it arrived; only the bytes of an unfinished event wait for the next
chunk, and only up to ``max_event`` of them: past it the rewriter holds nothing
more and says so (:attr:`SSERewriter.overflowed`), for its caller to end the stream.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

_EOL: Final = re.compile(rb"\r\n|\r|\n")

Transform = Callable[[str], "str | None"]


class SSERewriter:
    """Feed raw chunks, get back the bytes to send now.

    ``transform`` receives each event's data (the ``data:`` lines joined by
    ``\\n``) and returns new data, or ``None`` to leave the event untouched.
    Once ``transform`` has rewritten an event and ``once`` is set, the rest of
    the stream passes through without being scanned. With ``needles``, an event
    whose bytes contain none of them is passed on without being decoded; with
    ``openings``, so is a chunk that is one event beginning with one of them
    and whose data is one line, checked by its first bytes and its line ends
    only. The caller promises that ``transform`` would leave such events alone.
    An unfinished event longer than ``max_event`` bytes is dropped, and :attr:`overflowed`
    set: the stream cannot go on, as what follows is the rest of an event never sent.
    """

    __slots__ = (
        "_buf",
        "_cr_pending",
        "_done",
        "_event_start",
        "_line_start",
        "_max_event",
        "_needles",
        "_once",
        "_openings",
        "_transform",
        "overflowed",
    )

    def __init__(
        self,
        transform: Transform,
        *,
        once: bool = True,
        needles: tuple[bytes, ...] = (),
        openings: tuple[bytes, ...] = (),
        max_event: int | None = None,
    ) -> None:
        self._transform = transform
        self._max_event = max_event
        self.overflowed = False
        self._once = once
        self._needles = needles
        self._openings = openings
        self._done = False
        self._buf = bytearray()
        self._event_start = 0
        self._line_start = 0
        self._cr_pending = False

    def feed(self, chunk: bytes) -> bytes:
        if self._done:
            return chunk
        if self.overflowed:
            return b""  # the rest of an event that was never sent
        if self._buf or self._cr_pending:
            pass  # an event is under way: this chunk continues it
        # A chunk that ends on a blank line (and with LF: no CRLF split across chunks) holds whole events only.
        elif (crlf := chunk.endswith(b"\r\n\r\n")) or chunk.endswith(b"\n\n"):
            for opening in self._openings:
                if chunk.startswith(opening):
                    # One event, its last line the one the opening starts: no other line end before the blank line.
                    end = len(chunk) - (4 if crlf else 2)
                    if chunk.find(b"\n", len(opening), end) < 0 and chunk.find(b"\r", len(opening), end) < 0:
                        return chunk
                    break
            if self._needles:
                for needle in self._needles:
                    if needle in chunk:
                        break
                else:
                    return chunk  # only whole events, none of which can be rewritten: passed on unparsed
        out = bytearray()
        buf = self._buf
        if self._cr_pending:
            self._cr_pending = False
            if chunk[:1] == b"\n":
                # The LF of a CRLF split across chunks belongs to the line before it.
                chunk = chunk[1:]
                if buf:
                    buf += b"\n"
                    self._line_start = len(buf)
                else:
                    out += b"\n"
        pos = len(buf)
        buf += chunk
        emitted = 0
        while (match := _EOL.search(buf, pos)) is not None:
            eol_start, pos = match.span()
            if eol_start == self._line_start:
                # A blank line: the event [event_start, pos) is complete.
                out += self._finish_event(self._event_start, eol_start, pos)
                emitted = self._event_start = pos
                if self._done:
                    out += buf[pos:]
                    emitted = len(buf)
                    break
            self._line_start = pos
        else:
            self._cr_pending = pos == len(buf) and pos > 0 and buf[pos - 1] == 0x0D
        if emitted:
            del buf[:emitted]
            self._event_start -= emitted
            self._line_start = max(self._line_start - emitted, 0)
        if self._max_event is not None and len(buf) > self._max_event:  # counted as it arrives
            self.overflowed = True
            self.flush()
        return bytes(out)

    def flush(self) -> bytes:
        """Whatever is left at the end of the stream, unchanged."""
        rest = bytes(self._buf)
        self._buf.clear()
        self._event_start = self._line_start = 0
        return rest

    def _finish_event(self, start: int, blank_start: int, end: int) -> bytes:
        buf = self._buf
        raw = bytes(buf[start:end])
        if self._needles and all(buf.find(needle, start, blank_start) == -1 for needle in self._needles):
            return raw  # e.g. a progress notification: a few byte scans, no decoding
        body = raw[: blank_start - start]
        lines = _EOL.split(body)[:-1]
        data_lines = []
        for line in lines:
            field, _, value = line.partition(b":")
            if field == b"data":
                data_lines.append(value[1:] if value.startswith(b" ") else value)
        try:
            data = b"\n".join(data_lines).decode()
        except UnicodeDecodeError:
            return raw
        new_data = self._transform(data) if data_lines else None
        if new_data is None:
            return raw
        if self._once:
            self._done = True
        # The data lines replaced by one "data:" line per line of the new data (data spliced into an event
        # that came in several keeps their line breaks; a bare line would be a field of its own), the
        # other fields kept, each line ended as the event's first one is.
        eol = match.group() if (match := _EOL.search(body)) else b"\n"
        out = bytearray()
        wrote_data = False
        for line in lines:
            if line.partition(b":")[0] != b"data":
                out += line + eol
            elif not wrote_data:
                out += b"".join(b"data: " + data_line + eol for data_line in _EOL.split(new_data.encode()))
                wrote_data = True
        return bytes(out + raw[blank_start - start :])
