"""An incremental ``text/event-stream`` rewriter that never holds back a complete event.

Events are found by the WHATWG grammar (lines end in CRLF, LF or CR; a blank line ends an event). Each
complete event leaves with the chunk that completes it, byte for byte as it arrived unless its data is
rewritten; only the bytes of an unfinished event wait for the next chunk, and only up to ``max_event`` of
them: past it the rewriter holds nothing more and says so (:attr:`SSERewriter.overflowed`), for its caller
to end the stream.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

_EOL: Final = re.compile(rb"\r\n|\r|\n")
# The line end of an event's last line, then the blank line (group 1) that ends the event. A CR is a line
# end of its own only when no LF follows it (else the two are one CRLF).
_EVENT_END: Final = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(\r\n|\r|\n)")

Transform = Callable[[str], "str | None"]


class SSERewriter:
    """Feed raw chunks, get back the bytes to send now.

    ``transform`` receives each event's data (the ``data:`` lines joined by ``\\n``) and returns new
    data, or ``None`` to leave the event untouched. An unfinished event longer than ``max_event`` bytes
    is dropped, and :attr:`overflowed` set: the stream cannot go on, as what follows is the rest of an
    event never sent.
    """

    def __init__(self, transform: Transform, *, max_event: int | None = None) -> None:
        self._transform = transform
        self._max_event = max_event
        self._buf = bytearray()
        self.overflowed = False

    def feed(self, chunk: bytes) -> bytes:
        if self.overflowed:
            return b""  # the rest of an event that was never sent
        buf = self._buf
        # The bytes held end no event, but an end may begin in their last two ("\r\n" + "\n"): the search
        # starts there, so that each byte is scanned a bounded number of times.
        search_from = max(len(buf) - 2, 0)
        buf += chunk
        out = []
        start = 0
        while True:
            if (blank := _EOL.match(buf, start)) is not None:
                end = blank.end()  # a blank line where an event would start (or the LF of a CRLF split)
                out.append(bytes(buf[start:end]))
            elif (match := _EVENT_END.search(buf, max(search_from, start))) is not None:
                end = match.end()
                out.append(self._event(bytes(buf[start:end]), match.start(1) - start))
            else:
                break
            start = end
        del buf[:start]
        if self._max_event is not None and len(buf) > self._max_event:  # counted as it arrives
            self.overflowed = True
            buf.clear()
        return b"".join(out)

    def flush(self) -> bytes:
        """Whatever is left at the end of the stream, unchanged."""
        rest = bytes(self._buf)
        self._buf.clear()
        return rest

    def _event(self, raw: bytes, blank: int) -> bytes:
        """One complete event, rewritten or as it came; ``raw[blank:]`` is the blank line that ends it."""
        lines = _EOL.split(raw[:blank])[:-1]
        data_lines = []
        for line in lines:
            field, _, value = line.partition(b":")
            if field == b"data":
                data_lines.append(value[1:] if value.startswith(b" ") else value)
        try:
            data = b"\n".join(data_lines).decode()
        except UnicodeDecodeError:
            return raw
        if not data_lines or (new_data := self._transform(data)) is None:
            return raw
        # The data lines replaced by one "data:" line per line of the new data (data spliced into an event
        # that came in several keeps their line breaks; a bare line would be a field of its own), the
        # other fields kept, each line ended as the event's first one is.
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
