"""``mcp-sessions connect URL``: a stdio MCP server a host starts, forwarding every message to a remote server.

The host (Claude Code, Claude Desktop, VS Code, Cursor) starts it as one of its stdio servers, once a
conversation: it starts as a shim does, importing no MCP SDK. It relays each message between the host's
stdin and stdout (a JSON-RPC message a line) and the remote's Streamable HTTP endpoint (a POST each, answered
in JSON or an event stream; in the 2025 era, the transport session's ``Mcp-Session-Id`` and its GET stream),
in the era the host speaks, as the SDK's own client sends it (``_relay``). A remote that restarts is connected to again:
a request it refuses while it drains (503 with ``Retry-After``), or cannot take between two starts (a connection
refused once it was reached), is sent again for :data:`RESTART_WITHIN`, and a transport session it no longer knows
(404) is opened anew with the host's own ``initialize``. What it adds
is the host's conversation, which many hosts give only to their stdio servers, in their environment
(``CLAUDE_CODE_SESSION_ID``, ``OMNIGENT_SESSION_ID``, or a name ``--conversation-env`` gives):

- a remote that speaks data-layer sessions gets one session per conversation, through the client's
  :class:`~mcp_sessions.client.SessionTransport`: created on 2026-07-28 before the host's first request (never
  in the connection's 2025 transport session, which ends with the connection), its token kept in a file of its
  own (mode 0600, under the system's per-user state directory, ``$XDG_STATE_HOME/mcp-sessions/connect`` on Linux,
  named by a digest of the URL and the conversation) and reused by every shim of the same conversation (two
  started together end in one: the conversation's file lock); a create the remote refuses (a limit) answers the
  host's request with the remote's error, never a session of the connection's own; a session the remote no
  longer knows (it restarted) is the host's next request's ``-32043``, which says so, and the one after gets a
  new session; deleted with the host's end only under ``--end-with-host``;
- every remote gets the conversation in W3C ``baggage`` (``gen_ai.conversation.id``), as a gateway reads it,
  and under ``--conversation-header`` in a header the operator named.

Without a conversation in the environment, nothing is added: the remote sees what the host's requests name.
Credentials come from the environment or a file (``--bearer-env``, ``--bearer-file``, ``--header NAME=env:VAR``:
``_credentials``), never from the command line, and are never logged; a file is read again when the remote refuses
them (401, 403), and the request sent once more if it holds another value (a token a refresher rotated). A remote
that still refuses them, or cannot be reached, answers each request with one JSON-RPC error that says so.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import signal
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final, TextIO

try:
    import fcntl
except ImportError:  # Windows: see run
    fcntl = None  # type: ignore[assignment]
from urllib.parse import quote, urlsplit

import anyio
import httpx2
import platformdirs

from .._wire import jsonrpc, printable
from .._wire.protocol import (
    CONVERSATION_MEMBER,
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    MODERN_VERSION,
    UPSTREAM_UNAVAILABLE,
    conversation_id,
)
from ..client import HeldSession, SessionError, SessionTransport
from . import EXIT_OK, UsageError
from ._credentials import Credentials, add_credential_arguments, credential_headers
from ._relay import Host, Remote, read_bounded

logger = logging.getLogger("mcp_sessions.connect")

BUILT_IN_CONVERSATION_ENV: Final = ("CLAUDE_CODE_SESSION_ID", "OMNIGENT_SESSION_ID")
"""The variables that name the host's conversation without configuration, after those ``--conversation-env``
names: Claude Code's and omnigent's, which each gives its stdio servers."""
HOST_MARKER: Final = {"CLAUDE_CODE_SESSION_ID": "CLAUDECODE"}
"""A built-in variable counts only beside its host's own marker set to ``1``: Claude Code sets ``CLAUDECODE=1`` in
every process it starts, so a ``CLAUDE_CODE_SESSION_ID`` left exported in a shell names no conversation."""
MAX_REFUSAL: Final = 64 << 10
"""The most of a refusal's body read for its ``error_description``."""
REFUSED_STATUSES: Final = (401, 403)
RESTART_WITHIN: Final = 30.0
"""How long a request is sent again while the remote restarts: answered 503 with ``Retry-After`` (a gateway that
drains), or refused a connection once this shim has reached it (none listens between two gateways). A rolling
restart shorter than that costs the host nothing."""
RECONNECT_EVERY: Final = 0.5
"""The pause between two connections refused while the remote restarts."""
TIMEOUT: Final = httpx2.Timeout(30.0, read=300.0)
"""The SDK's own client's: 30 s to connect and send, 5 minutes between two bytes of an answer (an event stream)."""
_BUILT_IN: Final = " and ".join(BUILT_IN_CONVERSATION_ENV)
DESCRIPTION: Final = (
    "Serve MCP on standard input and output for a host (Claude Code, Claude "
    "Desktop, VS Code), forwarding every message to the Streamable HTTP endpoint "
    "URL, with the host's conversation named: a data-layer session per "
    "conversation where the server has sessions, and gen_ai.conversation.id in "
    "baggage. The conversation is the first of the --conversation-env variables, "
    f"then {_BUILT_IN}, that is set. Credentials come from the environment or "
    "a file, never from the command line."
)


def add_arguments(connect: argparse.ArgumentParser) -> None:
    """The arguments of ``connect``."""
    connect.add_argument(
        "url",
        help="the remote MCP endpoint, e.g. https://mcp.example.com/mcp",
    )
    connect.add_argument(
        "--conversation-env",
        action="append",
        default=[],
        metavar="NAME",
        help="an environment variable that names the host's conversation, tried before "
        f"{', '.join(BUILT_IN_CONVERSATION_ENV)}; repeat",
    )
    connect.add_argument(
        "--conversation-header",
        metavar="NAME",
        help="also send the conversation in this header (the gateway's conversation_keys header:NAME)",
    )
    add_credential_arguments(connect)
    connect.add_argument(
        "--state-dir",
        metavar="DIR",
        help=(
            "where each conversation's session is kept (default: this system's per-user state "
            "directory, $XDG_STATE_HOME/mcp-sessions/connect, else ~/.local/state/mcp-sessions/connect on Linux)"
        ),
    )
    connect.add_argument(
        "--log-level",
        default="warning",
        choices=("error", "warning", "info", "debug"),
        help="what goes to standard error, which hosts keep in their logs (default warning); never a credential",
    )
    connect.add_argument(
        "--end-with-host",
        action="store_true",
        help=(
            "delete the conversation's session when the host closes this "
            "server (default: keep it, so that the host's next start of the "
            "same conversation finds it)"
        ),
    )


def run(
    args: argparse.Namespace,
    stdin: TextIO,
    stdout: TextIO,
    stderr: TextIO,
    environ: Mapping[str, str],
) -> int:
    """Run ``connect``: serve the host until it closes standard input; returns the exit status."""
    if fcntl is None:
        raise UsageError("connect runs on Linux and macOS (it locks each conversation's file); on Windows, in WSL")
    parts = urlsplit(args.url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = printable(args.url)
        raise UsageError(f"URL is an http(s) URL of the remote's MCP endpoint, not {shown!r}")
    files = args.bearer_file is not None or any(spec.partition("=")[2].startswith("file:") for spec in args.header)
    credentials = Credentials(lambda: credential_headers(args, environ), from_files=files)
    headers: dict[str, str] = {}
    conversation = conversation_of(args.conversation_env, environ)
    if conversation is not None:
        member = quote(conversation, safe="")
        headers["baggage"] = f"{CONVERSATION_MEMBER}={member}"
        if args.conversation_header:
            headers[args.conversation_header] = conversation
    saved = None
    if conversation is not None:
        directory = state_dir(args.state_dir)
        saved = SavedSession(directory, args.url, conversation)
    handler = logging.StreamHandler(stderr)
    handler.setFormatter(logging.Formatter("mcp-sessions connect: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    # Its own messages at the level asked; other libraries' stay at warning (httpx2 logs each request at info).
    logging.getLogger("mcp_sessions").setLevel(args.log_level.upper())
    host = Host(stdin.buffer, stdout.buffer)
    anyio.run(_serve, args.url, headers, credentials, saved, host, args.end_with_host)
    return EXIT_OK


def conversation_of(names: list[str], environ: Mapping[str, str]) -> str | None:
    """The host's conversation: the first of ``names``, then the built-in variables, that is set.

    An id a gateway could not read as one (over 256 characters, or with a space, a quote, a comma…) is
    replaced by its SHA-256, so that it still names one conversation, always the same.
    """
    for name in (*names, *BUILT_IN_CONVERSATION_ENV):
        value = environ.get(name, "").strip()
        marker = HOST_MARKER.get(name) if name not in names else None
        if not value or (marker is not None and environ.get(marker) != "1"):
            continue
        named = conversation_id(value)
        if named:
            return named
        return "sha256-" + hashlib.sha256(value.encode()).hexdigest()
    return None


def state_dir(given: str | None) -> Path:
    """Where the conversations' sessions are kept: ``given``, else this system's per-user state directory
    (platformdirs': ``$XDG_STATE_HOME/mcp-sessions``, else ``~/.local/state/mcp-sessions``, on Linux; ``~/Library/
    Application Support/mcp-sessions`` on macOS), in ``connect``."""
    return Path(given) if given else Path(platformdirs.user_state_dir("mcp-sessions"), "connect")


class SavedSession:
    """One conversation's data-layer session on one remote, in a file of its own that only its owner reads.

    The file's name is a digest of the URL and the conversation, so neither shows in a directory listing;
    its content is the session's :meth:`HeldSession.to_dict`, a bearer token: written to a new file of mode
    0600 and renamed over the old one, in a directory of mode 0700.
    """

    def __init__(self, directory: Path, url: str, conversation: str) -> None:
        digest = hashlib.sha256(f"{url}\n{conversation}".encode()).hexdigest()
        key = digest[:32]
        self.directory = directory
        self.path = directory / f"{key}.json"
        self.label = conversation

    def load(self) -> HeldSession:
        """The saved session, or an empty one labelled with the conversation (a file that cannot be read is none)."""
        try:
            data = jsonrpc.loads(self.path.read_bytes())
            return HeldSession.from_dict(data)
        except (OSError, TypeError, ValueError, AttributeError):
            return HeldSession(label=self.label)

    @contextlib.asynccontextmanager
    async def locked(self) -> AsyncIterator[None]:
        """The conversation's lock (``flock`` on a file beside its session's), held while a shim finds or creates
        its session: two shims of one conversation started together end in one session."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            await anyio.to_thread.run_sync(fcntl.flock, lock, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock)  # and the lock with it

    def save(self, session: HeldSession) -> None:
        """Keep ``session`` (the transport's ``on_change``), or remove the file once it holds none."""
        if session.token is None:
            self.path.unlink(missing_ok=True)
            return
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Made with mode 0600.
        fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=".session-")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(jsonrpc.dumps(session.to_dict()))
            os.replace(temporary, self.path)
        except BaseException:
            os.unlink(temporary)
            raise


async def _serve(
    url: str,
    headers: dict[str, str],
    credentials: Credentials,
    saved: SavedSession | None,
    host: Host,
    end_with_host: bool,
) -> None:
    """Relay between the host on stdio and the remote at ``url`` until the host closes standard input."""
    session = HeldSession() if saved is None else saved.load()
    shim = SessionTransport(
        Refusals(url, credentials),
        session=session,
        # Its session is opened by ``ensure`` alone: on 2026-07-28, never in the host's 2025 transport session.
        auto_create=False,
        delete_on_close=end_with_host,
        on_change=None if saved is None else saved.save,
    )
    ended_by: list[int] = []
    async with httpx2.AsyncClient(transport=shim, headers=headers, timeout=TIMEOUT) as http:
        async with anyio.create_task_group() as tasks:
            remote = Remote(http, url, host.write, shim, tasks, conversation=saved is not None)
            with anyio.CancelScope() as relaying:
                tasks.start_soon(_until_terminated, relaying, ended_by)
                async for message in host.messages():
                    if saved is not None and (refused := await _ensure(shim, saved, message, url, headers)):
                        host.write(refused)
                    elif "method" in message and "id" in message:
                        tasks.start_soon(remote.request, message)
                    elif not remote.cancelled(message):
                        await remote.post(message)
            # The host closed standard input, or ended this server: it reads no more.
            tasks.cancel_scope.cancel()
        await remote.close()
    # The remote's side is closed (the session deleted, under --end-with-host); the host's reader may wait in a
    # thread for a line that never comes: end by the signal, as uvicorn does once it is done.
    if ended_by:
        signal.signal(ended_by[0], signal.SIG_DFL)
        os.kill(os.getpid(), ended_by[0])


async def _ensure(
    shim: SessionTransport, saved: SavedSession, message: dict[str, Any], url: str, headers: dict[str, str]
) -> dict[str, object] | None:
    """Before a host's request (not its ``initialize``), the conversation's session: the one a shim of the same
    conversation saved, else a new one, created on 2026-07-28, under the conversation's lock. A create the remote
    refuses (a limit, a credential) is that request's answer, with the remote's reason; the next request tries
    again. A remote without sessions (``-32601``) gets the requests as they are."""
    if shim.session.token is not None or shim.supports_sessions is False or "id" not in message:
        return None
    if message.get("method") in (None, "initialize"):
        return None
    async with saved.locked():
        found = saved.load()
        if found.token is not None:  # another shim's, or this one's before the remote forgot it
            held = shim.session
            held.token, held.state, held.expires_at = found.token, found.state, found.expires_at
            return None
        try:
            await shim.create(url, protocol_version=MODERN_VERSION, headers=headers)
            return None
        except SessionError as exc:
            if exc.code == METHOD_NOT_FOUND:
                return None
            logger.info("no session for this conversation: %s", printable(exc.message))
            return jsonrpc.error(message["id"], exc.code, exc.message, exc.data)
        except httpx2.HTTPError:  # the request, sent as it is, meets what this met
            return None


async def _until_terminated(relaying: anyio.CancelScope, ended_by: list[int]) -> None:
    """A host that ends its server by a signal (SIGTERM, Ctrl-C's SIGINT) ends the relay as closing its stdin does."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for received in signals:
            ended_by.append(received)
            relaying.cancel()
            return


class Refusals(httpx2.AsyncBaseTransport):
    """The HTTP transport under the shim's session transport: the credentials on every request, read again once on
    a refusal, and the remote's refusal of them, or its absence, as one JSON-RPC error to each request.

    Without it a 401 would reach the host as a bare HTTP error and an unreachable remote would end the relay: the
    host would see its server crash. Each is logged once.
    """

    def __init__(self, url: str, credentials: Credentials) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._where = printable(url)
        self._credentials = credentials
        self._said: set[int] = set()
        self._reached = False  # a connection refused after this is the remote restarting

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        credentials = self._credentials
        if credentials.unread is not None:
            credentials.reread()
        request.headers.update(credentials.current)
        if request.method != "POST":
            return await self._inner.handle_async_request(request)
        if credentials.unread is not None:  # as a refused one: its answer says why, the next request reads again
            said = f"this server's credentials cannot be read yet ({credentials.unread}): each request reads them again"
            return self._refused(request, 401, INTERNAL_ERROR, said)
        response = await self._sent(request)
        if response.status_code in REFUSED_STATUSES and self._credentials.reread():
            await response.aclose()
            logger.info("the remote refused the credentials: sent again with the new values their files hold")
            request.headers.update(self._credentials.current)
            response = await self._sent(request)
        if response.status_code not in REFUSED_STATUSES:
            return response
        status = response.status_code
        reason = await _described(response)
        said = f"{self._where} refused this server's credentials (HTTP {status}{reason}): {self._advice()}"
        return self._refused(request, status, INTERNAL_ERROR, said)

    def _advice(self) -> str:
        """What to do about a refusal, by what was sent: none, a file's (read again already), a variable's."""
        if not self._credentials.current:
            options = "--bearer-env VAR, --bearer-file FILE or --header NAME=env:VAR"
            return f"set them with {options} in the host's configuration"
        if self._credentials.from_files:
            return "their file holds no other: write a fresh one there (each refusal reads it again)"
        return "give a fresh value in the host's configuration (its variable is read as the host starts this server)"

    async def _sent(self, request: httpx2.Request) -> httpx2.Response:
        """The remote's response, the request sent again while the remote restarts, for :data:`RESTART_WITHIN`."""
        restarted_by = anyio.current_time() + RESTART_WITHIN
        while True:
            try:
                response = await self._inner.handle_async_request(request)
            except httpx2.ConnectError as exc:
                if not self._reached or anyio.current_time() + RECONNECT_EVERY > restarted_by:
                    return self._unreachable(request, exc)
                await anyio.sleep(RECONNECT_EVERY)
                continue
            except httpx2.TransportError as exc:
                return self._unreachable(request, exc)
            self._reached = True
            wait = _retry_after(response)
            if wait is None or anyio.current_time() + wait > restarted_by:
                return response
            await response.aclose()
            logger.info("the remote restarts (HTTP 503): the request is sent again in %g s", wait)
            await anyio.sleep(wait)

    def _unreachable(self, request: httpx2.Request, exc: httpx2.TransportError) -> httpx2.Response:
        said = f"could not reach {self._where}: {type(exc).__name__}"
        return self._refused(request, 502, UPSTREAM_UNAVAILABLE, said)

    def _refused(self, request: httpx2.Request, status: int, code: int, said: str) -> httpx2.Response:
        """The error, under the id of the request it answers (the shim's own ``sessions/create`` waits for it)."""
        if status not in self._said:
            self._said.add(status)
            logger.warning("%s", said)
        try:
            sent = jsonrpc.loads(request.content)
        except (httpx2.RequestNotRead, ValueError):
            sent = None
        body = jsonrpc.dumps(jsonrpc.error(jsonrpc.echoable_id(jsonrpc.request_id_of(sent)), code, said))
        headers = [("content-type", "application/json")]
        return httpx2.Response(status, headers=headers, content=body)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _retry_after(response: httpx2.Response) -> float | None:
    """The seconds a 503's ``Retry-After`` (a number of them) asks a client to wait; ``None`` for any other answer."""
    said = response.headers.get("retry-after", "")
    return float(said) if response.status_code == 503 and said.isdigit() else None


async def _described(response: httpx2.Response) -> str:
    """The remote's ``error_description`` of its refusal (RFC 6750's, in its JSON body as the gateway and the
    ``mcp`` SDK send it), escaped, as ``": ..."``; empty when it gives none. At most :data:`MAX_REFUSAL` is read."""
    try:
        body = await read_bounded(response, MAX_REFUSAL)
    except httpx2.HTTPError:
        return ""
    finally:
        await response.aclose()
    if body is None:
        return ""
    try:
        described = jsonrpc.loads(body, answer=True).get("error_description")
    except (ValueError, AttributeError):
        return ""
    if not isinstance(described, str) or not described:
        return ""
    return ": " + printable(described)[:200]
