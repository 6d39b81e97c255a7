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


# Every ```python block of README.md and docs/*.md, by page: a text in that block and in no other of its page,
# and the test module that runs it (tests/unit/test_docs_snippets.py runs those it names itself as written).
GETTING_STARTED = "e2e/test_getting_started_docs.py"
CONFIGURATION = "e2e/test_configuration_docs.py"
CLIENT = "e2e/test_client_docs.py"
HANDLES = "e2e/test_handles.py"
OBSERVABILITY = "e2e/test_observability_docs.py"
AS_WRITTEN = "unit/test_docs_snippets.py"
RUN_BY: dict[str, dict[str, str]] = {
    "README.md": {"# server.py": GETTING_STARTED},
    "docs/index.md": {'require_session_tools={"count"}': GETTING_STARTED},
    "docs/getting-started.md": {
        "# server.py": GETTING_STARTED,
        "StreamableHTTPASGIApp(": GETTING_STARTED,
        "class CreateSession(": GETTING_STARTED,
        "SessionTransport()": GETTING_STARTED,
    },
    "docs/application-code.md": {
        '"mode": "focus"': GETTING_STARTED,
        "async def add_to_cart(": GETTING_STARTED,
        "from fastmcp import FastMCP": GETTING_STARTED,
        "Route(": GETTING_STARTED,
        "app = FastAPI(": GETTING_STARTED,
    },
    "docs/configuration.md": {
        "adopt_transport_sessions=False,": CONFIGURATION,
        "SessionsConfig.from_env(": CONFIGURATION,
        "MCPSessionMiddleware.from_env(dispatch)": CONFIGURATION,
        "SessionKey.from_secret(old_secret)": CONFIGURATION,
        "SessionKey.from_private_key(": CONFIGURATION,
        "SQLiteStore(": CONFIGURATION,
        "register_store(": CONFIGURATION,
        "RedisStore(": CONFIGURATION,
    },
    "docs/deployment.md": {
        "store_from_url(": CONFIGURATION,
        'MCPServer("counter")': CONFIGURATION,
        "StreamableHTTPASGIApp(": CONFIGURATION,
        "SessionSubscriptionBus.from_url(": CONFIGURATION,
    },
    "docs/security.md": {
        "Middleware(AuthenticationMiddleware": CONFIGURATION,
        "token_verifier=verifier": CONFIGURATION,
    },
    "docs/client.md": {
        "# the only change": CLIENT,
        "SessionTransport(delete_on_close=True)": CLIENT,
        "httpx_client_factory=": CLIENT,
        "HttpxSessionTransport()": CLIENT,
        "await shim.create(": CLIENT,
        "def save(": CLIENT,
    },
    "docs/clients.md": {"print(session.source)": GETTING_STARTED},
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
    "docs/profiles.md": {"MCPServer(": "unit/test_profiles_docs.py"},
    "docs/gateway.md": {'"http://10.0.0.5:3001/mcp"': AS_WRITTEN, "def subject(": AS_WRITTEN},
}


def python_snippets(page: str) -> list[str]:
    """The ```` ```python ```` blocks of ``page`` (its path from the repository's root), in order."""
    return _PYTHON_BLOCK.findall((ROOT / page).read_text(encoding="utf-8"))


def one_with(snippets: Sequence[str], text: str) -> str:
    """The one snippet of ``snippets`` that contains ``text`` (there must be exactly one)."""
    [snippet] = [s for s in snippets if text in s]
    return snippet


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
