"""What a ``gateway --stdio`` runs, seen by its operator and by each user (docs/gateway.md, "What runs"): the
gateway command with ``--status-port`` and tokens from a JWKS on loopback, ``mcp-sessions gateway status`` and
``mcp-sessions sessions`` run by ``main`` in the test's process (their command lines, exit statuses and output as
``python -m mcp_sessions`` gives them); the process metrics on a real OpenTelemetry SDK; and a server that dies at
startup.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from _mcp import (
    MODERN,
    SESSION_NOT_FOUND,
    answer,
    era_session,
    legacy_request,
    modern_headers,
    modern_request,
    session_meta,
)
from _otel import collect, points
from _redis import free_port
from _waits import until
from conftest import SECRET, in_process
from e2e._gateway import PYTHONPATH, Process, accepted_option, gateway_process, gateway_run, legacy_initialize
from e2e._gateway import main_run as command
from e2e._issuer import ISSUER, jwks, signed
from e2e._sealed import needs
from e2e._stdio import SERVER, stdio_config, stdio_gateway
from mcp_sessions import SessionsConfig
from mcp_sessions._gateway.sealed._cgroups import Bounds
from mcp_sessions._gateway.sealed._sandbox import SandboxPolicy
from mcp_sessions._gateway.stdio._modes import default_max_processes
from mcp_sessions._gateway.stdio._server import stdio_gateway_app


@pytest.fixture(scope="module")
def team() -> Iterator[tuple[Process, int]]:
    """One gateway for a team, its operator's view on a port of its own: the gateway and that port."""
    status_port = free_port()
    with (
        jwks() as keys,
        gateway_process(
            [],
            *("--stdio", shlex.join(SERVER), "--status-port", str(status_port)),
            *("--auth-jwks", keys, "--auth-issuer", ISSUER, "--auth-audience", "{url}"),
            environ={"PYTHONPATH": PYTHONPATH},
        ) as gateway,
    ):
        yield gateway, status_port


def token(gateway: Process, user: str) -> str:
    claims = {"iss": ISSUER, "aud": gateway.url(), "sub": user, "exp": int(time.time()) + 300}
    return signed(claims)


def shown(*arguments: str, environ: Mapping[str, str] | None = None) -> Any:
    """What ``mcp-sessions ARGUMENTS --json`` prints, read as JSON (it must succeed)."""
    done = command(*arguments, "--json", environ=environ)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def call(http: httpx.Client, url: str, session: str, user_token: str) -> dict[str, Any]:
    body = modern_request("tools/call", {"name": "count", "arguments": {}}, session=session_meta(session))
    headers = modern_headers(body, Authorization=f"Bearer {user_token}")
    return answer(http.post(url, json=body, headers=headers))


def test_the_status_lists_each_process_with_its_user_and_each_user_sees_and_ends_only_hers(
    team: tuple[Process, int], tmp_path: Path
) -> None:
    gateway, status_port = team
    url, status = gateway.url(), f"http://127.0.0.1:{status_port}"
    alice, bob = token(gateway, "alice"), token(gateway, "bob")
    with httpx.Client(timeout=30) as http:
        sessions = {"alice": era_session(http, url, MODERN, Authorization=f"Bearer {alice}")}
        sessions["bob"] = era_session(http, url, MODERN, Authorization=f"Bearer {bob}")
        for _ in range(3):
            assert "result" in call(http, url, sessions["alice"], alice)
        in_transport = legacy_initialize(http, url, {"Authorization": f"Bearer {alice}"})
        transport = in_transport["Mcp-Session-Id"]
        counted_call = legacy_request("tools/call", {"name": "count", "arguments": {}}, id=4)
        assert http.post(url, json=counted_call, headers=in_transport).status_code == 200  # its process starts

        seen = shown("gateway", "status", status)
        bob_token, alice_token = tmp_path / "bob.jwt", tmp_path / "alice.jwt"
        bob_token.write_text(bob + "\n")
        alice_token.write_text(alice + "\n")
        as_alice = {"ALICE_TOKEN": alice}
        hers = shown("sessions", url, "--bearer-env", "ALICE_TOKEN", environ=as_alice)["conversations"]
        his = shown("sessions", url, "--bearer-file", str(bob_token))["conversations"]
        table = command("gateway", "status", status)
        her_table = command("sessions", url, "--bearer-env", "ALICE_TOKEN", environ=as_alice)
        refused = command("sessions", url, "--bearer-file", str(bob_token), "--end", hers[0]["conversation"])
        no_token = command("sessions", url)
        [data_layer] = [mine for mine in hers if mine["kind"] == "data-layer-session"]
        ended = command(
            "sessions", url, "--end", data_layer["conversation"], "--bearer-env", "ALICE_TOKEN", environ=as_alice
        )
        after = call(http, url, sessions["alice"], alice)
        [transported] = [mine for mine in hers if mine["kind"] == "transport-session"]
        ended_too = command("sessions", url, "--end", transported["conversation"], "--bearer-file", str(alice_token))
        listed = legacy_request("tools/list", id=5)
        transport_after = http.post(url, json=listed, headers=in_transport)
        on_the_clients_port = http.get(gateway.url("/status"), headers={"Authorization": f"Bearer {alice}"})
        an_operators_mistake = http.get(gateway.url("/status"))  # no token: a bare 401 said nothing of where
        rebound = http.get(f"{status}/status", headers={"Host": f"attacker.example:{status_port}"})

    processes = seen["processes"]
    users = {(p["kind"], p["principal"]) for p in processes if p["conversation"] is not None}
    assert users == {("data-layer-session", "alice"), ("data-layer-session", "bob"), ("transport-session", "alice")}
    assert {p["kind"] for p in processes if p["principal"] is None} <= {"shared", "warm"}
    [counted] = [p for p in processes if p["kind"] == "data-layer-session" and p["principal"] == "alice"]
    assert counted["requests"] == 3
    assert counted["age"] >= counted["idle"] >= 0
    assert all(isinstance(p["pid"], int) and p["memory"] > 1 << 20 for p in processes)  # RSS, in bytes
    assert all(re.fullmatch("[0-9a-f]{12}", p["conversation"]) for p in processes if p["conversation"])
    assert seen["users"] == [
        {"principal": "alice", "processes": 2, "limit": 8},
        {"principal": "bob", "processes": 1, "limit": 8},
    ]
    assert seen["total"] == {"processes": 3, "limit": default_max_processes()}
    keys = seen["keys"]  # the key set the gateway verifies tokens with, as it stands
    assert keys["keys"] == 1
    assert keys["error"] is None
    assert keys["attempted_at"] <= keys["fetched_at"]
    assert keys["jwks"].startswith("http://127.0.0.1:")
    assert f"keys: 1 from {keys['jwks']}, fetched" in table.stdout
    everything = json.dumps(seen) + table.stdout + json.dumps(hers) + json.dumps(his) + her_table.stdout
    for bearer in (*sessions.values(), transport, alice, bob):
        assert bearer not in everything
    assert table.returncode == 0
    assert re.search(r"^data-layer-session +alice +[0-9a-f]{12} +\d+ .* MiB +3$", table.stdout, re.M), table.stdout
    assert "alice: 2 of 8 (--max-processes-per-principal)" in table.stdout
    assert her_table.stdout.startswith("CONVERSATION  KIND"), her_table.stderr  # age and idle time with their unit
    assert re.search(r"^[0-9a-f]{12} +data-layer-session +\d+ s +\d+ s +3$", her_table.stdout, re.M), her_table.stdout

    assert {mine["kind"] for mine in hers} == {"data-layer-session", "transport-session"}
    assert [his_own["kind"] for his_own in his] == ["data-layer-session"]
    assert {mine["conversation"] for mine in hers} | {h["conversation"] for h in his} == {
        p["conversation"] for p in processes if p["conversation"]
    }
    assert "principal" not in hers[0]
    assert "pid" not in hers[0]
    assert (refused.returncode, refused.stderr) == (
        1,
        "mcp-sessions sessions: HTTP 404: no conversation of yours has this digest\n",
    )
    assert (no_token.returncode, no_token.stderr) == (
        2,
        "mcp-sessions sessions: no token: give --bearer-env VAR or --bearer-file FILE\n",
    )
    assert (ended.returncode, ended.stdout) == (0, f"ended {data_layer['conversation']}\n"), ended.stderr
    assert after["error"]["code"] == SESSION_NOT_FOUND  # her client starts a new one
    assert ended_too.returncode == 0, ended_too.stderr
    assert transport_after.status_code == 404  # as after its own DELETE: her 2025 client initializes again
    left = shown("gateway", "status", status)["processes"]
    assert not {data_layer["conversation"], transported["conversation"]} & {p["conversation"] for p in left}
    assert on_the_clients_port.status_code == 404  # the operator's view is on its own port only
    where = (
        "the operator's status is not on the clients' port: --status-port or --status-socket (its own port or socket)"
    )
    assert (an_operators_mistake.status_code, an_operators_mistake.json()) == (404, {"error": where})
    assert rebound.status_code == 403


def test_create_and_delete_hand_the_gateway_a_bearer_from_a_variable_or_a_file(
    team: tuple[Process, int], tmp_path: Path
) -> None:
    gateway, _ = team
    url, bob = gateway.url(), token(gateway, "bob")
    bob_token = tmp_path / "bob.jwt"
    bob_token.write_text(bob + "\n")
    unauthenticated = command("create", url)
    created = command("create", url, "--json", "--bearer-env", "BOB_TOKEN", environ={"BOB_TOKEN": bob})
    assert created.returncode == 0, created.stderr
    session = json.loads(created.stdout)["sessionId"]
    deleted = command("delete", url, "--bearer-file", str(bob_token), stdin=session)

    assert unauthenticated.returncode == 1
    assert "HTTP 401" in unauthenticated.stderr
    assert (deleted.returncode, deleted.stdout) == (0, "deleted\n"), deleted.stderr
    assert bob not in created.stdout + created.stderr + deleted.stdout + deleted.stderr


def test_without_authentication_no_user_view_is_served() -> None:
    with stdio_gateway(SERVER) as url, httpx.Client() as http:
        assert http.get(url + "/sessions").status_code == 404  # every caller on one address is one "user"


def test_the_process_metrics_are_recorded() -> None:
    reader = InMemoryMetricReader()
    config = SessionsConfig(secret=SECRET, meter_provider=MeterProvider(metric_readers=[reader]))
    with stdio_gateway(SERVER, config, max_processes_per_principal=1, warm=0) as url, httpx.Client(timeout=30) as http:
        session = era_session(http, url, MODERN)
        body = modern_request("sessions/create")
        refused = answer(http.post(url, json=body, headers=modern_headers(body)))
        running = collect(reader)
        deleted = modern_request("sessions/delete", session=session_meta(session))
        assert "result" in answer(http.post(url, json=deleted, headers=modern_headers(deleted)))

        def ended() -> dict[str, int]:
            found = points(collect(reader).get("mcp_sessions.gateway.process.ends"))
            return {point.attributes["mcp_sessions.process.end_reason"]: point.value for point in found}

        until(lambda: ended().get("session_ended") == 1, lambda: str(ended()))

    assert refused["error"]["code"] == -32011
    kinds = {
        point.attributes["mcp_sessions.process.kind"]: point.value
        for point in points(running["mcp_sessions.gateway.processes"])
    }
    assert kinds == {
        "shared": 1,
        "data-layer-session": 1,
        "transport-session": 0,
        "host-conversation": 0,
        "sessionless": 0,
        "request": 0,
        "caller": 0,
        "warm": 0,
    }
    [starts] = points(running["mcp_sessions.gateway.process.starts"])
    assert starts.value == 2  # the shared one, and the session's
    [refusal] = points(running["mcp_sessions.gateway.process.refusals"])
    limit = {"mcp_sessions.process.limit": "max_processes_per_principal"}
    assert (dict(refusal.attributes or {}), refusal.value) == (limit, 1)


@pytest.mark.parametrize(
    ("tool", "arguments", "word", "said"),
    [
        ("crash", {}, "crash", "crash: "),
        ("allocate", {"mib": 256}, "over_memory_bound", "over its memory bound (--process-memory)"),
    ],
    ids=["crash", "bound"],
)
def test_an_end_is_one_word_in_the_metric_the_status_the_log_and_the_clients_error(
    logged: list[str], tool: str, arguments: dict[str, Any], word: str, said: str
) -> None:
    """Issue 93, item 2: a crash was counted ``crash`` in the metric but told ``exited`` to the client, and a process
    past its memory bound (a control group of 64 MiB) counted ``other`` but told ``over its memory bound``. Its end is
    set once, where its process ends, and each of the four reads that one: the metric and the status by its word."""
    options: dict[str, Any] = {}
    if tool == "allocate":
        needs("root", "cgroup-memory")
        options["sandbox"] = SandboxPolicy(bounds=Bounds.found(64 << 20, None))
    reader = InMemoryMetricReader()
    config = SessionsConfig(secret=SECRET, meter_provider=MeterProvider(metric_readers=[reader]))
    gateway = stdio_config(SERVER, config, pass_env=("PYTHONPATH",), status_port=8001, **options)
    with in_process(stdio_gateway_app(gateway)) as http:  # the status on its port, 8001, in process too
        url = "/mcp"
        host = {"vscode.conversationId": f"chat-{tool}"}
        ending = modern_request("tools/call", {"name": tool, "arguments": arguments}, meta=host)
        in_flight = answer(http.post(url, json=ending, headers=modern_headers(ending)))["error"]

        def ended() -> dict[str, int]:
            found = points(collect(reader).get("mcp_sessions.gateway.process.ends"))
            return {point.attributes["mcp_sessions.process.end_reason"]: point.value for point in found}

        until(lambda: ended() == {word: 1}, lambda: str(ended()))
        again = modern_request("tools/call", {"name": "count", "arguments": {}}, meta=host)
        later = answer(http.post(url, json=again, headers=modern_headers(again)))["error"]
        status = http.get("http://127.0.0.1:8001/status").json()

    assert f"exited ({said}" in in_flight["message"], in_flight
    assert f"has ended ({said}" in later["message"], later
    assert status["ended"] == {word: 1}, status
    [process] = [line for line in logged if line.startswith("process ") and ": server process " in line]
    assert f"ended ({said}" in process, process
    assert [line for line in logged if f"the conversation ended ({said}" in line], logged


def test_a_server_that_dies_at_startup_is_one_line_naming_its_last_stderr_line_and_exit_status_2() -> None:
    """At its ``initialize`` (no revision probe before it): the one at the probe is test_gateway_stdio_lifetimes'."""
    server = [sys.executable, "-c", "import sys; print('reading the config', file=sys.stderr); sys.exit('no token')"]
    done = gateway_run("--port", str(free_port()), "--stdio", shlex.join(server), "--processes", "per-conversation")
    said = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert re.fullmatch(
        f"mcp-sessions gateway: {re.escape(shlex.join(server))}: the server failed to initialize: .+; "
        "its last stderr line: no token",
        said[-1],
    ), said
    assert "Traceback" not in done.stderr
    assert "Exception" not in done.stderr
    assert not [line for line in said[:-1] if not re.match(r"\S+ INFO: ", line)]  # the rest is the log, as at any start


def test_the_gateway_and_its_status_port_answer_without_waiting_for_a_delayed_ack(team: tuple[Process, int]) -> None:
    """Every connection the command accepts, on its port and its status port, has ``TCP_NODELAY`` set (asyncio sets
    it only on a socket made as TCP): without it an answer written in pieces waited 40 ms for the client's ACK."""
    gateway, status_port = team
    assert gateway.process is not None
    for port in (gateway.port, status_port):
        assert accepted_option(gateway.process.pid, port, socket.IPPROTO_TCP, socket.TCP_NODELAY), port


def test_a_status_port_that_cannot_be_had_is_one_line_and_exit_status_2() -> None:
    port = free_port()
    secret = {"MCP_SESSIONS_SECRET": SECRET}  # by main in this process: refused before the port is bound
    done = command("gateway", "--port", str(port), "--stdio", "true", "--status-port", str(port), environ=secret)
    assert (done.returncode, done.stderr) == (
        2,
        "mcp-sessions gateway: --status-port serves --stdio processes' status, on a port other than --port\n",
    )


def test_the_status_shows_the_server_inside_its_wrappers() -> None:
    """Under bubblewrap (the containment `auto` takes where it works), a process's pid and memory in the status are
    its server's, not bubblewrap's (1.9 MiB where the server held 68 MB: an operator sizing --process-memory from it
    was off 35 times), and the log's end line names the same pid (it named bubblewrap's)."""
    status_port = free_port()
    with (
        gateway_process(
            [],
            "--stdio",
            shlex.join(SERVER),
            *("--process-containment", "bwrap", "--status-port", str(status_port), "--log-level", "info"),
            environ={"PYTHONPATH": PYTHONPATH},
        ) as gateway,
        httpx.Client(timeout=30) as http,
    ):
        era_session(http, gateway.url(), MODERN)
        seen = shown("gateway", "status", f"http://127.0.0.1:{status_port}")
        [process] = [p for p in seen["processes"] if p["kind"] == "data-layer-session"]
        server = Path(f"/proc/{process['pid']}/cmdline").read_bytes().split(b"\0")
        said = gateway.stop().decode()
    assert f"server process {process['pid']} ended (shutdown" in said, said
    assert server[1:3] == [b"-m", b"e2e._plain_stdio"], server
    assert process["memory"] > 8 << 20, process  # an interpreter, not bubblewrap's 2 MiB
