"""The profile seam: a wire defined only here runs a whole session cycle through the real quickstart, in process.

The toy wire has its own method prefix and ``_meta`` key; nothing outside this
file knows it, and it imports public names only (docs/profiles.md's recipe). If this passes, a new wire is
one module.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from examples.quickstart import build_app

from _mcp import ModernClient, answer, modern_headers, modern_request, tool_text
from conftest import SECRET, in_process
from mcp_sessions import Refusal
from mcp_sessions.profiles import Capability, Echo, LocalCall, LocalMethod, SessionCarrier, WireProfile

TOY_KEY = "example.com/toy-session"


async def toy_open(call: LocalCall) -> dict[str, Any]:
    minted = await call.mint()
    until = datetime.fromtimestamp(int(minted.expires_at), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"ticket": minted.token, "until": until}


async def toy_close(call: LocalCall) -> dict[str, Any]:
    assert call.session is not None
    if not await call.revoke(call.session):
        raise Refusal(call.profile.not_found, call.profile.not_found_text)
    return {"closed": True}


TOY = WireProfile(
    name="toy",
    carrier=SessionCarrier(meta_key=TOY_KEY, id_member="ticket"),
    echo=Echo(meta_key=TOY_KEY, id_member="ticket", expiry_member="until"),
    capability=Capability(per_request=(("toy",),), handshake=(("experimental", "toy"),)),
    methods={
        "toy/open": LocalMethod(needs_session=False, answer=toy_open),
        "toy/close": LocalMethod(needs_session=True, answer=toy_close),
    },
    sessionless=frozenset({"server/discover", "toy/open"}),
    not_found=-32090,
    required=-32091,
    header_mismatch=-32020,
    required_data={"open": "toy/open"},
    create_method="toy/open",
)


@pytest.fixture(scope="module", params=["json", "sse"])
def client(request: pytest.FixtureRequest) -> Iterator[ModernClient]:
    app = build_app(json_response=request.param == "json", environ={"MCP_SESSIONS_SECRET": SECRET}, profiles=[TOY])
    with in_process(app) as http:
        yield ModernClient(http, "")


def toy_call(client: ModernClient, method: str, params: dict[str, Any], ticket: str | None) -> dict[str, Any]:
    meta = {} if ticket is None else {TOY_KEY: {"ticket": ticket}}
    body = modern_request(method, params, meta=meta)
    headers = modern_headers(body) if ticket is None else modern_headers(body, Mcp_Session_Id=ticket)
    return answer(client.post(body, headers))


def test_toy_wire_runs_a_whole_cycle(client: ModernClient) -> None:
    discover = toy_call(client, "server/discover", {}, None)["result"]
    assert discover["capabilities"]["toy"] == {}
    assert "sessions" not in discover["capabilities"]  # the draft is not enabled

    opened = toy_call(client, "toy/open", {}, None)["result"]
    ticket = opened["ticket"]
    assert opened["until"].endswith("Z")

    for expected in ("1", "2"):
        message = toy_call(client, "tools/call", {"name": "count", "arguments": {}}, ticket)
        assert tool_text(message) == expected
        assert message["result"]["_meta"][TOY_KEY] == {"ticket": ticket, "until": opened["until"]}

    required = toy_call(client, "tools/call", {"name": "count", "arguments": {}}, None)
    assert required["error"]["code"] == -32091
    assert required["error"]["data"] == {"open": "toy/open"}

    assert toy_call(client, "toy/close", {}, ticket)["result"] == {"closed": True, "resultType": "complete"}
    gone = toy_call(client, "tools/call", {"name": "count", "arguments": {}}, ticket)
    assert gone["error"]["code"] == -32090
    assert gone["error"]["data"] == {"ticket": ticket[:256]}  # what the client sent, cut


def test_the_draft_wire_is_not_spoken_when_only_the_toy_is(client: ModernClient) -> None:
    message = toy_call(client, "sessions/create", {}, None)
    assert message["error"]["code"] == -32601  # forwarded: the server does not know it
