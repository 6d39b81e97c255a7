"""Each user's upstream credentials: the user's token exchanged for one issued for the upstream (RFC 8693).

The gateway is an OAuth client of the authorization server (its own client id, and its secret or key: ``_client``)
and asks its token endpoint (given, or read from the server's metadata, RFC 8414) for a token for the upstream in
place of the user's: ``grant_type`` ``urn:ietf:params:oauth:grant-type:token-exchange``, the user's access token as
``subject_token`` (§2.1), the upstream as ``audience`` and/or ``resource`` (RFC 8707), and ``scope``. The
answer (§2.2.1) is cached per user token and target (by a digest, never the token) until shortly before it
expires (``expires_in``, else the issued JWT's ``exp``; neither: not cached), and sent as the upstream's
``Authorization`` or as a stdio process's variable. The user's own token never goes there. Requests that miss the
same key while its exchange is under way wait for that one: its token, or its refusal (not cached: the next request
asks again).

The token endpoint is a stranger: its answer is read to at most :data:`MAX_ANSWER` bytes within
:data:`TIMEOUT` seconds, and what it issues goes into a header only when it is a bearer token's characters
(RFC 6750 §2.1). A refusal (§2.2.2: RFC 6749 §5.2's errors) is the client's 401 (``invalid_request``,
``invalid_grant``: this token cannot be exchanged) or 403 (``invalid_scope``, ``invalid_target``,
``access_denied``: not for this user), with the server's ``error`` and its printable ``error_description``; a
refusal of the gateway itself (``invalid_client``, ``unauthorized_client``, ``unsupported_grant_type``: its
configuration), a server that cannot be reached in time or answers nonsense is a 502 or 504. No token, the
user's or an issued one, is logged or put in an error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import TYPE_CHECKING, Any, Final, Literal, get_args
from urllib.parse import urlsplit

import anyio
import jwt
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..._bounded import BoundedDict
from ..._pipeline import Rejection, error_answer, unavailable
from ..._wire.protocol import INVALID_REQUEST

if TYPE_CHECKING:
    import httpx

    from ._client import ClientAuth

logger = logging.getLogger("mcp_sessions.gateway")

GRANT_TYPE: Final = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE: Final = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105 (a URN)
TIMEOUT: Final = 10.0
"""The longest wait for the token endpoint's whole answer (and for the metadata's)."""
MAX_ANSWER: Final = 64 * 1024
"""The most of the token endpoint's answer read."""
RENEW_BEFORE: Final = 30.0
"""An issued token is exchanged again this long before it expires (half its life for one shorter than a minute)."""
MAX_CACHED: Final = 10_000
"""Issued tokens kept, one per user token and target; the least recently used are forgotten first."""
UpstreamTokenMode = Literal["passthrough", "none", "exchange", "oauth"]
MODES: Final = get_args(UpstreamTokenMode)  # --upstream-token's choices
# RFC 6750 §2.1's b64token: what may follow "Bearer " in a header.
_BEARER: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# RFC 6749 §5.2: the characters of "error" and "error_description".
_ERROR_CODE: Final = re.compile(r"[\x20-\x21\x23-\x5b\x5d-\x7e]{1,64}")
_UNPRINTABLE: Final = re.compile(r"[^\x20-\x21\x23-\x5b\x5d-\x7e]")
_NOT_THIS_TOKEN: Final = frozenset({"invalid_request", "invalid_grant"})
_NOT_FOR_THIS_USER: Final = frozenset({"invalid_scope", "invalid_target", "access_denied"})


@dataclass(frozen=True)
class Target:
    """What the issued token is for: the upstream's ``audience`` and/or ``resource``, and ``scope``."""

    audience: str | None = None
    resource: str | None = None
    scope: str | None = None


class ExchangeRefused(Exception):
    """The exchange failed: ``status`` for the client (401, 403, 502, 504), ``error`` and ``description`` (no
    token in either)."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.error = error
        self.description = description

    def answer(self, request_id: object = None, retry_after: bytes = b"1") -> Rejection:
        """The client's answer: a JSON-RPC error, with RFC 6750's ``WWW-Authenticate`` for a 401 or 403."""
        message = f"The token exchange for the upstream failed: {self.description}"
        if self.status >= 500:
            reason = "token_exchange_failed"
            return unavailable(self.status, message, retry_after, request_id, reason)
        code = "invalid_token" if self.status == 401 else "insufficient_scope"
        challenge = f'Bearer error="{code}", error_description="{_printable(message)}"'
        header = (b"www-authenticate", challenge.encode())
        reason = "token_exchange_refused"
        return error_answer(self.status, INVALID_REQUEST, message, reason, request_id, header)


@dataclass
class _Exchanging:
    """An exchange under way: what the requests that miss its key meanwhile wait for, and its outcome."""

    done: anyio.Event = field(default_factory=anyio.Event)
    token: str | None = None
    refused: ExchangeRefused | None = None


class TokenExchange:
    """The gateway as the authorization server's client, exchanging user tokens (see the module).

    ``token_endpoint``, or ``issuer`` whose metadata names it; ``client``, how the gateway authenticates there
    (``_client``: a client assertion names the issuer when its metadata named the endpoint, else the endpoint).
    Its HTTP client is its maker's to close: :meth:`aclose`, or serve the app :meth:`wrap` returns. httpx is
    imported as one is made, not as the gateway starts: a gateway that exchanges nothing never loads it (nor what
    httpx's own command line loads where it is installed, rich and pygments: 50 ms of a start).
    """

    def __init__(
        self,
        *,
        client: ClientAuth,
        token_endpoint: str | None = None,
        issuer: str | None = None,
        timeout: float = TIMEOUT,
    ) -> None:
        if token_endpoint is None and issuer is None:
            raise ValueError("the token exchange needs the token endpoint, or the issuer whose metadata names it")
        for url in (token_endpoint, issuer):
            if url is not None and urlsplit(url).scheme not in ("http", "https"):
                raise ValueError(f"{url!r} is not an http(s) URL")
        try:
            import httpx
        except ModuleNotFoundError as exc:
            if exc.name != "httpx":
                raise
            raise ImportError("the gateway needs httpx: pip install 'mcp-sessions[gateway]'") from exc
        self._endpoint = token_endpoint
        self._issuer = issuer
        # Whom a client assertion names: the endpoint given, else (once its metadata is read) the issuer.
        self._audience = token_endpoint
        self._timeout = timeout
        self._client = client
        # Per key: the issued token, and when to renew it (monotonic).
        self._issued: BoundedDict[bytes, tuple[str, float]] = BoundedDict(MAX_CACHED)
        self._exchanging: BoundedDict[bytes, _Exchanging] = BoundedDict(MAX_CACHED)
        # trust_env off: no proxy variable or .netrc credential; no redirect followed with the client's secret; a
        # jar that keeps no cookie, so that none the endpoint set in answer to one user's exchange goes with another's.
        keeps_none = CookieJar(DefaultCookiePolicy(allowed_domains=[]))
        self._http = httpx.AsyncClient(trust_env=False, follow_redirects=False, timeout=timeout, cookies=keeps_none)

    async def aclose(self) -> None:
        await self._http.aclose()

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """``app``, this exchange's client closed as its lifespan ends (stopped, or failed to start)."""

        async def closing(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "lifespan":
                return await app(scope, receive, send)

            async def sending(message: Message) -> None:
                if message["type"] != "lifespan.startup.complete":  # before the server hears it and stops
                    await self.aclose()
                await send(message)

            await app(scope, receive, sending)

        return closing

    async def token(self, subject_token: str, target: Target) -> str:
        """A token issued for ``target`` in place of ``subject_token``: the cached one, the one being exchanged,
        else a new exchange."""
        key = _key(subject_token, target)
        token, renew_at = self._issued.pop(key, ("", 0.0))
        if time.monotonic() < renew_at:
            self._issued[key] = (token, renew_at)
            return token
        while (exchanging := self._exchanging.get(key)) is not None:
            await exchanging.done.wait()
            if exchanging.token is not None:
                return exchanging.token
            if (failed := exchanging.refused) is not None:  # an error of its own, not one raised twice
                raise ExchangeRefused(failed.status, failed.error, failed.description)
            # Neither (its request was cancelled): this one exchanges.
        exchanging = self._exchanging[key] = _Exchanging()
        try:
            token = exchanging.token = await self._exchange(key, subject_token, target)
        except ExchangeRefused as refused:
            exchanging.refused = refused
            raise
        finally:
            if self._exchanging.get(key) is exchanging:
                del self._exchanging[key]
            exchanging.done.set()
        return token

    async def _exchange(self, key: bytes, subject_token: str, target: Target) -> str:
        """One exchange at the token endpoint; its token cached under ``key`` while it holds."""
        form = {
            "grant_type": GRANT_TYPE,
            "subject_token": subject_token,
            "subject_token_type": ACCESS_TOKEN_TYPE,
        }
        for name, value in vars(target).items():
            if value:
                form[name] = value
        endpoint = await self.token_endpoint()
        answer = await self._post(endpoint, form)
        token, lifetime = _issued(answer)
        if lifetime is not None and lifetime > 0:
            renew_at = time.monotonic() + lifetime - min(RENEW_BEFORE, lifetime / 2)
            self._issued[key] = (token, renew_at)
        return token

    def forget(self, subject_token: str, target: Target) -> None:
        """Drop the token issued for ``subject_token`` (the upstream refused it): the next request exchanges anew."""
        self._issued.pop(_key(subject_token, target), None)

    async def token_endpoint(self) -> str:
        """The token endpoint: given, else the issuer's metadata's (RFC 8414 §3, read once)."""
        if self._endpoint is None:
            assert self._issuer is not None
            self._endpoint = await self._discover(self._issuer)
            self._audience = self._issuer
        return self._endpoint

    async def _discover(self, issuer: str) -> str:
        parts = urlsplit(issuer)
        path = parts.path.rstrip("/")
        origin = f"{parts.scheme}://{parts.netloc}"
        # RFC 8414 §3.1 (the well-known part before the issuer's path), then OpenID Connect Discovery's.
        urls = (
            f"{origin}/.well-known/oauth-authorization-server{path}",
            f"{origin}{path}/.well-known/openid-configuration",
        )
        for url in urls:
            request = self._http.build_request("GET", url)
            try:
                status, metadata = await self._read(request)
            except ExchangeRefused:
                continue
            if status != 200 or not isinstance(metadata, dict):
                continue
            # RFC 8414 §3.3: the metadata's issuer is the one asked about, else it is not used.
            named = str(metadata.get("issuer")).rstrip("/")
            if named != issuer.rstrip("/"):
                raise _server_error("the authorization server's metadata names another issuer")
            endpoint = metadata.get("token_endpoint")
            if isinstance(endpoint, str) and urlsplit(endpoint).scheme in ("http", "https"):
                return endpoint
        logger.warning("mcp-sessions gateway: no token endpoint in the metadata of %s", issuer)
        raise _server_error("the authorization server's metadata names no token endpoint")

    async def _post(self, endpoint: str, form: dict[str, str]) -> dict[str, Any]:
        assert self._audience is not None  # the endpoint is known: given, or read from the issuer's metadata
        authentication = self._client.request(self._audience)
        data = form | authentication.data
        request = self._http.build_request("POST", endpoint, data=data, headers=authentication.headers)
        status, answer = await self._read(request)
        if status == 200 and isinstance(answer, dict):
            return answer
        error = _refusal(status, answer)
        # A server that echoes a credential (the user's token, the gateway's secret or assertion): none of its text
        # is sent on, to the client or to the log.
        credentials = (form["subject_token"], *authentication.sent)
        if error is None or any(secret in error for secret in credentials):
            logger.warning("mcp-sessions gateway: the token endpoint answered %d to an exchange", status)
            raise _server_error(f"the authorization server answered {status}")
        described = answer.get("error_description")
        if not isinstance(described, str) or any(secret in described for secret in credentials):
            described = ""
        detail = f"{error}: {_printable(described)[:200]}" if described else error
        if error in _NOT_THIS_TOKEN:
            message = f"the authorization server will not exchange this token ({detail})"
            raise ExchangeRefused(401, error, message)
        if error in _NOT_FOR_THIS_USER:
            message = f"the authorization server will not issue this user's ({detail})"
            raise ExchangeRefused(403, error, message)
        logger.warning("mcp-sessions gateway: the token endpoint refused the gateway: %s", error)
        message = f"the authorization server refused the gateway ({detail})"
        raise ExchangeRefused(502, error, message)

    async def _read(self, request: httpx.Request) -> tuple[int, Any]:
        """The status and JSON of the answer to ``request``: within the timeout, at most :data:`MAX_ANSWER` bytes."""
        import httpx  # loaded as this exchange was made

        host = request.url.host
        body = b""
        try:
            with anyio.fail_after(self._timeout):
                response = await self._http.send(request, stream=True)
                try:
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_ANSWER:
                            raise _server_error("the authorization server's answer is too long")
                finally:
                    await response.aclose()
        except TimeoutError:
            logger.warning("mcp-sessions gateway: %s did not answer in %g s", host, self._timeout)
            raise _server_error("the authorization server did not answer in time", 504) from None
        # httpx's failures of a connection it made (a ConnectError or ConnectTimeout is one never made): the server
        # reset it (ReadError, WriteError) or ended it before a whole answer (RemoteProtocolError).
        except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as exc:
            failure = type(exc).__name__
            logger.warning("mcp-sessions gateway: %s closed the connection without an answer: %s", host, failure)
            raise _server_error("the authorization server closed the connection without an answer") from None
        except httpx.HTTPError as exc:
            failure = type(exc).__name__
            logger.warning("mcp-sessions gateway: %s could not be reached: %s", host, failure)
            raise _server_error("the authorization server could not be reached") from None
        try:
            return response.status_code, json.loads(body)
        except (ValueError, RecursionError):
            # Not JSON: judged by its status alone.
            return response.status_code, None


def _server_error(description: str, status: int = 502) -> ExchangeRefused:
    """The authorization server failed the gateway (not the user): a 502, or ``status``."""
    return ExchangeRefused(status, "server_error", description)


def _refusal(status: int, answer: Any) -> str | None:
    """The ``error`` of a refusal (§2.2.2: a 400, 401 or 403 naming a well-formed one), else ``None``."""
    if status not in (400, 401, 403) or not isinstance(answer, dict):
        return None
    error = answer.get("error")
    if isinstance(error, str) and _ERROR_CODE.fullmatch(error):
        return error
    return None


def _issued(answer: dict[str, Any]) -> tuple[str, float | None]:
    """The issued token and its lifetime in seconds (``None``: unknown), from a successful answer (§2.2.1)."""
    token = answer.get("access_token")
    kind = answer.get("token_type")
    if not isinstance(token, str) or not _BEARER.fullmatch(token):
        raise _server_error("the authorization server issued no bearer token")
    # N_A (§2.2.1) and the like: not usable as an access token.
    if not isinstance(kind, str) or kind.lower() != "bearer":
        raise _server_error("the authorization server issued a token that is not a bearer's")
    expires_in = answer.get("expires_in")
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool):
        return token, float(expires_in)
    # No expires_in: the issued JWT's own exp, read (not verified: the upstream verifies it).
    try:
        expires = jwt.decode(token, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        return token, None
    if not isinstance(expires, int | float):
        return token, None
    return token, float(expires) - time.time()


def _key(subject_token: str, target: Target) -> bytes:
    """A cache key: a digest of the user's token and the target, so nothing in the cache reads back as a token."""
    text = f"{subject_token}\0{target.audience}\0{target.resource}\0{target.scope}"
    return hashlib.sha256(text.encode()).digest()


def _printable(text: str) -> str:
    """``text`` with only RFC 6749 §5.2's characters (no quote, backslash or control): safe in a header."""
    return _UNPRINTABLE.sub("?", text)


def subject_token(scope: Scope) -> str | None:
    """The request's verified bearer token (``--auth-jwks``), or ``None`` (no user, or a proxy-named one)."""
    # The SDK's AuthenticatedUser.
    access_token = getattr(scope.get("user"), "access_token", None)
    token = getattr(access_token, "token", None)
    return token if isinstance(token, str) and token else None


class UpstreamToken:
    """What the upstream gets as ``Authorization`` (``--upstream-token``): ``"none"``, or ``"exchange"`` (with
    ``exchange`` and ``target``); ``"passthrough"`` needs none of this (the client's goes as it came); ``"oauth"`` is
    ``_oauth.UpstreamGrants``'s, each user's own grant at the upstream's authorization server."""

    def __init__(self, mode: str, exchange: TokenExchange | None = None, target: Target = Target()) -> None:
        if mode not in MODES:
            raise ValueError(f"--upstream-token is one of {', '.join(MODES)}, not {mode!r}")
        if mode == "exchange" and exchange is None:
            raise ValueError("--upstream-token exchange needs the token exchange's settings")
        if mode == "exchange" and not (target.audience or target.resource):
            raise ValueError("--upstream-token exchange needs the upstream's audience or resource")
        self.mode = mode
        self.exchange = exchange
        self.target = target

    async def authorization(self, scope: Scope) -> bytes | None:
        """The upstream's ``Authorization`` value for this request; raises :class:`ExchangeRefused`."""
        if self.exchange is None:
            return None
        subject = subject_token(scope)
        if subject is None:
            message = "the request carries no verified bearer token to exchange"
            raise ExchangeRefused(401, "invalid_request", message)
        token = await self.exchange.token(subject, self.target)
        return b"Bearer " + token.encode("ascii")

    def refused(self, scope: Scope) -> None:
        """The upstream answered 401 to the issued token: the next request exchanges anew."""
        if self.exchange is None:
            return
        subject = subject_token(scope)
        if subject is not None:
            self.exchange.forget(subject, self.target)
