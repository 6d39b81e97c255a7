"""A TCP forwarder on loopback that can go silent, as a NAT or a load balancer does when it forgets a connection.

``silence()`` stops every connection open at that moment from forwarding, both ways, and keeps its
sockets open: no FIN, no RST, the bytes just stop, as after a NAT's idle timeout or with a lost host.
TCP keepalive would not notice for hours. Connections opened afterwards forward normally (a NAT
that dropped one flow still lets a new one through).

    async with Forwarder(redis.port) as forwarder:   # forwarder.url == "redis://127.0.0.1:<its port>/0"
        ...
        forwarder.silence()
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

__all__ = ["Forwarder"]

CHUNK = 65536


class Forwarder:
    """Forwards every connection to ``127.0.0.1:target_port`` from a port of its own, until :meth:`silence`."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.accepted = 0  # connections accepted so far; the first ``_silent_below`` of them are silent
        self._silent_below = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def silence(self) -> None:
        """Every connection open now forwards nothing more, either way, and is never closed by the forwarder."""
        self._silent_below = self.accepted

    async def __aenter__(self) -> Forwarder:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        for handler in list(self._handlers):
            handler.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number, self.accepted = self.accepted, self.accepted + 1
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        self._writers.append(writer)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            self._writers.append(upstream_writer)
            await asyncio.gather(
                self._pump(reader, upstream_writer, number), self._pump(upstream_reader, writer, number)
            )
        except OSError:
            writer.close()
        finally:
            self._handlers.discard(handler)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        """Copy one direction; a silenced connection reads and drops, and keeps the other side open."""
        with contextlib.suppress(OSError):
            while data := await reader.read(CHUNK):
                if number >= self._silent_below:
                    writer.write(data)
                    await writer.drain()
            if number >= self._silent_below:
                writer.close()  # the end, passed on
