"""The subscription tests' fixtures: a real Redis Cluster for a module, and a channel prefix for a test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from _redis_topologies import ClusterServers, redis_cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterServers]:
    """One real 3-master Redis Cluster for the module."""
    with redis_cluster() as servers:
        yield servers


@pytest.fixture
def prefix() -> str:
    """A channel prefix no other test uses, so that tests share one Redis without meeting."""
    return f"bus-{uuid.uuid4().hex[:8]}:"
