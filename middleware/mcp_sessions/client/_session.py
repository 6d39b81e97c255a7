"""What a client holds of one data-layer session, how it retries, and how it fails.

No HTTP here: :class:`SessionHandle` is plain data that a transport stamps into
requests and keeps current from the server's echo, and that a host persists.
"""

from __future__ import annotations

import base64
import binascii
import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime


class SessionError(Exception):
    """A session operation the server refused, or a server without sessions.

    ``code`` is the JSON-RPC error code (``-32601`` when the server does not know
    ``sessions/create``), ``message`` the server's message and ``data`` its
    ``data``. The string form never contains ``data``: for ``-32043`` it repeats
    the session id, a bearer secret.
    """

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data


class SessionHandle:
    """One conversation's data-layer session, as the client holds it.

    An empty handle (no token) means "no session yet". :meth:`to_dict` and
    :meth:`from_dict` persist it as JSON. The repr shows the stable id (``sid``
    claim), never the token.
    """

    __slots__ = ("expires_at", "label", "state", "token")

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
        return None if self.token is None else _unverified_claims(self.token)

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
    def from_dict(cls, data: Mapping[str, object]) -> SessionHandle:
        """A handle from :meth:`to_dict`'s output, or from a ``sessions/create`` result's ``session``."""
        if not isinstance(data, Mapping):
            raise TypeError("a saved session is a JSON object")
        token, state, expires, label = (_text(data, k) for k in ("sessionId", "state", "expiresAt", "label"))
        return cls(token or None, state=state, expires_at=expires, label=label)

    def __repr__(self) -> str:
        if self.token is None:
            return f"SessionHandle(None, label={self.label!r})"
        expires = _format_time(self.expires_at) if self.expires_at is not None else None
        state = "<set>" if self.state is not None else None
        return f"SessionHandle(id={self.id!r}, expires_at={expires!r}, state={state}, label={self.label!r})"


@dataclass(frozen=True, slots=True)
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

    def _next_delay(self, retries: int, started: float, retry_after: float | None) -> float | None:
        """The wait before retry number ``retries``, or ``None`` when the policy allows no more.

        ``started`` is the ``time.monotonic()`` of the first try: no retry may end past the deadline.
        """
        if retries >= self.attempts:
            return None
        delay = self.delay(retries, retry_after)
        return delay if time.monotonic() - started + delay <= self.deadline else None


def _unverified_claims(token: str) -> dict[str, object] | None:
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        return None
    return claims if isinstance(claims, dict) else None


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
