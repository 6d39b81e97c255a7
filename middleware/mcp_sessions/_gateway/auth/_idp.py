"""The team's IdP, as the sign-ins (``_oauth``) ask it: where the gateway confirms who opened a sign-in URL
(:class:`Login`, the operator's), its metadata (OpenID Connect Discovery, then RFC 8414; read once), and an ID token
of the gateway's own client there verified by PyJWT with its keys (read once, and again once for an unknown key)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import jwt

from ._answer import read_answer
from ._client import ClientAuth
from ._grants import server_error
from ._registration import metadata, url_in
from ._sign_ins import SignInFailed

logger = logging.getLogger("mcp_sessions.gateway")


@dataclass(frozen=True)
class Login:
    """The team's IdP, where the gateway confirms who opened a sign-in URL: its ``issuer`` (read by OpenID Connect
    Discovery), the gateway's own ``client`` there, and the ID token's ``claim`` that names the principal."""

    issuer: str
    client: ClientAuth
    claim: str = "sub"


class IdP:
    """The IdP ``login`` names, asked by ``http`` (``_token.oauth_client``) within ``timeout`` seconds: its
    :meth:`metadata` and an ID token :meth:`verified`."""

    def __init__(self, login: Login, *, http: Any, timeout: float) -> None:
        self.login = login
        self._http = http
        self._timeout = timeout
        self._metadata: dict[str, Any] | None = None
        self._keys: jwt.PyJWKSet | None = None

    @property
    def issuer(self) -> str:
        return self.login.issuer

    async def metadata(self) -> dict[str, Any]:
        """Its metadata (OpenID Connect Discovery, then RFC 8414), read once."""
        if self._metadata is None:
            self._metadata = await metadata(self._http, self.login.issuer, seconds=self._timeout, oidc_first=True)
        return self._metadata

    async def verified(self, id_token: str) -> dict[str, Any]:
        """The ID token's claims, verified by PyJWT with the IdP's keys (fetched again once for an unknown key),
        for the gateway's client id, from the IdP; :class:`SignInFailed` where it does not verify."""
        login = self.login
        try:
            kid = jwt.get_unverified_header(id_token).get("kid")
            key = None
            for fresh in (False, True):
                if fresh or self._keys is None:
                    request = self._http.build_request("GET", url_in(await self.metadata(), "jwks_uri"))
                    _, keys = await read_answer(self._http, request, self._timeout, "a server", server_error)
                    if not isinstance(keys, dict):
                        raise jwt.PyJWKSetError("the IdP's keys are not a JWK set")
                    self._keys = jwt.PyJWKSet.from_dict(keys)
                key = next((k for k in self._keys.keys if k.key_id == kid), None)
                if key is not None:
                    break
            if key is None:
                raise jwt.InvalidKeyError("no such key")
            claims: dict[str, Any] = jwt.decode(
                id_token,
                key,
                algorithms=[key.algorithm_name],
                audience=login.client.client_id,
                issuer=login.issuer,
                options={"require": ["exp", "iat", "iss", "aud", login.claim]},
            )
        except (jwt.PyJWTError, ValueError, TypeError):
            logger.warning("mcp-sessions gateway: the login's ID token did not verify")
            raise SignInFailed(502, "The sign-in could not confirm who you are: nothing was granted.") from None
        return claims
