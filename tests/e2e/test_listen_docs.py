"""docs/deployment.md's listen example runs as written, served for real, and does what the page says.

Run in one process (``memory://``, as the snippet falls back to without ``MCP_SESSIONS_REDIS_URL``):
``edit_note`` reaches the session's stream and no other, ``add_tool`` every stream, and a delete ends
the session's stream gracefully. The two-replica version is tests/e2e/test_listen_replicas.py.
"""

from __future__ import annotations

import asyncio

import pytest

from _docs import exec_snippet, one_with, python_snippets
from conftest import SECRET, serve
from e2e._listen import NOTE, client, graceful_end

PAGE = "docs/deployment.md"


def test_the_listen_example_scopes_events_to_the_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SESSIONS_SECRET", SECRET)
    monkeypatch.delenv("MCP_SESSIONS_REDIS_URL", raising=False)
    snippet = one_with(python_snippets(PAGE), "SessionSubscriptionBus.from_url(")
    app = exec_snippet(snippet, PAGE)["app"]

    async def scenario(base: str) -> None:
        async with client() as c:
            mine, other = await c.create(base), await c.create(base)
            streams = [await c.listen(base, "mine", mine), await c.listen(base, "other", other)]
            streams.append(await c.listen(base, "global"))
            assert await c.tool(base, "edit_note", {"name": "plan", "text": "v2"}, mine) == "saved"
            assert await c.tool(base, "add_tool", {}) == "announced"
            for stream in streams:
                await stream.wait("notifications/tools/list_changed")
            assert streams[0].events == [f"notifications/resources/updated {NOTE}", "notifications/tools/list_changed"]
            assert streams[1].events == streams[2].events == ["notifications/tools/list_changed"]
            await c.request(base, "sessions/delete", session=mine)
            async with asyncio.timeout(5):
                await streams[0].ended.wait()
            graceful_end(streams[0])
            assert not streams[1].ended.is_set() and not streams[2].ended.is_set()

    with serve(app) as url:
        asyncio.run(scenario(url))
