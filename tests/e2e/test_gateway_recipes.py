"""docs/gateway.md's team and replicas recipes, run as written: the ```` ```sh ```` blocks of their sections, in
order, by bash, in a copy of the repository (they install ``'.[…]'`` from a clone) with a fresh virtual environment
first on ``PATH`` and nothing of the tests' own environment (no ``PYTHONPATH``, no ``MCP_SESSIONS_*``).

Whatever commands the blocks hold are run; the test adds only what a person does between them: waiting for the
servers a block started in the background to listen (the ports its ``--port`` and ``--status-port`` name, and
``idp.py serve``'s), stopping them before the next recipe takes their port, and the Redis the replicas recipe says
it needs. The recipes' own ports (8000, 8001, 8101, 8102, 9000) and Redis's (6379) are used as written. The
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
_LISTENS = re.compile(r"--(?:status-)?port (\d+)|idp\.py (serve)")
IDP_PORT = "9000"  # what the team recipe's idp.py serves on: its ISSUER's port
_SKIPPED = shutil.ignore_patterns(
    ".git", ".venv*", ".cache", "node_modules", "__pycache__", ".*_cache", "site", "dist", "build"
)
WAITING = """\
listening() {  # the test's: wait, as a person would, for what the block above started (at most 300 s a port)
    for port in "$@"; do
        tries=1500
        until (: > "/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
            tries=$((tries - 1))
            [ "$tries" -gt 0 ] || { echo "nothing listens on $port"; exit 1; }
            sleep 0.2
        done
    done
}
stopped() {  # the test's: end what the blocks started in the background
    kill $(jobs -p) 2>/dev/null; wait
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


def waited(block: str) -> str:
    """``block``, then the wait for the ports its servers listen on."""
    ports = [port or IDP_PORT for port, _ in _LISTENS.findall(block)]
    return block + (f"listening {' '.join(ports)}\n" if ports else "")


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
def test_the_team_recipe_runs_as_written(readable: Path) -> None:
    """The team recipe, where ``wiki.internal`` is ``10.20.30.40``, port 443 (a network namespace of the test's own
    holds it), by a stand-in resolver that asks the host's own for the package index's names."""
    [claude_mcp_add] = [block for block in sh_blocks(TEAM, "text") if block.startswith("claude mcp add")]
    script = "".join(waited(block) for block in sh_blocks(TEAM)) + CLAUDE + claude_mcp_add
    with elsewhere(address=WIKI, port=443), resolver({"wiki.internal": WIKI}, forward=True) as prefix:
        output = run_recipe(script, readable, prefix)

    keys = readable / "clone"  # the stand-in's key and the users' tokens: this user's alone
    assert {name: (keys / name).stat().st_mode & 0o777 for name in ("idp-key.pem", "alice.jwt", "bob.jwt")} == {
        "idp-key.pem": 0o600,
        "alice.jwt": 0o600,
        "bob.jwt": 0o600,
    }
    assert re.search(r'"GET /alice\.jwt HTTP/1\.1" 404', output), output  # its JWKS alone
    metadata = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"
    assert f'www-authenticate: Bearer resource_metadata="{metadata}"' in output, output  # no token: no error
    assert '"authorization_servers":["http://127.0.0.1:9000/"]' in output, output
    texts = re.findall(r'"text": "([^"]*)"', output)
    assert texts == ["0001", "0002", "reached", "0001"], output  # alice's token, bob's; the wiki; Claude Code's
    assert "Session not found" in output, output  # bob's token, alice's session
    expired = 'error="invalid_token", error_description="the token has expired (exp)"'
    assert f"HTTP/1.1 401 Unauthorized\nwww-authenticate: Bearer {expired}" in output, output
    assert 'claude code: [{"text": "0001", "type": "text"}]' in output, output  # the shim, as Claude Code runs it
    assert "claude mcp add: as .mcp.json" in output, output
    status = output[output.index("KIND                PRINCIPAL") :]  # the operator's status
    assert re.search(r"^data-layer-session +alice ", status, re.M), status
    assert re.search(r"^shared +- ", status, re.M), status
    assert re.search(r"^processes: \d+ of 32 \(--max-processes\)$", status, re.M), status
    assert "transport-session" not in status, status  # a 2025 connection naming a session costs no process
    assert "keys: 1 from http://127.0.0.1:9000/jwks.json, fetched" in status, status
    assert "Traceback" not in output, output


@pytest.mark.timeout(WITHIN + 60)
def test_the_replicas_recipe_runs_as_written_after_the_team_recipe(readable: Path) -> None:
    [team, *_] = sh_blocks(TEAM)  # its files (whose.py) and keys; its gateway stopped: the front takes its port
    redis = f"{redis_server_binary()} --port 6379 --bind 127.0.0.1 --save '' --appendonly no &\nlistening 6379\n"
    script = waited(team) + "stopped\n" + redis + "".join(waited(block) for block in sh_blocks(REPLICAS))
    output = run_recipe(script, readable)

    seen = re.findall(r"^(first|second|third) conversation, its processes: \['(\w+)', '(\w+)'\]$", output, re.M)
    assert [name for name, *_ in seen] == ["first", "second", "third"], output
    assert all(one == other for _, one, other in seen), output  # a conversation's calls: one process
    # Three ids: a process per conversation. Per caller (--processes auto), one caller on two replicas: two at most.
    assert len({one for _, one, _ in seen}) == 3, output
    assert "Traceback" not in output, output


@pytest.mark.timeout(WITHIN + 60)
def test_the_grants_recipe_runs_as_written_after_the_team_recipe(readable: Path) -> None:
    """The team recipe's first block (its stand-in authorization server, the users' tokens), its gateway stopped,
    then the grants recipe: server-filesystem on the team's tree, server-memory on each user's own directory."""
    installed(CACHE / "filesystem" / "node_modules", "@modelcontextprotocol/server-filesystem")
    installed(CACHE / "memory" / "node_modules", "@modelcontextprotocol/server-memory")
    [team, *_] = sh_blocks(TEAM)
    stop_its_gateway = "kill $! && wait $!\n"  # the team's gateway (its last command): these take its port
    script = waited(team) + stop_its_gateway + NPM + "".join(waited(block) for block in sh_blocks(GRANTS))
    output = run_recipe(script, readable)

    assert re.search(r'^alice write_file "Successfully wrote to .*/project/plan\.md"$', output, re.M), output
    assert re.search(r"^bob edit_file .*-launch on Friday.*\+launch on Monday", output, re.M), output
    assert 'alice read_text_file "launch on Monday\\n"' in output, output
    assert re.search(r"^60900 660 .*/project/plan\.md$", output, re.M), output
    graphs = re.findall(r"^(alice|bob) read_graph (.*)$", output, re.M)
    assert [(user, '"launch"' in graph.replace('\\"', '"')) for user, graph in graphs] == [
        ("alice", True),
        ("bob", False),
        ("alice", True),
    ], output
    assert len(re.findall(r"^[a-z2-7]{52}$", output, re.M)) == 2, output  # `ls users`: hers and his, digests
    assert "Traceback" not in output, output
