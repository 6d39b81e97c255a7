"""The gateway's HTTPS proxy for its processes' masked credentials (``_masks``): one ``CONNECT`` a connection.

A ``CONNECT`` must carry a live process's proxy token (``Proxy-Authorization: Basic``, as every client sends the
password of its ``HTTPS_PROXY``), else 407. To a host a masked value of that process names, the proxy connects first
(TLS verified against the gateway's own roots: ``SSL_CERT_FILE`` of the gateway's environment where set), answers
200, terminates the process's TLS with its authority's certificate, then relays HTTP/1.1 with ``h11`` (uvicorn's and
httpx's parser) both ways, streaming: each request's head at most :data:`HEAD_LIMIT` bytes, read within
:data:`HEAD_WITHIN` seconds, ``TRACE`` and ``TRACK`` refused (they echo the head back), the hop-by-hop and
``Proxy-*`` headers dropped, and in the credential's headers (``Authorization``, and those its mask names) the
placeholder replaced by the value (inside an ``Authorization: Basic``'s decoded pair too); anywhere else (another
header, the target, the body) a placeholder stays one. Its answer comes back scrubbed (``_scrub``): the value, in its
head or its body however read, is the placeholder again (an API that echoes the request hands back no value); asked
for ``identity``, since a coded body could not be read (one coded anyway is refused, 502), and one cut before its end
ends the connection with nothing of a value's beginning sent. To any other host, an opaque tunnel from a socket the
kernel counts as the process's uid's (:func:`_socket_as`), so that its own rules judge the tunnel as they judge its
own connections: one set of rules, the kernel's; but for the masked hosts' addresses, refused to the process by
address alone, which a tunnel to another name that shares one (a CDN's) passes (its socket's mark). A plain HTTP
request (absolute form, from a process whose credential opted a host in: ``http://HOST[:PORT]``, its ``HTTP_PROXY``)
is relayed the same way, one a connection, its placeholders swapped for that host and port alone (to any other host,
from a socket of the process's uid too). A failure is an answer the client reads (400, 405, 431, 502 naming the
host), never a hang; nothing of a value, a placeholder or a token is logged. A tunnel to a masked host is its site's
alone (:func:`_bound`: 421 for a request that names another), and a connection is waited on for its proxy request a
bounded time, in bounded numbers (:class:`Edge`).
"""

from __future__ import annotations

import base64
import binascii
import ctypes
import errno
import logging
import os
import socket
import ssl
import traceback
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Final

import anyio
import anyio.abc
import h11
from anyio.streams.tls import TLSStream

from ..._wire import printable
from ._masks import PROXY_USER, Masks, Swap
from ._network import TUNNEL_MARK
from ._scrub import Scrub

HEAD_LIMIT: Final = 65536
HEAD_WITHIN: Final = 30.0
"""A request's head in a tunnel, whole, from the end of the last (an idle kept-alive tunnel's life)."""
ASKING_WITHIN: Final = 10.0
"""A connection's proxy request (its ``CONNECT`` and password), whole, from accept: nginx's
``client_header_timeout`` is 60 s for a server of browsers; a process's client sends its head at once."""
ASKING_PER_ADDRESS: Final = 64
"""The connections of one address (one process: each has its own on its link) before their password: each holds
a socket of the gateway's, which none of the process's own bounds counts."""
ASKING: Final = 256
"""The connections of every process together before their password."""
CONNECT_WITHIN: Final = 15.0
TUNNELS: Final = 64
"""A process's connections through the proxy at once: each holds two of the gateway's sockets, which none of the
process's own bounds counts."""
_CHUNK: Final = 65536
# RFC 9110 section 7.6.1's, and the proxy's own; Content-Length and Transfer-Encoding frame the body (h11 reframes).
_HOP: Final = frozenset({b"connection", b"keep-alive", b"te", b"trailer", b"upgrade", b"proxy-connection"})
_WHOLE: Final = frozenset({b"accept-encoding", b"range", b"if-range"})
"""The request headers a masked host's answer would come coded or in part by: dropped (``identity`` asked)."""
logger = logging.getLogger("mcp_sessions.gateway")
_LIBC: Final = ctypes.CDLL(None, use_errno=True)


class Edge:
    """The proxy: ``masks`` say whose values go where, and as whose uid an opaque tunnel connects; a connection
    sends its proxy request within ``asking_within`` seconds of accept, and at most ``asking_per_address`` of an
    address and ``asking`` of all are waited for at once (one past them is closed as it is accepted)."""

    def __init__(
        self,
        masks: Masks,
        listening: socket.socket,
        *,
        asking_within: float = ASKING_WITHIN,
        asking_per_address: int = ASKING_PER_ADDRESS,
        asking: int = ASKING,
    ) -> None:
        self.masks = masks
        self.listening = listening
        self.asking_within = asking_within
        self.asking_per_address = asking_per_address
        self.asking = asking
        self.tunnels: Counter[str] = Counter()  # a process's proxy token: its connections open now
        self.waiting: Counter[str] = Counter()  # an address: its connections whose proxy request is not whole yet
        upstream = ssl.create_default_context()
        upstream.set_alpn_protocols(["http/1.1"])
        self.upstream = upstream

    async def serve(self) -> None:
        """Each connection to ``listening`` served, until cancelled."""
        listener = await anyio.abc.SocketListener.from_socket(self.listening)
        await listener.serve(self.connection)

    async def connection(self, client: anyio.abc.SocketStream) -> None:
        """One connection of a process's, served; whatever fails in it ends it alone, never the proxy (nor the
        gateway, whose task group runs it), logged by its kind and place, never its message (a value may be in it)."""
        async with client:
            try:
                down = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_LIMIT)
                if (asked := await self._asked(down, client)) is not None:
                    await self._connection(down, client, asked)
            except (anyio.BrokenResourceError, anyio.EndOfStream, anyio.ClosedResourceError, OSError):
                pass
            except Exception as exc:
                where = traceback.extract_tb(exc.__traceback__)[-1]
                logger.warning(
                    "the credentials' proxy: a connection ended on %s (%s:%d)",
                    type(exc).__name__,
                    Path(where.filename).name,
                    where.lineno or 0,
                )

    async def _asked(self, down: h11.Connection, client: anyio.abc.SocketStream) -> h11.Request | None:
        """The proxy request of ``client``, just accepted, read whole within :attr:`asking_within`; None where it
        is not (a 400 sent), or where its address's connections waiting for theirs, or all of them, are at their
        bound: then it is closed at once, before a byte is read. A process held 2,500 idle connections 30 s each
        before its password was asked (issue 100): the descriptors are the gateway's, which none of its bounds
        counts."""
        address = client.extra(anyio.abc.SocketAttribute.remote_address)  # noqa: S610 - anyio's, not Django's
        source = str(address[0] if isinstance(address, tuple) else address)
        if self.waiting[source] >= self.asking_per_address or self.waiting.total() >= self.asking:
            return None
        self.waiting[source] += 1
        try:
            with anyio.fail_after(self.asking_within):
                asked = await _next(down, client)
        except (TimeoutError, h11.RemoteProtocolError):
            asked = None
        finally:
            self.waiting[source] -= 1
            if not self.waiting[source]:
                del self.waiting[source]
        if asked is None:
            await _refuse(down, client, 400, "a proxy request's head, whole, in time")
        return asked if isinstance(asked, h11.Request) else None

    async def _connection(self, down: h11.Connection, client: anyio.abc.SocketStream, asked: h11.Request) -> None:
        plain = asked.method != b"CONNECT"
        if plain and asked.target[:7].lower() != b"http://":
            return await _refuse(down, client, 405, "this proxy takes CONNECT (HTTPS) and http:// URLs alone")
        token, swaps = self._swaps(asked)
        if swaps is None:
            return await _refuse(down, client, 407, "a live process's proxy password", proxy=True)
        if self.tunnels[token] >= TUNNELS:
            return await _refuse(down, client, 429, f"at most {TUNNELS} connections of a process at once")
        self.tunnels[token] += 1
        try:
            await (self._plain if plain else self._tunnel)(down, client, asked, token, swaps)
        finally:
            self.tunnels[token] -= 1
            if not self.tunnels[token]:
                del self.tunnels[token]
        return None

    async def _tunnel(
        self,
        down: h11.Connection,
        client: anyio.abc.SocketStream,
        asked: h11.Request,
        token: str,
        swaps: tuple[Swap, ...],
    ) -> None:
        """The ``CONNECT`` ``asked`` of the process whose proxy token is ``token`` and values ``swaps``: to its host,
        swapped or opaque."""
        host, _, port_text = asked.target.decode("ascii", "replace").rpartition(":")
        host = host.strip("[]").lower().removesuffix(".")
        if not (host and port_text.isdigit() and 0 < int(port_text) < 65536):
            return await _refuse(down, client, 400, "CONNECT HOST:PORT")
        port = int(port_text)
        mine = tuple(swap for swap in swaps if (host, port) in swap.hosts)
        upstream = await self._upstream(host, port, token, tls=bool(mine))
        if upstream is None:
            return await _refuse(down, client, 502, f"{printable(host)}:{port} could not be reached")
        async with upstream:
            await _send(down, client, h11.Response(status_code=200, headers=[]))
            early, _ = down.trailing_data
            if early:  # nothing is sent before the tunnel is open: a client that does is no client of ours
                return None
            if not mine:
                return await _tunnel(client, upstream)
            tls = await TLSStream.wrap(
                client, server_side=True, ssl_context=self.masks.authority.context(host), standard_compatible=False
            )
            await _relay(tls, upstream, mine, host, port)

    async def _plain(
        self,
        down: h11.Connection,
        client: anyio.abc.SocketStream,
        asked: h11.Request,
        token: str,
        swaps: tuple[Swap, ...],
    ) -> None:
        """The plain HTTP request ``asked`` (absolute form, through ``HTTP_PROXY``) of the process whose proxy token
        is ``token`` and values ``swaps``: to its host, each placeholder swapped where a credential opted that host
        and port in (``http://HOST[:PORT]``), else as it came; one request a connection."""
        try:  # a bracket left open, a port out of range
            url = urllib.parse.urlsplit(asked.target.decode("ascii", "replace"))
            host = (url.hostname or "").removesuffix(".")
            port = url.port or 80
        except ValueError:
            return await _refuse(down, client, 400, "an absolute http://HOST[:PORT]/PATH")
        if not host:
            return await _refuse(down, client, 400, "an absolute http://HOST[:PORT]/PATH")
        if asked.method in (b"TRACE", b"TRACK"):
            return await _refuse(down, client, 405, "TRACE and TRACK echo the request back: refused")
        mine = tuple(swap for swap in swaps if (host, port) in swap.plain)
        upstream = await self._upstream(host, port, token, masked=bool(mine))
        if upstream is None:
            return await _refuse(down, client, 502, f"{printable(host)}:{port} could not be reached")
        # the request built from the URL's parts: its path, and the Host it names (never its user and password)
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        named: list[tuple[bytes, bytes]] = [(b"host", url.netloc.rpartition("@")[2].encode())]
        headers = named + [(name, value) for name, value in asked.headers if name != b"host"]
        request = h11.Request(method=asked.method, target=target, headers=headers)
        async with upstream:
            up = h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_LIMIT)
            await _exchange(down, client, up, upstream, request, mine, closing=True)
        return None

    def _swaps(self, asked: h11.Request) -> tuple[str, tuple[Swap, ...] | None]:
        """The token the request carries and the swaps of its process; None for no live one's."""
        for name, value in asked.headers:
            if name == b"proxy-authorization" and value[:6].lower() == b"basic ":
                with suppress(binascii.Error, ValueError):
                    user, _, token = base64.b64decode(value[6:].strip(), validate=True).decode().partition(":")
                    if user == PROXY_USER:
                        return token, self.masks.swaps.get(token)
        return "", None

    async def _upstream(
        self, host: str, port: int, token: str, *, tls: bool = False, masked: bool = False
    ) -> anyio.abc.ByteStream | None:
        """A connection to ``host``: TLS verified for a masked host's, as the name resolves; plain to a host a
        credential opted in for plain HTTP (``masked``); else an opaque one, as the uid of the process whose proxy
        token is ``token``, which its rules judge."""
        try:
            with anyio.fail_after(CONNECT_WITHIN):
                if tls:
                    return await anyio.connect_tcp(
                        host, port, ssl_context=self.upstream, tls_hostname=host, tls_standard_compatible=False
                    )
                if masked:
                    return await anyio.connect_tcp(host, port)
                return await self._opaque(host, port, token)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            reached = printable(host)
            logger.info("mcp-sessions gateway: the proxy could not reach %s:%d: %s", reached, port, type(exc).__name__)
        return None

    async def _opaque(self, host: str, port: int, token: str) -> anyio.abc.SocketStream:
        """A connection to the first address of ``host`` that takes it, from a socket of the uid the process of
        ``token`` runs as (:meth:`Masks.placed`), connected only while that process holds it: its uid given back
        (and let go of the rules) meanwhile, the tunnel is not made."""
        failed = OSError(errno.EHOSTUNREACH, "no address")
        for family, _, _, _, address in await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            if (uid := self.masks.uids.get(token)) is None:
                raise OSError(errno.EPERM, "the process holds no uid")
            made = await anyio.to_thread.run_sync(_socket_as, uid, family)
            try:
                if self.masks.uids.get(token) != uid:
                    raise OSError(errno.EPERM, "the process ended")
                made.setblocking(False)
                with suppress(BlockingIOError):
                    made.connect(address)  # its SYN judged now, while the uid is the process's
                await anyio.wait_writable(made)
                if code := made.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    raise OSError(code, os.strerror(code))
                return await anyio.abc.SocketStream.from_socket(made)
            except BaseException as exc:  # cancelled too (its time is up): the socket is closed all the same
                made.close()
                if not isinstance(exc, OSError):
                    raise
                failed = exc
        raise failed


def _socket_as(uid: int, family: int) -> socket.socket:
    """A TCP socket of ``family`` whose owner is ``uid``: the kernel makes a socket its thread's filesystem uid's,
    which nftables' ``meta skuid`` reads. Run on a worker thread: the filesystem uid is the calling thread's alone
    (Linux's ``setfsuid``, which glibc sets on that thread only), so the gateway's other threads never act as
    ``uid``, and the event loop's thread, where Python's signal handlers run, is never that uid's. Marked
    :data:`~._network.TUNNEL_MARK`: it tunnels to a name no mask names, which the masked hosts' refusal, by address,
    never judges (a CDN's address a masked host shares); the process's own grants do."""
    previous = _LIBC.setfsuid(uid)
    try:
        if _LIBC.setfsuid(-1) != uid:  # -1 is no uid: the call changes nothing and says the current one
            raise OSError(errno.EPERM, "the gateway cannot act as a process's uid (it is not root)")
        made = socket.socket(family, socket.SOCK_STREAM)
    finally:
        _LIBC.setfsuid(previous)
    try:  # as root (CAP_NET_ADMIN): the masked hosts' refusal passes over it, the process's grants judge it
        made.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, TUNNEL_MARK)
    except OSError:
        made.close()
        raise
    return made


async def _relay(
    client: TLSStream, server: anyio.abc.ByteStream, swaps: tuple[Swap, ...], host: str, port: int
) -> None:
    """HTTP/1.1 requests of ``client`` to ``server`` (the tunnel's ``host`` and ``port``), each head's placeholders
    swapped, until either ends; one that names another site is refused (:func:`_bound`)."""
    down = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_LIMIT)
    up = h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_LIMIT)
    while True:
        try:
            with anyio.fail_after(HEAD_WITHIN):
                asked = await _next(down, client)
        except TimeoutError:
            return None
        except h11.RemoteProtocolError as exc:
            status = 431 if "too long" in str(exc) else 400
            return await _refuse(down, client, status, "a request's head, whole, within 64 KiB")
        if not isinstance(asked, h11.Request):
            return None
        if asked.method in (b"TRACE", b"TRACK"):
            return await _refuse(down, client, 405, "TRACE and TRACK echo the request back: refused")
        if (request := _bound(asked, host, port)) is None:
            return await _refuse(down, client, 421, f"this tunnel is {host}:{port}'s: a request for it alone")
        if not await _exchange(down, client, up, server, request, swaps):
            return None
        down.start_next_cycle()
        up.start_next_cycle()


def _bound(asked: h11.Request, host: str, port: int) -> h11.Request | None:
    """``asked`` as it goes to the tunnel's ``host`` and ``port``: its target in origin form, its ``Host`` theirs; None
    where its ``Host`` or its absolute target names another site (a CDN's, a load balancer's other virtual host,
    which would get the value: RFC 9110's 421 Misdirected Request) or its target is of no request's form. The
    process's TLS server name was checked as its handshake was (``_masks.Authority.context``)."""
    target = asked.target
    if target[:8].lower() == b"https://":
        url = urllib.parse.urlsplit(target.decode("ascii", "replace"))
        if not _names(url.netloc, host, port):
            return None
        target = ((url.path or "/") + (f"?{url.query}" if url.query else "")).encode()
    elif not (target[:1] == b"/" or (target == b"*" and asked.method == b"OPTIONS")):
        return None
    if not all(
        _names(value.decode("ascii", "replace"), host, port) for name, value in asked.headers if name == b"host"
    ):
        return None
    authority = (host if port == 443 else f"{host}:{port}").encode()
    headers = [(b"host", authority), *((name, value) for name, value in asked.headers if name != b"host")]
    return h11.Request(method=asked.method, target=target, headers=headers, http_version=asked.http_version)


def _names(netloc: str, host: str, port: int) -> bool:
    """Whether the authority ``netloc`` (a ``Host``'s, an absolute target's) is ``host`` and ``port`` (443 unless
    it says another: the tunnel is HTTPS), and nothing else (no user)."""
    try:
        url = urllib.parse.urlsplit(f"//{netloc}")
        named = (url.hostname or "").removesuffix("."), url.port or 443
    except ValueError:  # a port out of range, a bracket left open
        return False
    return "@" not in netloc and named == (host, port)


async def _exchange(
    down: h11.Connection,
    client: anyio.abc.ByteStream,
    up: h11.Connection,
    server: anyio.abc.ByteStream,
    asked: h11.Request,
    swaps: tuple[Swap, ...],
    *,
    closing: bool = False,
) -> bool:
    """The request ``asked`` (its head's placeholders swapped, its body as it comes) to ``server``, and its answer
    (``closing``: telling the client the connection ends with it) back, scrubbed of the values swapped in
    (:func:`_scrubbing`): whether both ended whole."""
    kept = list(_kept(asked.headers))
    headers = [(name, _swapped(name, value, swaps)) for name, value in kept]
    scrub = _scrubbing(kept, headers, swaps)
    if swaps:  # an answer whole and uncoded, which the scrub reads: no part of one (a value cut in two), no gzip
        headers = [(name, value) for name, value in headers if name not in _WHOLE] + [(b"accept-encoding", b"identity")]
    await _send(up, server, h11.Request(method=asked.method, target=asked.target, headers=headers))
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_body, down, client, up, server, tasks)
            await _answer(up, server, down, client, tasks, scrub, closing)
    except h11.ProtocolError:
        return False
    return all(state is h11.DONE for state in (down.our_state, up.our_state, down.their_state, up.their_state))


def _scrubbing(
    asked: Sequence[tuple[bytes, bytes]], sent: Sequence[tuple[bytes, bytes]], swaps: tuple[Swap, ...]
) -> Scrub:
    """The scrub of an answer to a request whose headers were ``asked`` and went as ``sent``: each value back to its
    placeholder, and each ``Authorization: Basic`` pair the proxy encoded again back to the process's own (an echo
    of the header hands back the pair as sent, whose base64 holds the value)."""
    pairs = [(swap.value.encode(), swap.placeholder.encode()) for swap in swaps]
    for (name, mine), (_, theirs) in zip(asked, sent, strict=True):
        if name == b"authorization" and mine != theirs and theirs[:6].lower() == b"basic ":
            pairs.append((theirs[6:].strip(), mine[6:].strip()))
    return Scrub(pairs)


async def _body(
    down: h11.Connection,
    client: anyio.abc.ByteStream,
    up: h11.Connection,
    server: anyio.abc.ByteStream,
    tasks: anyio.abc.TaskGroup,
) -> None:
    """The request's body and its end, from the client to the server, as it comes; a client gone before its end
    ends the exchange (the server would wait for the rest)."""
    while True:
        event = await _next(down, client)
        if isinstance(event, h11.Data | h11.EndOfMessage):
            await _send(up, server, event)
        if not isinstance(event, h11.Data):
            if not isinstance(event, h11.EndOfMessage):
                tasks.cancel_scope.cancel()
            return


async def _answer(
    up: h11.Connection,
    server: anyio.abc.ByteStream,
    down: h11.Connection,
    client: anyio.abc.ByteStream,
    tasks: anyio.abc.TaskGroup,
    scrub: Scrub,
    closing: bool = False,
) -> None:
    """The server's answer, from it to the client, as it comes, scrubbed: its head's hop-by-hop headers dropped,
    each value in its head and body replaced by its placeholder (its ``Content-Length`` dropped where that changes
    the body's length: h11 frames it as the client's version allows). One coded anyway (``Content-Encoding``,
    asked for ``identity``) is refused (502): its value could not be seen. One cut before its end (h11's
    ``RemoteProtocolError``) never sends what the scrub holds, which may begin a value: the exchange ends with it,
    and so the client's connection (it was once raised in a group, past ``_exchange``, and logged as unforeseen)."""
    while True:
        try:
            event = await _next(up, server)
        except h11.RemoteProtocolError:  # cut (or no HTTP): the exchange ends, what the scrub holds goes nowhere
            tasks.cancel_scope.cancel()
            return
        if isinstance(event, h11.InformationalResponse | h11.Response):
            kept = [(name, scrub.field(value)) for name, value in _kept(event.headers)]
            if isinstance(event, h11.Response) and scrub.pairs:
                if any(name == b"content-encoding" and value.strip().lower() != b"identity" for name, value in kept):
                    await _refuse(down, client, 502, "a masked host's answer came coded (gzip): it was not scrubbed")
                    tasks.cancel_scope.cancel()
                    return
                if not scrub.same_length:
                    kept = [(name, value) for name, value in kept if name != b"content-length"]
            if closing and isinstance(event, h11.Response):
                kept.append((b"connection", b"close"))
            kind = type(event)
            event = kind(status_code=event.status_code, headers=kept, reason=scrub.field(event.reason))
        elif isinstance(event, h11.Data):
            if not (sent := scrub.read(event.data)):  # all of it held: it may begin a value
                continue
            event = h11.Data(data=sent)
        elif isinstance(event, h11.EndOfMessage):
            if rest := scrub.end():
                await _send(down, client, h11.Data(data=rest))
            event = h11.EndOfMessage(headers=[(name, scrub.field(value)) for name, value in event.headers])
        if not isinstance(event, h11.Event) or isinstance(event, h11.ConnectionClosed):  # h11.PAUSED is no event
            tasks.cancel_scope.cancel()
            return
        await _send(down, client, event)
        if isinstance(event, h11.EndOfMessage):
            if down.their_state is not h11.DONE:  # an answer before the request's end: the connection ends with it
                tasks.cancel_scope.cancel()
            return


def _kept(headers: Sequence[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
    """``headers`` but the hop-by-hop ones, those ``Connection`` names, and the ``Proxy-*``."""
    named = {word.strip().lower() for name, value in headers if name == b"connection" for word in value.split(b",")}
    for name, value in headers:
        if name not in _HOP and name not in named and not name.startswith(b"proxy-"):
            yield name, value


def _swapped(name: bytes, value: bytes, swaps: tuple[Swap, ...]) -> bytes:
    """``value`` of the header ``name`` with the placeholder of each swap that goes in that header (``Authorization``,
    and those its mask names) replaced by its value, in an ``Authorization: Basic``'s pair too; in any other header
    a placeholder stays one (a header an API echoes back, or logs, never carries the value)."""
    carried = [swap for swap in swaps if name in swap.headers]
    for swap in carried:
        value = value.replace(swap.placeholder.encode(), swap.value.encode())
    if carried and name == b"authorization" and value[:6].lower() == b"basic ":
        with suppress(binascii.Error, ValueError):
            pair = base64.b64decode(value[6:].strip(), validate=True).decode()
            for swap in carried:
                pair = pair.replace(swap.placeholder, swap.value)
            value = value[:6] + base64.b64encode(pair.encode())
    return value


async def _tunnel(client: anyio.abc.ByteStream, server: anyio.abc.ByteStream) -> None:
    """Bytes both ways, as they come, until either side ends."""

    async def pump(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream, tasks: anyio.abc.TaskGroup) -> None:
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            async for chunk in source:
                await sink.send(chunk)
        tasks.cancel_scope.cancel()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(pump, client, server, tasks)
        tasks.start_soon(pump, server, client, tasks)


async def _next(connection: h11.Connection, stream: anyio.abc.ByteStream) -> h11.Event | type[h11.PAUSED]:
    """``connection``'s next event (or ``h11.PAUSED``), reading ``stream`` as it needs."""
    while (event := connection.next_event()) is h11.NEED_DATA:
        try:
            data = await stream.receive(_CHUNK)
        except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError):
            data = b""
        connection.receive_data(data)
    return event  # type: ignore[return-value]  # NEED_DATA is not: mypy narrows no sentinel class (httpcore's too)


async def _send(connection: h11.Connection, stream: anyio.abc.ByteStream, event: h11.Event) -> None:
    if (data := connection.send(event)) is not None:
        await stream.send(data)


async def _refuse(
    connection: h11.Connection, stream: anyio.abc.ByteStream, status: int, why: str, *, proxy: bool = False
) -> None:
    """A short answer the client reads (``why``), if the connection may still answer, then its end."""
    if connection.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return None
    body = f"mcp-sessions gateway proxy: {why}\n".encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    headers.append((b"connection", b"close"))
    if proxy:
        headers.append((b"proxy-authenticate", b'Basic realm="mcp-sessions"'))
    with suppress(h11.LocalProtocolError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await _send(connection, stream, h11.Response(status_code=status, headers=headers))
        await _send(connection, stream, h11.Data(data=body))
        await _send(connection, stream, h11.EndOfMessage())
