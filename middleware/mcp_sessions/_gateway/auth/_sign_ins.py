"""The sign-ins' routes and pages (``_oauth``): the answer that asks a user to sign in, the sign-in URL, the
callback, each user's view of her grants (``/oauth/grants``), the Client ID Metadata Document, and the pages,
redirects and cookies a browser is answered with."""

from __future__ import annotations

import html
import logging
from collections.abc import Sequence
from typing import Final, Protocol

from starlette.datastructures import Headers, QueryParams
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..._pipeline import Rejection, error_answer
from ..._wire import jsonrpc
from ..._wire.protocol import MCP_PROTOCOL_VERSION_HEADER
from ...profiles import Era
from ._exchange import ExchangeRefused
from ._grants import User, user_of

logger = logging.getLogger("mcp_sessions.gateway")

URL_ELICITATION_REQUIRED: Final = -32042
"""2025-11-25's ``URLElicitationRequiredError`` (retired by 2026-07-28)."""
MISSING_CAPABILITY: Final = -32021
"""2026-07-28's error for a request that needs a client capability the client did not declare."""
AUTHORIZE_PATH: Final = "/oauth/authorize/"
CALLBACK_PATH: Final = "/oauth/callback"
GRANTS_PATH: Final = "/oauth/grants"
CLIENT_PATH: Final = "/oauth/client.json"
"""Where the gateway serves its Client ID Metadata Document, on its callback's origin, where that is https."""
COOKIE: Final = "mcp_sessions_sign_in"
# The methods whose 2026-07-28 answer may be an input_required result (SEP-2322's multi-round-trip requests).
_ASKING: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
_MAX_BODY: Final = 64 * 1024
_PAGE_HEADERS: Final = {
    "cache-control": "no-store",
    # The callback's URL carries a code: no Referer gives it to another site (RFC 9700 §4.2.4).
    "referrer-policy": "no-referrer",
    "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
}


class SignInRequired(ExchangeRefused):
    """The user has no grant at the upstream's server yet: her request is answered with the sign-in ``url``."""

    def __init__(self, url: str, server: str) -> None:
        super().__init__(200, "sign_in_required", f"sign in to {server} at {url}")
        self.url = url
        self.server = server

    def answer_to(self, body: object, scope: Scope) -> Rejection:
        """The answer to the request whose body (read whole, else not ``bytes``) is ``body``: on 2025-11-25, the
        ``URLElicitationRequiredError``; on 2026-07-28, an ``input_required`` result carrying ``elicitation/create``
        in URL mode for a call that may take one from a client that declared it, else the missing capability's
        error. Each message names the URL, for a client that shows no elicitation."""
        message = jsonrpc.loads(body) if isinstance(body, bytes) and len(body) <= _MAX_BODY else None
        request = message if isinstance(message, dict) else {}
        request_id = request.get("id")
        text = f"Sign in to {self.server} to use this server: open {self.url}"
        elicitation: dict[str, object] = {"mode": "url", "message": text, "url": self.url}
        version = Headers(scope=scope).get(MCP_PROTOCOL_VERSION_HEADER.decode())
        if Era.of(version) is Era.LEGACY:
            elicitation["elicitationId"] = self.url.rpartition("/")[2]
            listed = {"elicitations": [elicitation]}
            return error_answer(200, URL_ELICITATION_REQUIRED, text, "sign_in_required", request_id, data=listed)
        params = request.get("params")
        declared = (jsonrpc.meta(params) or {}).get(_CAPABILITIES)
        elicits = declared.get("elicitation") if isinstance(declared, dict) else None
        if request.get("method") in _ASKING and isinstance(elicits, dict) and "url" in elicits:
            asked = {"method": "elicitation/create", "params": elicitation}
            result: dict[str, object] = {"resultType": "input_required", "inputRequests": {"sign-in": asked}}
            answer = jsonrpc.dumps(jsonrpc.result(jsonrpc.echoable_id(request_id), result))
            headers = ((b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode()))
            return Rejection(200, headers, answer, "sign_in_required")
        missing: dict[str, object] = {"requiredCapabilities": {"elicitation": {"url": {}}}, "url": self.url}
        return error_answer(200, MISSING_CAPABILITY, text, "sign_in_required", request_id, data=missing)

    async def answer_reading(self, scope: Scope, receive: Receive) -> Rejection:
        """:meth:`answer_to` the request whose body ``receive`` still holds, read to at most 64 KiB (a longer one is
        answered as one not read: the URL, with no id)."""
        body = b""
        while len(body) <= _MAX_BODY:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body", False):
                return self.answer_to(body, scope)
        return self.answer_to(None, scope)


class SignInFailed(Exception):
    """A step of a sign-in failed: the page says ``reason`` (no token in it), with ``status``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class SignInFlows(Protocol):
    """What :class:`SignIns` routes a browser to, and asks for a user's grants: one sign-in's flows
    (``_oauth.SignIn``)."""

    @property
    def document(self) -> bytes | None: ...

    async def authorize(self, scope: Scope, one_time: str) -> Response: ...

    async def called_back(self, scope: Scope) -> Response: ...

    async def aclose(self) -> None: ...

    def holds(self, *, sign_in: str = "", state: str = "") -> bool: ...

    async def grants_of(self, user: User) -> list[dict[str, object]]: ...

    async def every_grant(self) -> list[dict[str, object]]: ...

    async def revoke(self, user: User, server_named: str | None = None) -> list[dict[str, object]]: ...


class SignIns:
    """The sign-ins of one gateway (``_oauth.IdTokens``, ``_oauth.IssuerGrants``), behind one pair of routes: a sign-in
    URL goes to the one that made it, a callback to the one whose ``state`` it carries (an unknown one to the first,
    which says so); ``/oauth/grants`` lists and revokes the user's grants at each."""

    def __init__(self, each: Sequence[SignInFlows]) -> None:
        if not each:
            raise ValueError("no sign-in to serve")
        self.each = list(each)

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """``app`` behind the sign-ins' routes (served to any browser, before any bearer is asked for): a sign-in
        URL goes to the sign-in that made it, a callback to the one whose ``state`` it carries; each one's HTTP
        client closed as the lifespan ends."""

        async def routed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "lifespan":
                return await app(scope, receive, self._closing(send))
            path = scope.get("path", "") if scope["type"] == "http" else ""
            if path == CLIENT_PATH and (document := self.document) is not None:  # one callback: one document
                return await _served_document(document, scope)(scope, receive, send)
            if not is_sign_in(path):
                return await app(scope, receive, send)
            if scope["method"] != "GET":
                return await page(405, "This page is opened, not posted to.")(scope, receive, send)
            each = self.each[self._whose(scope, path)]
            try:
                if path.startswith(CALLBACK_PATH):
                    answer = await each.called_back(scope)
                else:
                    answer = await each.authorize(scope, path.removeprefix(AUTHORIZE_PATH))
            except SignInFailed as failed:
                answer = page(failed.status, failed.reason)
            except ExchangeRefused as failed:
                answer = page(502, f"The sign-in could not go on: {failed.description}.")
            await answer(scope, receive, send)

        return routed

    def _closing(self, send: Send) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] != "lifespan.startup.complete":
                for each in self.each:
                    await each.aclose()
            await send(message)

        return sending

    @property
    def document(self) -> bytes | None:
        """The gateway's Client ID Metadata Document (each sign-in's is the same: one callback), where it has one."""
        return next((each.document for each in self.each if each.document is not None), None)

    def _whose(self, scope: Scope, path: str) -> int:
        """Which sign-in made the URL ``path`` names, or the ``state`` its callback carries (none: the first)."""
        if path.startswith(CALLBACK_PATH):
            state = QueryParams(scope.get("query_string", b"").decode("latin-1")).get("state", "")
            held = [each.holds(state=state) for each in self.each]
        else:
            held = [each.holds(sign_in=path.removeprefix(AUTHORIZE_PATH)) for each in self.each]
        return held.index(True) if True in held else 0

    def serving_grants(self, app: ASGIApp) -> ASGIApp:
        """``app`` with the user's grants at every sign-in's server at :data:`GRANTS_PATH`: ``GET`` lists them (the
        server, the resource, the scope, when granted, when its access token expires, whether it refreshes, never a
        token), ``DELETE`` revokes them, or the one at ``?server=ISSUER`` (here and in the store, then at each
        server's revocation endpoint, RFC 7009: each says whether its server was told), so that her next request asks
        her to sign in again."""

        async def grants(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope.get("path") != GRANTS_PATH:
                return await app(scope, receive, send)
            user = user_of(scope)
            server = QueryParams(scope.get("query_string", b"").decode("latin-1")).get("server")
            try:
                if user is None:
                    answer = _json(401, {"error": "the request names no user"})
                elif scope["method"] == "GET":
                    answer = _json(200, {"grants": [g for each in self.each for g in await each.grants_of(user)]})
                elif scope["method"] == "DELETE":
                    revoked = [at for each in self.each for at in await each.revoke(user, server)]
                    answer = _json(200, {"revoked": revoked})
                else:
                    answer = _json(405, {"error": "GET lists your grants, DELETE revokes them"})
            except ExchangeRefused as failed:
                answer = _json(failed.status, {"error": failed.description})
            await answer(scope, receive, send)

        return grants

    async def every_grant(self, principal: str | None = None, server: str | None = None) -> list[dict[str, object]]:
        """Every user's grants at the sign-ins' servers (the operator's view, ``_operator``), those of
        ``principal`` or at ``server`` alone where named: as the store's index holds them where they are kept (the
        sign-ins share it), else as each holds them in memory; never a token."""
        found: dict[tuple[object, ...], dict[str, object]] = {}
        for each in self.each:
            for entry in await each.every_grant():
                named = (entry.get("issuer"), entry.get("principal"), entry.get("authorization_server"))
                found[(*named, entry.get("resource"))] = entry
        return [
            entry
            for _, entry in sorted(found.items(), key=lambda item: tuple(str(part) for part in item[0]))
            if principal in (None, entry.get("principal"))
            and (server is None or str(entry.get("authorization_server")).rstrip("/") == server.rstrip("/"))
        ]

    async def revoke_grants(
        self, principal: str, issuer: str | None = None, server: str | None = None
    ) -> list[dict[str, object]]:
        """The operator's revocation of ``principal``'s grants (her token's ``issuer``'s alone, where named), every
        one, or the one at ``server``: each as she would revoke it herself (here and in the store, then at the
        server, RFC 7009); those revoked, by user and server, and whether the server was told."""
        users = {
            (str(entry.get("issuer")), principal)
            for entry in await self.every_grant(principal, server)
            if issuer is None or entry.get("issuer") == issuer
        }
        revoked = []
        for user in sorted(users):
            for each in self.each:
                for at in await each.revoke(user, server):
                    revoked.append({"issuer": user[0], "principal": principal, **at})
        if revoked:
            logger.info("mcp-sessions gateway: the operator revoked %d grant(s)", len(revoked))
        return revoked


def is_sign_in(path: str) -> bool:
    """Whether ``path`` is a sign-in's route: a sign-in URL, the callback, or an authorization server's own."""
    return path.startswith(AUTHORIZE_PATH) or path == CALLBACK_PATH or path.startswith(CALLBACK_PATH + "/")


def page(status: int, text: str) -> Response:
    """A small HTML page saying ``text`` (escaped), never cached, never framed."""
    body = f"<!doctype html><meta charset=utf-8><title>Sign-in</title><p>{html.escape(text)}</p>\n"
    return HTMLResponse(body, status, _PAGE_HEADERS)


def _served_document(document: bytes, scope: Scope) -> Response:
    """The Client ID Metadata Document, to any ``GET`` (whoever fetches it: it holds nothing a stranger may not
    read), cacheable for five minutes (the draft's §4.4: the server caches it as HTTP says)."""
    if scope["method"] not in ("GET", "HEAD"):
        return _json(405, {"error": "the client's metadata document is read with GET"})
    return Response(document, media_type="application/json", headers={"cache-control": "public, max-age=300"})


def _json(status: int, body: object) -> Response:
    """A JSON answer, never cached."""
    return JSONResponse(body, status, {"cache-control": "no-store"})


def redirect(location: str) -> Response:
    """A 302 to ``location``, never cached, that sends no Referer on."""
    return RedirectResponse(location, 302, {"cache-control": "no-store", "referrer-policy": "no-referrer"})
