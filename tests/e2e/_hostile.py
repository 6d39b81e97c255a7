"""Hostile HTTP servers for the conformance pack and ``mcp-sessions create``: raw asyncio, on a loopback port.

A :func:`raw_server` reads each request (its head and its ``Content-Length`` body), records it, and
lets a handler write whatever bytes it likes back, then closes the connection: a redirect to another
origin, a gzip bomb, headers dripped a byte at a time, control characters in an error. What the
server received is in ``received``, so a test can say what reached it (nothing, for another origin).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import re
import socket
import subprocess
import threading
import zlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

EVIL = "\x1b]0;pwned\x07\x1b[2J\u009b31mred\u202etxt\x7f\x00\rforged line"
"""An OSC window title, a screen clear, a C1 CSI, a bidi override, DEL, NUL, and a carriage return."""
_FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
MAX_HEAD = 64 * 1024


def forbidden(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on: C0 but newline and tab, DEL, C1."""
    return sorted(set(_FORBIDDEN.findall(text)))


@dataclass(frozen=True)
class Request:
    """One request as the server read it: the head (request line and headers) and the body."""

    head: bytes
    body: bytes
    reader: asyncio.StreamReader | None = field(default=None, compare=False, repr=False)
    """The rest of the connection, for a handler that waits for the client to leave."""

    @property
    def message(self) -> Any:
        """The JSON body (``None`` if it is none)."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


Handler = Callable[[Request, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class RawServer:
    """A server on ``url`` that answers with ``handler`` and keeps each request it read."""

    handler: Handler
    url: str = ""
    received: list[Request] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            body = await reader.readexactly(int(length.group(1))) if length else b""
            request = Request(head, body, reader)
            self.received.append(request)
            await self.handler(request, writer)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # the client went away, as a careful client does
        finally:
            writer.close()


@contextlib.contextmanager
def raw_server(handler: Handler) -> Iterator[RawServer]:
    """``handler``'s server on 127.0.0.1 (a free port), its event loop in a thread; stopped when the block ends."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = RawServer(handler)
    tasks: set[asyncio.Task[None]] = set()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await server.serve(reader, writer)
        finally:
            tasks.discard(task)

    async def start() -> asyncio.Server:
        return await asyncio.start_server(accept, "127.0.0.1", 0, limit=MAX_HEAD)

    listening = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    server.url = f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}"

    async def stop() -> None:
        listening.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await listening.wait_closed()

    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@dataclass
class ResettingServer:
    """A server on ``url`` that resets each connection with its request unread; ``resets`` counts them."""

    url: str
    resets: int = 0


@contextlib.contextmanager
def resetting_server(most: int = 8) -> Iterator[ResettingServer]:
    """A server on 127.0.0.1 (a free port), in a thread, that closes each connection (``most`` at most) once a
    request has come on it, unread, as a stopping server closes a connection it accepted and has not read from: the
    kernel answers the client with a reset (RFC 1122 §4.2.2.13). Stopped when the block ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    server = ResettingServer(f"http://127.0.0.1:{listener.getsockname()[1]}")

    def reset_each() -> None:
        for _ in range(most):
            try:
                connection, _peer = listener.accept()
            except OSError:  # the block ended: the listener shut
                return
            with connection:
                connection.settimeout(10)
                with contextlib.suppress(OSError):
                    connection.recv(1, socket.MSG_PEEK)  # the request has come, and stays unread
                server.resets += 1  # before the close: the client hears of it after

    thread = threading.Thread(target=reset_each, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        listener.close()
        thread.join(10)


def response(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    """A whole HTTP/1.1 response, closing the connection."""
    lines = [f"HTTP/1.1 {status} Hostile", f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def gzip_bomb(decoded: int, layers: int = 2) -> bytes:
    """``decoded`` bytes of spaces gzipped ``layers`` times (``Content-Encoding: gzip, gzip``): twice, 512 MiB
    take about a kilobyte; once, half a megabyte."""
    inner = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b" " * (1 << 20)
    coded = b"".join(inner.compress(block) for _ in range(decoded >> 20)) + inner.flush()
    for _ in range(layers - 1):
        coded = gzip.compress(coded, 9)
    return coded


async def drip(writer: asyncio.StreamWriter, data: bytes, pause: float) -> None:
    """``data`` a byte at a time, ``pause`` seconds apart (until the client leaves)."""
    for byte in data:
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(pause)


def ran(command: Sequence[str], timeout: float = 120.0) -> tuple[int, str]:
    """``command`` run to its end: its exit status and what it printed (both streams)."""
    done = subprocess.run(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    return done.returncode, done.stdout.decode(errors="replace")


def asked_for_no_coding(request: Request) -> bool:
    """Whether ``request`` said it takes no content coding (``Accept-Encoding: identity``)."""
    return re.search(rb"(?im)^accept-encoding:[ \t]*identity[ \t]*\r?$", request.head) is not None
