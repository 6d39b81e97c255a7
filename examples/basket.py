"""A shopping basket behind explicit state handles (SEP-2567): no session needed.

Serve it:  MCP_SESSIONS_SECRET=... python examples/basket.py --port 8000
or:        MCP_SESSIONS_SECRET=... uvicorn examples.basket:app --port 8000

``create_basket`` returns a handle (``bsk_…``, 39 characters) that the model
passes to ``add_item`` and ``checkout``. The handle is signed with the same
keys as data-layer sessions and its items live in the same store:
``MCP_SESSIONS_REDIS_URL`` shares both between replicas. SSE responses by
default; QUICKSTART_JSON=1 answers with plain JSON. Sessions work too (the
session middleware wraps the app), but the basket never needs one.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount

from mcp_sessions import KeySet, MCPSessionMiddleware, SessionsConfig
from mcp_sessions.handles import Handle, HandleKind, Handles
from mcp_sessions.stores import MemoryStore, SessionStore

app: Starlette  # built on first access, see __getattr__

BASKET = HandleKind("basket", prefix="bsk", ttl=24 * 3600, idle_ttl=3600, create="create_basket")
Basket = Annotated[Handle, BASKET]


def keys_and_store(environ: Mapping[str, str]) -> tuple[KeySet, SessionStore]:
    """The key set (``MCP_SESSIONS_SECRET``) and the store (Redis when ``MCP_SESSIONS_REDIS_URL`` is set)."""
    secret = environ.get("MCP_SESSIONS_SECRET", "")
    if not secret:
        raise RuntimeError("set MCP_SESSIONS_SECRET to a random string of at least 32 bytes, shared by every replica")
    keys = KeySet.from_secret(secret)
    redis_url = environ.get("MCP_SESSIONS_REDIS_URL", "").strip()
    if not redis_url:
        return keys, MemoryStore()
    from mcp_sessions.stores import RedisStore

    return keys, RedisStore(redis_url, prefix=environ.get("MCP_SESSIONS_REDIS_PREFIX", "").strip() or "mcp-sessions:")


def build_server(handles: Handles) -> MCPServer:
    """The basket tools; a basket handle is a typed parameter, verified before the tool runs."""
    mcp = MCPServer("basket")

    @mcp.tool()
    async def create_basket() -> str:
        """Create an empty basket; returns its handle, to pass to add_item and checkout."""
        return await handles.mint(BASKET)

    @mcp.tool()
    async def add_item(basket: Basket, item: str) -> str:
        """Add an item to a basket; returns how many items it now holds."""
        items = await basket.data.update("items", lambda items: [*items, item], default=[])
        return str(len(items))

    @mcp.tool()
    async def checkout(basket: Basket) -> str:
        """Check the basket out: returns its items, comma-separated, in the order added. The handle then ends."""
        items = await basket.data.get("items", [])
        if not await basket.revoke():
            raise ToolError("this basket was already checked out; call create_basket for a new one")
        return ",".join(items)

    return mcp


def build_app(*, json_response: bool | None = None, environ: Mapping[str, str] | None = None) -> Starlette:
    """The basket server at /mcp, behind the session middleware, which checks every handle before a tool runs."""
    env = os.environ if environ is None else environ
    if json_response is None:
        json_response = env.get("QUICKSTART_JSON") == "1"
    keys, store = keys_and_store(env)
    handles = Handles(keys, store, kinds=[BASKET])
    server = build_server(handles)
    mcp_app = server.streamable_http_app(streamable_http_path="/mcp", json_response=json_response)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield
        await store.aclose()

    return Starlette(
        routes=[Mount("/", mcp_app)],
        middleware=[
            Middleware(
                MCPSessionMiddleware, config=SessionsConfig(keys=keys, store=store, path="/mcp", handles=handles)
            ),
        ],
        lifespan=lifespan,
    )


def __getattr__(name: str) -> Any:
    # `uvicorn examples.basket:app` builds the app on first access (reading the environment then).
    if name == "app":
        global app
        app = build_app()
        return app
    raise AttributeError(name)


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(build_app(), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
