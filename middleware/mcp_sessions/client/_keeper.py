"""The held session: kept current from the server's answers, dropped when it is gone, reported on change.

A server cannot move the client to another session. Only two things set the
held token: a ``sessions/create`` this client sent (:meth:`SessionKeeper.adopt`)
and the caller, through the handle. An echo counts only when it names the held
session and answers a request that carried it; any other echo is ignored.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .. import _jsonrpc as jsonrpc
from ..profiles.draft import METHOD_DELETE, SESSION_META_KEY, SESSION_NOT_FOUND, SESSIONS_EXTENSION_ID
from ._outgoing import Attempt, OutgoingPost
from ._session import SessionHandle

__all__ = ["ChangeHook", "SessionKeeper"]

logger = logging.getLogger("mcp_sessions.client")

ChangeHook = Callable[[SessionHandle], "Awaitable[None] | None"]


class SessionKeeper:
    """Holds one :class:`SessionHandle` and what the server said about sessions."""

    def __init__(self, session: SessionHandle, on_change: ChangeHook | None) -> None:
        self.session = session
        self.on_change = on_change
        # None: the server has not said; False: it has no sessions (capability or -32601).
        self.supported: bool | None = None
        self._changed = False

    # -- what the server answered ---------------------------------------------------

    def observe(self, post: OutgoingPost, attempt: Attempt, message: Any) -> None:
        """Learn from one answer to ``post``: the echo, the capability, a session the server no longer knows."""
        if not jsonrpc.is_response(message):
            return
        request_id = message["id"]
        token = self.session.token
        if isinstance(message.get("result"), dict):
            self._take_echo(message, named_held=attempt.named(request_id, token))
            method = post.method_of(request_id)
            if method in ("server/discover", "initialize"):
                self._observe_capability(message["result"])
            elif method == METHOD_DELETE and token is not None and attempt.named(request_id, token):
                self.drop(token, "it was deleted")
        elif (
            jsonrpc.error_code(message) == SESSION_NOT_FOUND and token is not None and attempt.named(request_id, token)
        ):
            self.drop(token, "the server answered -32043 (session not found)")

    def _take_echo(self, message: dict[str, Any], *, named_held: bool) -> None:
        echo = jsonrpc.echoed_session(message, SESSION_META_KEY)
        if echo is None:
            return
        if self.session.token is None or echo.get("sessionId") != self.session.token:
            logger.debug("ignored a session echo: it names a session this client does not hold")
        elif not named_held:
            logger.debug("ignored a session echo: it answers a request that did not carry the held session")
        else:
            self._changed |= self.session._take_echo(echo)

    def _observe_capability(self, result: dict[str, Any]) -> None:
        capabilities = result.get("capabilities")
        if not isinstance(capabilities, dict):
            return
        extensions, experimental = capabilities.get("extensions"), capabilities.get("experimental")
        supported = (
            "sessions" in capabilities
            or (isinstance(extensions, dict) and SESSIONS_EXTENSION_ID in extensions)
            or (isinstance(experimental, dict) and "sessions" in experimental)
        )
        if self.supported is not supported:
            logger.debug("the server %s sessions", "advertises" if supported else "does not advertise")
        self.supported = supported

    # -- changes ------------------------------------------------------------------------

    def adopt(self, token: str, created: Mapping[str, Any]) -> None:
        """Hold the session ``sessions/create`` just returned, forgetting any other."""
        self.session.clear()
        self.session.token = token
        self.session._take_echo(created)
        self._changed = True
        logger.info("created session %s (expires %s)", self.session.id, created.get("expiresAt"))

    def drop(self, token: str, reason: str) -> None:
        """Forget the held session, if it is still ``token`` (another request may have replaced it)."""
        if self.session.token != token:
            return
        logger.info("dropping session %s: %s", self.session.id, reason)
        self.session.clear()
        self._changed = True

    def drop_if_expired(self) -> None:
        """Forget a held session that has expired by this client's clock: it is never sent."""
        if self.session.token is not None and self.session.expired():
            self.drop(self.session.token, "it expired by this client's clock")

    def mark_unsupported(self) -> None:
        """Remember that the server has no sessions (-32601 to sessions/create); warn once."""
        if self.supported is not False:
            logger.warning("the server does not support data-layer sessions: requests go out without one")
        self.supported = False

    async def report_changes(self) -> None:
        """Run the ``on_change`` hook if the session changed; a failing hook is logged, never raised."""
        if not self._changed:
            return
        self._changed = False
        if self.on_change is None:
            return
        try:
            outcome = self.on_change(self.session)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            logger.exception("the on_change hook failed")
