"""Who is asking, at the gateway, and each user's credentials in their own process.

**Who is asking** (:class:`GatewayAuth`): the gateway is an OAuth 2.1 resource server, as the MCP authorization
spec has it. A bearer token is a JWT verified against the authorization server's JWKS (PyJWT's
``PyJWKClient``, the key set cached, each fetch bounded by a timeout and run off the event loop), for the issuer
and the audience given, and names its principal by one claim (``sub``); or an auth proxy in front names the
principal in a header, believed only from the peers ``--forwarded-allow-ips`` trusts (from any other peer the
header is dropped, so nothing behind the gateway sees it). The ``mcp`` SDK does the rest: its
``BearerAuthBackend`` reads the token, its ``RequireAuthMiddleware`` answers 401 with ``WWW-Authenticate:
Bearer resource_metadata="…"``, and its protected-resource route serves that metadata (RFC 9728). The
principal lands in ``scope["user"]`` as the SDK's ``AuthenticatedUser``, which the session middleware's
principal hook reads: sessions, host conversations with ``conversation_data="principal"``, and the SDK's
transport sessions are bound to it.

**Each user's credentials** (:class:`ProcessEnv`, ``--process-env NAME=SOURCE``): a conversation's process
gets ``NAME`` from the request that starts the conversation, a claim of its verified token or a header, or the
token its verified token is exchanged for, for an audience (``exchange:AUDIENCE``, ``_exchange``: done by
:meth:`ProcessEnv.wrap` as each request arrives, cached per user). The conversation keeps a digest of the
values, never the values (of an exchanged token, its user's issuer and principal: the token itself changes as
it is renewed), and a later request of it whose values differ is refused. The request is found through
:data:`REQUEST`, which :meth:`ProcessEnv.wrap` sets for each request.

**Which peer names a conversation** (:class:`FrontedConversations`): a stdio gateway behind a front (``gateway
--upstream``) takes a host's conversation id only from the peers ``--forwarded-allow-ips`` trusts.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Final

import anyio.to_thread
import jwt
import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.shared.exceptions import MCPError
from pydantic import AnyHttpUrl
from starlette.authentication import AuthCredentials, AuthenticationBackend
from starlette.datastructures import Headers
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..sources import HostConversationSource
from ._exchange import ExchangeRefused, Target, TokenExchange, subject_token
from ._front import PEER, Peer

if TYPE_CHECKING:
    from .._session import Session
    from ..sources import CallView, RequestView

JWKS_TIMEOUT: Final = 5.0
"""The longest wait for the JWKS, per fetch."""
JWKS_LIFESPAN: Final = 300.0
"""How long the fetched key set is used; a token with an unknown ``kid`` fetches it again, at most every 30 s (PyJWT's
cooldown)."""
REQUEST: ContextVar[Scope | None] = ContextVar("mcp_sessions.gateway.request", default=None)
"""The request whose conversation may start a process: set by :meth:`ProcessEnv.wrap`, and by the stdio relay."""
_EXCHANGED: Final = "mcp_sessions.gateway.exchanged"  # in a request's scope: its exchange: values, by name
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class JwtVerifier:
    """The ``mcp`` SDK's ``TokenVerifier`` for JWT access tokens signed by a key of a JWKS."""

    def __init__(self, jwks_url: str, *, issuer: str, audience: str, principal_claim: str = "sub") -> None:
        # The key set is cached, not each key: a key the JWKS no longer lists stops verifying within the lifespan.
        self._jwks = jwt.PyJWKClient(jwks_url, lifespan=JWKS_LIFESPAN, timeout=JWKS_TIMEOUT)
        self._issuer, self._audience, self._claim = issuer, audience, principal_claim

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's principal and claims, or ``None`` for any token that does not verify."""
        try:  # the key the token's header names; a fetch (blocking urllib) on a thread of its own
            key = await anyio.to_thread.run_sync(self._jwks.get_signing_key_from_jwt, token)
            claims = jwt.decode(
                token,
                key,
                algorithms=[key.algorithm_name],  # the key's own: never "none", never another key type's
                audience=self._audience,
                issuer=self._issuer,
                options={"require": ["exp", "iss", "aud", self._claim]},
            )
        except jwt.PyJWTError:
            return None
        principal = claims[self._claim]
        if not isinstance(principal, str) or not principal:
            return None
        scopes = claims.get("scope")
        return AccessToken(
            token=token,
            client_id=principal,  # the principal is the user, whichever client app asks for them
            scopes=scopes.split() if isinstance(scopes, str) else [],
            expires_at=claims["exp"],
            subject=principal,
            claims=claims,
        )


class GatewayAuth(AuthenticationBackend):
    """The gateway's authentication (see the module): ``jwks_url`` with ``issuer`` and ``audience``, and/or
    ``principal_header`` from trusted peers; ``resource`` (default: the audience) is the gateway's public MCP URL
    the metadata names, with its ``authorization_servers`` (default: the issuer)."""

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
    ) -> None:
        self._bearer = None
        if jwks_url is not None:
            if not issuer or not audience:
                raise ValueError("a JWKS verifies tokens for an issuer and an audience: give both")
            verifier = JwtVerifier(jwks_url, issuer=issuer, audience=audience, principal_claim=principal_claim)
            self._bearer = BearerAuthBackend(verifier)
            resource = resource or audience
            authorization_servers = authorization_servers or [issuer]
        elif authorization_servers and resource is None:
            raise ValueError("--auth-server names the servers of a protected resource: give --auth-resource too")
        elif principal_header is None:
            raise ValueError("auth takes a JWKS (--auth-jwks) or a principal header (--auth-principal-header)")
        if principal_header is not None and not _HEADER_NAME.fullmatch(principal_header):
            raise ValueError(f"{principal_header!r} is not a header name")
        self._header = None if principal_header is None else principal_header.lower()
        self._metadata, metadata_url = None, None
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

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """``app`` behind the authentication: its metadata served, every other request authenticated or 401."""
        checked = AuthenticationMiddleware(RequireAuthMiddleware(app, [], self._metadata_url), backend=self)
        return _Guarded(app, checked, self._metadata, self._header)

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, AuthenticatedUser] | None:
        """The request's principal: the trusted proxy's header, else the bearer token's; ``None`` for none."""
        if self._header is not None and conn.scope[PEER].trusted and (named := conn.headers.get(self._header)):
            # An issuer of its own: the proxy's "alice" is not the "alice" of a token's issuer.
            token = AccessToken(token="", client_id=named, scopes=[], subject=named, claims={"iss": self._header})
            return AuthCredentials(), AuthenticatedUser(token)
        return None if self._bearer is None else await self._bearer.authenticate(conn)


class _Guarded:
    """The metadata route, else ``checked`` (``app`` authenticated); the principal header only from trusted peers."""

    def __init__(self, app: ASGIApp, checked: ASGIApp, metadata: Route | None, header: str | None) -> None:
        self.app, self._checked, self._metadata = app, checked, metadata
        self._header = None if header is None else header.encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)  # the lifespan; a WebSocket, which the app refuses
        if self._header is not None and not scope[PEER].trusted:
            scope["headers"] = [(name, value) for name, value in scope["headers"] if name.lower() != self._header]
        if self._metadata is not None and scope["path"] == self._metadata.path:
            return await self._metadata(scope, receive, send)
        await self._checked(scope, receive, send)


class ProcessEnv:
    """``NAME=claim:CLAIM``, ``NAME=header:HEADER-NAME`` and ``NAME=exchange:AUDIENCE``: what a conversation's
    process gets of its request; ``exchange`` and ``exchange_scope`` exchange its token for an audience."""

    def __init__(
        self, specs: Collection[str] = (), *, exchange: TokenExchange | None = None, exchange_scope: str | None = None
    ) -> None:
        self.sources: dict[str, tuple[str, str]] = {}
        for spec in specs:
            name, _, source = spec.partition("=")
            kind, _, key = source.partition(":")
            if not _ENV_NAME.fullmatch(name) or name.startswith("MCP_SESSION"):
                raise ValueError(f"--process-env: {name!r} is not a variable name a process may be given")
            if not (kind in ("claim", "exchange") and key) and not (kind == "header" and _HEADER_NAME.fullmatch(key)):
                raise ValueError(
                    f"--process-env {name}: give claim:CLAIM, header:HEADER-NAME or exchange:AUDIENCE, not {source!r}"
                )
            if kind == "exchange" and exchange is None:
                raise ValueError(f"--process-env {name}: exchange:AUDIENCE needs the token exchange (--exchange-*)")
            self.sources[name] = (kind, key.lower() if kind == "header" else key)
        self._exchange, self._exchange_scope = exchange, exchange_scope

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """``app``, each of whose requests is :data:`REQUEST` while it runs (a process starts inside it), its
        ``exchange:`` values exchanged first (a refusal is the request's answer)."""
        if not self.sources:
            return app
        sources = self.sources.items()
        targets = {name: Target(key, scope=self._exchange_scope) for name, (kind, key) in sources if kind == "exchange"}

        async def with_request(scope: Scope, receive: Receive, send: Send) -> None:
            if targets and self._exchange is not None and (subject := subject_token(scope)) is not None:
                try:
                    exchanged = {name: await self._exchange.token(subject, t) for name, t in targets.items()}
                except ExchangeRefused as refused:
                    return await refused.answer().send(send)
                scope[_EXCHANGED] = exchanged
            token = REQUEST.set(scope)
            try:
                await app(scope, receive, send)
            finally:
                REQUEST.reset(token)

        return with_request

    def values(self) -> dict[str, str]:
        """The values for a process the current request starts; a missing one is an error that names its source."""
        scope = REQUEST.get()
        values = {}
        for name, (kind, key) in self.sources.items():
            value = None if scope is None else _value(scope, kind, key, name)
            if value is None:
                where = {
                    "claim": f"the access token's {key!r} claim",
                    "header": f"the {key} header",
                    "exchange": f"its bearer token exchanged for {key}",
                }[kind]
                raise MCPError(
                    types.INVALID_REQUEST,
                    f"this gateway gives each conversation's process {name} from {where} (--process-env): "
                    "the request that starts a conversation must carry it",
                )
            values[name] = value
        return values

    def check(self, digest: bytes) -> None:
        """Refuse the current request when its values are not those its conversation's process started with."""
        if self.sources and self.digest(self.values()) != digest:
            names = ", ".join(key for _, key in self.sources.values())
            raise MCPError(
                types.INVALID_REQUEST,
                f"this conversation's process was started with other values of {names} (--process-env): "
                "send the same, or start a new session for others",
            )

    def digest(self, values: dict[str, str]) -> bytes:
        """What a conversation keeps of its process's values: enough to compare, nothing to read back; an
        exchanged token counts as its user (issuer and principal), who stays the same as it is renewed."""
        scope = REQUEST.get() or {}
        user = scope.get("user")
        token = user.access_token if isinstance(user, AuthenticatedUser) else None
        who = "" if token is None else f"{(token.claims or {}).get('iss')}\0{token.subject}"
        bound = {name: who if self.sources[name][0] == "exchange" else value for name, value in values.items()}
        return hashlib.sha256(json.dumps(bound, sort_keys=True).encode()).digest()


def _value(scope: Scope, kind: str, key: str, name: str) -> str | None:
    if kind == "header":
        value = Headers(scope=scope).get(key)
    elif kind == "exchange":
        value = scope.get(_EXCHANGED, {}).get(name)
    else:
        user = scope.get("user")
        claims = user.access_token.claims if isinstance(user, AuthenticatedUser) else None
        value = (claims or {}).get(key)
    return value if isinstance(value, str) and value and "\x00" not in value else None


class FrontedConversations(HostConversationSource):
    """A replica's host source: a conversation id (in baggage, ``_meta`` or a header) counts only from a peer
    ``--forwarded-allow-ips`` trusts, the front; a client that reaches the replica around it names none."""

    async def session_for(self, scope: Scope, call: CallView, request: RequestView) -> Session | None:
        peer: Peer | None = scope.get(PEER)
        return None if peer is None or not peer.trusted else await super().session_for(scope, call, request)
