"""The relay ``connect`` runs between its host and the remote: JSON-RPC a line on standard input and output, and
Streamable HTTP as the ``mcp`` SDK's client speaks it (``streamable_http_client``), without the SDK.

Each message of the host's is a POST with the headers the transport needs (``Accept``, ``Content-Type``, the 2025
transport session's ``Mcp-Session-Id``, ``Mcp-Protocol-Version``, and for 2026-07-28 ``Mcp-Method`` and ``Mcp-Name``);
its answer, JSON or an event stream (read by :class:`~mcp_sessions._wire.sse.SSERewriter`), goes to the host a
message a line. Every read of either peer is bounded by :data:`MAX_MESSAGE`.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, BinaryIO, Final, TypeGuard

import anyio
import httpx2

from .._wire import jsonrpc
from .._wire.protocol import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    MCP_METHOD_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    MCP_SESSION_ID_HEADER,
    METHOD_NOT_FOUND,
    MODERN_VERSION,
)
from .._wire.sse import SSERewriter
from ..profiles import DRAFT, SESSION_META_KEY

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ..client import SessionTransport

logger = logging.getLogger("mcp_sessions.connect")

LISTENING: Final = httpx2.Timeout(30.0, read=None)
"""The GET stream's: a remote may have nothing to say for hours."""
MAX_MESSAGE: Final = 16 << 20
"""The most bytes of one message either way: a line of the host's, an answer or an event of the remote's."""
MAX_QUIET_STREAMS: Final = 2
"""The GET streams in a row that may end without a message (or not open) before the shim stops opening them."""
STREAMS: Final = "application/json, text/event-stream"
SESSION_ID: Final = MCP_SESSION_ID_HEADER.decode()
VERSION: Final = MCP_PROTOCOL_VERSION_HEADER.decode()
METHOD: Final = MCP_METHOD_HEADER.decode()
NAME: Final = "mcp-name"
CONNECTION_CLOSED: Final = -32000
"""The SDK's code for an answer that can no longer come."""
VERSION_META_KEY: Final = "io.modelcontextprotocol/protocolVersion"
NAMED_BY: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
"""The params member a 2026-07-28 request's ``Mcp-Name`` header repeats, by method (the SDK's)."""
_HEADER_SAFE: Final = re.compile(r"[\x20-\x7E]*")
GONE: Final = DRAFT.gone_codes()
LOST: Final = (
    "Session not found: the remote no longer knows this conversation's session (it restarted, or the "
    "session ended, with what it held); the next request gets a new session"
)
"""What the host hears of its conversation's session gone, for the person reading it: the shim creates the next
one itself (the remote's own text tells a client to create one, which a host behind the shim cannot)."""


class Host:
    """The host's end: its messages from standard input, one a line, and each message to it, one a line."""

    def __init__(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self._stdin = stdin
        self._stdout = stdout

    async def messages(self) -> AsyncIterator[dict[str, Any]]:
        """Each message of the host's until it closes standard input. A line that is not one (not JSON-RPC, or over
        :data:`MAX_MESSAGE` bytes) is dropped with a warning."""
        while line := await self._line():
            whole = line.endswith(b"\n") or len(line) <= MAX_MESSAGE
            message = jsonrpc.loads(line, answer=True) if whole else None
            if _is_message(message):
                yield message
            elif line.strip():
                logger.warning("a line from the host that is not a JSON-RPC message was dropped")
                while not whole and (line := await self._line()):  # the rest of it, a piece at a time
                    whole = line.endswith(b"\n")

    async def _line(self) -> bytes:
        # A thread reads it (standard input may be a pipe, a file or a terminal); a cancelled read is abandoned.
        line: bytes = await anyio.to_thread.run_sync(self._stdin.readline, MAX_MESSAGE + 1, abandon_on_cancel=True)
        return line

    def write(self, message: dict[str, Any]) -> None:
        """``message`` to the host, on a line of its own; a host that closed standard output has gone (its closed
        standard input ends the relay)."""
        with contextlib.suppress(OSError):
            self._stdout.write(jsonrpc.dumps(message) + b"\n")
            self._stdout.flush()


class Remote:
    """The remote's end: each message of the host's POSTed as the Streamable HTTP transport's client sends it (the
    ``mcp`` SDK's ``streamable_http_client``), each message of the remote's written to the host.

    A request's answer is JSON, or an event stream that may carry the remote's own requests (sampling,
    elicitation, roots) and notifications before it; in the 2025 era, ``initialize``'s answer names a transport
    session (``Mcp-Session-Id``), which every later message carries and whose GET stream carries the rest. A
    transport session the remote no longer knows (404: it restarted) is opened again with the host's own
    ``initialize``, once, and the message sent again in it.
    """

    def __init__(
        self,
        http: httpx2.AsyncClient,
        url: str,
        host: Callable[[dict[str, Any]], None],
        shim: SessionTransport,
        tasks: TaskGroup,
        *,
        conversation: bool,
    ) -> None:
        self._http, self._url, self._host, self._shim, self._tasks = http, url, host, shim, tasks
        self._conversation = conversation
        self.versions = Versions()
        self.session_id: str | None = None
        self._initialize: dict[str, Any] | None = None
        self._renewing = anyio.Lock()
        self._listening = anyio.CancelScope()
        self._posts: dict[object, tuple[anyio.CancelScope, bool]] = {}

    async def request(self, message: dict[str, Any]) -> None:
        """Send the host's request, in a scope its 2026-07-28 cancellation closes (:meth:`cancelled`)."""
        key = jsonrpc.hashable_id(message["id"])
        with anyio.CancelScope() as scope:
            self._posts[key] = scope, self.versions.modern(message)
            try:
                await self.post(message)
            finally:
                if self._posts.get(key, (None,))[0] is scope:
                    del self._posts[key]

    def cancelled(self, message: dict[str, Any]) -> bool:
        """Whether ``message`` is a 2026-07-28 host's ``notifications/cancelled``: that era cancels a request by
        closing its POST, and defines no notification to send (the SDK's client does the same)."""
        if message.get("method") != "notifications/cancelled":
            return False
        params = message.get("params")
        named = params.get("requestId") if isinstance(params, dict) else None
        post = self._posts.get(jsonrpc.hashable_id(named))
        if post is None:
            return self.versions.modern(message)
        scope, modern = post
        if modern:
            scope.cancel()
        return modern

    async def post(self, message: dict[str, Any], *, renew: bool = True) -> None:
        """POST one message of the host's; whatever the remote answers goes to the host. A request whose answer
        breaks off (the remote went away meanwhile) is answered with an error that says so."""
        if message.get("method") == "initialize":
            self._initialize = message
        body = jsonrpc.dumps(message)
        renew = renew and message is not self._initialize
        try:
            for again in (False, True):
                sent_in = self.session_id
                headers = self._headers(message)
                async with self._http.stream("POST", self._url, content=body, headers=headers) as response:
                    if again or not renew or response.status_code != 404 or sent_in is None:
                        await self._answered(message, response)
                        return
                await self._renew(sent_in)
        except httpx2.HTTPError as exc:
            if "method" in message and "id" in message:
                said = f"the remote's answer broke off ({type(exc).__name__})"
                self._host(jsonrpc.error(message["id"], CONNECTION_CLOSED, said))

    def _headers(self, message: dict[str, Any] | None) -> dict[str, str]:
        headers = {"accept": STREAMS, "content-type": "application/json"}
        if self.session_id is not None:
            headers[SESSION_ID] = self.session_id
        return headers | self.versions.headers(message)

    async def _answered(self, message: dict[str, Any], response: httpx2.Response) -> None:
        """The remote's answer to ``message``, to the host: a request's answer, or an error that says why none came."""
        status, kind = response.status_code, response.headers.get("content-type", "").lower()
        if message.get("method") == "initialize" and status < 300:
            self.session_id = response.headers.get(SESSION_ID)
        if "method" not in message or "id" not in message:  # the remote owes a notification or an answer nothing
            if message.get("method") == "notifications/initialized" and status < 300:
                self._listen()
            return
        request_id = message["id"]
        if kind.startswith("text/event-stream") and status < 300:
            async for data in _events(response):
                if self._relay(data, request_id):
                    return
            self._host(jsonrpc.error(request_id, CONNECTION_CLOSED, "the remote's stream ended without an answer"))
            return
        body = await read_bounded(response) if kind.startswith("application/json") else None
        if body is not None and self._relay(body, request_id):
            return
        if status == 404:
            gone = self.session_id is not None  # the SDK's reading: a 404 without a session is no such method
            code, said = (INVALID_REQUEST, "Session terminated") if gone else (METHOD_NOT_FOUND, "Not Found")
        else:
            code, said = INTERNAL_ERROR, f"the remote answered HTTP {status} without a JSON-RPC answer"
        self._host(jsonrpc.error(request_id, code, said))

    def _relay(self, data: bytes | str, request_id: object = None) -> bool:
        """One message of the remote's to the host; whether it answers the request ``request_id``."""
        message = jsonrpc.loads(data, answer=True)
        answer = jsonrpc.is_response(message)
        if not (answer or jsonrpc.is_request_or_notification(message)):
            if data:  # an event without data only names its id (a stream's first)
                logger.warning("the remote sent what is not a JSON-RPC message: dropped")
            return False
        if answer:
            if message.get("id") is None and request_id is not None:  # refused before its id was read
                message["id"] = request_id
            self.versions.initialized(message)
            if (token := self._shim.session.token) is not None and isinstance(message.get("result"), dict):
                _drop_echo(message["result"], token)
            if self._conversation and (code := jsonrpc.error_code(message)) in GONE:
                message["error"] = {"code": code, "message": LOST}  # its data: the shim's token, a bearer value
        self._host(message)
        return answer and request_id is not None

    async def _renew(self, lost: str) -> None:
        """A new transport session for ``lost``, which the remote no longer knows: the host's ``initialize`` again,
        then its ``notifications/initialized``; once, however many requests met the 404 together."""
        async with self._renewing:
            if self.session_id != lost or self._initialize is None:
                return
            logger.warning("the remote no longer knows this connection (it restarted?): connecting again")
            self.session_id = None
            body = jsonrpc.dumps({**self._initialize, "id": "mcp-sessions-connect"})
            async with self._http.stream("POST", self._url, content=body, headers=self._headers(None)) as response:
                if response.status_code < 300:
                    self.session_id = response.headers.get(SESSION_ID)
                await read_bounded(response)
            if self.session_id is not None:
                await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, renew=False)

    def _listen(self) -> None:
        """The 2025 transport session's GET stream, which carries what the remote says outside an answer
        (notifications, its own requests), opened after ``notifications/initialized`` as the SDK's client does."""
        self._listening.cancel()  # the stream of the transport session before this one
        if self.session_id is not None:
            self._listening = anyio.CancelScope()
            self._tasks.start_soon(self._listened, self._listening)

    async def _listened(self, scope: anyio.CancelScope) -> None:
        """Open the GET stream, and again when it ends, until :data:`MAX_QUIET_STREAMS` in a row carried nothing."""
        quiet = 0
        with scope:
            while quiet < MAX_QUIET_STREAMS and self.session_id is not None:
                quiet += 1
                headers = self._headers(None) | {"accept": "text/event-stream"}
                try:
                    async with self._http.stream("GET", self._url, headers=headers, timeout=LISTENING) as response:
                        if response.status_code in (404, 405):  # none (405), or the transport session is gone
                            return
                        if response.status_code == 200:
                            async for data in _events(response):
                                quiet = 0 if data else quiet  # a stream's first event may carry nothing
                                self._relay(data)
                except httpx2.HTTPError as exc:
                    logger.debug("the GET stream ended: %s", type(exc).__name__)
                await anyio.sleep(1.0)  # the SDK's client's pause before it opens the stream again

    async def close(self) -> None:
        """End the 2025 transport session, as the SDK's client does (the conversation's session goes with it only
        under ``--end-with-host``)."""
        self._listening.cancel()
        if self.session_id is not None:
            with contextlib.suppress(httpx2.HTTPError):
                await self._http.delete(self._url, headers=self._headers(None))


def _is_message(message: object) -> TypeGuard[dict[str, Any]]:
    """Whether ``message`` is a JSON-RPC message: a request, a notification or an answer."""
    return isinstance(message, dict) and message.get("jsonrpc") == "2.0" and ("method" in message or "id" in message)


async def _events(response: httpx2.Response) -> AsyncIterator[str]:
    """The data of each event of ``response``'s stream, as each completes; an event over :data:`MAX_MESSAGE` bytes
    ends the stream."""
    complete: list[str] = []

    def collect(data: str) -> None:
        complete.append(data)

    reader = SSERewriter(collect, max_event=MAX_MESSAGE)
    async for chunk in response.aiter_bytes():
        reader.feed(chunk)
        for data in complete:
            yield data
        complete.clear()
        if reader.overflowed:
            logger.warning("the remote sent an event over %d bytes: its stream ended", MAX_MESSAGE)
            return


async def read_bounded(response: httpx2.Response, limit: int = MAX_MESSAGE) -> bytes | None:
    """``response``'s body, or ``None`` past ``limit`` bytes (what is past it is not read)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _drop_echo(result: dict[str, Any], token: str) -> None:
    """Remove from ``result``'s ``_meta`` the echo of the shim's session ``token``: a bearer value the host
    never asked for."""
    if (meta := jsonrpc.meta(result)) is None:
        return
    echo = meta.get(SESSION_META_KEY)
    if isinstance(echo, dict) and echo.get("sessionId") == token:
        del meta[SESSION_META_KEY]


class Versions:
    """The HTTP headers each message of the host needs, as the SDK's own client session would set them.

    A 2026-07-28 request names its protocol version in its ``_meta``: its ``Mcp-Protocol-Version``,
    ``Mcp-Method`` and ``Mcp-Name`` say the same. A 2025 host's messages after its ``initialize`` carry the
    version the remote's answer chose, as do the shim's own (``None``: the GET stream, the end).
    """

    def __init__(self) -> None:
        self.negotiated: str | None = None
        self._initializing: set[object] = set()

    def headers(self, message: dict[str, Any] | None) -> dict[str, str]:
        """The headers ``message`` needs."""
        message = message or {}
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        version = (jsonrpc.meta(params) or {}).get(VERSION_META_KEY)
        if isinstance(version, str) and "method" in message:
            headers = {VERSION: version, METHOD: message["method"]}
            name = params.get(NAMED_BY.get(message["method"], ""))
            if isinstance(name, str):
                headers[NAME] = _header_value(name)
            return headers
        if message.get("method") == "initialize" and "id" in message:
            self._initializing.add(jsonrpc.hashable_id(message["id"]))
            return {}  # the negotiation itself
        return {} if self.negotiated is None else {VERSION: self.negotiated}

    def modern(self, message: dict[str, Any]) -> bool:
        """Whether ``message`` is sent in the 2026-07-28 era."""
        return self.headers(message).get(VERSION) == MODERN_VERSION

    def initialized(self, answer: dict[str, Any]) -> None:
        """If ``answer`` answers the host's ``initialize``, learn the version the remote chose."""
        key = jsonrpc.hashable_id(answer.get("id"))
        if key not in self._initializing:
            return
        self._initializing.discard(key)
        result = answer.get("result")
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        self.negotiated = version if isinstance(version, str) else None


def _header_value(value: str) -> str:
    """``value`` as an ``Mcp-Name`` header carries it: as it is when it survives an HTTP field, else in the SDK's
    ``=?base64?...?=``."""
    if _HEADER_SAFE.fullmatch(value) and value == value.strip() and not value.startswith("=?base64?"):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode()}?="
