"""A vendor's MCP server behind the vendor's own authorization server, and the team's IdP, as loopback stand-ins for
``--upstream-token oauth`` (``test_gateway_oauth``).

- :class:`Idp`: the team's OpenID Connect provider: discovery, its keys (``_issuer``'s key), an authorization
  endpoint that signs in at once the user a browser names in its ``X-Test-User`` header (the login a test cannot
  click through), and a token endpoint that checks the client's secret, the code's redirect URI and PKCE (S256), and
  answers an ID token (``nonce``, ``sub``) for the client. It also signs the users' bearer tokens for the gateway.
- :class:`Vendor`: the vendor's authorization server: RFC 8414 metadata, Dynamic Client Registration (RFC 7591,
  public clients), Client ID Metadata Documents (given ``documents``, the trust it fetches them with over https: a
  client id that is an https URL is the document there, whose ``client_id`` must be that URL, a public client's,
  naming the redirect URI asked for; else the client is refused), an authorization endpoint that consents at once
  for the ``X-Test-User`` a browser names (after checking the client, its registered redirect URI, PKCE's S256
  and the ``resource``; naming itself in its answer, RFC 9207, given ``iss``), and a token endpoint:
  the authorization code (once, its verifier checked), and refresh tokens rotated at each use, an old one seen
  again revoking the whole grant (RFC 9700 §4.14.2). Its access tokens are JWTs of its own key for the resource.
- :func:`vendor_server`: the vendor's ``MCPServer`` behind bearer auth: a request without a token of the vendor's
  for its own URL (of a grant not revoked, and not one the test had it refuse) gets 401 with ``resource_metadata``
  (RFC 9728), which it serves; its ``whoami`` tool says whose token it was called with.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import anyio.to_thread
import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp.server.mcpserver import Context, MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from e2e._issuer import KEY, KEYS

USER_HEADER = "x-test-user"


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _challenge(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


@dataclass
class Idp:
    """The team's IdP (see the module); ``clients``: client id to secret."""

    clients: dict[str, str]
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    url: str = ""

    def token_for(self, user: str, audience: str) -> str:
        """``user``'s bearer token for the gateway (``audience``), as the team's IdP signs them."""
        now = int(time.time())
        claims = {"iss": self.url, "aud": audience, "sub": user, "iat": now, "exp": now + 600}
        return jwt.encode(claims, KEY, algorithm="RS256", headers={"kid": "k1"})

    def app(self) -> Starlette:
        async def metadata(request: Request) -> Response:
            base = _base(request)
            return JSONResponse(
                {
                    "issuer": base,
                    "authorization_endpoint": base + "/authorize",
                    "token_endpoint": base + "/token",
                    "jwks_uri": base + "/jwks.json",
                    "response_types_supported": ["code"],
                    "code_challenge_methods_supported": ["S256"],
                }
            )

        async def authorize(request: Request) -> Response:
            query = request.query_params
            user = request.headers.get(USER_HEADER)
            if not user or query.get("client_id") not in self.clients or query.get("code_challenge_method") != "S256":
                return JSONResponse({"error": "invalid_request"}, 400)
            code = secrets.token_urlsafe(16)
            self.codes[code] = {"user": user, **query}
            back = {"code": code, "state": query["state"], "iss": _base(request)}
            return RedirectResponse(f"{query['redirect_uri']}?{urlencode(back)}", 302)

        async def token(request: Request) -> Response:
            form = await request.form()
            scheme, _, pair = request.headers.get("authorization", "").partition(" ")
            client_id, _, secret = base64.b64decode(pair).decode().partition(":") if scheme == "Basic" else ("", "", "")
            if self.clients.get(client_id) != secret:
                return JSONResponse({"error": "invalid_client"}, 401)
            asked = self.codes.pop(str(form.get("code")), None)
            if (
                asked is None
                or asked["client_id"] != client_id
                or asked["redirect_uri"] != form.get("redirect_uri")
                or asked["code_challenge"] != _challenge(str(form.get("code_verifier")))
            ):
                return JSONResponse({"error": "invalid_grant"}, 400)
            now = int(time.time())
            claims = {"iss": _base(request), "aud": client_id, "sub": asked["user"], "iat": now, "exp": now + 300}
            claims["nonce"] = asked.get("nonce")
            id_token = jwt.encode(claims, KEY, algorithm="RS256", headers={"kid": "k1"})
            return JSONResponse(
                {"access_token": "idp-" + secrets.token_urlsafe(16), "token_type": "Bearer", "id_token": id_token}
            )

        return Starlette(
            routes=[
                Route("/.well-known/openid-configuration", metadata),
                Route("/jwks.json", lambda request: JSONResponse(KEYS)),
                Route("/authorize", authorize),
                Route("/token", token, methods=["POST"]),
            ]
        )


@dataclass
class Vendor:
    """The vendor's authorization server (see the module). ``resource``: the vendor server's URL, set once it
    listens; ``lifetime``: what ``expires_in`` says of each access token (its JWT lives a minute more)."""

    resource: str = ""
    lifetime: int = 300
    key: Any = field(default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048))
    clients: dict[str, list[str]] = field(default_factory=dict)
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # refresh token -> its grant's id; grant id -> (user, the live refresh token), None once revoked
    refreshes: dict[str, str] = field(default_factory=dict)
    grants: dict[str, tuple[str, str] | None] = field(default_factory=dict)
    counts: dict[str, int] = field(
        default_factory=lambda: {"registrations": 0, "refreshes": 0, "codes": 0, "revocations": 0}
    )
    issued: list[str] = field(default_factory=list)  # every access and refresh token, in order
    declining: set[str] = field(default_factory=set)  # the users who decline at the consent
    refused: set[str] = field(default_factory=set)  # access tokens its MCP server no longer takes
    clients_of: dict[str, str] = field(default_factory=dict)  # grant id -> the client it was issued to
    # Given: each refresh waits (in the server's thread, at most 10 s) until the test sets it.
    holding: threading.Event | None = None
    # Given: it takes Client ID Metadata Documents, fetched over https with this trust.
    documents: ssl.SSLContext | None = None
    fetched: list[str] = field(default_factory=list)  # the documents' URLs, each as fetched
    misfits: list[str] = field(default_factory=list)  # why each document it refused was refused
    # Given: its metadata says it names itself in its answers to the browser (RFC 9207), and it does.
    iss: bool = False
    others: list[str] = field(default_factory=list)  # the URLs of its other servers, whose tokens it issues too
    audience: str | None = None  # given: what its tokens' aud names, whatever resource was asked for
    resource_of: dict[str, str] = field(default_factory=dict)  # grant id -> the resource it is for (RFC 8707)
    targets: list[tuple[str, str | None]] = field(default_factory=list)  # each request's kind and the resource named
    presented: dict[str, list[str]] = field(default_factory=dict)  # a server's URL -> every token sent to it
    padding: int = 0  # given: each token answer carries this many bytes more (a hostile server's long answer)

    async def document_of(self, client_id: str, redirect_uri: str) -> list[str] | None:
        """The redirect URIs of the client whose id is the https URL ``client_id``: its document fetched there
        (bounded, no redirect), checked as the draft's §4 says; ``None``, its reason in :attr:`misfits`, if not."""
        if self.documents is None or not client_id.startswith("https://"):
            return None
        self.fetched.append(client_id)
        async with httpx.AsyncClient(verify=self.documents, follow_redirects=False, timeout=5) as http:
            response = await http.get(client_id)
        document = response.json() if response.status_code == 200 and len(response.content) < 5120 else {}
        uris = document.get("redirect_uris")
        if document.get("client_id") != client_id:
            self.misfits.append("client_id")
        elif not isinstance(uris, list) or redirect_uri not in uris:
            self.misfits.append("redirect_uri")
        elif document.get("token_endpoint_auth_method") != "none" or "client_secret" in document:
            self.misfits.append("secret")
        else:
            return uris
        return None

    def keys(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": "vendor", "use": "sig", "alg": "RS256"}]}

    def _issued(self, base: str, grant: str) -> dict[str, Any]:
        record = self.grants[grant]
        assert record is not None
        user = record[0]
        now = int(time.time())
        audience = self.audience or self.resource_of.get(grant, self.resource)
        claims = {"iss": base, "aud": audience, "sub": user, "iat": now, "exp": now + self.lifetime + 60}
        claims["jti"] = secrets.token_urlsafe(8)
        claims["gid"] = grant  # the grant it is of: a revoked grant's tokens are refused
        access = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "vendor"})
        refresh = "vr-" + secrets.token_urlsafe(24)
        self.issued += [access, refresh]
        self.refreshes[refresh] = grant
        self.grants[grant] = (user, refresh)
        issued = {"access_token": access, "token_type": "Bearer", "expires_in": self.lifetime, "refresh_token": refresh}
        return issued | ({"padding": "x" * self.padding} if self.padding else {})

    def app(self) -> Starlette:
        async def metadata(request: Request) -> Response:
            base = _base(request)
            return JSONResponse(
                {
                    "issuer": base,
                    "authorization_endpoint": base + "/authorize",
                    "token_endpoint": base + "/token",
                    "registration_endpoint": base + "/register",
                    "revocation_endpoint": base + "/revoke",
                    "jwks_uri": base + "/jwks.json",
                    "code_challenge_methods_supported": ["S256"],
                    "grant_types_supported": ["authorization_code", "refresh_token"],
                    "token_endpoint_auth_methods_supported": ["none"],
                    **({} if self.documents is None else {"client_id_metadata_document_supported": True}),
                    **({"authorization_response_iss_parameter_supported": True} if self.iss else {}),
                }
            )

        async def register(request: Request) -> Response:
            asked = await request.json()
            uris = asked.get("redirect_uris")
            if not isinstance(uris, list) or not uris:
                return JSONResponse({"error": "invalid_redirect_uri"}, 400)
            client_id = "vc-" + secrets.token_urlsafe(8)
            self.clients[client_id] = uris
            self.counts["registrations"] += 1
            return JSONResponse({**asked, "client_id": client_id, "token_endpoint_auth_method": "none"}, 201)

        async def authorize(request: Request) -> Response:
            query = request.query_params
            user = request.headers.get(USER_HEADER)
            uris = self.clients.get(query.get("client_id", ""))
            if uris is None:
                uris = await self.document_of(query.get("client_id", ""), query.get("redirect_uri", ""))
                if uris is not None:
                    self.clients[query["client_id"]] = uris  # known for its tokens and revocations from now on
            if uris is None or query.get("redirect_uri") not in uris:
                return JSONResponse({"error": "invalid_client"}, 400)  # never redirected to an unknown URI
            named = {"iss": _base(request)} if self.iss else {}  # in an error too (RFC 9207 §2)
            self.targets.append(("authorize", query.get("resource")))
            if user in self.declining:
                back = {"error": "access_denied", "state": query.get("state", ""), **named}
                return RedirectResponse(f"{query['redirect_uri']}?{urlencode(back)}", 302)
            if (
                not user
                or query.get("code_challenge_method") != "S256"
                or query.get("resource") not in (self.resource, *self.others)
            ):
                back = {"error": "invalid_request", "state": query.get("state", ""), **named}
                return RedirectResponse(f"{query['redirect_uri']}?{urlencode(back)}", 302)
            code = secrets.token_urlsafe(16)
            self.codes[code] = {"user": user, **query}
            back = {"code": code, "state": query["state"], **named}
            return RedirectResponse(f"{query['redirect_uri']}?{urlencode(back)}", 302)

        async def token(request: Request) -> Response:
            form = await request.form()
            base = _base(request)
            self.targets.append((str(form.get("grant_type")), form.get("resource")))  # type: ignore[arg-type]
            if form.get("grant_type") == "authorization_code":
                asked = self.codes.pop(str(form.get("code")), None)
                if (
                    asked is None
                    or asked["client_id"] != form.get("client_id")
                    or asked["redirect_uri"] != form.get("redirect_uri")
                    or asked["code_challenge"] != _challenge(str(form.get("code_verifier")))
                    or form.get("resource") != asked["resource"]
                ):
                    return JSONResponse({"error": "invalid_grant"}, 400)
                grant = secrets.token_urlsafe(8)
                self.grants[grant] = (asked["user"], "")
                self.resource_of[grant] = asked["resource"]
                self.clients_of[grant] = asked["client_id"]
                self.counts["codes"] += 1
                return JSONResponse(self._issued(base, grant))
            if form.get("grant_type") == "refresh_token":
                if (holding := self.holding) is not None:
                    await anyio.to_thread.run_sync(holding.wait, 10)
                refresh = str(form.get("refresh_token"))
                grant = self.refreshes.get(refresh, "")
                record = self.grants.get(grant)
                self.counts["refreshes"] += 1
                if record is None or self.clients_of.get(grant) != form.get("client_id"):  # RFC 6749 §6: its client
                    return JSONResponse({"error": "invalid_grant"}, 400)
                if record[1] != refresh:  # an old one, seen again: the grant is revoked
                    self.grants[grant] = None
                    return JSONResponse({"error": "invalid_grant", "error_description": "reused"}, 400)
                if form.get("resource") != self.resource_of[grant]:  # RFC 8707 §2.2: the grant's own, alone
                    return JSONResponse({"error": "invalid_target"}, 400)
                return JSONResponse(self._issued(base, grant))
            return JSONResponse({"error": "unsupported_grant_type"}, 400)

        async def revoke(request: Request) -> Response:
            """RFC 7009: a refresh token revokes its whole grant; 200 whatever the token."""
            form = await request.form()
            grant = self.refreshes.get(str(form.get("token")))
            if grant is not None and form.get("client_id") in self.clients:
                self.grants[grant] = None
                self.counts["revocations"] += 1
            return Response(status_code=200)

        return Starlette(
            routes=[
                Route("/.well-known/oauth-authorization-server", metadata),
                Route("/jwks.json", lambda request: JSONResponse(self.keys())),
                Route("/register", register, methods=["POST"]),
                Route("/authorize", authorize),
                Route("/token", token, methods=["POST"]),
                Route("/revoke", revoke, methods=["POST"]),
            ]
        )


class _Bearer:
    """The vendor server's bearer check: a JWT of the vendor's key for its own URL, else 401 naming its metadata."""

    def __init__(self, app: ASGIApp, vendor: Vendor, issuer: str, resource: str | None) -> None:
        self.app, self.vendor, self.issuer, self.resource = app, vendor, issuer, resource

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/.well-known/"):
            return await self.app(scope, receive, send)
        request = Request(scope)
        token = request.headers.get("authorization", "").partition(" ")[2]
        key = jwt.PyJWK(self.vendor.keys()["keys"][0])
        resource = self.resource or self.vendor.resource
        self.vendor.presented.setdefault(resource, []).append(token)
        try:
            claims = jwt.decode(token, key, algorithms=["RS256"], audience=resource, issuer=self.issuer)
            if self.vendor.grants.get(claims["gid"]) is None or token in self.vendor.refused:
                raise jwt.InvalidTokenError("revoked")
        except jwt.PyJWTError:
            metadata = _base(request) + "/.well-known/oauth-protected-resource/mcp"
            challenge = f'Bearer error="invalid_token", resource_metadata="{metadata}"'
            return await JSONResponse({"error": "invalid_token"}, 401, {"WWW-Authenticate": challenge})(
                scope, receive, send
            )
        await self.app(scope, receive, send)


def vendor_server(vendor: Vendor, issuer: str, resource: str | None = None) -> ASGIApp:
    """The vendor's MCP server (see the module), its tokens issued by ``issuer``; at ``resource`` (one of its
    ``others``), else at its ``resource``."""
    server = MCPServer("vendor")

    @server.tool()
    async def whoami(ctx: Context) -> str:
        """The subject of the token this call came with, and the token."""
        request = ctx.request_context.request
        token = "" if request is None else request.headers.get("authorization", "").partition(" ")[2]
        return json.dumps({"sub": jwt.decode(token, options={"verify_signature": False})["sub"], "token": token})

    mcp = server.streamable_http_app(stateless_http=True, json_response=True)

    async def metadata(request: Request) -> Response:
        return JSONResponse(
            {"resource": resource or vendor.resource, "authorization_servers": [issuer], "scopes_supported": ["mcp"]}
        )

    routes = [Route("/.well-known/oauth-protected-resource/mcp", metadata), Mount("/", mcp)]
    return _Bearer(Starlette(routes=routes, lifespan=mcp.router.lifespan_context), vendor, issuer, resource)
