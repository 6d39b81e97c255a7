"""``mcp-sessions gateway --stdio``'s process flags (defined in ``_options``): which process a request reaches, how
many run and for how long (``--processes``, ``--max-processes``, ...), and how each runs and is contained
(``--process-*``), checked into the :class:`~.sealed._sandbox.SandboxPolicy` every process is started by, and the
variables no process is given (``_loader.loads_code``: ``--pass-env``'s here, ``--process-env``'s in
``auth._users``). What ``_cli`` calls, as it calls ``sealed._network`` for ``--process-network`` and ``_lifecycle``
to serve."""

from __future__ import annotations

import argparse
import ctypes
import grp
import logging
import math
import os
import pwd
import shutil
import string
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ._loader import loads_code
from .sealed._grants import STATE
from .sealed._kernel import RUNTIME, runtime_directory

if TYPE_CHECKING:
    from .sealed._network import Network
    from .sealed._sandbox import ProcessFile, SandboxPolicy

_PR_SET_DUMPABLE: Final = 4
_PR_SET_CHILD_SUBREAPER: Final = 36
_MAX_LINKS: Final = 40
"""The links path resolution follows at most (the kernel's ``MAXSYMLINKS``): more is ``ELOOP``."""


def process_options(
    args: argparse.Namespace,
    command: Sequence[str],
    auth: object | None,
    runtime: str = RUNTIME,
    state: str = STATE,
    share: int = 1,
) -> SandboxPolicy:
    """How the stdio processes run (``--process-*``), checked, the containment tried once (``auto`` resolved to
    the one that works here). Nothing of the gateway's own process changes here: :func:`seal_gateway` does, as the
    command starts. ``auth`` is the gateway's users' authentication (a ``GatewayAuth``), of which only whether there
    is one counts here: typed so, the flags import nothing of ``auth/``, which imports the configuration's types
    (``_config``), whose defaults the flags read. ``runtime``: ``--runtime-directory`` (or systemd's), checked
    where a process's uid or its egress table is locked there; ``state``: ``--process-state`` (or its default,
    ``_cli.state_of``); ``share``: the stdio servers of a ``--config`` file, among which the host's processes are
    shared (:func:`_bounds`), and whose pool ``--process-uids`` is."""
    from .sealed._kernel import unmapped
    from .sealed._sandbox import SandboxError, SandboxPolicy, private_under

    if command and shutil.which(command[0]) is None:
        raise ValueError(f"--stdio: {command[0]}: no such command (or not executable)")
    if auth is not None and args.process_env and not args.process_uids and not args.accept_shared_uid:
        raise ValueError(
            "--process-env puts each user's secrets in processes that share one uid and can read "
            "each other's: give --process-uids FIRST-LAST (a uid per process), or "
            "--accept-shared-uid to accept that"
        )
    if any(name.startswith("MCP_SESSION") for name in args.pass_env):
        raise ValueError("--pass-env: the gateway's MCP_SESSION* variables are its own")
    if bad := [name for name in args.pass_env if not name.isidentifier() or not name.isascii()]:
        raise ValueError(f"--pass-env: {bad[0]!r} is not a variable name a process may be given")
    if loader := [name for name in args.pass_env if loads_code(name)]:
        raise ValueError(f"--pass-env: {loader[0]!r} tells the dynamic loader what to load, and root's helpers run it")
    if args.process_disk < 1:
        raise ValueError("--process-disk takes a positive number")
    uids, user, group = _run_as(args, runtime, state, share)
    uid: int | None = uids.first if uids is not None else user
    if command and uid is not None:
        _reached_as(command, uid, group if group is not None else uid)
    cwd = args.process_cwd
    if cwd is not None and "{id}" not in os.path.basename(cwd):
        raise ValueError("--process-cwd needs '{id}' in its last part: each conversation gets a directory of its own")
    if cwd is None and uids is not None:  # a uid of its own, so a HOME of its own
        cwd = os.path.join(tempfile.gettempdir(), "mcp-sessions", "{id}")
    network: Network = args.process_network or ("egress" if uids is not None else "host")
    as_root = command and uids is None and user is None and os.geteuid() == 0
    if as_root and network == "host" and not args.accept_root_processes:
        raise ValueError(
            "--stdio: the gateway runs as root, and so would every process, on the host's network: give "
            "--process-uids FIRST-LAST (key process-uids: a uid each, contained, from a range no account of this host "
            "has), or --process-user USER, or --accept-root-processes to run them as root"
        )
    parts = [part for part, used in (("uids", uids is not None), ("tables", network == "egress")) if used]
    if parts:  # before any lock is taken there: a container's root may not own the host's /run/mcp-sessions
        runtime_directory(runtime, *parts)
    bounds = _bounds(args, share, per_uid=uids is not None)
    seccomp, profile = _seccomp(args)
    grants, users = _grants(args, cwd, uids, auth, state)
    sandbox = SandboxPolicy(
        args.process_containment,
        uids=uids,
        user=user,
        group=group,
        cwd=cwd,
        bounds=bounds,
        pids=args.process_pids if bounds is None else None,
        network=network,
        disk=args.process_disk,
        seccomp=seccomp,
        profile=profile,
        grants=grants,
        users=users,
        runtime=runtime,
    )
    try:
        sandbox = sandbox.chosen()
    except SandboxError as exc:
        raise ValueError(str(exc)) from None
    # A container's, a pod's user namespace maps some uids alone: one outside them is no process's to run as.
    if uids is not None and (mapped := unmapped(uids.first, uids.last)) is not None:
        raise ValueError(
            f"--process-uids {args.process_uids}: the gateway's user namespace maps the ids {mapped} alone: give a "
            "range inside them, or a user namespace that maps it (a pod's maps 0-65535)"
        )
    if sandbox.containment != "none":
        _seen_contained(command, cwd)
    # a process that forks and exits in a loop outruns pkill
    if uids is not None and sandbox.containment == "none":
        why = f" ({sandbox.choice})" if sandbox.choice else ""
        raise ValueError(
            f"--process-uids needs a containment, bwrap or unshare{why}: a uid that shares the host's processes "
            "and directories cannot be cleared reliably before it is given to the next user"
        )
    if args.process_seccomp is not None and sandbox.containment == "none":
        why = f" ({sandbox.choice})" if sandbox.choice else ""
        raise ValueError(f"--process-seccomp needs a containment, bwrap or unshare{why}: the filter is applied in it")
    if sandbox.containment == "none":  # auto found neither: no filter, and the startup line names none
        sandbox = replace(sandbox, seccomp=b"", profile="")
    if grants and sandbox.containment == "none":  # the host's files are its own already
        why = f" ({sandbox.choice})" if sandbox.choice else ""
        raise ValueError(f"--process-mount needs a containment, bwrap or unshare{why}: a mount namespace of its own")
    if sandbox.network == "egress" and sandbox.containment == "none":  # its network namespace is the host's
        why = f" ({sandbox.choice})" if sandbox.choice else ""
        raise ValueError(f"--process-network egress needs a containment, bwrap or unshare{why}: its own network")
    if args.process_file and sandbox.containment == "none":
        why = f" ({sandbox.choice})" if sandbox.choice else ""
        raise ValueError(
            f"--process-file needs a containment, bwrap or unshare{why}: its file is written in the process's own "
            "home or /tmp, a tmpfs of its namespace"
        )
    sandbox = replace(sandbox, files=_process_files(args, cwd, grants))
    if cwd is not None and uids is not None and private_under(os.path.dirname(cwd)) is None:
        # the processes' mount points: listable by no one
        _private_parent(cwd)
    return sandbox


def seal_gateway(containment: str) -> None:
    """The gateway's own process, once its command line is accepted: made non-dumpable, and under bubblewrap
    (``containment``) the reaper of its processes' orphans; as PID 1 under none, it warns."""
    libc = ctypes.CDLL(None, use_errno=True)
    # The gateway made non-dumpable: no process of its user reads its /proc files (its environment, its memory).
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    # bubblewrap's orphans come to the gateway, which reaps them at once
    if containment == "bwrap":
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    elif containment == "none" and os.getpid() == 1:  # unshare leaves nothing
        logging.getLogger("mcp_sessions.gateway").warning(
            "mcp-sessions gateway: PID 1 without an init: what a process leaves running is never "
            "reaped once it ends (a zombie holding a pid): run the container with one (docker run --init)"
        )


def _seen_contained(command: Sequence[str], cwd: str | None) -> None:
    """What a contained process would not find, said at startup: a file its command names under a directory it has
    of its own, empty (``/tmp``...), is one line and exit status 2; a working directory of the gateway's there, which
    it would not start in (it starts in ``/``), a warning."""
    from .._wire import printable
    from .sealed._sandbox import private_under

    for part in command:
        if os.path.isabs(part) and os.path.exists(part) and (private := private_under(part)) is not None:
            raise ValueError(
                f"--stdio: {printable(part)} is under {private}, which each contained process has of its own, "
                "empty: put it in a directory every process's user may read, or give --process-containment none"
            )
    if cwd is None and (private := private_under(os.getcwd())) is not None:
        logging.getLogger("mcp_sessions.gateway").warning(
            "mcp-sessions gateway: the processes start in /, not in the gateway's working directory: it is under "
            "%s, which each contained process has of its own, empty (give --process-cwd, or start the gateway "
            "elsewhere)",
            private,
        )


def _reached_as(command: Sequence[str], uid: int, gid: int) -> None:
    """The command's program, and a script's interpreter (its ``#!`` line), as named and as their links lead: each
    directory on the way searched as the processes' user (``test -x`` under ``setpriv``: the kernel's say, never the
    mode bits read here), every link's on the way too (:func:`_walked`: a venv's ``python`` that leads to pyenv's
    under ``/root``, through another link). The first that is not: one line, and exit status 2, instead of a
    ``Permission denied`` at each process's start that names the last link, not the directory."""
    from .._wire import printable
    from .sealed._kernel import SandboxError, run_helper, tool

    try:
        searched = [tool("setpriv"), f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", tool("test"), "-x"]
    except SandboxError:  # the containment's check says what is missing
        return
    program = shutil.which(command[0]) or command[0]
    seen: set[Path] = set()
    for path in (program, *_interpreter(program)):
        for directory in _walked(path):
            if directory in seen:
                continue
            seen.add(directory)
            try:
                searching = run_helper([*searched, str(directory)])
            except SandboxError as exc:
                raise ValueError(
                    f"--stdio: {printable(str(directory))} searched as the processes' uid: {exc}"
                ) from None
            if searching.returncode != 0 and directory == Path("/"):
                return  # the uid cannot be taken here at all (setpriv's failure): the containment's check says so
            if searching.returncode != 0:
                mode = directory.stat().st_mode & 0o7777
                where = "is under" if directory in Path(os.path.abspath(path)).parents else "leads, by a link, through"
                raise ValueError(
                    f"--stdio: {printable(path)} {where} {printable(str(directory))} (mode {mode:o}), which the "
                    f"processes' uid ({uid}) may not search: put the server and its interpreter (a virtual "
                    "environment) where every user may read them, under /opt or /srv say"
                )


def _walked(path: str) -> list[Path]:
    """Each directory the kernel searches to reach ``path``'s file, in order, as path resolution walks it: every
    directory of the name, and of each link's target on the way (a relative one from its link's directory), to the
    last; at most 40 links followed (the kernel's ``MAXSYMLINKS``), and a part that cannot be read ends the walk (the
    start fails there, saying so)."""
    walked: list[Path] = []
    parts = list(Path(os.path.join(os.getcwd(), path)).parts)
    at = Path("/")
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "/":
            at = Path("/")
            continue
        walked.append(at)  # searched to find part in it
        if part == "..":
            at = at.parent
            continue
        step = at / part
        if not step.is_symlink():
            at = step
            continue
        links += 1
        try:
            target = os.readlink(step)
        except OSError:
            break
        if links > _MAX_LINKS:
            break
        parts = [*Path(target).parts, *parts]
    return list(dict.fromkeys(walked))


def _interpreter(program: str) -> list[str]:
    """A script's interpreter, as its ``#!`` line names it (``/usr/bin/env NAME``: NAME on the gateway's PATH)."""
    try:
        with open(program, "rb") as script:
            first = script.readline(256)
    except OSError:
        return []
    words = first[2:].decode(errors="replace").split() if first.startswith(b"#!") else []
    if words and os.path.basename(words[0]) == "env":
        named = [word for word in words[1:] if not word.startswith("-")]
        return [found] if named and (found := shutil.which(named[0])) else []
    return words[:1]


def _grants(args: argparse.Namespace, cwd: str | None, uids: Any, auth: object | None, state: str) -> tuple[Any, Any]:
    """The host's directories granted to each process (``--process-mount``), checked, and with ``{user}``, the
    users' directories (``--process-user-gids``): only for callers the gateway authenticates, a uid each, and a
    process per conversation of one caller's."""
    from .sealed._grants import UserGroups, checked, grant
    from .sealed._sandbox import PRIVATE

    homes = None if cwd is None else os.path.dirname(cwd)
    grants = checked([grant(spec, homes, PRIVATE) for spec in args.process_mount])
    per_user = [one for one in grants if one.per_user]
    if not per_user:
        return grants, None
    if auth is None:
        raise ValueError("--process-mount USERS/{user} needs the gateway's auth (--auth-*): whose directory, else?")
    if uids is None:
        raise ValueError("--process-mount USERS/{user} needs --process-uids: a user's files, no other user's uid")
    if args.processes == "shared" or args.sessionless == "shared":
        raise ValueError("--process-mount USERS/{user}: a process shared by every user is no one's: not with shared")
    process_uids = range(uids.first, uids.last + 1)
    users = os.path.dirname(per_user[0].source)
    return grants, UserGroups.checked(users, args.process_user_gids, process_uids, state)


def _process_files(args: argparse.Namespace, cwd: str | None, grants: Sequence[Any]) -> tuple[ProcessFile, ...]:
    """``--process-file``'s files, checked: each ``TARGET`` under the process's own home (``~/``) or ``/tmp``, once,
    and under no ``--process-mount`` (a tree of the host's, where another process could have left a link); each
    ``TEMPLATE`` read whole, at most :data:`TEMPLATE_LIMIT` bytes of UTF-8, a :class:`string.Template` whose every
    name a ``--process-env`` gives."""
    from .._wire import printable
    from .sealed._sandbox import PRIVATE, ProcessFile

    given = {spec.partition("=")[0] for spec in args.process_env}
    files: list[ProcessFile] = []
    for spec in args.process_file:
        target, _, path = spec.partition("=")
        flag = f"--process-file {printable(target)}"
        if not target or not path:
            raise ValueError(f"--process-file takes TARGET=TEMPLATE: not {printable(spec)!r}")
        under = next((own for own in (f"{PRIVATE[0]}/", "~/") if target.startswith(own)), None)
        parts = target.removeprefix(under or "").split("/")
        if under is None or any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"{flag}: TARGET is ~/PATH (the process's home) or /tmp/PATH, its own, with no '.', '..'")
        if any(one.target == target for one in files):
            raise ValueError(f"{flag}: given twice")
        # under the host's /tmp a grant may be bound (never under a home of --process-cwd's), and HOME is /tmp without
        at = target if cwd is not None else os.path.join(PRIVATE[0], target.removeprefix("~/"))
        if shared := [one.target for one in grants if f"{at}/".startswith(f"{one.target}/")]:
            raise ValueError(f"{flag}: under --process-mount {printable(shared[0])}, which is not the process's own")
        template = _template(flag, path)
        if not template.is_valid():
            raise ValueError(f"{flag}: {printable(path)}: a '$' that starts no ${{NAME}} (write $$ for a '$')")
        names = tuple(template.get_identifiers())
        if missing := [name for name in names if name not in given]:
            raise ValueError(f"{flag}: {printable(path)} names ${{{missing[0]}}}, which no --process-env gives")
        files.append(ProcessFile(target, template.template, names))
    return tuple(files)


TEMPLATE_LIMIT: Final = 65536
"""A ``--process-file`` template at most (bytes): a .netrc or a kubeconfig is a few kB."""


def _template(flag: str, path: str) -> string.Template:
    """The template file ``path``, read once, bounded."""
    from .._wire import printable
    from ._file import read_bounded

    try:
        text = read_bounded(path, TEMPLATE_LIMIT)
    except OSError as exc:
        raise ValueError(f"{flag}: {printable(path)} cannot be read: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"{flag}: {printable(path)} {exc}") from None
    if "\0" in text:
        raise ValueError(f"{flag}: {printable(path)} holds a NUL, which no shell carries")
    return string.Template(text)


def _run_as(args: argparse.Namespace, runtime: str, state: str, share: int) -> tuple[Any, int | None, int | None]:
    """As whom the processes run: a uid each from ``--process-uids``, or ``--process-user``'s uid and gid."""
    from .sealed._sandbox import UidRange

    if (args.process_uids or args.process_user) and os.geteuid() != 0:
        flag = "--process-uids" if args.process_uids else "--process-user"
        raise ValueError(f"{flag} needs the gateway to run as root (it changes each process's user)")
    if args.process_uids and args.process_user:
        raise ValueError("--process-uids gives each process a uid of its own: not with --process-user")
    if args.process_uids is not None:
        # a user's conversations' processes, and as many still ending (Uids: a uid kept for her), on each of a
        # --config file's stdio servers, whose pool the range is
        per_user = 2 * max(1, args.max_processes_per_principal) * share
        locks = os.path.join(runtime, "uids")
        uids = UidRange.parsed(args.process_uids, per_user=per_user, locks=locks, state=state)
        if (someone := uids.taken_by_users()) is not None:
            raise ValueError(f"--process-uids: the range is the gateway's alone, but {someone} is a user here")
        return uids, None, None
    if args.process_user is None:
        return None, None, None
    name, _, group_name = args.process_user.partition(":")
    try:
        entry = pwd.getpwnam(name)
        return None, entry.pw_uid, grp.getgrnam(group_name).gr_gid if group_name else entry.pw_gid
    except KeyError:
        raise ValueError(f"--process-user: no such user or group: {args.process_user}") from None


def _bounds(args: argparse.Namespace, share: int, *, per_uid: bool) -> Any:
    """The control groups that bound each conversation (``--process-memory``, by default :func:`default_memory`
    where the host gives the gateway a control group, ``--process-pids``, ``--process-cpu``); None without bounds, or
    for ``--process-pids`` alone with a uid per process where the host gives none (RLIMIT_NPROC).

    ``share``: the stdio servers of a ``--config`` file (1 for a gateway of one), among which the
    host's half is shared, so that one gateway's processes together stay within it whatever server runs them: each
    server's processes are bounded together by its share (cgroup v1), and a process's default counts them all."""
    from .sealed._cgroups import CPU_PERIOD, Bounds

    for flag, value in (("--process-memory", args.process_memory), ("--process-pids", args.process_pids)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} takes a positive number")
    cpu = args.process_cpu
    # The kernel's least quota: 1 ms of each period.
    if cpu is not None and not (math.isfinite(cpu) and cpu * CPU_PERIOD >= 1000):
        raise ValueError(f"--process-cpu takes a number of cores, at least {1000 / CPU_PERIOD:g}")
    memory = None if args.process_memory is None else args.process_memory << 20
    processes = max(args.max_processes + args.warm + 1, 1) * share  # a bad count is said later
    if memory is None and (bounds := Bounds.found(1, args.process_pids, cpu)) is not None:
        together = bounds.version == 1  # v1: the gateway's own group bounds them together (Bounds.together)
        memory = default_memory(processes, together=together)
        return replace(bounds, memory=memory, together=_host_memory() // 2 // share if together else None)
    if memory is None and args.process_pids is None and cpu is None:
        return None
    bounds = Bounds.found(memory, args.process_pids, cpu)
    if bounds is not None and memory is not None and bounds.version == 1:
        bounds = replace(bounds, together=_host_memory() // 2 // share)
    if bounds is None and (memory is not None or cpu is not None or not per_uid):
        flag = "--process-pids (without --process-uids)"
        if memory is not None or cpu is not None:
            flag = "--process-memory" if memory is not None else "--process-cpu"
        raise ValueError(
            f"{flag} bounds a conversation through a control group, and this host gives the "
            "gateway none it may create (cgroup v2 delegated with the controller, or v1's "
            "hierarchy, writable)"
        )
    return bounds


def _seccomp(args: argparse.Namespace) -> tuple[bytes, str]:
    """The processes' seccomp profile, compiled, and how the startup line names it: ``--process-seccomp``'s, else
    Docker's default; none without a containment."""
    from .._wire import printable
    from .sealed._seccomp import DOCKER, PROFILE, ProfileError, compiled

    if args.process_seccomp is None and (args.process_containment == "none" or sys.platform != "linux"):
        return b"", ""  # no containment (auto finds none but on Linux), no filter
    given = args.process_seccomp
    try:
        return compiled(given or PROFILE), printable(given) if given else DOCKER
    except ProfileError as exc:
        raise ValueError(f"--process-seccomp: {exc}" if given else f"the processes' seccomp filter: {exc}") from None


def default_memory(processes: int, *, together: bool) -> int:
    """``--process-memory`` unless given (bytes): half of this host's memory shared by the ``processes`` that may run
    at once (``--max-processes``, ``--warm`` and the shared one), where nothing bounds them ``together``; where
    something does (the gateway's own group, half the host's memory: :attr:`~.sealed._cgroups.Bounds.together`), at
    least :data:`ROOM`, for a Python or Node server runs in no less (at most a quarter of the host). A 24 GB host's
    ``--max-processes 200`` gave 59 MiB each, under which a Python server on the ``mcp`` SDK was killed at its start."""
    host = _host_memory()
    shared = host // 2 // processes
    if together:
        shared = min(max(shared, ROOM), host // 4)
    return shared >> 20 << 20


ROOM: Final = 512 << 20
"""The least default ``--process-memory`` where the processes are bounded together: a Python server on the ``mcp``
SDK peaked at 48 MiB at its start and a call, Node ones from npm (server-memory, -filesystem, -everything) at 30-31
MiB (their control groups' ``max_usage``, cgroup v1): room for ten times that, and for what they write in their
directories and hold in socket buffers, which count with it."""


def _host_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _private_parent(template: str) -> None:
    """The directory the per-process directories are made in: made 0711 (owned by the gateway's user) if missing;
    refused when another process could list it (or rename what is in it)."""
    parent = Path(template).parent
    parent.mkdir(mode=0o711, parents=True, exist_ok=True)
    found = parent.stat()
    if found.st_uid != os.geteuid() or found.st_mode & 0o066:
        raise ValueError(
            f"--process-cwd: {parent} must be the gateway's and not listable by others (mode 0711): "
            f"it is mode {found.st_mode & 0o7777:o}, owned by uid {found.st_uid}"
        )
