"""The Python snippets of the docs, as the docs tests find and run them."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


# Every ```python block of README.md and docs/*.md, by page: a text in that block and in no other of its page, and
# the test module that runs it (AS_WRITTEN: tests/e2e/test_docs.py runs it as written, and checks the app it builds).
DOCS = "e2e/test_docs.py"
HANDLES = "e2e/test_handles.py"
OBSERVABILITY = "e2e/test_observability_docs.py"
AS_WRITTEN = "as written"
RUN_BY: dict[str, dict[str, str]] = {
    "README.md": {"# server.py": DOCS},
    "docs/index.md": {'require_session_tools={"count"}': DOCS},
    "docs/getting-started.md": {
        "# server.py": DOCS,
        "StreamableHTTPASGIApp(": DOCS,
        "class CreateSession(": DOCS,
        "SessionTransport(delete_on_close=True)": DOCS,
    },
    "docs/application-code.md": {
        '"mode": "focus"': DOCS,
        "async def add_to_cart(": DOCS,
        "from fastmcp import FastMCP": DOCS,
        "Route(": DOCS,
        "app = FastAPI(": DOCS,
    },
    "docs/configuration.md": {
        "adopt_transport_sessions=False,": DOCS,
        "SessionsConfig.from_env(": DOCS,
        "MCPSessionMiddleware.from_env(dispatch)": DOCS,
        "SessionKey.from_secret(old_secret)": DOCS,
        "SessionKey.from_private_key(": DOCS,
        "SQLiteStore(": DOCS,
        "register_store(": DOCS,
        "RedisStore(": DOCS,
    },
    "docs/deployment.md": {
        "store_from_url(": DOCS,
        'MCPServer("counter")': DOCS,
        "StreamableHTTPASGIApp(": DOCS,
        "SessionSubscriptionBus.from_url(": DOCS,
    },
    "docs/security.md": {
        "Middleware(AuthenticationMiddleware": DOCS,
        "token_verifier=verifier": DOCS,
    },
    "docs/client.md": {
        "# the only change": DOCS,
        "SessionTransport(delete_on_close=True)": DOCS,
        "httpx_client_factory=": DOCS,
        "HttpxSessionTransport()": DOCS,
        "await shim.create(": DOCS,
        "def save(": DOCS,
    },
    "docs/clients.md": {"print(session.source)": DOCS},
    "docs/handles.md": {
        'create="create_basket")': HANDLES,  # quoted from examples/basket.py: test_handles checks each line
        "call_with_handle_check": HANDLES,
        'MCPServer("basket-with-a-session")': HANDLES,
        'MCPServer("basket-with-handles")': HANDLES,
        'MCPServer("baskets-in-a-session")': HANDLES,
    },
    "docs/observability.md": {
        "OTLPSpanExporter(endpoint=": "e2e/test_viewers.py",
        "app = FastAPI(": OBSERVABILITY,
        "SentrySessionSpanProcessor()": OBSERVABILITY,
        "attributes=(": OBSERVABILITY,
        "mcp_sessions.SessionLogFilter": OBSERVABILITY,
    },
    "docs/profiles.md": {"MCPServer(": DOCS},
    "docs/gateway.md": {'"http://10.0.0.5:3001/mcp"': AS_WRITTEN, "def subject(": AS_WRITTEN},
}


def python_snippets(page: str) -> list[str]:
    """The ```` ```python ```` blocks of ``page`` (its path from the repository's root), in order."""
    return _PYTHON_BLOCK.findall((ROOT / page).read_text(encoding="utf-8"))


def one_with(snippets: Sequence[str], text: str) -> str:
    """The one snippet of ``snippets`` that contains ``text`` (there must be exactly one)."""
    [snippet] = [s for s in snippets if text in s]
    return snippet


def snippet_with(page: str, text: str) -> str:
    """The one ```` ```python ```` block of ``page`` that contains ``text``."""
    return one_with(python_snippets(page), text)


def exec_snippet(snippet: str, page: str, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``snippet`` as the body of a module ``docs_snippet`` (in ``sys.modules``: pydantic's generic models look
    their module up), with ``namespace`` in it first; what the module holds after."""
    module = types.ModuleType("docs_snippet")
    sys.modules[module.__name__] = module
    module.__dict__.update(namespace or {})
    exec(compile(snippet, page, "exec"), module.__dict__)
    return module.__dict__


OUT_VARIABLE = "MCP_SESSIONS_DOCS_OUT"
"""Set by ``scripts/update_docs.py``: a directory where each generated block is written for it to splice in."""


def assert_generated(doc: Path, rendered: str, begin: str, end: str) -> None:
    """The part of ``doc`` between ``begin`` (or the start, if empty) and ``end`` is ``rendered``.

    The test never writes the page: ``python scripts/update_docs.py`` runs the tests that render pages and puts
    what they rendered in place.
    """
    text = doc.read_text(encoding="utf-8") if doc.exists() else ""
    rest = text.partition(begin)[2] if begin else text
    committed = rest.partition(end)[0]
    out = os.environ.get(OUT_VARIABLE)
    if out:
        record = {"doc": str(doc.relative_to(ROOT)), "begin": begin, "end": end, "rendered": rendered}
        name = hashlib.sha256(f"{doc}{begin}".encode()).hexdigest()[:16]
        (Path(out) / f"{name}.json").write_text(json.dumps(record), encoding="utf-8")
    diff = "".join(difflib.unified_diff(committed.splitlines(True), rendered.splitlines(True), "committed", "now"))
    assert committed == rendered, f"{doc.name} is stale: regenerate with python scripts/update_docs.py\n{diff}"
