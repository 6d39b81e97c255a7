"""Which of a server's tools a caller may see and call, by a claim of her verified token (``--tool-allow``,
``--tool-deny``): as ToolHive's and Docker's MCP gateways let a group call some tools of a server and not others.

**The policy** (:class:`ToolPolicy`): rules, each naming callers by one top-level claim of their token,
``CLAIM=VALUE`` (a claim that is that string, or a list of strings that holds it, such as ``groups`` or ``roles``),
or every caller (``*``), and the tools it covers by glob patterns as ``fnmatch.fnmatchcase`` reads them (case
counts; ``*``, ``?``, ``[seq]``): translated once, at startup, by ``fnmatch.translate``, whose expressions match each
``*`` in an atomic group, so that a name costs time linear in its length for each pattern. A tool is a caller's when
no deny rule that names her covers it and, where allow rules exist, one that names her does: deny wins over allow,
and a caller whom no allow rule names has no tool. No rule: every tool, as without a policy. A user an auth proxy
names (``--auth-principal-header``) has no token, so no claim: ``*`` rules alone name her. The value is what a
server's table of a configuration file will carry (the same spellings, ``allow`` and ``deny`` lists); today the
flags of the one server a gateway serves build it.

**Where it holds** (:func:`guarded`): right behind the gateway's authentication, in front of everything else of
either app, ``--stdio``'s and ``--upstream``'s alike. A ``tools/call`` of a tool not hers is answered here, ``-32602``
(the MCP specification's code for a tool the server does not offer, as her ``tools/list`` does not offer it) with a
message that names the policy, and never reaches a process or the upstream; in a batch (2025), that element gets it
and every other ``-32600``, and nothing of the batch is forwarded, as for an invalid session. An answer to a
``tools/list`` (JSON, or an event in a stream; in either era; a stream resumed by ``Last-Event-ID`` too) lists her
tools alone, its ``nextCursor`` kept: a page may list fewer, or none, and the client follows the cursor as before.
It fails closed: a body it cannot read as strictly as any server may (``jsonrpc.read``'s strict reading: UTF-8 alone,
at most ``MAX_DEPTH`` deep) is refused, ``-32700``, never forwarded, since another server may read it otherwise (a
Node or Go server reads an invalid byte as U+FFFD), and an answer to a ``tools/list`` it cannot read is never passed.
"""

from __future__ import annotations

import codecs
import fnmatch
import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..._asgi import Replay, header, read_body, send_json, send_status, too_large
from ..._wire import jsonrpc, printable
from ..._wire.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MCP_PROTOCOL_VERSION_HEADER,
    PARSE_ERROR,
    http_status,
)
from ..._wire.sse import SSERewriter
from ...profiles import Era
from ._users import ProxiedUser

if TYPE_CHECKING:
    from ..._config import SessionsConfig
    from ._users import GatewayAuth

logger = logging.getLogger("mcp_sessions.gateway")

SPELLING: Final = "CLAIM=VALUE:PATTERN[,PATTERN...] or *:PATTERN[,PATTERN...]"
MAX_PATTERN: Final = 256
"""The longest pattern a rule takes: twice the longest tool name MCP recommends (128)."""
MAX_SHOWN: Final = 128
"""The most characters of a caller's tool name an error repeats."""
LOGGED: Final = 1024
"""How many (caller, refusal) pairs a refusal is logged once for: the most recent, so the log stays bounded."""
NEEDS_TOKENS: Final = (
    "--tool-allow and --tool-deny name callers by claims of the tokens the gateway verifies: give --auth-jwks"
)
_SPACE: Final = re.compile(r"\s")
_CALL: Final = "tools/call"
_LIST: Final = "tools/list"
_MCP_NAME: Final = b"mcp-name"
_UNREADABLE: Final = "The server's answer could not be read (not UTF-8, not JSON, or nested too deep)"
# The members whose repetition lets two parsers read two calls from one element.
_READ: Final = frozenset({"jsonrpc", "method", "params", "id"})


@dataclass(frozen=True)
class ToolRule:
    """One rule: the callers it names (``claim`` and ``value``; ``None`` for every caller) and the tool names its
    ``patterns`` cover."""

    claim: str | None
    value: str | None
    patterns: tuple[str, ...]
    _covers: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if (self.claim is None) != (self.value is None) or self.claim == "" or self.value == "":
            raise ValueError("a tool rule names a claim and its value, or neither (every caller)")
        if not self.patterns or any(not 0 < len(p) <= MAX_PATTERN or _SPACE.search(p) for p in self.patterns):
            raise ValueError(f"a tool rule's patterns are names or globs of 1 to {MAX_PATTERN} characters, no space")
        covers = re.compile("|".join(f"(?:{fnmatch.translate(pattern)})" for pattern in self.patterns))
        object.__setattr__(self, "_covers", covers)

    @classmethod
    def parsed(cls, spec: str, flag: str = "--tool-allow") -> ToolRule:
        """A rule as a flag spells it (:data:`SPELLING`): the patterns after the last ``:`` (a value may hold one,
        a tool name none), the claim before the first ``=``."""
        who, colon, patterns = spec.rpartition(":")
        claim, equals, value = who.partition("=")
        shown = printable(spec[:MAX_PATTERN])
        if not colon or (who != "*" and not (equals and claim and value)):
            raise ValueError(f"{flag} takes {SPELLING}, not {shown!r}")
        try:
            rule = cls(None, None, _listed(patterns)) if who == "*" else cls(claim, value, _listed(patterns))
        except ValueError as exc:
            raise ValueError(f"{flag} {shown!r}: {exc}") from None
        return rule

    def names(self, claims: Mapping[str, object]) -> bool:
        """Whether the rule names the caller whose token holds ``claims``."""
        if self.claim is None:
            return True
        held = claims.get(self.claim)
        if isinstance(held, list):
            return any(type(item) is str and item == self.value for item in held)
        return type(held) is str and held == self.value

    def covers(self, tool: str) -> bool:
        return self._covers.match(tool) is not None


def _listed(patterns: str) -> tuple[str, ...]:
    return tuple(pattern.strip() for pattern in patterns.split(","))


@dataclass(frozen=True)
class ToolPolicy:
    """A server's tools by caller: ``allow`` and ``deny`` rules (see the module)."""

    allow: tuple[ToolRule, ...] = ()
    deny: tuple[ToolRule, ...] = ()

    @classmethod
    def from_specs(
        cls,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        *,
        names: tuple[str, str] = ("--tool-allow", "--tool-deny"),
    ) -> ToolPolicy | None:
        """The policy the rules spelt as flags give (``--tool-allow``, ``--tool-deny``; a file's lists in the same
        spellings, their keys the ``names`` its errors give); ``None`` without any, where every caller has every
        tool."""
        allowed = tuple(ToolRule.parsed(spec, names[0]) for spec in allow)
        denied = tuple(ToolRule.parsed(spec, names[1]) for spec in deny)
        return cls(allowed, denied) if allowed or denied else None

    def of(self, claims: Mapping[str, object]) -> Callable[[str], bool]:
        """Whether a tool is the caller's whose token holds ``claims``: the rules that name her, chosen once."""
        allows = [rule for rule in self.allow if rule.names(claims)]
        denies = [rule for rule in self.deny if rule.names(claims)]
        every = not self.allow

        def allowed(tool: str) -> bool:
            if any(rule.covers(tool) for rule in denies):
                return False
            return every or any(rule.covers(tool) for rule in allows)

        return allowed

    def wrap(self, app: ASGIApp, *, max_body: int, max_response: int) -> ASGIApp:
        """``app`` behind the policy: a request's body read (up to ``max_body`` bytes, as the sessions read it), an
        answer to a ``tools/list`` held (up to ``max_response``) or read event by event."""
        return _ByPolicy(app, self, max_body, max_response)


def guarded(app: ASGIApp, auth: GatewayAuth | None, tools: ToolPolicy | None, config: SessionsConfig) -> ASGIApp:
    """``app`` behind the gateway's authentication (``auth``), and right behind it the tool policy (``tools``): the
    one way either app (``gateway_app``, ``stdio_gateway_app``) puts them in front of itself. A policy needs tokens
    the gateway verifies: without, a ``ValueError``."""
    if tools is not None:
        if auth is None or auth.verifier is None:
            raise ValueError(NEEDS_TOKENS)
        app = tools.wrap(app, max_body=config.max_body_size, max_response=config.max_response_size)
    return app if auth is None else auth.wrap(app)


def claims_of(scope: Scope) -> Mapping[str, object]:
    """The claims of the request's verified token; none for a user an auth proxy named, who has no token."""
    user = scope.get("user")
    if isinstance(user, AuthenticatedUser) and not isinstance(user, ProxiedUser):
        return user.access_token.claims or {}
    return {}


class _AnswerRefused(OSError):
    """A ``tools/list`` answer passed the bound, or could not be read: the client has had an error instead, and the
    app takes no more (an ``OSError``, as a closed connection's: the upstream proxy then closes its upstream
    request)."""


class _ByPolicy:
    """The policy in front of ``app`` (see the module)."""

    def __init__(self, app: ASGIApp, policy: ToolPolicy, max_body: int, max_response: int) -> None:
        self.app = app
        self.policy = policy
        self.max_body = max_body
        self.max_response = max_response
        # Once per caller and refusal, among the most recent: an operator sees why a user is refused, a loop of
        # refused calls does not fill the log.
        self._log_once = functools.lru_cache(maxsize=LOGGED)(_log_refusal)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if header(scope["headers"], b"content-encoding") not in (None, b"identity"):  # a body it could not read
            coded = jsonrpc.invalid_request(None, "a coded request body is not taken here (Content-Encoding)")
            return await send_json(send, 415, coded, b"")
        body = await read_body(receive, header(scope["headers"], b"content-length"), self.max_body)
        if type(body) is not bytes:  # gone (nothing to answer), or too large
            return None if body is None else await too_large(send, self.max_body)
        try:  # read as strictly as any server may: what it cannot read, it cannot judge, and never forwards
            parsed = jsonrpc.read(body, strict=True) if body else None
        except jsonrpc.Unreadable as unread:
            self._log_once(_caller(scope), str(unread))
            return await send_json(send, 400, jsonrpc.error(None, PARSE_ERROR, str(unread)), b"")
        allowed = self.policy.of(claims_of(scope))
        elements = parsed if isinstance(parsed, list) else [parsed]
        named = [value.decode("latin-1") for name, value in scope["headers"] if name.lower() == _MCP_NAME]
        for index, element in enumerate(elements):
            if (refusal := _refused(element, allowed, named)) is not None:
                self._log_once(_caller(scope), refusal["message"])
                return await _refuse(scope, send, elements, index, refusal, batch=isinstance(parsed, list))
        lists = {jsonrpc.hashable_id(e.get("id")) for e in elements if isinstance(e, dict) and e.get("method") == _LIST}
        resumed = scope["method"] == "GET" and header(scope["headers"], b"last-event-id") is not None
        if lists or resumed:  # its answers read, so never coded
            kept = [(name, value) for name, value in scope["headers"] if name.lower() != b"accept-encoding"]
            scope["headers"] = [*kept, (b"accept-encoding", b"identity")]

            def answers(answer: dict[str, Any]) -> bool:
                return resumed or jsonrpc.hashable_id(answer.get("id")) in lists

            send = _Listed(send, answers, allowed, self.max_response)
        await self.app(scope, Replay(body, receive), send)


def _caller(scope: Scope) -> str:
    user = scope.get("user")
    name = user.display_name if isinstance(user, AuthenticatedUser) else "an unknown caller"
    return printable(name[:MAX_SHOWN])


def _log_refusal(caller: str, message: str) -> None:
    logger.info("mcp-sessions gateway: refused to %s: %s", caller, message)


def _refused(element: object, allowed: Callable[[str], bool], named: list[str]) -> dict[str, Any] | None:
    """The error (code, message, data) for a call the policy refuses; ``None`` for any other element."""
    if not isinstance(element, dict):
        return None
    if _READ & getattr(element, "repeated", set()):
        return {"code": INVALID_REQUEST, "message": "a message that repeats a member name is not taken here"}
    if element.get("method") != _CALL:
        return None
    params = element.get("params")
    tool = params.get("name") if isinstance(params, dict) else None
    if type(tool) is not str or "name" in getattr(params, "repeated", set()):
        return {"code": INVALID_PARAMS, "message": "tools/call names its tool in params.name, once, as a string"}
    # A 2026-07-28 request repeats it in Mcp-Name (every one, if a client sent several): a server that read the
    # header would run that one.
    if allowed(tool) and all(said == tool or allowed(said) for said in named):
        return None
    shown = printable(tool[:MAX_SHOWN])
    message = f"Tool {shown!r} is not one this caller may call: the gateway's tool policy (--tool-allow, --tool-deny)"
    return {"code": INVALID_PARAMS, "message": message, "data": {"reason": "tool_policy"}}


async def _refuse(
    scope: Scope, send: Send, elements: list[Any], refused: int, error: dict[str, Any], *, batch: bool
) -> None:
    """Answer a request with a refused element: its error, or for a batch, it and ``-32600`` for every other
    element that expects an answer; nothing reaches the app."""
    modern = Era.of(header(scope["headers"], MCP_PROTOCOL_VERSION_HEADER)) is Era.MODERN
    if not batch:
        element = elements[refused]
        if "id" not in element:  # a notification: no answer, never forwarded
            return await send_status(send, 202, b"")
        answer = jsonrpc.error(element["id"], error["code"], error["message"], error.get("data"))
        return await send_json(send, http_status(error["code"], modern=modern), answer, b"")
    answers: list[dict[str, object]] = []
    for index, element in enumerate(elements):
        request_id = jsonrpc.request_id_of(element)
        if index == refused:
            answers.append(jsonrpc.error(request_id, error["code"], error["message"], error.get("data")))
        elif not isinstance(element, dict) or "id" in element:
            answers.append(jsonrpc.invalid_request(request_id, "batch refused: another element is refused"))
    if not answers:  # notifications alone
        return await send_status(send, 202, b"")
    await send_json(send, 400 if modern else 200, answers, b"")


class _Listed:
    """The ``send`` of a request whose answers to ``tools/list`` (those ``answers`` says) list the tools ``allowed``
    alone: a JSON answer held whole (up to the bound; past it, 502 and ``-32603``), an event stream rewritten event by
    event; an answer coded all the same (a stranger upstream), or one the reader does not take (not UTF-8, not JSON,
    nested too deep), is refused, never passed unread."""

    def __init__(
        self, send: Send, answers: Callable[[dict[str, Any]], bool], allowed: Callable[[str], bool], limit: int
    ) -> None:
        self._send = send
        self._answers = answers
        self._allowed = allowed
        self._limit = limit
        self._start: Message | None = None  # a JSON answer's, held for its body
        self._body = bytearray()
        self._events: SSERewriter | None = None
        self._text = codecs.getincrementaldecoder("utf-8")()  # a stream's bytes are UTF-8, split anywhere
        self._refused = False

    async def __call__(self, message: Message) -> None:
        if self._refused:
            raise _AnswerRefused("a tools/list answer was refused")
        kind = message["type"]
        if kind == "http.response.start":
            headers = {bytes(name).lower(): bytes(value).lower() for name, value in message.get("headers", ())}
            content_type = headers.get(b"content-type", b"")
            json = content_type.startswith(b"application/json")
            stream = content_type.startswith(b"text/event-stream")
            if (json or stream) and headers.get(b"content-encoding", b"identity") != b"identity":
                return await self._refuse("The server's answer came coded: the tool policy cannot read it", None)
            if json:
                self._start = message
                return None  # until its body is whole
            if stream:
                self._events = SSERewriter(self._event, max_event=self._limit)
                kept = [(n, v) for n, v in message.get("headers", ()) if bytes(n).lower() != b"content-length"]
                message = {**message, "headers": kept}
        elif kind == "http.response.body" and (events := self._events) is not None:
            last = not message.get("more_body", False)
            try:
                self._text.decode(message.get("body", b""), last)
                chunk = events.feed(message.get("body", b""))
            except (UnicodeDecodeError, jsonrpc.Unreadable):
                return await self._refuse(_UNREADABLE, b"")
            if events.overflowed:
                return await self._refuse(f"Response too large (limit {self._limit} bytes)", chunk)
            if last:
                chunk += events.flush()
            message = {**message, "body": chunk}
        elif kind == "http.response.body" and (start := self._start) is not None:
            self._body += message.get("body", b"")
            if len(self._body) > self._limit:
                return await self._refuse(f"Response too large (limit {self._limit} bytes)", None)
            if message.get("more_body", False):
                return None
            self._start = None
            body = bytes(self._body)
            try:
                body = (self._filtered(body) if body else None) or body
            except jsonrpc.Unreadable:
                return await self._refuse(_UNREADABLE, None)
            length = (b"content-length", str(len(body)).encode())
            kept = [(n, v) for n, v in start.get("headers", ()) if bytes(n).lower() != b"content-length"]
            await self._send({**start, "headers": [*kept, length]})
            message = {"type": "http.response.body", "body": body, "more_body": False}
        await self._send(message)

    def _event(self, data: str) -> str | None:
        if not data:  # an event that primes a stream (an id, empty data) says nothing
            return None
        filtered = self._filtered(data)
        return None if filtered is None else filtered.decode()

    def _filtered(self, body: bytes | str) -> bytes | None:
        """An answer (one message or a batch's) with the tools not the caller's left out; ``None`` when unchanged;
        :class:`jsonrpc.Unreadable` when the reader does not take it."""
        parsed = jsonrpc.read(body, answer=True, strict=True)
        changed = False
        for message in parsed if isinstance(parsed, list) else [parsed]:
            if not (jsonrpc.is_response(message) and self._answers(message)):
                continue
            result = message.get("result")
            tools = result.get("tools") if isinstance(result, dict) else None
            if isinstance(tools, list):
                kept = [tool for tool in tools if self._shown(tool)]
                changed = changed or len(kept) != len(tools)
                result["tools"] = kept
        return jsonrpc.dumps(parsed) if changed else None

    def _shown(self, tool: object) -> bool:
        return isinstance(tool, dict) and type(name := tool.get("name")) is str and self._allowed(name)

    async def _refuse(self, why: str, last: bytes | None) -> None:
        """End the answer with an error (``last``: a stream's bytes before it; else a 502 of its own), then stop the
        app."""
        self._refused = True
        self._body = bytearray()
        logger.warning("mcp-sessions gateway: a tools/list answer refused: %s", why)
        error = jsonrpc.dumps(jsonrpc.error(None, INTERNAL_ERROR, why))
        if last is None:
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(error)).encode())]
            await self._send({"type": "http.response.start", "status": 502, "headers": headers, "trailers": False})
            body = error
        else:
            body = last + b"event: message\r\ndata: " + error + b"\r\n\r\n"
        await self._send({"type": "http.response.body", "body": body, "more_body": False})
        raise _AnswerRefused(why)
