"""A host conversation source on a memory store, for the unit tests of the conversation ids hosts send."""

from __future__ import annotations

from typing import Any

from conftest import SECRET
from mcp_sessions import KeySet
from mcp_sessions._session import authenticated_user
from mcp_sessions._session._service import SessionService
from mcp_sessions._tokens import IdDigests
from mcp_sessions.sources import BUILT_IN_HOSTS, HostConversationSource, HostKey
from mcp_sessions.stores import MemoryStore

KEYS = KeySet.from_secret(SECRET)


def hosts(*extra: HostKey, data: Any = "off") -> HostConversationSource:
    """The built-in host keys after ``extra``, conversation data ``data``."""
    sessions = SessionService(keys=KEYS, store=MemoryStore(), ttl=60, idle_ttl=None, principal=authenticated_user)
    return HostConversationSource((*extra, *BUILT_IN_HOSTS), sessions=sessions, digests=IdDigests(KEYS), data=data)
