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
from typing import cast

from .._wire import jsonrpc
from ..profiles import ClientSide, Echo, WireProfile, not_found_codes, required_codes
from ._outgoing import Attempt, OutgoingPost
from ._session import SessionHandle, parse_time

logger = logging.getLogger("mcp_sessions.client")

ChangeHook = Callable[[SessionHandle], "Awaitable[None] | None"]


class SessionKeeper:
    """Holds one :class:`SessionHandle` and what the server said about sessions."""

    def __init__(self, session: SessionHandle, on_change: ChangeHook | None, profile: WireProfile) -> None:
        if profile.client is None or not isinstance(profile.echo, Echo):
            raise ValueError(f"the client does not speak the session wire {profile.name!r}")
        self.session = session
        self.on_change = on_change
        self.profile = profile
        self.wire: ClientSide = profile.client
        self._echo: Echo = profile.echo
        # The server may answer with the seeds' codes or the spec-safe ones (error_codes=): both are read.
        self.required_codes = required_codes(profile)
        # Codes that say "the session this request carried is gone": on a wire that treats a gone
        # session as none, a "required" error to a request that carried one says it too.
        gone = not_found_codes(profile)
        self.gone_codes = gone | self.required_codes if profile.unknown_is_no_session else gone
        # None: the server has not said; False: it has no sessions (capability or -32601).
        self.supported: bool | None = None
        self._changed = False

    # -- what the server answered ---------------------------------------------------

    def observe(self, post: OutgoingPost, attempt: Attempt, message: object) -> None:
        """Learn from one answer to ``post``: the echo, the capability, a session the server no longer knows."""
        if not jsonrpc.is_response(message):
            return
        message = cast("dict[str, object]", message)  # is_response checked that it is an object
        request_id = message["id"]
        token = self.session.token
        named_held = attempt.named(request_id, token)
        result = message.get("result")
        if not isinstance(result, dict):
            code = jsonrpc.error_code(message)
            if code in self.gone_codes and named_held:
                self.drop(token, f"the server answered {code} (session gone)")
            return
        self._take_echo(result, named_held=named_held)
        method = post.method_of(request_id)
        if method in ("server/discover", "initialize"):
            self._observe_capability(result)
        elif method == self.wire.delete_method and named_held:
            self.drop(token, "it was deleted")

    def _take_echo(self, result: dict[str, object], *, named_held: bool) -> None:
        meta = result.get("_meta")
        if not isinstance(meta, dict) or self._echo.meta_key not in meta:
            return
        echo = meta[self._echo.meta_key]
        if echo is None and named_held and self.profile.unknown_is_no_session:
            self.drop(self.session.token, "the server revoked it (a null session in the result)")
        elif not isinstance(echo, dict):
            return
        elif self.session.token is None or echo.get(self._echo.id_member) != self.session.token:
            logger.debug("ignored a session echo: it names a session this client does not hold")
        elif not named_held:
            logger.debug("ignored a session echo: it answers a request that did not carry the held session")
        else:
            self._update(echo)

    def _update(self, echo: Mapping[str, object]) -> None:
        """Take the state and expiry of an echo of the held session (in the wire's member names).

        An absent state leaves the held state alone; an explicit ``null`` clears it.
        """
        session, state_member = self.session, self._echo.state_member
        if state_member is not None and state_member in echo:
            state = echo[state_member]
            if (state is None or isinstance(state, str)) and state != session.state:
                session.state = state
                self._changed = True
        expires = echo.get(self._echo.expiry_member)
        try:
            parsed = parse_time(expires) if isinstance(expires, str) else None
        except ValueError:
            parsed = None
        if parsed is not None and parsed != session.expires_at:
            session.expires_at = parsed
            self._changed = True

    def _observe_capability(self, result: dict[str, object]) -> None:
        capabilities = result.get("capabilities")
        if not isinstance(capabilities, dict):
            return
        supported = self.wire.advertised(capabilities)
        if self.supported is not supported:
            logger.debug("the server %s sessions", "advertises" if supported else "does not advertise")
        self.supported = supported

    # -- changes ------------------------------------------------------------------------

    def adopt(self, token: str, created: Mapping[str, object]) -> None:
        """Hold the session ``sessions/create`` just returned, forgetting any other."""
        self.session.clear()
        self.session.token = token
        self._update(created)
        self._changed = True
        logger.info("created session %s (expires %s)", self.session.id, created.get(self._echo.expiry_member))

    def drop(self, token: str | None, reason: str) -> None:
        """Forget the held session, if it is still ``token`` (another request may have replaced it)."""
        if token is None or self.session.token != token:
            return
        logger.info("dropping session %s: %s", self.session.id, reason)
        self.session.clear()
        self._changed = True

    def drop_if_expired(self) -> None:
        """Forget a held session that has expired by this client's clock: it is never sent."""
        if self.session.expired():
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
