"""The gateway as an OAuth client at a token endpoint: how it authenticates (:class:`ClientAuth`), one value that
every token endpoint client of the gateway takes (the token exchange's, ``_exchange``, and the ID-JAG grant's).

``client_secret_basic`` (RFC 6749 §2.3.1, the default) and ``client_secret_post`` send a shared secret;
``private_key_jwt`` (RFC 7523 §2.2, OpenID Connect Core §9) sends none: each request carries a JWT the gateway signs
with its own key (RSA: RS256; EC: ES256, ES384 or ES512 by the key's curve), whose public half the authorization
server holds. Its claims: ``iss`` and ``sub`` the client id, ``aud`` the server it goes to, a fresh ``jti``, ``iat``,
and ``exp`` :data:`ASSERTION_LIFETIME` seconds later; its header ``typ`` ``client-authentication+jwt``
(draft-ietf-oauth-rfc7523bis §4's explicit type, so that no other JWT of the key is taken for it) and ``kid`` when
given. ``aud`` is one string: the server's issuer identifier when the gateway read the token endpoint from that
issuer's metadata (rfc7523bis's choice, the fix for the audience injection of assertions it describes; FAPI 2.0's
too), else the token endpoint it was given (RFC 7523 §3's other reading, which some servers take alone). Either way
the assertion names the server it is sent to, and no other.

A secret names no server: whoever receives it can use it. So a client with a secret holds the ``servers`` the
operator named for it (issuer identifiers, or a token endpoint given in place of its issuer's), and
:meth:`ClientAuth.request` sends it to no other (:class:`ServerNotNamed`): a server read from a stranger's document
(an upstream's RFC 9728 metadata) is not one of them unless the operator named it too. Every token endpoint request
of the gateway's authenticates here, so this one rule holds for each of its clients (the token exchange's, the
ID-JAG grant's, the login's, a vendor's, one registered at a server: that server's alone).

Each method is authlib's (``authlib.oauth2.auth.ClientAuth`` and ``authlib.oauth2.rfc7523.PrivateKeyJWT``, as its
docs use them), in this one place, behind the rule above. What the gateway adds: ``client_secret_basic``'s id and
secret form-encoded before authlib joins and base64-encodes them (RFC 6749 §2.3.1; authlib sends them as given), an
assertion's ``exp`` :data:`ASSERTION_LIFETIME` seconds after its ``iat`` (authlib's default is an hour), its ``typ``
and ``kid``, and the ``client_id`` beside it (servers find the client's key by it).

Neither the secret nor an assertion nor the key is logged or put in an error; :meth:`ClientAuth.request` says what
each request sent, so that an answer that echoes it is not quoted.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, NamedTuple, get_args
from urllib.parse import parse_qsl, quote_plus

from .._keys import private_key
from ._answer import now

if TYPE_CHECKING:
    from joserfc.jwk import ECKey, RSAKey

    from .._keys import PrivateKey

ClientAuthMethod = Literal["client_secret_basic", "client_secret_post", "private_key_jwt"]
METHODS: Final = get_args(ClientAuthMethod)  # --exchange-client-auth's choices
ASSERTION_TYPE: Final = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
ASSERTION_JWT_TYPE: Final = "client-authentication+jwt"
ASSERTION_LIFETIME: Final = 60
"""Seconds an assertion holds (RFC 7523 asks for a short one; servers keep each ``jti`` until its ``exp``)."""
_CURVES: Final = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}  # RFC 7518 §3.4


class ServerNotNamed(Exception):
    """A request for a server that the client's secret was not named for: what it says names both (no secret)."""


class Authentication(NamedTuple):
    """What one request to a token endpoint carries to authenticate the gateway: form parameters, headers, and the
    credentials as sent (what an answer must not be quoted for)."""

    data: dict[str, str]
    headers: dict[str, str]
    sent: tuple[str, ...]


@dataclass(frozen=True)
class ClientAuth:
    """The gateway's client at one authorization server: ``method``, ``client_id``, and its ``secret`` (the secret
    methods) or ``key`` (``private_key_jwt``: RSA of 2048 bits or more, or EC on P-256, P-384 or P-521) with an
    optional ``key_id``; with a secret, the ``servers`` it goes to (see the module). Neither the secret nor the key
    is in its ``repr``."""

    method: ClientAuthMethod
    client_id: str
    secret: str | None = field(default=None, repr=False)
    key: PrivateKey | None = field(default=None, repr=False)
    key_id: str | None = None
    servers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"the client authentication is one of {', '.join(METHODS)}, not {self.method!r}")
        if not self.client_id:
            raise ValueError("the gateway's client needs its client id")
        if self.method == "private_key_jwt":
            if self.key is None or self.secret is not None:
                raise ValueError("private_key_jwt signs with the client's key, and sends no secret")
            _algorithm(self.key)
        elif not self.secret or self.key is not None:
            raise ValueError(f"{self.method} sends the client's secret, and signs nothing")
        elif not self.servers:
            raise ValueError(f"{self.method} sends the client's secret to the servers named for it: name them")

    @classmethod
    def given(
        cls,
        flag: str,
        method: str | None,
        client_id: str | None,
        *,
        secret: str | None = None,
        secret_file: str | None = None,
        key_file: str | None = None,
        key_id: str | None = None,
        servers: tuple[str | None, ...] = (),
        naming: str = "its issuer",
    ) -> ClientAuth:
        """The client of the flags ``FLAG-id``, ``FLAG-auth``, ``FLAG-secret-file``, ``FLAG-key-file`` and
        ``FLAG-key-id`` (``flag`` is ``--exchange-client``), and the secret from elsewhere (its variable), for the
        ``servers`` the operator named (``None`` for one not given: a secret with none refused, saying to give
        ``naming``); ``ValueError`` in one line, naming the flag, for what does not go together or cannot be
        read."""
        method = method or "client_secret_basic"
        if method not in METHODS:
            raise ValueError(f"{flag}-auth is one of {', '.join(METHODS)}, not {method!r}")
        if not client_id:
            raise ValueError(f"{flag}-id is missing: the token endpoint needs the gateway's client id")
        if method != "private_key_jwt":
            if key_file is not None or key_id is not None:
                raise ValueError(f"{flag}-key-file and {flag}-key-id are private_key_jwt's, not {method}'s")
            if secret_file is not None:
                try:
                    with open(secret_file, encoding="utf-8") as file:
                        secret = file.read().strip()
                except OSError as exc:
                    raise ValueError(f"{flag}-secret-file: {secret_file}: {exc.strerror}") from None
            if not secret:
                raise ValueError(f"the gateway's client needs its client secret for {method}: give {flag}-secret-file")
            named = tuple(server for server in servers if server)
            if not named:
                raise ValueError(f"{flag}'s secret goes only to a server named for it: give {naming}")
            return cls(method, client_id, secret=secret, servers=named)  # type: ignore[arg-type]
        if secret_file is not None or secret:
            raise ValueError(f"private_key_jwt sends no secret: give {flag}-key-file, and no client secret")
        if key_file is None:
            raise ValueError(f"private_key_jwt signs with the gateway's key: give {flag}-key-file")
        key = private_key(key_file, f"{flag}-key-file")
        try:
            _algorithm(key)
        except ValueError as exc:
            raise ValueError(f"{flag}-key-file: {key_file}'s {exc}") from None
        return cls("private_key_jwt", client_id, key=key, key_id=key_id or None)

    def request(self, audience: str) -> Authentication:
        """What a request to the token endpoint of the server ``audience`` names carries: the secret (only to one of
        its ``servers``, else :class:`ServerNotNamed`), or a new assertion for that audience."""
        # authlib's client authentication, loaded as the gateway first authenticates
        from authlib.oauth2.auth import ClientAuth as Encoding
        from authlib.oauth2.rfc7523 import PrivateKeyJWT

        if self.secret is not None and audience.rstrip("/") not in {server.rstrip("/") for server in self.servers}:
            named = ", ".join(self.servers)
            raise ServerNotNamed(f"the gateway's client secret goes to {named} alone, not to {audience}")
        if self.method == "client_secret_post":
            assert self.secret is not None
            sent: tuple[str, ...] = (self.secret, quote_plus(self.secret))
            encoding = Encoding(self.client_id, self.secret, "client_secret_post")
        elif self.method == "client_secret_basic":
            assert self.secret is not None
            # RFC 6749 §2.3.1: each part form-encoded, then joined and base64-encoded (authlib's part).
            sent = (self.secret, quote_plus(self.secret))
            encoding = Encoding(quote_plus(self.client_id), quote_plus(self.secret), "client_secret_basic")
        else:
            assert self.key is not None
            header = {"typ": ASSERTION_JWT_TYPE} | ({"kid": self.key_id} if self.key_id else {})
            # a claims dict of its own each time: authlib writes the assertion's jti into the one it is given; its
            # iat and exp of one reading of the wall clock (the server judges them on its own, never a test's)
            issued = int(now())
            claims = {"iat": issued, "exp": issued + ASSERTION_LIFETIME}
            method = PrivateKeyJWT(audience, claims=claims, headers=header, alg=_algorithm(self.key))
            sent = ()
            encoding = Encoding(self.client_id, self._signing_key, method)
        _, headers, body = encoding.prepare("POST", audience, {}, "")
        data = dict(parse_qsl(body))
        if "client_assertion" in data:
            data["client_id"] = self.client_id
            sent = (data["client_assertion"],)
        basic = headers.get("Authorization")
        sent += () if basic is None else (basic.removeprefix("Basic "),)
        return Authentication(data, {name.lower(): value for name, value in headers.items()}, sent)

    def assertion(self, audience: str) -> str:
        """A new client assertion for ``audience`` (RFC 7523 §3), signed with the gateway's key."""
        assert self.key is not None
        return self.request(audience).data["client_assertion"]

    @functools.cached_property
    def _signing_key(self) -> ECKey | RSAKey:
        """The key as authlib's JOSE library (joserfc) signs with it: its PEM, imported once."""
        from cryptography.hazmat.primitives import serialization
        from joserfc.jwk import ECKey, RSAKey

        assert self.key is not None
        pem = self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return RSAKey.import_key(pem) if _algorithm(self.key) == "RS256" else ECKey.import_key(pem)


def _algorithm(key: PrivateKey) -> str:
    """The JWS algorithm of ``key``: RS256 for RSA of 2048 bits or more (RFC 7518 §3.3), ES256, ES384 or ES512 for
    EC by its curve (§3.4); ``ValueError`` for another."""
    from cryptography.hazmat.primitives.asymmetric import ec

    if isinstance(key, ec.EllipticCurvePrivateKey):
        found = _CURVES.get(key.curve.name)
        if found is None:
            raise ValueError(f"key is on the curve {key.curve.name}: private_key_jwt signs with P-256, P-384 or P-521")
        return found
    if key.key_size < 2048:
        raise ValueError(f"key has {key.key_size} bits: RS256 takes 2048 or more (RFC 7518 §3.3)")
    return "RS256"
