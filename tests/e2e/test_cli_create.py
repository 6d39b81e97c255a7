"""``mcp-sessions create URL``: a session for clients that can only add metadata, through a real server."""

from __future__ import annotations

import io
import json
import shlex
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from examples.quickstart import build_app, build_server

from _mcp import MCP_PATH, SESSION_KEY, SESSION_NOT_FOUND, LegacyClient, ModernClient, jwt_claims, tool_text
from conftest import SECRET, serve
from e2e._gateway import INSPECTOR_CLI
from mcp_sessions._cli import main

ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}


def run(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdin=io.StringIO(stdin), stdout=out, stderr=err, environ={})
    return code, out.getvalue(), err.getvalue()


def inspector_metadata(out: str) -> dict[str, object]:
    """The value the printed ``--metadata`` argument gives, read as a shell and the Inspector read it."""
    [line] = [line for line in out.splitlines() if line.strip().startswith("--metadata ")]
    [flag, argument] = shlex.split(line)
    assert flag == "--metadata"
    key, _, value = argument.partition("=")
    return {key: json.loads(value)}


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_create_prints_a_session_that_counts_in_both_eras(url: str, http: httpx.Client, era: str) -> None:
    code, out, err = run("create", url + MCP_PATH, *(["--legacy"] if era == "legacy" else []))

    assert (code, err) == (0, "")
    meta = inspector_metadata(out)
    token = meta[SESSION_KEY]["sessionId"]  # type: ignore[index]
    assert f"session: {jwt_claims(token)['sid']}" in out
    client = ModernClient(http, url) if era == "modern" else LegacyClient(http, url)
    if isinstance(client, LegacyClient):
        client.initialize()
    counts = [tool_text(client.call_tool("count", meta=meta)[1]) for _ in range(2)]
    assert counts == ["1", "2"]


def test_create_json_gives_the_metadata_to_send(url: str, http: httpx.Client) -> None:
    code, out, _ = run("create", url + MCP_PATH, "--json")

    report = json.loads(out)
    assert code == 0
    assert set(report) == {"sessionId", "id", "expiresAt", "meta"}
    assert report["id"] == jwt_claims(report["sessionId"])["sid"]
    _, message = ModernClient(http, url).call_tool("whoami", meta=report["meta"])
    assert tool_text(message) == report["id"]


def test_a_server_without_sessions_is_a_clear_failure(http: httpx.Client) -> None:
    bare = build_server().streamable_http_app(streamable_http_path=MCP_PATH, json_response=True)
    with serve(bare) as base:
        code, out, err = run("create", base + MCP_PATH)
    assert (code, out) == (1, "")
    assert err.startswith("mcp-sessions create: the server refused sessions/create")


def test_nothing_listening_is_a_clear_failure() -> None:
    with serve(build_app(json_response=True, environ=ENVIRON)) as base:
        pass  # the port is free again once the server stopped
    code, out, err = run("create", base + MCP_PATH)
    assert (code, out) == (1, "")
    assert err.startswith(f"mcp-sessions create: no answer from {base}{MCP_PATH}")


CREDENTIAL = "sk-live-0123456789abcdef"


@pytest.mark.parametrize("command", ["create", "delete", "sessions"])
@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--header", f"Authorization: Bearer {CREDENTIAL}"], "--header takes NAME=env:VAR or NAME=file:PATH"),
        (["--header", f"X-Api-Key={CREDENTIAL}"], "--header takes NAME=env:VAR or NAME=file:PATH"),
        (["--bearer-env", CREDENTIAL], "--bearer-env: the environment variable it names is not set or empty"),
        (["--bearer-file", CREDENTIAL], "--bearer-file: cannot read the file it names: No such file or directory"),
    ],
    ids=["header", "header-value", "bearer-env", "bearer-file"],
)
def test_a_credential_on_the_command_line_is_refused_and_never_repeated(
    command: str, given: list[str], said: str
) -> None:
    code, out, err = run(command, "http://127.0.0.1:9/mcp", *given, stdin="a-session-id\n")
    assert (code, out) == (2, "")
    assert err.startswith(f"mcp-sessions {command}: {said}")
    assert err.count("\n") == 1
    assert CREDENTIAL not in err


def test_the_printed_argument_works_in_the_mcp_inspector_cli(url: str) -> None:
    """The real MCP Inspector CLI (2.12.0): two calls with the printed --metadata count 1, then 2."""
    assert shutil.which("node"), "node is missing: scripts/system-deps.sh installs it"
    assert Path(INSPECTOR_CLI).is_file(), f"{INSPECTOR_CLI} is missing: scripts/system-deps.sh installs it"
    _, out, _ = run("create", url + MCP_PATH)
    [line] = [line for line in out.splitlines() if line.strip().startswith("--metadata ")]
    metadata = shlex.split(line)
    counts = []
    for _ in range(2):
        command = ["node", INSPECTOR_CLI, "--cli", url + MCP_PATH, "--transport", "http", "--method", "tools/call"]
        done = subprocess.run(
            [*command, "--tool-name", "count", *metadata], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
        counts.append(json.loads(done.stdout)["structuredContent"]["result"])
    assert counts == [1, 2]


def test_delete_ends_the_session_create_printed(url: str, http: httpx.Client) -> None:
    """``mcp-sessions delete URL`` with the sessionId on standard input: the session is gone; a second delete says the
    server no longer knew it (exit status 1)."""
    _, out, _ = run("create", url + MCP_PATH, "--json")
    token = json.loads(out)["sessionId"]
    for code, said, err in (
        (0, "deleted\n", ""),
        (1, "", "mcp-sessions delete: the server no longer knew this session"),
    ):
        status, done, errs = run("delete", url + MCP_PATH, stdin=token + "\n")
        assert (status, done) == (code, said)
        assert errs.startswith(err)
    _, refused = ModernClient(http, url).call_tool("count", meta={SESSION_KEY: {"sessionId": token}})
    assert refused["error"]["code"] == SESSION_NOT_FOUND
