"""The pack's strawman checks can fail: fast-agent 0.5.3's server, the one server left that speaks the strawman,
with one of its rules broken in front of it (tests/e2e/_broken.py), fails exactly that rule's checks.

The middleware no longer speaks the strawman (docs/profiles.md); its server runs as
tests/e2e/test_conformance_thirdparty.py runs it, in the fast-agent environment, and a
small forwarding app puts it behind the breakers. The checks it skips (it has no
``resume`` and no ``count``) or answers otherwise under ``--conventions`` have no fault here.
"""

from __future__ import annotations

import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from _redis import missing
from e2e._broken import Fault, broken_servers
from e2e._faults import STRAWMAN_FAULTS
from e2e._pack import LEGACY, run_pack
from e2e._thirdparty import thirdparty_server, venv_of

HERE = Path(__file__).parent
EXAMPLE = "fast_agent_mcp-0.5.3/examples/experimental/mcp_sessions/session_server.py"
_HOP = {b"host", b"content-length", b"transfer-encoding", b"connection"}


def forwarding(url: str) -> ASGIApp:
    """An app that forwards each request to ``url`` and answers with the whole answer (the breakers buffer it)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while (message := await receive())["type"] == "http.request":
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP]
        async with httpx.AsyncClient(timeout=30) as client:
            answer = await client.request(scope["method"], url, headers=headers, content=body)
        kept = [(k, v) for k, v in answer.headers.raw if k.lower() not in _HOP | {b"content-encoding"}]
        await send({"type": "http.response.start", "status": answer.status_code, "headers": kept})
        await send({"type": "http.response.body", "body": answer.content})

    return app


@pytest.fixture(scope="module")
def fast_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """fast-agent 0.5.3's example server, broken at ``/<fault>/mcp`` and whole at ``/mcp``: the base URL."""
    sdist = venv_of("fast-agent") / "sdist" / "fast_agent_mcp-0.5.3.tar.gz"
    if not sdist.exists():
        missing(f"{sdist} is missing: `make {sdist.parents[1]}/sdist/.downloaded` downloads it")
    copy = tmp_path_factory.mktemp("fast-agent") / "session_server.py"
    with tarfile.open(sdist) as archive, archive.extractfile(EXAMPLE) as example, copy.open("wb") as out:  # type: ignore[union-attr]
        shutil.copyfileobj(example, out)
    with (
        thirdparty_server(venv_of("fast-agent"), str(HERE / "_fast_agent_server.py"), str(copy)) as base,
        broken_servers(forwarding(base + "/mcp"), {f.name: f for f in STRAWMAN_FAULTS}) as url,
    ):
        yield url


def test_the_server_unbroken_passes_every_check(fast_agent: str) -> None:
    run = run_pack(f"{fast_agent}/mcp", "--wire", "strawman", "--spec-version", LEGACY)

    assert (run.code, run.failing()) == (0, set()), run.out


@pytest.mark.parametrize("fault", STRAWMAN_FAULTS, ids=lambda f: f.name)
def test_a_broken_rule_fails_exactly_its_checks(fast_agent: str, fault: Fault) -> None:
    run = run_pack(f"{fast_agent}/{fault.name}/mcp", "--wire", "strawman", "--spec-version", LEGACY)

    assert run.code == 1, run.out
    assert run.failing() == fault.breaks, run.out
