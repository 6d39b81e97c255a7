"""Who is calling: the principal hook and the pseudonymous digest bound into tokens."""

from __future__ import annotations

import base64
import hashlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from starlette.types import Scope

from ..wire import Refusal
from ..wire.protocol import INTERNAL_ERROR

__all__ = ["ENDPOINT_CLAIM", "PRINCIPAL_CLAIM", "PrincipalHook", "authenticated_user", "digest_of", "principal_digest"]

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
    for any other authenticated Starlette user, its ``identity``, else its
    ``display_name``.
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
    for attribute in ("identity", "display_name"):
        try:  # Starlette's BaseUser raises NotImplementedError for what a user class leaves out
            name = getattr(user, attribute, None)
        except NotImplementedError:
            continue
        if isinstance(name, str) and name:
            return name
    return None


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
        logger.exception("the principal hook failed")
        raise Refusal(INTERNAL_ERROR, "Internal error", reason="principal_hook_failed") from None
    return None if principal is None else digest_of(str(principal), audience)


def digest_of(principal: str, audience: str) -> str:
    """The pseudonymous digest of ``principal`` for ``audience``: what tokens and handles are bound to."""
    digest = hashlib.sha256(
        b"mcp-sessions principal\x00%s\x00%s" % (audience.encode(), principal.encode("utf-8", "surrogatepass"))
    )
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
