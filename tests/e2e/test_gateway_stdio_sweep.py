"""What a uid of ``--process-uids`` leaves behind is cleared before the uid is given out again, whatever its processes
did and however its gateway ended, and nothing one conversation leaves ends the others' (issue 76, findings 1, 2
and 4 of its red team). A real gateway process, run as root, in front of the hostile stdio server of
``e2e._sealed``; each test's range is small (the shared process takes one uid, each conversation one), so that a
uid kept for good shows as "no free uid". Each runs under bubblewrap (``--process-uids`` needs a containment): a
process has /tmp, /dev/shm and /run/lock of its own and its daemon ends with its namespace, so what it leaves is in
a directory any uid may write that the host shares (``shared``: mode 1777, made before the gateway starts, which
finds such directories at startup), and the sweep alone clears it.
"""

from __future__ import annotations

import json
import shutil
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from _mcp import session_meta
from _waits import WITHIN, until
from e2e._gateway import Process, readable_directory
from e2e._sealed import call, client, gateway, hostile, needs, text

GONE = "denied: No such file or directory"
CONTAINED = ("--process-containment", "bwrap")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The hostile server's command (``e2e._sealed.hostile``)."""
    with hostile() as command:
        yield command


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A directory of the host's that any uid may write (mode 1777), as /var/tmp is to an uncontained process."""
    with readable_directory("mcp-sessions-shared-") as directory:
        directory.chmod(0o1777)
        yield directory


def ended(process: Process, process_id: str) -> bool:
    """Whether the gateway logged the end of process ``process_id``, or a traceback (then the test fails at once)."""
    said = process.output()
    return f"process {process_id}: server process" in said or "Traceback" in said


def test_a_uid_reaches_its_next_owner_empty_after_its_gateway_was_killed(server: str, shared: Path) -> None:
    """A gateway killed by SIGKILL removes nothing: its uid's files in a directory the host shares stay (its daemon
    ends with its namespace). The next gateway on the range (one uid: the shared process's) removes them before it
    gives the uid out: its process finds none of them."""
    needs("root", "bwrap")
    marker = f"daemon-{uuid.uuid4().hex}"
    left = [f"{shared}/left-by-{marker}", f"{shared}/dir-{marker}/left"]
    sealed = ("--process-uids", "61200-61200", "--sessionless", "shared", *CONTAINED)
    with gateway(server, *sealed) as first:
        mcp = client(first)
        assert text(call(mcp, "mkdir", path=f"{shared}/dir-{marker}")) == "made"
        assert [text(call(mcp, "write", path=path)) for path in left] == ["4"] * 2
        assert first.process is not None
        first.process.send_signal(signal.SIGKILL)  # the gateway alone: its processes end with it
        first.process.wait(timeout=WITHIN)
    assert all(Path(path).exists() for path in left)  # what it left
    with gateway(server, *sealed) as second:
        mcp = client(second)
        assert json.loads(text(call(mcp, "whoami")))["uid"] == 61200
        assert [text(call(mcp, "read", path=path)) for path in left] == [GONE] * 2


def test_a_deep_tree_in_a_home_ends_no_one_elses_conversation(server: str, shared: Path) -> None:
    """Alice's process opens its HOME to all, bob's writes a tree 1,500 directories deep in it: at her end, the
    directory goes whole (``rm``, as root; Python's rmtree raised RecursionError, which ended the process table:
    every later request of every user got HTTP 500); bob's conversation goes on, and her uid is given out again."""
    needs("root", "bwrap")
    homes = ("--process-cwd", f"{shared}/homes-{uuid.uuid4().hex}/{{id}}")  # where both see them
    with gateway(server, "--process-uids", "61210-61212", *homes, *CONTAINED) as process:
        alice, bob = client(process), client(process)
        hers, his = alice.create_session(), bob.create_session()
        she, he = (json.loads(text(call(mcp, "whoami", session))) for mcp, session in ((alice, hers), (bob, his)))
        assert text(call(alice, "chmod", hers, path=she["cwd"], mode=0o777)) == "changed"
        assert text(call(bob, "deep", his, path=she["cwd"], depth=1500)) == "made"
        alice.request("sessions/delete", session=session_meta(hers))
        until(lambda: ended(process, she["environ"]["MCP_SESSION_ID"]), process.output)
        assert json.loads(text(call(bob, "whoami", his)))["pid"] == he["pid"]
        assert json.loads(text(call(alice, "whoami", alice.create_session())))["uid"] == she["uid"]
        assert not Path(she["cwd"]).exists()
        assert "Traceback" not in process.output()


def test_another_uids_file_in_a_uids_directory_keeps_no_uid(server: str, shared: Path) -> None:
    """Alice's process makes a directory open to all where the host shares one, and bob's puts a file in it: at her
    end the directory goes with his file in it, and her uid is given out again (``find -delete`` left the directory,
    so her uid stayed taken for good: a user with one conversation could spend the whole range)."""
    needs("root", "bwrap")
    place = f"{shared}/of-alice-{uuid.uuid4().hex}"
    try:
        with gateway(server, "--process-uids", "61220-61222", *CONTAINED) as process:
            alice, bob = client(process), client(process)
            hers, his = alice.create_session(), bob.create_session()
            she = json.loads(text(call(alice, "whoami", hers)))
            assert text(call(alice, "mkdir", hers, path=place)) == "made"
            assert text(call(bob, "write", his, path=f"{place}/bob-s")) == "4"
            alice.request("sessions/delete", session=session_meta(hers))
            until(lambda: ended(process, she["environ"]["MCP_SESSION_ID"]), process.output)
            assert json.loads(text(call(alice, "whoami", alice.create_session())))["uid"] == she["uid"]
            assert not Path(place).exists()
    finally:  # what the old code left
        shutil.rmtree(place, ignore_errors=True)
