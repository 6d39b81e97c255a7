"""How each stdio server process is sealed from the others, by the operating system's own tools.

A process is started through a chain of them, each doing one thing and then running the next:

- ``sh`` writes its own pid into the conversation's control groups (its memory, process-count and CPU
  bounds), so that the process is in them before any of its code runs;
- ``bwrap`` (bubblewrap) or util-linux's ``unshare``: a PID namespace and a ``/proc`` of its own, so that it
  sees no other process, and every process it started ends with it (the namespace's init ends them all); a mount
  namespace where the host's files are read-only but its own: its home and temporary directories, each a tmpfs
  bounded by ``--process-disk``, gone with the namespace; no view of the control groups (:func:`_namespace`; under
  ``unshare``, a ``sh`` mounts them as root); with network ``none`` or ``egress``, a network namespace of its own
  (its own loopback; under ``egress`` a veth pair's end, which the kernel forwards for: :class:`Link`);
- the seccomp filters (:mod:`._seccomp`): the user-namespace one and the profile's, given to bubblewrap, or under
  ``unshare`` applied by the gateway's own interpreter once the mounts are made;
- ``prlimit``: ``RLIMIT_NPROC``, the process-count bound where no control group gives one (a uid's count,
  so with a uid per process only);
- ``setpriv``: its uid and gid, no supplementary group but its grants' (``_grants``), no capability, no new
  privileges;
- a last ``bash``, as the server's own user: the server's environment, read from a file the gateway wrote (a
  ``memfd``), then the server, that file closed (nothing of the gateway's reaches it), by ``env``, which takes out
  what the shells on the way set of themselves (:data:`SHELL_OWN`). Every helper before it is
  run by the absolute path found at startup (:func:`tool`), with root's fixed environment (:data:`HELPER_ENV`): no
  variable of a user's reaches a program root runs.

:class:`SandboxPolicy` is what the flags chose, a value in the configuration, checked once at startup
(:meth:`SandboxPolicy.check`); :class:`Sandbox` is what runs it, built from it as the app is made (its uid pool,
control groups, egress table, users' directories, masked credentials' proxy); :class:`Place` is one process's: its
uid (from :class:`Uids`), its directory, its control group. A contained process writes nothing
that outlives its namespace, so nothing is swept after it: a uid is given out (:meth:`Uids.take`) once no process
of it runs (a killed gateway's end with their namespaces), and tried again later while one still does. What it
writes in a tree granted ``:rw`` outlives it, its uid's: that uid is kept for its user.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pwd
import re
import shlex
import socket
import string
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field, replace
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, NamedTuple, get_args

import anyio

from ._cgroups import Bound, Bounds, Cgroup, Cgroups, held, read
from ._grants import STATE, Grant, GrantError, UserDirectories, UserGroups, owner_name, state_directory
from ._kernel import HELPER_ENV, RUNTIME, above, lacking, locked, no_user_namespaces, run_helper, running_uids, tool
from ._kernel import SandboxError as SandboxError
from ._kernel import UidsInUse as UidsInUse
from ._network import (
    CGROUPS_FIRST,
    EgressPolicy,
    EgressRules,
    Link,
    Network,
    NetworkError,
    ProcessNetwork,
    linkable,
    routed,
)
from ._seccomp import applied

if TYPE_CHECKING:
    from ._edge import Edge
    from ._masks import Mask

logger = logging.getLogger("mcp_sessions.gateway")

Containment = Literal["auto", "bwrap", "unshare", "none"]
CONTAINMENTS: Final = get_args(Containment)  # --containment's choices
INHERITED: Final = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
"""The gateway's variables every process gets: the ``mcp`` SDK's ``DEFAULT_INHERITED_ENV_VARS`` (POSIX)."""
END_WITHIN: Final = 5.0
"""How long the processes of a control group have to be gone once killed, before it is removed; and how long a
process's directory (an empty mount point) has to be removed."""
DISK: Final = 256
"""Each of a contained process's own directories at most, in MiB (``--process-disk``): its home, ``/tmp``,
``/var/tmp``, ``/dev/shm`` and ``/run/lock``, each a tmpfs."""
_POLL: Final = 0.05
UID_LOCKS: Final = f"{RUNTIME}/uids"
"""Where a gateway holds a lock (``flock``) on each uid it has given a process, until that uid is free again: the
gateways of one host never give out one uid at once, nor end each other's processes by it, whatever their ranges."""
# The first helper: the server's stdin and stdout moved to descriptors 3 and 4, which bubblewrap's own processes close
# (they hold 0 to 2), so that a server that closes its stdout ends its pipe; then into each control group named.
_FIRST: Final = f"exec 3<&0 4>&1 </dev/null >/dev/null; {CGROUPS_FIRST}"
PRIVATE: Final = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")  # noqa: S108
"""The directories every uid may write where a contained process gets its own, empty (a tmpfs each, mode 1777,
``--process-disk`` at most)."""
HOSTNAME: Final = "localhost"
"""A contained process's hostname, in a UTS namespace of its own (unshare's script writes it too): not the host's,
and one every resolver knows without asking anyone."""
RUN: Final = "/run"
"""Hidden from a contained process (an empty tmpfs over it, but its own :data:`PRIVATE` ``/run/lock``): the host's
socket files are there (``/var/run`` is a link to it), and a read-only file system refuses no ``connect()``."""
CGROUPS: Final = "/sys/fs/cgroup"
"""Hidden from a contained process (an empty tmpfs over it): it would list every conversation's control group."""
# unshare's mounts, by bash (which closes a descriptor above 9; it runs the next with no environment, where it would add
# its SHLVL), as root in its new namespaces before setpriv runs the command. Its first child, in a subshell, is the
# first process of the new PID namespace: it mounts the namespace's /proc, then does the rest and runs the command; the
# shell itself, outside the namespace, closes the server's stdin and stdout (3 and 4: the first helper moved them there)
# and waits, so that no process but the server holds them (a server that closes its stdout ends its pipe). What it
# does is named as bubblewrap's options name it, in any order, until "--" and the command (the paths by tool()):
# --mount-program PATH, --mkdir-program PATH and --link-program PATH; --read-only MOUNT-POINT OPTIONS, each remounted
# read-only; --dev OPTIONS, a /dev of its own as bubblewrap's --dev makes it (a tmpfs with the host's null, zero,
# full, random, urandom and tty bound in it, by the descriptor of the host's /dev, which it hides; its links ptmx,
# into its devpts, fd, stdin, stdout and stderr; pts, for that devpts, and shm): no socket file or other device of
# the host's;
# --tmpfs DIRECTORY OPTIONS, each a tmpfs (made where missing: /run/lock in its /run); --home DIRECTORY OPTIONS, a
# tmpfs (its parents under a tmpfs 0711, as on the host), its working directory; --bind ro|rw SOURCE TARGET, a grant
# (--process-mount), bound last, so that a target under one of its own directories is made there (an empty tmpfs
# where SOURCE is ""); and its network's (_network.ProcessNetwork): --loopback IP-PATH RMEM WMEM, its own loopback up
# (a new network namespace's is down) and its TCP buffers' sizes (net.ipv4.tcp_rmem, tcp_wmem), and --resolver FILE
# WHERE, the resolver configuration it reads, opened before /run is hidden and bound there after (by /proc/self/fd:
# its path is hidden then). Named, the network's part is added by the one module that decides it, and no value's
# meaning hangs on its place among nine.
_UNSHARE_MOUNTS: Final = """\
(
read_only=() tmpfs=() binds=() dev="" home="" ip="" resolver=""
while [ "$1" != -- ]; do
    case $1 in
        --mount-program) mount=$2; shift 2 || exit 125 ;;
        --mkdir-program) mkdir=$2; shift 2 || exit 125 ;;
        --link-program) ln=$2; shift 2 || exit 125 ;;
        --dev) dev=$2; shift 2 || exit 125 ;;
        --read-only) read_only+=("$2" "$3"); shift 3 || exit 125 ;;
        --tmpfs) tmpfs+=("$2" "$3"); shift 3 || exit 125 ;;
        --home) home=$2 home_options=$3; shift 3 || exit 125 ;;
        --bind) binds+=("$2" "$3" "$4"); shift 4 || exit 125 ;;
        --loopback) ip=$2 rmem=$3 wmem=$4; shift 4 || exit 125 ;;
        --resolver) resolver=$2 resolver_at=$3; shift 3 || exit 125 ;;
        *) echo "unshare's mounts: $1 is not an option of theirs" >&2; exit 125 ;;
    esac
done; shift
"$mount" -t proc -o nosuid,nodev,noexec proc /proc || exit 125
if [ -n "$resolver" ]; then exec {held}<"$resolver" || exit 125; fi
echo localhost > /proc/sys/kernel/hostname || exit 125
for ((i = 0; i < ${#read_only[@]}; i += 2)); do
    "$mount" --no-canonicalize -o "${read_only[i + 1]}" "${read_only[i]}" || exit 125
done
if [ -n "$dev" ]; then
    exec {host}</dev && "$mount" -t tmpfs -o "$dev" tmpfs /dev || exit 125
    for node in null zero full random urandom tty; do
        : > "/dev/$node" && "$mount" --no-canonicalize --bind "/proc/self/fd/$host/$node" "/dev/$node" || exit 125
    done
    exec {host}<&-
    "$ln" -s pts/ptmx /dev/ptmx && "$ln" -s /proc/self/fd /dev/fd && "$ln" -s /proc/self/fd/0 /dev/stdin \
        && "$ln" -s /proc/self/fd/1 /dev/stdout && "$ln" -s /proc/self/fd/2 /dev/stderr || exit 125
    "$mkdir" /dev/pts /dev/shm || exit 125
fi
for ((i = 0; i < ${#tmpfs[@]}; i += 2)); do
    "$mkdir" -p "${tmpfs[i]}" && "$mount" -t tmpfs -o "${tmpfs[i + 1]}" tmpfs "${tmpfs[i]}" || exit 125
done
if [ -n "$resolver" ]; then
    [ -e "$resolver_at" ] || { "$mkdir" -p "${resolver_at%/*}" && : > "$resolver_at"; } || exit 125
    "$mount" --no-canonicalize --bind -o ro "/proc/self/fd/$held" "$resolver_at" && exec {held}<&- || exit 125
fi
if [ -n "$home" ]; then
    (umask 066; "$mkdir" -p "$home") && "$mount" --no-canonicalize -t tmpfs -o "$home_options" tmpfs "$home" || exit 125
    "$mkdir" -m 1777 "$home/tmp" && cd "$home" || exit 125
    unset OLDPWD
fi
for ((i = 0; i < ${#binds[@]}; i += 3)); do
    mode=${binds[i]} source=${binds[i + 1]} target=${binds[i + 2]}
    "$mkdir" -p "$target" || exit 125
    if [ -n "$source" ]; then "$mount" --no-canonicalize --bind "$source" "$target" || exit 125
    else "$mount" -t tmpfs -o mode=0555,size=4k tmpfs "$target" || exit 125; fi
    "$mount" --no-canonicalize -o "remount,bind,nosuid,nodev,$mode" "$target" || exit 125
done
if [ -n "$ip" ]; then
    "$ip" link set lo up && echo "$rmem" > /proc/sys/net/ipv4/tcp_rmem && echo "$wmem" > /proc/sys/net/ipv4/tcp_wmem \
        || exit 125
fi
exec -c "$@"
) &
exec 3<&- 4>&-
wait $!
"""
# The process's home made its own under bubblewrap ($0: chown, $1: UID:GID, $2: its home), then the command.
_CHOWN: Final = '"$0" -- "$1" "$2" || exit 125; shift 2; exec "$@"'
# In a new mount namespace, a devpts of its own over /dev/pts ($0: mount, $1: its options), then the command; under
# unshare, run by its script (by its PID namespace's first process, which outlives the mount). The /dev/ptmx of
# unshare's script and of bubblewrap links into it.
_DEVPTS: Final = '"$0" -t devpts -o "$1" devpts /dev/pts || exit 125; shift; exec "$@"'
PTYS: Final = 64
"""The ptys a contained process may hold (its devpts's ``max``): the host's pool for every devpts but its first
(``kernel.pty.max`` less ``kernel.pty.reserve``, 3,072 by default) holds 48 conversations' worth."""
# The file systems of the kernel's own state, which no process writes a file in: not made read-only by unshare's
# script (its /proc is its own; devpts makes the terminals it opens).
_KERNEL_VIEWS: Final = frozenset(
    {
        *("proc", "sysfs", "cgroup", "cgroup2", "devpts", "debugfs", "tracefs", "securityfs", "pstore", "bpf"),
        *("configfs", "fusectl", "binfmt_misc", "autofs", "nsfs", "efivarfs", "selinuxfs", "rpc_pipefs"),
    }
)
_NO_PRIVILEGE: Final = ("--no-new-privs", "--inh-caps=-all", "--bounding-set=-all")
# The last helper, as the server's user: the server's environment from the file on descriptor {held}, then the
# server, its stdin and stdout back where they belong and that file closed. By bash: dash closes no descriptor above 9.
# Through env ($0), which takes out what the shells on the way add ({unset}: SHELL_OWN, but those the server is given):
# bash exports its PWD and, whatever it was told, a SHLVL at exec (a SHLVL given reaches the server one less, as
# through any shell's exec).
_LAST: Final = '. /dev/fd/{held} || exit 125; exec "$0" {unset} -- "$@" <&3 >&4 3<&- 4>&- {held}<&-'
SHELL_OWN: Final = ("SHLVL", "PWD", "OLDPWD", "_")
"""The variables a shell sets of itself, which bash (the last helper) and bubblewrap (``PWD``) put in the server's
environment: none reaches it unless it is given one (``--pass-env``), as the allow-list says."""


class ProcessFile(NamedTuple):
    """A file each conversation's process finds as it starts (``--process-file TARGET=TEMPLATE``): ``target``,
    ``~/PATH`` (under its home) or ``/tmp/PATH``, its own directories; ``template``, the operator's file's text, whose
    ``${NAME}`` are the ``--process-env`` values ``names``, as the process has them (a placeholder where masked)."""

    target: str
    template: str
    names: tuple[str, ...]

    def written(self, environ: Mapping[str, str]) -> str | None:
        """The last helper's line that writes it, for the process whose variables are ``environ``, or None where
        they lack one of its names (a process no conversation's request started: the revision probe). Written as
        the process's own uid, before its server runs, mode 0600 (its directories made 0700), in a tmpfs of its
        own, new with its mount namespace: nothing of the process has run yet, so no link it planted is there to
        follow; and bash's ``set -C`` opens the file ``O_EXCL``, which no name there already, a link or another
        file, passes. The values go where they already are, in the file only that helper reads (a ``memfd``)."""
        if any(name not in environ for name in self.names):
            return None
        # string.Template's one pattern, read once left to right: linear in the template
        text = string.Template(self.template).substitute({name: environ[name] for name in self.names})
        path = os.path.join(environ["HOME"], self.target[2:]) if self.target.startswith("~/") else self.target
        made = f"{shlex.quote(tool('mkdir'))} -p -- {shlex.quote(os.path.dirname(path))}"
        return f"(umask 077 && set -C && {made} && printf %s {shlex.quote(text)} > {shlex.quote(path)}) || exit 125\n"


class Mount(NamedTuple):
    """A grant as one process has it: ``source`` bound at ``target`` (an empty read-only directory where
    ``source`` is ""), ``writable`` or not."""

    source: str
    target: str
    writable: bool


def environment(environ: Mapping[str, str], passed: Collection[str] = ()) -> dict[str, str]:
    """What of the gateway's environment reaches a process: the SDK's names and the operator's
    (``--pass-env``), no shell function among them; nothing else."""
    reached = {}
    for name in [*INHERITED, *passed]:
        if name not in environ:
            continue
        value = environ[name]
        # A shell function ("() { ...") is not passed on.
        if not value.startswith("()"):
            reached[name] = value
    return reached


@dataclass(frozen=True)
class UidRange:
    """The uids the operator reserved for the processes (``--process-uids FIRST-LAST``), of which at most
    ``per_user`` are kept for one user; where the host's gateways lock them (``locks``) and record whom each is kept
    for (``state``): what :class:`Uids` gives out as the gateway runs."""

    first: int
    last: int
    per_user: int = 8
    locks: str = UID_LOCKS
    state: str = STATE

    @classmethod
    def parsed(cls, spec: str, *, per_user: int = 8, locks: str = UID_LOCKS, state: str = STATE) -> UidRange:
        first, _, last = spec.partition("-")
        if not (first.isdigit() and last.isdigit() and 0 < int(first) <= int(last)):
            raise ValueError(f"--process-uids takes FIRST-LAST, two uids above 0: not {spec!r}")
        return cls(int(first), int(last), per_user, locks, state)

    def taken_by_users(self) -> str | None:
        """A user of the system's in the range, if any (the range must be the gateway's alone)."""
        for user in pwd.getpwall():
            if self.first <= user.pw_uid <= self.last:
                return f"{user.pw_name} ({user.pw_uid})"
        return None


class Uids:
    """The uids the operator reserved (:class:`UidRange`), as the gateway runs: a free one per process, which no other
    gateway of the host holds (:data:`UID_LOCKS`), and in which nothing of its last process is left.

    A process's uid owns nothing once it ends, but for what it wrote in a tree of the host's granted ``:rw`` (a
    team's): files that outlive it, which the kernel gives that uid whoever has it next. So a uid given to a process
    that may write there is kept for its user, for good (``STATE/uids/UID``, a link naming her: :func:`owner_name`,
    and ``STATE/owners/OWNER/UID``, hers listed), and given to her processes alone, by every gateway of the host that
    shares ``STATE``, across their restarts. No other owner's process is given it, ``:rw`` or not (the host's files
    are each process's to read). A user has at most ``per_user`` kept (twice ``--max-processes-per-principal``:
    her conversations' processes, and as many still ending), hers taken first; the operator gives a uid back to
    everyone by removing both records, once its files are chowned or gone."""

    def __init__(self, given: UidRange) -> None:
        self.first = given.first
        self.last = given.last
        # The least recently used first.
        self.free = deque(range(self.first, self.last + 1))
        self.locks = given.locks
        self.per_user = given.per_user
        self.held: dict[int, int] = {}  # each uid given out, and the descriptor of its lock
        os.makedirs(given.locks, mode=0o700, exist_ok=True)
        self.kept = state_directory(given.state, "uids")  # each uid kept for an owner: a link naming her
        self.owners = state_directory(given.state, "owners")  # each owner's, listed

    def take(self, owner: str, keep: int = 0) -> int:
        """A free uid for a process of ``owner`` (:func:`owner_name`), locked, in which no process runs (the
        processes a gateway killed by SIGKILL left end with their namespaces, and a uid one of them still holds is
        tried again later), and kept for no one else: one kept for her first, else one kept for no one, which
        ``keep`` > 0 makes hers while she has fewer than ``keep``. Blocking."""
        lock = None
        if keep:  # the count and the keeping: one take at a time, of every gateway of the host
            lock = os.open(self.owners, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            fcntl.flock(lock, fcntl.LOCK_EX)
        busy: set[int] = set()  # tried, but another gateway's or still running: to the back, tried again later
        try:
            hers = self._owned(owner)
            free = list(self.free)  # as it is now: another thread's take, or a give_back, changes it meanwhile
            # hers first, then the others, each the least recently used first
            for uid in chain((uid for uid in free if uid in hers), (uid for uid in free if uid not in hers)):
                kept = self._owner(uid)
                if kept not in (None, owner) or (kept is None and keep and len(hers) >= keep):
                    continue
                if (held := locked(os.path.join(self.locks, str(uid)))) is None:
                    busy.add(uid)  # another gateway's, for now
                    continue
                if uid in running_uids() or (kept is None and keep and not self._keep(uid, owner)):
                    os.close(held)
                    busy.add(uid)
                    continue
                self.free.remove(uid)
                self.held[uid] = held
                return uid
        finally:
            if lock is not None:
                os.close(lock)
            for uid in busy:  # in place: a give_back on another thread appends meanwhile
                with suppress(ValueError):
                    self.free.remove(uid)
                    self.free.append(uid)
        if keep and len(hers) >= keep:
            raise UidsInUse(
                f"every uid kept for this user ({keep}, twice --max-processes-per-principal, key "
                "max-processes-per-principal) is in use: end one of her conversations or retry later"
            )
        raise UidsInUse(
            f"no free uid in --process-uids {self.first}-{self.last} (key process-uids), each runs a process or one "
            "still ending: end a conversation or retry later"
        )

    def give_back(self, uid: int) -> None:
        os.close(self.held.pop(uid))
        self.free.append(uid)

    def _owner(self, uid: int) -> str | None:
        """Whom ``uid`` is kept for, if anyone."""
        try:
            return os.readlink(os.path.join(self.kept, str(uid)))
        except FileNotFoundError:
            return None

    def _owned(self, owner: str) -> set[int]:
        """The uids of this range kept for ``owner``."""
        try:
            listed = os.listdir(os.path.join(self.owners, owner))
        except FileNotFoundError:
            return set()
        return {int(name) for name in listed if name.isdigit() and self.first <= int(name) <= self.last}

    def _keep(self, uid: int, owner: str) -> bool:
        """``uid`` kept for ``owner`` from now on, unless another gateway kept it first (for her, or another)."""
        try:
            os.symlink(owner, os.path.join(self.kept, str(uid)))  # made once: the kernel refuses a second
        except FileExistsError:
            return self._owner(uid) == owner
        os.makedirs(os.path.join(self.owners, owner), mode=0o700, exist_ok=True)
        with open(os.path.join(self.owners, owner, str(uid)), "a"):  # there already if its link alone was removed
            pass
        return True


@dataclass(frozen=True)
class SandboxPolicy:
    """How every process runs (the ``--process-*`` flags), as the operator asked it: its containment (``auto``
    until :meth:`chosen`), its uid (one of ``uids`` each, or ``user`` and ``group`` for all), its directory
    (``cwd``, a template with ``{id}``), its bounds, and its network (``none``: a network namespace of its own, its
    loopback only). A value, in the configuration: it holds nothing that runs, and two made from the same flags are
    equal; what runs is the :class:`Sandbox` the app builds from it."""

    containment: Containment = "none"
    uids: UidRange | None = None
    user: int | None = None
    group: int | None = None
    cwd: str | None = None
    bounds: Bounds | None = None
    # As RLIMIT_NPROC, where no control group bounds them.
    pids: int | None = None
    network: Network = "host"
    # How the containment was chosen, for the startup line: "auto", and why not bubblewrap where it is not.
    choice: str = ""
    # Each of a contained process's own directories at most (MiB).
    disk: int = DISK
    # The seccomp profile of a contained process, compiled (classic BPF: _seccomp.compiled), and how it is named; every
    # contained process also has no_user_namespaces' filter, whatever the profile.
    seccomp: bytes = b""
    profile: str = ""
    # The host's directories granted to each process (--process-mount), and with {user}, where each user's is.
    grants: tuple[Grant, ...] = ()
    users: UserGroups | None = None
    # Under egress, what the gateway's rules grant (_network), the masked credentials' hosts among them.
    egress: EgressPolicy | None = None
    # The credentials masked (--process-env-mask), and the authority that signs their hosts' certificates
    # (--process-env-mask-ca's files; None: one made at start): the proxy's, _edge.Edge.
    masks: tuple[Mask, ...] = ()
    masks_ca: str | None = None
    files: tuple[ProcessFile, ...] = ()  # written in each process's own directories as it starts (--process-file)
    # Where the host's gateways lock uids and tables, and keep the resolver and certificates (--runtime-directory).
    runtime: str = RUNTIME

    @property
    def per_user(self) -> bool:
        """Whether a process is started for its user, never ahead: it has her own directory (``{user}``), or its uid
        is kept for her (:attr:`keeps_uids`)."""
        return any(grant.per_user for grant in self.grants) or self.keeps_uids

    @property
    def keeps_uids(self) -> bool:
        """Whether a process's uid is kept for its user (:class:`Uids`): it may write a tree of the host's (a grant
        ``:rw`` but a user's own directory, which no other user's process reaches, whatever its uid)."""
        return self.uids is not None and any(grant.writable and not grant.per_user for grant in self.grants)

    @property
    def said(self) -> str:
        """How the gateway's startup line says it."""
        runs_as = "the gateway's uid"
        if self.uids:
            runs_as = "a uid each"
        elif self.user is not None:
            runs_as = "one uid"
        if self.bounds:
            bounds = self.bounds.said
        elif self.pids:
            bounds = "RLIMIT_NPROC"
        else:
            bounds = held()
        chosen = f" ({self.choice})" if self.choice else ""
        granted = [f"{grant.target} ({'rw' if grant.writable else 'ro'}{grant.said})" for grant in self.grants]
        grants = f", grants {', '.join(granted)}" if granted else ""
        # The network: the startup line's next part (_network's rules say theirs).
        return f"containment {self.containment}{chosen}, {runs_as}, bounds {bounds}{grants}"

    def chosen(self) -> SandboxPolicy:
        """This sandbox as it runs here, tried once (:meth:`check`): ``auto`` is bubblewrap where it works, else
        util-linux's ``unshare`` where the gateway is root (its mounts need it) and it works, else ``none``."""
        self._capable()
        if self.containment != "auto":
            self.check()
            return self
        failed = []
        for name in ("bwrap", "unshare"):
            candidate = replace(self, containment=name, choice="auto")
            try:
                if name == "unshare" and os.geteuid() != 0:
                    raise SandboxError("unshare: the gateway is not root")
                candidate.check()
            except SandboxError as exc:
                failed.append(str(exc).removeprefix("--process-containment "))
            else:
                return candidate
        if self.network == "none":
            raise SandboxError(f"--process-network none needs bwrap or unshare, and neither works here: {failed[0]}")
        return replace(self, containment="none", choice="auto: " + "; ".join(failed))

    def _capable(self) -> None:
        """The capabilities the gateway as root needs for its processes' seals, refused in one line that names those
        it lacks and how to give them, where its root holds fewer than the host's (a container's, a pod's)."""
        if os.geteuid() != 0:
            return
        needs = []
        if self.uids is not None or self.user is not None:
            needs += ["SETUID", "SETGID", "CHOWN"]  # each process's uid, and its directory given to it
        if self.containment in ("bwrap", "unshare") or self.uids is not None or self.network != "host":
            needs.append("SYS_ADMIN")  # the containment's namespaces
        if self.network != "host":
            needs.append("NET_ADMIN")  # each process's loopback, its veth pair and the egress rules
        if missing := lacking(*needs):
            raise SandboxError(
                f"the gateway's processes need the capabilities {', '.join(needs)} of its root, which lacks "
                f"{', '.join(missing)}: give them (podman run --cap-add {','.join(missing)}; Kubernetes: the "
                "container's securityContext.capabilities.add)"
            )

    def check(self) -> None:
        """Whether the containment works here: one run of it, as the gateway would start a process in a directory
        under ``/tmp``; under ``egress``, beside it, whether a process's network can be made (``linkable``), which
        is said first where both fail."""
        containment = self.containment
        if containment == "none" and self.network == "none":
            raise SandboxError("--process-network none needs bwrap or unshare (--process-containment)")
        if containment == "none":
            return
        self._installed()
        with ThreadPoolExecutor(2, thread_name_prefix="mcp-sessions trial") as trials:
            linked = None
            if self.network == "egress":
                linked = trials.submit(linkable, tool("unshare"), os.path.join(self.runtime, "resolv.conf"))
            tried = trials.submit(self._tried)
            try:
                if linked is not None:
                    linked.result()
            except NetworkError as exc:
                raise SandboxError(str(exc)) from None
            tried.result()

    def _tried(self) -> None:
        """The containment run once (:meth:`check`); ``SandboxError`` saying why it failed."""
        containment = self.containment
        with tempfile.TemporaryDirectory() as top:
            cwd = os.path.join(top, "trial")
            os.mkdir(cwd)
            filters = self.filters()
            mounts = [Mount("" if grant.per_user else grant.source, grant.target, False) for grant in self.grants]
            trial = [*_namespace(self, cwd, filters, mounts=mounts), "/bin/sh", "-c", "exit 0"]
            pipe = subprocess.PIPE
            try:
                done = subprocess.Popen(  # noqa: S603 - our own command line
                    trial,
                    cwd=cwd,
                    env=HELPER_ENV,
                    stdout=pipe,
                    stderr=pipe,
                    text=True,
                    start_new_session=True,
                    pass_fds=filters,
                )
            finally:
                for descriptor in filters:
                    os.close(descriptor)
            stderr = done.communicate()[1]
            reap_adopted(done.pid, wait=True)
        if done.returncode == 0:
            return
        said = "exit status " + str(done.returncode)
        errors = stderr.strip().splitlines()
        if errors:
            said = errors[-1]
        raise SandboxError(f"--process-containment {containment} does not work here: {said[:200]}")

    def _installed(self) -> None:
        """Each containment is its tool's name: that tool must be where it was found at startup, and every helper
        the processes start through found too (:func:`tool`)."""
        containment = self.containment
        if containment == "auto":
            raise SandboxError("--process-containment auto is chosen once, at startup (SandboxPolicy.chosen)")
        try:
            if containment != "none" and not os.access(tool(containment), os.X_OK):
                raise SandboxError(f"{containment} is not installed")
            for helper in self._helpers():
                tool(helper)
        except SandboxError as exc:
            raise SandboxError(f"--process-containment {containment}: {exc}") from None

    def filters(self) -> tuple[int, ...]:
        """A process's seccomp filters, a new ``memfd`` each, for its helpers to read: none uncontained; contained,
        :func:`no_user_namespaces`' then the profile's (each call must pass both)."""
        if self.containment not in ("bwrap", "unshare"):
            return ()
        return tuple(_memfd(program) for program in (no_user_namespaces(), self.seccomp) if program)

    @property
    def contains_root(self) -> bool:
        """Whether its processes run contained as root (the gateway's uid), whom bubblewrap and unshare leave every
        capability, so that they are run without one (``setpriv``)."""
        return self.containment not in ("none", "auto") and self.uids is None and self.user is None and not os.geteuid()

    def _helpers(self) -> list[str]:
        """The helpers, besides the containment's own, that start each process."""
        helpers = ["setpriv"] if self.uids is not None or self.user is not None or self.contains_root else []
        if helpers or self.bounds is not None or self.containment != "none":
            helpers += ["bash", "env"]  # the last helper (_LAST)
        if self.pids is not None:
            helpers.append("prlimit")
        if self.containment == "unshare":
            helpers += ["setpriv", "mount", "mkdir", "ln", "bash"]
        if self.containment == "bwrap" and os.geteuid() == 0:  # its devpts (_own_ptys)
            helpers += ["unshare", "mount"]
        if self.containment == "bwrap" and self.cwd is not None and (self.uids is not None or self.user is not None):
            helpers.append("chown")
        if self.cwd is not None:  # its directory removed (_removed)
            helpers.append("rm")
        return [*helpers, *ProcessNetwork(self.network).helpers()]


class Sandbox:
    """The processes' sandbox as the gateway runs it, built from ``policy`` (:class:`SandboxPolicy`) as the app is
    made, and closed (:meth:`close`) once its processes have ended: the uid pool (:class:`Uids`), the control
    groups (``_cgroups.Cgroups``), the users' own directories (``_grants.UserDirectories``), the masked credentials'
    proxy (``_edge.Edge``: its authority and its port on this host's loopback) and the egress table
    (``_network.EgressRules``, installed by :meth:`install` before any process starts). Two gateways' sandboxes,
    or one server's and another's of a ``--config`` file, share none of them, whatever their policies."""

    def __init__(self, policy: SandboxPolicy) -> None:
        self.policy = policy
        self.uids: Uids | None = None
        if policy.uids is not None:
            try:
                self.uids = Uids(policy.uids)
            except OSError as exc:
                raise SandboxError(f"--process-uids: {policy.uids.locks} could not be made: {exc.strerror}") from None
        self.users = None if policy.users is None else UserDirectories(policy.users)
        self.cgroups = None if policy.bounds is None else Cgroups(policy.bounds)
        # last: it holds a socket
        self.edge = None if not policy.masks else _edge(policy.masks, policy.masks_ca, policy.runtime)
        egress = policy.egress
        if egress is not None and self.edge is not None:  # the proxy's port, known once it is bound
            egress = replace(egress, proxy=self.edge.masks.port)
        self.egress = None if egress is None else EgressRules(egress, locks=os.path.join(policy.runtime, "tables"))
        # The grants, and with masked credentials the proxy's certificates, read-only in every process.
        self.grants = policy.grants if self.edge is None else (*policy.grants, self.edge.masks.grant)

    def install(self) -> None:
        """Its egress table installed (:meth:`~._network.EgressRules.install`), before any of its processes starts."""
        if self.egress is not None:
            self.egress.install()

    def close(self) -> None:
        """What it holds on the host, once its processes have ended: its egress table, its own control groups, its
        masked credentials' values, certificates and proxy's socket (closed already where the proxy served)."""
        if self.egress is not None and self.egress.lock is not None:  # installed, and not removed yet
            self.egress.remove()
        if self.cgroups is not None:
            self.cgroups.close()
        if self.edge is not None:
            self.edge.masks.close()
            self.edge.listening.close()

    @property
    def said(self) -> str:
        """How the gateway's startup line says it: the policy's words, then its network's (its egress table's)."""
        network = f"network {self.policy.network}" if self.egress is None else self.egress.said
        return f"{self.policy.said}, {network}"

    async def enter(self, process_id: str, user: Sequence[str] | None = None) -> Place:
        """A place for a new process: its uid taken, its directory and control group made, and its grants: with
        ``user`` (who she is: ``stdio._models.Owner``'s identity) her own directory, made on first use; with none
        (a process no one's, as the shared one), an empty read-only directory there. Made whole or not at all,
        even when its request is cancelled meanwhile (each step is bounded): a uid taken is never left held by no
        one."""
        policy = self.policy
        policy._installed()
        with anyio.CancelScope(shield=True):
            uid = policy.user
            gid = policy.group
            if self.uids is not None:
                # Whom its uid is kept for: her, else no one of this gateway's trees (its shared process, or every
                # process where no one is authenticated), the same on its next start.
                trees = sorted(grant.source for grant in self.grants if grant.writable and not grant.per_user)
                owner = owner_name(user if user is not None else ("no one", *trees))
                keep = 0
                if policy.keeps_uids:
                    keep = self.uids.per_user if user is not None else self.uids.last - self.uids.first + 1
                try:
                    uid = gid = await anyio.to_thread.run_sync(self.uids.take, owner, keep)
                except OSError as exc:  # its lock file (no descriptor left, say)
                    raise SandboxError(f"no uid could be taken: {exc.strerror or exc}") from None
            place = Place(self, uid, gid)
            try:
                if self.egress is not None and self.uids is not None and uid is not None:
                    await anyio.to_thread.run_sync(self.egress.hold, uid)
                await anyio.to_thread.run_sync(place.granted, user)
                if policy.cwd is not None:
                    place.cwd = policy.cwd.replace("{id}", process_id)
                    if place.workdir is not None:  # a mount point, or uncontained its directory
                        await anyio.to_thread.run_sync(_workdir, place.workdir, place)
                if self.cgroups is not None:
                    place.cgroup = await anyio.to_thread.run_sync(self.cgroups.create)
                if policy.network == "egress" and policy.containment in ("bwrap", "unshare") and uid is not None:
                    await place.linked()
            except (OSError, GrantError, NetworkError) as exc:
                await place.leave()
                if isinstance(exc, NetworkError):
                    raise SandboxError(str(exc)) from None
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise SandboxError(f"the server process's place could not be made: {reason}") from None
        return place


@dataclass
class Place:
    """One process's uid, directory and control group, and the command line that puts it there."""

    sandbox: Sandbox
    uid: int | None
    gid: int | None
    cwd: str | None = None
    cgroup: Cgroup | None = None
    link: Link | None = None
    mounts: list[Mount] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)  # its supplementary groups: its grants'

    def granted(self, user: Sequence[str] | None) -> None:
        """Its grants' mounts and groups, ``user``'s own directory among them (:meth:`Sandbox.enter`)."""
        for grant in self.sandbox.grants:
            source = grant.source
            group = grant.group
            if grant.per_user and self.sandbox.users is not None:
                source, group = self.sandbox.users.own(user) if user is not None else ("", None)
            self.mounts.append(Mount(source, grant.target, grant.writable and source != ""))
            if group is not None and group not in self.groups:
                self.groups.append(group)

    async def linked(self) -> None:
        """Its ``egress`` network made (:class:`Link`), unless this host has no default route (``NO_ROUTE``): then
        it has its own loopback alone."""
        if self.uid is not None and self.sandbox.egress is not None and routed():
            self.link = Link(self.uid, self.sandbox.egress)
            await self.link.open()

    @property
    def workdir(self) -> str | None:
        """The directory of the host's its first helper starts in (``cwd`` uncontained, or where a tmpfs is mounted
        over it), made by :meth:`Sandbox.enter`; None where it needs none: contained, a home under one of
        :data:`PRIVATE` is made in the namespace alone, so that nothing of it is left on the host."""
        contained = self.sandbox.policy.containment != "none"
        if self.cwd is None or (contained and private_under(self.cwd) is not None):
            return None
        return self.cwd

    def launch(
        self, command: Sequence[str], environ: Mapping[str, str]
    ) -> tuple[list[str], dict[str, str], tuple[int, ...]]:
        """How the server ``command`` is started in its place with ``environ`` (in :attr:`workdir`): the command
        line, the environment it starts with, and the descriptor of the file that holds ``environ`` (a ``memfd``
        the caller passes on, then closes, with those of its seccomp filters), which only the last helper reads, as
        the server's own user. Without a helper: the server itself, with ``environ``, and no file."""
        sandbox = self.sandbox.policy
        line: list[str] = []
        # Under unshare, the first process of its PID namespace ends with the shell that waits for it (its parent).
        ends = ["--pdeathsig", "KILL"] if sandbox.containment == "unshare" else []
        if self.uid is not None:
            gid = self.gid if self.gid is not None else self.uid
            user = [f"--reuid={self.uid}", f"--regid={gid}"]
            groups = f"--groups={','.join(map(str, self.groups))}" if self.groups else "--clear-groups"
            line = [tool("setpriv"), *user, groups, *_NO_PRIVILEGE, *ends, "--"]
        elif sandbox.contains_root:  # root without a capability: it could remount the host's files writable
            line = [tool("setpriv"), "--clear-groups", *_NO_PRIVILEGE, *ends, "--"]
        if sandbox.pids is not None and self.cgroup is None:
            line = [tool("prlimit"), f"--nproc={sandbox.pids}", "--", *line]
        filters = sandbox.filters()
        owner = None if self.uid is None else (self.uid, self.uid if self.gid is None else self.gid)
        line = [*_namespace(sandbox, self.cwd, filters, self.link, owner, self.mounts), *line]
        if not line and self.cgroup is None:
            return list(command), dict(environ), ()
        procs = [] if self.cgroup is None else self.cgroup.procs
        line = ["/bin/sh", "-c", _FIRST, "sh", *procs, "--", *line]
        exports = [f"export {name}={shlex.quote(value)}\n" for name, value in environ.items()]
        exports += [written for file in sandbox.files if (written := file.written(environ)) is not None]
        if any(mount.writable for mount in self.mounts):  # what it writes there, its group's too (a user's, a team's)
            exports.append("umask 0007\n")
        held = _memfd(os.fsencode("".join(exports)))
        files = (held, *filters)
        unset = " ".join(f"-u {name}" for name in SHELL_OWN if name not in environ)
        last = [tool("bash"), "-c", _LAST.format(held=held, unset=unset), tool("env")]
        return [*line, *last, *command], dict(HELPER_ENV), files

    @property
    def environ(self) -> dict[str, str]:
        """Its own ``HOME`` and ``TMPDIR``, where it has a directory; else, contained, its own ``/tmp`` as its home
        (the host's files, the gateway's home among them, are read-only to it)."""
        if self.cwd is None:
            return {} if self.sandbox.policy.containment == "none" else {"HOME": "/tmp"}  # noqa: S108
        return {"HOME": self.cwd, "TMPDIR": os.path.join(self.cwd, "tmp")}

    def exceeded(self) -> Bound | None:
        return None if self.cgroup is None else self.cgroup.exceeded()

    async def reached(self) -> Bound | None:
        """Which bound its control group reached, once it has (``_cgroups.Cgroups.reached``: every live process's
        read together); None at once where it has none."""
        if self.cgroup is None or self.sandbox.cgroups is None:
            return None
        return await self.sandbox.cgroups.reached(self.cgroup)

    async def leave(self) -> str | None:
        """Once the process has ended: what is left of its control group killed (one step), its directory (an empty
        mount point: what the process wrote went with its tmpfs) and control group removed, its uid given back. What
        was left, if anything."""
        try:
            if self.link is not None:
                await self.link.close()
            if self.cgroup is not None and not await anyio.to_thread.run_sync(self.cgroup.killed, END_WITHIN):
                return f"its control group was not empty within {END_WITHIN:g} s"
            if self.workdir is not None and not await anyio.to_thread.run_sync(_removed, self.workdir):
                return "its directory could not be removed"
            return None
        finally:
            if self.cgroup is not None:
                await anyio.to_thread.run_sync(self.cgroup.remove)
            if self.sandbox.uids is not None and self.uid is not None:
                if self.sandbox.egress is not None:
                    await anyio.to_thread.run_sync(self.sandbox.egress.let_go, self.uid)
                self.sandbox.uids.give_back(self.uid)


def _edge(masks: tuple[Mask, ...], ca: str | None, runtime: str) -> Edge:
    """The masked credentials' proxy, as a gateway's start makes it: its authority (``ca``'s files, read once; else
    one of its own, made now for the masked hosts alone), its certificates in ``runtime``, its port bound on this
    host's loopback. A ``ValueError`` names a file that cannot serve."""
    from ._edge import Edge
    from ._masks import Authority, Masks

    names = {host for mask in masks for host, _ in mask.hosts}
    authority = Authority.given(ca, runtime=runtime) if ca else Authority.made(names, runtime=runtime)
    try:
        listening = socket.create_server(("127.0.0.1", 0))
    except OSError:
        authority.close()
        raise
    return Edge(Masks(masks, authority, port=listening.getsockname()[1]), listening)


def reap_adopted(group: int, *, wait: bool = False) -> None:
    """Reap the ended processes of ``group`` that this process adopted, its leader reaped already. bubblewrap's
    first process in each namespace outlives bubblewrap by a moment and is left to whoever adopts orphans: the
    host's init, or the gateway, as a subreaper (:func:`~.._process_flags.process_options`) or a container's PID 1;
    the group is gone only once it is reaped. ``wait``: until none of the group is left, for a group whose every
    process ends with its leader (a trial's)."""
    if not hasattr(os, "waitid"):  # macOS before Python 3.13, which has no bubblewrap either
        return
    options = os.WEXITED | (0 if wait else os.WNOHANG)
    with suppress(ChildProcessError):  # none of the group is this process's child
        while os.waitid(os.P_PGID, group, options) is not None:
            pass


def private_under(path: str) -> str | None:
    """The one of :data:`PRIVATE` that is or holds ``path`` (an absolute path), which a contained process has of its
    own, empty; None if none does."""
    return next((private for private in PRIVATE if f"{path}/".startswith(f"{private}/")), None)


def _memfd(data: bytes) -> int:
    """A new file in memory holding ``data``, read from its start, on a descriptor above those the first helper moves
    the server's stdin and stdout to (3 and 4)."""
    made = os.memfd_create("mcp-sessions")
    os.write(made, data)  # a few kB: a file in memory takes them whole
    os.lseek(made, 0, os.SEEK_SET)
    return above(made)


def _namespace(
    sandbox: SandboxPolicy,
    cwd: str | None,
    filters: Sequence[int] = (),
    link: Link | None = None,
    owner: tuple[int, int] | None = None,
    mounts: Sequence[Mount] = (),
) -> list[str]:
    """The namespace part of a process's command line (none without a containment): a PID namespace and a ``/proc``
    of its own; an IPC namespace (no SysV or POSIX message queue object outlives it); a UTS namespace (its
    hostname :data:`HOSTNAME`, not the host's); with network ``none`` or
    ``egress`` a network namespace (its own loopback; under ``egress`` the interface ``link`` connects, and its
    resolver, :data:`~._network.RESOLV`); a mount namespace where the host's files are read-only, each of
    :data:`PRIVATE` the host has is an empty tmpfs, and so is ``cwd``, its home, each at most ``sandbox.disk`` MiB,
    and :data:`CGROUPS` is hidden. Its home is ``owner``'s (its uid and gid; else the containment's user's), mode
    0700: a home of its own, where ``chmod`` and ``git`` work as in any other; ``mounts`` are its grants
    (``--process-mount``), bound last. Its first process dies with the gateway, even by SIGKILL (bubblewrap's
    ``--die-with-parent``, ``setpriv --pdeathsig``). ``filters`` are the descriptors of its seccomp filters
    (:meth:`SandboxPolicy.filters`), given to bubblewrap, or under ``unshare`` applied once its mounts are made,
    before the next helper, by the gateway's own interpreter (util-linux's tools apply none)."""
    containment = sandbox.containment
    if containment not in ("bwrap", "unshare"):
        return []
    network = ProcessNetwork(sandbox.network, link, RUN, os.path.join(sandbox.runtime, "resolv.conf"))
    hidden = [path for path in (RUN, *PRIVATE, CGROUPS) if os.path.isdir(path) and not os.path.islink(path)]
    home = "" if cwd is None else os.path.abspath(cwd)
    size = f"{sandbox.disk}m"
    if containment == "unshare":
        uid_gid = "" if owner is None else "uid={},gid={},".format(*owner)
        mounts_named = [
            "--mount-program",
            tool("mount"),
            "--mkdir-program",
            tool("mkdir"),
            "--link-program",
            tool("ln"),
        ]
        for point, options in _read_only():
            mounts_named += ["--read-only", point, options]
        mounts_named += ["--dev", "nosuid,noexec,mode=0755,size=64k"]
        for path in hidden:
            options = f"nosuid,nodev,mode=1777,size={size}" if path in PRIVATE else "nosuid,nodev,mode=755"
            mounts_named += ["--tmpfs", path, options]
        if home:
            mounts_named += ["--home", home, f"nosuid,nodev,mode=0700,{uid_gid}size={size}"]
        for mount in mounts:
            mounts_named += ["--bind", "rw" if mount.writable else "ro", mount.source, mount.target]
        return [
            *(tool("setpriv"), "--pdeathsig", "KILL", "--", *network.entered(), tool("unshare")),
            *("--pid", "--ipc", "--uts", "--mount", *network.unshared()),
            *("--", tool("bash"), "-c", _UNSHARE_MOUNTS, "sh", *mounts_named, *network.unshare_mounts(), "--"),
            *_own_ptys(),  # as the namespace's first process: a process it started would be, and end it
            *(applied(filters, sys.executable) if filters else []),  # after the mounts: the profile refuses them
        ]
    # Its network namespace made by unshare (under egress, its Link's, entered by nsenter), its loopback up by ip
    # (RTM_NEWLINK), then bubblewrap in it: bubblewrap's own --unshare-net failed a process's start now and then
    # ("loopback: Failed RTM_NEWADDR: No child processes").
    line = [tool("bwrap"), "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", HOSTNAME]
    line += ["--die-with-parent"]
    # A devpts of its own, bound over bubblewrap's, where the gateway is root (unshare --mount needs it): an
    # unprivileged bubblewrap keeps its --dev's, which has no max.
    root = os.geteuid() == 0
    line = [*network.loopback(), *line]
    if network.isolated or root:
        namespaces = [*(["--mount"] if root else []), *network.unshared()]
        line = [*network.entered(), tool("unshare"), *namespaces, "--", *(_own_ptys() if root else []), *line]
    for descriptor in filters:
        line += ["--add-seccomp-fd", str(descriptor)]
    line += ["--ro-bind", "/", "/", "--dev", "/dev", *(["--dev-bind", "/dev/pts", "/dev/pts"] if root else [])]
    line += ["--proc", "/proc"]
    size = str(sandbox.disk << 20)
    for path in hidden:  # a later mount over an earlier one
        line += ["--perms", "01777", "--size", size, "--tmpfs", path] if path in PRIVATE else ["--tmpfs", path]
    line += network.bound()
    if home:
        # Its parents under a tmpfs as the host has them (bubblewrap would make them 0700, root's), then itself.
        under = private_under(home)
        for parent in reversed(Path(home).parents):
            if under is not None and str(parent).startswith(f"{under}/"):
                line += ["--perms", "0711", "--dir", str(parent)]
        line += ["--perms", "0700", "--size", size, "--tmpfs", home]
        line += ["--perms", "01777", "--dir", os.path.join(home, "tmp"), "--chdir", home]
    for mount in mounts:  # last: a target under one of its own directories is made in it
        if mount.source:
            line += ["--bind" if mount.writable else "--ro-bind", mount.source, mount.target]
        else:
            line += ["--perms", "0555", "--size", "4096", "--tmpfs", mount.target, "--remount-ro", mount.target]
    line.append("--")
    if home and owner is not None:  # bubblewrap makes it root's: its owner's, by root in the namespace
        line += ["/bin/sh", "-c", _CHOWN, tool("chown"), "{}:{}".format(*owner), home]
    return line


def _own_ptys() -> list[str]:
    """The command line's part that mounts a devpts of the process's own (:data:`_DEVPTS`), of at most :data:`PTYS`,
    with bubblewrap's options."""
    return ["/bin/sh", "-c", _DEVPTS, tool("mount"), f"newinstance,ptmxmode=0666,mode=620,max={PTYS}"]


def _read_only() -> list[tuple[str, str]]:
    """Each mount point of the host's that a process could write, with the options that make it read-only in a
    mount namespace of its own as its other options are (``mount -o remount,bind,ro``): what bubblewrap's
    ``--ro-bind / /`` does, for unshare's script."""
    pairs = []
    for line in read("/proc/self/mountinfo").splitlines():
        fields, _, rest = line.partition(" - ")
        point, options = fields.split()[4:6]
        flags = options.split(",")
        if rest.split()[0] not in _KERNEL_VIEWS and "ro" not in flags:
            # mountinfo writes a space, tab, newline or backslash in octal.
            point = re.sub(r"\\([0-7]{3})", lambda octal: chr(int(octal[1], 8)), point)
            kept = [flag for flag in flags if flag in ("nosuid", "nodev", "noexec")]
            pairs.append((point, ",".join(["remount", "bind", "ro", *kept])))
    return pairs


def _workdir(path: str, place: Place) -> str:
    """A new directory of the process's own (its cwd and ``HOME``), mode 0700, and uncontained ``tmp`` in it, its
    ``TMPDIR``: contained, it is the mount point of its home's tmpfs, which holds its ``tmp``."""
    made = [path] if place.sandbox.policy.containment != "none" else [path, os.path.join(path, "tmp")]
    for directory in made:
        os.makedirs(directory, mode=0o700)
        if place.uid is not None:
            os.chown(directory, place.uid, -1 if place.gid is None else place.gid)
    return path


def _removed(path: str) -> bool:
    """Whether ``path`` is gone once removed by ``rm``, as root: whoever's files are in it, at any depth (no
    recursion of Python's, which a deep tree ended), following no link a process planted."""
    remove = [tool("rm"), "-rf", "--one-file-system", "--", path]
    with suppress(OSError, SandboxError):  # SandboxError: rm did not end in time
        run_helper(remove, timeout=END_WITHIN)
    return not os.path.lexists(path)
