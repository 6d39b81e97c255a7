"""Durable by default (issue 112, item 3): a gateway given no store (no ``MCP_SESSIONS_STORE``) keeps its sessions,
their data and its users' sign-ins in an SQLite file in its state directory (systemd's ``STATE_DIRECTORY``, which
conftest gives each test, else ``--process-state``'s default), so that a restart ends no session and signs no user out
(``test_gateway_oauth.py``'s ``test_a_restarted_gateway_keeps_each_grant_sealed_in_its_store`` shows a grant kept so);
its startup line says where; ``MCP_SESSIONS_STORE`` still chooses another store; a state directory it cannot make is
refused in one line. Each through the command, as its own process."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from _mcp import modern_headers, modern_request, session_meta
from _redis import RedisServer, free_port
from _uids import members, uids
from _waits import WITHIN
from conftest import serve
from e2e._gateway import (
    SECRET,
    Process,
    checkout_every_uid_imports,
    created,
    gateway_run,
    python_every_uid_runs,
    result_of,
    upstream_server,
)
from e2e._sealed import needs

SESSION_NOT_FOUND = -32043
STORE = ("store", "sessions.db")  # in the state directory


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with serve(upstream_server("upstream").streamable_http_app(stateless_http=True, json_response=True)) as url:
        yield url + "/mcp"


def gateway(upstream: str, port: int, **environ: str) -> Process:
    """``mcp-sessions gateway --upstream UPSTREAM`` on ``port``, its startup lines logged, in the environment of the
    test (its ``STATE_DIRECTORY``) and ``environ``."""
    line = [sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(port), "--upstream", upstream]
    return Process(
        "mcp-sessions gateway", [*line, "--log-level", "info"], {"MCP_SESSIONS_SECRET": SECRET, **environ}, port
    )


def echoed(http: httpx.Client, url: str, session: str) -> dict[str, object]:
    """The answer to an ``echo`` call in ``session``."""
    body = modern_request(
        "tools/call", {"name": "echo", "arguments": {"message": "hi"}}, id=2, session=session_meta(session)
    )
    response = http.post(url, json=body, headers=modern_headers(body))
    assert response.status_code == 200, response.text
    return result_of(response, 2)


def test_a_gateway_given_no_store_keeps_its_sessions_across_a_restart_and_says_where(
    upstream: str, http: httpx.Client
) -> None:
    """A session ended before a SIGTERM restart is still ended after it, and one that was not still serves: the
    revocation is in the state directory's SQLite file (its directory 0700, the file 0600), which the startup line
    names, with no secret in it. In memory, the restart forgot the revocation, and the ended session's token served
    again."""
    port = free_port()
    first = gateway(upstream, port)
    try:
        kept, ended = created(http, first.url()), created(http, first.url())
        body = modern_request("sessions/delete", id=3, session=session_meta(ended))
        deleted = http.post(first.url(), json=body, headers=modern_headers(body))
        assert result_of(deleted, 3)["result"] == {"resultType": "complete"}
    finally:
        said = first.stop().decode(errors="replace")
    second = gateway(upstream, port)
    try:
        assert echoed(http, second.url(), ended)["error"]["code"] == SESSION_NOT_FOUND  # type: ignore[index]
        assert echoed(http, second.url(), kept)["result"]["content"][0]["text"] == "hi"  # type: ignore[index]
    finally:
        second.stop()
    store = Path(os.environ["STATE_DIRECTORY"], *STORE)
    assert f"sessions, their data and users' sign-ins kept in SQLiteStore('{store}', timeout=2.0)" in said
    assert SECRET not in said and kept not in said and ended not in said
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.parent.stat().st_mode) == 0o700


def test_mcp_sessions_store_still_chooses_redis(upstream: str, redis: RedisServer, http: httpx.Client) -> None:
    """With ``MCP_SESSIONS_STORE=redis://…`` the gateway keeps its sessions in Redis, says so, and makes no file in
    its state directory."""
    served = gateway(upstream, free_port(), MCP_SESSIONS_STORE=redis.url)
    try:
        session = created(http, served.url())
        assert echoed(http, served.url(), session)["result"]["content"][0]["text"] == "hi"  # type: ignore[index]
    finally:
        said = served.stop().decode(errors="replace")
    assert "sessions, their data and users' sign-ins kept in RedisStore(prefix='mcp-sessions:', timeout=2.0)" in said
    assert not Path(os.environ["STATE_DIRECTORY"], STORE[0]).exists()


def test_a_state_directory_the_gateway_cannot_make_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state directory (systemd's ``STATE_DIRECTORY`` here) that cannot be made, a file where its parent would be,
    is refused at startup in one line that names it and the flag that gives another."""
    (tmp_path / "file").touch()
    state = tmp_path / "file" / "state"
    monkeypatch.setenv("STATE_DIRECTORY", str(state))
    done = gateway_run("--upstream", "http://127.0.0.1:9/mcp", "--port", str(free_port()))
    said = (
        f"mcp-sessions gateway: --process-state {state}: {state}: Not a directory: give a directory the gateway's "
        "user may make and write, by --process-state DIR, the same for every gateway of the host\n"
    )
    assert (done.returncode, done.stderr) == (2, said)


def test_a_user_s_gateway_keeps_its_store_in_her_own_state_directory() -> None:
    """A gateway run by a user, not root, given neither ``--process-state`` nor ``STATE_DIRECTORY``, keeps its store in
    her state directory, ``$XDG_STATE_HOME/mcp-sessions`` (made hers, 0700; the file 0600), as its startup line
    says; root's default, ``/var/lib/mcp-sessions``, is not hers to write."""
    needs("root")  # to run it as a uid of its own
    [user] = members(uids(491, 1))
    python = python_every_uid_runs()
    with checkout_every_uid_imports("mcp-sessions-user-") as (top, imported):
        xdg = top / "state"
        xdg.mkdir(mode=0o700)
        os.chown(xdg, user, user)  # hers, as ~/.local/state is
        environ = {
            "PATH": os.environ["PATH"],
            "HOME": str(top),
            "XDG_STATE_HOME": str(xdg),
            "MCP_SESSIONS_SECRET": SECRET,
        }
        environ["PYTHONPATH"] = imported
        line = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", python, "-m", "mcp_sessions"]
        line += ["gateway", "--upstream", "http://127.0.0.1:9/mcp", "--port", str(free_port()), "--log-level", "info"]
        store = xdg / "mcp-sessions" / "store" / "sessions.db"
        said = f"sessions, their data and users' sign-ins kept in SQLiteStore('{store}', timeout=2.0)"
        with subprocess.Popen(line, env=environ, cwd=top, stderr=subprocess.PIPE, text=True) as gateway:
            try:
                assert gateway.stderr is not None
                lines = [gateway.stderr.readline()]
                while lines[-1] and "Application startup complete" not in lines[-1]:  # after its startup lines
                    lines.append(gateway.stderr.readline())
                gateway.send_signal(signal.SIGTERM)
                assert gateway.wait(timeout=WITHIN) in (0, -signal.SIGTERM)
            finally:
                if gateway.poll() is None:
                    gateway.kill()
        assert said in "".join(lines)
        found = store.stat()
        assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (user, 0o600)
        assert stat.S_IMODE(store.parent.stat().st_mode) == stat.S_IMODE(store.parents[1].stat().st_mode) == 0o700
