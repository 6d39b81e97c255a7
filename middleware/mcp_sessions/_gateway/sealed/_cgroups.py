"""The control groups that bound a stdio gateway's conversations (``--process-memory``, ``--process-pids``,
``--process-cpu``): one per process, under the gateway's own cgroup v2 (its controllers delegated), else under its
own cgroup in each cgroup v1 hierarchy a bound needs; and the kernel's counts of what a group reached. Finding them
only reads; the gateway's first process readies them."""

from __future__ import annotations

import fcntl
import os
import resource
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Final, Literal

import anyio
import anyio.to_thread

from ._kernel import locked

_POLL: Final = 0.05
_SMALL: Final = 4096
BOUNDS_POLL: Final = 0.5
"""How often the live processes' control groups are asked whether they reached a bound (:meth:`Cgroups.reached`)."""
Bound = Literal["memory", "pids"]
"""Which bound a conversation's processes reached (``--process-memory``, ``--process-pids``)."""

CPU_PERIOD: Final = 100_000
"""The period (µs) of a conversation's CPU quota: ``--process-cpu N`` is N times it in each."""
TCP_SHARE: Final = 4
"""Under cgroup v1, which counts a process's TCP buffers apart from its memory, they get a ``TCP_SHARE``-th of
``--process-memory`` and the rest is its memory's: what it may pin is within its bound, as under v2."""
_OWN: Final = "gateway"
"""The last part of the name of a gateway's own group in each parent (``mcp-sessions-PID-RUN-gateway``), which it
holds a lock on (``flock``) while it lives: the other groups of its run are a dead gateway's only once no one holds
it. No pid can tell: a gateway in a PID namespace of its own sees no other's pid, and its own may be another's."""


@dataclass(frozen=True)
class Bounds:
    """What the operator's bounds ask of each process (``--process-memory``, ``--process-pids``, ``--process-cpu``),
    and where the gateway may create a control group per process to hold them: under its own cgroup v2
    (``version`` 2: one directory), else under its own cgroup in each v1 hierarchy it needs. A value, found once
    (:meth:`found`); the groups themselves are :class:`Cgroups`', made as the gateway runs."""

    version: int
    parents: tuple[Path, ...]
    memory: int | None = None
    pids: int | None = None
    cpu: float | None = None
    # The processes' memory together (v1: the gateway's own group's, which theirs are in), so that the host keeps the
    # rest however many run; None: unbounded together (v2, where the gateway runs in its own group, a leaf).
    together: int | None = None

    @classmethod
    def found(cls, memory: int | None, pids: int | None, cpu: float | None = None) -> Bounds | None:
        """The gateway's own control groups that can bound ``memory``, ``pids`` and ``cpu`` (cores); None when this
        host gives it none (not root, or read-only as in most containers). Only reads: the kernel's ``access(2)``
        says whether the gateway may write there; nothing is made, nothing moved."""
        wanted = _controllers(memory, pids, cpu)
        if not wanted:
            return None
        v2 = own()
        if v2 is not None and _delegated(v2, wanted):
            return cls(2, (v2,), memory, pids, cpu)
        parents = [parent for name in wanted if (parent := own(name)) and _writable(parent)]
        if len(parents) == len(wanted):
            return cls(1, tuple(parents), memory, pids, cpu)
        return None

    @property
    def said(self) -> str:
        parents = ", ".join(str(parent) for parent in self.parents)
        # The kernel's switch that leaves socket buffers out of cgroup v2's memory: then nothing bounds them.
        if self.version == 2 and "cgroup.memory=nosocket" in read("/proc/cmdline").split():
            parents += "; socket buffers uncounted: cgroup.memory=nosocket"
        if self.together is not None:  # in their parent's words: its own group's
            parents += f"; {self.together >> 20} MiB together"
        memory = "" if self.memory is None else f", memory {self.memory >> 20} MiB each"
        return f"cgroup v{self.version} ({parents}){memory}"

    def told(self, bound: Bound) -> str:
        """What a process's start that ``bound`` ended says of it: the bound, and the flag that raises it."""
        if bound == "memory":
            return f"it was killed over its memory bound, {(self.memory or 0) >> 20} MiB: raise --process-memory"
        return f"it reached its process bound, {self.pids}: raise --process-pids"


@dataclass
class Cgroups:
    """The gateway's control groups as it runs, under ``bounds``' parents: its own group in each, locked while it
    lives, and a group per process, its bounds written."""

    bounds: Bounds
    # The parents readied for its processes (:meth:`_ready`), at the first; its own groups' locks held from then on.
    ready: bool = field(default=False, init=False)
    locks: list[int] = field(default_factory=list, init=False)
    # Its groups' names: mcp-sessions-PID-RUN-N, RUN its own (two gateways that are each the first process of a PID
    # namespace of their own, two containers, share the pid 1), N counted.
    name: str = field(default_factory=lambda: f"mcp-sessions-{os.getpid()}-{secrets.token_hex(4)}", init=False)
    _ids: Iterator[int] = field(default_factory=count, init=False)
    _readying: threading.Lock = field(default_factory=threading.Lock, init=False)
    # The live processes' groups that :meth:`reached` watches, and whether one of its callers reads them meanwhile.
    _watched: set[_Watched] = field(default_factory=set, init=False)
    _reading: bool = field(default=False, init=False)

    def create(self) -> Cgroup:
        """A new control group for one process, its bounds written; the first readies the parents (:meth:`_ready`):
        the gateway's first process, the revision probe, starts with it."""
        with self._readying:  # processes start at once, each in a thread of its own: the first readies them
            if not self.ready:
                self._ready()
        name = f"{self.name}-{next(self._ids)}"
        # Under v1 in the gateway's own group, which bounds them together; under v2 beside it (it runs in its own).
        under = [
            parent / f"{self.name}-{_OWN}" if self.bounds.version == 1 else parent for parent in self.bounds.parents
        ]
        cgroup = Cgroup(self.bounds.version, tuple(parent / name for parent in under))
        try:
            for directory in cgroup.dirs:
                directory.mkdir()
            cgroup.bound(self.bounds.memory, self.bounds.pids, self.bounds.cpu)
        except OSError:
            cgroup.remove()
            raise
        return cgroup

    async def reached(self, cgroup: Cgroup) -> Bound:
        """Which bound ``cgroup``'s processes reached (:meth:`Cgroup.exceeded`), once they have. Every live group of
        the gateway's is read together, every :data:`BOUNDS_POLL` s, in one thread of anyio's, by one of the callers
        at a time (the first; when it returns or is cancelled, it wakes another, which takes over); the others sleep
        until theirs is found. A task and a thread hop per process each tick cost the gateway 1.4 ms of CPU a second
        per idle process (200, ``--max-processes 200``, over a quarter of a core doing nothing). No kernel event tells
        all of it: under v1 the TCP buffers' count past its share has none (cgroup v2's ``memory.events`` and
        ``pids.events`` could be watched by inotify alone)."""
        watched = _Watched(cgroup)
        self._watched.add(watched)
        try:
            while watched.bound is None:
                if self._reading:  # another caller reads them all
                    await watched.woken.wait()
                    watched.woken = anyio.Event()
                    continue
                self._reading = True
                try:
                    await self._read_all()
                    while watched.bound is None:
                        await anyio.sleep(BOUNDS_POLL)
                        await self._read_all()
                finally:
                    self._reading = False
            return watched.bound
        finally:
            self._watched.discard(watched)
            if not self._reading and self._watched:  # another reads them from now on (or, cancelled, wakes one)
                next(iter(self._watched)).woken.set()

    async def _read_all(self) -> None:
        """Every watched group not yet found over a bound read once, in one thread hop, and those that reached one
        woken."""
        watched = [each for each in self._watched if each.bound is None]
        found = await anyio.to_thread.run_sync(lambda: [each.cgroup.exceeded() for each in watched])
        for each, bound in zip(watched, found, strict=True):
            if bound is not None:
                each.bound = bound
                each.woken.set()

    def _ready(self) -> None:
        """The gateway's own group made in each parent and its lock held; then the empty groups of gateways that were
        killed (SIGKILL: their processes died with them, their directories stayed) removed, each run's once no one
        holds its own group's lock (:data:`_OWN`); in v2, the gateway moved into its own group, a leaf (no process may
        stay in a cgroup that gives controllers), and the controllers given to its children. Each parent is locked
        meanwhile, so that no other gateway's start finds its own group made but not yet locked, and takes it for a
        dead one's."""
        for parent in self.bounds.parents:
            own = parent / f"{self.name}-{_OWN}"
            with _locked(parent):
                own.mkdir(exist_ok=True)
                if (lock := locked(own, directory=True)) is None:  # no start took it: they hold the parent's first
                    raise BlockingIOError(f"{own}: its lock is another's")
                self.locks.append(lock)
                _remove_dead(parent, self.name)
            for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):  # v1's memory hierarchy's
                if self.bounds.version == 1 and self.bounds.together is not None and (own / name).exists():
                    (own / name).write_text(str(self.bounds.together))
        if self.bounds.version == 2:  # one parent: the last own group made is its
            (own / "cgroup.procs").write_text(str(os.getpid()))
            enabled = [f"+{name}" for name in _controllers(self.bounds.memory, self.bounds.pids, self.bounds.cpu)]
            (self.bounds.parents[0] / "cgroup.subtree_control").write_text(" ".join(enabled))
        self.ready = True

    def close(self) -> None:
        """At the gateway's end, every process ended: its own groups removed, where it runs in none (v1; under v2
        it runs in its own until it exits, and the next start removes it)."""
        for lock in self.locks:
            os.close(lock)
        self.locks.clear()
        if self.bounds.version == 1 and self.ready:
            for parent in self.bounds.parents:
                with suppress(OSError):
                    (parent / f"{self.name}-{_OWN}").rmdir()


@dataclass(eq=False)
class _Watched:
    """One caller of :meth:`Cgroups.reached`: its group, the bound found there, and what wakes it."""

    cgroup: Cgroup
    bound: Bound | None = None
    woken: anyio.Event = field(default_factory=anyio.Event)


@dataclass
class Cgroup:
    """One process's control group (v2), or its groups in the v1 hierarchies."""

    version: int
    dirs: tuple[Path, ...]
    # What :meth:`exceeded` reads, in order: each events file and the count it reads there ("" for v1's TCP buffers'
    # usage), found at its first read, once the group's bounds are written.
    _watched: list[tuple[str, str]] | None = field(default=None, init=False, repr=False)

    def bound(self, memory: int | None, pids: int | None, cpu: float | None = None) -> None:
        """Write the bounds into each of its directories that has their files (in v1, each hierarchy has its own);
        ``cpu``: cores, the CFS quota of each period of :data:`CPU_PERIOD` µs."""
        quota = None if cpu is None else round(cpu * CPU_PERIOD)
        files: dict[str, object]
        if self.version == 1:
            # memsw: memory and swap together. v1 counts TCP buffers apart (kmem.tcp), and bounds them only when told
            # to: a part of the bound is theirs, so that the two together are within it (v2 counts them in memory).
            sockets = None if memory is None else memory // TCP_SHARE
            rest = None if memory is None or sockets is None else memory - sockets
            files = {"memory.limit_in_bytes": rest, "memory.memsw.limit_in_bytes": rest}
            files["memory.kmem.tcp.limit_in_bytes"] = sockets
            # The period first: a quota is checked against it.
            files |= {"cpu.cfs_period_us": None if quota is None else CPU_PERIOD, "cpu.cfs_quota_us": quota}
        else:
            # Memory that is swapped out is memory too.
            swap = None if memory is None else 0
            files = {"memory.max": memory, "memory.swap.max": swap}
            files["cpu.max"] = None if quota is None else f"{quota} {CPU_PERIOD}"
        files["pids.max"] = pids
        for directory in self.dirs:
            for name, value in files.items():
                path = directory / name
                if value is not None and path.exists():
                    path.write_text(str(value))

    @property
    def procs(self) -> list[str]:
        return [str(directory / "cgroup.procs") for directory in self.dirs]

    def exceeded(self) -> Bound | None:
        """Which bound the processes reached: the kernel's counts of OOM kills and of refused forks, and under v1 its
        count of their TCP buffers past their share (:func:`_sockets_past`). Read every :data:`BOUNDS_POLL` s for each
        live process (:meth:`Cgroups.reached`): the files that exist found once, each read with one ``read(2)``."""
        if self._watched is None:
            events = "memory.oom_control" if self.version == 1 else "memory.events"
            wanted = ((events, "oom_kill"), ("memory.kmem.tcp.usage_in_bytes", ""), ("pids.events", "max"))
            self._watched = [
                (str(directory / name), key)
                for directory in self.dirs
                for name, key in wanted
                if (directory / name).exists()
            ]
        for path, key in self._watched:
            if _count(path, key) if key else _sockets_past(path):
                return "pids" if key == "max" else "memory"
        return None

    def members(self) -> list[int]:
        members = []
        for directory in self.dirs:
            pids = read(directory / "cgroup.procs").split()
            members += [int(pid) for pid in pids]
        return members

    def killed(self, within: float) -> bool:
        """Every process in it killed in one step (cgroup v2's ``cgroup.kill``; else each of its members once, where
        its PID namespace's end has left any): whether it is empty within ``within`` seconds."""
        for directory in self.dirs:
            try:
                (directory / "cgroup.kill").write_text("1")
            except OSError:  # cgroup v1, or a kernel before 5.14
                for pid in self.members():
                    with suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + within
        while self.members():
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL)
        return True

    def remove(self) -> None:
        for directory in self.dirs:
            with suppress(OSError):
                directory.rmdir()


def _remove_dead(parent: Path, live: str) -> None:
    """The groups under ``parent`` of each run whose own group's lock no one holds (its gateway is dead), removed
    where empty; its own group last, once no other is left (then whatever is left is still proven dead). A run with
    no own group is not proven dead (an older gateway's): it stays."""
    runs: dict[str, list[Path]] = {}
    for group in parent.glob("mcp-sessions-*-*-*"):
        runs.setdefault(group.name.split("-")[3], []).append(group)
    for run, groups in runs.items():
        own = next((group for group in groups if group.name.endswith(f"-{run}-{_OWN}")), None)
        if own is None or own.name == f"{live}-{_OWN}":
            continue
        try:
            lock = locked(own, directory=True)
        except OSError:  # another gateway removed it meanwhile
            continue
        if lock is None:  # its gateway lives
            continue
        try:
            others = [*own.glob("mcp-sessions-*"), *(group for group in groups if group != own)]
            for group in others:
                with suppress(OSError):  # a process left in it
                    group.rmdir()
            if not any(group.exists() for group in others):
                with suppress(OSError):
                    own.rmdir()
        finally:
            os.close(lock)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """``directory``'s lock (``flock``), waited for and held meanwhile: a gateway's start that others' wait for."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def held() -> str:
    """What bounds the gateway's processes where it may make no control group of its own (a pod's, a container's):
    its own group's limits, which they share (the pod's, or its container's), and the resource limits (``rlimit``)
    each inherits where set; "none" where neither is. Only reads."""
    limits = []
    if (memory := _limit("memory", "memory.max", "memory.limit_in_bytes")) is not None:
        limits.append(f"memory {memory >> 20} MiB")
    quota = period = ""  # cgroup v2's in one file ("max 100000": none), v1's in two (-1: none)
    if (v2 := own()) is not None:
        quota, _, period = read(v2 / "cpu.max").partition(" ")
    elif (v1 := own("cpu")) is not None:
        quota = read(v1 / "cpu.cfs_quota_us")
        period = read(v1 / "cpu.cfs_period_us")
    if quota.strip().isdigit() and period.strip().isdigit():
        limits.append(f"cpu {int(quota) / int(period):g}")
    if (pids := _limit("pids", "pids.max", "pids.max")) is not None:
        limits.append(f"pids {pids}")
    rlimits = []
    for name in ("CPU", "FSIZE", "DATA", "AS", "NPROC", "NOFILE"):
        soft, _ = resource.getrlimit(getattr(resource, f"RLIMIT_{name}"))
        if soft != resource.RLIM_INFINITY:
            rlimits.append(f"{name.lower()} {soft}")
    said = []
    if limits:
        said.append(f"the gateway's own cgroup's, together ({'; '.join(limits)})")
    if rlimits:
        said.append(f"each process's rlimits ({'; '.join(rlimits)})")
    return " and ".join(said) or "none"


def _limit(controller: str, v2_file: str, v1_file: str) -> int | None:
    """The gateway's own group's limit of ``controller`` (cgroup v2's file, else v1's); None where it sets none."""
    v2 = own()
    directory = v2 if v2 is not None else own(controller)
    text = read(directory / (v2_file if v2 is not None else v1_file)).strip() if directory is not None else ""
    # v1's "no limit" is the largest count of pages it can hold, not a word.
    return int(text) if text.isdigit() and int(text) < 1 << 62 else None


def _controllers(memory: int | None, pids: int | None, cpu: float | None) -> list[str]:
    bounds = {"memory": memory, "pids": pids, "cpu": cpu}
    return [name for name, bound in bounds.items() if bound is not None]


def _delegated(own: Path, wanted: list[str]) -> bool:
    """Whether cgroup v2 ``own`` has ``wanted``'s controllers, and the gateway may give them to its children (and
    move itself into a leaf of ``own``: :meth:`Cgroups._ready`)."""
    given = read(own / "cgroup.controllers").split()
    return set(wanted) <= set(given) and _writable(own, "cgroup.procs", "cgroup.subtree_control")


def _writable(directory: Path, *names: str) -> bool:
    """Whether the kernel lets the gateway write ``directory`` and its files ``names`` (``access(2)``)."""
    return all(os.access(directory / name, os.W_OK) for name in ("", *names))


def own(controller: str = "", pid: int | str = "self") -> Path | None:
    """The directory of ``pid``'s control group in ``controller``'s v1 hierarchy, or (with none) in cgroup v2: its
    line in ``/proc/PID/cgroup`` ("4:memory:/path", "0::/path") found in a mount of this process's."""
    for line in read(f"/proc/{pid}/cgroup").splitlines():
        _, names, path = line.split(":", 2)
        # cgroup v2's line names no controller.
        if controller in names.split(","):
            break
    else:
        return None
    kind = "cgroup" if controller else "cgroup2"
    for mount in read("/proc/self/mountinfo").splitlines():
        fields, _, rest = mount.partition(" - ")
        source = rest.split()
        if source[:1] != [kind] or (controller and controller not in source[-1].split(",")):
            continue
        root, point = fields.split()[3:5]
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return Path(point) / path[len(root) :].lstrip("/")
    return None


def _sockets_past(usage_file: str) -> bool:
    """Whether cgroup v1's count of a group's TCP buffers is past its bound (``memory.kmem.tcp``; ``usage_file``: its
    ``usage_in_bytes``, beside its ``limit_in_bytes``): the kernel charges each socket's first buffer of a queue, sent
    or received, whatever the bound (it forces that charge, so that every connection moves), and ends no process for
    it, as it does for memory: 5,727 connections unread pinned 393 MiB under a 150 MiB bound. The gateway ends the
    conversation once the count is past, as the OOM killer ends a process past its memory. The limit is read only
    where the usage is not zero (a process that opened no connection, most of them, costs one read)."""
    usage = _read_small(usage_file).strip()
    if not usage or usage == b"0":
        return False
    limit = _read_small(usage_file.removesuffix("usage_in_bytes") + "limit_in_bytes").strip()
    return bool(limit) and int(usage) > int(limit)


def _count(path: str, key: str) -> int:
    """The count a cgroup events file gives ``key`` (0 when it has none)."""
    wanted = key.encode()
    for line in _read_small(path).splitlines():
        name, _, value = line.partition(b" ")
        if name == wanted:
            return int(value)
    return 0


def _read_small(path: str) -> bytes:
    """The first :data:`_SMALL` bytes of ``path`` (a control group's file: a few lines), in one ``read(2)``, with no
    object made but the bytes; empty where it cannot be read (a group gone, a kernel without the file)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(descriptor, _SMALL)
    except OSError:
        return b""
    finally:
        os.close(descriptor)


def read(path: str | Path) -> str:
    """The text of ``path``; empty where it cannot be read (a cgroup file gone with its group, a kernel without it)."""
    try:
        return Path(path).read_text()
    except OSError:
        return ""
