"""The sealed processes' parts that need no root: a uid a process still runs in is tried again later, never kept,
and an error while a process's place is left is its own conversation's (the gateway command's tests as root are
tests/e2e/test_gateway_stdio_containment.py)."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
from pathlib import Path

import anyio
import pytest

from mcp_sessions._gateway.sealed import _sandbox
from mcp_sessions._gateway.sealed._grants import owner_name
from mcp_sessions._gateway.sealed._kernel import run_helper
from mcp_sessions._gateway.sealed._sandbox import (
    Place,
    ProcessFile,
    Sandbox,
    SandboxError,
    SandboxPolicy,
    UidRange,
    Uids,
)
from mcp_sessions._gateway.stdio._child import Child, _ignored, _no_client, _taken


def test_a_uid_a_process_still_runs_in_is_tried_again_later(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed gateway's processes end with their namespaces, a moment later: the uid one of them still holds is
    given out once none runs, the next one meanwhile."""
    uids = Uids(UidRange.parsed("61990-61991", locks=str(tmp_path), state=str(tmp_path / "state")))
    running = {61990}
    monkeypatch.setattr(_sandbox, "running_uids", lambda: running)
    assert uids.take("alice") == 61991
    running.clear()
    assert uids.take("alice") == 61990
    with pytest.raises(SandboxError, match="no free uid in --process-uids 61990-61991"):
        uids.take("alice")


def test_a_uid_kept_for_a_user_goes_to_her_alone_across_restarts_and_gateways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 100, finding 3: a uid given to a process that may write a team's tree (``keep``) is kept for its user
    in ``STATE``, so that another gateway sharing it (or this one restarted: a new Uids) gives it to her processes
    alone, hers first; a user has at most ``keep`` kept, and a process that keeps none (no ``:rw`` grant) is given
    one kept for no one."""
    monkeypatch.setattr(_sandbox, "running_uids", set)
    locks, state = str(tmp_path / "locks"), str(tmp_path / "state")
    alice, bob, carol = (owner_name(("token", name)) for name in ("alice", "bob", "carol"))
    first = Uids(UidRange.parsed("61990-61993", locks=locks, state=state))
    first.give_back(hers := first.take(alice, keep=2))
    assert hers == 61990
    second = Uids(UidRange.parsed("61990-61993", locks=locks, state=state))
    assert [second.take(bob, keep=2), second.take(bob, keep=2)] == [61991, 61992]
    with pytest.raises(SandboxError, match=r"every uid kept for this user \(2, twice --max-processes-per-principal"):
        second.take(bob, keep=2)
    assert second.take(carol) == 61993  # kept for no one, nor made hers
    with pytest.raises(SandboxError, match="no free uid in --process-uids 61990-61993"):
        second.take(carol)
    assert second.take(alice, keep=2) == 61990
    assert os.readlink(tmp_path / "state" / "uids" / "61990") == alice
    assert sorted(os.listdir(tmp_path / "state" / "owners" / bob)) == ["61991", "61992"]
    assert not (tmp_path / "state" / "uids" / "61993").exists()


@pytest.mark.anyio
async def test_an_error_while_a_place_is_left_ends_no_more_than_its_conversation(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Child.run returns, the error logged whole: it escaped into the process table's task group, which runs every
    conversation's child (Python 3.11's rmtree raised RecursionError on a deep tree)."""

    async def leave(self: Place) -> str | None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(Place, "leave", leave)
    child = Child(
        ["true"],
        label="process p",
        environ={},
        max_line=1 << 20,
        on_request=_no_client,
        on_notify=_ignored,
        on_progress=_taken,
    )
    with caplog.at_level(logging.INFO, "mcp_sessions.gateway"):
        await child.run()
    assert "process p: its place could not be left" in caplog.text
    assert "RecursionError" in caplog.text
    assert "process p: server process" in caplog.text  # its end, logged as any other


@pytest.mark.anyio
async def test_a_taken_uid_is_always_a_place_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request cancelled while its process's place is made still gets the place whole (each step is bounded), so
    its uid is left with it, never held by no one; a uid's lock that cannot be opened (no descriptor left) is a
    SandboxError, which that request gets, never an error of the process table's."""
    sandbox = Sandbox(
        SandboxPolicy(uids=UidRange.parsed("61990-61990", locks=str(tmp_path), state=str(tmp_path / "state")))
    )
    uids = sandbox.uids
    assert uids is not None
    with anyio.CancelScope() as scope:
        scope.cancel()
        place = await sandbox.enter("p1")
    assert (place.uid, list(uids.held)) == (61990, [61990])
    assert await place.leave() is None
    assert not uids.held

    def no_descriptor(path: str) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(_sandbox, "locked", no_descriptor)
    with pytest.raises(SandboxError, match="no uid could be taken: Too many open files"):
        await sandbox.enter("p2")


def test_a_process_file_is_written_as_its_value_says_0600_and_never_over_a_name_already_there(tmp_path: Path) -> None:
    """``--process-file``'s line, as the last helper runs it (bash, sourced): a value with quotes, a newline, ``$(``
    and a backquote is written as it is, never run; mode 0600 in a 0700 directory it made; and a name already there (a
    link) is refused (``set -C``: ``O_EXCL``), its target untouched. A process with no value of its names (the revision
    probe) gets no line."""
    value = 'it\'s "$(touch run)" `touch ran`\nnext'
    made = ProcessFile("~/.config/app/token", "token: ${SECRET}\n", ("SECRET",))
    line = made.written({"HOME": str(tmp_path), "SECRET": value})
    assert line is not None
    assert made.written({"HOME": str(tmp_path)}) is None
    done = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, check=False)
    written = tmp_path / ".config" / "app" / "token"
    assert done.returncode == 0, done.stderr
    assert written.read_text() == f"token: {value}\n"
    assert (written.stat().st_mode & 0o777, written.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    assert not (tmp_path / "run").exists() and not (tmp_path / "ran").exists()
    written.unlink()
    (tmp_path / "elsewhere").write_text("kept")
    written.symlink_to(tmp_path / "elsewhere")
    again = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert again.returncode == 125
    assert (tmp_path / "elsewhere").read_text() == "kept"


def test_a_helper_that_does_not_end_in_time_is_one_line_not_a_traceback() -> None:
    """A helper root runs that hangs (``unshare`` at startup, ``setpriv``'s search, ``nft`` as a process starts) is
    killed at its timeout and said as a ``SandboxError`` naming it, which the startup and a process's start say in
    one line; ``subprocess.TimeoutExpired`` reached neither."""
    with pytest.raises(SandboxError, match=r"^sleep did not end within 0\.2 s$"):
        run_helper(["/bin/sleep", "30"], timeout=0.2)
