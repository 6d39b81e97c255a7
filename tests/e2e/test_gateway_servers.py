"""``mcp-sessions gateway --config FILE``: many servers behind one gateway, from one file (issue 101, items 1 and 6).

The ``mcpServers`` JSON a team already holds (Claude Desktop's, Cursor's): two stdio servers from npm, each reached
at its own path by the ``mcp`` SDK's clients of both eras, each one's tools its own; a path no server is at is a
404 that names where they are. Then docs/gateway.md's team file of four servers, as written but for its paths, ports
and the GitHub server (the hostile server of ``_masked``, before a stand-in API with a certificate authority of its
own), as root: server-filesystem on the team's tree, server-memory on each user's own directory, the masked token,
and an upstream over HTTP with an audience of its own (server-everything); each user's conversations across them
listed and ended at the gateway's base URL, and the operator's view of them all. One gateway, as its own process, for
each file; and a third, of the tests' own server, whose file is reloaded on SIGHUP (a server added, one changed, one
removed, a fourth's conversation going on), then refused when bad or when its ``[gateway]`` table changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from _mcp import LegacyClient, ModernClient, jwt_claims, legacy_request
from _redis import free_port, missing
from _uids import members, uids
from _waits import WITHIN, until
from conftest import serve
from e2e import _sealed
from e2e._gateway import (
    CACHE,
    MAIN,
    SECRET,
    InProcess,
    Process,
    everything_server,
    for_every_uid,
    gateway_in_process,
    installed,
    legacy_initialize,
    main_run,
    node,
    python_every_uid_runs,
    readable_directory,
    result_of,
    started,
    upstream_server,
)
from e2e._issuer import ISSUER, jwks, signed
from e2e._masked import NAMES, stand_in
from e2e._stdio import FILESYSTEM, SERVER_PATH, filesystem, text_of
from e2e._stdio import SERVER as TESTS_SERVER

pytestmark = pytest.mark.anyio

MEMORY = CACHE / "memory/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
SECTION = "## Many servers from one file"
UIDS = uids(240, 36)  # the pool of the team file's three stdio servers
TEAM = int(uids(276, 1).partition("-")[0])  # the project tree's group: a gid no user has
TOKEN = "ghp_" + "Te4mT0kenValue" * 2 + "0123456789"  # a GitHub token's shape


@pytest.fixture(scope="module")
def two_stdio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InProcess | Process, Path]]:
    """The gateway of a ``mcpServers`` file: server-filesystem on a tree, server-memory with its file in ``env``;
    uncontained (``process-containment``, a key of the gateway's beside the host's), so that the tree under the
    tests' /tmp is the one it reads."""
    tree = tmp_path_factory.mktemp("tree")
    (tree / "known.txt").write_text("known", encoding="utf-8")
    memory = str(installed(MEMORY, "@modelcontextprotocol/server-memory"))
    command, *args = filesystem(tree)
    file = tree.parent / "mcp.json"
    servers = {
        "files": {"command": command, "args": args, "process-containment": "none"},
        "memory": {
            "command": node(),
            "args": [memory],
            "env": {"MEMORY_FILE_PATH": str(tree.parent / "memory.jsonl")},
            "process-containment": "none",
        },
    }
    file.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    # in process, from the same file (configured_file): these tests ask its paths' answers, not the process
    with gateway_in_process([], "--config", str(file)) as gateway:
        yield gateway, tree


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_each_server_of_an_mcpservers_file_is_at_its_path_with_its_own_tools(
    two_stdio: tuple[InProcess | Process, Path], mode: str
) -> None:
    """Each server of the file at ``/servers/NAME/mcp``, its tools its own: server-filesystem's reads the tree's
    file; server-memory's keeps an entity and reads it back (its file from the server's ``env``)."""
    gateway, tree = two_stdio
    async with Client(gateway.url("/servers/files/mcp"), mode=mode) as files:
        names = {tool.name for tool in (await files.list_tools()).tools}
        assert "read_text_file" in names
        assert "create_entities" not in names
        read = await files.call_tool("read_text_file", {"path": str(tree / "known.txt")})
        assert text_of(read) == "known"
    async with Client(gateway.url("/servers/memory/mcp"), mode=mode) as memory:
        names = {tool.name for tool in (await memory.list_tools()).tools}
        assert "create_entities" in names
        assert "read_text_file" not in names
        entity = {"name": f"kept-{mode}", "entityType": "test", "observations": ["seen"]}
        await memory.call_tool("create_entities", {"entities": [entity]})
        graph = text_of(await memory.call_tool("read_graph", {}))
        assert f"kept-{mode}" in graph
    assert f"kept-{mode}" in (tree.parent / "memory.jsonl").read_text(encoding="utf-8")


@pytest.mark.skipif(os.geteuid() != 0, reason="the gateway as root: what it refuses")
def test_a_pasted_mcpservers_file_as_root_never_runs_a_tool_as_root_on_the_host_s_network_unless_told(
    tmp_path: Path,
) -> None:
    """Issue 112 (3, finding 2): a ``mcpServers`` file as Claude's, its stdio server (the tests' own, whose ``whoami``
    says its uid), given no uids: as root the gateway refuses to start, in one line naming ``process-uids``, where it
    ran the tool as uid 0 on the host's network; told so (``--accept-root-processes``), it runs it as before."""
    file = tmp_path / "mcp.json"
    server = {"command": sys.executable, "args": TESTS_SERVER[1:], "env": SERVER_PATH}
    file.write_text(json.dumps({"mcpServers": {"tools": server}}), encoding="utf-8")
    line = [sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(free_port()), "--config", str(file)]
    environ = {**os.environ, "MCP_SESSIONS_SECRET": SECRET}
    refused = subprocess.run(line, capture_output=True, text=True, env=environ, timeout=WITHIN, check=False)
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.splitlines()) == 1 and "process-uids" in refused.stderr, refused.stderr
    assert "mcpServers.tools: --stdio: the gateway runs as root" in refused.stderr, refused.stderr
    told = gateway_in_process([], "--config", str(file), "--accept-root-processes")
    with told as gateway, httpx.Client(timeout=30) as http:
        tools = ModernClient(http, gateway.url(""), "/servers/tools/mcp")
        said = json.loads(text(tools.call_tool("whoami", session=tools.create_session())[1]))
    assert said["uid"] == 0


def test_a_path_no_server_is_at_is_a_404_naming_the_servers(two_stdio: tuple[InProcess | Process, Path]) -> None:
    gateway, _ = two_stdio
    for path in ("/mcp", "/servers/nope/mcp", "/servers", "/servers/files"):
        answer = httpx.post(gateway.url(path), json={}, timeout=10)
        assert answer.status_code == 404, path
        assert answer.json() == {"error": "no server here: this gateway serves /servers/files/mcp, /servers/memory/mcp"}


def team_file() -> str:
    """docs/gateway.md's team file, as written."""
    section = (MAIN / "docs" / "gateway.md").read_text(encoding="utf-8").partition(f"\n{SECTION}\n")[2]
    return section.partition("```toml\n")[2].partition("```")[0]


@dataclass(frozen=True)
class Team:
    """The team file's gateway, its base URL and status port, the project tree, and the stand-in API's TLS port."""

    gateway: Process
    base: str
    status: int
    project: Path
    secure: int

    def client(self, user: str, path: str, audience: str = "/", **headers: str) -> Any:
        """``user``'s client of the server at ``path``, her token for the gateway's audience (or ``audience``)."""
        claims = {"iss": ISSUER, "aud": self.base + audience, "sub": user, "exp": int(time.time()) + 600}
        http = httpx.Client(timeout=60, headers={"Authorization": f"Bearer {signed(claims)}", **headers})
        _sealed.OPEN.append(http)
        return ModernClient(http, self.base, path)

    def token(self, user: str) -> str:
        return signed({"iss": ISSUER, "aud": self.base + "/", "sub": user, "exp": int(time.time()) + 600})


@pytest.fixture(scope="module")
def team() -> Iterator[Team]:
    """The docs' team file, run as root, its paths and ports the test's: the project tree (its group's, setgid), the
    users' directories (root's, 0700), the npm servers where every uid reads them, the hostile server for GitHub's,
    the stand-in API for api.github.com (its port), server-everything for the wiki, the test's issuer."""
    _sealed.needs("root", "bwrap")
    if not Path("/usr/sbin/nft").exists() and not Path("/usr/bin/nft").exists():
        missing("nft is not installed (scripts/system-deps.sh)")
    installed(MEMORY, "@modelcontextprotocol/server-memory")
    with contextlib.ExitStack() as stack:
        project = stack.enter_context(readable_directory("mcp-sessions-project-"))
        os.chown(project, 0, TEAM)
        project.chmod(0o2770)
        users = stack.enter_context(readable_directory("mcp-sessions-users-"))
        users.chmod(0o700)
        files = stack.enter_context(for_every_uid(installed(FILESYSTEM, "server-filesystem"), CACHE / "filesystem"))
        memory = stack.enter_context(for_every_uid(MEMORY, CACHE / "memory"))
        api = stack.enter_context(stand_in())
        wiki = stack.enter_context(everything_server())
        keys = stack.enter_context(jwks())
        written = {
            "/srv/mcp/filesystem/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js": str(files),
            "/srv/mcp/memory/node_modules/@modelcontextprotocol/server-memory/dist/index.js": str(memory),
            "/srv/team/project": str(project),
            "/srv/team/users": str(users),
            "/usr/local/bin/github-mcp-server stdio": f"/usr/bin/python3 {api.server}",
            "api.github.com": f"{NAMES[0]}:{api.ports[0]}",
            "http://127.0.0.1:3001/mcp": wiki,
            "http://127.0.0.1:9000/jwks.json": keys,
            "http://127.0.0.1:9000": ISSUER,
            '"61000-61999"': f'"{UIDS}"',
        }
        status = free_port()
        file = api.server.parent / "team.toml"
        # the uids kept for its users (the project tree is granted rw): the test's alone, not the host's for good, where
        # each run's users (their audience has the run's port) would hold more of the range until none is free
        state = stack.enter_context(tempfile.TemporaryDirectory())

        def command(port: int) -> tuple[list[str], dict[str, str]]:
            text = team_file()
            for given, ours in {**written, "8000": str(port), "8001": str(status)}.items():
                assert given in text, given  # the docs still say it, as the test replaces it
                text = text.replace(given, ours)
            file.write_text(text, encoding="utf-8")
            line = [*api.prefix, sys.executable, "-m", "mcp_sessions", "gateway", "--config", str(file)]
            line += ["--process-state", state]
            return line, {"MCP_SESSIONS_SECRET": SECRET, "SSL_CERT_FILE": api.authority}

        gateway = started("mcp-sessions gateway --config team.toml", command)
        try:
            yield Team(gateway, f"http://127.0.0.1:{gateway.port}", status, project, api.ports[0])
        except BaseException:
            print(f"the gateway's log:\n{gateway.output()}")
            raise
        finally:
            if gateway.process is not None:  # its own stop, which ends its processes and removes its tables
                gateway.process.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    gateway.process.wait(timeout=WITHIN)
            gateway.stop()
            while _sealed.OPEN:
                _sealed.OPEN.pop().close()


def text(message: dict[str, Any]) -> str:
    assert "result" in message, message
    found: str = message["result"]["content"][0]["text"]
    return found


def test_the_docs_team_file_serves_four_servers_each_at_its_path(team: Team) -> None:
    """The tree one user's conversation writes, another's reads; a policy's denied tool neither listed nor called;
    each user's graph her own across her conversations; the GitHub token masked (the process holds a placeholder,
    the API gets the token); the wiki reached with a token of its own audience alone; each server's metadata names
    its own resource; and the startup lines name each server."""
    plan = str(team.project / "plan.md")
    alice, bob = team.client("alice", "/servers/files/mcp"), team.client("bob", "/servers/files/mcp")
    hers, his = alice.create_session(), bob.create_session()
    written = alice.call_tool("write_file", {"path": plan, "content": "launch on Friday\n"}, session=hers)[1]
    assert "Successfully wrote" in text(written)
    assert text(bob.call_tool("read_text_file", {"path": plan}, session=his)[1]) == "launch on Friday\n"
    assert os.stat(plan).st_gid == TEAM  # the team's, by its tree's setgid group
    listed = [tool["name"] for tool in alice.request("tools/list", session=hers)[1]["result"]["tools"]]
    assert "read_text_file" in listed
    assert "move_file" not in listed  # tool-deny = ["*:move_file"]
    moved = alice.call_tool("move_file", {"source": plan, "destination": plan + ".old"}, session=hers)[1]
    assert "error" in moved, moved
    assert os.path.exists(plan)

    alice, bob = team.client("alice", "/servers/memory/mcp"), team.client("bob", "/servers/memory/mcp")
    first, his = alice.create_session(), bob.create_session()
    entity = {"name": "launch", "entityType": "plan", "observations": ["on Monday"]}
    alice.call_tool("create_entities", {"entities": [entity]}, session=first)
    assert '"launch"' in text(alice.call_tool("read_graph", {}, session=alice.create_session())[1])
    assert '"launch"' not in text(bob.call_tool("read_graph", {}, session=his)[1])

    github = team.client("alice", "/servers/github/mcp", **{"X-GitHub-Token": TOKEN})
    hers = github.create_session()
    placeholder = text(github.call_tool("env", {"variable": "GITHUB_PERSONAL_ACCESS_TOKEN"}, session=hers)[1])
    assert (placeholder != TOKEN, len(placeholder)) == (True, len(TOKEN))
    url = f"https://{NAMES[0]}:{team.secure}/"
    done = json.loads(
        text(
            github.call_tool(
                "run", {"argv": ["curl", "-sS", "-H", f"Authorization: Bearer {placeholder}", url]}, session=hers
            )[1]
        )
    )
    assert done["status"] == 0, done
    answer = json.loads(done["out"])
    # the API got the value (its digest says so); its echo reaches the process scrubbed, as the placeholder
    assert answer["sha256"]["authorization"] == hashlib.sha256(f"Bearer {TOKEN}".encode()).hexdigest()
    echoed = {name.lower(): value for name, value in answer["headers"].items()}
    assert echoed["authorization"] == f"Bearer {placeholder}"
    uid = int(json.loads(text(github.call_tool("run", {"argv": ["id", "-u"]}, session=hers)[1]))["out"])
    assert uid in members(UIDS), uid  # the gateway's pool, whichever server's

    for audience, answered in (("/", 401), ("/wiki/mcp", 200)):
        claims = {"iss": ISSUER, "aud": team.base + audience, "sub": "alice", "exp": int(time.time()) + 600}
        http = httpx.Client(timeout=60, headers={"Authorization": f"Bearer {signed(claims)}"})
        _sealed.OPEN.append(http)
        wiki = LegacyClient(http, team.base, "/wiki/mcp")
        if answered == 401:
            refused = http.post(wiki.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert refused.status_code == 401, refused.text
            continue
        wiki.initialize()
        assert text(wiki.call_tool("echo", {"message": "hello"})[1]) == "Echo: hello"

    for path in ("/servers/memory/mcp", "/wiki/mcp"):
        metadata = httpx.get(f"{team.base}/.well-known/oauth-protected-resource{path}", timeout=30).json()
        assert metadata["resource"] == team.base + path
    said = team.gateway.log().decode(errors="replace")
    for name in ("files", "memory", "github"):
        assert re.search(rf"{name}: each process: containment bwrap \(auto\), a uid each", said), said[:3000]
    # each process's lines, and the gateway's of each server, name their server
    assert re.search(r"^\S+ INFO: memory: process [0-9a-f]+: Knowledge Graph MCP Server running on stdio$", said, re.M)
    assert re.search(r"^\S+ INFO: files: shared: Secure MCP Filesystem Server running on stdio$", said, re.M)
    assert re.search(r"^\S+ INFO: files: mcp-sessions gateway: refused to alice: Tool 'move_file'", said, re.M)
    # the host's half shared by the three stdio servers' processes (cgroup v1: each server's together)
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    together = re.findall(r"; (\d+) MiB together\)", said)
    assert together in ([], [str(host // 2 // 3 >> 20)] * 3), together
    assert "github: stdio /usr/bin/python3 " in said


def test_a_user_s_conversations_across_the_servers_are_listed_and_ended_at_the_base_url(team: Team) -> None:
    """``GET /sessions`` (what ``mcp-sessions sessions BASE`` asks): hers of every stdio server, each with its
    ``server``, none of bob's; ``DELETE /sessions/DIGEST`` ends hers wherever it is; the operator's view on the
    status port is every server's."""
    files, memory = team.client("carol", "/servers/files/mcp"), team.client("carol", "/servers/memory/mcp")
    one, other = files.create_session(), memory.create_session()
    assert "launch" not in text(files.call_tool("list_allowed_directories", {}, session=one)[1])
    memory.call_tool("read_graph", {}, session=other)
    team.client("dave", "/servers/files/mcp").create_session()
    headers = {"Authorization": f"Bearer {team.token('carol')}"}
    listed = httpx.get(f"{team.base}/sessions", headers=headers, timeout=30)
    assert listed.status_code == 200, listed.text
    servers = sorted(each["server"] for each in listed.json()["conversations"])
    assert servers == ["files", "memory"], listed.json()
    [memory_one] = [each for each in listed.json()["conversations"] if each["server"] == "memory"]
    digest = memory_one["conversation"]
    ended = httpx.delete(f"{team.base}/sessions/{digest}", headers=headers, timeout=30)
    assert (ended.status_code, ended.json()) == (200, {"ended": digest, "server": "memory"})
    after = memory.call_tool("read_graph", {}, session=other)[1]
    assert "error" in after, after
    again = httpx.delete(f"{team.base}/sessions/{digest}", headers=headers, timeout=30)
    assert again.status_code == 404, again.text
    assert httpx.get(f"{team.base}/sessions", timeout=30).status_code == 401  # no token

    shown = main_run("sessions", team.base, "--bearer-env", "TOKEN", environ={"TOKEN": team.token("carol")})
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^SERVER +CONVERSATION +KIND", shown.stdout, re.M), shown.stdout
    assert re.search(r"^files +\S+ +data-layer-session ", shown.stdout, re.M), shown.stdout
    operator = main_run("gateway", "status", f"http://127.0.0.1:{team.status}")
    assert operator.returncode == 0, operator.stderr
    assert re.search(r"^github +shared ", operator.stdout, re.M), operator.stdout
    for user in ("carol", "dave"):  # each user's count is one server's, and says whose (issue 112, 5)
        assert re.search(rf"^  {user} on files: 1 of \d+ \(", operator.stdout, re.M), operator.stdout
    status = httpx.get(f"http://127.0.0.1:{team.status}/status", timeout=30).json()
    assert {each["server"] for each in status["processes"]} == {"files", "memory", "github"}
    assert set(status["servers"]) == {"files", "memory", "github"}
    assert status["total"]["processes"] == sum(each["total"]["processes"] for each in status["servers"].values())


def test_a_user_ends_her_conversation_of_one_server_through_another_server_s_url(team: Team) -> None:
    """Issue 112 (6): ``mcp-sessions sessions URL --end DIGEST``, URL a server's, ended only that server's
    conversations (404 for the one of another server that the gateway's listing showed her); now hers wherever it
    is, and never another user's."""
    memory = team.client("erin", "/servers/memory/mcp")
    session = memory.create_session()
    memory.call_tool("read_graph", {}, session=session)
    erin, frank = ({"TOKEN": team.token(user)} for user in ("erin", "frank"))
    listed = main_run("sessions", team.base, "--bearer-env", "TOKEN", "--json", environ=erin)
    [digest] = [each["conversation"] for each in json.loads(listed.stdout)["conversations"]]
    files = f"{team.base}/servers/files/mcp"
    refused = main_run("sessions", files, "--bearer-env", "TOKEN", "--end", digest, environ=frank)
    assert refused.returncode == 1, refused.stdout  # not his
    assert "error" not in memory.call_tool("read_graph", {}, session=session)[1]
    ended = main_run("sessions", files, "--bearer-env", "TOKEN", "--end", digest, environ=erin)
    assert (ended.returncode, ended.stdout) == (0, f"ended {digest}\n"), ended.stderr
    assert "error" in memory.call_tool("read_graph", {}, session=session)[1]


def reload_file(servers: dict[str, str], gateway: str = "", files: Path = Path("/nowhere")) -> str:
    """A file of the tests' stdio server, each of ``servers`` with its own extra key lines, uncontained, none
    started ahead, a process per conversation, its files in ``files``; ``gateway``: the ``[gateway]`` table's
    lines."""
    tables = [f"[gateway]\nshutdown-timeout = 3\n{gateway}"]
    given = {"PYTHONPATH": SERVER_PATH["PYTHONPATH"], "STDIO_TEST_FILES": str(files)}
    env = "{ " + ", ".join(f"{name} = {json.dumps(value)}" for name, value in given.items()) + " }"
    for name, extra in servers.items():
        tables.append(
            f'[servers.{name}]\nstdio = {json.dumps(shlex.join(TESTS_SERVER))}\nprocess-containment = "none"\n'
            f'processes = "per-conversation"\nwarm = 0\nenv = {env}\n{extra}'
        )
    return "\n".join(tables)


def test_opens_at_once_past_each_servers_limit_are_refused_naming_it_and_the_status_counts_each_server(
    tmp_path: Path,
) -> None:
    """Issue 112 (4): a gateway of two servers, each with its own ``max-processes`` (2 and 3), ten conversations
    opened at once at each: up to its limit each gets a process, every other the documented ``-32011`` naming the
    limit, its key and its value (never ``-32603``); the operator's status counts each server's processes against
    that server's own limit (not against their sum: "of 5")."""
    path = tmp_path / "status.sock"
    limits = {"a": 2, "b": 3}
    servers = {name: f"max-processes = {most}\n" for name, most in limits.items()}
    file = tmp_path / "servers.toml"
    file.write_text(reload_file(servers, f"status-socket = {json.dumps(str(path))}\n", tmp_path), encoding="utf-8")

    def command_line(port: int) -> tuple[list[str], dict[str, str]]:
        line = ["-m", "mcp_sessions", "gateway", "--config", str(file), "--port", str(port)]
        return [sys.executable, *line], {"MCP_SESSIONS_SECRET": SECRET}

    gateway = started("mcp-sessions gateway --config servers.toml", command_line)
    try:
        with httpx.Client(timeout=30) as http, ThreadPoolExecutor(20) as pool:

            def opened(name: str) -> dict[str, Any]:
                url = gateway.url(f"/servers/{name}/mcp")
                call = legacy_request("tools/call", {"name": "count", "arguments": {}}, id=3)
                return result_of(http.post(url, json=call, headers=legacy_initialize(http, url)), 3)

            names = [name for name in limits for _ in range(10)]
            answers = dict(zip(range(len(names)), pool.map(opened, names), strict=True))
            seen = json.loads(main_run("gateway", "status", "--status-socket", str(path), "--json").stdout)
            shown = main_run("gateway", "status", "--status-socket", str(path)).stdout
    finally:
        gateway.stop()
    for name, most in limits.items():
        mine = [answers[index] for index, each in enumerate(names) if each == name]
        assert sum("result" in answer for answer in mine) == most, mine
        said = f"(the limit max_processes: --max-processes {most}, key max-processes = {most})"
        refusals = [answer["error"] for answer in mine if "error" in answer]
        assert all(error["code"] == -32011 and said in error["message"] for error in refusals), refusals
        assert seen["servers"][name]["total"] == {"processes": most, "limit": most}, seen
        assert f"processes on {name}: {most} of {most} (--max-processes)" in shown, shown
    assert seen["total"] == {"processes": 5}, seen  # each limit is its server's: no sum bounds anything
    assert " of 5 " not in shown, shown


@pytest.fixture(scope="module")
def reloading(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Process, Path]]:
    """A gateway of three servers of the tests' own (a, b and d), whose file a test writes again and SIGHUPs."""
    file = tmp_path_factory.mktemp("reload") / "servers.toml"
    file.write_text(reload_file({"a": "", "b": "", "d": ""}, files=file.parent), encoding="utf-8")
    with reload_gateway(file) as gateway:
        yield gateway, file


@contextlib.contextmanager
def reload_gateway(file: Path) -> Iterator[Process]:
    """The gateway of ``file``, which a test writes again and SIGHUPs, logging at info (its log printed beside a
    failure)."""

    def command_line(port: int) -> tuple[list[str], dict[str, str]]:
        line = ["-m", "mcp_sessions", "gateway", "--config", str(file), "--port", str(port), "--log-level", "info"]
        return [sys.executable, *line], {"MCP_SESSIONS_SECRET": SECRET}

    gateway = started("mcp-sessions gateway --config servers.toml", command_line)
    try:
        yield gateway
    except BaseException:
        print(f"the gateway's log:\n{gateway.output()}")
        raise
    finally:
        gateway.stop()


def hangup(gateway: Process, said: str) -> list[str]:
    """SIGHUP, and the gateway's lines from then until one that holds ``said``."""
    assert gateway.process is not None
    before = len(gateway.log())
    gateway.process.send_signal(signal.SIGHUP)
    until(lambda: said in gateway.log()[before:].decode(errors="replace"), f"a line that says {said!r}")
    return gateway.log()[before:].decode(errors="replace").splitlines()


def test_a_reload_adds_changes_and_removes_servers_and_the_others_conversations_go_on(
    reloading: tuple[Process, Path],
) -> None:
    """SIGHUP with a file that adds c, changes b and removes d: a's conversation keeps its process (its pid, its
    count); b is drained as a stop drains the gateway (a request meanwhile 503 with Retry-After, its call in flight
    past the bound told it may have run, ``-32603``), its conversation then ended (``-32043``, as after a restart),
    and b serves new ones; c is served at its path; d's path is no server's. A bad file then changes nothing, said
    in one line (one whose server is under another's path, naming both); a change of the gateway's own table is
    refused, naming its key."""
    gateway, file = reloading
    http = httpx.Client(timeout=30)
    _sealed.OPEN.append(http)
    a, b = ModernClient(http, gateway.url(""), "/servers/a/mcp"), ModernClient(http, gateway.url(""), "/servers/b/mcp")
    kept, told = a.create_session(), b.create_session()
    pid = json.loads(text(a.call_tool("whoami", session=kept)[1]))["pid"]
    assert text(a.call_tool("count", session=kept)[1]) == "1"
    assert text(b.call_tool("count", session=told)[1]) == "1"
    held: list[dict[str, Any]] = []
    holding = threading.Thread(target=lambda: held.append(b.call_tool("hold", session=told)[1]))
    holding.start()
    until(lambda: (file.parent / "held").exists(), "b's call to reach its process")

    file.write_text(reload_file({"a": "", "b": "process-idle = 120\n", "c": ""}, files=file.parent), "utf-8")
    since = len(gateway.log())
    hangup(gateway, "reload: draining b, d")
    refused = httpx.post(b.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=30)
    assert (refused.status_code, refused.headers.get("retry-after")) == (503, "1"), refused.text
    # the second reload waits for the first, whose line may come before this SIGHUP: every line since the first
    hangup(gateway, "reloaded")
    lines = gateway.log()[since:].decode(errors="replace").splitlines()
    holding.join(timeout=WITHIN)
    assert held and held[0]["error"]["code"] == -32603 and held[0]["error"]["data"]["mayHaveRun"], held
    assert any("added c; changed b; removed d; the others went on" in line for line in lines), lines
    assert json.loads(text(a.call_tool("whoami", session=kept)[1]))["pid"] == pid
    assert text(a.call_tool("count", session=kept)[1]) == "2"
    ended = b.call_tool("count", session=told)[1]
    assert ended["error"]["code"] == -32043 and "Session not found" in ended["error"]["message"], ended
    assert text(b.call_tool("count", session=b.create_session())[1]) == "1"
    c = ModernClient(http, gateway.url(""), "/servers/c/mcp")
    assert text(c.call_tool("count", session=c.create_session())[1]) == "1"
    assert httpx.post(gateway.url("/servers/d/mcp"), json={}, timeout=10).status_code == 404

    for written, said in (
        ("[servers.a]\nstdio = 1 2\n", "not TOML"),
        (reload_file({"a": "", "c": ""}, gateway="port = 1\n"), "gateway.port: the gateway's own key"),
        (reload_file({"a": "process-memroy = 1\n", "c": ""}), "servers.a.process-memroy: unknown key"),
        (  # b's requests would be a's (issue 110)
            reload_file({"a": "", "c": 'path = "/servers/a/mcp/sessions"\n'}),
            "servers.c.path: /servers/a/mcp/sessions is under servers.a's /servers/a/mcp",
        ),
    ):
        file.write_text(written, encoding="utf-8")
        lines = hangup(gateway, "reload refused, nothing changed")
        refusals = [line for line in lines if "reload" in line]
        assert len(refusals) == 1 and said in refusals[0], lines
    assert text(a.call_tool("count", session=kept)[1]) == "3"
    assert json.loads(text(a.call_tool("whoami", session=kept)[1]))["pid"] == pid
    assert text(b.call_tool("count", session=b.create_session())[1]) == "1"  # b and c still served
    assert text(c.call_tool("count", session=c.create_session())[1]) == "1"


POOL = uids(288, 4)  # the pool of the reload tests' gateway: two servers' conversations and shared processes


def pooled_file(directory: Path, servers: dict[str, str]) -> str:
    """``reload_file``'s of ``servers``, each process a uid of :data:`POOL` of its own, contained (bubblewrap), with a
    network of its own, run by an interpreter every uid may."""
    sealed = 'process-containment = "bwrap"\nprocess-network = "none"\n'
    text = reload_file({name: "" for name in servers}, f"process-uids = {json.dumps(POOL)}\n", directory)
    for name, extra in servers.items():
        text = text.replace(f"[servers.{name}]\n", f"[servers.{name}]\n{sealed}{extra}")
    command = json.dumps(shlex.join([python_every_uid_runs(), *TESTS_SERVER[1:]]))
    return text.replace('process-containment = "none"\n', "").replace(json.dumps(shlex.join(TESTS_SERVER)), command)


@contextlib.contextmanager
def pooled(directory: Path, servers: dict[str, str]) -> Iterator[tuple[Process, Path]]:
    """A gateway (as root) of :func:`pooled_file`'s ``servers``, whose file, in ``directory``, a test writes again and
    SIGHUPs."""
    file = directory / "servers.toml"
    file.write_text(pooled_file(directory, servers), encoding="utf-8")
    with reload_gateway(file) as gateway:
        yield gateway, file


def reloaded(gateway: Process, meanwhile: Callable[[], object] = lambda: None) -> list[str]:
    """SIGHUP, ``meanwhile()``, and the gateway's lines until the reload's last: ``reloaded``, or ``reload
    refused``."""
    assert gateway.process is not None
    before = len(gateway.log())
    gateway.process.send_signal(signal.SIGHUP)
    meanwhile()

    def said() -> list[str]:
        lines = gateway.log()[before:].decode(errors="replace").splitlines()
        return lines if any("reloaded" in line or "reload refused" in line for line in lines) else []

    return until(said, "the reload's last line")


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid per process: the gateway runs as root")
def test_a_reload_adds_a_stdio_server_whose_uids_come_from_the_gateway_s_one_pool(tmp_path: Path) -> None:
    """Issue 112 (5): a gateway of one stdio server given four uids; a reload adds a second (refused while the range
    was divided at the start: ``no part of 4 uids is free``), whose tool runs as a uid of the pool, not the one a's
    conversation, its process running on, holds."""
    with pooled(tmp_path, {"a": ""}) as (gateway, file):
        http = httpx.Client(timeout=30)
        _sealed.OPEN.append(http)
        a = ModernClient(http, gateway.url(""), "/servers/a/mcp")
        kept = a.create_session()
        first = json.loads(text(a.call_tool("whoami", session=kept)[1]))
        file.write_text(pooled_file(tmp_path, {"a": "", "b": ""}), encoding="utf-8")
        lines = reloaded(gateway)
        assert any("added b; changed none; removed none" in line for line in lines), lines
        b = ModernClient(http, gateway.url(""), "/servers/b/mcp")
        second = json.loads(text(b.call_tool("whoami", session=b.create_session())[1]))
        again = json.loads(text(a.call_tool("whoami", session=kept)[1]))
    assert again["pid"] == first["pid"]  # a's process ran on meanwhile
    assert first["uid"] != second["uid"] and {first["uid"], second["uid"]} <= set(members(POOL)), (first, second)


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid per process: the gateway runs as root")
def test_an_unchanged_server_answers_while_a_reload_checks_a_new_one(tmp_path: Path) -> None:
    """Issue 112 (5): a reload's blocking work runs off the event loop. The server it adds is a FIFO, which the
    reload's check of the command's interpreter (its ``#!`` line, read as the processes' uid would search it) holds
    open until the test writes it: meanwhile a's conversation is answered, each call (on the loop, none was: each
    waited for the reload)."""
    with contextlib.ExitStack() as stack:
        fifo = stack.enter_context(readable_directory("mcp-sessions-fifo-")) / "server"
        os.mkfifo(fifo)
        os.chmod(fifo, 0o755)
        gateway, file = stack.enter_context(pooled(tmp_path, {"a": ""}))
        http = httpx.Client(timeout=10)
        _sealed.OPEN.append(http)
        a = ModernClient(http, gateway.url(""), "/servers/a/mcp")
        kept = a.create_session()
        assert text(a.call_tool("count", session=kept)[1]) == "1"
        fifo_table = f'[servers.c]\nstdio = {json.dumps(str(fifo))}\nprocess-containment = "bwrap"\nwarm = 0\n'
        file.write_text(f"{pooled_file(tmp_path, {'a': ''})}\n{fifo_table}", encoding="utf-8")
        answered: list[str] = []

        def during() -> None:
            # the reload holds the FIFO open (a writer may open it only then)
            opened = lambda: os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # noqa: E731
            writer = until(opened, "the reload to open c's command", ignoring=(OSError,))
            try:
                for _ in range(3):
                    try:
                        answered.append(text(a.call_tool("count", session=kept)[1]))
                    except httpx.TimeoutException:
                        break
            finally:
                os.write(writer, b"#!/bin/sh\n")
                os.close(writer)

        reloaded(gateway, during)
    assert answered == ["2", "3", "4"]


@pytest.fixture(scope="module")
def apart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess | Process]:
    """Two servers of the tests' own, tally and memory, each a process per conversation whose state is on disk: a
    conversation a server has no process for gets a new one (as after a restart), where the red team's session of
    one server was taken for the other's."""
    file = tmp_path_factory.mktemp("apart") / "servers.toml"
    disk = 'conversation-state = "disk"\n'
    file.write_text(reload_file({"tally": disk, "memory": disk}, files=file.parent), encoding="utf-8")
    with gateway_in_process([], "--config", str(file)) as gateway:
        yield gateway


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
def test_a_session_made_at_one_server_is_refused_at_another(apart: InProcess | Process, era: str) -> None:
    """Issue 110: a data-layer session made at tally was served at memory, its token naming ``/mcp`` (the path
    tally's app saw) as every server's did. Now its token names tally's own path, and memory answers it as unknown
    (``-32043``), in either era, while tally goes on with it. A host's conversation id, and in 2025-11-25 tally's
    transport session, reach none of tally's conversations at memory: each server's are its own."""
    http = httpx.Client(timeout=30)
    _sealed.OPEN.append(http)
    kind = ModernClient if era == "2026-07-28" else LegacyClient
    tally, memory = (kind(http, apart.url(""), f"/servers/{name}/mcp") for name in ("tally", "memory"))
    for each in (tally, memory):
        if isinstance(each, LegacyClient):
            each.initialize()
    session = tally.create_session()
    assert jwt_claims(session["sessionId"])["mep"] == "/servers/tally/mcp"
    assert text(tally.call_tool("count", session=session)[1]) == "1"
    refused = memory.call_tool("count", session=session)[1]
    assert refused["error"]["code"] == -32043, refused
    assert text(tally.call_tool("count", session=session)[1]) == "2"

    # goose's header; in 2025-11-25, with tally's transport session
    host: dict[str, Any] = {"agent_session_id": f"conversation-{era}"}
    assert [text(tally.call_tool("count", id=id, **host)[1]) for id in (2, 3)] == ["1", "2"]
    assert text(memory.call_tool("count", id=4, **host)[1]) == "1"  # memory's own
    if isinstance(tally, LegacyClient) and isinstance(memory, LegacyClient):
        # signed for tally's path: memory, which opens again only the ids signed for its own, does not know it
        memory.transport_session_id = tally.transport_session_id
        foreign = memory.post(legacy_request("tools/call", {"name": "count", "arguments": {}}, id=5), **host)
        assert foreign.status_code == 404, foreign.text


@pytest.mark.parametrize("audience", [None, "https://mcp.example/"])
def test_a_session_made_at_one_http_server_is_refused_at_another(audience: str | None) -> None:
    """The same of two HTTP servers of a file, one upstream behind both (each its own path, the upstream's ``/mcp``
    for either): a session made at one names that one's path, and the other answers it as unknown (``-32043``),
    whatever the sessions' audience (one of the deployment's own binds no session to its endpoint elsewhere: here
    the servers share it); the upstream gets its own path."""
    environ = {} if audience is None else {"MCP_SESSIONS_AUDIENCE": audience}
    upstream = upstream_server("upstream").streamable_http_app(stateless_http=True, json_response=True)
    with tempfile.TemporaryDirectory() as files, serve(upstream) as url:
        file = Path(files) / "servers.toml"
        file.write_text(f'[servers.one]\nurl = "{url}/mcp"\n[servers.two]\nurl = "{url}/mcp"\n', encoding="utf-8")
        with (
            gateway_in_process([], "--config", str(file), environ=environ) as gateway,
            httpx.Client(timeout=30) as http,
        ):
            one, two = (ModernClient(http, gateway.url(""), f"/servers/{name}/mcp") for name in ("one", "two"))
            session = one.create_session()
            assert jwt_claims(session["sessionId"])["mep"] == "/servers/one/mcp"
            assert text(one.call_tool("echo", {"message": "hi"}, session=session)[1]) == "hi"
            refused = two.call_tool("echo", {"message": "hi"}, session=session)[1]
            assert refused["error"]["code"] == -32043, refused
