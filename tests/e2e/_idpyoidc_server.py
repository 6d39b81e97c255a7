"""An OAuth 2.0 authorization server on loopback for the token-exchange tests: idpyoidc's (PyPI), run in its own
environment (pyproject's group ``idpyoidc``; ``make test`` builds ``.venv-idpyoidc``).

idpyoidc does the OAuth: its token endpoint (the ``authorization_code`` grant, and RFC 8693's token exchange with
its default policy: the audiences the command line allows), its client authentication (``client_secret_basic``,
``client_secret_post``, and ``private_key_jwt`` for a client registered with its public key alone: the assertion's
signature, ``aud`` (the token endpoint, or the issuer as rfc7523bis asks), ``exp``, and each ``jti`` once), its JWT
access tokens (signed by its keys, the ``aud`` the request's audience or resource), its revocation endpoint
(RFC 7009), its metadata (RFC 8414) and its JWKS. The standard library's HTTP server carries them. One thing
stands in: ``POST /login`` (form ``user``) signs a user in, as the interactive login that tests cannot click
through would, and answers an authorization code for the client ``app`` (idpyoidc's own session and code, as its
tests make them), which the test redeems at the token endpoint. ``GET /exchanges`` says how many token exchanges
its token endpoint was asked for.

``python _idpyoidc_server.py SETTINGS``: SETTINGS is JSON, ``{"port", "lifetime", "audiences", "clients", "keys"}``
(seconds an access token lives; the audiences a token may be exchanged for; client id to secret; client id to its
public JWK, a ``private_key_jwt`` client). It prints ``ready`` once it listens.
"""

# mypy: ignore-errors

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Lock
from urllib.parse import parse_qs

from idpyoidc.message.oidc import AuthorizationRequest
from idpyoidc.server import Server
from idpyoidc.server.authn_event import create_authn_event
from idpyoidc.server.authz import AuthzHandling
from idpyoidc.server.client_authn import verify_client
from idpyoidc.server.configure import ASConfiguration
from idpyoidc.server.exception import ClientAuthenticationError, UnAuthorizedClient
from idpyoidc.server.oauth2.token_helper import validate_token_exchange_policy
from idpyoidc.server.session.manager import SessionManager
from idpyoidc.server.user_authn.authn_context import INTERNETPROTOCOLPASSWORD
from idpyoidc.server.user_info import UserInfo

REDIRECT = "http://127.0.0.1/callback"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
LISTS = frozenset({"resource", "audience"})  # the parameters a request may repeat (RFC 8693 §2.1)


def _with_audience(create):
    """idpyoidc 5.0.0's exchanged token has no ``aud``: its ``ExchangeGrant`` puts the grant's resources there, which
    ``create_exchange_grant`` never sets. This sets them to the request's ``audience`` and ``resource`` (RFC 8693
    §2.1: the target the token is for), the one change made to idpyoidc here."""

    def create_exchange_grant(self, *, exchange_request, **kwargs):
        branch = create(self, exchange_request=exchange_request, **kwargs)
        grant = self.get_session_info(session_id=branch, grant=True)["grant"]
        grant.resources = [*exchange_request.get("audience", []), *exchange_request.get("resource", [])]
        return branch

    return create_exchange_grant


SessionManager.create_exchange_grant = _with_audience(SessionManager.create_exchange_grant)


def server(issuer: str, lifetime: int, audiences: list[str], clients: dict[str, str], keys: dict[str, dict]) -> Server:
    exchange = {
        "requested_token_types_supported": ["urn:ietf:params:oauth:token-type:access_token"],
        "default_requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "policy": {"": {"function": validate_token_exchange_policy, "kwargs": {"audience": audiences}}},
    }
    access = {"supports_minting": ["access_token"], "expires_in": lifetime}
    conf = {
        "issuer": issuer,
        "httpc_params": {"verify": False, "timeout": 1},
        "keys": {"uri_path": "jwks.json", "key_defs": [{"type": "RSA", "key": "", "use": ["sig"]}]},
        "token_handler_args": {
            "code": {"lifetime": 600, "kwargs": {"crypt_conf": _crypt()}},
            "token": {
                "class": "idpyoidc.server.token.jwt_token.JWTToken",
                "kwargs": {"lifetime": lifetime, "alg": "RS256"},
            },
        },
        "endpoint": {
            "token": {
                "path": "token",
                "class": "idpyoidc.server.oauth2.token.Token",
                "kwargs": {
                    "client_authn_method": ["client_secret_basic", "client_secret_post", "private_key_jwt"],
                    "grant_types_helpers": {
                        "authorization_code": {
                            "class": "idpyoidc.server.oauth2.token_helper.access_token.AccessTokenHelper"
                        },
                        TOKEN_EXCHANGE: {
                            "class": "idpyoidc.server.oauth2.token_helper.token_exchange.TokenExchangeHelper",
                            "kwargs": exchange,
                        },
                    },
                },
            },
            "revocation": {
                "path": "revoke",
                "class": "idpyoidc.server.oauth2.token_revocation.TokenRevocation",
                "kwargs": {"client_authn_method": ["client_secret_basic", "client_secret_post"]},
            },
        },
        "authentication": {
            "anon": {
                "acr": INTERNETPROTOCOLPASSWORD,
                "class": "idpyoidc.server.user_authn.user.NoAuthn",
                "kwargs": {"user": "nobody"},
            }
        },
        "userinfo": {"class": UserInfo, "kwargs": {"db": {}}},
        "client_authn": verify_client,
        "authz": {
            "class": AuthzHandling,
            "kwargs": {
                "grant_config": {
                    "usage_rules": {
                        "authorization_code": {"supports_minting": ["access_token"], "max_usage": 1},
                        "access_token": access,
                    },
                    "expires_in": 43200,
                }
            },
        },
        "session_params": {"encrypter": _crypt()},
    }
    built = Server(ASConfiguration(conf=conf, base_path="."), cwd=".")
    built.context.map_supported_to_preferred()
    for client_id, secret in clients.items():
        built.context.cdb[client_id] = {
            "client_id": client_id,
            "client_secret": secret,
            "redirect_uris": [(REDIRECT, {})],
            "token_endpoint_auth_method": "client_secret_basic",
            "grant_types_supported": ["authorization_code", TOKEN_EXCHANGE],
            "response_types": ["code"],
            "allowed_scopes": ["openid", "tools"],
        }
    for client_id, jwk in keys.items():  # no secret: its assertions alone authenticate it
        built.context.cdb[client_id] = {
            "client_id": client_id,
            "redirect_uris": [(REDIRECT, {})],
            "token_endpoint_auth_method": "private_key_jwt",
            "client_authn_method": ["private_key_jwt"],
            "grant_types_supported": [TOKEN_EXCHANGE],
            "response_types": ["code"],
            "allowed_scopes": ["openid", "tools"],
        }
        built.keyjar.import_jwks({"keys": [jwk]}, client_id)
    # An assertion's aud: the token endpoint (idpyoidc's default), or the issuer, which rfc7523bis has servers take
    # (idpyoidc's own way to add a target, as its userinfo endpoint does).
    built.get_endpoint("token").allowed_targets.append("")
    return built


def _crypt() -> dict[str, object]:
    keys = [{"type": "OCT", "use": ["enc"], "kid": "password"}, {"type": "OCT", "use": ["enc"], "kid": "salt"}]
    return {"kwargs": {"keys": {"key_defs": keys}, "iterations": 1}}


class Handler(BaseHTTPRequestHandler):
    """The routes: the metadata, the JWKS, the token and revocation endpoints, and the login stand-in."""

    built: Server
    lock = Lock()  # idpyoidc's session store is one dict
    exchanges = 0

    def log_message(self, *args):  # the tests' output: no line per request, no token in any
        pass

    def do_GET(self):
        context = self.built.context
        if self.path == "/.well-known/oauth-authorization-server":
            metadata = {
                "issuer": context.issuer,
                "token_endpoint": context.issuer + "/token",
                "revocation_endpoint": context.issuer + "/revoke",
                "jwks_uri": context.issuer + "/jwks.json",
                "grant_types_supported": ["authorization_code", TOKEN_EXCHANGE],
            }
            return self._answer(200, metadata)
        if self.path == "/jwks.json":
            return self._answer(200, self.built.keyjar.export_jwks(issuer_id=""))
        if self.path == "/exchanges":
            return self._answer(200, {"exchanges": Handler.exchanges})
        self._answer(404, {"error": "not_found"})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0"))).decode()
        with self.lock:
            if self.path == "/login":
                return self._answer(200, {"code": self._login(parse_qs(body)["user"][0])})
            names = {"/token": "token", "/revoke": "token_revocation"}
            if self.path not in names:
                return self._answer(404, {"error": "not_found"})
            endpoint = self.built.get_endpoint(names[self.path])
            http_info = {"headers": {"authorization": self.headers.get("authorization")}}
            form = {name: v if name in LISTS else v[0] for name, v in parse_qs(body).items()}
            Handler.exchanges += form.get("grant_type") == TOKEN_EXCHANGE
            try:  # the form, as idpyoidc's frameworks pass it
                parsed = endpoint.parse_request(form, http_info=http_info)
            except (UnAuthorizedClient, ClientAuthenticationError):  # RFC 6749 §5.2, as its Flask example answers
                return self._answer(401, {"error": "invalid_client", "error_description": "client authentication"})
            done = endpoint.process_request(parsed) if "error" not in parsed else parsed
            if "error" in done or ("response_args" in done and "error" in done["response_args"]):
                error = dict(done.get("response_args", done))
                return self._answer(400, {k: v for k, v in error.items() if k in ("error", "error_description")})
            if self.path == "/revoke":
                return self._answer(200, {})  # RFC 7009 §2.2: 200, the body ignored
            answer = endpoint.do_response(request=parsed, **done)
            self._answer(200, json.loads(answer["response"]))

    def _login(self, user: str) -> str:
        """The stand-in for the interactive login: idpyoidc's session for ``user`` and client ``app``, its code."""
        context = self.built.context
        request = AuthorizationRequest(
            client_id="app", redirect_uri=REDIRECT, scope=["openid", "tools"], state="s", response_type="code"
        )
        manager = context.session_manager
        session_id = manager.create_session(create_authn_event(user), request, user, client_id="app")
        grant = context.authz(session_id, request)
        code = grant.mint_token(
            session_id=session_id,
            context=context,
            token_class="authorization_code",
            token_handler=manager.token_handler["authorization_code"],
            usage_rules=grant.usage_rules.get("authorization_code", {}),
        )
        return code.value

    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("cache-control", "no-store")
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    settings = json.loads(sys.argv[1])
    issuer = f"http://127.0.0.1:{settings['port']}"
    built = server(issuer, settings["lifetime"], settings["audiences"], settings["clients"], settings.get("keys", {}))
    Handler.built = built
    listening = ThreadingHTTPServer(("127.0.0.1", settings["port"]), Handler)
    print("ready", flush=True)
    listening.serve_forever()


if __name__ == "__main__":
    main()
