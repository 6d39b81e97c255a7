"""The subscription tests' fixture: a channel prefix for a test (the Redis Cluster is tests/conftest.py's)."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def prefix() -> str:
    """A channel prefix no other test uses, so that tests share one Redis without meeting."""
    return f"bus-{uuid.uuid4().hex[:8]}:"
