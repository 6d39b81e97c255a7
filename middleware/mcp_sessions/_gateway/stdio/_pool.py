"""The processes of ``mcp-sessions gateway --stdio``: each made by a factory, every live one, and those started
ahead for new conversations (``--warm``).

:class:`Pool` makes and keeps them, as httpcore's pool makes its connections through one seam: ``factory`` is
:class:`Child` (a real process in its place), or a test's process in memory. Which conversation a process serves
is the table's (``_table``); how long it lives is ``serve``'s (``Lifetimes.serve``), each process in the
task group of :meth:`Pool.running`.
"""

from __future__ import annotations

import secrets
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import anyio.abc
from mcp.shared.exceptions import MCPError

from ...subscriptions import SessionSubscriptionBus
from ..auth._users import Credentials, ProcessEnv
from ._child import Child, ChildFactory, ChildProcess, ProcessOptions, _ignored, _no_client, _taken
from ._first import FirstProcess
from ._models import EndReason, Key, Owner, ProcessEvents, ProcessView
from ._relay import CHILD_EXITED, Conversation, Process


class Pool:
    """Every live process: the shared one, those started ahead (``warm`` of them, none for ``--process-env``,
    which a process started ahead could not know), and those conversations took; each with an id of its own,
    its ``MCP_SESSION_ID``, made by ``factory``."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        warm: int,
        environ: Mapping[str, str],
        max_line: int,
        options: ProcessOptions | None,
        process_env: ProcessEnv,
        bus: SessionSubscriptionBus,
        serve: Callable[[Process], Coroutine[Any, Any, None]],
        events: ProcessEvents,
        factory: ChildFactory = Child,
        first: FirstProcess | None = None,
    ) -> None:
        self.command = list(command)
        self.first = first  # the shared process started ahead, taken by the first shared child (start)
        self.warm_count = warm
        self.environ = dict(environ)
        self.options = options
        self.process_env = process_env
        self.bus = bus
        self.serve = serve  # each process's life (Lifetimes.serve)
        self.events = events
        # every process, the probe's too: Conversation.on_notification takes every notification first
        self.make = partial(factory, self.command, max_line=max_line, on_notify=_ignored, options=options)
        self.warm: deque[Process] = deque()  # started and initialized ahead, for new conversations and requests
        self.live: set[Process] = set()
        self.ends: Counter[str] = Counter()  # the processes ended, by their end's label: what the status shows
        self.tasks: anyio.abc.TaskGroup | None = None  # while the gateway runs (running)
        self.stopped = False  # once the gateway stops (running's end): no process is made after

    @asynccontextmanager
    async def running(self) -> AsyncIterator[anyio.abc.TaskGroup]:
        """The task group every process runs in while the gateway runs; cancelled at its end, which stops them."""
        async with anyio.create_task_group() as tasks:
            self.tasks = tasks
            if self.options is not None and self.options.edge is not None:
                tasks.start_soon(self.options.edge.serve)
            try:
                yield tasks
            finally:
                self.tasks = None
                self.stopped = True
                tasks.cancel_scope.cancel()  # each stops its process group, shielded (stop_group)

    def start(
        self,
        *,
        shared: bool = False,
        start_deadline: float | None = None,
        owner: Owner | None = None,
        credentials: Credentials | None = None,
    ) -> Process:
        """A new process, made and counted live, to be launched (:meth:`launch`: a decision makes it and names it in
        what it returns, ``Actions.start``; the I/O after runs it): the shared one, or one a conversation or a
        request takes (started ahead, or by the request that starts its conversation: with ``--process-env``, that
        user's ``credentials``; ``owner``'s, whose directory it is given, if she was authenticated)."""
        if self.stopped:
            raise MCPError(CHILD_EXITED, "the gateway is shutting down")
        values, digest = credentials or self.process_env.nobody  # none but a request's: none is started ahead then
        edge = None if self.options is None else self.options.edge
        masked = None
        if edge is not None:  # --process-env-mask: placeholders, and the proxy
            values, masked = edge.masks.give(values)
        process = None if shared else secrets.token_hex(8)
        first = None
        if shared:  # the first shared child's, once
            first, self.first = self.first, None
        environ = {**self.environ, **values, **({} if process is None else {"MCP_SESSION_ID": process})}
        started = Process(digest)
        started.masked = masked
        started.child = self.make(
            label="shared" if process is None else f"process {process}",
            environ=environ,
            on_request=started.on_request,
            on_progress=started.on_notification,
            start_deadline=start_deadline,
            user=None if owner is None or owner.identity[0] == "address" else owner.identity,
            first=first,
        )
        if shared:  # no one's conversation: every caller's lists, and with "shared" every request
            started.take(Conversation(Key("shared", ""), started.child, owner=None, bus=self.bus))
        self.live.add(started)
        return started

    def launch(self, starting: Iterable[Process]) -> None:
        """Run each process a decision made (:meth:`start`), in the task group of :meth:`running`; none once it has
        ended (the gateway stops): those are dropped, and the request that made them is told so."""
        starting = list(starting)
        tasks = self.tasks
        if tasks is None:
            if starting:
                self.live.difference_update(starting)
                raise MCPError(CHILD_EXITED, "the gateway is shutting down")
            return
        for process in starting:
            process.launch(tasks)
            tasks.start_soon(self.serve, process)
            self.events.started()

    async def revisions(self, start_deadline: float | None) -> ChildProcess:
        """A process of its own asked the revisions the server lists in its ``server/discover`` answer, then ended: a
        connection's first request decides its era, so a child that initializes cannot be asked. The probe's
        ``revisions`` (none for an error answer: the handshake's only), or its ``failure``: no answer in time, or it
        ended (a crash at its first request), with its ``last_words``."""
        probe = self.make(
            label="the revision probe",  # what its stderr says is said as its, not as a "revisions" list
            environ=self.environ,
            on_request=_no_client,
            on_progress=_taken,
            discover=True,
            start_deadline=start_deadline,
        )
        await probe.run()
        return probe

    def take(self, owner: Owner, credentials: Callable[[], Credentials]) -> Process:
        """A process for a new conversation, ``owner``'s: one started ahead (launched already), else one made now
        (to be launched), hers, with what her request gives it (``credentials``)."""
        return self.warm.popleft() if self.warm else self.start(owner=owner, credentials=credentials())

    def renew(self, masked: str, values: dict[str, str]) -> None:
        """With ``--process-env-mask``: the masked values of the process whose proxy token is ``masked``, as its
        conversation's latest request gives them (``values``: an exchanged token renewed), which the proxy puts in;
        the process sees none of it."""
        if self.options is not None and self.options.edge is not None:
            self.options.edge.masks.renew(masked, values)

    def fill(self, most: int | None = None) -> None:
        """Start processes ahead, up to ``warm`` (``most`` more at most): the table asks for it once the answer of
        the request that took one is sent (``Actions.refill``: a process start takes a core for most of a second)."""
        if self.tasks is None:  # not yet running (a decision tested alone), or stopped
            return
        wanted = self.warm_count - len(self.warm)
        started = [self.start() for _ in range(wanted if most is None else min(wanted, most))]
        self.warm.extend(started)
        self.launch(started)

    def ended(self, process: Process, why: EndReason) -> None:
        """``process`` has ended, for ``why``: it is no longer live, nor waiting to be taken."""
        self.live.discard(process)
        if self.options is not None and self.options.edge is not None:  # its masked values forgotten
            self.options.edge.masks.drop(process.masked)
        if process in self.warm:
            self.warm.remove(process)
        process.gone.set()
        self.ends[why.label] += 1
        self.events.ended(why)

    def views(self) -> list[ProcessView]:
        """Every live process, as the operator sees it: a snapshot, read only."""
        now = anyio.current_time()
        return [process.view(now) for process in self.live]

    def kinds(self) -> Counter[str]:
        """How many live processes of each kind: what the metrics read, on their own thread (so with no clock)."""
        return Counter(process.kind for process in list(self.live))
