"""What the gateway holds and reads of the host's kernel as it seals its processes: a lock on a file (:func:`locked`),
the uids of the host's processes (:func:`running_uids`), a descriptor above the ones its first helper takes
(:func:`above`), and a seccomp filter that refuses a sealed process a new user namespace
(:func:`no_user_namespaces`), where its uid would be root, with the kernel's attack surface of a root user; where
each program root runs is (:func:`tool`), and the one way root runs one to its end (:func:`run_helper`), in its own
fixed environment (:data:`HELPER_ENV`)."""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import Final

# Each architecture's audit number, and its unshare, clone and clone3 system calls; x86_64's x32 calls (bit 30 set)
# are refused whole, as no server needs them.
_CALLS: Final = {
    0xC000003E: (272, 56, 435),  # x86_64
    0x40000003: (310, 120, 435),  # i386, on x86_64
    0xC00000B7: (97, 220, 435),  # aarch64
    0x40000028: (337, 120, 435),  # arm, on aarch64
}
_CLONE_NEWUSER: Final = 0x10000000
HELPER_ENV: Final = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
"""The whole environment of every program root runs (``sh``, ``bwrap``, ``unshare``, ``prlimit``, ``setpriv``,
``ip``, ``nft``, ``conntrack``, ``rm``), whatever the gateway's own and the users' hold: neither a user's variable nor
the gateway's (its secret, a ``LD_PRELOAD``, an ``NFT_DEBUG``) reaches a helper."""
RUNTIME: Final = "/run/mcp-sessions"
"""The default of ``--runtime-directory`` where systemd gives none (``RUNTIME_DIRECTORY``): where the host's
gateways lock the processes' uids (``uids/``) and their egress tables (``tables/``), and keep the egress namespaces'
resolver (``resolv.conf``) and each gateway's certificates (``ca-*``). Under ``/run``, which no contained process
sees; every gateway of a host that shares a uid range gives the same."""


class SandboxError(Exception):
    """A containment the operator asked for that this host cannot give: the message says which, and why."""


class UidsInUse(SandboxError):
    """Every uid a process could take is in use (``--process-uids``, or a user's kept ones): a limit, as
    ``--max-processes`` is, which a new conversation is refused at until one is free."""


@functools.cache
def tool(name: str) -> str:
    """The absolute path of the helper ``name``, found on the gateway's ``PATH`` the first time it is asked for (at
    startup: ``SandboxPolicy.check``), and kept: a user's ``PATH`` never chooses what root runs."""
    found = shutil.which(name)
    if found is None:
        raise SandboxError(f"{name} is not installed")
    return os.path.abspath(found)


def run_helper(line: Sequence[str], given: str = "", timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``line`` (a helper found by :func:`tool`, with arguments of the gateway's own) run to its end, given
    ``given`` on its standard input, in :data:`HELPER_ENV` alone; what it said captured (as UTF-8, a byte it is not
    replaced: a name a process chose may be in it), its exit status for the caller to judge; a ``SandboxError`` in
    one line after ``timeout`` seconds (it is killed), which a start refused and the gateway's startup say as any
    other."""
    try:
        return subprocess.run(  # noqa: S603 - our own command line
            line,
            input=given,
            env=HELPER_ENV,
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise SandboxError(f"{os.path.basename(line[0])} did not end within {timeout:g} s") from None


@functools.cache
def no_user_namespaces() -> bytes:
    """A seccomp filter (classic BPF, as bubblewrap's ``--seccomp`` takes it) that refuses a new user namespace:
    ``unshare`` and ``clone`` with ``CLONE_NEWUSER`` get ``EPERM``, ``clone3`` (whose flags a filter cannot read)
    ``ENOSYS``, so that the C library falls back to ``clone``; so do x86_64's x32 calls, and every call of an
    architecture it does not know. Docker's default profile does the same."""
    load = 0x20  # BPF_LD | BPF_W | BPF_ABS: a word of the call's seccomp_data
    equal = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
    has = 0x45  # BPF_JMP | BPF_JSET | BPF_K
    jump = 0x05  # BPF_JMP | BPF_JA
    give = 0x06  # BPF_RET | BPF_K: the filter's say
    allow = 0x7FFF0000  # SECCOMP_RET_ALLOW
    refuse = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO, each with its errno
    absent = 0x00050000 | errno.ENOSYS
    count = len(_CALLS)
    code = [(load, 0, 0, 4)]  # the architecture: each one's block follows the dispatch, 11 instructions each
    for index, arch in enumerate(_CALLS):
        code += [(equal, 0, 1, arch), (jump, 0, 0, 2 * count + 9 * index - 1)]
    code.append((give, 0, 0, absent))
    for arch, (unshare, clone, clone3) in _CALLS.items():
        code += [
            (load, 0, 0, 0),  # the call
            (has, 8, 0, 0x40000000 if arch == 0xC000003E else 0),  # x32's
            (equal, 3, 0, unshare),
            (equal, 2, 0, clone),
            (equal, 5, 0, clone3),
            (give, 0, 0, allow),
            (load, 0, 0, 16),  # the low half of its first argument: the flags
            (has, 1, 0, _CLONE_NEWUSER),
            (give, 0, 0, allow),
            (give, 0, 0, refuse),
            (give, 0, 0, absent),
        ]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in code)


def locked(path: str | Path, directory: bool = False) -> int | None:
    """The descriptor of ``path`` (a file, created; or a ``directory`` that is), locked: the lock is held until it is
    closed; None if another holds it."""
    flags = os.O_RDONLY | os.O_DIRECTORY if directory else os.O_RDWR | os.O_CREAT
    descriptor = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    return descriptor


def runtime_directory(path: str, *parts: str) -> None:
    """``path`` (``--runtime-directory``) and its ``parts``, each made if missing and written once (a file made and
    removed: what the kernel says, for a container's root whose host root owns the directory too); a
    ``SandboxError`` in one line that names the one the gateway's user cannot write, and what to give, where a lock
    taken in it at a process's start would fail."""
    for directory in (path, *(os.path.join(path, part) for part in parts)):
        try:
            os.makedirs(directory, mode=0o755 if directory == path else 0o700, exist_ok=True)
            tempfile.TemporaryFile(dir=directory).close()
        except OSError as exc:
            raise SandboxError(
                f"the runtime directory {directory}: {exc.strerror}: give one the gateway's user (uid {os.geteuid()}) "
                "may write, by --runtime-directory DIR or systemd's RuntimeDirectory= (RUNTIME_DIRECTORY), the same "
                "for every gateway of the host"
            ) from None


def lacking(*names: str) -> list[str]:
    """Those of the capabilities ``names`` (``SYS_ADMIN``) that the gateway does not hold: its effective set, as the
    kernel says it (``CapEff`` of ``/proc/self/status``; bits of ``capability.h``)."""
    bits = {"CHOWN": 0, "SETGID": 6, "SETUID": 7, "NET_ADMIN": 12, "SYS_ADMIN": 21}
    status = Path("/proc/self/status").read_text()
    held = int(status.split("\nCapEff:\t", 1)[1].split("\n", 1)[0], 16)
    return [name for name in names if not held >> bits[name] & 1]


def unmapped(first: int, last: int) -> str | None:
    """Where the ids ``first`` to ``last`` are not all uids and gids of the gateway's user namespace, what it maps
    (``/proc/self/uid_map``, ``gid_map``: "0-65535"); None where they are (as on a host, which maps every one)."""
    for kind in ("uid", "gid"):
        spans = [
            [int(field) for field in line.split()] for line in Path(f"/proc/self/{kind}_map").read_text().splitlines()
        ]
        if not any(inside <= first and last < inside + count for inside, _, count in spans):
            return ", ".join(f"{inside}-{inside + count - 1}" for inside, _, count in spans)
    return None


def running_uids() -> set[int]:
    """The real uids of the host's processes (``/proc/PID/status``) that still run: a zombie (a killed gateway's
    helper, say, until whoever adopted it reaps it) holds nothing of its uid's, and counts as none."""
    found = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        with suppress(OSError, ValueError, IndexError):
            said = status.read_text()
            if "\nState:\tZ" not in said:
                found.add(int(said.split("\nUid:\t", 1)[1].split("\t", 1)[0]))
    return found


def above(descriptor: int) -> int:
    """``descriptor`` moved above 4 (closed where it was): the first helper that starts a process takes 3 and 4 for the
    server's own (``_sandbox``)."""
    try:
        return fcntl.fcntl(descriptor, fcntl.F_DUPFD_CLOEXEC, 5)
    finally:
        os.close(descriptor)
