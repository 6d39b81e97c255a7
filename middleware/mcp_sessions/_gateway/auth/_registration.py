"""What a sign-in (``_oauth.SignIn``) signs in to, and its registration there: the authorization server, found, and
the gateway's client at it.

**What it signs in to** (:class:`AtUpstream`, :class:`AtIssuer`, :class:`AtLogin`): the server an upstream's
protected resource metadata names, a server named, or the team's IdP itself; each says what its grants' records and
the store's index call them (``_grants.UserGrants``).

**Finding the server**, as MCP's authorization spec has a client find it: the upstream's 401 names its protected
resource metadata (RFC 9728) in ``WWW-Authenticate``'s ``resource_metadata`` (else the well-known URL on the
upstream's path, then at its root; one on another origin than the upstream's is not read); the metadata names the
resource (the URL it was derived from: else refused) and its authorization servers, whose first is read by RFC 8414
(then OpenID Connect Discovery), its ``issuer`` the one asked about, and PKCE's ``S256`` among its methods (MCP: else
refused): ``_discovery``'s readers, the token exchange's too. Read once, as the first request needs it; a failure
is the client's 502 and the next request tries again.

**The gateway's client there**, in the order MCP's authorization spec (2025-11-25, "Client Registration") has a
client choose: the one the operator gives (``client``, a ``_client.ClientAuth``; or ``client_id`` alone, a public
client); else, where the gateway's own URL (its callback's) is https and the server's metadata says
``client_id_metadata_document_supported`` and ``authorization_response_iss_parameter_supported``, the URL of its
Client ID Metadata Document (draft-ietf-oauth-client-id-metadata-document), which it serves at
``_sign_ins.CLIENT_PATH`` (the server fetches it as it needs it: nothing to register, nothing kept); else one it
registers by RFC 7591 once per server (kept in the store, given ``kept``, for every replica and restart). Either way
a public client (``token_endpoint_auth_method`` ``none``) with one redirect URI: the server's own
(``/oauth/callback/<digest of its issuer>``, RFC 9700 §4.4.2), but for the document, which is one for every server
and names the gateway's callback, and so goes only to a server whose ``iss`` the callback requires. The document is
built once from the callback, its ``client_id`` its own URL, and holds no secret: whoever fetches it is a stranger.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Protocol

import anyio

from ._answer import read_answer
from ._client import ClientAuth, ClientAuthMethod
from ._discovery import endpoint, resource_metadata, server_metadata
from ._grants import server_error, stored
from ._sign_ins import CALLBACK_PATH, CLIENT_PATH

if TYPE_CHECKING:
    import httpx2

    from ._kept import KeptGrants

logger = logging.getLogger("mcp_sessions.gateway")

_AS: Final = "an authorization server"
"""How a refusal about an authorization server's metadata names it."""
# A challenge's quoted parameters, each tried only where a name begins (not at every letter of one), so that a
# hostile header of one long word costs one pass, not one a letter.
_CHALLENGE_PARAM: Final = re.compile(r'(?<![A-Za-z_])([A-Za-z_]+)="([^"]*)"')


@dataclass(frozen=True)
class AtUpstream:
    """What ``_oauth.UpstreamGrants`` signs in to: the authorization server an upstream MCP server's protected
    resource metadata names (RFC 9728), ``issuer`` where the operator names it; ``scope`` asked for where given."""

    url: str
    issuer: str | None
    scope: str | None

    def record(self, who: str) -> str:
        """For the upstream's URL, the resource its tokens are for (RFC 8707: two servers at one authorization
        server are two grants)."""
        return f"{who}\0{self.url}"

    @property
    def listed_as(self) -> str:
        # its configuration's, so that the operator's listing needs no server found (the upstream's may be down)
        return self.url


@dataclass(frozen=True)
class AtIssuer:
    """What ``_oauth.IssuerGrants`` signs in to: the authorization server ``issuer``, for ``resource`` and ``scope``
    where given."""

    issuer: str
    resource: str
    scope: str | None

    def record(self, who: str) -> str:
        return f"{who}\0{self.resource}"  # the resource too: one server's grants for two are two

    @property
    def listed_as(self) -> str:
        return f"{self.issuer}\0{self.resource}"  # one server's grants for two resources are two sign-ins'


@dataclass(frozen=True)
class AtLogin:
    """What ``_oauth.IdTokens`` signs in to: the team's IdP ``issuer`` itself, whose ID token is what is kept."""

    issuer: str
    scope: None = None

    def record(self, who: str) -> str:
        return "id_token\0" + who  # never a grant's record, even at an issuer that is also a vendor's

    @property
    def listed_as(self) -> str:
        return "id_token\0" + self.issuer  # never a grant's at the IdP, were it a vendor's too


SignInTo = AtUpstream | AtIssuer | AtLogin
"""What a sign-in signs in to."""


class IdentityProvider(Protocol):
    """The team's IdP (``_idp.IdP``), the server an :class:`AtLogin` signs in to: its issuer and metadata."""

    @property
    def issuer(self) -> str: ...

    async def metadata(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Server:
    """The authorization server signed in to, as found: its endpoints, and the resource and scope asked for."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None
    revocation_endpoint: str | None
    resource: str
    scope: str | None
    metadata_documents: bool = False
    """Whether it takes a Client ID Metadata Document's URL for a client id: its metadata's
    ``client_id_metadata_document_supported``."""
    sends_iss: bool = False
    """Whether its answers to the browser name it (RFC 9207): its metadata's
    ``authorization_response_iss_parameter_supported``; a callback without ``iss`` is then refused."""


class Registration:
    """A sign-in's registration at what it signs in to (``to``; see the module): the server found (:meth:`server`,
    once; again after a failure), the gateway's client at a server (:meth:`client`), and its redirect URI there
    (:meth:`redirect_uri`). ``callback`` is the gateway's ``/oauth/callback`` as browsers reach it, ``idp`` the
    team's IdP (``_idp.IdP``: the server of an :class:`AtLogin`), ``client`` or ``client_id`` the
    gateway's client given (neither: a metadata document's URL, or registered), ``kept`` where a registered client
    outlives the process; ``http`` (``_token.oauth_client``) asks each server, within ``timeout`` seconds."""

    def __init__(
        self,
        to: SignInTo,
        *,
        callback: str,
        idp: IdentityProvider,
        client: ClientAuth | None,
        client_id: str | None,
        kept: KeptGrants | None,
        http: Any,
        timeout: float,
    ) -> None:
        self._to = to
        self._callback = callback
        self._idp = idp
        self._given = client
        self._client_id = client_id
        self._kept = kept
        self._http = http
        self._timeout = timeout
        # the Client ID Metadata Document's URL (its client id) and the document, where the gateway's URL is https
        secure = callback.startswith("https:")
        self.document_url = callback.removesuffix(CALLBACK_PATH) + CLIENT_PATH if secure else None
        self.document = None if self.document_url is None else _metadata_document(self.document_url, callback)
        self._server: Server | None = None
        self._registered: dict[str, ClientAuth | str] = {}
        self._finding = anyio.Lock()

    @property
    def known(self) -> Server | None:
        """The server, if it was found (no server asked)."""
        return self._server

    def redirect_uri(self, issuer: str) -> str:
        """The redirect URI of the authorization server ``issuer`` alone (RFC 9700 §4.4.2): the gateway's callback,
        a digest of the issuer after it, the same in every replica and restart."""
        return f"{self._callback}/{hashlib.sha256(issuer.rstrip('/').encode()).hexdigest()[:32]}"

    async def server(self) -> Server:
        """The server signed in to, found as the module says (once; again after a failure)."""
        async with self._finding:
            if self._server is None:
                to = self._to
                if isinstance(to, AtLogin):
                    self._server = await self._idp_server()
                elif isinstance(to, AtIssuer):
                    self._server = await self._named_server(to)
                else:
                    self._server = await self._discovered(to)
                if not isinstance(to, AtLogin):
                    logger.info(
                        "mcp-sessions gateway: the authorization server %s, its redirect URI %s",
                        self._server.issuer,
                        self.redirect_uri(self._server.issuer),
                    )
        return self._server

    async def _discovered(self, to: AtUpstream) -> Server:
        """The authorization server the upstream's protected resource metadata names (see the module)."""
        probe = self._http.build_request(
            "POST",
            to.url,
            json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
            headers={"accept": "application/json, text/event-stream"},
        )
        status, _, challenge = await self._read(probe)
        given = _CHALLENGE_PARAM.findall(challenge) if status == 401 else []
        said = {name.lower(): value for name, value in given}
        resource, issuer, listed = await resource_metadata(
            self._http,
            to.url,
            failed=server_error,
            seconds=self._timeout,
            named=said.get("resource_metadata"),
            issuer=to.issuer,
            issuer_flag="--oauth-issuer",
        )
        found = await metadata(self._http, issuer, seconds=self._timeout)
        if "S256" not in (found.get("code_challenge_methods_supported") or []):
            raise server_error("the upstream's authorization server does not say it takes PKCE's S256")
        return _server_of(issuer, found, resource, to.scope or said.get("scope") or listed)

    async def _named_server(self, to: AtIssuer) -> Server:
        """The authorization server named (RFC 8414, then OpenID Connect Discovery)."""
        found = await metadata(self._http, to.issuer, seconds=self._timeout)
        if "S256" not in (found.get("code_challenge_methods_supported") or []):
            raise server_error(f"{to.issuer} does not say it takes PKCE's S256")
        return _server_of(to.issuer, found, to.resource, to.scope)

    async def _idp_server(self) -> Server:
        """The IdP, as the server whose token (an ID token) is kept; its metadata read once."""
        found = _server_of(self._idp.issuer, await self._idp.metadata(), "", None)
        return replace(found, registration_endpoint=None)

    async def client(self, server: Server) -> ClientAuth | str:
        """The gateway's client at ``server``: the one given, else its Client ID Metadata Document's URL where
        ``server`` takes one and the gateway's URL is https, else the one registered there (RFC 7591), once."""
        if self._given is not None:
            return self._given
        if self._client_id is not None:
            return self._client_id
        if self.document_url is not None and server.metadata_documents and server.sends_iss:
            return self.document_url
        async with self._finding:
            known = self._registered.get(server.issuer)
            if known is not None:
                return known
            redirect = self.redirect_uri(server.issuer)
            registered_at = f"{server.issuer}\0{redirect}"
            kept = None if self._kept is None else await stored(self._kept.client(registered_at))
            if kept is not None:  # registered by another replica, or before a restart
                known = self._registered[server.issuer] = _client(server.issuer, *kept)
                return known
            if server.registration_endpoint is None:
                raise server_error("the upstream's authorization server takes no registration: give --oauth-client-id")
            request = self._http.build_request("POST", server.registration_endpoint, json=_client_metadata(redirect))
            status, answer, _ = await self._read(request)
            client_id = answer.get("client_id") if isinstance(answer, dict) else None
            if status not in (200, 201) or not isinstance(client_id, str) or not client_id:
                logger.warning("mcp-sessions gateway: %s answered %d to the registration", server.issuer, status)
                raise server_error("the upstream's authorization server refused the gateway's registration")
            secret = answer.get("client_secret")
            method = answer.get("token_endpoint_auth_method")
            secret = secret if isinstance(secret, str) and secret else None
            method = method if isinstance(method, str) else None
            registered = _client(server.issuer, client_id, secret, method)
            if self._kept is not None:
                await stored(self._kept.keep_client(registered_at, client_id, secret, method))
            self._registered[server.issuer] = registered
            logger.info("mcp-sessions gateway: registered at %s", server.issuer)
            return registered

    async def _read(self, request: httpx2.Request) -> tuple[int, Any, str]:
        """The status, JSON (``None`` if not) and ``WWW-Authenticate`` of the answer to ``request``
        (:func:`read_answer`): a failure to reach the server is a 502 or 504."""
        response, answer = await read_answer(self._http, request, self._timeout, "a server", server_error)
        return response.status_code, answer, response.headers.get("www-authenticate", "")[:4096]


async def metadata(http: Any, issuer: str, *, seconds: float, oidc_first: bool = False) -> dict[str, Any]:
    """The metadata of the authorization server ``issuer`` (``_discovery.server_metadata``), RFC 8414's first (or
    OpenID Connect Discovery's, ``oidc_first``), asked by ``http`` within ``seconds``."""
    return await server_metadata(http, issuer, server=_AS, failed=server_error, seconds=seconds, oidc_first=oidc_first)


def url_in(metadata: Mapping[str, Any], name: str) -> str:
    """The http(s) URL an authorization server's metadata gives as ``name`` (``_discovery.endpoint``)."""
    return endpoint(metadata, name, _AS, server_error)


def _client(issuer: str, client_id: str, secret: str | None, method: str | None) -> ClientAuth | str:
    """The client a registration at ``issuer`` gave: public (its id alone), or confidential by its secret (for that
    server alone) and the method it was given (``client_secret_basic`` unless ``client_secret_post``)."""
    if secret is None:
        return client_id
    chosen: ClientAuthMethod = "client_secret_post" if method == "client_secret_post" else "client_secret_basic"
    return ClientAuth(chosen, client_id, secret=secret, servers=(issuer,))


def _server_of(issuer: str, metadata: Mapping[str, Any], resource: str, scope: str | None) -> Server:
    """The authorization server ``issuer`` as its ``metadata`` describes it, for ``resource`` and ``scope``."""
    registration = metadata.get("registration_endpoint")
    revocation = metadata.get("revocation_endpoint")
    return Server(
        issuer=issuer,
        authorization_endpoint=url_in(metadata, "authorization_endpoint"),
        token_endpoint=url_in(metadata, "token_endpoint"),
        registration_endpoint=registration if isinstance(registration, str) else None,
        revocation_endpoint=revocation if isinstance(revocation, str) else None,
        resource=resource,
        scope=scope,
        metadata_documents=metadata.get("client_id_metadata_document_supported") is True,
        sends_iss=metadata.get("authorization_response_iss_parameter_supported") is True,
    )


def _client_metadata(redirect_uri: str) -> dict[str, object]:
    """The gateway's client as it describes itself (RFC 7591 §2): a public client whose one redirect URI is
    ``redirect_uri``; no secret, no key."""
    return {
        "client_name": "mcp-sessions gateway",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }


def _metadata_document(url: str, callback: str) -> bytes:
    """The gateway's Client ID Metadata Document at ``url``: its ``client_id`` that URL (the draft's §3: the server
    compares them as strings), and the client as it registers itself, its one redirect URI ``callback``."""
    return json.dumps({"client_id": url} | _client_metadata(callback)).encode()
