"""What a masked host answers, scrubbed of the values the proxy gave it (issue 103): an API that echoes a request's
headers (an error page, a debug endpoint) hands back the value the proxy put in them, which the process must never
hold. Each value is replaced by its placeholder wherever it appears, in a head's fields whole, and in a body as it
streams: split across reads or chunks, it is found all the same, since what might begin a value at a read's end is
held back until the next read says whether it does. A body whose end never comes (the host's connection cut inside
a value) leaves its held part unsent: the proxy ends the connection instead (``_edge``).

The scan is linear in the answer for each value: ``bytes.find`` from the last match on, never again from every
offset (CPython's search turns to the two-way algorithm where a pattern's comparisons pile up: no answer makes it
quadratic); the part held back between reads is at most a value's length less one byte. No regular expression: an
alternation of literals cannot backtrack catastrophically (nothing in it repeats), but ``re`` tries each at every
offset, as far as it matches, where ``find`` skips: 11 MiB/s against 170 for three values of 40 bytes over 16 MiB
of the byte they begin with, 210 against 4,268 over text."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping


class Scrub:
    """One answer's scrubbing: each value of ``pairs`` (the value, its placeholder) replaced by its placeholder, in a
    head's field (:meth:`field`) and in a body read by read (:meth:`read`, then :meth:`end` once it is whole)."""

    def __init__(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        self.pairs = {value: placeholder for value, placeholder in pairs if value and value != placeholder}
        self.held = b""

    @property
    def same_length(self) -> bool:
        """Whether each placeholder is as long as its value (as made, :func:`._masks.placeholder`): a body's
        ``Content-Length`` stays right; a renewed value of another length makes it wrong."""
        return all(len(value) == len(placeholder) for value, placeholder in self.pairs.items())

    def field(self, text: bytes) -> bytes:
        """A head's field (a header's value, the reason phrase), whole."""
        return _scrubbed(text, self.pairs, whole=True)[0]

    def read(self, data: bytes) -> bytes:
        """What of the body so far may go on: ``data`` after what was held, its values replaced, less the end that
        may begin one (held for the next read)."""
        sent, self.held = _scrubbed(self.held + data, self.pairs, whole=False)
        return sent

    def end(self) -> bytes:
        """The rest of the body, its end come: what was held, which began no value."""
        sent, self.held = _scrubbed(self.held, self.pairs, whole=True)
        return sent


def _scrubbed(window: bytes, pairs: Mapping[bytes, bytes], *, whole: bool) -> tuple[bytes, bytes]:
    """``window`` with each value of ``pairs`` in it replaced (the leftmost first, the longest of those that start
    there), and, unless it is ``whole``, its end from the first place a value may begin that the window does not
    hold whole apart: what may go on, and what is held. A value found whole is replaced only before that place: the
    next read may make a longer one of it, or one that starts earlier."""
    found = {value: window.find(value) for value in pairs}
    parts = []
    at = 0
    held = len(window) if whole else _begun(window, 0, pairs)
    while hits := [(where, -len(value), value) for value, where in found.items() if where >= 0]:
        where, _, value = min(hits)
        if where >= held:
            break
        parts += [window[at:where], pairs[value]]
        at = where + len(value)
        for each in list(found):
            if 0 <= found[each] < at:
                found[each] = window.find(each, at)
        if at > held:  # the value went past where one seemed to begin: that one is gone with it
            held = _begun(window, at, pairs)
    parts.append(window[at:held])
    return b"".join(parts), window[held:]


def _begun(window: bytes, start: int, values: Collection[bytes]) -> int:
    """Where the longest end of ``window`` (from ``start`` on) begins that is the beginning of one of ``values`` but
    not the whole of it (the window's length where none is): at most the longest value's length less one from the
    end. Only that much is held, so a stream's events (``text/event-stream``'s), which end in no value's
    beginning, go on at once."""
    first = len(window)
    for value in values:
        at = window.find(value[:1], max(start, len(window) - len(value) + 1))
        while 0 <= at < first:
            if value.startswith(window[at:]):
                first = at
                break
            at = window.find(value[:1], at + 1)
    return first
