"""What one request knows about handles: its principal's digest and the handles already verified."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..session import RateLimit
    from ._handle import Handle
    from ._registry import Handles

__all__ = ["HandleContext", "current_handle_context", "handle_context"]


class HandleContext:
    """The handle view of one request, set by :class:`HandleMiddleware` (or the session middleware).

    ``handles`` is the registry that checks the request's handles.
    ``principal_digest`` is the digest of the authenticated principal (``None``
    when anonymous): :meth:`Handles.mint` binds new handles to it. ``verified``
    maps each handle the request's arguments carried to its verified
    :class:`Handle`; typed tool parameters read it, so nothing is verified twice.
    ``caller`` is whom the request's mints count against (the principal's
    digest, else ``address:`` and the client address; ``None``: nobody, as for
    the server's own mints), and ``create_limit`` the session middleware's
    create limit, which mints spend too.
    """

    __slots__ = ("caller", "create_limit", "handles", "principal_digest", "verified")

    def __init__(
        self,
        handles: Handles,
        principal_digest: str | None,
        verified: dict[str, Handle] | None = None,
        *,
        caller: str | None = None,
        create_limit: RateLimit | None = None,
    ) -> None:
        self.handles = handles
        self.principal_digest = principal_digest
        self.verified: dict[str, Handle] = {} if verified is None else verified
        self.caller = caller
        self.create_limit = create_limit

    def __repr__(self) -> str:
        return f"<HandleContext principal={'bound' if self.principal_digest else 'none'} handles={len(self.verified)}>"


_current: ContextVar[HandleContext | None] = ContextVar("mcp_sessions.handles", default=None)


def current_handle_context() -> HandleContext | None:
    """The handle context of the current request, or ``None`` outside one."""
    return _current.get()


@contextlib.contextmanager
def handle_context(context: HandleContext) -> Iterator[HandleContext]:
    """Make ``context`` the current request's handle context for the block (what a middleware wraps the app in)."""
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)
