"""``mcp-sessions connect``, started as a host starts its stdio servers, in front of a real ``gateway --stdio``.

The host is the stock ``mcp`` SDK client over stdio (``StdioServerParameters``), its environment holding
``CLAUDE_CODE_SESSION_ID`` as Claude Code gives it; the shim carries a bearer token from a file to a gateway that
verifies it against a JWKS on loopback (``e2e._issuer``); the gateway (in process) runs the tests' stdio server (its
``whoami`` names the process, its ``count`` is that process's memory) with ``--warm 0``, so every process it runs is
one a conversation asked for. The configuration of docs/clients.md is read from the doc and run as written.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Literal, cast

import anyio
import jwt
import mcp_types as types
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types import RequestParamsMeta

from _redis import end_process, free_port
from _waits import WITHIN, until, until_awaited
from e2e._gateway import MAIN, PYTHONPATH, SECRET, Process
from e2e._issuer import ISSUER, jwks, signed
from e2e._stdio import COUNT, SERVER, SERVER_PATH, gone, own_children, stdio_gateway, text_of
from mcp_sessions._cli import main
from mcp_sessions._gateway.auth._users import GatewayAuth

pytestmark = pytest.mark.anyio

OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
AUDIENCE = "https://mcp.example.com/mcp"  # the gateway's public URL, behind its proxy
API_KEY = "api-key-0123456789abcdefghijklmnopqrstuvwxyz"
Mode = Literal["auto", "legacy"]
INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}


@contextlib.contextmanager
def verifying_gateway(per_principal: int) -> Iterator[str]:
    """``stdio_gateway`` verifying bearer tokens of ``e2e._issuer``'s for ``AUDIENCE``, starting no process ahead,
    with room for ``per_principal`` conversations of alice's: its MCP URL."""
    with jwks() as keys:
        auth = GatewayAuth(jwks_url=keys, issuer=ISSUER, audience=AUDIENCE)
        with stdio_gateway(auth=auth, max_processes=64, max_processes_per_principal=per_principal) as url:
            yield url


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    # The module's conversations, more than the default limit's eight, are all alice's: none is ended to make room
    # for another (test_gateway_stdio_table tests that).
    with verifying_gateway(64) as url:
        yield url


@pytest.fixture
def host(gateway: str, tmp_path: Path) -> Host:
    return Host(gateway, tmp_path)


class Host:
    """A host's configuration of the shim: its token file (alice's, the issuer's unless signed by ``key`` under the
    issuer's key id), its state directory, each start's standard error."""

    def __init__(self, url: str, directory: Path, key: Any = None) -> None:
        self.url = url
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": int(time.time()) + 600}
        self.token = signed(claims) if key is None else jwt.encode(claims, key, "RS256", {"kid": "k1"})
        self.token_file = directory / "token"
        self.token_file.write_text(self.token + "\n")
        self.state = directory / "state"
        self.stderr: list[str] = []

    @contextlib.asynccontextmanager
    async def shim(
        self,
        conversation: str | None,
        mode: Mode = "auto",
        command: str = sys.executable,
        *arguments: str,
        also: tuple[str, ...] = (),
        claude_code: bool = True,
        **callbacks: Any,
    ) -> AsyncIterator[Client]:
        """The shim started as a host starts a stdio server, ``conversation`` its CLAUDE_CODE_SESSION_ID (beside
        Claude Code's CLAUDECODE=1, unless not ``claude_code``); by default with a bearer token from a file and an
        API key from the environment."""
        environ = {"PYTHONPATH": PYTHONPATH, "XDG_STATE_HOME": str(self.state), "API_KEY": API_KEY}
        if conversation is not None:
            environ["CLAUDE_CODE_SESSION_ID"] = conversation
        if claude_code:
            environ["CLAUDECODE"] = "1"
        arguments = arguments or (
            *("-m", "mcp_sessions", "connect", self.url, "--bearer-file", str(self.token_file)),
            *("--header", "X-Api-Key=env:API_KEY", *also),
        )
        server = StdioServerParameters(command=command, args=list(arguments), env=environ)
        with tempfile.TemporaryFile("w+") as errors:
            try:
                with anyio.fail_after(60):
                    async with Client(stdio_client(server, errlog=errors), mode=mode, **callbacks) as client:
                        yield client
            finally:
                errors.seek(0)
                self.stderr.append(errors.read())

    @contextlib.contextmanager
    def lines(self, *arguments: str) -> Iterator[Callable[[dict[str, Any]], dict[str, Any]]]:
        """The shim at :attr:`url` with ``arguments``, spoken to a line at a time as a host does: what it yields writes
        a message and reads its answer. At the end its stdin is closed, it exits with status 0, and what it said is
        appended to :attr:`stderr`."""
        environ = {"PYTHONPATH": PYTHONPATH, "XDG_STATE_HOME": str(self.state)}
        command = [sys.executable, "-m", "mcp_sessions", "connect", self.url, *arguments]
        pipes = subprocess.PIPE
        with (
            tempfile.TemporaryFile() as errors,
            subprocess.Popen(command, env=environ, stdin=pipes, stdout=pipes, stderr=errors) as shim,
        ):
            stdin, stdout = shim.stdin, shim.stdout
            assert stdin is not None
            assert stdout is not None

            def sent(message: dict[str, Any]) -> dict[str, Any]:
                stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
                stdin.flush()
                answer: dict[str, Any] = json.loads(stdout.readline())
                return answer

            yield sent
            stdin.close()
            assert shim.wait(WITHIN) == 0
            errors.seek(0)
            self.stderr.append(errors.read().decode())


async def seen(client: Client) -> tuple[int, str]:
    """The process a call reaches, and that process's count after it."""
    who, count = await client.call_tool("whoami", {}), await client.call_tool("count", {})
    assert "io.modelcontextprotocol/session" not in (count.meta or {})  # the shim's session is its own
    return json.loads(text_of(who))["pid"], text_of(count)


def text_of_answer(answer: dict[str, Any]) -> str:
    """The text of a ``tools/call``'s answer, as the shim wrote it to the host."""
    [content] = answer["result"]["content"]
    return str(content["text"])


def processes() -> set[int]:
    """The gateways' conversations' processes (each has its MCP_SESSION_ID; the shims none)."""
    return own_children("MCP_SESSION_ID=")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_process_per_conversation_across_the_host_s_restarts(host: Host, mode: Mode) -> None:
    before = processes()  # those of earlier tests, until they end
    async with host.shim(f"conv-a-{mode}", mode) as a, host.shim(f"conv-b-{mode}", mode) as b:
        (pid_a, count_a), (pid_b, count_b) = await seen(a), await seen(b)
        assert pid_a != pid_b
        assert count_a == count_b == "1"
        assert (await seen(a))[1] == "2"
        # one process a conversation: a 2025 host's connection (its transport session) costs none (77.2)
        assert processes() - before == {pid_a, pid_b}
    async with host.shim(f"conv-a-{mode}", mode) as again:
        assert await seen(again) == (pid_a, "3")  # the same process, and what it kept
    saved = list((host.state / "mcp-sessions" / "connect").glob("*.json"))  # each conversation's session
    assert len(saved) == 2
    assert {path.stat().st_mode & 0o777 for path in saved} == {0o600}
    for output in host.stderr:
        assert host.token not in output
        assert API_KEY not in output


async def test_without_a_conversation_the_requests_name_it(host: Host) -> None:
    """No id in the environment: nothing is added, so a 2026-07-28 call that names no conversation reaches its
    caller's process (the gateway's --sessionless per-caller) and a 2025 host's connection its transport
    session's. A CLAUDE_CODE_SESSION_ID without CLAUDECODE=1 (left exported in a shell) names none either."""
    async with host.shim("left-in-a-shell", claude_code=False) as modern:
        (first, _), (second, count) = await seen(modern), await seen(modern)
        assert first == second
        assert int(count) >= 2  # alice's: other tests' calls that named none count too
    async with host.shim(None, "legacy") as legacy:
        (first, _), (second, count) = await seen(legacy), await seen(legacy)
        assert first == second
        assert count == "2"
    assert not (host.state / "mcp-sessions").exists()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_refused_token_is_one_clear_error(gateway: str, tmp_path: Path, mode: Mode) -> None:
    host = Host(gateway, tmp_path, key=OTHER_KEY)
    # The remote's reason (its error_description), for the person who can fix the credential.
    said = r"refused this server's credentials \(HTTP 401: the token's signature does not verify\)"
    # The SDK's client raises its error inside the group of its connection's tasks.
    with pytest.RaisesGroup(pytest.RaisesExc(MCPError, match=said), flatten_subgroups=True):
        async with host.shim("conv-refused", mode):
            pass
    [output] = host.stderr
    assert output.count("HTTP 401") == 1
    assert host.token not in output
    assert API_KEY not in output


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_two_shims_of_one_conversation_started_together_end_in_one_session(host: Host, mode: Mode) -> None:
    """77.2: two shims of one conversation, started together, each created a session ("the file keeps the last"):
    the conversation's lock makes the second take the first's."""
    firsts = list[tuple[int, str]]()

    async def first(client: Client) -> None:
        firsts.append(await seen(client))

    name = f"conv-twice-{mode}"
    async with host.shim(name, mode) as one, host.shim(name, mode) as two, anyio.create_task_group() as tasks:
        tasks.start_soon(first, one)
        tasks.start_soon(first, two)
    assert len({pid for pid, _ in firsts}) == 1, firsts
    assert sorted(count for _, count in firsts) == ["1", "2"], firsts
    assert len(list(host.state.glob("mcp-sessions/connect/*.json"))) == 1


async def test_at_a_limit_the_host_gets_the_remotes_error_never_a_session_of_its_connection(tmp_path: Path) -> None:
    """77.2: at ``--max-processes-per-principal``, the third Claude Code conversation's create was refused and the
    shim fell back, silently, to a session in its connection's transport session, which its next start lost. Now
    the host's request gets the gateway's refusal, and the next, once there is room, the conversation's session."""
    with verifying_gateway(1) as gateway:
        host = Host(gateway, tmp_path)
        async with host.shim("conv-first", "legacy") as first:
            await seen(first)
            async with host.shim("conv-second", "legacy") as second:
                with pytest.raises(MCPError, match="--max-processes-per-principal"):
                    await second.call_tool("count", {})
                saved = list(host.state.glob("mcp-sessions/connect/*.json"))
    assert len(saved) == 1  # the first conversation's alone


async def test_end_with_host_deletes_the_conversation_s_session(host: Host) -> None:
    async with host.shim("conv-ended", also=("--end-with-host",)) as first:
        pid, _ = await seen(first)
    assert not list(host.state.glob("mcp-sessions/connect/*.json"))  # its file, gone with it
    until(lambda: gone(pid), f"the ended session's process {pid} to end")
    async with host.shim("conv-ended") as again:
        assert (await seen(again))[1] == "1"  # the same conversation starts over, in a new process


def test_a_host_s_sigterm_ends_the_session_then_the_shim(host: Host) -> None:
    """A host that signals without closing stdin: the session deleted (--end-with-host), the shim ended by the
    signal, at once."""
    environ = {
        "PYTHONPATH": PYTHONPATH,
        "XDG_STATE_HOME": str(host.state),
        "CLAUDE_CODE_SESSION_ID": "conv-term",
        "CLAUDECODE": "1",
        "TEAM_TOKEN": host.token,  # the bearer from a variable: answered only if it reaches the gateway
    }
    command = [sys.executable, "-m", "mcp_sessions", "connect", host.url, "--bearer-env", "TEAM_TOKEN"]
    initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "count", "arguments": {}}},
    ]
    pipes = subprocess.PIPE
    with subprocess.Popen([*command, "--end-with-host"], env=environ, stdin=pipes, stdout=pipes) as shim:
        assert shim.stdin is not None
        assert shim.stdout is not None
        try:
            shim.stdin.write(b"".join(json.dumps(message).encode() + b"\n" for message in messages))
            shim.stdin.flush()
            assert [json.loads(shim.stdout.readline())["id"] for _ in range(2)] == [1, 2]
            assert list(host.state.glob("mcp-sessions/connect/*.json"))
            shim.send_signal(signal.SIGTERM)
            assert shim.wait(WITHIN) == -signal.SIGTERM
        finally:
            shim.kill()  # nothing, once it has ended
    assert not list(host.state.glob("mcp-sessions/connect/*.json"))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_what_the_remote_asks_and_says_reaches_the_host(tmp_path: Path, mode: Mode) -> None:
    """Without the SDK's client, the shim still relays what the remote asks its host (sampling, elicitation, roots: on
    a 2025 request's event stream, or in a 2026-07-28 result) and the host's answers back; and in 2025, what the
    remote says tied to no request, on the transport session's GET stream."""
    heard = anyio.Event()

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        text = types.TextContent(type="text", text="sampled")
        return types.CreateMessageResult(role="assistant", content=text, model="m")

    async def elicitation(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"answer": "yes"})

    async def roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult.model_validate({"roots": [{"uri": "file:///work/a"}]})

    async def logged(params: types.LoggingMessageNotificationParams) -> None:
        if "announced by" in str(params.data):
            heard.set()

    asked: dict[str, Any] = {"sampling_callback": sampling, "elicitation_callback": elicitation}
    with stdio_gateway() as url:
        host = Host(url, tmp_path)
        async with host.shim(
            f"conv-asks-{mode}", mode, list_roots_callback=roots, logging_callback=logged, **asked
        ) as client:
            assert text_of(await client.call_tool("sample", {"prompt": "hi"})) == "sampled"
            assert text_of(await client.call_tool("elicit", {"question": "ok?"})) == "accept: yes"
            assert text_of(await client.call_tool("roots", {})) == "file:///work/a"
            if mode == "legacy":
                assert text_of(await client.call_tool("announce", {})) == "soon"
                with anyio.fail_after(WITHIN):
                    await heard.wait()


def test_the_shim_starts_without_the_sdk(host: Host) -> None:
    """86.2: a host starts the shim for every conversation, and it spent two thirds of its start importing the ``mcp``
    SDK. Run as a host runs it, under ``-X importtime``: it answers ``initialize`` and relays a call having imported no
    module of the SDK, nor pydantic or Starlette (none of the middleware's); what it writes to standard error is the
    interpreter's import lines alone (the SDK's client logged a line there)."""
    environ = {"PYTHONPATH": PYTHONPATH, "XDG_STATE_HOME": str(host.state), "CLAUDE_CODE_SESSION_ID": "conv-lean"}
    command = [sys.executable, "-X", "importtime", "-m", "mcp_sessions", "connect", host.url]
    initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": COUNT},
    ]
    lines = b"".join(json.dumps(message).encode() + b"\n" for message in messages)
    arguments = ["--bearer-file", str(host.token_file)]
    pipes = subprocess.PIPE
    environ["CLAUDECODE"] = "1"
    with (
        tempfile.TemporaryFile() as errors,
        subprocess.Popen([*command, *arguments], env=environ, stdin=pipes, stdout=pipes, stderr=errors) as shim,
    ):
        assert shim.stdin is not None
        assert shim.stdout is not None
        shim.stdin.write(lines)
        shim.stdin.flush()
        answers = [json.loads(shim.stdout.readline()) for _ in range(2)]
        shim.stdin.close()
        assert shim.wait(WITHIN) == 0
        errors.seek(0)
        said = errors.read().decode().splitlines()
    assert [answer["id"] for answer in answers] == [1, 2]
    assert text_of_answer(answers[1]) == "1"
    imported = {line.split("|")[-1].strip().split(".")[0] for line in said if line.startswith("import time:")}
    assert "mcp_sessions" in imported
    assert imported & {"mcp", "mcp_types", "pydantic", "starlette"} == set()
    assert [line for line in said if not line.startswith("import time:")] == []


@pytest.mark.parametrize("option", ["--bearer-file", "--header"])
def test_a_rotated_token_file_is_read_again_when_the_remote_refuses(host: Host, option: str) -> None:
    """86.4: the shim read --bearer-file once, so that once its token expired every call was refused until the host
    restarted it. Now a refusal reads the file again, and the request is sent once more with what it now holds: a
    refresher that rewrites the file is enough (as ``--header NAME=file:PATH``)."""
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": int(time.time()) + 600}
    stale = jwt.encode(claims, OTHER_KEY, "RS256", {"kid": "k1"})  # what the gateway refuses, as an expired one
    prefix = "" if option == "--bearer-file" else "Bearer "
    host.token_file.write_text(prefix + stale + "\n")
    given = str(host.token_file) if option == "--bearer-file" else f"Authorization=file:{host.token_file}"
    with host.lines(option, given) as sent:
        refused = sent({"id": 1, "method": "initialize", "params": INITIALIZE})
        assert "refused this server's credentials (HTTP 401" in refused["error"]["message"]
        assert refused["error"]["message"].endswith(
            "their file holds no other: write a fresh one there (each refusal reads it again)"
        )
        rotated = host.token_file.with_suffix(".new")  # as a refresher writes it: whole, then renamed over the old
        rotated.write_text(prefix + host.token + "\n")
        rotated.replace(host.token_file)
        assert sent({"id": 2, "method": "initialize", "params": INITIALIZE})["result"]["serverInfo"]
    [said] = host.stderr
    assert said.count("HTTP 401") == 1
    assert stale not in said
    assert host.token not in said


def test_a_token_file_not_yet_written_is_answered_per_request_until_it_is(host: Host) -> None:
    """Issue 94 (Why, 7): connect exited at its start when a refresher had not yet written its --bearer-file. Now
    each request is answered with why, as a refused token is, until the file is there; then the next one goes."""
    missing = host.token_file.with_name("not-yet.jwt")
    with host.lines("--bearer-file", str(missing)) as sent:
        unread = sent({"id": 1, "method": "initialize", "params": INITIALIZE})["error"]["message"]
        assert unread == (
            "this server's credentials cannot be read yet (--bearer-file: cannot read the file it names: "
            "No such file or directory): each request reads them again"
        )
        written = missing.with_suffix(".new")  # as a refresher writes it: whole, then renamed
        written.write_text(host.token + "\n")
        written.replace(missing)
        assert sent({"id": 2, "method": "initialize", "params": INITIALIZE})["result"]["serverInfo"]
    [said] = host.stderr
    assert said.count("cannot be read yet") == 1
    assert host.token not in said
    assert str(missing) not in said


async def test_an_unreachable_remote_is_one_clear_error(tmp_path: Path) -> None:
    host = Host(f"http://127.0.0.1:{free_port()}/mcp", tmp_path)
    with pytest.RaisesGroup(pytest.RaisesExc(MCPError, match="could not reach"), flatten_subgroups=True):
        async with host.shim("conv-nowhere", "legacy"):
            pass
    [output] = host.stderr
    assert output.count("could not reach") == 1
    assert host.token not in output


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--header", f"Authorization=Bearer {API_KEY}"], "--header takes NAME=env:VAR or NAME=file:PATH"),
        (["--header", f"Authorization: Bearer {API_KEY}"], "--header takes NAME=env:VAR or NAME=file:PATH"),
        (["--header", "X-Api-Key=env:UNSET_VARIABLE"], "--header X-Api-Key: the environment variable it names is not"),
        (["--bearer-env", API_KEY], "--bearer-env: the environment variable it names is not set"),
        (["--bearer-env", "TWO_LINES"], "--bearer-env: the environment variable it names must hold one line"),
        (["--header", "X-Api-Key=env:TWO_LINES"], "--header X-Api-Key: the environment variable it names must hold"),
        (["--bearer-env", "KEY", "--header", "authorization=env:KEY"], "--header Authorization and --bearer-env"),
    ],
)
def test_a_credential_comes_from_the_environment_or_a_file_never_the_command_line(
    arguments: list[str], said: str
) -> None:
    errors = io.StringIO()
    environ = {"TWO_LINES": f"{API_KEY}\nX-Injected: 1", "KEY": API_KEY}
    status = main(["connect", "http://127.0.0.1:9/mcp", *arguments], stderr=errors, environ=environ)
    assert (status, errors.getvalue().count("\n")) == (2, 1)
    assert said in errors.getvalue()
    assert API_KEY not in errors.getvalue()
    assert "UNSET_VARIABLE" not in errors.getvalue()


def documented() -> dict[str, dict[str, Any]]:
    """docs/clients.md's configuration of the shim for each host: the ```json blocks of its section, in order."""
    text = (MAIN / "docs/clients.md").read_text()
    section = text.split("\n## Claude Code and other stdio hosts\n")[1].split("\n## ")[0]
    blocks = re.findall(r"```json\n(.*?)```", section, re.S)
    return dict(zip(("Claude Code", "Claude Desktop", "VS Code"), map(json.loads, blocks), strict=True))


@pytest.mark.parametrize("host_name", ["Claude Code", "Claude Desktop", "VS Code"])
async def test_the_documented_configuration_runs_as_written(host: Host, host_name: str) -> None:
    """Each host's JSON as the doc prints it, the test's gateway and token file for the doc's URL and path: Claude
    Code's conversation continues across a restart; Claude Desktop's one shim keeps its connection's process; VS
    Code's calls reach the process of the conversation they name."""
    config = documented()[host_name]
    [entry] = config["mcpServers" if "mcpServers" in config else "servers"].values()
    assert entry.get("type", "stdio") == "stdio"
    swapped = {"https://mcp.example.com/mcp": host.url, "/home/you/.config/team-mcp/token": str(host.token_file)}
    arguments = [swapped.get(argument, argument) for argument in entry["args"]]
    command = shutil.which(entry["command"], path=str(Path(sys.executable).parent))  # where pip puts it
    assert command is not None
    if host_name == "Claude Code":
        async with host.shim("conv-documented", "legacy", command, *arguments) as claude_code:
            first = await seen(claude_code)
        async with host.shim("conv-documented", "auto", command, *arguments) as restarted:
            assert await seen(restarted) == (first[0], "2")
    elif host_name == "Claude Desktop":  # no id, one shim for the app's life: its connection's process
        async with host.shim(None, "legacy", command, *arguments) as desktop:
            assert (await seen(desktop))[0] == (await seen(desktop))[0]
    else:  # no id in the environment: each call names its chat's conversation
        async with host.shim(None, "auto", command, *arguments) as vscode:
            chat = cast(RequestParamsMeta, {"vscode.conversationId": "chat-1", "vscode.requestId": "request-1"})
            calls = [await vscode.call_tool("count", {}, meta=chat) for _ in range(2)]
            assert [text_of(call) for call in calls] == ["1", "2"]
    assert not any(host.token in output for output in host.stderr)


class Restartable:
    """``mcp-sessions gateway --stdio`` as its own process on one port, verifying the issuer's tokens for
    ``AUDIENCE``; :meth:`restart` ends it and starts it again on the same port, with the same secret."""

    def __init__(self, keys: str, files: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.environ = {"MCP_SESSIONS_SECRET": SECRET, **SERVER_PATH, "STDIO_TEST_FILES": str(files)}
        flags = ["--stdio", shlex.join(SERVER), "--pass-env", "PYTHONPATH", "--pass-env", "STDIO_TEST_FILES"]
        flags += ["--processes", "per-conversation"]
        flags += ["--warm", "0", "--process-containment", "none", "--auth-jwks", keys]
        flags += ["--auth-issuer", ISSUER, "--auth-audience", AUDIENCE, "--log-level", "warning"]
        self.command = [sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(self.port), *flags]
        self.process = self._started()

    def _started(self) -> Process:
        return Process("gateway", self.command, self.environ, self.port)

    def restart(self) -> None:
        """Kill it (nothing it held is answered: a crash, or a machine's restart), then start it again."""
        assert self.process.process is not None
        end_process(self.process.process, kill=True)
        self.process.stop()
        self.process = self._started()


@contextlib.contextmanager
def restartable(files: Path) -> Iterator[Restartable]:
    with jwks() as keys:
        gateway = Restartable(keys, files)
        try:
            yield gateway
        finally:
            gateway.process.stop()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_after_the_gateway_restarts_the_host_hears_it_once_then_has_a_new_session(
    tmp_path: Path, mode: Mode
) -> None:
    """86.3: after a restart every call answered ``-32600 Session not found`` (the 2025 transport session the shim
    held was gone) until the host restarted the shim. Now the shim opens a new transport session itself, and the
    conversation's session, gone with the gateway's processes, is the host's one ``-32043``, which says what
    happens next; the next call has a new session. A call the gateway's end cut off is answered with an error."""
    cut_off: list[str] = []

    async def held(client: Client) -> None:
        with pytest.raises(MCPError) as broke:
            await client.call_tool("hold", {})
        cut_off.append(broke.value.error.message)

    with restartable(tmp_path) as gateway:
        host = Host(gateway.url, tmp_path)
        async with host.shim(f"conv-restart-{mode}", mode) as client, anyio.create_task_group() as tasks:
            assert (await seen(client))[1] == "1"
            tasks.start_soon(held, client)
            await until_awaited(lambda: (tmp_path / "held").exists(), "the call to hold its process")
            gateway.restart()
            with pytest.raises(MCPError, match="the next request gets a new session") as lost:
                await client.call_tool("count", {})
            assert lost.value.error.code == -32043
            assert lost.value.error.data is None  # the shim's token is its own
            assert (await seen(client))[1] == "1"
            assert (await seen(client))[1] == "2"
            assert [tool.name for tool in (await client.list_tools()).tools]
    # Before its answer started (could not reach), or in its event stream (broke off): never the shim's end.
    assert len(cut_off) == 1, cut_off
    assert re.search(r"could not reach .*|answer broke off", cut_off[0]), cut_off
