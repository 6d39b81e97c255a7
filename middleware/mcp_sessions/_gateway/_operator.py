"""The gateway's operator's view: its status listener, beside the clients' port.

The operator's view (``--status-port``, off by default) is served on a port of its own bound to the loopback
address, as Envoy's admin interface and Kong's Admin API are: who may read it is who may connect to the machine's
loopback, which the operating system decides, and no token exists to leak, forward or rotate; with
``--process-network host``, the gateway's own processes are among them. ``--status-socket PATH``: on a Unix socket,
in a directory only the gateway's user may enter (``_serving.private_socket``), so that the file system decides, as
for the Docker daemon's socket. It is never on the
clients' port, so neither a client nor a front that forwards every path reaches it; on the port, a ``Host`` that
is not a loopback name is refused (a page that rebinds its name to 127.0.0.1 gets 403). ``GET /status``: a
``gateway --stdio``'s live processes and each user's count against the limits (``stdio._status.processes``).
``GET /status/grants``, where the gateway signs users in (``oauth:`` variables, ``--id-jag-subject id_token``,
``--upstream-token oauth``): every user's grants (``?principal=`` hers, ``?server=`` one server's), who, the
server, the resource, the scope, when granted and when its access token expires, never a token;
``DELETE /status/grants?principal=NAME`` revokes hers (``&server=ISSUER`` the one there, ``&issuer=`` her token's
issuer's alone), as she would herself (``auth._oauth``): in the store, so that a replica and a restart find it
gone, and her next request asks her to sign in again, then at the server (RFC 7009; each revoked says whether the
server was told: one that cannot be reached is not, and the gateway holds the grant no more all the same). The
listing asks no server: it reads the store's index, so that a restarted gateway whose upstream is down lists it.
An ``--upstream-token oauth`` gateway, which runs no process, serves its status listener for its users' grants
alone (``http._app``).

Here, below ``stdio/`` and ``http/``, which both serve it: a stdio gateway gives its view of its processes
(``view``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from starlette.datastructures import Headers, QueryParams
from starlette.types import ASGIApp, Receive, Scope, Send

from .._asgi import send_json
from .auth._exchange import ExchangeRefused

if TYPE_CHECKING:
    from .auth._exchange import SignInRoutes

STATUS_PATH: Final = "/status"
GRANTS_STATUS_PATH: Final = "/status/grants"
LOOPBACK_NAMES: Final = frozenset({"127.0.0.1", "localhost", "[::1]"})


class OperatorStatus:
    """``app``, and on the operator's ``port`` (a loopback socket of its own) or Unix socket ``path``, the status
    ``view`` gives (a stdio gateway's processes: ``stdio._status.processes``), and the key set's that ``keys`` reads
    (``JwtVerifier.state``), where the gateway verifies tokens; every user's grants at ``signing_in``'s servers,
    where it signs users in (``view`` ``None``: a gateway that runs no process, an ``--upstream``'s, whose listener
    serves the grants alone)."""

    def __init__(
        self,
        app: ASGIApp,
        view: Callable[[], Awaitable[dict[str, Any]]] | None,
        port: int | None,
        path: str | None = None,
        keys: Callable[[], dict[str, object]] | None = None,
        signing_in: SignInRoutes | None = None,
    ) -> None:
        self.app = app
        self.view = view
        self.port = port
        self.path = path
        self.keys = keys
        self.signing_in = signing_in

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server") or ("", None)
        on_socket = self.path is not None and tuple(server) == (self.path, None)
        on_port = self.port is not None and server[1] == self.port
        operators = (STATUS_PATH, GRANTS_STATUS_PATH)
        if scope["type"] == "http" and scope["path"] in operators and not (on_socket or on_port):
            # an operator's request at the clients' door: where to ask, not the auth's bare 401
            served = "its own port or socket" if (self.port, self.path) != (None, None) else "none, as started"
            where = f"the operator's status is not on the clients' port: --status-port or --status-socket ({served})"
            return await send_json(send, 404, {"error": where}, b"")
        if scope["type"] == "lifespan" or not (on_socket or on_port):
            return await self.app(scope, receive, send)
        if scope["type"] != "http":
            return await send({"type": "websocket.close", "code": 1008})
        host = Headers(scope=scope).get("host", "").rpartition(":")[0]
        if on_port and host not in LOOPBACK_NAMES:  # no page reaches a Unix socket
            return await send_json(send, 403, {"error": "the status port answers loopback names only"}, b"")
        if scope["path"] == GRANTS_STATUS_PATH:
            return await self._grants(scope, send)
        if scope["path"] != STATUS_PATH:
            return await send_json(send, 404, {"error": f"the status is at {STATUS_PATH}"}, b"")
        if self.view is None:
            said = f"this gateway runs no process: its status listener serves its users' grants, {GRANTS_STATUS_PATH}"
            return await send_json(send, 404, {"error": said}, b"")
        if scope["method"] != "GET":
            return await send_json(send, 405, {"error": "GET only"}, b"")
        answer = await self.view()
        if self.keys is not None:
            answer["keys"] = self.keys()
        await send_json(send, 200, answer, b"")

    async def _grants(self, scope: Scope, send: Send) -> None:
        """Every user's grants listed, or one user's revoked (see the module)."""
        if self.signing_in is None:
            where = "this gateway signs no one in (no oauth: variable, no --id-jag-subject id_token): it holds no grant"
            return await send_json(send, 404, {"error": where}, b"")
        asked = QueryParams(scope.get("query_string", b"").decode("latin-1"))
        principal = asked.get("principal")
        server = asked.get("server")
        try:
            if scope["method"] == "GET":
                listed = await self.signing_in.every_grant(principal, server)
                return await send_json(send, 200, {"grants": listed}, b"")
            if scope["method"] != "DELETE":
                said = "GET lists the grants, DELETE ?principal=NAME revokes hers"
                return await send_json(send, 405, {"error": said}, b"")
            if not principal:
                return await send_json(send, 400, {"error": "name whose grants to revoke: ?principal=NAME"}, b"")
            revoked = await self.signing_in.revoke_grants(principal, asked.get("issuer"), server)
        except ExchangeRefused as failed:
            return await send_json(send, failed.status, {"error": failed.description}, b"")
        await send_json(send, 200, {"revoked": revoked}, b"")
