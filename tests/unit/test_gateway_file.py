"""``mcp-sessions gateway --config FILE`` (``_gateway._file``): each server's keys read by the flags' own
definitions, the gateway's from its table (the command line's gateway flags over them), one uid range divided among
the stdio servers, each server's resource its own URL; and a bad file refused in one line naming its key or line,
exit status 2, before anything starts."""

from __future__ import annotations

import argparse
import io
import json
import os
from pathlib import Path

import pytest

from mcp_sessions._cli import main
from mcp_sessions._gateway._cli import configured_file
from mcp_sessions._gateway._file import FILE_LIMIT, FileError, servers_of
from mcp_sessions._gateway._process_flags import TEMPLATE_LIMIT, _template
from mcp_sessions._gateway._servers import sign_ins

TWO = """
[gateway]
port = 9000
auth-jwks = "https://idp.example/jwks"
auth-issuer = "https://idp.example"
auth-audience = "https://mcp.example/"
process-uids = "200000-200099"

[servers.files]
stdio = "cat -n"
process-mount = ["/srv/project:/srv/project:rw"]
tool-deny = ["*:write_*"]

[servers.memory]
command = "cat"
args = ["-n", "--"]
env = { MEMORY_FILE_PATH = "/srv/memory.jsonl" }
path = "/memory"
auth-audience = "https://memory.example/"
max-processes-per-principal = 2

[servers.api]
url = "http://127.0.0.1:3001/mcp"
"""


def servers(tmp_path: Path, text: str, name: str = "team.toml", flags: tuple[str, ...] = ()) -> list:  # type: ignore[type-arg]
    file = tmp_path / name
    file.write_text(text, encoding="utf-8")
    return servers_of(str(file), ["--config", str(file), *flags])


def test_each_server_s_keys_are_its_flags_and_the_gateway_s_are_every_server_s(tmp_path: Path) -> None:
    files, memory, api = servers(tmp_path, TWO)
    assert (files.name, files.path, memory.path, api.path) == (
        "files",
        "/servers/files/mcp",
        "/memory",
        "/servers/api/mcp",
    )
    assert files.flags.stdio == "cat -n"
    assert files.flags.process_mount == ["/srv/project:/srv/project:rw"]
    assert files.flags.tool_deny == ["*:write_*"]
    assert memory.flags.stdio == "cat -n --"
    assert memory.env == {"MEMORY_FILE_PATH": "/srv/memory.jsonl"}
    assert memory.flags.max_processes_per_principal == 2
    assert api.flags.upstream == ["http://127.0.0.1:3001/mcp"]
    assert {each.flags.port for each in (files, memory, api)} == {9000}
    # one range, the stdio servers' pool: each process locks its uid, so no uid runs two servers' processes at once
    assert (files.flags.process_uids, memory.flags.process_uids, api.flags.process_uids) == (
        "200000-200099",
        "200000-200099",
        None,
    )
    # each its own resource (RFC 9728's path-inserted metadata), the gateway's audience but where one names its own
    assert files.flags.auth_resource == "https://mcp.example/servers/files/mcp"
    assert memory.flags.auth_resource == "https://mcp.example/memory"
    assert (files.flags.auth_audience, memory.flags.auth_audience) == (
        "https://mcp.example/",
        "https://memory.example/",
    )


def test_the_command_line_s_gateway_flags_win_over_the_file_s_gateway_table(tmp_path: Path) -> None:
    """Over the ``[gateway]`` table, not over a server's own audience."""
    flags = ("--port", "9100", "--log-level", "debug", "--auth-audience", "https://gw.example/")
    files, memory, _ = servers(tmp_path, TWO, flags=flags)
    assert (files.flags.port, files.flags.log_level) == (9100, "debug")
    # given, whatever its value: the default's port over the file's 9000
    assert servers(tmp_path, TWO, flags=("--port", "8000"))[0].flags.port == 8000
    assert (files.flags.auth_audience, memory.flags.auth_audience) == ("https://gw.example/", "https://memory.example/")
    assert files.flags.auth_resource == "https://gw.example/servers/files/mcp"


def test_an_mcpservers_json_file_is_read_by_its_suffix_or_its_first_brace(tmp_path: Path) -> None:
    text = json.dumps({"mcpServers": {"a": {"command": "cat", "args": ["-n"]}, "b": {"url": "http://h/mcp"}}})
    for name in ("claude_desktop_config.json", "servers.conf"):
        a, b = servers(tmp_path, text, name)
        assert (a.flags.stdio, b.flags.upstream) == ("cat -n", ["http://h/mcp"])


def test_the_log_s_form_is_a_key_of_the_gateway_s_table(tmp_path: Path) -> None:
    """``log-format``, as ``--log-format`` on the command line (one table of options): the gateway's, not a server's."""
    [files] = servers(tmp_path, '[gateway]\nlog-format = "json"\n[servers.files]\nstdio = "cat"\n')
    assert files.flags.log_format == "json"
    with pytest.raises(FileError, match=r"servers.files.log-format: the gateway's key, not here"):
        servers(tmp_path, '[servers.files]\nstdio = "cat"\nlog-format = "json"\n')


@pytest.mark.parametrize("key", ["url", "upstream"])
def test_a_server_s_replicas_are_a_list_of_urls_under_either_key(tmp_path: Path, key: str) -> None:
    """Issue 112 (6): ``url = [...]`` was refused where ``upstream = [...]`` served the replicas."""
    [api] = servers(tmp_path, f'[servers.api]\n{key} = ["http://127.0.0.1:3001/mcp", "http://127.0.0.1:3002/mcp"]\n')
    assert api.flags.upstream == ["http://127.0.0.1:3001/mcp", "http://127.0.0.1:3002/mcp"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[servers.a]\nstdio = "cat"\nport = \n', "not TOML: Invalid value (at line 3, column 8)"),
        (
            '{"mcpServers": {\n"a": {"command": "cat",}}}',
            "not JSON: Expecting property name enclosed in double quotes at line 2",
        ),
        (
            '{"mcpServers": {"a": {"command": "cat"}, "a": {"url": "http://h/mcp"}}}',
            "'a' is given twice in one object",
        ),
        ('[servers.a]\nstdio = "cat"\nprocess-memroy = 64\n', "servers.a.process-memroy: unknown key"),
        (
            '[servers.a]\nstdio = "cat"\nprocess-memory = "lots"\n',
            "servers.a: process-memory: invalid int value: 'lots'",
        ),
        ('[servers.a]\nstdio = "cat"\nprocess-memory = [64]\n', "servers.a.process-memory: a string or a number"),
        (
            '[servers.a]\nstdio = "cat"\nprocess-mount = [{}]\n',
            "servers.a.process-mount: a string or a list of strings",
        ),
        ('[servers.a]\nstdio = "cat"\naccept-shared-uid = "yes"\n', "servers.a.accept-shared-uid: true or false"),
        ('[servers.a]\nstdio = "cat"\nprocesses = "many"\n', "servers.a: processes: invalid choice: 'many'"),
        ('[servers.a]\nstdio = "cat"\nport = 9000\n', "servers.a.port: the gateway's key, not here"),
        ('[gateway]\nstdio = "cat"\n[servers.a]\nstdio = "cat"\n', "gateway.stdio: a server's key, not here"),
        (
            "[servers.a]\nprocesses = 'shared'\n",
            "servers.a: one of command, stdio, url or upstream, which says what it serves",
        ),
        ('[servers.a]\nstdio = "cat"\nurl = "http://h/mcp"\n', "servers.a: one of command, stdio, url or upstream"),
        ('[servers.a]\nurl = "http://h/mcp"\ntype = "stdio"\n', "servers.a.type: http, as its url says"),
        ("[servers.a]\nurl = [3001]\n", "servers.a.url: a string or a list of strings"),
        (
            '[servers.a]\nstdio = "cat"\n[servers.b]\nstdio = "cat"\npath = "/Servers/A/mcp"\n',
            "servers.b.path: /Servers/A/mcp is servers.a's /servers/a/mcp: a request to one would reach the other",
        ),
        (  # issue 110: b's requests were a's (its audience, policy and uids), while b's metadata named b's URL
            '[servers.a]\nstdio = "cat"\n[servers.b]\nstdio = "cat"\npath = "/servers/a/mcp/sessions"\n',
            "servers.b.path: /servers/a/mcp/sessions is under servers.a's /servers/a/mcp: a request to one would",
        ),
        (
            '[servers.a]\nstdio = "cat"\n[servers.b]\nstdio = "cat"\npath = "/SERVERS/a"\n',
            "servers.b.path: /SERVERS/a holds servers.a's /servers/a/mcp: a request to one would reach the other",
        ),
        (
            '[servers.a]\nstdio = "cat"\npath = "/x/mcp/deeper"\n[servers.b]\nstdio = "cat"\npath = "/x/mcp"\n',
            "servers.b.path: /x/mcp holds servers.a's /x/mcp/deeper: a request to one would reach the other",
        ),
        ('[servers.a]\nstdio = "cat"\npath = "/status"\n', "servers.a.path: /status is the gateway's own /status"),
        ('[servers.a]\nstdio = "cat"\npath = "/OAuth/a"\n', "servers.a.path: /OAuth/a is under the gateway's own"),
        (
            '[servers.a]\nstdio = "cat"\npath = "/.well-known/oauth-protected-resource/a"\n',
            "servers.a.path: /.well-known/oauth-protected-resource/a is under the gateway's own /.well-known",
        ),
        ('[servers.a]\nstdio = "cat"\npath = "/servers/a/mcp/"\n', "servers.a.path: an absolute path of plain"),
        ('[servers.a]\nstdio = "cat"\npath = "/servers/%61/mcp"\n', "servers.a.path: an absolute path of plain"),
        ('[servers.a]\nstdio = "cat"\npath = "/a/../b"\n', "servers.a.path: an absolute path of plain segments"),
        ('[servers."a b"]\nstdio = "cat"\n', "servers.a b: a server's name is letters, digits"),
        ("[gateway]\nport = 9000\n", "mcpServers: a table of servers, at least one"),
        ('[server.a]\nstdio = "cat"\n', "unknown key 'server' (gateway, servers or mcpServers)"),
        (
            '[servers.a]\ncommand = "cat"\nenv = { MCP_SESSIONS_SECRET = "hunter2-value" }\n',
            "servers.a.env.MCP_SESSIONS_SECRET: the gateway's MCP_SESSION* variables are its own",
        ),
        (
            '[servers.a]\ncommand = "cat"\nenv = { LD_PRELOAD = "/x.so" }\n',
            "servers.a.env.LD_PRELOAD: tells the dynamic loader what to load",
        ),
        (
            '[servers.a]\nurl = "http://h/mcp"\nenv = { A = "b" }\n',
            "servers.a.env: the variables of a stdio server's processes",
        ),
        (
            '[servers.a]\nurl = "http://h/mcp"\nargs = ["-n"]\n',
            "servers.a.args: the arguments of a command: give command",
        ),
    ],
)
def test_a_bad_file_is_one_line_naming_its_key_or_line(tmp_path: Path, text: str, said: str) -> None:
    file = tmp_path / ("bad.json" if text.startswith("{") else "bad.toml")
    file.write_text(text, encoding="utf-8")
    stdout, stderr = io.StringIO(), io.StringIO()
    status = main(["gateway", "--config", str(file)], stdin=io.StringIO(), stdout=stdout, stderr=stderr, environ={})
    assert status == 2
    line = stderr.getvalue()
    assert line.count("\n") == 1, line
    assert said in line, line
    assert "hunter2" not in line


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ("--process-memory", "64"),
            "--process-memory is a server's: with --config, give it as process-memory in each",
        ),
        (("--stdio", "cat"), "--config names the servers: not with --upstream or --stdio"),
        (("--exchange-client-secret", "hunter2"), "the client secret is never a flag"),
        (("--processes", "auto"), "--processes is a server's"),  # given, though at its default
    ],
)
def test_a_server_s_flag_beside_a_file_is_refused(tmp_path: Path, flags: tuple[str, ...], said: str) -> None:
    file = tmp_path / "team.toml"
    file.write_text('[servers.a]\nstdio = "cat"\n', encoding="utf-8")
    stderr = io.StringIO()
    argv = ["gateway", "--config", str(file), *flags]
    assert main(argv, stdin=io.StringIO(), stdout=io.StringIO(), stderr=stderr, environ={}) == 2
    assert said in stderr.getvalue()


def test_a_file_that_cannot_be_read_is_said_so(tmp_path: Path) -> None:
    with pytest.raises(FileError, match=r"--config: .*missing\.toml: No such file or directory"):
        servers_of(str(tmp_path / "missing.toml"), [])


@pytest.mark.parametrize("kind", ["over", "not-utf-8"])
def test_a_file_too_long_or_not_text_is_said_so_as_a_process_file_template_is(tmp_path: Path, kind: str) -> None:
    """The ``--config`` file and a ``--process-file`` template are read by one bounded reader, each refusal naming
    the flag and the file."""

    def written(name: str, limit: int) -> tuple[Path, str]:
        path = tmp_path / name
        path.write_bytes(b"x" * (limit + 1) if kind == "over" else b"x = '\xff'")
        return path, f"is over {limit} bytes" if kind == "over" else "is not UTF-8 text"

    file, said = written("team.toml", FILE_LIMIT)
    with pytest.raises(FileError) as refused:
        servers_of(str(file), [])
    assert str(refused.value) == f"--config: {file} {said}"
    template, said = written("netrc", TEMPLATE_LIMIT)
    with pytest.raises(ValueError, match=r"^--process-file ~/\.netrc: ") as failed:
        _template("--process-file ~/.netrc", str(template))
    assert str(failed.value) == f"--process-file ~/.netrc: {template} {said}"


def test_a_server_s_own_refusal_is_said_with_its_name_first(tmp_path: Path) -> None:
    """What the flags refuse for one server, said of the server of the file that gave it, as the file names it."""
    file = tmp_path / "claude_desktop_config.json"
    file.write_text(json.dumps({"mcpServers": {"a": {"command": "no-such-command-here"}}}), encoding="utf-8")
    stderr = io.StringIO()
    environ = {"MCP_SESSIONS_SECRET": "x" * 32, "STATE_DIRECTORY": os.environ["STATE_DIRECTORY"]}  # conftest's
    argv = ["gateway", "--config", str(file)]
    assert main(argv, stdin=io.StringIO(), stdout=io.StringIO(), stderr=stderr, environ=environ) == 2
    said = "mcp-sessions gateway: mcpServers.a: --stdio: no-such-command-here: no such command (or not executable)\n"
    assert stderr.getvalue() == said


SIGNING_IN = '[gateway]\nauth-jwks = "http://127.0.0.1:9/k"\nauth-issuer = "http://127.0.0.1:9"\n'
SIGNING_IN += 'auth-audience = "https://gw.example/"\n[servers.plain]\nurl = "http://127.0.0.1:1/mcp"\n'
SIGNING_IN += '[servers.vendor]\nurl = "http://127.0.0.1:1/mcp"\nupstream-token = "oauth"\n'


def test_a_server_whose_users_sign_in_is_checked_as_the_command_line_s_and_signs_them_in_at_the_base(
    tmp_path: Path,
) -> None:
    """A server of a file with ``upstream-token = "oauth"``: without its login, refused in one line that names it, as
    the command line is; with it, its sign-in's routes are the gateway's own, on the origin of its ``auth-audience``
    (its Client ID Metadata Document at ``/oauth/client.json`` there, not under the server's path), where the
    servers' app routes them; a server that signs no one in has none."""
    file = tmp_path / "team.toml"
    file.write_text(SIGNING_IN, encoding="utf-8")
    stderr = io.StringIO()
    environ = {"MCP_SESSIONS_SECRET": "x" * 32, "MCP_SESSIONS_LOGIN_CLIENT_SECRET": "s3cr3t-value"}
    environ["STATE_DIRECTORY"] = os.environ["STATE_DIRECTORY"]  # conftest's
    assert (
        main(
            ["gateway", "--config", str(file)],
            stdin=io.StringIO(),
            stdout=io.StringIO(),
            stderr=stderr,
            environ=environ,
        )
        == 2
    )
    said = "servers.vendor: --upstream-token oauth confirms who opens a sign-in URL: give --login-issuer and its client"
    assert stderr.getvalue() == f"mcp-sessions gateway: {said}\n"
    file.write_text(SIGNING_IN + 'login-issuer = "http://127.0.0.1:9"\nlogin-client-id = "g"\n', encoding="utf-8")
    config = configured_file(argparse.Namespace(config=str(file)), environ)
    signing = {served.name: sign_ins(served.config) for served in config.servers}
    assert signing["plain"] == ()
    (vendor,) = signing["vendor"]
    assert vendor.document_url == "https://gw.example/oauth/client.json"


def test_the_default_max_processes_is_divided_among_the_stdio_servers_unless_one_sets_its_own(tmp_path: Path) -> None:
    """The host's processes are the gateway's: three stdio servers take a third of ``max-processes``' default each
    (each had it whole: three times what the host was sized for), one that sets its own keeps it, an HTTP server
    has none."""
    from argparse import Namespace

    from mcp_sessions._gateway._cli import configured_file
    from mcp_sessions._gateway._config import StdioProcesses, default_max_processes

    file = tmp_path / "three.toml"
    file.write_text(
        "[gateway]\naccept-root-processes = true\n"  # as root (a file's key, the gateway's): its processes too
        '[servers.a]\nstdio = "cat"\nprocess-containment = "none"\n'
        '[servers.b]\nstdio = "cat"\nprocess-containment = "none"\n'
        '[servers.c]\nstdio = "cat"\nprocess-containment = "none"\nmax-processes = 5\n'
        '[servers.api]\nurl = "http://127.0.0.1:3001/mcp"\n',
        encoding="utf-8",
    )
    environ = {"MCP_SESSIONS_SECRET": "x" * 32, "STATE_DIRECTORY": os.environ["STATE_DIRECTORY"]}  # conftest's
    config = configured_file(Namespace(config=str(file), command_line=[]), environ)
    limits = {
        served.name: served.config.serves.max_processes
        for served in config.servers
        if isinstance(served.config.serves, StdioProcesses)
    }
    assert limits == {"a": default_max_processes(servers=3), "b": default_max_processes(servers=3), "c": 5}
