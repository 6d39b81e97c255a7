"""The seccomp filter of every contained process: a profile in Docker's JSON schema (Docker's default by default:
``seccomp.json`` beside this module, moby's ``profiles/seccomp/default.json`` as Debian 13's ``docker.io`` 26.1.5
ships it; or the operator's, ``--process-seccomp PATH``, Docker's or Podman's), compiled once at startup to classic
BPF by libseccomp (:func:`compiled`), as runc compiles it for Docker and Podman; then given to bubblewrap
(``--add-seccomp-fd``), or under ``unshare`` applied by the gateway's own interpreter (:func:`applied`), after the
namespace's mounts and before ``setpriv``."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from ..._wire import printable

PROFILE: Final = str(Path(__file__).with_name("seccomp.json"))
"""Docker's default profile (refreshed by ``scripts/seccomp-profile.sh``)."""
DOCKER: Final = "docker's default (26.1.5)"

# libseccomp's actions (seccomp.h): those an argument completes, and the others.
_ACTIONS: Final = {
    "SCMP_ACT_KILL": 0x00000000,
    "SCMP_ACT_KILL_THREAD": 0x00000000,
    "SCMP_ACT_KILL_PROCESS": 0x80000000,
    "SCMP_ACT_TRAP": 0x00030000,
    "SCMP_ACT_LOG": 0x7FFC0000,
    "SCMP_ACT_ALLOW": 0x7FFF0000,
}
_WITH_DATA: Final = {"SCMP_ACT_ERRNO": 0x00050000, "SCMP_ACT_TRACE": 0x7FF00000}
_OPERATORS: Final = {
    "SCMP_CMP_NE": 1,
    "SCMP_CMP_LT": 2,
    "SCMP_CMP_LE": 3,
    "SCMP_CMP_EQ": 4,
    "SCMP_CMP_GE": 5,
    "SCMP_CMP_GT": 6,
    "SCMP_CMP_MASKED_EQ": 7,
}
# The architectures' names in a profile's includes and excludes are Go's (runtime.GOARCH), where libseccomp's differ.
_GO_NAMES: Final = {"x86_64": "amd64", "aarch64": "arm64", "i686": "x86", "i386": "x86"}

# The last helper but one under unshare, run by the gateway's interpreter as root in the namespace: no new
# privileges, then each filter of the descriptors named (argv[1]: how many), each closed once read, then the next
# helper.
_APPLY: Final = """\
import ctypes, os, sys
class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
libc = ctypes.CDLL(None, use_errno=True)
count = int(sys.argv[1])
if libc.prctl(38, 1, 0, 0, 0):
    sys.exit(f"no_new_privs: {os.strerror(ctypes.get_errno())}")
for fd in sys.argv[2 : 2 + count]:
    code = os.pread(int(fd), os.fstat(int(fd)).st_size, 0)
    os.close(int(fd))
    if libc.prctl(22, 2, ctypes.byref(Program(len(code) // 8, code))):
        sys.exit(f"seccomp: {os.strerror(ctypes.get_errno())}")
os.execv(sys.argv[2 + count], sys.argv[2 + count :])
"""


class _Comparison(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


class ProfileError(Exception):
    """A profile that cannot be compiled here: the message says which part, and why."""


def applied(descriptors: Sequence[int], interpreter: str) -> list[str]:
    """The helper that applies the filters in ``descriptors`` (classic BPF each, in order), then runs the rest of its
    command line: ``interpreter`` (the gateway's own) isolated from every variable and site directory."""
    return [interpreter, "-I", "-S", "-c", _APPLY, str(len(descriptors)), *map(str, descriptors)]


def compiled(path: str) -> bytes:
    """The profile at ``path`` (Docker's JSON schema) as a classic BPF program for this host's architecture and its
    others (``archMap``), as runc reads it for a process that holds no capability: a rule that ``includes`` one is
    left out, one that ``excludes`` any kept. ``ProfileError`` if it cannot be read or compiled."""
    named = printable(path)
    try:
        profile = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ProfileError(f"{named}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{named} is not JSON: {exc}") from None
    if not isinstance(profile, dict) or not isinstance(profile.get("syscalls", []), list):
        raise ProfileError(f"{named} is not a seccomp profile (Docker's JSON: defaultAction, syscalls)")
    library = _libseccomp()
    try:
        default = _action(profile.get("defaultAction"), profile.get("defaultErrnoRet"))
    except ProfileError as exc:
        raise ProfileError(f"{named}: defaultAction: {exc}") from None
    context = library.seccomp_init(default)
    if not context:
        raise ProfileError(f"{named}: libseccomp could not start a filter")
    try:
        try:
            others = _subarchitectures(profile, library, library.seccomp_arch_native())
        except (TypeError, KeyError, AttributeError) as exc:
            raise ProfileError(f"{named}: archMap: {exc!r}") from None
        for name in others:
            if library.seccomp_arch_add(context, library.seccomp_arch_resolve_name(name.encode())) not in (0, -17):
                raise ProfileError(f"{named}: architecture {name} unknown to libseccomp")
        for index, rule in enumerate(profile.get("syscalls") or []):
            try:
                _add(library, context, rule, default, _go_name())
            except ProfileError as exc:
                raise ProfileError(f"{named}: syscalls[{index}]: {exc}") from None
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                raise ProfileError(f"{named}: syscalls[{index}]: {exc!r}") from None
        exported = os.memfd_create("seccomp", os.MFD_CLOEXEC)
        try:
            if (failed := library.seccomp_export_bpf(context, exported)) < 0:
                raise ProfileError(f"{named}: libseccomp could not export it: {os.strerror(-failed)}")
            os.lseek(exported, 0, os.SEEK_SET)
            with open(exported, "rb", closefd=False) as program:
                return program.read()
        finally:
            os.close(exported)
    finally:
        library.seccomp_release(context)


def _libseccomp() -> Any:
    """libseccomp (Debian's ``libseccomp2``, which systemd and apt need), its functions typed."""
    name = ctypes.util.find_library("seccomp")
    try:
        library = ctypes.CDLL(name or "libseccomp.so.2")
    except OSError:
        raise ProfileError("libseccomp is not installed (Debian: apt-get install libseccomp2)") from None
    library.seccomp_init.restype = ctypes.c_void_p
    library.seccomp_init.argtypes = [ctypes.c_uint32]
    library.seccomp_release.argtypes = [ctypes.c_void_p]
    library.seccomp_arch_native.restype = ctypes.c_uint32
    library.seccomp_arch_resolve_name.restype = ctypes.c_uint32
    library.seccomp_arch_resolve_name.argtypes = [ctypes.c_char_p]
    library.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    library.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    library.seccomp_rule_add_array.argtypes = [
        *(ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_Comparison)),
    ]
    library.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return library


def _action(name: object, data: object) -> int:
    """libseccomp's action named ``name``, with ``data`` (an errno, ``SCMP_ACT_ERRNO``'s EPERM unless given)."""
    if name in _ACTIONS:
        return _ACTIONS[str(name)]
    if name not in _WITH_DATA:
        raise ProfileError(f"action {name!r} is not one a filter here takes")
    if data is None:
        data = errno.EPERM if name == "SCMP_ACT_ERRNO" else 0
    if not isinstance(data, int) or not 0 <= data <= 0xFFFF:
        raise ProfileError(f"{name}: {data!r} is not an errno")
    return _WITH_DATA[str(name)] | data


def _subarchitectures(profile: Mapping[str, Any], library: Any, native: int) -> list[str]:
    """libseccomp's names of the architectures the profile gives beside this host's (an x86_64 host's i386 and x32
    calls): its ``archMap`` entry for this host, or its older list (``architectures``)."""
    names: list[str] = []
    for entry in profile.get("archMap") or []:
        if library.seccomp_arch_resolve_name(_seccomp_name(entry["architecture"]).encode()) == native:
            names = entry.get("subArchitectures") or []
    if not profile.get("archMap"):
        names = profile.get("architectures") or []
    return [_seccomp_name(name) for name in names]


def _seccomp_name(name: str) -> str:
    return name.removeprefix("SCMP_ARCH_").lower()


def _go_name() -> str:
    """This host's architecture as a profile's ``includes`` and ``excludes`` name it."""
    machine = platform.machine()
    return _GO_NAMES.get(machine, machine)


def _add(library: Any, context: int, rule: Mapping[str, Any], default: int, arch: str) -> None:
    """``rule`` of the profile added to ``context``, as runc adds it: only where its ``includes`` hold (none of
    its capabilities: the process holds none), and its ``excludes`` do not; a call libseccomp does not know left
    out; two conditions on one argument as two rules (either allows)."""
    includes = rule.get("includes") or {}
    excludes = rule.get("excludes") or {}
    if includes.get("caps") or (includes.get("arches") and arch not in includes["arches"]):
        return
    if arch in (excludes.get("arches") or []):
        return
    if (kernel := includes.get("minKernel")) and _release() < _version(kernel):
        return
    action = _action(rule.get("action"), rule.get("errnoRet"))
    if action == default:
        return
    comparisons = []
    for arg in rule.get("args") or []:
        if arg.get("op") not in _OPERATORS:
            raise ProfileError(f"op {arg.get('op')!r} is not one of libseccomp's ({', '.join(_OPERATORS)})")
        operator = _OPERATORS[arg["op"]]
        second = int(arg.get("valueTwo") or 0)
        comparisons.append(_Comparison(int(arg["index"]), operator, int(arg["value"]), second))
    indexes = [comparison.arg for comparison in comparisons]
    groups = [[comparison] for comparison in comparisons] if len(set(indexes)) < len(indexes) else [comparisons]
    for name in rule.get("names") or [rule["name"]]:
        number = library.seccomp_syscall_resolve_name(name.encode())
        if number == -1:  # __NR_SCMP_ERROR: a call of another kernel's, or of a newer libseccomp's
            continue
        for group in groups:
            array = (_Comparison * max(len(group), 1))(*group)
            if (failed := library.seccomp_rule_add_array(context, action, number, len(group), array)) < 0:
                raise ProfileError(f"{name}: libseccomp refused the rule: {os.strerror(-failed)}")


def _release() -> tuple[int, ...]:
    return _version(os.uname().release)


def _version(release: str) -> tuple[int, ...]:
    """``4.8`` as (4, 8): a kernel release's first two numbers."""
    numbers = release.split("-")[0].split(".")[:2]
    return tuple(int("".join(c for c in number if c.isdigit()) or 0) for number in numbers)
