"""The headers a hop changes: what the upstream is sent, what the client gets back, and the gateway's own door.

RFC 9110 §7.6.1: a proxy drops the hop-by-hop headers, and every header the ``Connection`` header names, and
forwards every other header as it came (``Authorization``, ``MCP-Protocol-Version``, ``Mcp-Method``,
``Mcp-Name``, ``Last-Event-ID``, ``traceparent``…). ``Mcp-Session-Id`` reaches the upstream only as the id
it issued itself (a transport session the gateway tagged): a session token, or any id the gateway did not
give out, never does. The upstream gets its own ``Host``; the gateway sets ``X-Forwarded-For`` (the peer's
address), ``X-Forwarded-Proto`` and ``X-Forwarded-Host`` (the client's ``Host``), and the client's own
``X-Forwarded-*``, ``Forwarded`` and ``X-Real-IP`` go on only from a proxy the operator trusts (the peer's
address then ends its ``X-Forwarded-For``). The conversation's stable id goes in W3C baggage as
``gen_ai.conversation.id``. The upstream never sees the
client's ``Host``, so the gateway checks ``Host`` and ``Origin`` itself, with the allow-lists and the rule of
the ``mcp`` SDK's DNS-rebinding protection. A ``Location`` or ``Content-Location`` on the upstream's own
origin (a redirect the upstream built from the ``Host`` it got, ``/mcp`` to ``/mcp/`` say) comes back as a
path on the gateway's, as nginx's ``proxy_redirect default`` has it: the client follows it through the
gateway, never around it. The origin is compared parsed (scheme, host and port, a default port as the
scheme's), never as a prefix of bytes; a URL with credentials in it is not rewritten. Nor is one whose path
would read as another host (``//evil.example/x``, ``/\\evil.example/x``: a browser takes both, and any tab in
them, for a URL of that host): it goes as the upstream sent it, an absolute URL on the upstream's host, as
Envoy passes every ``Location`` and nginx one it does not rewrite. Every other URL is the upstream's own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Final
from urllib.parse import SplitResult, quote, urlsplit, urlunsplit

from .._asgi import header
from .._verdict import Rejection
from .._wire.protocol import MCP_SESSION_ID_HEADER

Headers = list[tuple[bytes, bytes]]

LOCALHOST_HOSTS: Final = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOCALHOST_ORIGINS: Final = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")
HOP_BY_HOP: Final = frozenset(
    b"connection keep-alive proxy-connection proxy-authenticate proxy-authorization te trailer transfer-encoding "
    b"upgrade".split()
)
# Written again for the upstream: its own Host, the body's length, 100-continue (httpx sends the body at once).
_REWRITTEN: Final = HOP_BY_HOP | {b"host", b"content-length", b"expect"}
# A client's own say in who it is and how it came: from a proxy the operator trusts alone.
_FORWARDING: Final = frozenset({b"forwarded", b"x-real-ip"})
_FORWARDING_PREFIX: Final = b"x-forwarded-"
_URL_HEADERS: Final = frozenset({b"location", b"content-location"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_CONVERSATION_MEMBER: Final = b"gen_ai.conversation.id"
# A baggage value's octets (W3C baggage): anything else, and "%", percent-encoded.
_BAGGAGE_SAFE: Final = "!#$&'()*+-./:<=>?@[]^_`{|}~"


def _listed(headers: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """The header names the ``Connection`` header lists: hop-by-hop too."""
    names: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            names.update(token.strip().lower() for token in value.split(b","))
    return frozenset(names)


def upstream_headers(
    raw: Iterable[tuple[bytes, bytes]],
    *,
    client: str | None,
    scheme: str,
    transport_id: bytes | None,
    conversation: str | None,
    trace: Mapping[str, str],
    trusted: bool = False,
) -> Headers:
    """The request's end-to-end headers for the upstream, with the changes the module's docstring lists.

    ``client`` is the peer's address, ``trusted`` whether it is a proxy the operator trusts;
    ``transport_id`` is the one ``Mcp-Session-Id`` the upstream gets (the id the replica issued);
    ``trace`` replaces the client's trace headers (the gateway's span, when one records).
    """
    raw = list(raw)
    dropped = _REWRITTEN | _listed(raw) | {name.encode() for name in trace} | {MCP_SESSION_ID_HEADER}
    headers: Headers = []
    baggage: list[bytes] = []
    forwarded_for: list[bytes] = []
    host = None
    for name, value in raw:
        if name == b"host":
            host = value
        elif name in dropped or (not trusted and (name in _FORWARDING or name.startswith(_FORWARDING_PREFIX))):
            continue
        elif name == b"baggage":
            baggage.append(value)
        elif name == b"x-forwarded-for":
            forwarded_for.append(value)
        else:
            headers.append((name, value))
    if transport_id is not None:
        headers.append((MCP_SESSION_ID_HEADER, transport_id))
    headers.extend((name.encode(), value.encode("latin-1")) for name, value in trace.items())
    if conversation is not None or baggage:
        headers.append((b"baggage", _with_conversation(b",".join(baggage), conversation)))
    if client is not None:
        forwarded_for.append(client.encode("latin-1"))
    if forwarded_for:
        headers.append((b"x-forwarded-for", b", ".join(forwarded_for)))
    if header(headers, b"x-forwarded-proto") is None:
        headers.append((b"x-forwarded-proto", scheme.encode("latin-1")))
    if header(headers, b"x-forwarded-host") is None and host is not None:
        headers.append((b"x-forwarded-host", host))
    return headers


def _with_conversation(baggage: bytes, conversation: str | None) -> bytes:
    """The client's baggage, its own ``gen_ai.conversation.id`` replaced by the conversation's stable id."""
    if conversation is None:
        return baggage
    member = _CONVERSATION_MEMBER + b"=" + quote(conversation, safe=_BAGGAGE_SAFE).encode()
    kept = [m for m in baggage.split(b",") if m.strip() and m.partition(b"=")[0].strip() != _CONVERSATION_MEMBER]
    return b",".join([*kept, member])


def client_headers(raw: Iterable[tuple[bytes, bytes]], issued: Callable[[bytes], bytes | None], origin: str) -> Headers:
    """The upstream's end-to-end response headers for the client, names lower-cased as ASGI sends them.

    An ``Mcp-Session-Id`` (a transport session the replica issued) becomes ``issued(id)``, the id the
    gateway gives the client (its replica's tag, signed), or goes when that is ``None``; a ``Location``
    or ``Content-Location`` on ``origin``, the replica's, becomes its path (see the module).
    """
    raw = [(name.lower(), value) for name, value in raw]
    dropped = HOP_BY_HOP | _listed(raw)
    headers: Headers = []
    for name, value in raw:
        if name == MCP_SESSION_ID_HEADER:
            if (signed := issued(value)) is None:
                continue
            value = signed
        elif name in _URL_HEADERS:
            value = _on_gateway(value, urlsplit(origin))
        if name not in dropped:
            headers.append((name, value))
    return headers


def _on_gateway(value: bytes, origin: SplitResult) -> bytes:
    """``value``, a URL, as its path when it is on ``origin`` and that path reads as a path; else as it is."""
    try:
        url = urlsplit(value.decode("latin-1"))  # tabs and line breaks removed, as a browser removes them
        same = (url.scheme, url.hostname, _port(url)) == (origin.scheme, origin.hostname, _port(origin))
    except ValueError:  # a port that is no number
        return value
    if not same or url.username is not None or url.password is not None:
        return value
    path = urlunsplit(("", "", url.path or "/", url.query, url.fragment))
    if path[1:2] in ("/", "\\"):  # "//host", "/\\host": another host to a browser
        return value
    return path.encode("latin-1")


def _port(url: SplitResult) -> int | None:
    """The URL's port, its scheme's default when it names none."""
    return url.port or _DEFAULT_PORTS.get(url.scheme)


class HostCheck:
    """The gateway's own DNS-rebinding protection: ``Host`` and ``Origin`` against allow-lists.

    As the ``mcp`` SDK checks them: a ``Host`` must be on its list (``"example.com:*"`` allows any
    port), an ``Origin``, when there is one, on its. ``None`` is the SDK's default for a server on a
    loopback address (localhost names only); an empty list checks nothing.
    """

    __slots__ = ("_hosts", "_origins")

    def __init__(self, allowed_hosts: Collection[str] | None, allowed_origins: Collection[str] | None) -> None:
        if isinstance(allowed_hosts, str) or isinstance(allowed_origins, str):
            raise TypeError("allowed_hosts and allowed_origins take collections of strings, not one string")
        self._hosts = _AllowList(LOCALHOST_HOSTS if allowed_hosts is None else allowed_hosts)
        self._origins = _AllowList(LOCALHOST_ORIGINS if allowed_origins is None else allowed_origins)

    def check(self, headers: Iterable[tuple[bytes, bytes]]) -> Rejection | None:
        """The gateway's refusal of a request from a host or an origin it does not serve, else ``None``."""
        host, origin = header(headers, b"host"), header(headers, b"origin")
        if self._hosts and (host is None or not self._hosts.allows(host.decode("latin-1"))):
            return _plain(421, "Invalid Host header", "invalid_host")
        if self._origins and origin is not None and not self._origins.allows(origin.decode("latin-1")):
            return _plain(403, "Invalid Origin header", "invalid_origin")
        return None


class _AllowList:
    """Exact values, and ``base:*`` patterns that allow ``base:`` followed by anything."""

    __slots__ = ("_exact", "_prefixes")

    def __init__(self, values: Iterable[str]) -> None:
        self._exact = frozenset(values)
        self._prefixes = tuple(value[:-1] for value in self._exact if value.endswith(":*"))

    def __bool__(self) -> bool:
        return bool(self._exact)

    def allows(self, value: str) -> bool:
        return value in self._exact or value.startswith(self._prefixes)


def _plain(status: int, text: str, reason: str) -> Rejection:
    """A plain-text answer, as the SDK's transport security sends its refusals."""
    body = text.encode()
    return Rejection(status, ((b"content-length", str(len(body)).encode()),), body, reason)
