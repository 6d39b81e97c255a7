"""The credentials a command sends, from the environment or a file, never from the command line, where ``ps``, the
shell's history and a host's configuration file would show them.

``create``, ``delete``, ``sessions`` and ``connect`` take the same options: ``--bearer-env VAR`` or ``--bearer-file
FILE`` (``Authorization: Bearer`` and the value), and ``--header NAME=env:VAR`` or ``--header NAME=file:PATH`` for
any other header. No variable is read unless named: a token exported for one server would otherwise go to any URL
a command is given. Nothing an option is given is printed (only a header's name): a value put there by mistake
would reach the terminal, or a host's log.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping
from typing import Final

from . import UsageError

FORMS: Final = "NAME=env:VAR or NAME=file:PATH"
MAX_VALUE: Final = 64 << 10
"""The most characters read of a credential's file: a token is a few thousand."""
_FIELD_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An HTTP field name (RFC 9110, 5.1: a token)."""


def add_credential_arguments(command: argparse.ArgumentParser) -> None:
    """The credential options of ``command``: the bearer's, and ``--header``."""
    bearer = command.add_mutually_exclusive_group()
    bearer.add_argument(
        "--bearer-env",
        metavar="VAR",
        help="send 'Authorization: Bearer' and the value of the environment variable VAR",
    )
    bearer.add_argument(
        "--bearer-file",
        metavar="FILE",
        help="send 'Authorization: Bearer' and FILE's one line",
    )
    command.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=env:VAR",
        help="send header NAME with the value of the environment variable VAR, or NAME=file:PATH a file's; repeat",
    )


def credential_headers(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, str]:
    """The headers ``args`` name (``--header``, then the bearer's), each value read from its variable or file."""
    headers: dict[str, str] = {}
    for spec in args.header:
        name, _, source = spec.partition("=")
        kind, _, where = source.partition(":")
        name = name.strip()
        if not _FIELD_NAME.fullmatch(name) or kind not in ("env", "file") or not where:
            # What it got may be a secret: never repeated.
            said = f"--header takes {FORMS}, never a value (ps and the shell's history show the command line)"
            raise UsageError(said)
        headers[name] = _secret(kind, where, environ, f"--header {name}")
    # One at most: the two options are mutually exclusive.
    kind, where = ("env", args.bearer_env) if args.bearer_env is not None else ("file", args.bearer_file)
    if where is None:
        return headers
    if any(name.lower() == "authorization" for name in headers):
        raise UsageError("--header Authorization and --bearer-env or --bearer-file: give one")
    headers["Authorization"] = "Bearer " + _secret(kind, where, environ, f"--bearer-{kind}")
    return headers


class Unreadable(UsageError):
    """A credential's file that cannot be read, or is empty: ``connect`` answers each request so until it can (a
    token refresher may not have written it yet), as it answers a refused one."""


def _secret(kind: str, where: str, environ: Mapping[str, str], what: str) -> str:
    """The value in variable or file ``where``, stripped; a usage error naming ``what`` (never ``where``) if there is
    none."""
    source = "the environment variable" if kind == "env" else "the file"
    if kind == "env":
        value = environ.get(where, "")
    else:
        try:
            with open(where, encoding="utf-8") as file:
                value = file.read(MAX_VALUE + 1)
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or "not UTF-8 text"
            raise Unreadable(f"{what}: cannot read {source} it names: {reason}") from None
    value = value.strip()
    if not value:
        if kind == "file":
            raise Unreadable(f"{what}: {source} it names is empty")
        raise UsageError(f"{what}: {source} it names is not set or empty")
    if len(value) > MAX_VALUE or not value.isprintable():
        raise UsageError(f"{what}: {source} it names must hold one line, the value")
    return value


class Credentials:
    """The credential headers, read from their variables and files at the start, and again when the remote refuses
    them: a file a token refresher rewrote is read at the next refusal (``current`` keeps the last good read)."""

    def __init__(self, read: Callable[[], dict[str, str]], *, from_files: bool = False) -> None:
        """``from_files``: some come from a file (a refresher's), which a refusal leads to read again."""
        self._read = read
        self.from_files = from_files
        self.unread: str | None = None
        """Why they cannot be read yet: a file missing or empty at the start, read again at each request until it is
        there (any other problem is a usage error at the start)."""
        try:
            self.current = read()
        except Unreadable as exc:
            self.current, self.unread = {}, str(exc)

    def reread(self) -> bool:
        """Read them again: whether they changed."""
        try:
            fresh = self._read()
        except UsageError as exc:  # a refresher between two writes, or a file gone: keep what was sent
            if self.unread is not None:
                self.unread = str(exc)
            return False
        self.unread = None
        changed, self.current = fresh != self.current, fresh
        return changed
