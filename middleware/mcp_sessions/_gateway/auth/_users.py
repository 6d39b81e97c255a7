"""Who is asking, at the gateway, and each user's credentials in their own process.

**Who is asking** (:class:`GatewayAuth`): the gateway is an OAuth 2.1 resource server, as the MCP authorization
spec has it. A bearer token is a JWT verified by PyJWT against the authorization server's JWKS
(:class:`JwtVerifier`: the key set held, fetched by PyJWT's ``PyJWKClient`` on a worker thread, one fetch at a
time, never waited for by a token whose key is known), for the issuer and the audience given, with a leeway for
clock skew, and names its principal by one claim (``sub``); or an auth proxy in front names the principal in a
header, believed only from the peers ``--forwarded-allow-ips`` trusts (from any other peer the header is
dropped, so nothing behind the gateway sees it). Any other request gets 401 with ``WWW-Authenticate: Bearer``,
RFC 6750's ``error`` and an ``error_description`` that says which check failed (none for a request without a
token, section 3.1), and the ``resource_metadata`` URL that the ``mcp`` SDK's protected-resource route serves
(RFC 9728); the reason is logged once per reason and caller. The principal lands in ``scope["user"]`` as the
SDK's ``AuthenticatedUser``, which the session middleware's principal hook reads: sessions, host conversations
with ``conversation_data="principal"``, and the SDK's transport sessions are bound to it.

**Each user's credentials** (:class:`ProcessEnv`, ``--process-env NAME=SOURCE``): a conversation's process
gets ``NAME`` from the request that starts the conversation, a claim of its verified token or a header, or the
token its verified token is exchanged for, for an audience (``exchange:AUDIENCE``, ``_exchange``: done by
:meth:`ProcessEnv.wrap` as each request arrives, cached per user), or the token a resource's authorization server
issues for the ID-JAG its verified token is exchanged for (``id-jag:ISSUER[,resource=URI][,scope=SCOPE]``, the same
way). The conversation keeps a digest of the
values, never the values (of an exchanged token, its user's issuer and principal: the token itself changes as
it is renewed), and a later request of it whose values differ is refused. The process table is handed each
request's (:meth:`ProcessEnv.of`), the sessions' ``on_create`` too (it is given the create's scope).

**Which peer names a conversation** (:class:`FrontedConversations`): a stdio gateway behind a front (``gateway
--upstream``) takes a host's conversation id only from the peers ``--forwarded-allow-ips`` trusts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import re
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, NamedTuple

import anyio.abc
import anyio.to_thread
import jwt
import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.shared.exceptions import MCPError
from pydantic import AnyHttpUrl
from starlette.authentication import AuthCredentials
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..._bounded import BoundedDict
from ..._wire import printable
from ...sources import HostConversationSource
from .._front import PEER, Peer
from .._loader import loads_code
from ._answer import now
from ._exchange import ID_TOKEN_TYPE, ExchangeRefused, Target, TokenExchange, id_jag_target, subject_token
from ._expiry import until_expiry

if TYPE_CHECKING:
    from ..._session import Session
    from ...sources import CallView, RequestView
    from ._oauth import IdTokens, IssuerGrants
    from ._sign_ins import SignIns

JWKS_TIMEOUT: Final = 5.0
"""The longest wait for the JWKS, per fetch."""
JWKS_LIFESPAN: Final = 300.0
"""How long a fetched key set is fresh; past it, a token of a known key is still verified while the set is
fetched again behind it."""
JWKS_COOLDOWN: Final = 30.0
"""The shortest time between two fetches of the JWKS, counted from each attempt, failed or not: a made-up ``kid``
costs at most one fetch a cooldown (PyJWT's default)."""
VERIFIED_KEPT: Final = 1024
"""Tokens kept once verified, the most recent (a few KiB each): the next request of each checks only its expiry,
and that the key that verified it is still the set's."""
DEFAULT_LEEWAY: Final = 60.0
"""The clock skew allowed between the authorization server and the gateway, for ``exp``, ``nbf`` and ``iat``."""
# In a request's scope: its exchange: values, by name.
_EXCHANGED: Final = "mcp_sessions.gateway.exchanged"
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_LOGGED_CALLERS: Final = 1024
"""How many (cause, caller) pairs a refusal is logged once for: the most recent, so the log stays bounded."""
_INVALID: Final = ("invalid", "the token does not verify")
# In PyJWT's order of checks; a subclass before its base.
_REFUSALS: Final = (
    (jwt.ExpiredSignatureError, "expired", "the token has expired (exp)"),
    (jwt.ImmatureSignatureError, "not yet valid", "the token is not valid yet (nbf or iat in the future)"),
    (jwt.InvalidIssuerError, "wrong issuer", "the token is from another issuer (iss)"),
    (jwt.InvalidAudienceError, "wrong audience", "the token is for another audience (aud)"),
    (jwt.InvalidSignatureError, "bad signature", "the token's signature does not verify"),
    (jwt.InvalidAlgorithmError, "wrong algorithm", "the token's algorithm (alg) is not its key's"),
    (jwt.DecodeError, "malformed", "the token is not a signed JWT"),
)

logger = logging.getLogger("mcp_sessions.gateway")


class Unauthorized(Exception):
    """A request the gateway answers 401: ``error`` (RFC 6750; ``None`` when it carries no credential, section
    3.1), and the ``description`` that says which check failed, never a part of the token."""

    def __init__(self, cause: str, description: str, error: str | None = "invalid_token") -> None:
        super().__init__(description)
        self.cause = cause
        self.description = description
        self.error = error


class JwtVerifier:
    """JWT access tokens signed by a key of a JWKS, verified by PyJWT, as the ``mcp`` SDK's ``AccessToken``.

    The key set is held here, fetched by PyJWT's ``PyJWKClient`` (bounded by ``JWKS_TIMEOUT``, on a worker thread):
    a token whose ``kid`` the set has is verified at once, never behind a fetch; a stale set is fetched again
    behind it, in a task of the gateway's lifespan (:meth:`running`); a token of an unknown ``kid`` waits for a
    fetch only when it starts one itself. One fetch at a time, at most one a cooldown from each attempt's start, so
    a stranger's made-up ``kid``s during an outage cost the authorization server one request a cooldown and the
    other users nothing. ``clock`` is what the freshness and the cooldown are counted on (a test's own clock moves
    the set past its lifespan without waiting it out).
    """

    def __init__(
        self,
        jwks_url: str,
        *,
        issuer: str,
        audience: str,
        principal_claim: str = "sub",
        leeway: float = DEFAULT_LEEWAY,
        clock: Callable[[], float] = now,
    ) -> None:
        if not 0 <= leeway < math.inf:
            raise ValueError("--auth-leeway takes a number of seconds, 0 or more")
        # PyJWT fetches and parses the set; the set is held as a whole, not key by key: a key the JWKS no
        # longer lists stops verifying once the set is fetched again.
        self._client = jwt.PyJWKClient(jwks_url, cache_jwk_set=False, timeout=JWKS_TIMEOUT)
        self._url = jwks_url
        self._issuer = issuer
        self._audience = audience
        self._claim = principal_claim
        self.leeway = leeway
        self._keys: dict[str, jwt.PyJWK] = {}
        # Each token verified, with its key's kid and the key (a set fetched again holds new ones).
        self._verified: BoundedDict[str, tuple[str | None, jwt.PyJWK, AccessToken]] = BoundedDict(VERIFIED_KEPT)
        # clock() (_answer.now, or a test's) of the last success, and of the last attempt, which starts the
        # cooldown.
        self.clock = clock
        self._fetched: float | None = None
        self._attempted: float | None = None
        self._fetching = False
        self._error: str | None = None
        # The lifespan's task group, which a stale set's fetch runs in (:meth:`running`).
        self._behind: anyio.abc.TaskGroup | None = None

    async def verify(self, token: str) -> AccessToken:
        """The token's principal and claims; :class:`Unauthorized` says why a token does not verify. A token
        verified before by a key the set still holds is checked for its expiry alone."""
        try:
            kept = self._verified.get(token)
            kid = jwt.get_unverified_header(token).get("kid") if kept is None else kept[0]
            key = await self._key(kid)
            if kept is not None and kept[1] is key:
                if self.clock() >= kept[2].expires_at + self.leeway:  # type: ignore[operator]  # exp: required
                    raise jwt.ExpiredSignatureError
                return kept[2]
            claims = jwt.decode(
                token,
                key,
                # The key's own: never "none", never another key type's.
                algorithms=[key.algorithm_name],
                audience=self._audience,
                issuer=self._issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud", self._claim]},
            )
        except jwt.MissingRequiredClaimError as exc:
            # A claim of the list above, never the token's text.
            raise Unauthorized("missing claim", f"the token has no {exc.claim} claim") from None
        except jwt.PyJWTError as exc:
            cause, description = _refused(exc)
            raise Unauthorized(cause, description) from None
        principal = claims[self._claim]
        if not isinstance(principal, str) or not principal:
            raise Unauthorized("no principal", f"the token's {self._claim} claim names no one")
        scope = claims.get("scope")
        scopes = scope.split() if isinstance(scope, str) else []
        access = AccessToken(
            token=token,
            # The principal is the user, whichever client app asks for them.
            client_id=principal,
            scopes=scopes,
            expires_at=math.floor(claims["exp"]),  # a NumericDate may have a fraction; the SDK's is whole
            subject=principal,
            claims=claims,
        )
        self._verified[token] = (kid, key, access)
        return access

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The gateway's lifespan: the key set fetched as it starts (a failure is one warning line, and it serves
        on), then fetched again, when a request finds it stale, in a task of this lifespan's, ended with it."""
        async with anyio.create_task_group() as tasks:
            if self._claim_fetch():
                await anyio.to_thread.run_sync(self._fetch)
            self._behind = tasks
            try:
                yield
            finally:
                self._behind = None
                tasks.cancel_scope.cancel()

    def state(self) -> dict[str, object]:
        """The key set as an operator sees it: its URL, how many keys it holds, when it was last fetched and
        last tried (on its clock, ``None`` for never), and the last attempt's error (``None`` after a success)."""
        return {
            "jwks": self._url,
            "keys": len(self._keys),
            "fetched_at": self._fetched,
            "attempted_at": self._attempted,
            "error": self._error,
        }

    async def _key(self, kid: str | None) -> jwt.PyJWK:
        """The key ``kid`` names, from the set held; an unknown one from a fetch this request may start."""
        key = self._held(kid)
        if key is None and self._claim_fetch():
            # A rotation, maybe: wait for the set.
            await anyio.to_thread.run_sync(self._fetch)
            key = self._held(kid)
        elif key is not None and self._stale() and self._claim_fetch():
            # Not waited for once its task is cancelled (the lifespan's end, a caller gone): its end frees the next.
            fetch = functools.partial(anyio.to_thread.run_sync, self._fetch, abandon_on_cancel=True)
            if self._behind is None:  # no lifespan to run it in: this request waits
                await fetch()
            else:  # behind this request, which goes on with the key it has
                self._behind.start_soon(fetch)
        if key is not None:
            return key
        if self._error is not None:
            raise Unauthorized("unreachable", "the authorization server's keys (JWKS) cannot be fetched")
        raise Unauthorized("unknown key", "the token's key (kid) is not one of the authorization server's")

    def _held(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None:
            return None
        return self._keys.get(kid)

    def _stale(self) -> bool:
        return self._fetched is None or self.clock() - self._fetched > JWKS_LIFESPAN

    def _claim_fetch(self) -> bool:
        """Whether a fetch may start now (none running, the cooldown over); if so, it is this caller's.
        Called on the event loop only, so two callers never both get it."""
        now = self.clock()
        if self._fetching or (self._attempted is not None and now - self._attempted < JWKS_COOLDOWN):
            return False
        self._fetching = True
        self._attempted = now
        return True

    def _fetch(self) -> None:
        """The fetch :meth:`_claim_fetch` granted (blocking urllib, so on a thread): the set replaced, or the
        error kept, and logged when it is new."""
        try:
            keys = self._client.get_signing_keys(refresh=True)
        except (jwt.PyJWTError, OSError, ValueError) as exc:
            # PyJWT's errors, and what it leaves to others: a body that is not JSON.
            error = str(exc.__cause__ or exc)
            # Logged once per outage, and again when its error changes.
            if error != self._error:
                held = len(self._keys)
                message = "mcp-sessions gateway: the JWKS at %s cannot be fetched (%s): %d keys held"
                logger.warning(message, self._url, error, held)
            self._error = error
        else:
            if self._error is not None:
                logger.info("mcp-sessions gateway: the JWKS at %s is fetched again", self._url)
            self._keys = {key.key_id: key for key in keys if key.key_id is not None}
            self._fetched = self.clock()
            self._error = None
        finally:
            self._fetching = False


class GatewayAuth:
    """The gateway's authentication (see the module): ``jwks_url`` with ``issuer`` and ``audience``, and/or
    ``principal_header`` from trusted peers; ``resource`` (default: the audience) is the gateway's public MCP URL
    the metadata names, with its ``authorization_servers`` (default: the issuer). ``verifier`` is the
    :class:`JwtVerifier`, whose ``state()`` an operator's view shows."""

    def __init__(
        self,
        *,
        jwks_url: str | None = None,
        issuer: str | None = None,
        audience: str | None = None,
        principal_claim: str = "sub",
        principal_header: str | None = None,
        resource: str | None = None,
        authorization_servers: Sequence[str] = (),
        leeway: float = DEFAULT_LEEWAY,
    ) -> None:
        self.verifier: JwtVerifier | None = None
        if jwks_url is not None:
            if not issuer or not audience:
                raise ValueError("a JWKS verifies tokens for an issuer and an audience: give both")
            self.verifier = JwtVerifier(
                jwks_url, issuer=issuer, audience=audience, principal_claim=principal_claim, leeway=leeway
            )
            resource = resource or audience
            authorization_servers = authorization_servers or [issuer]
        elif authorization_servers and resource is None:
            raise ValueError("--auth-server names the servers of a protected resource: give --auth-resource too")
        elif principal_header is None:
            raise ValueError("auth takes a JWKS (--auth-jwks) or a principal header (--auth-principal-header)")
        if principal_header is not None and not _HEADER_NAME.fullmatch(principal_header):
            raise ValueError(f"{principal_header!r} is not a header name")
        if principal_header is not None and principal_header.lower() == (issuer or "").lower():
            # the header is its principals' issuer (authenticate): one name would be two kinds of principal
            raise ValueError("--auth-principal-header and --auth-issuer must differ")
        self._header = None if principal_header is None else principal_header.lower()
        self._metadata = None
        metadata_url = None
        if resource is not None and authorization_servers:
            try:
                url = AnyHttpUrl(resource)
                servers = [AnyHttpUrl(server) for server in authorization_servers]
                (self._metadata,) = create_protected_resource_routes(url, servers)
            except ValueError:
                raise ValueError(
                    "the protected resource (--auth-resource, else the audience) and the authorization servers "
                    "(--auth-server, else the issuer) are http(s) URLs"
                ) from None
            metadata_url = build_resource_metadata_url(url)
        self._metadata_url = metadata_url
        # Logs on a miss: once per cause and caller, among the most recent.
        self._log_once = functools.lru_cache(maxsize=_LOGGED_CALLERS)(_log_refusal)

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """``app`` behind the authentication: its metadata served, every other request authenticated or 401."""
        return _Guarded(app, self, self._metadata, self._header)

    async def authenticate(self, scope: Scope) -> tuple[AuthCredentials, AuthenticatedUser]:
        """The request's principal: the trusted proxy's header, else the bearer token's; else
        :class:`Unauthorized`."""
        headers = Headers(scope=scope)
        named = None
        if self._header is not None and scope[PEER].trusted:
            named = headers.get(self._header)
        if named:
            # An issuer of its own: the proxy's "alice" is not the "alice" of a token's issuer.
            claims = {"iss": self._header}
            token = AccessToken(token="", client_id=named, scopes=[], subject=named, claims=claims)
            return AuthCredentials(), ProxiedUser(token)
        scheme, _, credential = headers.get("authorization", "").partition(" ")
        if self.verifier is None or scheme.lower() != "bearer":
            raise Unauthorized("no token", "a bearer token is required", error=None)
        access = await self.verifier.verify(credential.strip())
        return AuthCredentials(access.scopes), AuthenticatedUser(access)

    def refusal(self, scope: Scope, refused: Unauthorized) -> Response:
        """The 401 for ``refused``: RFC 6750's ``error`` and ``error_description``, and the metadata's URL as the
        SDK gives it (RFC 9728); its reason logged, once per cause and caller (the client's address)."""
        client = scope.get("client")
        caller = "an unknown peer" if client is None else printable(str(client[0]))
        self._log_once(refused.cause, caller, refused.description)
        parts: list[str] = []
        body = {"error_description": refused.description}
        # None without a credential (RFC 6750, section 3.1).
        if refused.error is not None:
            parts.append(f'error="{refused.error}"')
            parts.append(f'error_description="{refused.description}"')
            body = {"error": refused.error, **body}
        if self._metadata_url is not None:
            parts.append(f'resource_metadata="{self._metadata_url}"')
        challenge = " ".join(["Bearer", ", ".join(parts)]).rstrip()
        return JSONResponse(body, 401, headers={"WWW-Authenticate": challenge})

    def expired(self, scope: Scope) -> Response:
        """The 401 for a request whose token expired before its answer started (``_expiry``)."""
        return self.refusal(scope, Unauthorized(*_REFUSALS[0][1:]))


class ProxiedUser(AuthenticatedUser):
    """A user the auth proxy named (``--auth-principal-header``): a kind of principal of its own, never the same
    as a token's of the same name (see ``stdio._models.Owner``)."""


def _refused(exc: jwt.PyJWTError) -> tuple[str, str]:
    """The cause and description of PyJWT's refusal ``exc``: its first kind in :data:`_REFUSALS`."""
    for kind, cause, description in _REFUSALS:
        if isinstance(exc, kind):
            return cause, description
    return _INVALID


def _log_refusal(cause: str, caller: str, description: str) -> None:
    logger.info("mcp-sessions gateway: 401 to %s: %s", caller, description)


class _Guarded:
    """The metadata route, else ``app`` for an authenticated request, else a 401 that says why; the principal
    header only from trusted peers; the key set fetched as the app starts."""

    def __init__(self, app: ASGIApp, auth: GatewayAuth, metadata: Route | None, header: str | None) -> None:
        self.app = app
        self._auth = auth
        self._metadata = metadata
        self._header = None if header is None else header.encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The lifespan; a WebSocket, which the app refuses.
        if scope["type"] != "http":
            if scope["type"] == "lifespan" and self._auth.verifier is not None:
                async with self._auth.verifier.running():
                    return await self.app(scope, receive, send)
            return await self.app(scope, receive, send)
        if self._header is not None and not scope[PEER].trusted:
            kept = []
            for name, value in scope["headers"]:
                if name.lower() != self._header:
                    kept.append((name, value))
            scope["headers"] = kept
        if self._metadata is not None and scope["path"] == self._metadata.path:
            return await self._metadata(scope, receive, send)
        try:
            scope["auth"], scope["user"] = await self._auth.authenticate(scope)
        except Unauthorized as refused:
            response = self._auth.refusal(scope, refused)
            return await response(scope, receive, send)
        # A token's answer ends with it, at its exp and the leeway; a proxy's user has no end.
        expires = scope["user"].access_token.expires_at
        if expires is None or self._auth.verifier is None:
            return await self.app(scope, receive, send)
        left = expires + self._auth.verifier.leeway - self._auth.verifier.clock()
        await until_expiry(self.app, scope, receive, send, left, self._auth.expired)


class Credentials(NamedTuple):
    """What a request gives the process it starts (``--process-env``): its ``values``, and their ``digest``, which its
    conversation keeps to compare its later requests' with (:meth:`ProcessEnv.check`)."""

    values: dict[str, str]
    digest: bytes


class ProcessEnv:
    """``NAME=claim:CLAIM``, ``NAME=header:HEADER-NAME``, ``NAME=exchange:AUDIENCE``,
    ``NAME=id-jag:ISSUER[,resource=URI][,scope=SCOPE]`` and ``NAME=oauth:ISSUER[,...]``: what a conversation's
    process gets of its request; ``exchange`` and ``exchange_scope`` exchange its token for an audience
    (``exchange.id_jag``: by an ID-JAG, whose subject is the user's ID token kept by ``subject`` where it is given),
    and ``grants`` (by name) hold each ``oauth:`` variable's user's own grant. A user with no ID token or grant kept
    is asked to sign in, at the routes of :attr:`signing_in`, which the app serves."""

    def __init__(
        self,
        specs: Collection[str] = (),
        *,
        exchange: TokenExchange | None = None,
        exchange_scope: str | None = None,
        subject: IdTokens | None = None,
        grants: Mapping[str, IssuerGrants] | None = None,
    ) -> None:
        self.sources: dict[str, tuple[str, str]] = {}
        self._id_jag: dict[str, Target] = {}
        for spec in specs:
            name, _, source = spec.partition("=")
            kind, _, key = source.partition(":")
            if not _ENV_NAME.fullmatch(name) or name.startswith("MCP_SESSION"):
                raise ValueError(f"--process-env: {name!r} is not a variable name a process may be given")
            if loads_code(name):
                raise ValueError(f"--process-env: {name} tells the dynamic loader what to load: never a user's")
            if not _known_source(kind, key):
                raise ValueError(
                    f"--process-env {name}: give claim:CLAIM, header:HEADER-NAME, exchange:AUDIENCE, "
                    f"id-jag:ISSUER[,resource=URI][,scope=SCOPE] or oauth:ISSUER[,...], not {source!r}"
                )
            if kind in ("exchange", "id-jag") and exchange is None:
                raise ValueError(f"--process-env {name}: {kind}: needs the token exchange (--exchange-*)")
            if kind == "oauth" and name not in (grants or {}):
                raise ValueError(f"--process-env {name}: oauth: needs the gateway's own login (--login-*)")
            if kind == "id-jag":
                assert exchange is not None
                self._id_jag[name] = id_jag_target(key, f"--process-env {name}")
                if exchange.id_jag is None:
                    raise ValueError(
                        f"--process-env {name}: id-jag: needs the gateway's client at {key.split(',')[0]}: "
                        "give --id-jag-client-id"
                    )
            if kind == "header":
                key = key.lower()
            self.sources[name] = (kind, key)
        if subject is not None and not self._id_jag:
            raise ValueError("an ID token is the subject of an ID-JAG's exchange alone: give NAME=id-jag:ISSUER")
        self._exchange = exchange
        self._exchange_scope = exchange_scope
        self._subject = subject
        self._grants = {name: each for name, each in (grants or {}).items() if name in self.sources}
        signing_in = [*([] if subject is None else [subject]), *self._grants.values()]
        self.signing_in: SignIns | None = None
        if signing_in:  # the sign-ins' routes, for the app to serve
            from ._sign_ins import SignIns

            self.signing_in = SignIns(signing_in)

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """``app``, each of whose requests has its ``exchange:`` values exchanged first, in its scope (a refusal is
        the request's answer)."""
        if not self.sources:
            return app
        targets = dict(self._id_jag)
        for name, (kind, key) in self.sources.items():
            if kind == "exchange":
                targets[name] = Target(key, scope=self._exchange_scope)

        async def with_request(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                return await app(scope, receive, send)
            try:
                exchanged = await self._exchanged(scope, targets)
            except ExchangeRefused as refused:
                if self.signing_in is not None:  # no grant of hers kept: she signs in (its URL, in the request's era)
                    from ._sign_ins import SignInRequired

                    if isinstance(refused, SignInRequired):
                        return await (await refused.answer_reading(scope, receive)).send(send)
                return await refused.answer().send(send)
            if exchanged is not None:
                scope[_EXCHANGED] = exchanged
            await app(scope, receive, send)

        return with_request

    async def _exchanged(self, scope: Scope, targets: dict[str, Target]) -> dict[str, str] | None:
        """The request's ``exchange:``, ``id-jag:`` and ``oauth:`` values, by name; ``None`` when it has no token to
        exchange, or none is asked."""
        exchanged = {name: await each.token_of(scope) for name, each in self._grants.items()}
        subject = subject_token(scope)
        if not targets or self._exchange is None or subject is None:
            return exchanged or None
        id_token = None
        for name, target in targets.items():
            if target.id_jag and self._subject is not None:
                id_token = id_token or await self._subject.token_of(scope)
                exchanged[name] = await self._exchange.token(id_token, target, ID_TOKEN_TYPE)
            else:
                exchanged[name] = await self._exchange.token(subject, target)
        return exchanged

    def of(self, scope: Scope | None) -> Credentials:
        """What the request ``scope`` gives a process it starts; a missing value is an error that names its source."""
        values = {}
        for name, (kind, key) in self.sources.items():
            value = None if scope is None else _value(scope, kind, key, name)
            if value is None:
                raise _missing(name, kind, key)
            values[name] = value
        return Credentials(values, self._digest(values, scope))

    @property
    def nobody(self) -> Credentials:
        """What a process no request starts gets (the shared one, those started ahead): none of the values."""
        return Credentials({}, self._digest({}, None))

    def check(self, digest: bytes, scope: Scope) -> dict[str, str]:
        """Refuse the request ``scope`` when its values are not those its conversation's process started with; else
        the values it gives (none without ``--process-env``)."""
        if not self.sources:
            return {}
        given = self.of(scope)
        if given.digest != digest:
            names = ", ".join(key for _, key in self.sources.values())
            raise MCPError(
                types.INVALID_REQUEST,
                f"this conversation's process was started with other values of {names} (--process-env): "
                "send the same, or start a new session for others",
            )
        return given.values

    def _digest(self, values: dict[str, str], scope: Scope | None) -> bytes:
        """What a conversation keeps of its process's values: enough to compare, nothing to read back; an
        exchanged token counts as its user (issuer and principal), who stays the same as it is renewed."""
        user = (scope or {}).get("user")
        token = user.access_token if isinstance(user, AuthenticatedUser) else None
        who = ""
        if token is not None:
            issuer = (token.claims or {}).get("iss")
            who = f"{issuer}\0{token.subject}"
        bound = {}
        for name, value in values.items():
            kind, _ = self.sources[name]
            bound[name] = who if kind in ("exchange", "id-jag", "oauth") else value
        text = json.dumps(bound, sort_keys=True)
        return hashlib.sha256(text.encode()).digest()


def _value(scope: Scope, kind: str, key: str, name: str) -> str | None:
    if kind == "header":
        value = Headers(scope=scope).get(key)
    elif kind in ("exchange", "id-jag", "oauth"):
        value = scope.get(_EXCHANGED, {}).get(name)
    else:
        user = scope.get("user")
        claims = None
        if isinstance(user, AuthenticatedUser):
            claims = user.access_token.claims
        value = (claims or {}).get(key)
    if isinstance(value, str) and value and "\x00" not in value:
        return value
    return None


def _missing(name: str, kind: str, key: str) -> MCPError:
    """The error for a request without ``name``'s value: it names the value's source."""
    where = {
        "claim": f"the access token's {key!r} claim",
        "header": f"the {key} header",
        "exchange": f"its bearer token exchanged for {key}",
        "id-jag": f"its bearer token exchanged for an ID-JAG, and that for a token of {key.split(',')[0]}",
        "oauth": f"its user's own grant at {key.split(',')[0]}",
    }[kind]
    return MCPError(
        types.INVALID_REQUEST,
        f"this gateway gives each conversation's process {name} from {where} (--process-env): "
        "the request that starts a conversation must carry it",
    )


def _known_source(kind: str, key: str) -> bool:
    """Whether ``kind:key`` is a source: a claim or an audience named, or a header's name."""
    if kind == "header":
        return _HEADER_NAME.fullmatch(key) is not None
    return kind in ("claim", "exchange", "id-jag", "oauth") and bool(key)


class FrontedConversations(HostConversationSource):
    """A replica's host source: a conversation id (in baggage, ``_meta`` or a header) counts only from a peer
    ``--forwarded-allow-ips`` trusts, the front; a client that reaches the replica around it names none."""

    async def session_for(self, scope: Scope, call: CallView, request: RequestView) -> Session | None:
        peer: Peer | None = scope.get(PEER)
        if peer is None or not peer.trusted:
            return None
        return await super().session_for(scope, call, request)
