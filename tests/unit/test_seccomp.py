"""The contained processes' seccomp filter without the gateway: Docker's default profile compiled by libseccomp and
applied by the helper that applies it under ``unshare`` (the same filters bubblewrap is given), in a process of this
test's; an operator's profile read as runc reads it for a process with no capability; a profile that cannot be
compiled said in one line (the gateway's own tests: tests/e2e/test_gateway_stdio_seccomp.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from _syscalls import CALLS, REFUSED, TRY
from mcp_sessions._gateway.sealed._kernel import no_user_namespaces
from mcp_sessions._gateway.sealed._seccomp import PROFILE, ProfileError, applied, compiled

CALLER = f"import ctypes, json, os, sys\n{TRY}\nprint(syscalls(json.loads(sys.argv[1])))"


@contextmanager
def memfds(*programs: bytes) -> Iterator[tuple[int, ...]]:
    made = []
    for program in programs:
        made.append(os.memfd_create("filter"))
        os.write(made[-1], program)
    try:
        yield tuple(made)
    finally:
        for descriptor in made:
            os.close(descriptor)


def answers(calls: dict[str, list[Any]], *programs: bytes) -> dict[str, str]:
    """What each of ``calls`` answered in a process of its own under ``programs`` (none: no filter)."""
    with memfds(*programs) as filters:
        helper: Sequence[str] = applied(filters, sys.executable) if filters else ()
        line = [*helper, sys.executable, "-c", CALLER, json.dumps(calls)]
        done = subprocess.run(line, pass_fds=filters, capture_output=True, text=True, timeout=30, check=True)
    said: dict[str, str] = json.loads(done.stdout)
    return said


def test_dockers_profile_refuses_each_call_a_container_may_not_make_which_the_kernel_alone_answers() -> None:
    """Each call, as the kernel alone answers it, is not EPERM (made, or a bad pointer, descriptor or flag); under
    the user-namespace filter and Docker's default profile, each is EPERM, clone3 ENOSYS."""
    assert CALLS, "no call numbers for this architecture (tests/_syscalls.py: x86_64 and aarch64)"
    alone = answers(CALLS)
    assert not [name for name, said in alone.items() if said == REFUSED[name]], alone
    assert answers(CALLS, no_user_namespaces(), compiled(PROFILE)) == REFUSED


def test_an_operators_profile_is_read_as_for_a_process_with_no_capability(tmp_path: Path) -> None:
    """A rule that needs a capability is left out, one that excludes it kept; ``errnoRet``, ``minKernel`` and a
    call this libseccomp does not know are honoured as runc does."""
    rule = {"action": "SCMP_ACT_ERRNO"}
    profile = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [
            {**rule, "names": ["keyctl", "no_such_call"], "errnoRet": 13},
            {**rule, "names": ["setns"], "errnoRet": 22, "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
            {**rule, "names": ["add_key"], "includes": {"caps": ["CAP_SYS_ADMIN"]}},
            {**rule, "names": ["bpf"], "includes": {"minKernel": "99.0"}},
            {**rule, "names": ["personality"], "args": [{"index": 0, "value": 0x0400000, "op": "SCMP_CMP_EQ"}]},
        ],
    }
    Path(tmp_path, "profile.json").write_text(json.dumps(profile))
    calls = {name: CALLS[name] for name in ("keyctl", "setns", "add_key", "bpf", "personality")}
    said = answers(calls, compiled(str(tmp_path / "profile.json")))
    assert said == {
        "keyctl": "denied: Permission denied",
        "setns": "denied: Invalid argument",
        "add_key": "made",
        "bpf": "denied: Argument list too long",
        "personality": "denied: Operation not permitted",
    }


@pytest.mark.parametrize(
    ("written", "said"),
    [
        (None, "profile.json: No such file or directory"),
        ("{", "profile.json is not JSON: "),
        ("[]", "profile.json is not a seccomp profile (Docker's JSON: defaultAction, syscalls)"),
        ('{"defaultAction": "SCMP_ACT_NOTIFY"}', "defaultAction: action 'SCMP_ACT_NOTIFY' is not one a filter here"),
        ('{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"]}]}', "syscalls[0]: action None"),
        (
            '{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", '
            '"args": [{"index": 0, "value": 1, "op": "SCMP_CMP_LIKE"}]}]}',
            "syscalls[0]: op 'SCMP_CMP_LIKE' is not one of libseccomp's (SCMP_CMP_NE,",
        ),
        ('{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": ["read"]}', "syscalls[0]: AttributeError("),
        ('{"defaultAction": "SCMP_ACT_ALLOW", "archMap": [{}]}', "archMap: KeyError('architecture')"),
    ],
)
def test_a_profile_that_cannot_be_compiled_is_said_in_one_line(tmp_path: Path, written: str | None, said: str) -> None:
    path = tmp_path / "profile.json"
    if written is not None:
        path.write_text(written)
    with pytest.raises(ProfileError) as raised:
        compiled(str(path))
    assert said in str(raised.value), raised.value
    assert "\n" not in str(raised.value), raised.value
