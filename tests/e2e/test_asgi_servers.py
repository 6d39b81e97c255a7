"""The middleware under ASGI servers other than uvicorn: Hypercorn and Granian, each serving
examples/notifications.py (the memory store) from its own command line, as a deployment would.

On each: a 2026-07-28 session's tool writes its data and notifies the session's listen stream; a
delete ends that stream gracefully, while another session's stream and a global one stay open and
hear a global event; on the 2025 wire a session is created and used after the handshake; and the
server stops on SIGTERM through the app's lifespan, with no traceback.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

import httpx
import pytest

from _mcp import LegacyClient, session_meta, tool_text
from _waits import WITHIN
from conftest import SECRET
from e2e._listen import NOTE, WAIT, client, graceful_end
from e2e._replicas import Command, Replica

FACTORY = "examples.notifications:build_app"
SERVERS: dict[str, Command] = {
    "hypercorn": lambda app, port: [
        *(sys.executable, "-m", "hypercorn", f"{app}()"),  # a factory is called as it is written
        *("--bind", f"127.0.0.1:{port}", "--log-level", "warning"),
    ],
    "granian": lambda app, port: [
        *(sys.executable, "-m", "granian", "--interface", "asgi", "--factory", app),
        *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
    ],
}


@pytest.fixture(scope="module", params=sorted(SERVERS))
def served(request: pytest.FixtureRequest) -> Iterator[str]:
    """The example served by one ASGI server; stopped with SIGTERM, and its output checked, at the end."""
    replica = Replica(request.param, {"MCP_SESSIONS_SECRET": SECRET}, FACTORY, SERVERS[request.param])
    replica.start()
    try:
        yield replica.url
        assert replica.process is not None
        replica.process.terminate()
        assert replica.process.wait(WITHIN) == 0, replica.output()
        assert "Traceback" not in replica.output(), replica.output()
    finally:
        replica.stop()


def test_a_session_notifies_its_stream_and_a_delete_ends_that_stream_alone(served: str) -> None:
    async def scenario() -> None:
        async with client() as c:
            doomed, kept = await c.create(served), await c.create(served)
            mine = await c.listen(served, "doomed", doomed)
            others = [await c.listen(served, "kept", kept), await c.listen(served, "global")]
            assert await c.tool(served, "edit_note", {"name": "plan", "text": "v2"}, doomed) == "saved"
            await mine.wait(f"notifications/resources/updated {NOTE}")
            assert (await c.request(served, "sessions/delete", session=doomed))["result"] == {"resultType": "complete"}
            async with asyncio.timeout(WAIT):
                await mine.ended.wait()
            graceful_end(mine)
            assert await c.tool(served, "add_tool", {}) == "announced"
            for stream in others:
                await stream.wait("notifications/tools/list_changed")
                assert not stream.ended.is_set()
            assert others[0].events == ["notifications/tools/list_changed"]  # not the other session's update

    asyncio.run(scenario())


def test_a_session_on_the_2025_wire_after_the_handshake(served: str) -> None:
    with httpx.Client(timeout=10) as http:
        legacy = LegacyClient(http, served)
        legacy.initialize()
        session = session_meta(legacy.create_session())
        answers = [legacy.call_tool("edit_note", {"name": "plan", "text": text}, session=session) for text in "ab"]
        refused = legacy.call_tool("edit_note", {"name": "plan", "text": "c"})
    assert [(response.status_code, tool_text(message)) for response, message in answers] == [(200, "saved")] * 2
    assert refused[1]["error"]["code"] == -32044, refused[1]  # the tool requires a session
