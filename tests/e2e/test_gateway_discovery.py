"""One reading of an authorization server's metadata (RFC 8414) and a protected resource's (RFC 9728) for every OAuth
client of the gateway's: the token exchange (ID-JAG's, which reads both) and the users' sign-in refuse a document
that cannot be reached, or names another issuer or another resource, the same way (``auth._discovery``)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from _mcp import modern_headers, modern_request
from _redis import free_port
from conftest import asgi_client, serve
from e2e._gateway import SECRET, result_of
from e2e._issuer import ISSUER, signed
from mcp_sessions import SessionsConfig, gateway_app
from mcp_sessions._gateway.auth._client import ClientAuth
from mcp_sessions._gateway.auth._exchange import Target, TokenExchange, UpstreamToken
from mcp_sessions._gateway.auth._oauth import Login, UpstreamGrants
from mcp_sessions._gateway.auth._users import GatewayAuth

pytestmark = pytest.mark.anyio

AUDIENCE = "http://127.0.0.1:8000/mcp"
ELSEWHERE = "https://elsewhere.example"
GONE = f"http://127.0.0.1:{free_port()}"  # nothing listens there
CASES = {
    # the authorization server the upstream's metadata names cannot be reached
    "unreachable": ("could not be reached", 502),
    # its metadata names another issuer than the one it was fetched for (RFC 8414 §3.3)
    "another issuer": ("'s metadata names another issuer", 502),
    # the upstream's metadata names another resource than the URL it was derived from (RFC 9728 §3.3)
    "another resource": ("the upstream's resource metadata names another resource", 502),
    # ... or one the upstream's URL lies under: not the URL it was derived from either
    "a resource above it": ("the upstream's resource metadata names another resource", 502),
}


def upstream(case: str, asked: list[str] | None = None) -> Starlette:
    """An upstream and its authorization server in one app, whose documents go wrong as ``case`` says (``"root"``:
    its resource metadata at the root alone, naming its origin); each token request's path in ``asked``."""

    async def mcp(request: Request) -> Response:
        metadata = str(request.base_url) + ".well-known/oauth-protected-resource/mcp"
        return Response(status_code=401, headers={"WWW-Authenticate": f'Bearer resource_metadata="{metadata}"'})

    async def resource(request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        if case == "root":
            if request.url.path.endswith("/mcp"):
                return Response(status_code=404)
            return JSONResponse({"resource": base, "authorization_servers": [base]})
        named = {"another resource": ELSEWHERE + "/mcp", "a resource above it": base}.get(case, base + "/mcp")
        return JSONResponse({"resource": named, "authorization_servers": [GONE if case == "unreachable" else base]})

    async def server(request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        return JSONResponse(
            {
                "issuer": ELSEWHERE if case == "another issuer" else base,
                "authorization_endpoint": base + "/authorize",
                "token_endpoint": base + "/token",
                "code_challenge_methods_supported": ["S256"],
            }
        )

    async def token(request: Request) -> Response:
        (asked if asked is not None else []).append(request.url.path)
        return JSONResponse({"error": "invalid_grant"}, 400)

    return Starlette(
        routes=[
            Route("/mcp", mcp, methods=["GET", "POST"]),
            Route("/.well-known/oauth-protected-resource/mcp", resource),
            Route("/.well-known/oauth-protected-resource", resource),
            Route("/.well-known/oauth-authorization-server", server),
            Route("/token", token, methods=["POST"]),
        ]
    )


@pytest.mark.parametrize("case", list(CASES))
async def test_a_document_unreachable_or_for_another_is_one_refusal_in_the_exchange_and_the_sign_in(
    jwks: str, case: str
) -> None:
    """The same upstream behind a gateway whose upstream token is an ID-JAG's exchange (the upstream's RFC 9728
    metadata names its authorization server, whose RFC 8414 metadata names the token endpoint) and behind one
    whose users sign in there (``--upstream-token oauth``): each answers the same 502 saying the same of the
    document, and neither reads a mismatched document's data (no redirect, no token asked for)."""
    said: dict[str, tuple[int, str]] = {}
    with serve(upstream(case)) as base:
        key = ec.generate_private_key(ec.SECP256R1())
        issuer = GONE if case == "unreachable" else base
        exchange = TokenExchange(
            client=ClientAuth("private_key_jwt", "gateway", key=key),
            issuer=issuer,
            id_jag=ClientAuth("private_key_jwt", "gateway-there", key=key),
            timeout=2.0,
        )
        login = Login(ISSUER, ClientAuth("private_key_jwt", "gateway-login", key=key))
        callback = "http://127.0.0.1:8000/oauth/callback"
        tokens = {
            "exchange": UpstreamToken("id-jag", exchange, Target(), upstream=base + "/mcp"),
            "sign-in": UpstreamGrants(upstream=base + "/mcp", callback=callback, login=login, timeout=2.0),
        }
        auth = GatewayAuth(jwks_url=jwks, issuer=ISSUER, audience=AUDIENCE)
        body = modern_request("tools/call", {"name": "whoami", "arguments": {}})
        bearer = signed({"iss": ISSUER, "aud": AUDIENCE, "sub": "max", "exp": 2**31})
        headers = {**modern_headers(body), "Authorization": f"Bearer {bearer}"}
        for name, token in tokens.items():
            app = gateway_app([base + "/mcp"], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=token)
            async with asgi_client(exchange.wrap(app)) as http:
                answer = await http.post("/mcp", json=body, headers=headers)
            said[name] = (answer.status_code, result_of(answer, body["id"])["error"]["message"])
    phrase, status = CASES[case]
    assert {name: code for name, (code, _) in said.items()} == {"exchange": status, "sign-in": status}
    assert all(phrase in message for _, message in said.values()), said


async def test_a_document_at_the_root_naming_the_origin_is_read_by_the_exchange_and_the_sign_in(jwks: str) -> None:
    """An upstream whose protected resource metadata is at the root alone (RFC 9728's well-known URL of its origin,
    naming the origin, as MCP's authorization spec has a client look last): the exchange reads it as the sign-in
    does (it read the path's alone), and goes on to its authorization server's token endpoint; the sign-in goes on
    to the user's sign-in URL."""
    asked: list[str] = []
    with serve(upstream("root", asked)) as base:
        key = ec.generate_private_key(ec.SECP256R1())
        exchange = TokenExchange(
            client=ClientAuth("private_key_jwt", "gateway", key=key),
            issuer=base,
            id_jag=ClientAuth("private_key_jwt", "gateway-there", key=key),
        )
        login = Login(ISSUER, ClientAuth("private_key_jwt", "gateway-login", key=key))
        callback = "http://127.0.0.1:8000/oauth/callback"
        tokens = {
            "exchange": UpstreamToken("id-jag", exchange, Target(), upstream=base + "/mcp"),
            "sign-in": UpstreamGrants(upstream=base + "/mcp", callback=callback, login=login),
        }
        auth = GatewayAuth(jwks_url=jwks, issuer=ISSUER, audience=AUDIENCE)
        body = modern_request("tools/call", {"name": "whoami", "arguments": {}})
        bearer = signed({"iss": ISSUER, "aud": AUDIENCE, "sub": "max", "exp": 2**31})
        headers = {**modern_headers(body), "Authorization": f"Bearer {bearer}"}
        said = {}
        for name, token in tokens.items():
            app = gateway_app([base + "/mcp"], config=SessionsConfig(secret=SECRET), auth=auth, upstream_token=token)
            async with asgi_client(exchange.wrap(app)) as http:
                answer = await http.post("/mcp", json=body, headers=headers)
            said[name] = (answer.status_code, result_of(answer, body["id"])["error"]["message"])
    assert asked == ["/token"]  # the exchange's one request, refused there: the documents were taken
    assert said["exchange"][0] == 401 and "will not exchange this token (invalid_grant)" in said["exchange"][1]
    assert said["sign-in"][0] == 200 and "/oauth/authorize/" in said["sign-in"][1]
