"""Who signs in, in the tests: a Starlette user with an identity of any type (or none) and a display name of
the user's own choosing, two users of the ``mcp`` SDK's bearer auth, and a server behind Starlette's sign-in."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend, BaseUser, SimpleUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.routing import Mount
from starlette.types import ASGIApp

from conftest import SECRET
from mcp_sessions import MCPSessionMiddleware

TOKENS = {
    "alice-token": AccessToken(token="alice-token", client_id="app", scopes=["mcp"], subject="alice"),
    "bob-token": AccessToken(token="bob-token", client_id="app", scopes=["mcp"], subject="bob"),
}


class User(BaseUser):
    """Signed in; ``identity`` as given (``NotImplemented``: the class has none, as ``BaseUser`` says)."""

    def __init__(self, identity: object = NotImplemented, name: str = "Alice") -> None:
        self._identity, self.name = identity, name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def display_name(self) -> str:
        return self.name

    @property
    def identity(self) -> str:
        if self._identity is NotImplemented:
            raise NotImplementedError
        return self._identity  # type: ignore[return-value]  # any type, as a database key is


class StaticVerifier:
    """The SDK's ``TokenVerifier``: two users, each with a fixed bearer (``alice-token``, ``bob-token``)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        return TOKENS.get(token)


def bearer_auth() -> dict[str, Any]:
    """``MCPServer`` options for the SDK's own bearer auth, with the two users of :class:`StaticVerifier`."""
    return {
        "token_verifier": StaticVerifier(),
        "auth": AuthSettings(
            issuer_url=AnyHttpUrl("https://auth.example"),
            resource_server_url=AnyHttpUrl("http://127.0.0.1/mcp"),
            required_scopes=["mcp"],
            validate_token_resource=False,
        ),
    }


class HeaderUser(AuthenticationBackend):
    """A server's own sign-in, as simple as it gets: whoever the ``X-User`` header names, else anonymous."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
        user = conn.headers.get("x-user")
        return None if user is None else (AuthCredentials(["authenticated"]), SimpleUser(user))


def signed_in(server: MCPServer, mcp_app: ASGIApp, *inner: Middleware, **options: Any) -> Starlette:
    """``server``'s ``mcp_app`` behind the ``inner`` middleware, the session middleware (``options``) and Starlette's
    authentication with :class:`HeaderUser`: outermost, so that the session middleware's default hook sees
    ``scope["user"]``."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    return Starlette(
        routes=[Mount("/", mcp_app)],
        middleware=[
            Middleware(AuthenticationMiddleware, backend=HeaderUser()),
            Middleware(MCPSessionMiddleware, secret=SECRET, **options),
            *inner,
        ],
        lifespan=lifespan,
    )
