"""Who is calling: the principal hook and the pseudonymous digest bound into tokens."""

from __future__ import annotations

import base64
import hashlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from starlette.types import Scope

from ..wire import Refusal
from ..wire.protocol import INTERNAL_ERROR

__all__ = ["PRINCIPAL_CLAIM", "PrincipalHook", "authenticated_user", "digest_of", "principal_digest"]

logger = logging.getLogger("mcp_sessions")

PrincipalHook = Callable[[Scope], "str | Awaitable[str | None] | None"]
PRINCIPAL_CLAIM: Final = "pbh"


def authenticated_user(scope: Scope) -> str | None:
    """The default principal hook: the authenticated user Starlette's ``AuthenticationMiddleware`` set.

    Works when that middleware runs before this one. For the ``mcp`` SDK's
    bearer auth the principal is the token's subject, else its client id.
    """
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    access_token = getattr(user, "access_token", None)
    subject = getattr(access_token, "subject", None) or getattr(access_token, "client_id", None)
    if isinstance(subject, str) and subject:
        return subject
    name = getattr(user, "display_name", None)
    return name if isinstance(name, str) and name else None


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
