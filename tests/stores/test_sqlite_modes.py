"""A SQLite store's files are its owner's alone, whatever the umask; wider ones are reported at startup.

The database holds ``session.data`` (where applications keep secrets), principal
digests and listing labels, and so do its ``-wal`` and ``-shm`` files.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_sessions.stores import SQLiteStore

from .conftest import Closing

pytestmark = pytest.mark.anyio

EXP = 2_000_000_000.0


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which a file created plainly is readable by everyone (0644)."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_database_and_its_wal_and_shm_files_are_created_0600(
    tmp_path: Path, umask_022: None, closing: Closing
) -> None:
    path = tmp_path / "sessions.db"
    store = closing(SQLiteStore(path))
    await store.set("s1", "secret", "only for its owner", expires_at=EXP)
    assert await store.get("s1", "secret") == "only for its owner"
    files = [path.with_name(path.name + suffix) for suffix in ("", "-wal", "-shm")]
    assert all(file.exists() for file in files)  # WAL mode: all three are there while the store is open
    assert {file.name: mode(file) for file in files} == {file.name: 0o600 for file in files}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(umask=st.integers(min_value=0, max_value=0o077))
def test_any_umask_gives_files_only_their_owner_can_read(tmp_path: Path, umask: int) -> None:
    """Whatever umask the server runs under (0 included, where plain files come out 0666), the files are 0600."""
    path = tmp_path / f"umask-{umask:03o}.db"
    previous = os.umask(umask)

    async def use() -> None:
        store = SQLiteStore(path)
        try:
            await store.set("s1", "secret", "only for its owner", expires_at=EXP)
        finally:
            await store.aclose()

    try:
        asyncio.run(use())
    finally:
        os.umask(previous)
    files = [file for file in tmp_path.iterdir() if file.name.startswith(path.name)]
    assert files
    assert {file.name: mode(file) for file in files} == {file.name: 0o600 for file in files}


async def test_an_existing_database_others_can_read_is_reported_at_startup(
    tmp_path: Path, umask_022: None, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "sessions.db"
    path.touch(mode=0o644)
    os.chmod(path, 0o644)
    with caplog.at_level(logging.WARNING, logger="mcp_sessions"):
        store = SQLiteStore(path)
    await store.aclose()
    [warning] = [record.getMessage() for record in caplog.records if "SQLite" in record.getMessage()]
    assert str(path) in warning
    assert "644" in warning
    assert "chmod 600" in warning
    assert mode(path) == 0o644  # reported, not changed behind the operator's back


async def test_a_private_database_is_not_reported(
    tmp_path: Path, umask_022: None, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "sessions.db"
    with caplog.at_level(logging.WARNING, logger="mcp_sessions"):
        first = SQLiteStore(path)
        await first.set("s1", "k", 1, expires_at=EXP)
        await first.aclose()
        second = SQLiteStore(path)  # a restart finds the files it made
        await second.aclose()
    assert [r for r in caplog.records if "SQLite" in r.getMessage()] == []
