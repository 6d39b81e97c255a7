"""The ``--process-uids`` ranges of this run: a block of uids no other run of the suite on this host holds (two runs
given one range collide: the gateway's uid locks make one wait on the other's processes, and the nftables rules of
one's gateways hold for the other's processes). The session (xdist's controller) locks the first free block until
it ends; its workers inherit which in ``TESTS_UID_BLOCK``."""

from __future__ import annotations

import contextlib
import fcntl
import os

FIRST, SIZE, BLOCKS = 62000, 500, 6  # 62000-64999: no user of a Debian system's, nor nobody (65534)


def reserve(locks: str = "/run/mcp-sessions/test-uid-blocks") -> None:
    """Lock a free block for this run, unless it has one (a worker); none where it cannot (not root: no uids run)."""
    with contextlib.suppress(OSError):
        os.makedirs(locks, mode=0o700, exist_ok=True)
        for block in range(0 if "TESTS_UID_BLOCK" in os.environ else BLOCKS):
            lock = os.open(f"{locks}/{block}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            with contextlib.suppress(BlockingIOError):
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held until this process ends, its descriptor open
                os.environ["TESTS_UID_BLOCK"] = str(block)
                return
            os.close(lock)


def uids(offset: int, count: int) -> str:
    """``FIRST-LAST``: ``count`` uids at ``offset`` in this run's block (``--process-uids``)."""
    first = FIRST + SIZE * int(os.environ.get("TESTS_UID_BLOCK", "0")) + offset
    return f"{first}-{first + count - 1}"


def members(spec: str) -> range:
    first, last = spec.split("-")
    return range(int(first), int(last) + 1)
