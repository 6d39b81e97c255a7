"""Session metadata said twice: repeated JSON member names and conflicting Mcp-Session-Id headers.

Two parsers may keep different copies of a repeated name (RFC 8259 leaves it
open), so a request that names its session twice is refused rather than
guessed at. Through the real MCPServer, in process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from examples.quickstart import build_app

from _mcp import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MODERN,
    ModernClient,
    jwt_claims,
    modern_headers,
    tool_text,
)
from conftest import SECRET, in_process


@pytest.fixture(scope="module")
def client() -> Iterator[ModernClient]:
    with in_process(build_app(environ={"MCP_SESSIONS_SECRET": SECRET})) as http:
        yield ModernClient(http, "")


def raw_call(client: ModernClient, body: str, headers: dict[str, str] | None = None) -> httpx.Response:
    sent = modern_headers({"method": "tools/call", "params": {"name": "whoami"}})
    sent.update(headers or {})
    return client.http.post(client.url, content=body.encode(), headers=sent)


def envelope(meta_members: str, params_extra: str = "") -> str:
    template = (
        '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"whoami","arguments":{}EXTRA,'
        '"_meta":{"io.modelcontextprotocol/protocolVersion":"VERSION","io.modelcontextprotocol/clientCapabilities":{},'
        "MEMBERS}}}"
    )
    return template.replace("EXTRA", params_extra).replace("VERSION", MODERN).replace("MEMBERS", meta_members)


def member(token: str, key: str = "io.modelcontextprotocol/session") -> str:
    return f'"{key}":{{"sessionId":{json.dumps(token)}}}'


@pytest.fixture
def two_sessions(client: ModernClient) -> tuple[str, str]:
    return client.create_session()["sessionId"], client.create_session()["sessionId"]


def test_one_session_named_once_works(client: ModernClient, two_sessions: tuple[str, str]) -> None:
    a, _ = two_sessions
    response = raw_call(client, envelope(member(a)))
    assert tool_text(response.json()) == jwt_claims(a)["sid"]


# When the copy a parser keeps (the last) is a _meta without the 2026 envelope, the SDK refuses the
# request for that (-32602) and the middleware answers as the SDK would; otherwise it refuses it itself.
@pytest.mark.parametrize(
    ("build", "code"),
    [
        pytest.param(lambda a, b: envelope(member(a) + "," + member(b)), INVALID_REQUEST, id="session-key-twice"),
        pytest.param(lambda a, b: envelope(member(a) + "," + member(a)), INVALID_REQUEST, id="same-session-twice"),
        pytest.param(
            lambda a, b: envelope(member(a) + "," + member(b, "io.modelcontextprotocol\\/session")),
            INVALID_REQUEST,
            id="session-key-twice-one-escaped",
        ),
        pytest.param(
            lambda a, b: envelope(f'"io.modelcontextprotocol/session":{{"sessionId":"{a}","sessionId":"{b}"}}'),
            INVALID_REQUEST,
            id="sessionId-twice",
        ),
        pytest.param(
            lambda a, b: envelope(f'"io.modelcontextprotocol/session":{{"sessionId":"{a}","state":"x","state":"y"}}'),
            INVALID_REQUEST,
            id="state-twice",
        ),
        pytest.param(
            lambda a, b: envelope(member(a))[:-2] + ',"_meta":{' + member(b) + "}}}",
            INVALID_PARAMS,
            id="_meta-twice",
        ),
        pytest.param(
            lambda a, b: envelope(member(a))[:-1] + ',"params":{"name":"whoami","_meta":{' + member(b) + "}}}",
            INVALID_PARAMS,
            id="params-twice",
        ),
    ],
)
def test_session_metadata_said_twice_is_refused(
    client: ModernClient, two_sessions: tuple[str, str], build: Any, code: int
) -> None:
    response = raw_call(client, build(*two_sessions))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert two_sessions[0] not in response.text and two_sessions[1] not in response.text


def test_repeated_names_elsewhere_are_the_servers_business(client: ModernClient, two_sessions: tuple[str, str]) -> None:
    a, _ = two_sessions
    # "state" twice inside the tool arguments forces the careful parse, which must not refuse it.
    body = envelope(member(a), ',"extra":{"state":1,"nested":{"state":2}}')
    response = raw_call(client, body)
    assert response.status_code == 200
    assert tool_text(response.json()) == jwt_claims(a)["sid"]


def test_two_different_mcp_session_id_headers_are_a_mismatch(
    client: ModernClient, two_sessions: tuple[str, str]
) -> None:
    a, b = two_sessions
    headers = list(modern_headers({"method": "tools/call", "params": {"name": "whoami"}}).items())
    headers += [("Mcp-Session-Id", a), ("Mcp-Session-Id", b)]
    response = client.http.post(client.url, content=envelope(member(a)).encode(), headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == HEADER_MISMATCH

    same = [*headers[:-2], ("Mcp-Session-Id", a), ("Mcp-Session-Id", a)]
    response = client.http.post(client.url, content=envelope(member(a)).encode(), headers=same)
    assert tool_text(response.json()) == jwt_claims(a)["sid"]
