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

The token endpoint is a stranger: its answer is read to at most :data:`._answer.MAX_ANSWER` bytes within
:data:`TIMEOUT` seconds, and what it issues goes into a header only when it is a bearer token's characters
(RFC 6750 §2.1). A refusal (§2.2.2: RFC 6749 §5.2's errors) is the client's 401 (``invalid_request``,
``invalid_grant``: this token cannot be exchanged) or 403 (``invalid_scope``, ``invalid_target``,
``access_denied``: not for this user), with the server's ``error`` and its printable ``error_description``; a
refusal of the gateway itself (``invalid_client``, ``unauthorized_client``, ``unsupported_grant_type``: its
configuration), a server that cannot be reached in time or answers nonsense is a 502 or 504. No token, the
user's or an issued one, is logged or put in an error.

**ID-JAG** (draft-ietf-oauth-identity-assertion-authz-grant, MCP's Enterprise-Managed Authorization): for a
:class:`Target` whose ``id_jag`` is set, the exchange above asks the identity provider (the same client, the same
token endpoint) for an Identity Assertion JWT Authorization Grant instead of an access token:
``requested_token_type`` ``urn:ietf:params:oauth:token-type:id-jag``, ``audience`` the resource's authorization
server's issuer, ``resource`` and ``scope`` as given; no ``client_id`` of that server's is sent (the ID-JAG's
``client_id`` claim is the identity provider's to fill from its records). The ID-JAG it answers (its
``issued_token_type`` that type) is presented once, at once, to that issuer's token endpoint (its RFC 8414
metadata's) with RFC 7523's grant (``urn:ietf:params:oauth:grant-type:jwt-bearer``, ``assertion``), by the gateway's
client there (``id_jag``, a ``ClientAuth`` of its own: a secret, or ``private_key_jwt`` whose assertions name that
issuer); what that server answers is the token kept and sent, cached and coalesced as any exchange's, per user
token and target. The ID-JAG itself is never kept (it is single-use) nor logged. A refusal names the server that
refused: the identity provider, or the resource's authorization server by its issuer. The subject token is the
user's verified access token (``subject_token_type`` ``access_token``), or for an identity provider that takes only
an ID token issued to the client that asks (the draft's first reading, Okta's Cross App Access), her ID token from
the gateway's own login (:data:`ID_TOKEN_TYPE`, ``_oauth.IdTokens``). An upstream's issuer may be read from its
protected resource metadata (RFC 9728: the first of its ``authorization_servers``, or the one given, which it must
list: :meth:`TokenExchange.resource_metadata`); a client secret goes there only if it was named for it (``_client``).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, get_args
from urllib.parse import urlsplit

import jwt
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..._bounded import BoundedDict
from ..._pipeline import Rejection, error_answer, unavailable
from ..._wire.protocol import INVALID_REQUEST
from ._answer import SingleFlight, issued, now, refusal
from ._discovery import endpoint, resource_metadata, server_metadata

if TYPE_CHECKING:
    from ._client import ClientAuth

logger = logging.getLogger("mcp_sessions.gateway")

GRANT_TYPE: Final = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE: Final = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105 (a URN)
ID_TOKEN_TYPE: Final = "urn:ietf:params:oauth:token-type:id_token"  # noqa: S105 (a URN)
ID_JAG_TYPE: Final = "urn:ietf:params:oauth:token-type:id-jag"
JWT_BEARER_GRANT: Final = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TIMEOUT: Final = 10.0
"""The longest wait for the token endpoint's whole answer (and for the metadata's)."""
RENEW_BEFORE: Final = 30.0
"""An issued token is exchanged again this long before it expires (half its life for one shorter than a minute)."""
MAX_CACHED: Final = 10_000
"""Issued tokens kept, one per user token and target; the least recently used are forgotten first."""
UpstreamTokenMode = Literal["passthrough", "none", "exchange", "id-jag", "oauth"]
MODES: Final = get_args(UpstreamTokenMode)  # --upstream-token's choices
_JWT: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")  # a signed JWS, compact (RFC 7515 §7.1)
IDP: Final = "the identity provider"
"""Who refused, in a refusal of an ID-JAG's first step (the exchange at the identity provider)."""
# RFC 6749 §5.2: what is not a character of "error" and "error_description".
_UNPRINTABLE: Final = re.compile(r"[^\x20-\x21\x23-\x5b\x5d-\x7e]")
_NOT_THIS_TOKEN: Final = frozenset({"invalid_request", "invalid_grant"})
_NOT_FOR_THIS_USER: Final = frozenset({"invalid_scope", "invalid_target", "access_denied"})


@dataclass(frozen=True)
class Target:
    """What the issued token is for: the upstream's ``audience`` and/or ``resource``, and ``scope``; with ``id_jag``,
    a token of the authorization server whose issuer ``audience`` is, by an ID-JAG for ``resource`` (see the
    module)."""

    audience: str | None = None
    resource: str | None = None
    scope: str | None = None
    id_jag: bool = False


def id_jag_target(spec: str, flag: str, kind: str = "id-jag") -> Target:
    """The target of ``ISSUER[,resource=URI][,scope=SCOPE]`` (``--process-env NAME=id-jag:...``, or ``oauth:...``
    as ``kind`` says, named ``flag``); ``ValueError`` in one line for another shape."""
    issuer, *options = spec.split(",")
    given: dict[str, str] = {}
    shape = f"{kind}:ISSUER[,resource=URI][,scope=SCOPE]"
    for option in options:
        name, equals, value = option.partition("=")
        if name not in ("resource", "scope") or not equals or not value or name in given:
            raise ValueError(f"{flag}: give {shape}, not {kind}:{spec!r}")
        given[name] = value
    for url in (issuer, given.get("resource")):
        if url is not None and (urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc):
            raise ValueError(f"{flag}: {url!r} is not an http(s) URL ({shape})")
    return Target(issuer, given.get("resource"), given.get("scope"), id_jag=kind == "id-jag")


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


class TokenExchange:
    """The gateway as the authorization server's client, exchanging user tokens (see the module).

    ``token_endpoint``, or ``issuer`` whose metadata names it; ``client``, how the gateway authenticates there
    (``_client``: a client assertion names the issuer when its metadata named the endpoint, else the endpoint);
    ``id_jag``, how it authenticates at the resources' authorization servers, for ID-JAG targets (``None``: none);
    ``clock``, what an issued token's renewal is counted on (``_answer.now``).
    Its HTTP client (``_token.oauth_client``, whose token requests go through authlib's) is its maker's to close:
    :meth:`aclose`, or serve the app :meth:`wrap` returns. httpx2 and authlib are imported as one is made, not as
    the gateway starts: a gateway that exchanges nothing never loads them.
    """

    def __init__(
        self,
        *,
        client: ClientAuth,
        token_endpoint: str | None = None,
        issuer: str | None = None,
        id_jag: ClientAuth | None = None,
        timeout: float = TIMEOUT,
        clock: Callable[[], float] = now,
    ) -> None:
        if token_endpoint is None and issuer is None:
            raise ValueError("the token exchange needs the token endpoint, or the issuer whose metadata names it")
        for url in (token_endpoint, issuer):
            if url is not None and urlsplit(url).scheme not in ("http", "https"):
                raise ValueError(f"{url!r} is not an http(s) URL")
        try:
            from ._token import oauth_client
        except ModuleNotFoundError as exc:
            if exc.name not in ("httpx2", "authlib"):
                raise
            raise ImportError(f"the gateway needs {exc.name}: pip install 'mcp-sessions[gateway]'") from exc
        self._endpoint = token_endpoint
        self._issuer = issuer
        # Whom a client assertion names: the endpoint given, else (once its metadata is read) the issuer.
        self._audience = token_endpoint
        self._timeout = timeout
        self._client = client
        self.id_jag = id_jag
        # The token endpoints of the resources' authorization servers, by issuer (those the operator named).
        self._grant_endpoints: dict[str, str] = {}
        self._clock = clock
        # Per key: the issued token, and when to renew it (on clock).
        self._issued: BoundedDict[bytes, tuple[str, float]] = BoundedDict(MAX_CACHED)
        self._exchanging: SingleFlight[bytes, ExchangeRefused] = SingleFlight(ExchangeRefused, MAX_CACHED)
        self._http = oauth_client(timeout)

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

    async def token(self, subject_token: str, target: Target, subject_type: str = ACCESS_TOKEN_TYPE) -> str:
        """A token issued for ``target`` in place of ``subject_token`` (of ``subject_type``: an access token, or
        an ID token issued to the gateway, :data:`ID_TOKEN_TYPE`): the cached one, the one being exchanged, else a
        new exchange."""
        key = _key(subject_token, target)
        token, renew_at = self._issued.pop(key, ("", 0.0))
        if self._clock() < renew_at:
            self._issued[key] = (token, renew_at)
            return token
        return await self._exchanging.run(
            key,
            lambda: self._exchange(key, subject_token, target, subject_type),
            lambda failed: ExchangeRefused(failed.status, failed.error, failed.description),
        )

    async def _exchange(self, key: bytes, subject_token: str, target: Target, subject_type: str) -> str:
        """One exchange at the token endpoint (and, for an ID-JAG, its grant at the resource's authorization
        server); the token cached under ``key`` while it holds."""
        form = {
            "grant_type": GRANT_TYPE,
            "subject_token": subject_token,
            "subject_token_type": subject_type,
        }
        for name in ("audience", "resource", "scope"):
            if value := getattr(target, name):
                form[name] = value
        endpoint = await self.token_endpoint()
        if target.id_jag:
            form["requested_token_type"] = ID_JAG_TYPE
            answer = await self._post(endpoint, form, "subject_token", server=IDP)
            answer = await self._grant(target, _id_jag(answer))
        else:
            answer = await self._post(endpoint, form, "subject_token")
        token, lifetime = _issued(answer, "the authorization server", self._clock())
        if lifetime is not None and lifetime > 0:
            renew_at = self._clock() + lifetime - min(RENEW_BEFORE, lifetime / 2)
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

    async def _grant(self, target: Target, id_jag: str) -> dict[str, Any]:
        """The answer of the resource's authorization server (``target.audience``, its issuer) to the ID-JAG, by
        RFC 7523's grant at its token endpoint (its metadata's), with the gateway's client there."""
        issuer = target.audience
        assert issuer is not None and self.id_jag is not None  # checked as the target was given (UpstreamToken, ...)
        server = f"the authorization server {issuer}"
        endpoint = self._grant_endpoints.get(issuer)
        if endpoint is None:
            endpoint = self._grant_endpoints[issuer] = await self._discover(issuer, server)
        form = {"grant_type": JWT_BEARER_GRANT, "assertion": id_jag}
        return await self._post(endpoint, form, "assertion", server=server, client=self.id_jag, audience=issuer)

    async def resource_metadata(
        self, url: str, resource: str | None = None, issuer: str | None = None
    ) -> tuple[str, str]:
        """The authorization server (``issuer`` if given, which it must list, else the first it lists) and the
        resource (``resource`` if given, else its own) that the protected resource at ``url`` names in its metadata
        (``_discovery.resource_metadata``); :class:`ExchangeRefused` (502, 504) otherwise."""
        found = await resource_metadata(
            self._http,
            url,
            failed=_server_error,
            seconds=self._timeout,
            issuer=issuer,
            issuer_flag="--id-jag-issuer",
            give="--id-jag-issuer",
        )
        return found.issuer, resource or found.resource

    async def _discover(self, issuer: str, server: str = "the authorization server") -> str:
        """The token endpoint of ``issuer``'s metadata (``_discovery.server_metadata``)."""
        metadata = await server_metadata(self._http, issuer, server=server, failed=_server_error, seconds=self._timeout)
        return endpoint(metadata, "token_endpoint", server, _server_error)

    async def _post(
        self,
        endpoint: str,
        form: dict[str, str],
        credential: str,
        *,
        server: str = "the authorization server",
        client: ClientAuth | None = None,
        audience: str | None = None,
    ) -> dict[str, Any]:
        """The answer of ``server``'s token endpoint to ``form`` (``_token.token_request``), whose ``credential`` (the
        user's token, the ID-JAG) is not quoted back, sent by ``client`` (default the exchange's) whose assertion
        names ``audience``."""
        audience = audience or self._audience
        assert audience is not None  # the endpoint is known: given, or read from the issuer's metadata
        from ._token import token_request  # loaded as the client was made

        status, answer, sent = await token_request(
            self._http,
            endpoint,
            form,
            client or self._client,
            audience,
            seconds=self._timeout,
            server=server,
            failed=_server_error,
        )
        if status == 200 and isinstance(answer, dict):
            return answer
        error = refusal(status, answer)
        # A server that echoes a credential (the user's token or ID-JAG, the gateway's secret or assertion): none of
        # its text is sent on, to the client or to the log.
        credentials = (form[credential], *sent)
        if error is None or any(secret in error for secret in credentials):
            logger.warning("mcp-sessions gateway: %s's token endpoint answered %d", server, status)
            raise _server_error(f"{server} answered {status}")
        described = answer.get("error_description")
        if not isinstance(described, str) or any(secret in described for secret in credentials):
            described = ""
        detail = f"{error}: {_printable(described)[:200]}" if described else error
        taken = "this user's ID-JAG" if credential == "assertion" else "this token"
        if error in _NOT_THIS_TOKEN:
            message = f"{server} will not exchange {taken} ({detail})"
            raise ExchangeRefused(401, error, message)
        if error in _NOT_FOR_THIS_USER:
            message = f"{server} will not issue this user's ({detail})"
            raise ExchangeRefused(403, error, message)
        logger.warning("mcp-sessions gateway: %s refused the gateway: %s", server, error)
        message = f"{server} refused the gateway ({detail})"
        raise ExchangeRefused(502, error, message)


def _server_error(description: str, status: int = 502) -> ExchangeRefused:
    """The authorization server failed the gateway (not the user): a 502, or ``status``."""
    return ExchangeRefused(status, "server_error", description)


def _id_jag(answer: dict[str, Any]) -> str:
    """The ID-JAG the identity provider issued (its ``issued_token_type`` the ID-JAG's, a JWT's characters)."""
    token = answer.get("access_token")
    if answer.get("issued_token_type") != ID_JAG_TYPE or not isinstance(token, str) or not _JWT.fullmatch(token):
        raise _server_error(f"{IDP} issued no ID-JAG")
    return token


def _issued(answer: dict[str, Any], server: str, now: float) -> tuple[str, float | None]:
    """The issued token and its lifetime in seconds (``None``: unknown), from a successful answer (§2.2.1)."""
    token, lifetime, _, _ = issued(answer, server, _server_error)
    if lifetime is not None:
        return token, lifetime
    # No expires_in: the issued JWT's own exp, read (not verified: the upstream verifies it).
    try:
        expires = jwt.decode(token, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        return token, None
    if not isinstance(expires, int | float):
        return token, None
    return token, float(expires) - now


def _key(subject_token: str, target: Target) -> bytes:
    """A cache key: a digest of the user's token and the target, so nothing in the cache reads back as a token."""
    text = f"{subject_token}\0{target.audience}\0{target.resource}\0{target.scope}\0{target.id_jag}"
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


class SignInRoutes(Protocol):
    """What serves a sign-in's pages, a user's view of her grants and the operator's of everyone's
    (``_sign_ins.SignIns``): ``_oauth`` builds on this module, never the other way."""

    def wrap(self, app: ASGIApp) -> ASGIApp: ...

    def serving_grants(self, app: ASGIApp) -> ASGIApp: ...

    async def every_grant(self, principal: str | None = None, server: str | None = None) -> list[dict[str, object]]: ...

    async def revoke_grants(
        self, principal: str, issuer: str | None = None, server: str | None = None
    ) -> list[dict[str, object]]: ...


class IdTokenSource(Protocol):
    """Where each user's ID token of the gateway's own login is kept (``_oauth.IdTokens``), and its sign-in."""

    @property
    def signing_in(self) -> SignInRoutes | None: ...

    async def token_of(self, scope: Scope) -> str: ...

    def held(self, scope: Scope) -> str | None: ...


class UpstreamToken:
    """What the upstream gets as ``Authorization`` (``--upstream-token``): ``"none"``, or ``"exchange"`` or
    ``"id-jag"`` (with ``exchange`` and ``target``); ``"passthrough"`` needs none of this (the client's goes as it
    came); ``"oauth"`` is ``_oauth.UpstreamGrants``'s, each user's own grant at the upstream's authorization server.
    An ``"id-jag"`` target without its issuer (or resource) takes it from the protected resource metadata of
    ``upstream`` (RFC 9728), read at the first request that needs it (a failure is that request's 502, not kept),
    which must list the issuer where one is given.
    An ``"id-jag"`` with ``subject`` (``_oauth.IdTokens``) exchanges the user's ID token kept there, issued to the
    gateway's own client, in place of her access token; ``signing_in`` is what serves the sign-in's routes, if any."""

    def __init__(
        self,
        mode: str,
        exchange: TokenExchange | None = None,
        target: Target = Target(),
        upstream: str | None = None,
        subject: IdTokenSource | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"--upstream-token is one of {', '.join(MODES)}, not {mode!r}")
        if mode in ("exchange", "id-jag") and exchange is None:
            raise ValueError(f"--upstream-token {mode} needs the token exchange's settings")
        if mode == "exchange" and not (target.audience or target.resource):
            raise ValueError("--upstream-token exchange needs the upstream's audience or resource")
        if mode == "id-jag":
            assert exchange is not None
            if exchange.id_jag is None:
                raise ValueError(
                    "--upstream-token id-jag needs the gateway's client at the upstream's authorization "
                    "server: give --id-jag-client-id"
                )
            if not (target.audience and target.resource) and upstream is None:
                raise ValueError(
                    "--upstream-token id-jag needs --id-jag-issuer and --exchange-resource, or the "
                    "upstream whose metadata names them"
                )
            target = Target(target.audience, target.resource, target.scope, id_jag=True)
        if subject is not None and mode != "id-jag":
            raise ValueError("an ID token is the subject of an ID-JAG's exchange alone: --upstream-token id-jag")
        self.mode = mode
        self.exchange = exchange
        self.target = target
        self._upstream = upstream
        self.subject = subject
        self.signing_in: SignInRoutes | None = None if subject is None else subject.signing_in

    async def _target(self) -> Target:
        """The target, its issuer and resource read from the upstream's metadata once if not given."""
        target = self.target
        if target.id_jag and not (target.audience and target.resource):
            assert self.exchange is not None and self._upstream is not None
            issuer, resource = await self.exchange.resource_metadata(self._upstream, target.resource, target.audience)
            target = self.target = Target(issuer, resource, target.scope, id_jag=True)
        return target

    async def authorization(self, scope: Scope) -> bytes | None:
        """The upstream's ``Authorization`` value for this request; raises :class:`ExchangeRefused`."""
        if self.exchange is None:
            return None
        if self.subject is not None:  # her ID token, or the sign-in that gets it (SignInRequired)
            id_token = await self.subject.token_of(scope)
            token = await self.exchange.token(id_token, await self._target(), ID_TOKEN_TYPE)
            return b"Bearer " + token.encode("ascii")
        subject = subject_token(scope)
        if subject is None:
            message = "the request carries no verified bearer token to exchange"
            raise ExchangeRefused(401, "invalid_request", message)
        token = await self.exchange.token(subject, await self._target())
        return b"Bearer " + token.encode("ascii")

    def refused(self, scope: Scope) -> None:
        """The upstream answered 401 to the issued token: the next request exchanges anew."""
        if self.exchange is None:
            return
        subject = subject_token(scope) if self.subject is None else self.subject.held(scope)
        if subject is not None:
            self.exchange.forget(subject, self.target)
