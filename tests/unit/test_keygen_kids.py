"""``mcp-sessions keygen --kid``: a kid its ``MCP_SESSIONS_KEYS=kid:secret`` line keeps whole, or a usage error."""

from __future__ import annotations

import io
import shlex
from typing import Any

import pytest

from mcp_sessions import MCPSessionMiddleware
from mcp_sessions._cli import main


async def app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover - never called
    raise AssertionError("configuration tests never call the app")


def keygen(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["keygen", *argv], stdin=io.StringIO(), stdout=out, stderr=err, environ={})
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("kid", ["@k2026", "2026-11", "a.b_c~", "a$b;c'd"])
def test_the_printed_line_is_the_kid_a_server_reads(kid: str) -> None:
    code, out, _ = keygen("--kid", kid)
    [assignment] = shlex.split(out)
    name, _, value = assignment.partition("=")
    assert (code, name) == (0, "MCP_SESSIONS_KEYS")
    keys = MCPSessionMiddleware.from_env(app, environ={name: value, "MCP_SESSIONS_SIGNER": kid}).keys
    assert [key.kid for key in keys.keys] == [kid]


@pytest.mark.parametrize("kid", ["a,b", "#k", "a b", "k\u00e9", "a:b", "", "k" * 65])
def test_a_kid_the_line_would_split_or_drop_is_a_usage_error(kid: str) -> None:
    code, out, err = keygen("--kid", kid)
    assert (code, out) == (2, "")
    assert "--kid must be 1 to 64 visible ASCII characters" in err
