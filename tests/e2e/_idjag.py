"""Stand-ins of MCP's enterprise profile (Enterprise-Managed Authorization: draft-ietf-oauth-identity-assertion-authz-
grant, "ID-JAG"), on loopback: the enterprise's identity provider (:class:`IdentityProvider`), a resource's own
authorization server (:class:`ResourceServer`), and an upstream MCP server that takes that server's tokens alone and
names it in its protected resource metadata (:func:`upstream`).

Each checks what the draft and RFC 7523 ask of the gateway, and refuses with RFC 6749 §5.2's errors otherwise:

- every client, at either server, by ``private_key_jwt`` (RFC 7523 §2.2, §3): ``client_assertion_type``
  jwt-bearer, the assertion signed by the key the server holds for that client, ``iss`` = ``sub`` = the client id,
  ``aud`` the server's issuer or token endpoint, ``exp`` present and at most 5 minutes ahead, a ``jti`` never seen
  before (refused on reuse); no client secret, in the form or a header. Else ``invalid_client``.
- the identity provider's OpenID Connect login (its authorization endpoint signs in at once the user a browser names
  in ``_vendor``'s ``X-Test-User`` header; its token endpoint checks the code's client, redirect URI and PKCE's
  S256, and answers an ID token for that client, with the ``nonce``, and a refresh token when ``offline_access`` was
  asked; a refresh token, rotated at each use, answers a new ID token; ``refreshes`` counts them).
- the identity provider's token exchange (RFC 8693, the draft's §4.3): ``requested_token_type`` the ID-JAG's, as
  ``subject_token`` the user's access token of its own, or an ID token of its own whose ``aud`` is the client that
  asks (as Okta's Cross App Access takes it; ``invalid_grant`` else), an ``audience`` that is a resource
  authorization server it knows for that client (``invalid_target`` else), and no ``client_id`` of that server's
  sent beside the client's own. It issues the ID-JAG (§3): a JWT of header ``typ`` ``oauth-id-jag+jwt``, claims
  ``iss`` (itself), ``sub`` (the user), ``aud`` (the authorization server's issuer), ``client_id`` (the client's id
  at that server, from its own records), ``jti``, ``iat``, ``exp`` (5 minutes) and ``resource``, ``scope`` when
  asked; answered as ``issued_token_type`` id-jag, ``token_type`` ``N_A``.
- the resource's authorization server's jwt-bearer grant (RFC 7523 §2.1, the draft's §4.4): the ID-JAG's ``typ``,
  its signature by the identity provider's key, ``iss`` the identity provider, ``aud`` itself, ``exp``, a ``jti``
  never seen (an ID-JAG is single-use), and ``client_id`` the client that authenticated. Else ``invalid_grant``.
  It issues its own access token: a JWT for the ID-JAG's ``resource``, of its ``sub``, ``expires_in`` ``lifetime``.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from conftest import serve
from e2e._gateway import upstream_server
from e2e._vendor import USER_HEADER, _challenge

ID_JAG_JWT_TYPE = "oauth-id-jag+jwt"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"
EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ASSERTION_MOST = 300  # seconds: the longest-lived client assertion either server takes


def _refused(error: str, status: int = 400) -> Response:
    return JSONResponse({"error": error, "error_description": f"the stand-in refuses: {error}"}, status)


def _algorithms(key: Any) -> list[str]:
    return ["RS256"] if isinstance(key, rsa.RSAPublicKey) else ["ES256", "ES384", "ES512"]


@dataclass
class _Server:
    """What both servers share: their own key, the clients they know by public key, the ``jti``s seen (of client
    assertions, and at the resource's server of ID-JAGs), and what they were asked (``asked``: each form, its
    credentials taken out)."""

    clients: dict[str, Any] = field(default_factory=dict)
    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    seen: set[str] = field(default_factory=set)
    asked: list[dict[str, str]] = field(default_factory=list)
    url: str = ""

    def client(self, request: Request, form: dict[str, str]) -> str | None:
        """The client that ``form`` authenticates by ``private_key_jwt`` (RFC 7523 §3), else ``None``."""
        if "client_secret" in form or "authorization" in request.headers:
            return None
        client_id, assertion = form.get("client_id", ""), form.get("client_assertion", "")
        key = self.clients.get(client_id)
        if form.get("client_assertion_type") != ASSERTION_TYPE or key is None:
            return None
        try:
            claims = jwt.decode(
                assertion,
                key,
                _algorithms(key),
                audience=[self.url, self.url + "/token"],
                issuer=client_id,
                options={"require": ["exp", "iss", "sub", "aud", "jti"]},
            )
        except jwt.PyJWTError:
            return None
        if claims["sub"] != client_id or claims["exp"] > time.time() + ASSERTION_MOST or claims["jti"] in self.seen:
            return None
        self.seen.add(claims["jti"])
        return client_id

    def metadata(self, request: Request) -> Response:
        grants = [EXCHANGE_GRANT, JWT_BEARER]
        return JSONResponse(
            {"issuer": self.url, "token_endpoint": self.url + "/token", "grant_types_supported": grants}
        )

    def jwks(self, request: Request) -> Response:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return JSONResponse({"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]})

    def signed(self, claims: dict[str, Any], typ: str = "JWT") -> str:
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "k1", "typ": typ})

    def routes(self, token: Any) -> list[Route]:
        return [
            Route("/token", token, methods=["POST"]),
            Route("/.well-known/oauth-authorization-server", self.metadata),
            Route("/jwks.json", self.jwks),
        ]


@dataclass
class IdentityProvider(_Server):
    """The enterprise's identity provider: it signs its users' access tokens (:meth:`login`) and, for its clients,
    ID-JAGs for the resource authorization servers its ``records`` name (client id here and that server's issuer,
    to the client's id there)."""

    records: dict[tuple[str, str], str] = field(default_factory=dict)
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    refresh_tokens: dict[str, tuple[str, str]] = field(default_factory=dict)  # each live one: its client and user
    id_lifetime: int = 600
    refreshes: int = 0
    id_tokens: list[str] = field(default_factory=list)  # each it issued, in order

    def routes(self, token: Any) -> list[Route]:
        return [
            *super().routes(token),
            Route("/authorize", self.authorize),
            Route("/.well-known/openid-configuration", self.metadata),
        ]

    def metadata(self, request: Request) -> Response:
        grants = [EXCHANGE_GRANT, JWT_BEARER, "authorization_code", "refresh_token"]
        return JSONResponse(
            {
                "issuer": self.url,
                "authorization_endpoint": self.url + "/authorize",
                "token_endpoint": self.url + "/token",
                "jwks_uri": self.url + "/jwks.json",
                "grant_types_supported": grants,
                "code_challenge_methods_supported": ["S256"],
            }
        )

    async def authorize(self, request: Request) -> Response:
        query = dict(request.query_params)
        user = request.headers.get(USER_HEADER)
        if not user or query.get("client_id") not in self.clients or query.get("code_challenge_method") != "S256":
            return _refused("invalid_request")
        code = secrets.token_urlsafe(16)
        self.codes[code] = {"user": user, **query}
        back = {"code": code, "state": query["state"], "iss": self.url}
        return RedirectResponse(f"{query['redirect_uri']}?{urlencode(back)}", 302)

    def id_token(self, client: str, user: str, nonce: str | None = None) -> str:
        """``user``'s ID token, issued to ``client``."""
        now = int(time.time())
        claims = {"iss": self.url, "sub": user, "aud": client, "iat": now, "exp": now + self.id_lifetime}
        issued = self.signed(claims | ({"nonce": nonce} if nonce else {}))
        self.id_tokens.append(issued)
        return issued

    def _signed_in(self, client: str, form: dict[str, str]) -> Response:
        """The login's code (RFC 6749 §4.1.3, PKCE's S256), or a refresh token (rotated): an ID token for
        ``client``."""
        if form.get("grant_type") == "refresh_token":
            held = self.refresh_tokens.pop(form.get("refresh_token", ""), None)
            if held is None or held[0] != client:
                return _refused("invalid_grant")
            self.refreshes += 1
            user, nonce, offline = held[1], None, True
        else:
            asked = self.codes.pop(form.get("code", ""), None)
            if (
                asked is None
                or asked["client_id"] != client
                or asked["redirect_uri"] != form.get("redirect_uri")
                or asked["code_challenge"] != _challenge(form.get("code_verifier", ""))
            ):
                return _refused("invalid_grant")
            user, nonce = asked["user"], asked.get("nonce")
            offline = "offline_access" in asked.get("scope", "").split()
        answer = {"access_token": secrets.token_urlsafe(16), "token_type": "Bearer", "expires_in": self.id_lifetime}
        answer["id_token"] = self.id_token(client, user, nonce)
        if offline:
            answer["refresh_token"] = refresh = secrets.token_urlsafe(16)
            self.refresh_tokens[refresh] = (client, user)
        return JSONResponse(answer, headers={"cache-control": "no-store"})

    def login(self, user: str, audience: str, lifetime: int = 600) -> str:
        """``user``'s access token for ``audience`` (the gateway's URL)."""
        now = int(time.time())
        claims = {"iss": self.url, "sub": user, "aud": audience, "iat": now, "exp": now + lifetime}
        return self.signed(claims | {"jti": secrets.token_urlsafe(8)})

    async def token(self, request: Request) -> Response:
        form = {name: str(value) for name, value in (await request.form()).items()}
        client = self.client(request, form)
        if client is None:
            return _refused("invalid_client", 401)
        if form.get("grant_type") in ("authorization_code", "refresh_token"):
            return self._signed_in(client, form)
        self.asked.append({n: v for n, v in form.items() if n not in ("subject_token", "client_assertion")})
        if form.get("grant_type") != EXCHANGE_GRANT or form.get("requested_token_type") != ID_JAG_TYPE:
            return _refused("unsupported_grant_type")
        kind = form.get("subject_token_type")
        if kind not in (ACCESS_TOKEN_TYPE, ID_TOKEN_TYPE) or set(form) - _EXCHANGE_FORM:
            return _refused("invalid_request")
        try:  # an ID token must have been issued to the client that asks (the draft's §4.3, Okta's XAA)
            user = jwt.decode(
                form.get("subject_token", ""),
                self.key.public_key(),
                ["RS256"],
                issuer=self.url,
                audience=client if kind == ID_TOKEN_TYPE else None,
                options={"verify_aud": kind == ID_TOKEN_TYPE, "require": ["exp", "sub"]},
            )
        except jwt.PyJWTError:
            return _refused("invalid_grant")
        audience = form.get("audience", "")
        there = self.records.get((client, audience))
        if there is None:
            return _refused("invalid_target")
        now = int(time.time())
        claims = {"iss": self.url, "sub": user["sub"], "aud": audience, "client_id": there}
        claims |= {"jti": secrets.token_urlsafe(16), "iat": now, "exp": now + 300}
        claims |= {name: form[name] for name in ("resource", "scope") if name in form}
        grant = self.signed(claims, ID_JAG_JWT_TYPE)
        answer = {"access_token": grant, "issued_token_type": ID_JAG_TYPE, "token_type": "N_A", "expires_in": 300}
        return JSONResponse(answer, headers={"cache-control": "no-store"})


_EXCHANGE_FORM = frozenset(
    {"grant_type", "requested_token_type", "subject_token", "subject_token_type", "audience", "resource", "scope"}
    | {"client_id", "client_assertion_type", "client_assertion"}
)
"""What the exchange's form may hold: no ``client_id`` of the resource's server's under another name."""


@dataclass
class ResourceServer(_Server):
    """A resource's own authorization server: it trusts ``identity_provider``'s ID-JAGs, and issues its own access
    tokens living ``lifetime`` seconds for them (``issued``: each, in order)."""

    identity_provider: IdentityProvider | None = None
    lifetime: int = 600
    issued: list[str] = field(default_factory=list)

    async def token(self, request: Request) -> Response:
        form = {name: str(value) for name, value in (await request.form()).items()}
        client = self.client(request, form)
        if client is None:
            return _refused("invalid_client", 401)
        self.asked.append({n: v for n, v in form.items() if n not in ("assertion", "client_assertion")})
        if form.get("grant_type") != JWT_BEARER:
            return _refused("unsupported_grant_type")
        assert self.identity_provider is not None
        assertion = form.get("assertion", "")
        try:
            typ = jwt.get_unverified_header(assertion).get("typ")
            grant = jwt.decode(
                assertion,
                self.identity_provider.key.public_key(),
                ["RS256"],
                audience=self.url,
                issuer=self.identity_provider.url,
                options={"require": ["exp", "iat", "jti", "sub", "client_id"]},
            )
        except jwt.PyJWTError:
            return _refused("invalid_grant")
        if typ != ID_JAG_JWT_TYPE or grant["jti"] in self.seen or grant["client_id"] != client:
            return _refused("invalid_grant")
        self.seen.add(grant["jti"])
        now = int(time.time())
        claims = {"iss": self.url, "sub": grant["sub"], "aud": grant.get("resource", self.url), "client_id": client}
        claims |= {"jti": secrets.token_urlsafe(16), "iat": now, "exp": now + self.lifetime}
        claims |= {"scope": grant["scope"]} if "scope" in grant else {}
        token = self.signed(claims, "at+jwt")
        self.issued.append(token)
        answer = {"access_token": token, "token_type": "Bearer", "expires_in": self.lifetime}
        return JSONResponse(answer, headers={"cache-control": "no-store"})


@contextlib.contextmanager
def serving(server: IdentityProvider | ResourceServer) -> Iterator[str]:
    """``server`` on loopback (its ``url`` set): its issuer URL."""
    with serve(Starlette(routes=server.routes(server.token))) as url:
        server.url = url
        yield url


class _Verifier:
    """The upstream's own check: a JWT of the resource's authorization server, for the upstream's own URL."""

    def __init__(self, server: ResourceServer, resource: list[str]) -> None:
        self.server, self.resource = server, resource

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            claims = jwt.decode(
                token, self.server.key.public_key(), ["RS256"], audience=self.resource[0], issuer=self.server.url
            )
        except jwt.PyJWTError:
            return None
        return AccessToken(token=token, client_id=claims["client_id"], scopes=[], expires_at=claims["exp"])


@contextlib.contextmanager
def upstream(server: ResourceServer) -> Iterator[str]:
    """An ``MCPServer`` (``upstream_server``'s ``seen`` tool) that takes ``server``'s tokens for its own URL alone,
    and names ``server`` in its protected resource metadata (RFC 9728, at the path of its MCP URL): its MCP URL."""
    resource: list[str] = [""]
    settings = AuthSettings(
        issuer_url=AnyHttpUrl(server.url),
        resource_server_url=AnyHttpUrl("https://upstream.invalid/mcp"),
        validate_token_resource=False,
    )
    mcp = upstream_server("upstream", token_verifier=_Verifier(server, resource), auth=settings)
    app = mcp.streamable_http_app(stateless_http=True, json_response=True)

    async def with_metadata(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/.well-known/oauth-protected-resource/mcp":
            named = {"resource": resource[0], "authorization_servers": [server.url]}
            return await JSONResponse(named)(scope, receive, send)
        await app(scope, receive, send)

    with serve(with_metadata) as base:
        resource[0] = base + "/mcp"
        yield base + "/mcp"


def key_file(path: Path) -> Any:
    """A new EC key (P-256) in the PEM file ``path``, mode 0600, as a gateway's client key: its public half."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path.write_bytes(pem)
    path.chmod(0o600)
    return key.public_key()
