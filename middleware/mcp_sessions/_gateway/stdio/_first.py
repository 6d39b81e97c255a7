"""A stdio server's process started in its place, and the gateway's first one started ahead: imports no ``mcp`` SDK.

:func:`spawn` is how every process starts (``_child.Child.run``, which then speaks MCP to it). :class:`FirstProcess`
starts the shared one (``_table.Table.running``'s first) as soon as the gateway knows its command and its sandbox,
while the gateway imports the modules that serve it (``_cli``, ``_lifecycle.Gateway``: the ``mcp`` SDK and its
pydantic models, about half a second of CPU): the server's own start (a node or Python interpreter loading its
modules) runs beside that import, where it came after it, and the shared child asks it ``initialize`` once the
gateway is built. ``/readyz`` still answers 200 only once it has answered.
"""

from __future__ import annotations

import os
import secrets
import signal
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, NamedTuple

import anyio
import anyio.abc

from .._config import StdioProcesses
from ..sealed._sandbox import Place, Sandbox, SandboxPolicy, reap_adopted

if TYPE_CHECKING:
    from starlette.types import ASGIApp


class NotStarted(Exception):
    """The server command could not be started (``error``, an ``OSError``) in its place (``place``, to be left)."""

    def __init__(self, place: Place, error: OSError) -> None:
        super().__init__(error.strerror or str(error))
        self.place = place


async def spawn(
    sandbox: Sandbox, command: Sequence[str], environ: Mapping[str, str], process_id: str, user: Sequence[str] | None
) -> tuple[Place, anyio.abc.Process]:
    """``command`` started in a new place of ``sandbox`` (``Sandbox.enter``) with ``environ``, in a process group of its
    own: the place and the process. ``SandboxError`` (``UidsInUse``) where no place is made, :class:`NotStarted`
    where the command could not be started."""
    place = await sandbox.enter(process_id, user)
    if sandbox.edge is not None:  # the masked credentials' proxy: its tunnels are made as its uid
        sandbox.edge.masks.placed(environ, place.uid)
    line, started_with, files = place.launch(command, {**environ, **place.environ})
    try:
        process = await anyio.open_process(
            line, env=started_with, cwd=place.workdir, start_new_session=True, pass_fds=files
        )
    except OSError as exc:
        raise NotStarted(place, exc) from None
    finally:
        for file in files:
            os.close(file)
    return place, process


class FirstProcess:
    """The shared process, started ahead (:meth:`run`, in the gateway's start, beside the import of what serves it)
    and taken by the shared child (:meth:`taken`), which initializes it, serves it and stops it as it would one it
    started itself. One never taken (the gateway's build failed, or a signal ended its start) is stopped by
    :meth:`aclose`, its place left. Only where the shared process is the gateway's first (no revision probe before
    it) and is no one's: no masked credentials, no ``--process-env`` values."""

    def __init__(self, sandbox: Sandbox, command: Sequence[str], environ: Mapping[str, str]) -> None:
        self.sandbox = sandbox
        self.command = list(command)
        self.environ = dict(environ)
        self.made = anyio.Event()
        self._started: tuple[Place, anyio.abc.Process] | None = None
        self._failed: BaseException | None = None
        self._taken = False

    async def run(self) -> None:
        """Its place made and its process started, or why not (said to the child that takes it)."""
        try:
            with anyio.CancelScope(shield=True):  # bounded (Sandbox.enter's steps), and never a place left behind
                shared = f"shared-{secrets.token_hex(4)}"
                self._started = await spawn(self.sandbox, self.command, self.environ, shared, None)
        except Exception as exc:  # the shared child's to say, as its own start's failure
            self._failed = exc
        finally:
            self.made.set()

    async def taken(self) -> tuple[Place, anyio.abc.Process]:
        """Its place and process, once made, for the shared child; what made neither raised again."""
        self._taken = True
        await self.made.wait()
        if self._failed is not None:
            raise self._failed
        assert self._started is not None
        return self._started

    async def aclose(self) -> None:
        """Once the gateway's start has ended: a process no child took is killed (it never served), its group reaped,
        its place left."""
        if self._taken or self._started is None:
            return
        place, process = self._started
        with anyio.CancelScope(shield=True):
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            reap_adopted(process.pid)
            await process.aclose()
            await place.leave()


class Ahead(NamedTuple):
    """A ``--stdio`` gateway built as it starts (``_lifecycle.Gateway``): its app made by ``build`` on a worker thread
    (the import of the ``mcp`` SDK), while ``first``, its shared process, starts beside it in the gateway's loop."""

    build: Callable[[], ASGIApp]
    first: FirstProcess


def starts_ahead(serves: StdioProcesses, policy: SandboxPolicy) -> bool:
    """Whether the shared process of ``serves``, run as ``policy`` says, starts ahead (:class:`FirstProcess`): where it
    is the gateway's first process (no revision probe before it: ``--processes`` given, or a uid each, which
    chooses a process per conversation) and is no one's (no ``--process-env`` values, nor masked ones, which the
    shared child's start gives it)."""
    if policy.masks or serves.process_env:
        return False
    return serves.processes != "auto" or policy.uids is not None
