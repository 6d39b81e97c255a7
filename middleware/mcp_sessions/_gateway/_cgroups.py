"""The control groups that bound a stdio gateway's conversations (``--process-memory``, ``--process-pids``,
``--process-cpu``): one per process, under the gateway's own cgroup v2 (its controllers delegated), else under its
own cgroup in each cgroup v1 hierarchy a bound needs; and the kernel's counts of what a group reached."""

from __future__ import annotations

import os
from contextlib import suppress
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Final

CPU_PERIOD: Final = 100_000
"""The period (µs) of a conversation's CPU quota: ``--process-cpu N`` is N times it in each."""
_ids = count()


@dataclass
class Cgroups:
    """Where the gateway creates a control group per process, with the bounds it writes in each: under its own
    cgroup v2 (``version`` 2: one directory), else under its own cgroup in each v1 hierarchy it needs."""

    version: int
    parents: tuple[Path, ...]
    memory: int | None = None
    pids: int | None = None
    cpu: float | None = None

    @classmethod
    def found(cls, memory: int | None, pids: int | None, cpu: float | None = None) -> Cgroups | None:
        """The gateway's own control groups that can bound ``memory``, ``pids`` and ``cpu`` (cores; one probe
        created and removed in each); None when this host gives it none (not root, or read-only as in most
        containers)."""
        lines = read("/proc/self/cgroup").splitlines()
        mountinfo = read("/proc/self/mountinfo").splitlines()
        mounts = [line.partition(" - ") for line in mountinfo]
        wanted = []
        if memory is not None:
            wanted.append("memory")
        if pids is not None:
            wanted.append("pids")
        if cpu is not None:
            wanted.append("cpu")
        v2 = _mounted(mounts, "cgroup2", _v2_path(lines))
        if v2 is not None and _delegated(v2, wanted):
            return cls(2, (v2,), memory, pids, cpu)
        parents = []
        needs = {"memory": "memory.limit_in_bytes", "pids": "pids.max", "cpu": "cpu.cfs_quota_us"}
        for name in wanted:
            parent = _mounted(mounts, "cgroup", _v1_path(lines, name), name)
            if parent is None or not _probed(parent, needs[name]):
                return None
            parents.append(parent)
        if not parents:
            return None
        return cls(1, tuple(parents), memory, pids, cpu)

    def create(self) -> Cgroup:
        name = f"mcp-sessions-{os.getpid()}-{next(_ids)}"
        cgroup = Cgroup(self.version, tuple(parent / name for parent in self.parents))
        try:
            for directory in cgroup.dirs:
                directory.mkdir()
            cgroup.bound(self.memory, self.pids, self.cpu)
        except OSError:
            cgroup.remove()
            raise
        return cgroup

    @property
    def said(self) -> str:
        parents = ", ".join(str(parent) for parent in self.parents)
        return f"cgroup v{self.version} ({parents})"


@dataclass
class Cgroup:
    """One process's control group (v2), or its groups in the v1 hierarchies."""

    version: int
    dirs: tuple[Path, ...]

    def bound(self, memory: int | None, pids: int | None, cpu: float | None = None) -> None:
        """Write the bounds into each of its directories that has their files (in v1, each hierarchy has its own);
        ``cpu``: cores, the CFS quota of each period of :data:`CPU_PERIOD` µs."""
        quota = None if cpu is None else round(cpu * CPU_PERIOD)
        files: dict[str, object]
        if self.version == 1:
            # memsw: memory and swap together. The period first: a quota is checked against it.
            files = {"memory.limit_in_bytes": memory, "memory.memsw.limit_in_bytes": memory}
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

    def exceeded(self) -> str | None:
        """Which bound the processes reached: the kernel's counts of OOM kills and of refused forks."""
        events = "memory.oom_control" if self.version == 1 else "memory.events"
        for directory in self.dirs:
            if _count(directory / events, "oom_kill"):
                return "over its memory bound (--process-memory)"
            if _count(directory / "pids.events", "max"):
                return "over its process bound (--process-pids)"
        return None

    def members(self) -> list[int]:
        members = []
        for directory in self.dirs:
            pids = read(directory / "cgroup.procs").split()
            members += [int(pid) for pid in pids]
        return members

    def remove(self) -> None:
        for directory in self.dirs:
            with suppress(OSError):
                directory.rmdir()


def _mounted(mounts: list[tuple[str, str, str]], kind: str, path: str | None, option: str = "") -> Path | None:
    """The directory of cgroup ``path`` in the mount of type ``kind`` (with super option ``option``)."""
    for fields, _, rest in mounts:
        source = rest.split()
        if path is None or not source or source[0] != kind:
            continue
        if option and option not in source[-1].split(","):
            continue
        root, point = fields.split()[3:5]
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return Path(point) / path[len(root) :].lstrip("/")
    return None


def _delegated(own: Path, wanted: list[str]) -> bool:
    """Whether ``own`` (cgroup v2) has ``wanted``'s controllers to give: then the gateway moves itself into a leaf
    of its own (no process may stay in a cgroup that gives controllers) and enables them for its children."""
    if not wanted:
        return False
    given = read(own / "cgroup.controllers").split()
    if not set(wanted) <= set(given):
        return False
    enabled = " ".join(f"+{name}" for name in wanted)
    try:
        leaf = own / f"mcp-sessions-{os.getpid()}-gateway"
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(str(os.getpid()))
        (own / "cgroup.subtree_control").write_text(enabled)
    except OSError:
        return False
    return True


def _probed(parent: Path, needed: str) -> bool:
    """Whether the gateway may create a cgroup in ``parent`` that has the file ``needed``; and the empty cgroups of
    gateways that were killed (SIGKILL: their processes died with them, their directories stayed) removed."""
    for stale in parent.glob("mcp-sessions-*-*"):
        pid = stale.name.split("-")[2]
        if not Path("/proc", pid).exists():
            with suppress(OSError):
                stale.rmdir()
    probe = parent / f"mcp-sessions-{os.getpid()}-probe"
    try:
        probe.mkdir()
    except OSError:
        return False
    usable = (probe / needed).exists()
    probe.rmdir()
    return usable


def _v2_path(lines: list[str]) -> str | None:
    """The gateway's cgroup v2, from ``/proc/self/cgroup``'s "0::/path" line."""
    for line in lines:
        if line.startswith("0::"):
            return line[3:]
    return None


def _v1_path(lines: list[str], controller: str) -> str | None:
    """The gateway's cgroup in ``controller``'s v1 hierarchy, from ``/proc/self/cgroup``'s "4:memory:/path" line."""
    for line in lines:
        if controller in line.split(":")[1].split(","):
            return line.split(":", 2)[2]
    return None


def _count(path: Path, key: str) -> int:
    """The count a cgroup events file gives ``key`` (0 when it has none)."""
    for line in read(path).splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def read(path: str | Path) -> str:
    """The text of ``path``; empty where it cannot be read (a cgroup file gone with its group, a kernel without it)."""
    try:
        return Path(path).read_text()
    except OSError:
        return ""
