"""docs/gateway.md's team, grants and replicas recipes, run as written, one after another as a person runs them: the
```` ```sh ```` blocks of their sections, in order, by one bash, in a copy of the repository (they install
``'.[…]'`` from a clone) with a fresh virtual environment first on ``PATH`` and nothing of the tests' own environment
(no ``PYTHONPATH``, no ``MCP_SESSIONS_*``).

Whatever commands the blocks hold are run, and nothing between them: each block waits itself for the servers it
started in the background, as a person would (issue 112: the team recipe's first call, right after its gateway's
start, met ``ConnectError``). The test adds only its own checks: that a recipe's gateways are gone once it ends
(each stops what it started: one left running took the next recipe's calls on its port), and the Redis the
replicas recipe says it needs. The recipes'
own ports (8000, 8001, 8101, 8102, 9000) and Redis's (6379) are used as written. The
``claude mcp add`` line the team recipe prints as text (``claude`` is not installed) runs last, against a stand-in
that says whether its server is the one the recipe's ``.mcp.json`` names. The MCP Inspector the team recipe runs
with ``npx`` is the pinned one ``scripts/system-deps.sh`` installs (a ``node_modules`` beside the recipe, where
``npx`` looks first), so it runs without the network.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from _redis import redis_server_binary
from e2e._dns import elsewhere, resolver
from e2e._gateway import CACHE, MAIN, installed, python_every_uid_runs, readable_directory

PAGE = MAIN / "docs" / "gateway.md"
TEAM = "## One gateway for a team"
REPLICAS = "### Past one machine: a front and stdio replicas"
GRANTS = "### Files the team keeps: granted directories"
INSPECTOR = CACHE / "inspector" / "node_modules"
# pip, a wheel built from the copy, the gateways' starts and the Inspector: 90 s alone, 260 s on a busy 2-core machine.
WITHIN = 900
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
_HEADING = re.compile(r"^#{1,6} ", re.M)
_SKIPPED = shutil.ignore_patterns(
    ".git", ".venv*", ".cache", "node_modules", "__pycache__", ".*_cache", "site", "dist", "build"
)
WAITING = """\
listening() {  # the test's: wait for the Redis it started (at most 300 s a port)
    for port in "$@"; do
        tries=1500
        until (: > "/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
            tries=$((tries - 1))
            [ "$tries" -gt 0 ] || { echo "nothing listens on $port"; exit 1; }
            sleep 0.2
        done
    done
}
free() {  # the test's: once a recipe has ended, nothing of it listens on its ports
    for port in "$@"; do
        if (: > "/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "still listening on $port"; fi
    done
}
trap 'kill -TERM 0' EXIT  # the test's: at the end, every process the recipe started (each its own process group)
"""
CLAUDE = """\
claude() {  # the test's Claude Code: `claude mcp add --scope project NAME -- COMMAND ARGS...`, held against .mcp.json
    if [ "$1 $2 $3 $4 $6" != "mcp add --scope project --" ]; then
        echo "claude: not mcp add --scope project NAME --"; return
    fi
    python -c 'import json, sys
[name, *command] = sys.argv[1:]
entry = json.load(open(".mcp.json"))["mcpServers"][name]
print("claude mcp add:", "as .mcp.json" if [entry["command"], *entry["args"]] == command else "not as .mcp.json")
' "$5" "${@:7}"
}
"""

NPM = f"""\
npm() {{  # the test's: `npm install --prefix DIR PACKAGE@VERSION`, from what scripts/system-deps.sh installed
    [ "$1 $2" = "install --prefix" ] || {{ echo "npm: not install --prefix"; return 1; }}
    name=${{4#@modelcontextprotocol/server-}}
    mkdir -p "$3" && cp -r "{CACHE}/${{name%%@*}}/node_modules" "$3/"
}}
"""

WIKI = "10.20.30.40"
"""The team recipe's wiki (``--process-allow-net 10.20.30.40:443``)."""


def sh_blocks(heading: str, language: str = "sh") -> list[str]:
    """The ```` ```sh ```` blocks (or ``language``'s) of the section ``heading`` opens, up to the next heading
    (outside code blocks)."""
    text = PAGE.read_text(encoding="utf-8")
    position = text.index(f"\n{heading}\n") + len(heading) + 2
    blocks = []
    while (fence := _FENCE.search(text, position)) is not None:
        heading_next = _HEADING.search(text, position)
        if heading_next is not None and heading_next.start() < fence.start():
            break
        if fence.group(1) == language:
            blocks.append(fence.group(2))
        position = fence.end()
    assert blocks, f"no {language} block under {heading!r}"
    return blocks


@pytest.fixture
def readable() -> Iterator[Path]:
    """A directory every user may read: the team recipe's processes run as uids of their own (``--process-uids``),
    which read its ``whose.py`` and its virtual environment (pytest's ``tmp_path`` is its user's alone), and in a
    /tmp of their own (``--process-containment bwrap``), which does not hold them."""
    with readable_directory("mcp-sessions-recipe-") as directory:
        yield directory


def run_recipe(script: str, tmp_path: Path, prefix: tuple[str, ...] = ()) -> str:
    """``script`` by bash in a copy of the repository, a fresh virtual environment first on PATH, after ``prefix``
    (a command that runs the next): its output."""
    clone = tmp_path / "clone"
    shutil.copytree(MAIN, clone, ignore=_SKIPPED)
    (clone / "node_modules").symlink_to(installed(INSPECTOR, "@modelcontextprotocol/inspector"))
    subprocess.run([python_every_uid_runs(), "-m", "venv", tmp_path / "venv"], check=True, timeout=WITHIN)
    skipped = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
    environ = {k: v for k, v in os.environ.items() if k not in skipped and not k.startswith("MCP_SESSIONS_")}
    environ["PATH"] = f"{tmp_path / 'venv' / 'bin'}{os.pathsep}{environ['PATH']}"
    environ["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    recipe = subprocess.Popen(
        [*prefix, "bash", "-c", WAITING + script],
        cwd=clone,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its process group: whatever it left running is ended with it
    )
    try:
        output, _ = recipe.communicate(timeout=WITHIN)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(recipe.pid, signal.SIGTERM)
        recipe.wait()
    return output


@pytest.mark.timeout(WITHIN + 60)
def test_the_team_grants_and_replicas_recipes_run_as_written_one_after_another(readable: Path) -> None:
    """The team recipe, where ``wiki.internal`` is ``10.20.30.40``, port 443 (a network namespace of the test's own
    holds it), by a stand-in resolver that asks the host's own for the package index's names; then the grants
    recipe (server-filesystem on the team's tree, server-memory on each user's own directory), then the replicas
    recipe, in the same shell and directory, as the docs chain them. Issue 100 (10): the grants recipe, run as
    written, reached the team's gateway, still on its port ("its gateway stopped" was said, not done)."""
    installed(CACHE / "filesystem" / "node_modules", "@modelcontextprotocol/server-filesystem")
    installed(CACHE / "memory" / "node_modules", "@modelcontextprotocol/server-memory")
    [claude_mcp_add] = [block for block in sh_blocks(TEAM, "text") if block.startswith("claude mcp add")]
    redis = f"{redis_server_binary()} --port 6379 --bind 127.0.0.1 --save '' --appendonly no &\nlistening 6379\n"
    script = NPM + "".join(sh_blocks(TEAM)) + "free 8000 8001\n" + CLAUDE + claude_mcp_add
    script += "echo '--- grants'\n" + "".join(sh_blocks(GRANTS)) + "free 8000\n"
    script += "echo '--- replicas'\n" + redis + "".join(sh_blocks(REPLICAS))
    script += "free 8000 8101 8102\n"
    with elsewhere(address=WIKI, port=443), resolver({"wiki.internal": WIKI}, forward=True) as prefix:
        output = run_recipe(script, readable, prefix)
    team, _, rest = output.partition("--- grants\n")
    grants, _, replicas = rest.partition("--- replicas\n")

    assert "still listening" not in output, output  # each recipe stopped what it started
    keys = readable / "clone"  # the stand-in's key and the users' tokens: this user's alone
    assert {name: (keys / name).stat().st_mode & 0o777 for name in ("idp-key.pem", "alice.jwt", "bob.jwt")} == {
        "idp-key.pem": 0o600,
        "alice.jwt": 0o600,
        "bob.jwt": 0o600,
    }
    assert re.search(r'"GET /alice\.jwt HTTP/1\.1" 404', team), team  # its JWKS alone
    metadata = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"
    assert f'www-authenticate: Bearer resource_metadata="{metadata}"' in team, team  # no token: no error
    assert '"authorization_servers":["http://127.0.0.1:9000/"]' in team, team
    texts = re.findall(r'"text": "([^"]*)"', team)
    assert texts == ["0001", "0002", "reached", "0001"], team  # alice's token, bob's; the wiki; Claude Code's
    assert "Session not found" in team, team  # bob's token, alice's session
    expired = 'error="invalid_token", error_description="the token has expired (exp)"'
    assert f"HTTP/1.1 401 Unauthorized\nwww-authenticate: Bearer {expired}" in team, team
    assert 'claude code: [{"text": "0001", "type": "text"}]' in team, team  # the shim, as Claude Code runs it
    assert "claude mcp add: as .mcp.json" in team, team
    status = team[team.index("KIND                PRINCIPAL") :]  # the operator's status
    assert re.search(r"^data-layer-session +alice ", status, re.M), status
    assert re.search(r"^shared +- ", status, re.M), status
    assert re.search(r"^processes: \d+ of 32 \(--max-processes\)$", status, re.M), status
    assert "transport-session" not in status, status  # a 2025 connection naming a session costs no process
    assert "keys: 1 from http://127.0.0.1:9000/jwks.json, fetched" in status, status

    assert re.search(r'^alice write_file "Successfully wrote to .*/project/plan\.md"$', grants, re.M), grants
    assert re.search(r"^bob edit_file .*-launch on Friday.*\+launch on Monday", grants, re.M), grants
    assert 'alice read_text_file "launch on Monday\\n"' in grants, grants
    assert re.search(r"^60900 660 .*/project/plan\.md$", grants, re.M), grants
    graphs = re.findall(r"^(alice|bob) read_graph (.*)$", grants, re.M)
    assert [(user, '"launch"' in graph.replace('\\"', '"')) for user, graph in graphs] == [
        ("alice", True),
        ("bob", False),
        ("alice", True),
    ], grants
    assert len(re.findall(r"^[a-z2-7]{52}$", grants, re.M)) == 2, grants  # `ls users`: hers and his, digests

    seen = re.findall(r"^(first|second|third) conversation, its processes: \['(\w+)', '(\w+)'\]$", replicas, re.M)
    assert [name for name, *_ in seen] == ["first", "second", "third"], replicas
    assert all(one == other for _, one, other in seen), replicas  # a conversation's calls: one process
    # Three ids: a process per conversation. Per caller (--processes auto), one caller on two replicas: two at most.
    assert len({one for _, one, _ in seen}) == 3, replicas
    assert "Traceback" not in output, output
