"""The session a client holds, how it retries, how it is kept current, created and deleted.

:class:`HeldSession` is plain data that a transport stamps into requests and
that a host persists. :class:`SessionKeeper` keeps it current from the server's
answers. A server cannot move the client to another session: only two things
set the held token, a ``sessions/create`` this client sent
(:meth:`SessionKeeper.adopt`) and the caller, through the handle. An echo counts
only when it names the held session and answers a request that carried it.
:class:`SessionLifecycle` sends the client's own ``sessions/create`` and
``sessions/delete``; :meth:`RetryPolicy.run` retries every request.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

import anyio

from .._version import __version__
from .._wire import jsonrpc
from .._wire.protocol import INTERNAL_ERROR, METHOD_NOT_FOUND
from ..profiles import (
    DRAFT,
    METHOD_CREATE,
    METHOD_DELETE,
    SESSION_META_KEY,
    SESSIONS_EXTENSION_ID,
    Era,
    required_codes,
)
from ._messages import (
    MAX_OWN_ANSWER,
    AnswerTooLarge,
    Endpoint,
    Failure,
    Headers,
    ResponseLike,
    ResponseT,
    Verdict,
    body_messages,
    failure_of,
    read_all,
    retry_after,
)

if TYPE_CHECKING:
    from ._messages import Attempt, OutgoingPost

logger = logging.getLogger("mcp_sessions.client")


class HeldSession:
    """One conversation's data-layer session, as the client holds it.

    An empty handle (no token) means "no session yet". :meth:`to_dict` and
    :meth:`from_dict` persist it as JSON. The repr shows the stable id (``sid``
    claim), never the token.
    """

    def __init__(
        self,
        token: str | None = None,
        *,
        state: str | None = None,
        expires_at: datetime | str | None = None,
        label: str | None = None,
    ) -> None:
        if token is not None and (not isinstance(token, str) or not token):
            raise TypeError("token must be a non-empty string or None")
        if state is not None and not isinstance(state, str):
            raise TypeError("state must be a string or None")
        if label is not None and not isinstance(label, str):
            raise TypeError("label must be a string or None")
        self.token = token
        """The ``sessionId`` the server minted (a bearer secret: store it like a password), ``None`` if none yet."""
        self.state = state
        """The opaque client-held state from the last echo, sent back with each request."""
        self.expires_at = parse_time(expires_at) if isinstance(expires_at, str) else _utc(expires_at)
        """The last ``expiresAt`` the server announced, as an aware UTC datetime (``None`` if unknown)."""
        self.label = label
        """A short text sent with ``sessions/create``."""

    # -- inspecting -------------------------------------------------------------

    @property
    def claims(self) -> dict[str, object] | None:
        """The token's JWT claims, decoded WITHOUT verification (``None`` if not a JWT).

        Only the server can verify a session id; these claims are for display,
        logs and routing hints, never for a security decision.
        """
        from .._tokens import decode_unverified  # PyJWT, when a session is first read: not on a shim's way to start

        try:
            return None if self.token is None else decode_unverified(self.token)[1]
        except ValueError:
            return None

    @property
    def id(self) -> str | None:
        """The session's stable id (the ``sid`` claim, unverified): safe to log, unlike the token."""
        sid = (self.claims or {}).get("sid")
        return sid if isinstance(sid, str) else None

    def expired(self, now: datetime | None = None) -> bool:
        """Whether ``expires_at`` has passed (``False`` when it is unknown)."""
        if self.expires_at is None:
            return False
        return self.expires_at <= (now or datetime.now(UTC))

    @property
    def active(self) -> bool:
        """Whether there is a token that has not expired by the client's clock."""
        return self.token is not None and not self.expired()

    def meta(self) -> dict[str, str]:
        """The value of ``_meta["io.modelcontextprotocol/session"]`` for a request."""
        if self.token is None:
            raise ValueError("this handle holds no session")
        value = {"sessionId": self.token}
        if self.state is not None:
            value["state"] = self.state
        return value

    def clear(self) -> None:
        """Forget the session (token, state, expiry); the label stays for the next one."""
        self.token = None
        self.state = None
        self.expires_at = None

    # -- persisting -------------------------------------------------------------

    def to_dict(self) -> dict[str, str]:
        """A JSON-ready dict (wire names): ``sessionId``, ``state``, ``expiresAt``, ``label`` when set.

        It contains the token: keep it where you keep credentials.
        """
        expires = None if self.expires_at is None else _format_time(self.expires_at)
        saved = {"sessionId": self.token, "state": self.state, "expiresAt": expires, "label": self.label}
        return {name: value for name, value in saved.items() if value is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> HeldSession:
        """A handle from :meth:`to_dict`'s output, or from a ``sessions/create`` result's ``session``."""
        if not isinstance(data, Mapping):
            raise TypeError("a saved session is a JSON object")
        token, state, expires, label = (_text(data, k) for k in ("sessionId", "state", "expiresAt", "label"))
        return cls(token or None, state=state, expires_at=expires, label=label)

    def __repr__(self) -> str:
        if self.token is None:
            return f"HeldSession(None, label={self.label!r})"
        expires = _format_time(self.expires_at) if self.expires_at is not None else None
        state = "<set>" if self.state is not None else None
        return f"HeldSession(id={self.id!r}, expires_at={expires!r}, state={state}, label={self.label!r})"


@dataclass(frozen=True)
class RetryPolicy:
    """How a transport retries a request the server could not serve now.

    Applies to ``-32010`` (session store unavailable) and any HTTP 503. A
    ``Retry-After`` header is honoured as given; otherwise the delay starts at
    ``backoff`` seconds and doubles up to ``max_backoff``, with jitter (a random
    delay between half and all of it, so that many clients do not retry in step).
    At most ``attempts`` retries, and none that would end past ``deadline``
    seconds after the first try: then the last answer goes to the caller.
    ``RetryPolicy(attempts=0)`` never retries.
    """

    attempts: int = 3
    """How many times to retry at most (0: never)."""
    backoff: float = 0.25
    """The first delay, in seconds, when the server sent no ``Retry-After``."""
    max_backoff: float = 4.0
    """The longest delay, in seconds, that doubling reaches."""
    deadline: float = 15.0
    """Seconds after the first try past which no retry would end."""
    jitter: bool = True
    """Wait a random delay between half and all of the computed one."""

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 0:
            raise ValueError("attempts must be a whole number, 0 or more")
        if not 0 <= self.backoff <= self.max_backoff:
            raise ValueError("backoff must be between 0 and max_backoff seconds")
        if self.deadline < 0:
            raise ValueError("deadline must be 0 seconds or more")

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0 for the first)."""
        if retry_after is not None:
            return max(0.0, retry_after)
        base = min(self.max_backoff, self.backoff * 2.0**retry)
        return random.uniform(base / 2, base) if self.jitter else base  # noqa: S311 - jitter, not security

    async def run(self, attempt: Callable[[], Awaitable[Verdict[ResponseT]]], what: str) -> Verdict[ResponseT]:
        """Call ``attempt`` until its answer is not busy, or the policy allows no more retries: the last answer.

        The one retry loop of the client, for the caller's requests and its own alike.
        """
        started, retries = time.monotonic(), 0
        while True:
            verdict = await attempt()
            if not verdict.busy or retries >= self.attempts:
                return verdict
            delay = self.delay(retries, verdict.wait)
            if time.monotonic() - started + delay > self.deadline:
                return verdict
            await verdict.discard()
            logger.info("%s: server unavailable (-32010 or HTTP 503), retry %d in %.2f s", what, retries + 1, delay)
            await anyio.sleep(delay)
            retries += 1


def _text(data: Mapping[str, object], name: str) -> str | None:
    """A saved session's member ``name``: a string or ``None``; :class:`ValueError` for anything else."""
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"a saved session's {name!r} must be a string")
    return value


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise TypeError("expires_at must be a datetime, an RFC 3339 string or None")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def parse_time(text: str) -> datetime:
    """An RFC 3339 timestamp as an aware UTC datetime; :class:`ValueError` otherwise."""
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return parsed.astimezone(UTC)


def _format_time(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")  # microseconds only when there are some


ChangeHook = Callable[[HeldSession], "Awaitable[None] | None"]


class SessionKeeper:
    """Holds one :class:`HeldSession` and what the server said about sessions."""

    def __init__(self, session: HeldSession, on_change: ChangeHook | None) -> None:
        self.session = session
        self.on_change = on_change
        self._echo = DRAFT.echo
        # The server may answer with any of the code sets (error_codes=): each is read.
        self.required_codes = required_codes(DRAFT)
        # Codes that say "the session this request carried is gone".
        self.gone_codes = DRAFT.gone_codes()
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
        elif method == METHOD_DELETE and named_held:
            self.drop(token, "it was deleted")

    def _take_echo(self, result: dict[str, object], *, named_held: bool) -> None:
        meta = jsonrpc.meta(result)
        if meta is None or self._echo.meta_key not in meta:
            return
        echo = meta[self._echo.meta_key]
        if not isinstance(echo, dict):
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


Post = Callable[[object, Headers, bytes, Mapping[str, object], str], Awaitable[ResponseLike]]
"""Send a request (url, headers, body, extensions, HTTP method) through the wrapped transport."""


class SessionLifecycle:
    """Creates and deletes the held session with requests of the client's own, sent with ``post``."""

    def __init__(self, post: Post, keeper: SessionKeeper, retry: RetryPolicy) -> None:
        self._post = post
        self._keeper = keeper
        self._retry = retry
        self._ids = itertools.count(1)

    async def create(self, endpoint: Endpoint) -> Failure | None:
        """Create a session and hold it; the server's refusal, if it refused (``-32601``: it has no sessions)."""
        label = self._keeper.session.label
        async with self._in_transport_session(endpoint) as endpoint:
            reply = await self._call(endpoint, METHOD_CREATE, {} if label is None else {"label": label}, None)
        if isinstance(reply, Failure):
            if reply.code == METHOD_NOT_FOUND:
                self._keeper.mark_unsupported()
            return reply
        session = reply.get("session")
        token = session.get("sessionId") if isinstance(session, dict) else None
        if not isinstance(session, dict) or not isinstance(token, str) or not token:
            return Failure(INTERNAL_ERROR, f"the {METHOD_CREATE} result has no session")
        self._keeper.adopt(token, session)
        return None

    async def delete(self, endpoint: Endpoint) -> bool:
        """Delete the held session and forget it: ``False`` if there was none or the server no longer knew it.

        Other refusals raise :class:`SessionError`.
        """
        token = self._keeper.session.token
        if token is None:
            return False
        params: dict[str, object] = {"_meta": {SESSION_META_KEY: {"sessionId": token}}}
        async with self._in_transport_session(endpoint) as endpoint:
            reply = await self._call(endpoint, METHOD_DELETE, params, token)
        if isinstance(reply, Failure) and reply.code not in self._keeper.gone_codes:
            raise reply.error()
        if isinstance(reply, Failure):  # a delete of a session that is gone is -32043, not a result
            self._keeper.drop(token, "the server no longer knows it")
            return False
        self._keeper.drop(token, "it was deleted")
        return True

    @asynccontextmanager
    async def _in_transport_session(self, endpoint: Endpoint) -> AsyncIterator[Endpoint]:
        """``endpoint`` in a transport session of its own on the 2025 wire, where a stateful server takes no
        request outside one: opened with the handshake when the caller named none, ended (DELETE) after."""
        headers = dict(endpoint.headers)
        if endpoint.era is not Era.LEGACY or "mcp-session-id" in headers:
            yield endpoint
            return
        params: dict[str, object] = {"protocolVersion": headers.get("mcp-protocol-version"), "capabilities": {}}
        params["clientInfo"] = {"name": "mcp-sessions", "version": __version__}
        body, framed = endpoint.request(f"mcp-sessions-{next(self._ids)}", "initialize", params, None)
        response = await self._post(endpoint.url, framed, body, endpoint.extensions, "POST")
        await read_all(response, MAX_OWN_ANSWER)
        transport_id = response.headers.get("mcp-session-id")
        if transport_id is None:  # a stateless server: every request stands alone
            yield endpoint
            return
        opened = replace(endpoint, headers=[*endpoint.headers, ("mcp-session-id", transport_id)])
        body = jsonrpc.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
        framed = [*opened.headers, ("content-length", str(len(body)))]
        await read_all(await self._post(endpoint.url, framed, body, endpoint.extensions, "POST"), MAX_OWN_ANSWER)
        try:
            yield opened
        finally:
            with anyio.CancelScope(shield=True):
                delete = await self._post(endpoint.url, opened.headers, b"", endpoint.extensions, "DELETE")
                await read_all(delete, MAX_OWN_ANSWER)

    async def _call(
        self, endpoint: Endpoint, method: str, params: dict[str, object], token: str | None
    ) -> dict[str, object] | Failure:
        """Send one request, retried by the policy; its result or its failure."""
        request_id = f"mcp-sessions-{next(self._ids)}"
        body, headers = endpoint.request(request_id, method, params, token)

        async def attempt() -> Verdict[ResponseLike]:
            response = await self._post(endpoint.url, headers, body, endpoint.extensions, "POST")
            messages = body_messages(response, await read_all(response, MAX_OWN_ANSWER))
            return Verdict.of(response, messages, retry_after(response.headers.get("retry-after")))

        try:
            verdict = await self._retry.run(attempt, method)
        except AnswerTooLarge as exc:
            return Failure(exc.code, f"{method}: {exc.message}")
        reply = next((m for m in verdict.deciding if isinstance(m, dict) and m.get("id") == request_id), None)
        reply = reply if reply is not None else _lone_error(verdict.deciding)
        result = reply.get("result") if reply is not None else None
        if isinstance(result, dict) and verdict.response.status_code < 300:
            return result
        return failure_of(reply, verdict.response)


def _lone_error(messages: list[object]) -> dict[str, object] | None:
    """The answer's one message when it is an error under another id: the server's refusal of the one request
    sent. A server that could not read the request's id answers with ``null`` (JSON-RPC 2.0 §5); mcp 1.x
    answers a request outside its transport session with ``"server-error"`` ("Bad Request: Missing session ID")."""
    [message] = messages if len(messages) == 1 else [None]
    return message if isinstance(message, dict) and "error" in message and "method" not in message else None
