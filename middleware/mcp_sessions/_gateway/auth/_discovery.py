"""One reader of an authorization server's metadata (RFC 8414, OpenID Connect Discovery) and one of a protected
resource's (RFC 9728), for every OAuth client of the gateway's: the token exchange and ID-JAG (``_exchange``), the
users' sign-ins (``_oauth``).

Each document is a stranger's, read by :func:`._answer.read_answer`, and has one behaviour wherever it is read:

- one that cannot be reached, or read whole in time, refuses at once (a 502, or a 504 for no answer in time): the
  next well-known URL is on the same origin, and would wait again for nothing;
- one that is not there (another status than 200, or not a JSON object) sends the reader on to the next URL, and
  none left refuses;
- one that names another issuer than the one it was fetched for (RFC 8414 §3.3, OpenID Connect Discovery §4.3), or
  another resource than the URL it was derived from (RFC 9728 §3.3), refuses at once: its data is not used, and no
  other URL is tried. "Another" is compared as the gateway compares issuers everywhere: a trailing ``/`` aside.

Each refusal is the caller's ``failed(description, status)``, its description beginning with the ``server`` the
caller names, and never holds a token.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple
from urllib.parse import urlsplit

from ..._wire import printable
from ._answer import read_answer

if TYPE_CHECKING:
    import httpx2

Failed = Callable[[str, int], Exception]
"""How a caller's refusal is made: ``failed(description, status)``."""

_URL: Final = re.compile(r"[\x21-\x7e]{1,2048}")


class ProtectedResource(NamedTuple):
    """What a protected resource's metadata names: the resource (RFC 8707's, for its tokens), the authorization
    server chosen, and the scopes it lists (space-separated, ``None`` for none)."""

    resource: str
    issuer: str
    scopes: str | None


async def server_metadata(
    http: httpx2.AsyncClient,
    issuer: str,
    *,
    server: str,
    failed: Failed,
    seconds: float,
    oidc_first: bool = False,
) -> dict[str, Any]:
    """The metadata of the authorization server ``issuer`` (see the module): RFC 8414's (the well-known part
    before the issuer's path), then OpenID Connect Discovery's (after it), or the other way round; its ``issuer``
    the one asked about."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    origin = f"{parts.scheme}://{parts.netloc}"
    urls = [
        f"{origin}/.well-known/oauth-authorization-server{path}",
        f"{origin}{path}/.well-known/openid-configuration",
    ]
    for url in reversed(urls) if oidc_first else urls:
        metadata = await _document(http, url, server, failed, seconds)
        if metadata is None:
            continue
        if str(metadata.get("issuer")).rstrip("/") != issuer.rstrip("/"):
            raise failed(f"{server}'s metadata names another issuer", 502)
        return metadata
    raise failed(f"{server} serves no metadata (RFC 8414)", 502)


async def resource_metadata(
    http: httpx2.AsyncClient,
    url: str,
    *,
    failed: Failed,
    seconds: float,
    named: str | None = None,
    issuer: str | None = None,
    issuer_flag: str,
    give: str = "",
) -> ProtectedResource:
    """What the protected resource at ``url`` says of itself (see the module), read where MCP's authorization spec
    has a client look: ``named`` (its 401's ``resource_metadata``; read only on ``url``'s origin), then the
    well-known URL before ``url``'s path, then at its root. The ``resource`` must be ``url`` (or the origin, for the
    root's document); the authorization server is ``issuer`` where given (the operator's ``issuer_flag``), which the
    document must list, else the first it lists. ``give`` is the flag that does without the document, said where
    it names no server."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    server = "the upstream"
    # each place, and the resource its document must name (RFC 9728 §3.3)
    places = [(named, url)] if named is not None and _origin(named) == origin else []
    places.append((f"{origin}/.well-known/oauth-protected-resource{path}", url))
    if path:
        places.append((f"{origin}/.well-known/oauth-protected-resource", origin))
    hint = f": give {give}" if give else ""
    for place, resource in places:
        metadata = await _document(http, place, server, failed, seconds)
        if metadata is None:
            continue
        if str(metadata.get("resource")).rstrip("/") != resource.rstrip("/"):
            raise failed(f"{server}'s resource metadata names another resource", 502)
        servers = metadata.get("authorization_servers")
        if not isinstance(servers, list) or not servers or not isinstance(servers[0], str):
            raise failed(f"{server}'s resource metadata names no authorization server{hint}", 502)
        if issuer is not None:
            if issuer.rstrip("/") not in {str(listed).rstrip("/") for listed in servers}:
                first = printable(servers[0])[:200]
                named_first = f"names the authorization server {first}, not {issuer} ({issuer_flag})"
                raise failed(f"{server}'s resource metadata {named_first}", 502)
        elif urlsplit(servers[0]).scheme not in ("http", "https"):
            raise failed(f"{server}'s resource metadata names no http(s) authorization server{hint}", 502)
        supported = metadata.get("scopes_supported")
        scopes = None
        if isinstance(supported, list) and all(isinstance(item, str) for item in supported):
            scopes = " ".join(supported) or None
        return ProtectedResource(str(metadata["resource"]), issuer or servers[0], scopes)
    raise failed(f"{server} names no protected resource metadata (RFC 9728){hint}", 502)


def endpoint(metadata: Mapping[str, Any], name: str, server: str, failed: Failed) -> str:
    """The http(s) URL a server's metadata gives as ``name``: printable, no space (it may become a ``Location``)."""
    url = metadata.get(name)
    if not isinstance(url, str) or not _URL.fullmatch(url) or urlsplit(url).scheme not in ("http", "https"):
        raise failed(f"{server}'s metadata names no {name}", 502)
    return url


async def _document(
    http: httpx2.AsyncClient, url: str, server: str, failed: Failed, seconds: float
) -> dict[str, Any] | None:
    """The JSON object at ``url``, ``None`` where there is none (another status, not an object); a failure to read
    it is ``failed``'s 502 or 504."""
    response, document = await read_answer(http, http.build_request("GET", url), seconds, server, failed)
    return document if response.status_code == 200 and isinstance(document, dict) else None


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
