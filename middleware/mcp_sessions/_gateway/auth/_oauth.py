"""Each user's own grant at the upstream's authorization server (``--upstream-token oauth``).

A vendor's MCP server (an ``--upstream``) sits behind the vendor's own authorization server, which knows neither the
team's IdP nor RFC 8693: the gateway is that server's OAuth client, and each user grants it access once, as herself.

This module holds the flow (:class:`SignIn`: authorize, the callback, the code redeemed, a refresh, a revocation) and
the kinds it is configured as; it asks its parts for the rest, each a module of its own:

- ``_registration``: what it signs in to, **the server found** (RFC 9728, then RFC 8414, as MCP's authorization
  spec has a client find it) and **the gateway's client there** (the one given, a Client ID Metadata Document's URL,
  or one registered by RFC 7591), each server's redirect URI its own (RFC 9700 §4.4.2);
- ``_idp``: the team's IdP, its metadata and keys, an ID token verified;
- ``_pending``: the sign-in URLs and legs under way, by their ``state``, each with its deadline;
- ``_grants``: the users' grants and their store, one renewal of a grant at a time across replicas;
- ``_sign_ins``: the routes and pages a browser is answered with; ``_token``: the one token request.

**Signing in.** A request of a user with no grant yet gets a sign-in URL of the gateway's own
(``/oauth/authorize/<one-time id>``), as URL-mode elicitation (SEP-1036) carries it in the request's era
(:class:`SignInRequired`). The browser that opens it is not the client's bearer token, so the gateway first has
the team's IdP say who she is: an OpenID Connect login with the gateway as its own client (:class:`Login`,
authorization code with PKCE, ``nonce``), whose ID token (verified by PyJWT with the IdP's keys, for the
gateway's client id) must name the principal that asked (its ``claim``, ``sub`` by default). Only then does the
browser go to the upstream's authorization server: the authorization code flow with PKCE (``S256``), ``state``,
and ``resource`` (RFC 8707), to that server's own callback, where the code is swapped for her tokens (the login
comes back to ``/oauth/callback``, registered at the IdP). Each leg's ``state`` is a one-time random key to what
the gateway holds of it (the user, the sign-in, the server, PKCE's verifier, the redirect URI), taken as the
callback reads it (a replay, a tampered or unknown ``state`` finds nothing); a code that comes back at another
redirect URI than its leg's is redeemed nowhere (the mix-up, RFC 9700 §4.4.2: another server sending the browser
on to this one's with its own ``state``). Each is kept :data:`SIGN_IN_WITHIN` seconds, and bound to
the browser that opened the URL by a cookie of its own (RFC 9700 §4.7.1: a callback in another browser is
refused); an ``iss`` parameter (RFC 9207) must be the leg's server's, and is required where that server's
metadata says it sends one (``authorization_response_iss_parameter_supported``, RFC 9207 §2.4). A URL opened by
another user signs her in at the IdP as herself, and grants nothing. Her retry then reaches the upstream with her
token.

**Her tokens** are kept per user (her token's issuer and principal), authorization server and resource (RFC 8707:
the upstream's URL; a token whose ``aud`` is readable and names another resource is refused), in memory and,
given ``kept`` (``_kept.KeptGrants``), sealed in the gateway's store, so that a restart asks no one again; never
in a log, an error or a page: the access token until :data:`RENEW_BEFORE` seconds before it expires (half its life
for a short one), then refreshed, one refresh in flight per user and server (servers rotate refresh tokens and
revoke a grant whose old one comes back: a refresh takes a lease on the grant in the store first, then reads it
there, where another replica may have rotated it). Where grants are kept, each use reads the grant's record (one
read and one AES-GCM open a call), so that a grant revoked or refreshed on another replica is seen before its token
goes out again; a refresh refused (``invalid_grant``) drops the grant and asks her to sign in again. A 401 of the
upstream's to her access token marks it for a refresh (:meth:`UpstreamGrants.refused`), and the proxy sends a
request it holds whole once more (``http._proxy``).

The same sign-in, kept and refreshed the same way, serves two more things: :class:`IdTokens`, its login leg alone,
keeps each user's ID token of the gateway's own client as an ID-JAG's subject (``--id-jag-subject id_token``), and
:class:`IssuerGrants` a grant at a server named, not found, for a stdio process's ``oauth:`` variable; a gateway's
several sign-ins share one pair of routes (``_sign_ins.SignIns``, which also answers the browser's pages). Each is
a :class:`SignIn` of what it signs in to (``_registration.AtUpstream``, ``AtIssuer``, ``AtLogin``); the three
kinds are subclasses that only name their configuration, as Starlette's ``HTMLResponse`` and ``RedirectResponse``
are of its ``Response``: each a typed constructor of the keywords its flag gives, nothing overridden.

Every server here is a stranger: each answer read to at most :data:`._answer.MAX_ANSWER` bytes within :data:`TIMEOUT`
seconds, no redirect followed, no cookie kept, no proxy variable read; an issued token goes into a header only
when it is a bearer token's characters (RFC 6750 §2.1).
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import jwt
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from ._answer import ERROR_CODE, SingleFlight, issued, now, refusal
from ._client import ClientAuth
from ._exchange import ExchangeRefused, UpstreamToken
from ._grants import MAX_GRANTS, Grant, GrantFailed, GrantKey, User, UserGrants, server_error, user_of
from ._idp import IdP, Login
from ._pending import SIGN_IN_WITHIN, Leg, Pending
from ._registration import AtIssuer, AtLogin, AtUpstream, Registration, Server, SignInTo, url_in
from ._sign_ins import (
    AUTHORIZE_PATH,
    CALLBACK_PATH,
    CLIENT_PATH,
    COOKIE,
    SignInFailed,
    SignInRequired,
    SignIns,
    page,
    redirect,
)

if TYPE_CHECKING:
    from ._kept import KeptGrants

__all__ = ["CLIENT_PATH", "IdTokens", "IssuerGrants", "Login", "UpstreamGrants"]

logger = logging.getLogger("mcp_sessions.gateway")

TIMEOUT: Final = 10.0
"""The longest wait for a server's whole answer (metadata, registration, token endpoint, keys)."""
RENEW_BEFORE: Final = 30.0
"""An access token is refreshed this long before it expires (half its life for one shorter than a minute)."""


class SignIn(UpstreamToken):
    """One sign-in (see the module), of one of the kinds below: ``to`` what it signs in to, ``callback`` the
    gateway's ``/oauth/callback`` as browsers reach it, ``login`` the team's IdP, ``client`` or ``client_id`` the
    gateway's client at the server (neither: registered), ``kept`` where the grants outlive the process (else in its
    memory alone), ``clock`` what its grants' renewals and its sign-ins' deadlines are counted on (``_answer.now``;
    a test's moves time). ``_sign_ins.SignIns`` serves it (:attr:`signing_in`): a sign-in URL opened
    (:meth:`authorize`), a browser sent back (:meth:`called_back`), a user's grants listed and revoked
    (:meth:`grants_of`, :meth:`revoke`, :meth:`every_grant`), its HTTP client closed (:meth:`aclose`). It asks
    its parts (see the module), each built here from its arguments: the server and its client of a
    ``_registration.Registration``, the IdP of an ``_idp.IdP``, what is under way of a ``_pending.Pending``, the
    grants of a ``_grants.UserGrants``; one HTTP client (``_token.oauth_client``) serves them all."""

    def __init__(
        self,
        to: SignInTo,
        *,
        callback: str,
        login: Login,
        client: ClientAuth | None = None,
        client_id: str | None = None,
        kept: KeptGrants | None = None,
        timeout: float = TIMEOUT,
        clock: Callable[[], float] = now,
    ) -> None:
        super().__init__("oauth")
        for url in (callback, login.issuer, to.url if isinstance(to, AtUpstream) else to.issuer):
            if urlsplit(url).scheme not in ("http", "https"):
                raise ValueError(f"{url!r} is not an http(s) URL")
        if urlsplit(callback).path != CALLBACK_PATH:
            raise ValueError(f"the gateway's sign-in callback is its {CALLBACK_PATH}, not {callback!r}")
        if client is not None and client_id is not None:
            raise ValueError("the gateway's client at the upstream's server is given once: its id, or its ClientAuth")
        from ._token import oauth_client

        self._to = to
        # the login leg alone: what is kept is her ID token of the gateway's own client at the IdP
        self._login_only = isinstance(to, AtLogin)
        # what the login leg asks the IdP for: who she is, nothing more (the grant is the server's), and for an
        # ID token kept, the IdP's refresh token
        self._login_scope = "openid offline_access" if self._login_only else "openid"
        self._callback = callback
        self._secure = callback.startswith("https:")
        self._timeout = timeout
        self._clock = clock
        self._grants = UserGrants(kept, to.record, to.listed_as, clock=clock, timeout=timeout)
        self._refreshing: SingleFlight[GrantKey, ExchangeRefused] = SingleFlight(ExchangeRefused, MAX_GRANTS)
        self._pending = Pending(clock)
        self._http = oauth_client(timeout)
        self._idp = IdP(login, http=self._http, timeout=timeout)
        self._registration = Registration(
            to,
            callback=callback,
            idp=self._idp,
            client=client,
            client_id=client_id,
            kept=kept,
            http=self._http,
            timeout=timeout,
        )
        self.signing_in = SignIns([self])

    @property
    def document(self) -> bytes | None:
        """The gateway's Client ID Metadata Document, where its URL is https (``_registration``)."""
        return self._registration.document

    @property
    def document_url(self) -> str | None:
        """Where the gateway serves its Client ID Metadata Document (its client id), where it has one."""
        return self._registration.document_url

    # -- the upstream's Authorization ---------------------------------------------------------------------------

    async def authorization(self, scope: Scope) -> bytes | None:
        """The user's access token at the upstream's server, as ``Authorization``; see :meth:`token_of`."""
        return b"Bearer " + (await self.token_of(scope)).encode("ascii")

    async def token_of(self, scope: Scope) -> str:
        """The user's token kept here, refreshed if it is due; :class:`SignInRequired` when she has none, another
        :class:`ExchangeRefused` when a server fails."""
        user = user_of(scope)
        if user is None:
            raise GrantFailed(401, "invalid_request", "the request names no user whose grant the upstream takes")
        server = await self._registration.server()
        key = (user, server.issuer)
        grant = await self._grants.current(key)
        if grant is not None and self._clock() < grant.renew_at:
            return grant.access
        if grant is None or grant.refresh is None:
            raise SignInRequired(self._sign_in_url(user), urlsplit(server.issuer).netloc)
        return await self._refreshed(key, server)

    def held(self, scope: Scope) -> str | None:
        """The token kept for the user of ``scope``, if any (not refreshed: what the last request was given)."""
        user = user_of(scope)
        grant = (
            None
            if user is None or (server := self._registration.known) is None
            else self._grants.held((user, server.issuer))
        )
        return None if grant is None else grant.access

    def refused(self, scope: Scope) -> None:
        """The upstream answered 401 to the user's access token: the next request refreshes it (or signs her in)."""
        user = user_of(scope)
        server = self._registration.known
        if user is not None and server is not None:
            self._grants.distrust((user, server.issuer))

    def holds(self, *, sign_in: str = "", state: str = "") -> bool:
        """Whether this made the sign-in URL whose id is ``sign_in``, or a leg under way whose ``state`` is
        ``state`` (:class:`SignIns` routes a browser by it)."""
        return self._pending.holds(sign_in=sign_in, state=state)

    def _sign_in_url(self, user: User) -> str:
        """The user's sign-in URL: the one she was given while it waits, else a new one."""
        one_time = self._pending.sign_in(user)
        origin = self._callback.removesuffix(CALLBACK_PATH)
        return f"{origin}{AUTHORIZE_PATH}{one_time}"

    async def _refreshed(self, key: GrantKey, server: Server) -> str:
        """A new access token from the grant's refresh token, where it is still due: one refresh per user and server
        at a time, the others waiting for its outcome, and one across replicas where grants are kept
        (``_grants.UserGrants.renewed``)."""

        async def once() -> str:
            grant = await self._grants.renewed(key, lambda grant: self._refresh(key, server, grant))
            if grant is None:
                raise SignInRequired(self._sign_in_url(key[0]), urlsplit(server.issuer).netloc)
            return grant.access

        return await self._refreshing.run(key, once, lambda failed: self._again(key[0], failed))

    def _again(self, user: User, failed: ExchangeRefused) -> ExchangeRefused:
        """What a request of ``user`` that waited for another's refresh of her grant raises as that one failed."""
        if isinstance(failed, SignInRequired):
            return SignInRequired(self._sign_in_url(user), failed.server)
        return GrantFailed(failed.status, failed.error, failed.description)

    async def _granted_in(self, answer: dict[str, Any], refresh: str | None, key: GrantKey, server: Server) -> Grant:
        """The grant a refresh's answer gives (``refresh`` kept when it rotates none in). For an ID token kept, the
        answer's new ID token, verified as the login's and of the same user; none, or another's, asks her to sign
        in again (OpenID Connect Core §12.2 lets a refresh answer without one)."""
        if not self._login_only:
            return _granted(answer, refresh, server.resource, self._clock())
        id_token = answer.get("id_token")
        claims: dict[str, Any] = {}
        if isinstance(id_token, str):
            try:
                claims = await self._idp.verified(id_token)
            except SignInFailed:
                raise server_error("the IdP's refreshed ID token did not verify") from None
        if not isinstance(id_token, str) or claims.get(self._idp.login.claim) != key[0][1]:
            logger.warning("mcp-sessions gateway: the IdP's refresh gave no ID token of the user: asked again")
            await self._grants.drop(key)
            raise SignInRequired(self._sign_in_url(key[0]), urlsplit(self._idp.login.issuer).netloc)
        rotated = answer.get("refresh_token")
        rotated = rotated if isinstance(rotated, str) and rotated else refresh
        return _id_token_grant(id_token, claims, rotated, self._clock())

    async def _saved(self, key: GrantKey, grant: Grant) -> None:
        """``grant`` kept (here, and in the store where there is one, entered in its index as :meth:`_shown`
        says it)."""
        await self._grants.put(key, grant, self._shown(key, grant))

    def _shown(self, key: GrantKey, grant: Grant) -> dict[str, object]:
        """What the operator's view shows of a user's grant: who (her token's issuer and principal), the server,
        the resource, the scope, when granted, when its access token expires; never a token."""
        (issuer, principal), server = key
        server_found = self._registration.known
        resource = "" if server_found is None else server_found.resource
        shown: dict[str, object] = {"issuer": issuer, "principal": principal, "authorization_server": server}
        return shown | {
            "resource": resource,
            "scope": grant.scope,
            "granted_at": grant.granted_at,
            "expires_at": grant.expires_at,
        }

    # -- each user's own view of her grants ---------------------------------------------------------------------

    async def grants_of(self, user: User) -> list[dict[str, object]]:
        """The user's grant here, as her view at ``/oauth/grants`` shows it (the server, the resource, the scope,
        when granted, when its access token expires, whether it refreshes, when; never a token)."""
        server = await self._registration.server()
        key = (user, server.issuer)
        grant = await self._grants.current(key)
        if grant is None:
            return []
        left = None if grant.renew_at == math.inf else max(0, round(grant.renew_at - self._clock()))
        shown = {k: v for k, v in self._shown(key, grant).items() if k not in ("issuer", "principal")}
        return [shown | {"refreshes": bool(grant.refresh), "renewed_in": left}]

    async def every_grant(self) -> list[dict[str, object]]:
        """Every user's grant here, as :meth:`_shown` says each, with no server asked (``_grants.UserGrants``)."""
        return await self._grants.everyone(self._shown)

    async def revoke(self, user: User, server_named: str | None = None) -> list[dict[str, object]]:
        """The user's grant here (if it is ``server_named``'s, where named) revoked: forgotten here and in the store,
        then at the server (:meth:`_told`); each by its server, and whether that server was told. Where the server
        cannot be found now (a gateway restarted while its upstream is down), her grants are those the store's
        index names (a read of every entry, as the operator's listing is), and no server is told."""
        try:
            server: Server | None = await self._registration.server()
            unfound = ""
        except ExchangeRefused as failed:
            server = None
            unfound = failed.description
        if server is not None:
            issuers = [server.issuer]
        else:
            held = await self.every_grant()
            issuers = [
                str(each["authorization_server"]) for each in held if (each["issuer"], each["principal"]) == user
            ]
        revoked: list[dict[str, object]] = []
        for issuer in issuers:
            if server_named is not None and server_named.rstrip("/") != issuer.rstrip("/"):
                continue
            key = (user, issuer)
            grant = await self._grants.current(key)
            if grant is None:
                continue
            await self._grants.drop(key)
            unsaid = unfound if server is None else await self._told(server, grant)
            if unsaid is None:
                logger.info("mcp-sessions gateway: a grant at %s revoked", issuer)
            else:
                logger.warning(
                    "mcp-sessions gateway: a grant at %s forgotten here, the server not told: %s", issuer, unsaid
                )
            revoked.append({"authorization_server": issuer, "notified": unsaid is None})
        return revoked

    # -- the browser's routes -----------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Its HTTP client closed (the gateway's lifespan ends)."""
        await self._http.aclose()

    async def authorize(self, scope: Scope, one_time: str) -> Response:
        """A sign-in URL opened: a flow of its own begun, the browser bound to it by a cookie, and sent to the IdP's
        login. Opening it spends nothing (a link preview's fetch would spend it for her): a flow that grants, or one
        that another user completes, does."""
        user = self._pending.opened(one_time)
        if user is None:
            raise SignInFailed(404, "This sign-in link is unknown, used or expired. Ask for a new one by retrying.")
        idp = await self._idp.metadata()
        flow = secrets.token_hex(8)
        binding = secrets.token_urlsafe(32)
        verifier = _verifier()
        nonce = secrets.token_urlsafe(32)
        sends_iss = idp.get("authorization_response_iss_parameter_supported") is True
        leg = Leg(user, one_time, flow, binding, verifier, nonce, self._idp.login.issuer, sends_iss, self._callback)
        state = self._pending.sent(leg, login=True)
        endpoint = url_in(idp, "authorization_endpoint")
        url = _authorization_url(
            endpoint, self._idp.login.client.client_id, self._callback, state, verifier, self._login_scope, nonce=nonce
        )
        answer = redirect(url)
        answer.set_cookie(
            f"{COOKIE}-{flow}",
            binding,
            max_age=int(SIGN_IN_WITHIN),
            path="/oauth/",
            secure=self._secure,
            httponly=True,
            samesite="lax",
        )
        return answer

    async def called_back(self, scope: Scope) -> Response:
        """A server sent the browser back: the IdP's login (then on to the upstream's server), or the upstream's
        server's code (then the grant, bound to the user the login confirmed)."""
        params = QueryParams(scope.get("query_string", b"").decode("latin-1"))
        state = params.get("state", "")
        taken = self._pending.back(state)
        if taken is None:
            raise SignInFailed(400, "This sign-in is unknown, used or expired: nothing was granted.")
        leg, login = taken
        binding = Request(scope).cookies.get(f"{COOKIE}-{leg.flow}", "")  # a browser's: any characters
        if not secrets.compare_digest(binding.encode(), leg.binding.encode()):
            raise SignInFailed(400, "This sign-in was started in another browser: nothing was granted.")
        iss = params.get("iss")
        if iss is None and leg.sends_iss:  # RFC 9207 §2.4: a server that says it names itself must
            raise SignInFailed(400, "This answer does not name the server it comes from: nothing was granted.")
        if iss is not None and iss.rstrip("/") != leg.issuer.rstrip("/"):
            raise SignInFailed(400, "This answer comes from another server than the one asked: nothing was granted.")
        if scope["path"] != urlsplit(leg.redirect_uri).path:  # RFC 9700 §4.4.2: a mix-up's code, never redeemed
            raise SignInFailed(
                400, "This answer came back at another server's address than the one asked: nothing was granted."
            )
        if "error" in params or "code" not in params:
            error = params.get("error", "")
            said = error if ERROR_CODE.fullmatch(error) else "no code"
            raise SignInFailed(403, f"The sign-in was refused ({said}): nothing was granted.")
        if login:
            return await self._logged_in(leg, params["code"])
        return await self._code_redeemed(leg, params["code"])

    async def _logged_in(self, leg: Leg, code: str) -> Response:
        """The IdP's code swapped for an ID token that must name the user who asked; then on to the upstream's
        server, with PKCE, ``state`` and ``resource`` (the login leg alone: :meth:`_id_token_kept`)."""
        if self._login_only:
            return await self._id_token_kept(leg, code)
        await self._confirmed(leg, code)
        server = await self._registration.server()
        client = await self._registration.client(server)
        verifier = _verifier()
        # a client by its metadata document, which every server shares, comes back to the shared callback: it is
        # used only with a server that names itself (Registration.client), whose iss the callback then requires
        back = self._callback if client == self.document_url else self._registration.redirect_uri(server.issuer)
        granting = replace(
            leg, verifier=verifier, nonce=None, issuer=server.issuer, sends_iss=server.sends_iss, redirect_uri=back
        )
        state = self._pending.sent(granting, login=False)
        client_id = client if isinstance(client, str) else client.client_id
        return redirect(
            _authorization_url(
                server.authorization_endpoint,
                client_id,
                back,
                state,
                verifier,
                server.scope,
                resource=server.resource or None,
            )
        )

    async def _id_token_kept(self, leg: Leg, code: str) -> Response:
        """The login leg's ID token (it names the user who asked) kept for her, with the IdP's refresh token."""
        answer, id_token, claims = await self._confirmed(leg, code)
        key = (leg.user, self._idp.login.issuer)
        refresh = answer.get("refresh_token")
        grant = _id_token_grant(id_token, claims, refresh if isinstance(refresh, str) else None, self._clock())
        await self._saved(key, grant)
        self._pending.spend(leg)
        logger.info("mcp-sessions gateway: a user signed in at %s", self._idp.login.issuer)
        return page(200, f"You are signed in at {urlsplit(self._idp.login.issuer).netloc}. You may close this page.")

    async def _code_redeemed(self, leg: Leg, code: str) -> Response:
        """The upstream's server's code swapped for the user's tokens, kept for her."""
        server = await self._registration.server()
        form = self._code_form(leg, code)
        if server.resource:
            form["resource"] = server.resource
        status, answer = await self._token_request(server, form)
        if status != 200 or not isinstance(answer, dict):
            logger.warning("mcp-sessions gateway: %s answered %d to a code", server.issuer, status)
            raise SignInFailed(502, "The upstream's authorization server did not grant access: nothing was granted.")
        key = (leg.user, server.issuer)
        try:
            grant = _granted(answer, None, server.resource, self._clock())
        except ExchangeRefused:
            raise SignInFailed(502, "The upstream's authorization server issued no usable token.") from None
        grant.scope = grant.scope or server.scope  # RFC 6749 §5.1: an answer names the scope where it is not the asked
        await self._saved(key, grant)
        self._pending.spend(leg)
        logger.info("mcp-sessions gateway: a user granted access at %s", server.issuer)
        return page(200, f"You are signed in to {urlsplit(server.issuer).netloc}. You may close this page.")

    # -- the token endpoint --------------------------------------------------------------------------------------

    async def _token_request(self, server: Server, form: dict[str, str]) -> tuple[int, Any]:
        """``form`` posted to ``server``'s token endpoint, with the gateway's client authentication."""
        client = await self._registration.client(server)
        return await self._post_token(server.token_endpoint, server.issuer, client, form)

    async def _post_token(
        self, endpoint: str, issuer: str, client: ClientAuth | str, form: dict[str, str]
    ) -> tuple[int, Any]:
        """``form`` at ``endpoint`` of the server ``issuer``, sent by ``client`` (``_token.token_request``)."""
        from ._token import token_request  # loaded as the client was made

        status, answer, _ = await token_request(
            self._http, endpoint, form, client, issuer, seconds=self._timeout, server="a server", failed=server_error
        )
        return status, answer

    def _code_form(self, leg: Leg, code: str) -> dict[str, str]:
        """The token request that swaps a leg's authorization ``code`` (RFC 6749 §4.1.3), with PKCE's verifier."""
        return {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": leg.redirect_uri,
            "code_verifier": leg.verifier,
        }

    async def _confirmed(self, leg: Leg, code: str) -> tuple[dict[str, Any], str, dict[str, Any]]:
        """The IdP's code swapped for an ID token that must name the user who asked (and carry the leg's
        ``nonce``): the token endpoint's answer, the ID token, and its verified claims."""
        idp = await self._idp.metadata()
        form = self._code_form(leg, code)
        endpoint = url_in(idp, "token_endpoint")
        status, answer = await self._post_token(endpoint, self._idp.login.issuer, self._idp.login.client, form)
        id_token = answer.get("id_token") if isinstance(answer, dict) and status == 200 else None
        if not isinstance(id_token, str):
            logger.warning("mcp-sessions gateway: the login's token endpoint answered %d with no ID token", status)
            raise SignInFailed(502, "The sign-in could not confirm who you are: nothing was granted.")
        claims = await self._idp.verified(id_token)
        if claims.get("nonce") != leg.nonce or claims.get(self._idp.login.claim) != leg.user[1]:
            logger.warning("mcp-sessions gateway: a sign-in URL was completed by another user: nothing granted")
            self._pending.spend(leg)
            raise SignInFailed(403, "This sign-in link was made for another user: nothing was granted.")
        return answer, id_token, claims

    async def _refresh(self, key: GrantKey, server: Server, grant: Grant) -> Grant:
        """``grant`` refreshed at ``server``'s token endpoint, kept; :class:`SignInRequired` when it is refused."""
        assert grant.refresh is not None  # the caller's check
        form = {"grant_type": "refresh_token", "refresh_token": grant.refresh}
        if server.resource:
            form["resource"] = server.resource
        status, answer = await self._token_request(server, form)
        if status != 200 or not isinstance(answer, dict):
            error = refusal(status, answer)
            if error not in ("invalid_grant", "invalid_token"):
                logger.warning("mcp-sessions gateway: %s answered %d to a refresh", server.issuer, status)
                raise GrantFailed(502, "server_error", "the upstream's authorization server failed a refresh")
            # Revoked, expired, or an old one seen again: signed in again.
            await self._grants.drop(key)
            raise SignInRequired(self._sign_in_url(key[0]), urlsplit(server.issuer).netloc)
        refreshed = await self._granted_in(answer, grant.refresh, key, server)
        refreshed.granted_at = grant.granted_at  # renewed, not granted again
        refreshed.scope = refreshed.scope or grant.scope  # an answer may leave out the scope it leaves as it was
        await self._saved(key, refreshed)
        return refreshed

    async def _told(self, server: Server, grant: Grant) -> str | None:
        """``grant``, forgotten here, revoked at ``server``'s revocation endpoint (RFC 7009; its refresh token, which
        ends its access tokens too where the server ties them): ``None`` where the server took it, else why it was
        not told. The gateway holds the grant no more all the same (what an operator revoking a user's access needs
        first, whatever the vendor's state), and its tokens end as the server ends them."""
        if server.revocation_endpoint is None:
            return "it names no revocation endpoint"
        token, hint = (grant.refresh, "refresh_token") if grant.refresh else (grant.access, "access_token")
        form = {"token": token, "token_type_hint": hint}
        try:
            client = await self._registration.client(server)
            status, _ = await self._post_token(server.revocation_endpoint, server.issuer, client, form)
        except ExchangeRefused as failed:
            return failed.description
        return None if status == 200 else f"it answered {status}"


class UpstreamGrants(SignIn):
    """``--upstream-token oauth``: each user's own access token at the upstream's authorization server (see the
    module). ``upstream`` is the upstream's MCP URL, ``callback`` the gateway's ``/oauth/callback`` as browsers
    reach it, ``login`` the team's IdP; ``client`` or ``client_id`` the gateway's client at the upstream's server
    (neither: registered), ``issuer`` that server where the operator names it (the upstream's metadata must name it
    too), and ``scope`` what it asks for (default: the upstream's 401's, else its metadata's);
    ``kept``, where the grants outlive the process (else in its memory alone). Serve the app
    :attr:`signing_in` wraps: it serves the sign-in's routes and closes the HTTP client."""

    def __init__(
        self,
        *,
        upstream: str,
        callback: str,
        login: Login,
        client: ClientAuth | None = None,
        client_id: str | None = None,
        issuer: str | None = None,
        scope: str | None = None,
        kept: KeptGrants | None = None,
        timeout: float = TIMEOUT,
        clock: Callable[[], float] = now,
    ) -> None:
        to = AtUpstream(upstream, issuer, scope)
        super().__init__(
            to,
            callback=callback,
            login=login,
            client=client,
            client_id=client_id,
            kept=kept,
            timeout=timeout,
            clock=clock,
        )


class IdTokens(SignIn):
    """``--id-jag-subject id_token``: each user's ID token issued to the gateway's own client at the team's IdP
    (``login``), the subject token of her ID-JAG exchanges (the draft's identity assertion issued to the requesting
    client, which Okta's Cross App Access takes alone; ``_exchange``). One way per thing: the sign-in is
    :class:`SignIn`'s (its URL, elicitation, cookie, ``state``, PKCE and ``nonce``), its login leg alone,
    whose page says she is signed in; what is kept, per user, sealed in the store as grants are (under records of
    its own), is the ID token and the IdP's refresh token (``offline_access`` is asked for). The ID token is
    refreshed before it expires (its ``exp``), one refresh in flight per user (OpenID Connect Core §12: the answer's
    ID token verified as the login's, its principal the same; an answer with none, or a refusal, asks her to sign in
    again, as does an expiry with no refresh token). Its routes and her view at ``/oauth/grants`` (her login,
    revoked at the IdP's RFC 7009 endpoint where it has one) are the same."""

    def __init__(
        self,
        *,
        callback: str,
        login: Login,
        kept: KeptGrants | None = None,
        timeout: float = TIMEOUT,
        clock: Callable[[], float] = now,
    ) -> None:
        to = AtLogin(login.issuer)
        super().__init__(
            to, callback=callback, login=login, client=login.client, kept=kept, timeout=timeout, clock=clock
        )


class IssuerGrants(SignIn):
    """``--process-env NAME=oauth:ISSUER[,resource=URI][,scope=SCOPE]``: each user's own grant at the authorization
    server ``issuer`` (read by RFC 8414, then OpenID Connect Discovery, once; PKCE's ``S256`` among its methods),
    for ``resource`` (RFC 8707) and ``scope`` where given, for a stdio process's variable. Signed in, kept and
    refreshed as :class:`UpstreamGrants`' are (see it): only the server is named, not found from an upstream."""

    def __init__(
        self,
        *,
        issuer: str,
        resource: str | None,
        callback: str,
        login: Login,
        client: ClientAuth | None = None,
        client_id: str | None = None,
        scope: str | None = None,
        kept: KeptGrants | None = None,
        clock: Callable[[], float] = now,
    ) -> None:
        to = AtIssuer(issuer, resource or "", scope)
        super().__init__(to, callback=callback, login=login, client=client, client_id=client_id, kept=kept, clock=clock)


def _id_token_grant(id_token: str, claims: Mapping[str, Any], refresh: str | None, now: float) -> Grant:
    """A kept ID token (verified: ``claims``), renewed :data:`RENEW_BEFORE` seconds before its ``exp`` (half its
    life for a short one)."""
    lifetime = float(claims["exp"]) - now
    renew_at = now + lifetime - min(RENEW_BEFORE, max(lifetime, 0.0) / 2)
    return Grant(id_token, refresh or None, renew_at, now, float(claims["exp"]))


def _authorization_url(
    endpoint: str,
    client_id: str,
    redirect_uri: str,
    state: str,
    verifier: str,
    scope: str | None,
    *,
    nonce: str | None = None,
    resource: str | None = None,
) -> str:
    """The authorization request (RFC 6749 §4.1.1) at ``endpoint``, with PKCE's S256 challenge of ``verifier``
    (RFC 7636), and OpenID Connect's ``nonce`` and RFC 8707's ``resource`` where given: authlib's OAuth 2 client's
    ``create_authorization_url``. Its base client, ``authlib.oauth2.OAuth2Client``, not its httpx one: a URL asks no
    server, and an ``AsyncOAuth2Client`` made for each would cost 18 ms of CPU (an HTTP client and its TLS
    context), where this costs 0.1 ms."""
    from authlib.oauth2 import OAuth2Client

    client = OAuth2Client(None, client_id, code_challenge_method="S256")
    url, _ = client.create_authorization_url(
        endpoint, state, verifier, redirect_uri=redirect_uri, scope=scope, nonce=nonce, resource=resource
    )
    return str(url)


def _verifier() -> str:
    """A PKCE verifier (RFC 7636 §4.1): 48 of its unreserved characters, as authlib's docs make one."""
    from authlib.common.security import generate_token

    return str(generate_token(48))


def _granted(answer: dict[str, Any], refresh: str | None, resource: str, now: float) -> Grant:
    """The grant in a token endpoint's answer for ``resource``; ``refresh`` kept when the answer rotates none in."""
    token, lifetime, rotated, scope = issued(answer, "the upstream's authorization server", server_error)
    if not _for_resource(token, resource):
        raise server_error("the upstream's authorization server issued a token for another resource")
    # No lifetime said: refreshed when the upstream refuses it.
    renew_at = math.inf if lifetime is None else now + lifetime - min(RENEW_BEFORE, lifetime / 2)
    expires_at = None if lifetime is None else now + lifetime
    # RFC 6749 §5.1: the scope is what was granted, where it is not what was asked
    return Grant(token, rotated or refresh, renew_at, now, expires_at, scope)


def _for_resource(token: str, resource: str) -> bool:
    """Whether ``token`` may go to ``resource`` (RFC 8707: a token issued for one server is sent to no other): a JWT
    whose audience is readable must name it; an opaque token (its server alone reads it) is taken as issued."""
    try:
        audience = jwt.decode(token, options={"verify_signature": False}).get("aud") if resource else None
    except jwt.PyJWTError:
        return True
    if audience is None:
        return True
    named = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
    return resource.rstrip("/") in {str(each).rstrip("/") for each in named}
