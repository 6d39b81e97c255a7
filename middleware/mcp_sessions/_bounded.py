"""One bounded map for everything the middleware remembers per caller, session or token."""

from collections import OrderedDict
from typing import TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")


class BoundedDict(OrderedDict[_K, _V]):
    """A dict of at most ``maxsize`` items that forgets the least recently stored first.

    Storing an item makes it the most recent; reading does not (call
    :meth:`touch` for that). What a peer can add without limit is kept in one
    of these, so memory stays bounded whatever it sends.
    """

    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def __setitem__(self, key: _K, value: _V) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.maxsize:
            self.evicted(*self.popitem(last=False))

    def touch(self, key: _K) -> None:
        """Make ``key`` the most recent, if it is here."""
        if key in self:
            self.move_to_end(key)

    def evicted(self, key: _K, value: _V) -> None:
        """Called with each item forgotten for room; a subclass that counts what it holds overrides it."""
