"""The sealed processes' parts that need no root: a uid a process still runs in is tried again later, never kept,
and an error while a process's place is left is its own conversation's (the gateway command's tests as root are
tests/e2e/test_gateway_stdio_containment.py)."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import anyio
import pytest

from mcp_sessions._gateway.sealed import _sandbox
from mcp_sessions._gateway.sealed._sandbox import Place, Sandbox, SandboxError, Uids
from mcp_sessions._gateway.stdio._child import Child, _ignored, _no_client, _taken


def test_a_uid_a_process_still_runs_in_is_tried_again_later(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed gateway's processes end with their namespaces, a moment later: the uid one of them still holds is
    given out once none runs, the next one meanwhile."""
    uids = Uids("61990-61991", locks=str(tmp_path))
    running = {61990}
    monkeypatch.setattr(_sandbox, "running_uids", lambda: running)
    assert uids.take() == 61991
    running.clear()
    assert uids.take() == 61990
    with pytest.raises(SandboxError, match="no free uid in --process-uids 61990-61991"):
        uids.take()


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
    uids = Uids("61990-61990", locks=str(tmp_path))
    sandbox = Sandbox(uids=uids)
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
