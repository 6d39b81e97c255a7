"""Who is calling: the principal hook and the pseudonymous digest bound into tokens."""

from __future__ import annotations

import base64
import hashlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from starlette.authentication import SimpleUser
from starlette.types import Scope

from .._wire import Refusal
from .._wire.protocol import INTERNAL_ERROR

logger = logging.getLogger("mcp_sessions")

PrincipalHook = Callable[[Scope], "str | Awaitable[str | None] | None"]
PRINCIPAL_CLAIM: Final = "pbh"
ENDPOINT_CLAIM: Final = "mep"
"""The MCP endpoint a session was minted at (the request's path), when sessions are bound to one."""


def authenticated_user(scope: Scope) -> str | None:
    """The default principal hook: the authenticated user the server's own auth set on the scope.

    The session work runs inside the server's authentication (see
    ``_inside.py``), where Starlette's ``AuthenticationMiddleware`` has set
    ``scope["user"]``. For the ``mcp`` SDK's bearer auth the principal is the
    access token's (client id, issuer, subject), as the SDK's own
    ``principal_components`` names it (a subject is unique only per issuer);
    for any other authenticated Starlette user, its ``identity`` (a string as
    it is, any other type with its type: ``1`` and ``"1"`` are two principals),
    or a ``SimpleUser``'s ``username``. Never a ``display_name``, which users often choose: a user
    without an identity gets no binding, and the log says so once per user class.
    """
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    access_token = getattr(user, "access_token", None)
    client_id = getattr(access_token, "client_id", None)
    if isinstance(client_id, str):
        claims = getattr(access_token, "claims", None)
        issuer = claims.get("iss") if isinstance(claims, dict) else None
        subject = getattr(access_token, "subject", None)
        return json.dumps(["mcp", client_id, None if issuer is None else str(issuer), subject])
    identity = _identity(user)
    if identity is None or identity == "":
        _say_unbound(type(user))
        return None
    if isinstance(identity, str):
        return identity
    return json.dumps(["user", type(identity).__qualname__, str(identity)])  # typed: user 1 is not user "1"


def _identity(user: object) -> object:
    if isinstance(user, SimpleUser):  # its username is the one its auth backend signed in
        return user.username
    try:  # Starlette's BaseUser raises NotImplementedError for what a user class leaves out
        return getattr(user, "identity", None)
    except NotImplementedError:
        return None


_UNBOUND: set[type] = set()


def _say_unbound(user_class: type) -> None:
    if user_class not in _UNBOUND:
        _UNBOUND.add(user_class)
        logger.warning(
            "mcp-sessions: authenticated users of type %s have no identity, so their sessions are bound to no "
            "principal: give the class an identity property (a stable id, not a display name)",
            f"{user_class.__module__}.{user_class.__qualname__}",
        )


def hook_failed() -> Refusal:
    """Log that the principal hook failed, a server bug, and refuse the request: -32603, nothing forwarded."""
    logger.exception("the principal hook failed")
    return Refusal(INTERNAL_ERROR, "Internal error", reason="principal_hook_failed")


async def principal_digest(hook: PrincipalHook | None, scope: Scope, audience: str) -> str | None:
    """A pseudonymous digest of the authenticated principal, or None when there is none.

    Bound into the token at creation; a later request by another principal
    (or by none) is refused as "not found". A failing hook is a server bug:
    the request gets -32603 and nothing is forwarded.
    """
    if hook is None:
        return None
    try:
        principal = hook(scope)
        if inspect.isawaitable(principal):
            principal = await principal
    except Exception:
        raise hook_failed() from None
    return None if principal is None else digest_of(str(principal), audience)


def digest_of(principal: str, audience: str) -> str:
    """The pseudonymous digest of ``principal`` for ``audience``: what tokens and handles are bound to."""
    digest = hashlib.sha256(
        b"mcp-sessions principal\x00%s\x00%s" % (audience.encode(), principal.encode("utf-8", "surrogatepass"))
    )
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
