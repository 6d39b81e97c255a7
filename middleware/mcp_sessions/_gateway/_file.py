"""``mcp-sessions gateway --config FILE``: many servers behind one gateway, named in one file.

The file is TOML, or the ``mcpServers`` JSON that Claude Desktop, Cursor and VS Code hold: JSON when its name ends in
``.json``, TOML when it ends in ``.toml``, else JSON when its first character but blanks is ``{``. One way per thing:

- a server's keys are the gateway's per-server flags' long names without ``--`` (``process-network = "egress"``,
  ``process-env = ["A=claim:sub"]``), read by the SAME argparse definitions as the flags (``_options``), so
  that each means in the file what it means on the command line; a flag that repeats takes a list (or one string),
  one that takes no value ``true``. Beside them, the ``mcpServers`` keys: ``command`` and ``args`` (else ``stdio``,
  one string split as a shell would), ``env`` (the server's own variables, literal, never printed: what the
  ``stdio`` flag's processes get beside ``pass-env``'s), ``url`` (else ``upstream``, a list for replicas), and
  ``path``, where the gateway serves it (default ``/servers/NAME/mcp``); VS Code's ``type`` is read and checked;
- the gateway's own keys (:data:`GATEWAY_KEYS`: how it listens, who is asking, the token exchange's client, the
  status view, the drain, ``process-uids`` or ``accept-root-processes``, and the users' gids) are in a
  ``[gateway]`` table (JSON: ``"gateway"``), and not in a server's, but for ``auth-audience`` and
  ``auth-resource``, a server's own;
- with ``--config``, a gateway flag given on the command line wins over the file's ``[gateway]`` table (the
  deployment's port over the team's file); a server's flag (``--stdio``, ``--process-memory``...) is refused, as it
  would say nothing of which server.

What the servers share, so that no server's process can reach another's: ``process-uids``' range, one pool for every
stdio server, from which each process takes a uid of its own, locked while it runs (whichever server's), so that no
uid runs two servers' processes at once, and a server a reload adds takes its uids from it too (none free: a new
conversation is refused at ``process-uids``, as at any limit). The users' gids (``process-user-gids``) are shared, as
every gateway of a host shares them (each user's directory has its group, recorded host-wide under
``process-state``: no gid belongs to two users).
Each server's resource (RFC 9728) is its own URL: the origin of the gateway's ``auth-resource`` (else its
``auth-audience``) and the server's path, unless the server names its own; its metadata is path-inserted
(``/.well-known/oauth-protected-resource/servers/NAME/mcp``). A token for the gateway's audience reaches every
server but one that names an ``auth-audience`` of its own.

A bad file is a :class:`FileError` that names the line (a syntax error) or the key and what is wrong, said in one line
(exit status 2). Nothing here starts anything: :func:`servers_of` gives each server's flags as an
``argparse.Namespace``, which ``_cli.configured`` checks and builds as it does the command line's."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import tomllib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from .._wire import printable
from ._config import ServerFlags
from ._options import KEYS, OPTIONS, Option, add_arguments

FILE_LIMIT: Final = 1 << 20
"""The most a file may hold (bytes): a team's servers in a few kilobytes, read whole once at startup."""
GATEWAY_KEYS: Final = frozenset(
    key for key, option in KEYS.items() if option.scope in ("gateway", "either") and not option.refused
)
"""The gateway's own keys: in its ``[gateway]`` table once, for every server."""
OWN_KEYS: Final = frozenset(key for key, option in KEYS.items() if option.scope == "either")
"""The gateway's keys a server may set for itself: its own audience, and its own resource URL."""
HOST_KEYS: Final = frozenset({"command", "args", "env", "url", "path", "type"})
"""A server's keys that are no flag's: the ``mcpServers`` JSON's, and where it is served."""
NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A server's name, as a path's part: letters, digits, ``.``, ``_`` and ``-``."""
RESERVED: Final = ("/healthz", "/readyz", "/status", "/sessions", "/.well-known", "/oauth")
"""The gateway's own paths, which no server may be served at (or under): ``/oauth`` its users' sign-ins'."""
SERVERS_PATH: Final = "/sessions"
"""Where a user lists (``GET``) and ends (``DELETE /sessions/DIGEST``) her conversations of every server at once:
``mcp-sessions sessions`` given the gateway's base URL appends it."""


class FileError(ValueError):
    """The file could not be read, or says what no gateway could serve: the message names the key or line."""


def servers_of(path: str, command_line: Sequence[str]) -> list[ServerFlags]:
    """The servers the file at ``path`` names, each with its flags, read by the gateway's options
    (:data:`~._options.OPTIONS`); ``command_line`` is the gateway command's arguments, whose gateway flags win over
    the file's."""

    def parser(*, given_only: bool = False) -> argparse.ArgumentParser:
        """The gateway's parser; ``given_only``: one whose namespace holds only the options given (no default)."""
        suppressed = argparse.SUPPRESS if given_only else None
        made = _Refusing(add_help=False, allow_abbrev=False, argument_default=suppressed)
        add_arguments(made, defaults=not given_only)
        return made

    text = _read(path)
    found = _parsed(path, text)
    if not isinstance(found, dict):
        raise FileError(f"{printable(path)}: not a table of servers")
    servers_key = "servers" if "servers" in found else "mcpServers"
    unknown = sorted(set(found) - {"gateway", servers_key})
    if unknown:
        raise FileError(f"{printable(path)}: unknown key {printable(unknown[0])!r} (gateway, servers or mcpServers)")
    gateway = found.get("gateway", {})
    servers = found.get(servers_key)
    if not isinstance(gateway, dict):
        raise FileError("gateway: a table of the gateway's keys")
    if not isinstance(servers, dict) or not servers:
        raise FileError(f"{servers_key}: a table of servers, at least one")
    gateway_argv = _argv("gateway", gateway, lambda key: key in GATEWAY_KEYS, "a server's")
    overriding = _command_line(command_line, parser(given_only=True))
    # the gateway's own values, for each server's resource
    own = {**vars(_parse("gateway", parser(), gateway_argv)), **overriding}
    base = own["auth_resource"] or own["auth_audience"]
    named: list[ServerFlags] = []
    paths: dict[str, str] = {}
    for name, table in servers.items():
        where = f"{servers_key}.{printable(name)}"
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise FileError(f"{where}: a server's name is letters, digits, '.', '_' and '-' (at most 64)")
        if not isinstance(table, dict):
            raise FileError(f"{where}: a table of the server's keys")
        server = dict(table)
        host = {key: server.pop(key) for key in HOST_KEYS if key in server}
        argv = _argv(where, server, lambda key: key not in GATEWAY_KEYS or key in OWN_KEYS, "the gateway's")
        argv += _host_keys(where, host, server)
        served = _served_path(where, host.get("path", f"/servers/{name}/mcp"))
        _apart(where, served, paths)
        paths[served] = f"{where}'s"
        flags = vars(_parse(where, parser(), [*gateway_argv, *argv]))
        own_dests = {KEYS[key].dest for key in server if key in OWN_KEYS}
        # the command line's over the gateway's table, not over a server's own
        flags.update((dest, value) for dest, value in overriding.items() if dest not in own_dests)
        if "auth-resource" not in server and base is not None:
            flags["auth_resource"] = _resource(base, served)
        if flags["stdio"] is None:  # process-uids is the stdio servers' pool: an HTTP server has no processes
            flags["process_uids"] = None
        env = _env(where, host.get("env", {}))
        named.append(ServerFlags(name, served, argparse.Namespace(**flags), env, where, table, gateway))
    return named


def _read(path: str) -> str:
    try:
        return read_bounded(path, FILE_LIMIT)
    except OSError as exc:
        raise FileError(f"--config: {printable(path)}: {exc.strerror}") from None
    except ValueError as exc:
        raise FileError(f"--config: {printable(path)} {exc}") from None


def read_bounded(path: str, limit: int) -> str:
    """The UTF-8 text of the operator's file ``path`` (this ``--config`` file, a ``--process-file`` template), read
    once at startup, at most ``limit`` bytes: one reading, so that a file is refused the same way wherever it is
    given, and a path to an endless file (``/dev/zero``) ends. ``OSError`` if it cannot be read; ``ValueError`` that
    says what the file is (``is over N bytes``, ``is not UTF-8 text``), for the caller to put after its flag and
    the path."""
    with open(path, "rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"is over {limit} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ValueError("is not UTF-8 text") from None


def _parsed(path: str, text: str) -> object:
    """The file's content: JSON by its suffix ``.json`` (or, with neither suffix, a first ``{``), else TOML; a syntax
    error names its line."""
    as_json = path.endswith(".json") or (not path.endswith(".toml") and text.lstrip().startswith("{"))
    try:
        return json.loads(text, object_pairs_hook=_once) if as_json else tomllib.loads(text)
    except FileError as exc:  # a key given twice
        raise FileError(f"{printable(path)}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise FileError(f"{printable(path)}: not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except tomllib.TOMLDecodeError as exc:
        raise FileError(f"{printable(path)}: not TOML: {exc}") from None


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once (as TOML's are): the last of two would win, unsaid."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise FileError(f"{printable(key)!r} is given twice in one object")
        found[key] = value
    return found


def _argv(where: str, table: Mapping[str, object], allowed: Callable[[str], bool], whose: str) -> list[str]:
    """``table``'s keys as the command line would give them, each checked: a flag's name, allowed here, of its
    type (a string, a number, a list of strings for a flag that repeats, ``true`` for one that takes no value)."""
    argv = []
    for key, value in table.items():
        at = f"{where}.{printable(key)}"
        option = _key(key)
        if option is None:
            raise FileError(f"{at}: unknown key")
        if not allowed(key):
            raise FileError(f"{at}: {whose} key, not here")
        if option.switch:
            if not isinstance(value, bool):
                raise FileError(f"{at}: true or false")
            argv += [f"--{key}"] if value else []
            continue
        repeats = option.repeats
        values = value if repeats and isinstance(value, list) else [value]
        for each in values:
            if isinstance(each, bool) or not isinstance(each, str | int | float):
                raise FileError(f"{at}: {'a string or a list of strings' if repeats else 'a string or a number'}")
            argv.append(f"--{key}={each}")
    return argv


def _host_keys(where: str, host: Mapping[str, Any], server: Mapping[str, object]) -> list[str]:
    """The ``mcpServers`` keys as flags: ``command`` and ``args`` as ``--stdio``, ``url`` as ``--upstream`` (a list:
    the replicas, as ``upstream``'s)."""
    for key in ("command", "path", "type"):
        if key in host and not isinstance(host[key], str):
            raise FileError(f"{where}.{key}: a string")
    urls = host.get("url", [])
    urls = [urls] if isinstance(urls, str) else urls
    if not isinstance(urls, list) or not all(isinstance(url, str) for url in urls):
        raise FileError(f"{where}.url: a string or a list of strings")
    args = host.get("args", [])
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise FileError(f"{where}.args: a list of strings")
    if "args" in host and "command" not in host:
        raise FileError(f"{where}.args: the arguments of a command: give command")
    if "env" in host and "command" not in host and "stdio" not in server:
        raise FileError(f"{where}.env: the variables of a stdio server's processes: give command or stdio")
    given = [key for key in ("command", "stdio", "url", "upstream") if key in host or key in server]
    if len(given) != 1:
        raise FileError(f"{where}: one of command, stdio, url or upstream, which says what it serves")
    kind = "http" if given[0] in ("url", "upstream") else "stdio"
    if host.get("type", kind) not in (kind, "streamable-http" if kind == "http" else kind):
        raise FileError(f"{where}.type: {kind}, as its {given[0]} says")
    if "command" in host:
        return [f"--stdio={shlex.join([host['command'], *args])}"]
    return [f"--upstream={url}" for url in urls]


def _served_path(where: str, path: object) -> str:
    """The path a server is served at: absolute, of plain segments (no empty, dot or encoded one)."""
    if not isinstance(path, str):
        raise FileError(f"{where}.path: a string")
    segments = path.split("/")
    plain = all(
        segment not in ("", ".", "..") and re.fullmatch(r"[A-Za-z0-9._~-]+", segment) for segment in segments[1:]
    )
    if not path.startswith("/") or not plain:
        raise FileError(f"{where}.path: an absolute path of plain segments (letters, digits, '.', '_', '~', '-')")
    return path


def _apart(where: str, path: str, served: Mapping[str, str]) -> None:
    """Refuses a server's ``path`` that is, lies under or holds one of the gateway's own (:data:`RESERVED`) or a
    server's before it (``served``: each path, and whose), in any case (its segments are plain: nothing else is left
    to normalise), naming both: the gateway routes a request to the first path that holds it, so that one server
    would serve the other's requests (its audience, its policy, its uids) while the other's metadata names them."""
    for other, whose in (*((own, "the gateway's own") for own in RESERVED), *served.items()):
        low = path.lower() + "/"
        held = other.lower() + "/"
        if low.startswith(held) or held.startswith(low):
            relation = "is" if low == held else "is under" if low.startswith(held) else "holds"
            raise FileError(f"{where}.path: {path} {relation} {whose} {other}: a request to one would reach the other")


def _env(where: str, env: object) -> dict[str, str]:
    """A server's own variables (``env``): names a process may be given, string values (never printed)."""
    from ._loader import loads_code

    if not isinstance(env, dict):
        raise FileError(f"{where}.env: a table of variables")
    for name, value in env.items():
        at = f"{where}.env.{printable(name)}"
        if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
            raise FileError(f"{at}: not a variable name a process may be given")
        if not isinstance(value, str):
            raise FileError(f"{at}: a string")
        if name.startswith("MCP_SESSION"):
            raise FileError(f"{at}: the gateway's MCP_SESSION* variables are its own")
        if loads_code(name):
            raise FileError(f"{at}: tells the dynamic loader what to load, and root's helpers run it")
    return env


class _Refusing(argparse.ArgumentParser):
    """The gateway's argument parser, raising what it would print and exit with."""

    def error(self, message: str) -> Any:
        raise FileError(message)


def _parse(where: str, parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    try:
        return parser.parse_args(argv)
    except FileError as exc:
        raise FileError(f"{where}: {str(exc).replace('argument --', '')}") from None


def _key(key: object) -> Option | None:
    """The option a file's key names: a flag's, but for a client secret's (never read) and ``config``."""
    option = KEYS.get(key) if isinstance(key, str) else None
    return None if option is None or option.refused or option.scope == "command" else option


def _command_line(command_line: Sequence[str], parser: argparse.ArgumentParser) -> dict[str, object]:
    """The gateway flags the command line gives (each given, whatever its value), which win over the file's; a
    server's flag there is refused, as is the client secret, never a flag."""
    given, _ = parser.parse_known_args(command_line)  # what is not given is not there
    keys = {option.dest: option.key for option in OPTIONS}
    overriding = {}
    for dest, value in vars(given).items():
        if dest == "exchange_client_secret":
            raise FileError("the client secret is never a flag: MCP_SESSIONS_EXCHANGE_CLIENT_SECRET, or a file")
        if (key := keys.get(dest)) is None or _key(key) is None:  # --config itself
            continue
        if key not in GATEWAY_KEYS:
            raise FileError(f"--{key} is a server's: with --config, give it as {key} in each server's table")
        overriding[dest] = value
    return overriding


def _resource(base: str, path: str) -> str:
    """A server's resource, its own URL: the origin of the gateway's resource (else its audience) and its path."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise FileError("gateway.auth-resource (else auth-audience): an http(s) URL, whose origin the servers share")
    return f"{parts.scheme}://{parts.netloc}{path}"
