"""``mcp-sessions create URL``: open a session for a client that can only add request metadata.

The command sends ``sessions/create`` through the client's session transport, over an HTTP
transport of its own that treats the server as a stranger: no redirect is followed (the
transport level follows none: a 3xx is the server's answer), no content coding is asked for or
read (``Accept-Encoding: identity``; a coded answer is refused unread), each answer is read whole
up to ``MAX_ANSWER`` bytes within one deadline from connect to its last byte, and every string
of the server's that the command prints is :func:`printable`. A refusal says the server's own
status and the start of its answer, and suggests ``--legacy`` when the server refused the
2026-07-28 request as a server that speaks only 2025-11-25 does.

**What it shows of a stranger's answer**: its text escaped and cut short, and what it means.
Every string a server chose (an error message, a tool's text, a header, a body) reaches a terminal
only through :func:`printable`: a control character in it could otherwise set the window title
(``ESC ] 0;… BEL``), clear the screen (``ESC [2J``), start a sequence with the one-character CSI
(U+009B) or reorder what follows (U+202E). :func:`excerpt` is the bounded, one-line start of a
body; :func:`handshake_only` reads the refusal a 2025-11-25 server gives a 2026-07-28 request.

The conformance pack has the same functions (``mcp_sessions_conformance/_answers.py``): it is a
distribution of its own that imports nothing of this package, and these few lines are the price
(``tests/unit/test_answers.py`` holds both copies to the same cases).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shlex
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Final, TextIO, TypeVar

from .._wire import printable
from .._wire.protocol import LEGACY_VERSIONS
from ..profiles import SESSION_META_KEY
from . import EXIT_OK, Failed, UsageError
from ._credentials import add_credential_arguments, credential_headers

if TYPE_CHECKING:
    import httpx

    from ..client import HeldSession

DEADLINE: Final = 60.0
"""Seconds one request may take in all, from connect to its answer's last byte (``--request-timeout``)."""
MAX_ANSWER: Final = 1 << 20
"""The most bytes read of one answer: a ``sessions/create`` result is a few hundred."""
LEGACY: Final = "2025-11-25"
EXCERPT_CHARS: Final = 240
"""The most characters of an answer's body a command shows (then ``…``)."""
T = TypeVar("T")
_HANDSHAKE_REFUSAL: Final = re.compile(
    r"session[ _-]?id|not initiali[sz]ed|protocol[ _-]?version",
    re.IGNORECASE,
)


DESCRIPTION: Final = (
    "Send sessions/create to the MCP endpoint URL and print the new session: "
    "its stable id, its sessionId (a bearer secret) and the exact argument "
    "that passes it through tools that can only add request metadata, such as "
    "the MCP Inspector CLI's --metadata. Exit status: 0 created, 1 refused or "
    "unreachable, 2 usage error."
)


def excerpt(body: bytes | str, limit: int = EXCERPT_CHARS) -> str:
    """The start of ``body`` on one line: UTF-8 read leniently, runs of white space as one space, at most
    ``limit`` characters (then ``…``), :func:`printable`. Reads at most ``4 * limit`` bytes of it."""
    head = body[: 4 * limit]
    decoded = head.decode("utf-8", "replace") if isinstance(head, bytes) else head
    text = " ".join(decoded.split())
    cut = len(body) > len(head) or len(text) > limit
    return printable(text[:limit]) + ("…" if cut else "")


def handshake_only(status: int, text: str) -> bool:
    """Whether ``status`` and ``text`` (its body), the answer to a 2026-07-28 request, are how a server that
    speaks only 2025-11-25 refuses it: HTTP 400 saying that a transport session is missing or that the
    protocol version is not one it takes. mcp 1.x (stateful): "Bad Request: Missing session ID"; mcp 1.x
    (stateless) and the TypeScript SDK: "Bad Request: Unsupported protocol version: 2026-07-28";
    the TypeScript SDK (server-everything): "Bad Request: Server not initialized" or "No valid session ID
    provided". mcp 2.x serves 2026-07-28 itself."""
    start = text[: 4 * EXCERPT_CHARS]
    return status == 400 and _HANDSHAKE_REFUSAL.search(start) is not None


def add_arguments(create: argparse.ArgumentParser) -> None:
    """The arguments of ``create``."""
    create.add_argument("url", help="the MCP endpoint, e.g. http://127.0.0.1:8000/mcp")
    create.add_argument("--json", action="store_true", help="print the session as JSON")
    add_request_arguments(create)


def add_request_arguments(command: argparse.ArgumentParser) -> None:
    """The arguments of the request that ``create`` and ``delete`` send."""
    command.add_argument(
        "--protocol-version",
        default="2026-07-28",
        help="the era of the request (default 2026-07-28)",
    )
    command.add_argument(
        "--legacy",
        action="store_true",
        help=f"send it as a {LEGACY} request",
    )
    command.add_argument(
        "--request-timeout",
        type=float,
        default=DEADLINE,
        metavar="SECONDS",
        help=f"the most one request may take, from connect to its answer's last byte (default {DEADLINE:g})",
    )
    add_credential_arguments(command)


def _guarded(deadline: float, uds: str | None = None) -> tuple[httpx.AsyncBaseTransport, list[httpx.Response]]:
    """An HTTP transport (through the Unix socket ``uds``, if given) that reads each answer whole within the bounds,
    and the list of the answers it read (each with its request)."""
    import anyio
    import httpx

    seen: list[httpx.Response] = []

    class Guarded(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            request.headers["Accept-Encoding"] = "identity"
            try:
                with anyio.fail_after(deadline):
                    response = await super().handle_async_request(request)
                    try:
                        body = await _bounded(response, request)
                    finally:
                        await response.aclose()
            except TimeoutError:
                message = f"no whole answer within {deadline:g} s"
                raise httpx.ReadTimeout(message, request=request) from None
            status = response.status_code
            answer = httpx.Response(status, headers=response.headers, content=body, request=request)
            seen.append(answer)
            return answer

    return Guarded(uds=uds), seen


async def _bounded(response: httpx.Response, request: httpx.Request) -> bytes:
    """The body of ``response``, unless it is coded or over ``MAX_ANSWER`` bytes (``httpx.DecodingError``)."""
    import httpx

    status = response.status_code
    coding = response.headers.get("content-encoding", "").strip().lower()
    if coding not in ("", "identity"):
        message = f"HTTP {status}, an answer coded '{coding}'"
        raise httpx.DecodingError(message, request=request)
    body = bytearray()
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) > MAX_ANSWER:
            message = f"HTTP {status}, an answer over {MAX_ANSWER} bytes"
            raise httpx.DecodingError(message, request=request)
    return bytes(body)


def _explained(seen: list[httpx.Response], version: str, command: str) -> str:
    """The answer to the ``command``'s request for a person, a line each, after a line break: status, body's start,
    redirect; and whether to try ``--legacy``. Its request is the last POST (on the 2025 wire the transport session it
    opened ends with a DELETE after it); with no POST answered, the last answer read."""
    if not seen:
        return ""
    last = seen[-1]
    for answer in reversed(seen):
        if answer.request.method == "POST":
            last = answer
            break
    body = excerpt(last.content) if last.content else "(no body)"
    said = f"\n  the server answered HTTP {last.status_code}: {body}"
    location = last.headers.get("location")
    if location is not None and last.is_redirect:
        target = excerpt(location)
        said += f"\n  a redirect to {target}: {command} follows none (is that the server's URL?)"
    if version not in LEGACY_VERSIONS and handshake_only(last.status_code, last.text):
        said += f"\n  The server seems to speak only {LEGACY}: try again with --legacy."
    return said


def run(
    args: argparse.Namespace,
    stdin: TextIO,
    stdout: TextIO,
    stderr: TextIO,
    environ: Mapping[str, str],
) -> int:
    """Run ``create``: open a session and print how to pass it; returns the exit status."""
    session = sent(args, environ, "create", lambda shim, **request: shim.create(args.url, **request))
    _print_session(session, args.json, stdout)
    return EXIT_OK


def sent(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    command: str,
    request: Callable[..., Awaitable[T]],
    token: str | None = None,
) -> T:
    """What ``request`` gives, sent through a session transport of its own (holding the session ``token``) over the
    guarded HTTP transport, as ``args`` say (their credentials from ``environ``); :class:`Failed`, saying why, if it
    failed."""
    try:
        from ..client import HeldSession, HttpxSessionTransport, SessionError
    except ImportError as exc:
        raise UsageError(f"{exc} ({command} sends its request with httpx)") from None
    headers = credential_headers(args, environ)
    version = LEGACY if args.legacy else args.protocol_version
    timeout = args.request_timeout
    if not 0 < timeout < float("inf"):
        raise UsageError(f"--request-timeout takes a positive number of seconds, not {timeout}")
    inner, seen = _guarded(timeout)

    async def send() -> T:
        held = HeldSession(token)
        async with HttpxSessionTransport(inner, session=held, auto_create=False) as shim:
            return await request(shim, protocol_version=version, headers=headers)

    url = printable(args.url)
    try:
        return asyncio.run(send())
    except SessionError as exc:
        said = f"the server refused sessions/{command}: {excerpt(str(exc))}"
    except OSError as exc:
        said = f"could not reach {url}: {excerpt(str(exc))}"
    except Exception as exc:
        # httpx's errors, without importing httpx here.
        said = f"no answer from {url}: {type(exc).__name__}: {excerpt(str(exc))}"
    raise Failed(said + _explained(seen, version, command))


def _print_session(session: HeldSession, as_json: bool, stdout: TextIO) -> None:
    """The session and how to pass it; the server's strings :func:`printable` (JSON escapes them itself)."""
    token = session.token
    meta = json.dumps({"sessionId": token}, separators=(",", ":"))
    expires = None
    if session.expires_at:
        expires = session.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    if as_json:
        report = {
            "sessionId": token,
            "id": session.id,
            "expiresAt": expires,
            "meta": {SESSION_META_KEY: {"sessionId": token}},
        }
        stdout.write(json.dumps(report, indent=2) + "\n")
        return
    stdout.write(
        f"session: {printable(str(session.id))}  (the stable id: safe to log)\n"
        f"expires: {expires}\n"
        f"sessionId: {printable(str(token))}\n"
        "  (a bearer secret: whoever holds it uses the session)\n"
        "\n"
        "Send it in each request's params._meta, for example with the MCP Inspector CLI:\n"
        f"  --metadata {shlex.quote(f'{SESSION_META_KEY}={meta}')}\n"
        "or any client's request metadata:\n"
        f"  {json.dumps({SESSION_META_KEY: {'sessionId': token}})}\n"
    )
