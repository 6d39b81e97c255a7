"""The host's directories a sealed process is granted (``--process-mount SOURCE:TARGET[:rw]``), and each user's own
(``{user}`` as SOURCE's last part).

A grant is a bind mount at ``TARGET`` in every contained process's mount namespace, read-only unless ``:rw``, with
``nosuid`` and ``nodev``. Who may read and write there is the operating system's to say, by the files' owners and
modes, as on the host: a process has a uid of its own (``--process-uids``), so a tree several users' processes write is
shared through a group, and a supplementary group is given where the operator marked a tree as shared by one, a setgid
``SOURCE`` directory (``chgrp team tree; chmod 2770 tree``): its group, never root's.

A user's own directory is ``USERS/NAME``: ``NAME`` a digest of her identity (how she was authenticated, by whom, and
her principal: :func:`directory_name`), which no other principal can take, and never her raw name (which may hold
``/`` or ``..``); made on first use, ``root:GID`` mode 2770, ``GID`` hers alone, allocated once from
``--process-user-gids``. Each of her processes, whatever its uid, has ``GID`` as a supplementary group and a umask of
0007, and the directory's setgid bit gives what they make her group: every process of hers reads and writes there, no
other user's is given the directory nor its group. ``USERS`` is root's, mode 0700: no process searches it (a digest of
a known name is no secret), and the sandbox, root, binds a user's directory in. Her group is recorded host-wide, in
``STATE/gids/GID`` (a link naming her directory, under a lock the host's gateways share: :data:`STATE`), so that
gateways of one host given other ``USERS`` never give one gid to two users; a record whose directory is gone, or has
another group, holds nothing.
"""

from __future__ import annotations

import base64
import fcntl
import grp
import hashlib
import json
import os
import pwd
import stat
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Final

USER: Final = "{user}"
USER_GIDS: Final = "1879048192-1879113727"
"""The default of ``--process-user-gids``: 65,536 gids at the start of the range systemd's ``UIDS-GIDS.md`` leaves
unused (1879048192-2147483647, above the containers' of ``systemd-nspawn``), checked at startup against the host's
users and groups and ``--process-uids``."""
_KERNEL: Final = ("/proc", "/dev", "/sys")
RESOLV: Final = "/etc/resolv.conf"  # a process's own under --process-network egress
STATE: Final = "/var/lib/mcp-sessions"
"""The default of ``--process-state``: where the gateways of a host keep what outlives them and their processes, each
user's group (``gids/``) and the uids kept for a user (``uids/``, ``owners/``: ``_sandbox.Uids``); root's, mode 0700,
on a disk (``/run`` is gone at the next boot, the files they guard are not)."""


class GrantError(ValueError):
    """A grant the gateway cannot give: a flag's value refused at startup, in one line that says what to do."""


@dataclass(frozen=True)
class Grant:
    """One ``--process-mount``: ``source`` (resolved; ``USERS/{user}`` for a user's own), ``target`` in the
    process's namespace, ``writable`` (``:rw``), and ``group``, the supplementary group a process gets with it (a
    setgid source's, not root's), if any."""

    source: str
    target: str
    writable: bool
    group: int | None = None

    @property
    def per_user(self) -> bool:
        return os.path.basename(self.source) == USER

    @property
    def said(self) -> str:
        """What the startup line adds to its target and mode: whose it is, and the group it gives."""
        if self.per_user:
            return ", each user's own"
        return "" if self.group is None else f", group {self.group}"


def grant(spec: str, homes: str | None = None, own: Sequence[str] = ()) -> Grant:
    """The grant ``spec`` (``SOURCE:TARGET[:rw]``) says, checked: both absolute; ``SOURCE`` an existing directory,
    or ``USERS/{user}`` with ``USERS`` an existing directory only root may search (0700); ``TARGET`` not ``/``, not
    in the kernel's views, neither holding nor under ``homes`` (the directory of the processes' homes), holding none
    of ``own`` (the directories each process has of its own, a tmpfs each), and existing on the host unless under
    one of those."""
    flag = f"--process-mount {spec}"
    parts = spec.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise GrantError(f"{flag}: give SOURCE:TARGET, SOURCE:TARGET:ro or SOURCE:TARGET:rw (no ':' in a path)")
    source, target = parts[:2]
    if not (os.path.isabs(source) and os.path.isabs(target)):
        raise GrantError(f"{flag}: SOURCE and TARGET are absolute paths")
    if USER in target or ".." in target.split("/"):
        raise GrantError(f"{flag}: TARGET is a path in the process's namespace, without '{USER}' or '..'")
    target = os.path.normpath(target)
    source = _source(flag, source)
    _target(flag, target, homes, own)
    group = None
    found = os.stat(source) if USER not in source else None
    if found is not None and found.st_mode & stat.S_ISGID and found.st_gid != 0:
        group = found.st_gid
    return Grant(source, target, len(parts) == 3 and parts[2] == "rw", group)


def _source(flag: str, source: str) -> str:
    """``source`` resolved and checked (:func:`grant`)."""
    if USER in source:
        users, last = os.path.split(source)
        if last != USER or USER in users:
            raise GrantError(f"{flag}: '{USER}' is SOURCE's last part, once: USERS/{USER}")
        users = os.path.realpath(users)
        try:
            found = os.stat(users)
        except OSError as exc:
            raise GrantError(f"{flag}: {users}: {exc.strerror}: make it, root's, mode 0700") from None
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != 0 or found.st_mode & 0o077:
            raise GrantError(
                f"{flag}: {users} must be a directory root's alone may search (chown root; chmod 0700): "
                "a process would reach each user's directory by its name"
            )
        return os.path.join(users, USER)
    resolved = os.path.realpath(source)
    if not os.path.isdir(resolved):
        raise GrantError(f"{flag}: {source} is not a directory of the host's")
    return resolved


def _target(flag: str, target: str, homes: str | None, own: Sequence[str]) -> None:
    """``target`` checked (:func:`grant`): it breaks none of the process's own directories."""
    if target == "/" or any(_within(target, kernel) for kernel in _KERNEL):
        raise GrantError(f"{flag}: TARGET may not be /, nor under /proc, /dev or /sys")
    if homes is not None and (_within(target, homes) or _within(homes, target)):
        raise GrantError(f"{flag}: TARGET would hide the processes' homes ({homes}): choose another")
    if held := [path for path in (*own, RESOLV) if _within(path, target)]:
        raise GrantError(f"{flag}: TARGET would hide the process's own {held[0]}: choose a directory in it or beside")
    under = any(_within(target, path) for path in own)
    if not under and not os.path.isdir(target):
        raise GrantError(
            f"{flag}: {target} is not a directory of the host's, whose files are read-only to a process: "
            "make it (an empty one), or choose one under /tmp"
        )


def _within(path: str, directory: str) -> bool:
    return f"{path}/".startswith(f"{directory.rstrip('/')}/")


def checked(grants: Sequence[Grant]) -> tuple[Grant, ...]:
    """``grants`` as a whole: no two at one target, none under another's (it would make its mount point in the
    other's source), and one users' directory for a user's own."""
    for one in grants:
        for other in grants:
            if one is not other and _within(one.target, other.target):
                raise GrantError(f"--process-mount: {one.target} is under another grant's TARGET, {other.target}")
    if len({one.source for one in grants if one.per_user}) > 1:
        raise GrantError(f"--process-mount: a user has one directory of her own: one USERS/{USER} for every grant")
    return tuple(grants)


def directory_name(identity: Sequence[str]) -> str:
    """The name of a user's own directory: a digest of her ``identity`` (how she was authenticated, and her
    principal with its issuer: ``stdio._models.Owner``), domain-separated, in base32 (a file name of 52 lowercase
    letters and digits, whatever her name)."""
    return _digest(b"mcp-sessions user directory", identity)


def owner_name(identity: Sequence[str]) -> str:
    """Whom a uid is kept for (``_sandbox.Uids``), as :data:`STATE` records it: a digest of ``identity`` as
    :func:`directory_name`'s, in another domain (a record names no directory)."""
    return _digest(b"mcp-sessions uid owner", identity)


def _digest(domain: bytes, identity: Sequence[str]) -> str:
    digest = hashlib.sha256(domain + b"\0" + json.dumps(list(identity)).encode())
    return base64.b32encode(digest.digest()).decode().rstrip("=").lower()


def state_directory(path: str, part: str) -> str:
    """``path`` (``--process-state``)'s ``part``, made if missing, root's and mode 0700 each; ``GrantError`` where
    another user could write either, or it cannot be made."""
    made = os.path.join(path, part)
    for directory in (path, made):  # each checked before anything is made in it
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)  # its mode to the last alone: one at a time
            found = os.stat(directory)
        except OSError as exc:
            raise GrantError(
                f"--process-state {path}: {directory}: {exc.strerror}: give a directory the gateway's user may make "
                "and write, by --process-state DIR, the same for every gateway of the host"
            ) from None
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o022:
            raise GrantError(
                f"--process-state {path}: it must be the gateway's user's alone to write (chmod 0700; else give "
                "another, by --process-state DIR)"
            )
    return made


@dataclass(frozen=True)
class UserGroups:
    """Where each user's own directory is (``users``, the ``USERS`` of ``USERS/{user}``), the gids her group is taken
    from (``gids``, ``--process-user-gids FIRST-LAST``), and where the host's gateways record them (``state``,
    ``--process-state``): what the operator asked, checked once (:meth:`checked`); the directories are
    :class:`UserDirectories`', made as the gateway runs."""

    users: str
    gids: range
    state: str = STATE

    @classmethod
    def checked(cls, users: str, gids: str, process_uids: range | None = None, state: str = STATE) -> UserGroups:
        """``--process-user-gids`` read, a range apart from ``process_uids`` (each process's own gid) and from every
        group of the host's; a :class:`GrantError` says which."""
        first, _, last = gids.partition("-")
        if not (first.isdigit() and last.isdigit() and 0 < int(first) <= int(last) < 2**32 - 1):
            raise GrantError(f"--process-user-gids takes FIRST-LAST, two gids above 0: not {gids!r}")
        given = range(int(first), int(last) + 1)
        uids = process_uids or range(0)
        if max(given.start, uids.start) < min(given.stop, uids.stop):
            raise GrantError("--process-user-gids and --process-uids (each process's own gid) must not meet")
        taken = [group.gr_name for group in grp.getgrall() if group.gr_gid in given]
        taken += [user.pw_name for user in pwd.getpwall() if given.start <= user.pw_gid < given.stop]
        if taken:
            raise GrantError(f"--process-user-gids: the range is the gateway's alone, but {taken[0]}'s group is in it")
        return cls(users, given, state)


class UserDirectories:
    """Each user's own directory in ``groups.users`` and her group, from ``groups.gids``, recorded in
    ``groups.state`` for the host's gateways, as the gateway runs."""

    def __init__(self, groups: UserGroups) -> None:
        self.gids = groups.gids
        self.users = groups.users
        self.records = state_directory(groups.state, "gids")

    def own(self, identity: Sequence[str]) -> tuple[str, int]:
        """The user ``identity``'s directory and group, made on her first use, and recorded. Blocking; ``OSError``
        if it cannot be made, and ``GrantError`` if what is there is not what the gateway made, or its group is
        another directory's."""
        path = os.path.join(self.users, directory_name(identity))
        lock = os.open(self.records, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # every gateway's of the host, whatever its USERS
            try:
                found = os.lstat(path)
            except FileNotFoundError:
                return path, self._made(path)
            mode = stat.S_IMODE(found.st_mode)
            if not stat.S_ISDIR(found.st_mode) or found.st_uid != 0 or found.st_gid not in self.gids or mode != 0o2770:
                raise GrantError(
                    f"{path} is not a user's directory as the gateway makes it (root's, mode 2770, a group of "
                    "--process-user-gids): move it away, or give it back its group"
                )
            holder = self._holder(found.st_gid)
            if holder is None:  # made before groups were recorded: recorded at its user's next use
                self._record(found.st_gid, path)
            elif not os.path.samefile(holder, path):
                raise GrantError(
                    f"{path}'s group {found.st_gid} is also {holder}'s: give one of them another group of "
                    "--process-user-gids (chgrp), each user's alone"
                )
            return path, found.st_gid
        finally:
            os.close(lock)

    def _made(self, path: str) -> int:
        """A new user's directory at ``path``, and her group: the least of the range that no directory of ``USERS``
        has and no record holds."""
        taken = set()
        with os.scandir(self.users) as entries:
            for entry in entries:
                taken.add(entry.stat(follow_symlinks=False).st_gid)
        gid = next((gid for gid in self.gids if gid not in taken and self._holder(gid) is None), None)
        if gid is None:
            raise GrantError(f"--process-user-gids {self.gids.start}-{self.gids.stop - 1}: every gid is a user's")
        self._record(gid, path)
        os.mkdir(path, 0o700)
        os.chown(path, 0, gid)
        os.chmod(path, 0o2770)  # noqa: S103 - her group's: every process of hers
        return gid

    def _holder(self, gid: int) -> str | None:
        """The directory the record of ``gid`` names, if it still has that group: else the record holds nothing (its
        ``USERS`` removed, say)."""
        try:
            holder = os.readlink(os.path.join(self.records, str(gid)))
            found = os.lstat(holder)
        except OSError:
            return None
        return holder if stat.S_ISDIR(found.st_mode) and found.st_gid == gid else None

    def _record(self, gid: int, path: str) -> None:
        """``gid`` recorded as ``path``'s, in place of a record that holds nothing."""
        record = os.path.join(self.records, str(gid))
        with suppress(FileNotFoundError):
            os.unlink(record)
        os.symlink(path, record)
