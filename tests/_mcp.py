"""Raw-HTTP helpers for the end-to-end tests: build MCP requests of both eras, read JSON or SSE answers.

Deliberately independent of the middleware's own code, so that the tests check
the wire, not the implementation against itself.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final, Literal, Protocol, cast

import httpx
import mcp_types as types
from mcp import Client
from mcp_types import RequestParamsMeta
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_sessions import MCPSessionMiddleware
from mcp_sessions._pipeline._probe import PROBE_METHOD

MODERN: Final = "2026-07-28"
LEGACY: Final = "2025-11-25"
MCP_PATH: Final = "/mcp"
LOCAL: Final = "http://127.0.0.1:8000"
"""Where a test addresses an app it runs in process: a host the SDK's DNS-rebinding protection accepts."""

SESSION_KEY: Final = "io.modelcontextprotocol/session"
SESSIONS_EXTENSION: Final = "io.modelcontextprotocol/sessions"
SERVER_INFO_KEY: Final = "io.modelcontextprotocol/serverInfo"
PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"

HEADER_MISMATCH: Final = -32020
SESSION_NOT_FOUND: Final = -32043
SESSION_REQUIRED: Final = -32044
# The draft's words (its test vectors, seed 002), then what to do: clients show the message, not ``data``.
NOT_FOUND_MESSAGE: Final = (
    "Session not found: the session ended or is not this caller's; call sessions/create for a new one"
)
REQUIRED_MESSAGE: Final = (
    f'Session required: call sessions/create and send its sessionId in params._meta["{SESSION_KEY}"]'
)
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602

RFC3339_UTC: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z")

_BASE_HEADERS: Final = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
_NAME_PARAM: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


# -- building requests ----------------------------------------------------------


def session_meta(session: Mapping[str, Any] | str, *, state: str | None = None) -> dict[str, Any]:
    """The value of ``_meta["io.modelcontextprotocol/session"]`` for a session (its create result or its id)."""
    meta: dict[str, Any] = {"sessionId": session if isinstance(session, str) else session["sessionId"]}
    if state is not None:
        meta["state"] = state
    return meta


def sdk_meta(meta: dict[str, Any]) -> RequestParamsMeta:
    """``meta`` as the ``meta=`` (``_meta``) of the mcp SDK's requests: the same dict, typed.

    ``RequestParamsMeta`` is an open TypedDict (``extra_items=Any``, PEP 728) whose other keys
    round-trip; mypy does not support ``extra_items`` yet and would refuse keys such as
    ``io.modelcontextprotocol/session`` in it, so this says what the SDK's own type says.
    """
    return cast(RequestParamsMeta, meta)


def modern_request(
    method: str,
    params: Mapping[str, Any] | None = None,
    *,
    id: Any = 1,
    session: Any = None,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A 2026-07-28 request: the envelope in ``params._meta``, plus ``session`` (raw) under the session key.

    Pass ``id=None`` for a notification (no ``id`` member at all).
    """
    body_params = dict(params or {})
    full_meta: dict[str, Any] = {PROTOCOL_VERSION_KEY: MODERN, CLIENT_CAPABILITIES_KEY: {}}
    full_meta.update(meta or {})
    if session is not None:
        full_meta[SESSION_KEY] = session
    body_params["_meta"] = full_meta
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": body_params}
    if id is not None:
        body["id"] = id
    return body


def legacy_request(
    method: str,
    params: Mapping[str, Any] | None = None,
    *,
    id: Any = 1,
    session: Any = None,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A 2025-era request; ``_meta`` only when a session or other metadata is given."""
    body_params = dict(params or {})
    full_meta = dict(meta or {})
    if session is not None:
        full_meta[SESSION_KEY] = session
    if full_meta:
        body_params["_meta"] = full_meta
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if body_params:
        body["params"] = body_params
    if id is not None:
        body["id"] = id
    return body


def modern_headers(body: Mapping[str, Any], **extra: str) -> dict[str, str]:
    """The headers a 2026-07-28 client sends for ``body``: version, Mcp-Method and, where due, Mcp-Name."""
    headers = {**_BASE_HEADERS, "Mcp-Protocol-Version": MODERN, "Mcp-Method": body["method"]}
    name_param = _NAME_PARAM.get(body["method"])
    params = body.get("params") or {}
    if name_param is not None and isinstance(params.get(name_param), str):
        headers["Mcp-Name"] = params[name_param]
    headers.update({key.replace("_", "-"): value for key, value in extra.items()})
    return headers


def era_request(era: str, method: str, params: Mapping[str, Any] | None = None, *, id: Any = 1, **meta: Any) -> Any:
    """A request of ``era``'s wire (``MODERN`` or ``LEGACY``), ``meta`` its ``_meta`` entries."""
    build = modern_request if era == MODERN else legacy_request
    return build(method, params, id=id, meta=meta or None)


def era_post(http: Poster, url: str, era: str, body: Any, **headers: str) -> httpx.Response:
    """POST ``body`` with the headers a client of ``era`` sends (a 2025 client: its version header only)."""
    sent = modern_headers(body) if era == MODERN else {**_BASE_HEADERS, "MCP-Protocol-Version": LEGACY}
    return cast("httpx.Client", http).post(url, json=body, headers={**sent, **headers})


def era_session(http: Poster, url: str, era: str, **headers: str) -> str:
    """A new session's token, from ``sessions/create`` on ``era``'s wire (the one session-creating helper)."""
    response = era_post(http, url, era, era_request(era, "sessions/create"), **headers)
    assert response.status_code == 200, response.text
    token: str = answer(response)["result"]["session"]["sessionId"]
    return token


# -- reading responses ----------------------------------------------------------


def sse_events(text: str) -> list[str]:
    """The data of each event in a ``text/event-stream`` body (comments and empty events skipped)."""
    events = []
    for block in re.split(r"\r\n\r\n|\n\n|\r\r", text):
        data = [line[5:].removeprefix(" ") for line in re.split(r"\r\n|\n|\r", block) if line.startswith("data:")]
        if data and data != [""]:  # an empty data buffer dispatches no event (WHATWG), a priming event's
            events.append("\n".join(data))
    return events


def messages(response: httpx.Response) -> list[dict[str, Any]]:
    """Every JSON-RPC message of a response, in order, whether it came as JSON or as SSE."""
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        return [json.loads(data) for data in sse_events(response.text)]
    if content_type.startswith("application/json"):
        parsed = json.loads(response.content)
        return parsed if isinstance(parsed, list) else [parsed]
    raise AssertionError(f"unexpected content-type {content_type!r} (HTTP {response.status_code}): {response.text!r}")


def answer(response: httpx.Response) -> dict[str, Any]:
    """The one response message (with an ``id``) of a response; notifications before it are skipped."""
    answers = [m for m in messages(response) if "id" in m and "method" not in m]
    assert len(answers) == 1, answers
    return answers[0]


async def aiter_messages(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """JSON-RPC messages from the lines of a streaming SSE response, each yielded as soon as its event ends."""
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data:
                yield json.loads("\n".join(data))
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


DROP: Any = object()
"""A claim or header member's value meaning: leave the member out."""


def b64(data: bytes) -> str:
    """Unpadded base64url, as JWS writes it."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def members(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without the members whose value is ``DROP``."""
    return {name: value for name, value in values.items() if value is not DROP}


def hs_jws(
    header: Mapping[str, Any],
    payload: Mapping[str, Any] | bytes,
    key: bytes,
    *,
    digest: Any = hashlib.sha256,
    signature: bytes | None = None,
) -> str:
    """A compact JWS built by hand, HMAC-signed with ``key`` (SHA-256 unless ``digest`` says) unless ``signature``."""
    raw = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode()
    signing_input = f"{b64(json.dumps(header, separators=(',', ':')).encode())}.{b64(raw)}"
    if signature is None:
        signature = hmac.new(key, signing_input.encode(), digest).digest()
    return f"{signing_input}.{b64(signature)}"


def jwt_claims(token: str) -> dict[str, Any]:
    """The payload of a compact JWS, decoded WITHOUT verifying anything."""
    claims: dict[str, Any] = json.loads(unb64(token.split(".")[1]))
    return claims


def jwt_header(token: str) -> dict[str, Any]:
    """The JOSE header of a compact JWS, decoded WITHOUT verifying anything."""
    header: dict[str, Any] = json.loads(unb64(token.split(".")[0]))
    return header


def with_claims(token: str, **changes: Any) -> str:
    """``token`` with its payload edited (``DROP`` removes a claim), header and signature kept: a forgery."""
    header, _payload, signature = token.split(".")
    claims = members({**jwt_claims(token), **changes})
    return f"{header}.{b64(json.dumps(claims, separators=(',', ':')).encode())}.{signature}"


def resigned(token: str, key: bytes, *, header: Mapping[str, Any] | None = None, **changes: Any) -> str:
    """``token`` with its header and claims changed (``DROP`` removes a claim), HMAC-signed again with ``key``."""
    return hs_jws({**jwt_header(token), **(header or {})}, members({**jwt_claims(token), **changes}), key)


def tool_text(message: Mapping[str, Any]) -> str:
    """The text of a successful tool result's single text content."""
    result = message["result"]
    assert result.get("isError") is False, message
    [content] = result["content"]
    assert content["type"] == "text"
    text: str = content["text"]
    return text


# -- clients ----------------------------------------------------------------------


class Poster(Protocol):
    """What the clients below send with: an ``httpx.Client``, or Starlette's ``TestClient`` (in process)."""

    def post(self, url: str, *, json: Any, headers: Mapping[str, str]) -> Any: ...  # an httpx or httpx2 Response


class _Client:
    """What both clients below do the same way, each in its own wire (its ``body`` and ``headers_for``): a request
    to one MCP endpoint, over a real connection or in process through a TestClient; a tool call, and a new session."""

    body: Callable[..., dict[str, Any]]
    headers_for: Callable[..., dict[str, str]]

    def __init__(self, http: Poster, base_url: str, path: str = MCP_PATH) -> None:
        self.http = cast("httpx.Client", http)  # a TestClient posts alike, answering with httpx2's Response
        self.url = base_url + path

    def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        session: Any = None,
        meta: Mapping[str, Any] | None = None,
        id: Any = 1,
        **extra_headers: str,
    ) -> tuple[httpx.Response, dict[str, Any]]:
        body = self.body(method, params, id=id, session=session, meta=meta)
        response = self.http.post(self.url, json=body, headers=self.headers_for(body, **extra_headers))
        return response, answer(response)

    def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, session: Any = None, **kwargs: Any
    ) -> tuple[httpx.Response, dict[str, Any]]:
        return self.request("tools/call", {"name": name, "arguments": dict(arguments or {})}, session=session, **kwargs)

    def create_session(self, params: Mapping[str, Any] | None = None, **headers: str) -> dict[str, Any]:
        """A new session's create result (``sessionId``, ``expiresAt``), ``headers`` sent with the request."""
        response, message = self.request("sessions/create", params, session=None, meta=None, id=1, **headers)
        assert response.status_code == 200, response.text
        assert "result" in message, message  # the error, said
        session: dict[str, Any] = message["result"]["session"]
        return session


class ModernClient(_Client):
    """Sends 2026-07-28 requests."""

    body = staticmethod(modern_request)
    headers_for = staticmethod(modern_headers)

    def post(self, body: Any, headers: Mapping[str, str] | None = None) -> httpx.Response:
        sent = modern_headers(body) if headers is None else dict(headers)
        return self.http.post(self.url, json=body, headers=sent)


class LegacyClient(_Client):
    """Speaks the 2025-11-25 handshake wire; keeps the transport's ``mcp-session-id`` in stateful mode."""

    body = staticmethod(legacy_request)

    def __init__(self, http: Poster, base_url: str, path: str = MCP_PATH, version: str = LEGACY) -> None:
        super().__init__(http, base_url, path)
        self.version = version
        self.transport_session_id: str | None = None
        self.initialize_result: dict[str, Any] | None = None

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {**_BASE_HEADERS, "MCP-Protocol-Version": self.version}
        if self.transport_session_id is not None:
            headers["Mcp-Session-Id"] = self.transport_session_id
        headers.update({key.replace("_", "-"): value for key, value in extra.items()})
        return headers

    def headers_for(self, body: Any, **extra: str) -> dict[str, str]:
        return self.headers(**extra)

    def initialize(self) -> dict[str, Any]:
        body = legacy_request(
            "initialize",
            {"protocolVersion": self.version, "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}},
            id=0,
        )
        response = self.http.post(self.url, json=body, headers=_BASE_HEADERS)
        assert response.status_code == 200, response.text
        self.transport_session_id = response.headers.get("mcp-session-id")
        result: dict[str, Any] = answer(response)["result"]
        self.initialize_result = result
        self.version = result["protocolVersion"]  # as a client does: an older server answers an older one
        initialized = self.http.post(
            self.url, json=legacy_request("notifications/initialized", id=None), headers=self.headers()
        )
        assert initialized.status_code == 202, initialized.text
        return result

    def post(self, body: Any, **extra_headers: str) -> httpx.Response:
        return self.http.post(self.url, json=body, headers=self.headers(**extra_headers))


class RecordingApp:
    """Records the POST bodies reaching the MCP server (raw, and parsed in ``seen``); the middleware's
    probes (``mcp-sessions/probe``: whether the server takes a request it answers itself) in ``probes``.

    The session middleware runs at the MCP endpoint inside an app, in front of
    its transport: so around an app the recorder taps the transport itself
    (whatever the app puts before it, the session work included once placed);
    around the session middleware, or an app with no MCP transport inside, it
    records at its own door.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.raw: list[bytes] = []
        self.seen: list[Any] = []
        self.probes: list[Any] = []
        self._tapped = not isinstance(app, MCPSessionMiddleware) and _tap_transport(app, self)

    def clear(self) -> None:
        self.raw.clear()
        self.seen.clear()
        self.probes.clear()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._tapped:
            await self.app(scope, receive, send)
        else:
            await self.record(self.app, scope, receive, send)

    def keep(self, scope: Scope, body: bytes, message: Any) -> None:
        """Record one POST that reached the server (not a probe)."""
        self.raw.append(body)
        self.seen.append(message)

    async def record(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        message = json.loads(body)
        first = message[0] if isinstance(message, list) and message else message
        if isinstance(first, dict) and first.get("method") == PROBE_METHOD:
            self.probes.append(message)  # the middleware asking whether the server takes a request
        else:
            self.keep(scope, body, message)
        replay = replaying({"type": "http.request", "body": body, "more_body": False}, receive)
        await app(scope, replay, send)


class _Tap:
    """Stands where an MCP transport stood: records for ``recording``, and looks like the transport."""

    def __init__(self, transport: Any, recording: RecordingApp) -> None:
        self.transport = transport
        self.recording = recording

    @property
    def session_manager(self) -> Any:
        return self.transport.session_manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.recording.record(self.transport, scope, receive, send)


def _tap_transport(node: Any, recording: RecordingApp, depth: int = 0) -> bool:
    """Put a :class:`_Tap` where the MCP transport is inside ``node`` (routes, mounts, ``.app`` chains)."""
    if depth > 32:
        return False
    for route in getattr(node, "routes", None) or []:
        if _tap_transport(route, recording, depth + 1):
            return True
    inner = getattr(node, "app", None)
    if inner is None or isinstance(inner, _Tap):
        return False
    # The transport itself: a placed middleware looks like one too (it has the transport's session_manager).
    if hasattr(inner, "session_manager") and not hasattr(getattr(inner, "app", None), "session_manager"):
        node.app = _Tap(inner, recording)
        return True
    return _tap_transport(inner, recording, depth + 1)


class AnswersProbes:
    """A fake server's part that the middleware asks about (``mcp-sessions/probe``): it knows no such method.

    So it takes every request the middleware answers itself, as a real server with no checks to fail would.
    ``batches=False`` refuses a batch as the ``mcp`` SDK does (400, -32600). Any other request reaches
    ``app`` as it came: the first body chunk is handed back before the rest is read.
    """

    def __init__(self, app: ASGIApp, *, batches: bool = True) -> None:
        self.app = app
        self.batches = batches

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        json_post = scope["type"] == "http" and scope["method"] == "POST" and _is_json(scope)
        if not json_post:
            return await self.app(scope, receive, send)
        first = await receive()
        try:
            message = json.loads(first.get("body", b"")) if not first.get("more_body", False) else None
        except ValueError:
            message = None
        probe = message[0] if isinstance(message, list) and message else message
        if isinstance(probe, dict) and probe.get("method") == PROBE_METHOD:
            if isinstance(message, list) and not self.batches:
                error: Any = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Batches are refused"}}
                return await _send_json(send, 400, error)
            error = {
                "jsonrpc": "2.0",
                "id": probe.get("id"),
                "error": {"code": METHOD_NOT_FOUND, "message": "Method not found"},
            }
            return await _send_json(send, 200, [error] if isinstance(message, list) else error)
        await self.app(scope, replaying(first, receive), send)


def replaying(first: Any, receive: Receive) -> Receive:
    """A ``receive`` that hands ``first`` back once, then reads on from ``receive``."""
    handed = False

    async def replay() -> Any:
        nonlocal handed
        if handed:
            return await receive()
        handed = True
        return first

    return replay


def _is_json(scope: Scope) -> bool:
    content_type = next((value for name, value in scope["headers"] if name == b"content-type"), b"")
    return content_type.lower().startswith(b"application/json")


async def _send_json(send: Send, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


# -- the session methods through the mcp SDK's own client ------------------------------------------------


class CreateSessionRequest(types.Request[types.RequestParams | None, Literal["sessions/create"]]):
    method: Literal["sessions/create"] = "sessions/create"
    params: types.RequestParams | None = None


class DeleteSessionRequest(types.Request[types.RequestParams, Literal["sessions/delete"]]):
    method: Literal["sessions/delete"] = "sessions/delete"
    params: types.RequestParams


class CreateSessionResult(types.Result):
    session: dict[str, Any]


class DeleteSessionResult(types.Result):
    pass


async def create_session(client: Client) -> dict[str, Any]:
    result = await client.session.send_request(CreateSessionRequest(), CreateSessionResult)
    return result.session


def sdk_session_meta(session: dict[str, Any], state: str | None = None) -> RequestParamsMeta:
    return sdk_meta({SESSION_KEY: session_meta(session, state=state)})
