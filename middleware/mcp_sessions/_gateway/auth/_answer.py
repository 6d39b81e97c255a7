"""One bounded reader of an authorization server's answer, for the token exchange and the users' sign-ins alike, and
what both make of a token endpoint's answer.

Both ask strangers (token endpoints, metadata, registration, key sets) and read each answer the same way: within a
timeout, at most :data:`MAX_ANSWER` bytes, a failure to reach the server or to hear it out a 502 or 504 of the
caller's own error and wording. A token endpoint's answer is read by :func:`issued` (a bearer token's characters,
RFC 6750 §2.1, or refused) and its refusal by :func:`refusal`; one request a key is in flight at a time
(:class:`SingleFlight`). Here, not in ``_exchange`` or ``_oauth``, so that neither imports the other for it.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, NamedTuple, TypeVar

import anyio

from ..._bounded import BoundedDict
from ..._wire import jsonrpc

if TYPE_CHECKING:
    import httpx2

logger = logging.getLogger("mcp_sessions.gateway")

MAX_ANSWER: Final = 64 * 1024
"""The most of a server's answer read."""
# RFC 6750 §2.1's b64token: what may follow "Bearer " in a header.
_BEARER: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# RFC 6749 §5.2: the characters of "error" and "error_description"; §3.3: a scope's.
ERROR_CODE: Final = re.compile(r"[\x20-\x21\x23-\x5b\x5d-\x7e]{1,64}")
_SCOPE: Final = re.compile(r"(?=.{1,1024}$)[\x21\x23-\x5b\x5d-\x7e]+(?: [\x21\x23-\x5b\x5d-\x7e]+)*")
_K = TypeVar("_K", bound=Hashable)
_E = TypeVar("_E", bound=Exception)
_R = TypeVar("_R")


class AnswerTooLong(Exception):
    """A server's answer went past :data:`MAX_ANSWER` bytes (``_token``'s transport stops reading it there)."""


def now() -> float:
    """The clock every expiry of the gateway's authorization is decided on: wall-clock seconds, as a token's
    ``exp`` is. What decides takes it as its ``clock``, so that a test moves time rather than waiting for it."""
    return time.time()


async def read_answer(
    http: httpx2.AsyncClient,
    request: httpx2.Request,
    seconds: float,
    server: str,
    failed: Callable[[str, int], Exception],
) -> tuple[httpx2.Response, Any]:
    """The answer to ``request``, sent by ``http`` (``_token.oauth_client``'s, which reads at most
    :data:`MAX_ANSWER` bytes), and its JSON (``None`` if not), as :func:`heard` hears it."""
    response = await heard(http.send(request), request.url.host, seconds, server, failed)
    return response, jsonrpc.loads(response.content, answer=True, strict=True)  # None, not JSON: judged by its status


async def heard(
    answer: Awaitable[_R], host: str, seconds: float, server: str, failed: Callable[[str, int], Exception]
) -> _R:
    """``answer`` (a request to ``host`` and its whole answer read) within ``seconds``; else ``failed(description,
    status)`` raised, each description beginning with ``server`` (how the caller names the server to its client):
    504 for no answer in time, 502 for one too long (:class:`AnswerTooLong`), a connection closed without one, or a
    server not reached. The log names the host, never the request."""
    import httpx2  # loaded as the caller's client was made

    try:
        with anyio.fail_after(seconds):
            return await answer
    except AnswerTooLong:
        raise failed(f"{server}'s answer is too long", 502) from None
    except TimeoutError:
        logger.warning("mcp-sessions gateway: %s did not answer in %g s", host, seconds)
        raise failed(f"{server} did not answer in time", 504) from None
    # httpx2's failures of a connection it made (a ConnectError or ConnectTimeout is one never made): the server
    # reset it (ReadError, WriteError) or ended it before a whole answer (RemoteProtocolError).
    except (httpx2.ReadError, httpx2.WriteError, httpx2.RemoteProtocolError) as exc:
        failure = type(exc).__name__
        logger.warning("mcp-sessions gateway: %s closed the connection without an answer: %s", host, failure)
        raise failed(f"{server} closed the connection without an answer", 502) from None
    except httpx2.HTTPError as exc:
        logger.warning("mcp-sessions gateway: %s could not be reached: %s", host, type(exc).__name__)
        raise failed(f"{server} could not be reached", 502) from None


class Issued(NamedTuple):
    """A token endpoint's successful answer (RFC 6749 §5.1): the access token, its lifetime in seconds (``None``:
    not said), the refresh token (``None``: none issued), and the scope granted where it is said."""

    token: str
    lifetime: float | None
    refresh: str | None
    scope: str | None


def issued(answer: dict[str, Any], server: str, failed: Callable[[str, int], Exception]) -> Issued:
    """What ``server``'s token endpoint issued in ``answer``: a bearer token (its characters RFC 6750's, its
    ``token_type`` ``Bearer``), else ``failed``'s 502."""
    token = answer.get("access_token")
    kind = answer.get("token_type")
    if not isinstance(token, str) or not _BEARER.fullmatch(token):
        raise failed(f"{server} issued no bearer token", 502)
    # N_A (RFC 8693 §2.2.1) and the like: not usable as an access token.
    if not isinstance(kind, str) or kind.lower() != "bearer":
        raise failed(f"{server} issued a token that is not a bearer's", 502)
    expires_in = answer.get("expires_in")
    lifetime = float(expires_in) if isinstance(expires_in, int | float) and not isinstance(expires_in, bool) else None
    refresh = answer.get("refresh_token")
    scope = answer.get("scope")
    return Issued(
        token,
        lifetime,
        refresh if isinstance(refresh, str) and refresh else None,
        scope if isinstance(scope, str) and _SCOPE.fullmatch(scope) else None,
    )


def refusal(status: int, answer: Any) -> str | None:
    """The ``error`` of a token endpoint's refusal (RFC 6749 §5.2: a 400, 401 or 403 naming a well-formed one),
    else ``None``."""
    if status not in (400, 401, 403) or not isinstance(answer, dict):
        return None
    error = answer.get("error")
    return error if isinstance(error, str) and ERROR_CODE.fullmatch(error) else None


@dataclass
class _Flight(Generic[_E]):
    """A request under way: what the requests of its key wait for meanwhile, and its outcome."""

    done: anyio.Event = field(default_factory=anyio.Event)
    token: str | None = None
    failed: _E | None = None


class SingleFlight(Generic[_K, _E]):
    """One request a key at a time (an exchange, a refresh): the requests of a key that misses meanwhile wait for
    its token, or its ``refusal`` (each waiter its own error, made by ``again``); one cancelled leaves the next to
    ask again. At most ``most`` keys are under way (the oldest forgotten first)."""

    def __init__(self, refusal: type[_E], most: int) -> None:
        self._refusal = refusal
        self._flying: BoundedDict[_K, _Flight[_E]] = BoundedDict(most)

    async def run(self, key: _K, request: Callable[[], Awaitable[str]], again: Callable[[_E], Exception]) -> str:
        """The token of ``request``, or of the one of ``key`` under way."""
        while (flying := self._flying.get(key)) is not None:
            await flying.done.wait()
            if flying.token is not None:
                return flying.token
            if flying.failed is not None:  # an error of its own, not one raised twice
                raise again(flying.failed)
            # Neither (its request was cancelled): this one asks.
        flight: _Flight[_E] = _Flight()
        self._flying[key] = flight
        try:
            flight.token = await request()
        except self._refusal as refused:
            flight.failed = refused
            raise
        finally:
            if self._flying.get(key) is flight:
                del self._flying[key]
            flight.done.set()
        return flight.token
