"""``mcp-sessions gateway --stdio``'s seccomp filter (Docker's default profile, ``--process-seccomp``) under both
containments: the calls a container may not make are refused to a hostile server (``e2e._sealed.SERVER``), a key put
in a uid's keyring never reaches that uid's processes, no tun device is made in a user namespace, and ordinary servers
(the tests' plain one, the SDK's, node's server-everything) still work. A real gateway process, run as root.

The filter itself, without the gateway, and why each call's arguments show a filter and not the kernel's own refusal:
tests/unit/test_seccomp.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from _mcp import session_meta
from _syscalls import CALLS, REFUSED
from _uids import members, uids
from conftest import SECRET
from e2e._gateway import EVERYTHING, MAIN, Process, installed, main_run, node
from e2e._sealed import call, client, gateway, needs, shared, team, text
from mcp_sessions._gateway.sealed._seccomp import PROFILE

CONTAINMENTS = ["bwrap", "unshare"]
# The key a uid's keyring holds, put there by root as that uid (setpriv), as another conversation would have: its
# serial printed; and invalidated after.
_PLANT = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
serial = libc.syscall(ctypes.c_long(int(sys.argv[1])), b"user", b"alice-s-key", b"alice-s-secret", ctypes.c_long(14),
                      ctypes.c_long(-4))
print(serial if serial >= 0 else os.strerror(ctypes.get_errno()))
"""
_INVALIDATE = "import ctypes, sys; ctypes.CDLL(None).syscall(int(sys.argv[1]), 21, int(sys.argv[2]))"


@pytest.fixture(scope="module", params=[("bwrap", 470), ("unshare", 474)], ids=CONTAINMENTS)
def filtered(server: str, jwks: str, request: pytest.FixtureRequest) -> Iterator[tuple[Process, dict[int, int]]]:
    """A gateway under ``request.param``'s containment with the team's options, its processes given a range of four
    uids of the module's own, in whose user keyrings a key was put before it started (the kernel keeps one per uid,
    not per process, and nothing clears it), as a conversation before would have left it; and those keys' serials by
    uid. The tests of the filter share it, a conversation each."""
    containment, offset = request.param
    needs("root", containment)
    range_, serials = uids(offset, 4), {}
    try:
        for uid in members(range_):
            serials[uid] = int(_as(uid, _PLANT, CALLS["add_key"][0]))
        with gateway(server, *team(jwks)[:-1], range_, "--process-containment", containment) as process:
            yield process, serials
    finally:
        for uid, serial in serials.items():
            _as(uid, _INVALIDATE, CALLS["keyctl"][0], serial)


def test_a_contained_process_makes_none_of_the_calls_a_container_may_not(
    filtered: tuple[Process, dict[int, int]], request: pytest.FixtureRequest
) -> None:
    """The keyring, bpf, perf_event_open, userfaultfd, io_uring, mounts, namespaces, the clock and personality beyond
    the profile's: each EPERM (clone3 ENOSYS), under either containment; nor a tun device in a user namespace of its
    own (under unshare, the host's /dev/net/tun is there). The startup line names the profile."""
    with shared(filtered[0], request) as process:
        assert "each process's seccomp profile: docker's default (26.1.5)" in process.log().decode(errors="replace")
        alice = client(process, user="alice")
        hers = alice.create_session()
        assert json.loads(text(call(alice, "syscalls", hers, calls=CALLS))) == REFUSED
        assert text(call(alice, "tun", hers)) == "denied: Operation not permitted"


def test_a_key_in_a_uids_keyring_never_reaches_the_next_process_of_that_uid(
    filtered: tuple[Process, dict[int, int]], request: pytest.FixtureRequest
) -> None:
    """A key in the user keyring of each uid of the range, as a conversation before would have left it: alice's
    process cannot add one, nor read the one of its uid; after her conversation, bob's process (of her uid, or
    another's) cannot read its uid's either."""
    keyctl, serials = CALLS["keyctl"][0], filtered[1]
    with shared(filtered[0], request) as process:
        alice, bob = client(process, user="alice"), client(process, user="bob")
        hers = alice.create_session()
        her_uid = json.loads(text(call(alice, "whoami", hers)))["uid"]
        adding = {"add_key": [CALLS["add_key"][0], "user", "alice-s-second", "x", 1, -4]}
        assert json.loads(text(call(alice, "syscalls", hers, calls=adding))) == {"add_key": REFUSED["add_key"]}
        read = text(call(alice, "key", hers, number=keyctl, serial=serials[her_uid]))
        assert read == "denied: Operation not permitted"
        alice.request("sessions/delete", session=session_meta(hers))
        his = bob.create_session()
        his_uid = json.loads(text(call(bob, "whoami", his)))["uid"]
        read = text(call(bob, "key", his, number=keyctl, serial=serials[his_uid]))
        assert read == "denied: Operation not permitted"


def _as(uid: int, program: str, *arguments: object) -> str:
    """What ``program`` (Python) printed, run as ``uid`` with no group but its own, as a conversation of it would."""
    line = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "/usr/bin/python3", "-c", program]
    return subprocess.run([*line, *map(str, arguments)], capture_output=True, text=True, check=True).stdout


def _plain() -> list[str]:
    return [sys.executable, "-m", "e2e._plain_stdio"]


def _sdk() -> list[str]:
    return [sys.executable, "-m", "e2e._stdio_server"]


def _everything() -> list[str]:
    return [node(), str(installed(EVERYTHING, "@modelcontextprotocol/server-everything")), "stdio"]


@pytest.mark.parametrize("containment", CONTAINMENTS)
@pytest.mark.parametrize(
    ("command", "tool", "arguments", "answered"),
    [
        (_plain, "count", {}, "1"),
        (_sdk, "count", {}, "1"),
        (_everything, "echo", {"message": "under the filter"}, "Echo: under the filter"),
    ],
)
def test_ordinary_servers_work_under_the_filter(
    containment: str, command: object, tool: str, arguments: dict[str, str], answered: str
) -> None:
    """The tests' plain server, the SDK's and node's server-everything, each started under the filter (Python's and
    node's start: threads, epoll, their memory calls) and answering a call, under the default memory bound of
    ``--max-processes 200`` (59 MiB each on a 24 GB host killed the SDK's at its start; now 512 MiB)."""
    needs("root", containment)
    line = " ".join(command())  # type: ignore[operator]  # one of the three above
    environ = {"MCP_SESSIONS_SECRET": SECRET, "PATH": os.environ["PATH"], "PYTHONPATH": str(MAIN / "tests")}
    options = ("--process-containment", containment, "--pass-env", "PYTHONPATH", "--processes", "per-conversation")
    with gateway(line, *options, "--max-processes", "200", environ=environ) as process:
        mcp = client(process)
        assert text(call(mcp, tool, mcp.create_session(), **arguments)) == answered


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (("--process-seccomp", "/nonexistent.json"), "--process-seccomp: /nonexistent.json: No such file or directory"),
        (
            ("--process-containment", "none", "--process-seccomp", PROFILE),
            "--process-seccomp needs a containment, bwrap or unshare: the filter is applied in it",
        ),
        (("--process-seccomp", str(Path(__file__))), f"--process-seccomp: {Path(__file__)} is not JSON: "),
    ],
)
def test_a_profile_that_cannot_be_used_is_one_line_and_exit_status_2(options: tuple[str, ...], said: str) -> None:
    # by main in this process: its exit status and output as the command gives them, refused before the port is bound
    done = main_run("gateway", "--port", "1", "--stdio", "true", *options, environ={"MCP_SESSIONS_SECRET": SECRET})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"mcp-sessions gateway: {said}"), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
