"""The Python snippets of docs/configuration.md, deployment.md and security.md run, and do what their pages say.

Each snippet is exec'd as printed and what it builds is used; a fragment gets only the names its page says
are the reader's own (``old_secret``, ``MyBackend``, ``MyTokenVerifier``...). Where a snippet names a file or
a server of the reader's (a PEM under /run/secrets, a Redis at 10.0.0.5, a database under /tmp), the test swaps
that one literal for a real one of its own and says so. Apps are called in process (Starlette's TestClient). What the
options and store URLs refuse is tests/unit/test_config.py's and tests/stores/test_urls.py's tables; a store's
sharing and durability, tests/stores/test_sqlite.py's.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import re
import secrets
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend, SimpleUser
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from _backends import closing_store as closing
from _docs import exec_snippet, one_with, python_snippets
from _mcp import (
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    LegacyClient,
    ModernClient,
    jwt_claims,
    jwt_header,
    modern_headers,
    modern_request,
    session_meta,
    tool_text,
)
from _redis import RedisServer
from conftest import SECRET, in_process, serve
from e2e._listen import NOTE, client, graceful_end
from mcp_sessions import InvalidToken, KeySet, MCPSessionMiddleware, SessionKey, SessionsConfig, get_session, stores
from mcp_sessions.stores import MemoryStore, RedisStore, SQLiteStore, store_from_url

OLD_SECRET = "old-secret-for-the-rotation-snippet-0123456789"
NEW_SECRET = "new-secret-for-the-rotation-snippet-0123456789"
HOST = "mcp.example.com"  # the host the snippets name in their transport security settings


CONFIGURATION = python_snippets("docs/configuration.md")
DEPLOYMENT = python_snippets("docs/deployment.md")
SECURITY = python_snippets("docs/security.md")


def swapped(snippet: str, old: str, new: str) -> str:
    """``snippet`` with the one literal ``old`` replaced (it must be there, once)."""
    assert snippet.count(old) == 1, old
    return snippet.replace(old, new)


def run(snippet: str, namespace: dict[str, Any] | None = None, *, page: str = "docs") -> dict[str, Any]:
    return exec_snippet(snippet, page, namespace)


OPTIONS = one_with(CONFIGURATION, "adopt_transport_sessions=False,")
FROM_ENV_CONFIG = one_with(CONFIGURATION, "SessionsConfig.from_env(")
GUARD = one_with(CONFIGURATION, "MCPSessionMiddleware.from_env(dispatch)")
ROTATION = one_with(CONFIGURATION, "SessionKey.from_secret(old_secret)")
ES256 = one_with(CONFIGURATION, "SessionKey.from_private_key(")
SQLITE = one_with(CONFIGURATION, "SQLiteStore(")
REGISTER = one_with(CONFIGURATION, "register_store(")
REDIS = one_with(CONFIGURATION, "RedisStore(")
STORE_URLS = one_with(DEPLOYMENT, "store_from_url(")
SERVER_PY = one_with(DEPLOYMENT, 'MCPServer("counter")')
LISTEN = one_with(DEPLOYMENT, "SessionSubscriptionBus.from_url(")
AUTH_OUTSIDE = one_with(SECURITY, "Middleware(AuthenticationMiddleware")
SDK_AUTH = one_with(SECURITY, "token_verifier=verifier")
BY_HAND = one_with(DEPLOYMENT, "StreamableHTTPASGIApp(")


# -- helpers ------------------------------------------------------------------------------------------


def mcp_app_as_above() -> ASGIApp:
    """The ``mcp_app`` that configuration.md's first snippet defines (a fresh one: an app serves one lifespan)."""
    # The snippet's own MCPSessionMiddleware is left out: it would place its session work inside mcp_app.
    app: ASGIApp = run(OPTIONS.split("\napp = MCPSessionMiddleware(")[0])["mcp_app"]
    return app


def error_code(message: dict[str, Any]) -> int:
    code: int = message["error"]["code"]
    return code


# -- configuration.md ---------------------------------------------------------------------------------


def test_the_options_block_shows_the_defaults_and_its_app_answers() -> None:
    namespace = run(OPTIONS, page="docs/configuration.md")
    app = namespace["app"]
    assert isinstance(app, MCPSessionMiddleware)
    # "Every option is keyword-only", and each value the block shows is that option's default.
    parameters = inspect.signature(SessionsConfig).parameters
    assert {p.kind for p in parameters.values()} == {inspect.Parameter.KEYWORD_ONLY}
    [call] = [
        n
        for n in ast.walk(ast.parse(OPTIONS))
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "MCPSessionMiddleware"
    ]
    shown = {str(kw.arg): eval(compile(ast.Expression(kw.value), "options", "eval"), namespace) for kw in call.keywords}
    del shown["secret"]  # the reader's own (the app above was built, so it is long enough)
    assert shown == {name: parameters[name].default for name in shown}
    with in_process(app) as http:
        client = ModernClient(http, "")
        session = client.create_session()
        response, listed = client.request("tools/list", session=session_meta(session))
        assert response.status_code == 200 and listed["result"]["tools"] == [], listed


async def knows_no_method(request: Request) -> JSONResponse:
    """A server that knows no method: "method not found" to everything."""
    message = await request.json()
    return JSONResponse({"jsonrpc": "2.0", "id": message.get("id"), "error": {"code": -32601, "message": "no"}})


def test_the_checked_config_object_answers_at_its_path_and_raises_where_built() -> None:
    app = run(FROM_ENV_CONFIG, page="docs/configuration.md")["app"]
    assert isinstance(app, Starlette)
    with in_process(app) as http:
        refused = ModernClient(http, "").post(modern_request("sessions/create"))
        assert refused.status_code == 404  # no server at /mcp: the app's own answer, which the middleware asks for
        app.router.routes.append(Route("/mcp", knows_no_method, methods=["POST"]))  # a server, of no methods
        session = ModernClient(http, "").create_session()  # the middleware answers it once the server takes it
        assert jwt_claims(session["sessionId"])["iss"] == "mcp-sessions"
        elsewhere = ModernClient(http, "", path="/elsewhere").post({"jsonrpc": "2.0", "id": 1, "method": "x"})
        assert elsewhere.status_code == 404  # path="/mcp": other paths pass through, unread
    # "raises here if misconfigured": at from_env, before any app exists.
    with pytest.raises(RuntimeError, match=re.escape("secrets.token_urlsafe(32)")):
        run(swapped(FROM_ENV_CONFIG, '{"MCP_SESSIONS_DEV": "1"}', "{}"))
    with pytest.raises(ValueError, match="MCP_SESSIONS_TTL"):
        run(swapped(FROM_ENV_CONFIG, '{"MCP_SESSIONS_DEV": "1"}', '{"MCP_SESSIONS_DEV": "1", "MCP_SESSIONS_TTL": "0"}'))


def test_behind_a_dispatcher_the_server_refuses_sessions_create_as_tools_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SESSIONS_SECRET", SECRET)  # from_env reads it, as the page's table says
    app = run(GUARD, page="docs/configuration.md")["app"]
    with in_process(app) as http:
        client = ModernClient(http, "")
        response, created = client.request("sessions/create", host=HOST, origin="https://app.example.com")
        assert response.status_code == 200 and response.headers["content-type"] == "application/json"
        session = session_meta(created["result"]["session"])
        response, listed = client.request("tools/list", session=session, host=HOST)
        assert response.status_code == 200 and response.headers["content-type"] == "application/json", listed
        # json_response=True: both accept a client that takes JSON only (an SSE server answers 406).
        for body in (modern_request("sessions/create"), modern_request("tools/list", session=session)):
            json_only = client.post(body, {**modern_headers(body, host=HOST), "Accept": "application/json"})
            assert json_only.status_code == 200 and "result" in json_only.json(), json_only.text
        # Refused by the middleware (sessions/create) exactly as by the server (tools/list).
        for body in (modern_request("sessions/create"), modern_request("tools/list", session=session)):
            wrong_host = client.post(body, modern_headers(body, host="127.0.0.1"))
            assert (wrong_host.status_code, wrong_host.text) == (421, "Invalid Host header"), body
            foreign = client.post(body, modern_headers(body, host=HOST, origin="https://evil.example"))
            assert (foreign.status_code, foreign.text) == (403, "Invalid Origin header"), body


def test_rotation_step_two_verifies_the_old_key_and_signs_with_the_new() -> None:
    namespace = run(ROTATION, {"old_secret": OLD_SECRET, "new_secret": NEW_SECRET, "mcp_app": mcp_app_as_above()})
    assert namespace["app"].keys is namespace["keys"]
    # A session minted in step 1, when only the old key signed.
    step_one = KeySet([SessionKey.from_secret(OLD_SECRET)], issuer="https://mcp.example.com", audience=HOST)
    old_token, _ = step_one.mint_session_token(ttl=600)
    with in_process(namespace["app"]) as http:
        client = ModernClient(http, "")
        response, listed = client.request("tools/list", session=session_meta(old_token))
        assert response.status_code == 200 and "result" in listed, listed  # the old key still verifies
        new_token = client.create_session()["sessionId"]
    assert jwt_header(new_token)["kid"] == SessionKey.from_secret(NEW_SECRET).kid  # the new key signs
    assert {k: jwt_claims(new_token)[k] for k in ("iss", "aud")} == {"iss": "https://mcp.example.com", "aud": HOST}
    # Step 3, KeySet([new]): the new key's sessions live on, the old key's end.
    step_three = KeySet([SessionKey.from_secret(NEW_SECRET)], issuer="https://mcp.example.com", audience=HOST)
    assert step_three.verify_session_token(new_token).session_id == jwt_claims(new_token)["sid"]
    with pytest.raises(InvalidToken):
        step_three.verify_session_token(old_token)


@pytest.mark.parametrize("kind", ["P-256", "Ed25519"])
def test_an_asymmetric_key_signs_and_its_public_key_alone_verifies(kind: str, tmp_path: Path) -> None:
    private = ec.generate_private_key(ec.SECP256R1()) if kind == "P-256" else ed25519.Ed25519PrivateKey.generate()
    pem = tmp_path / "mcp-sessions.pem"  # the reader's /run/secrets file
    pem.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    keys = run(swapped(ES256, '"/run/secrets/mcp-sessions-es256.pem"', repr(str(pem))))["keys"]
    assert keys.signer is not None and keys.signer.algorithm == ("ES256" if kind == "P-256" else "EdDSA")
    with in_process(MCPSessionMiddleware(mcp_app_as_above(), keys=keys)) as http:
        token = ModernClient(http, "").create_session()["sessionId"]
    assert jwt_header(token)["kid"] == "es-2026-11" and jwt_claims(token)["aud"] == HOST
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    gateway = KeySet([SessionKey.from_public_key(public_pem, kid="es-2026-11")], audience=HOST)
    assert gateway.verify_session_token(token).session_id == jwt_claims(token)["sid"]  # verifies ...
    with pytest.raises(ValueError, match="verify-only"):
        MCPSessionMiddleware(mcp_app_as_above(), keys=gateway)  # ... and cannot mint


def test_the_sqlite_store_is_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # "sessions.db" is relative to the working directory
    store = run(SQLITE, page="docs/configuration.md")["store"]
    assert isinstance(store, SQLiteStore) and (tmp_path / "sessions.db").is_file()  # created if missing
    asyncio.run(store.aclose())


def test_a_registered_scheme_names_your_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stores, "_factories", dict(stores._factories))  # the registration ends with the test
    store = run(REGISTER, page="docs/configuration.md")["store"]
    assert isinstance(store, MemoryStore)
    with pytest.raises(ValueError, match="my-store://"):  # listed among the known schemes now
        store_from_url("nobody-registered-this://x")


def test_the_redis_store_as_printed_and_on_a_real_redis(redis: RedisServer) -> None:
    rotation = {"old_secret": OLD_SECRET, "new_secret": NEW_SECRET, "mcp_app": mcp_app_as_above()}
    names = {"mcp_app": mcp_app_as_above(), "keys": run(ROTATION, rotation)["keys"]}  # "mcp_app and keys as above"
    printed = run(REDIS, names, page="docs/configuration.md")  # connects on first use: builds without a Redis
    assert isinstance(printed["app"], MCPSessionMiddleware) and printed["app"].store is printed["store"]
    assert isinstance(printed["store"], RedisStore)
    # The same snippet with the reader's Redis URL swapped for a real redis-server.
    names["mcp_app"] = mcp_app_as_above()
    real = run(swapped(REDIS, '"redis://:password@10.0.0.5:6379/0"', repr(redis.url)), names)
    with in_process(closing(real["app"], real["store"])) as http:
        client = ModernClient(http, "")
        session = session_meta(client.create_session())
        sid = jwt_claims(session["sessionId"])["sid"]
        assert "result" in client.request("tools/list", session=session)[1]
        assert client.request("sessions/delete", session=session)[1]["result"] == {"resultType": "complete"}
        assert redis.command("GET", f"mcp-sessions:{{{sid}}}:s") == b"$1\r\nr\r\n"  # the revocation is in Redis
        assert error_code(client.request("tools/list", session=session)[1]) == SESSION_NOT_FOUND


# -- deployment.md ------------------------------------------------------------------------------------


def test_store_urls_build_stores(tmp_path: Path) -> None:
    # The reader's /tmp directory becomes the test's own, still an absolute sqlite:/// URL.
    namespace = run(swapped(STORE_URLS, '"sqlite:///tmp/sessions.db"', repr(f"sqlite://{tmp_path}/sessions.db")))
    store, memory = namespace["store"], namespace["memory"]
    assert isinstance(store, SQLiteStore) and store.path == tmp_path / "sessions.db" and store.path.is_file()
    assert isinstance(memory, MemoryStore) and memory.max_sessions == 50000
    asyncio.run(store.aclose())


def test_the_walkthrough_server_counts_across_replicas(
    redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Step 3's settings: a key file, the Redis URL, an idle timeout.
    (tmp_path / "keys").write_text("k2026a:" + secrets.token_urlsafe(32) + "\n")
    monkeypatch.setenv("MCP_SESSIONS_KEYS", f"@{tmp_path / 'keys'}")
    monkeypatch.setenv("MCP_SESSIONS_REDIS_URL", redis.url)
    monkeypatch.setenv("MCP_SESSIONS_IDLE_TTL", "1800")
    replicas = [run(SERVER_PY, page="docs/deployment.md")["app"] for _ in range(2)]
    with contextlib.ExitStack() as stack:
        https = [stack.enter_context(in_process(app)) for app in replicas]
        a, b = (ModernClient(http, "") for http in https)
        refused = a.post(modern_request("sessions/create"))
        assert (refused.status_code, refused.text) == (421, "Invalid Host header")  # only the host it names
        created = a.create_session(host=HOST)
        claims = jwt_claims(created["sessionId"])
        expires = datetime.fromisoformat(created["expiresAt"].replace("Z", "+00:00")).timestamp()
        assert expires == claims["iat"] + 1800 < claims["exp"]  # MCP_SESSIONS_IDLE_TTL=1800 reached the app
        session = session_meta(created)
        counts = [tool_text(client.call_tool("count", session=session, host=HOST)[1]) for client in (a, b, a)]
        assert counts == ["1", "2", "3"]  # whichever replica answers, the counter is the one in Redis
        assert redis.command("HGET", f"mcp-sessions:{{{claims['sid']}}}:d", "count") == b"$1\r\n3\r\n"
        # A 2025-era client, stateless: no initialize on this replica, the session travels in _meta.
        legacy = LegacyClient(https[1], "")
        assert tool_text(legacy.call_tool("count", session=session, host=HOST)[1]) == "4"
        assert error_code(b.call_tool("count", host=HOST)[1]) == SESSION_REQUIRED  # require_session_tools
        assert "result" in b.request("sessions/delete", session=session, host=HOST)[1]
        assert error_code(a.call_tool("count", session=session, host=HOST)[1]) == SESSION_NOT_FOUND


def test_the_listen_example_scopes_events_to_the_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """In one process (``memory://``, as the snippet falls back to without ``MCP_SESSIONS_REDIS_URL``): ``edit_note``
    reaches the session's stream and no other, ``add_tool`` every stream, and a delete ends the session's stream
    gracefully. The two-replica version is tests/e2e/test_listen_replicas.py."""
    monkeypatch.setenv("MCP_SESSIONS_SECRET", SECRET)
    monkeypatch.delenv("MCP_SESSIONS_REDIS_URL", raising=False)
    app = run(LISTEN, page="docs/deployment.md")["app"]

    async def scenario(base: str) -> None:
        async with client() as c:
            mine, other = await c.create(base), await c.create(base)
            streams = [await c.listen(base, "mine", mine), await c.listen(base, "other", other)]
            streams.append(await c.listen(base, "global"))
            assert await c.tool(base, "edit_note", {"name": "plan", "text": "v2"}, mine) == "saved"
            assert await c.tool(base, "add_tool", {}) == "announced"
            for stream in streams:
                await stream.wait("notifications/tools/list_changed")
            assert streams[0].events == [f"notifications/resources/updated {NOTE}", "notifications/tools/list_changed"]
            assert streams[1].events == streams[2].events == ["notifications/tools/list_changed"]
            await c.request(base, "sessions/delete", session=mine)
            async with asyncio.timeout(5):
                await streams[0].ended.wait()
            graceful_end(streams[0])
            assert not streams[1].ended.is_set() and not streams[2].ended.is_set()

    with serve(app) as url:
        asyncio.run(scenario(url))


# -- security.md --------------------------------------------------------------------------------------


class MyBackend(AuthenticationBackend):
    """The reader's authentication: here, whoever the X-User header names."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
        user = conn.headers.get("x-user")
        return None if user is None else (AuthCredentials(["authenticated"]), SimpleUser(user))


def readers_app() -> dict[str, Any]:
    """The names security.md's Starlette snippet leaves to the reader, with a tool that reports the session."""
    server = MCPServer("app")

    @server.tool()
    async def whoami() -> str:
        session = get_session()
        return "none" if session is None else session.id

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    return {"mcp_app": server.streamable_http_app(), "lifespan": lifespan, "MyBackend": MyBackend, "secret": SECRET}


def test_app_authentication_binds_sessions_in_either_order() -> None:
    lines = AUTH_OUTSIDE.splitlines(keepends=True)
    [authentication] = [line for line in lines if "Middleware(AuthenticationMiddleware," in line]
    [sessions] = [line for line in lines if "Middleware(MCPSessionMiddleware," in line]
    reversed_order = swapped(AUTH_OUTSIDE, authentication + sessions, sessions + authentication)
    for snippet in (AUTH_OUTSIDE, reversed_order):
        app = run(snippet, readers_app(), page="docs/security.md")["app"]
        with in_process(app) as http:
            client = ModernClient(http, "")
            session = session_meta(client.create_session(x_user="alice"))
            assert "pbh" in jwt_claims(session["sessionId"])
            sid = jwt_claims(session["sessionId"])["sid"]
            assert tool_text(client.call_tool("whoami", session=session, x_user="alice")[1]) == sid
            assert error_code(client.call_tool("whoami", session=session, x_user="bob")[1]) == SESSION_NOT_FOUND
            assert error_code(client.call_tool("whoami", session=session)[1]) == SESSION_NOT_FOUND
            # "an unbound session is never usable once signed in"
            unbound = session_meta(client.create_session())
            assert error_code(client.call_tool("whoami", session=unbound, x_user="alice")[1]) == SESSION_NOT_FOUND


class MyTokenVerifier(TokenVerifier):
    """The reader's verifier: two bearer tokens, two users, issued for the snippet's resource."""

    async def verify_token(self, token: str) -> AccessToken | None:
        users = {"alice-token": "alice", "bob-token": "bob"}
        if token not in users:
            return None
        return AccessToken(token=token, client_id="c", scopes=[], subject=users[token], resource=f"https://{HOST}/mcp")


@pytest.mark.parametrize(
    ("snippet", "page"), [(SDK_AUTH, "docs/security.md"), (BY_HAND, "docs/deployment.md")], ids=["found", "by-hand"]
)
def test_the_sdk_bearer_auth_binds_sessions_with_no_hook(
    monkeypatch: pytest.MonkeyPatch, snippet: str, page: str
) -> None:
    """security.md's server, and deployment.md's built by hand from the SDK's public classes: the same answers."""
    monkeypatch.setenv("MCP_SESSIONS_SECRET", SECRET)
    app = run(snippet, {"MyTokenVerifier": MyTokenVerifier}, page=page)["app"]
    with in_process(app) as http:
        client = ModernClient(http, "")
        session = session_meta(client.create_session(authorization="Bearer alice-token"))
        assert "pbh" in jwt_claims(session["sessionId"])
        response, listed = client.request("tools/list", session=session, authorization="Bearer alice-token")
        assert response.status_code == 200 and "result" in listed, listed
        response, refused_for_bob = client.request("tools/list", session=session, authorization="Bearer bob-token")
        assert (response.status_code, error_code(refused_for_bob)) == (200, SESSION_NOT_FOUND)
        # Without a bearer, sessions/create gets the SDK's 401 as tools/list does: test_inside_server, both forms.
