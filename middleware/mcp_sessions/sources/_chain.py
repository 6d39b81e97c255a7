"""The chain a middleware asks: sources given as objects, or as factories given a :class:`SourceContext`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, TypeGuard

from ._base import SessionSource, SourceContext, SourceFactory
from ._data_layer import DataLayerSource
from ._host import HostConversationSource
from ._transport import TransportSource

DEFAULT_SOURCES: Final[tuple[SourceFactory, ...]] = (
    DataLayerSource.from_context,
    HostConversationSource.from_context,
    TransportSource.from_context,
)
"""The built-in chain: a data-layer session always wins; then a host's conversation; then, with
``adopt_transport_sessions``, the 2025 transport session."""


def _is_factory(entry: SessionSource | SourceFactory) -> TypeGuard[SourceFactory]:
    """A class (whose instances are sources) or a function: called with the middleware's context."""
    return isinstance(entry, type) or not isinstance(entry, SessionSource)


def check_chain(entries: Iterable[SessionSource | SourceFactory]) -> tuple[SessionSource | SourceFactory, ...]:
    """``entries`` as a chain; ``TypeError`` naming an entry that is neither a source nor a factory."""
    chain = tuple(entries)
    for entry in chain:
        if _is_factory(entry) and not callable(entry):
            raise TypeError(
                "sources= takes session sources (objects with name and session_for) and factories that "
                f"build one from a SourceContext (a class, or a function such as DataLayerSource.from_context), "
                f"not {entry!r}"
            )
    return chain


def build_chain(entries: Iterable[SessionSource | SourceFactory], context: SourceContext) -> tuple[SessionSource, ...]:
    """The sources of one middleware, in order: each object as it is, each factory's source (if any)."""
    chain: list[SessionSource] = []
    for entry in entries:
        if _is_factory(entry):
            if (source := entry(context)) is not None:
                chain.append(source)
        elif isinstance(entry, SessionSource):
            chain.append(entry)
    return tuple(chain)
