"""The conversation of the request being handled, on every log record, as asgi-correlation-id's filter adds its id."""

from __future__ import annotations

import logging
from typing import Final

from ._session import current_conversation, current_session

OUTSIDE: Final = "-"


class SessionLogFilter(logging.Filter):
    """Adds ``record.session_id`` and ``record.session_source`` to every record it sees.

    While the middleware handles a request that belongs to a conversation, they
    are what the request's spans carry in ``session.id`` and
    ``mcp_sessions.session.source``: the session's stable id (never its token)
    and ``data-layer``; an adopted transport session's digest and
    ``transport``; a host's conversation id and the host's source name
    (``openai``, ``vscode``, …), with or without conversation data. Anywhere
    else, both are ``default`` (``"-"``). It reads the context variables the
    middleware sets, so it names the request whose code logged: the tool's, the
    SDK's or the middleware's. It never drops a record.

    Attach it to the handlers (``"filters": ["session"]`` in a
    :func:`logging.config.dictConfig`) so that every logger's records get it,
    and format with ``%(session_id)s`` and ``%(session_source)s``.
    """

    def __init__(self, name: str = "", *, default: str = OUTSIDE) -> None:
        super().__init__(name)
        self.default = default

    def filter(self, record: logging.LogRecord) -> bool:
        """Set the two attributes on ``record``; always keep it."""
        named = current_conversation.get()
        if named is None:
            session = current_session.get()
            named = (self.default, self.default) if session is None else (session.id, session.source)
        record.session_id, record.session_source = named
        return True
