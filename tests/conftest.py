"""Shared fixtures: real uvicorn servers on 127.0.0.1 with ephemeral ports."""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import ssl
from collections.abc import AsyncIterator, Generator, Iterator
from typing import TYPE_CHECKING, Any, cast

import httpx
import pytest
from examples.demo import serve_in_thread
from starlette.testclient import TestClient

from _census import Census
from _lifespan import running
from _mcp import LOCAL
from _redis import RedisServer, redis_server
from _redis_topologies import ClusterServers, SentinelGroup, redis_cluster, sentinel_group
from _uids import reserve
from _waits import WITHIN
from mcp_sessions import KeySet, SessionKey

if TYPE_CHECKING:
    from _typeshed import StrOrBytesPath
    from typing_extensions import Buffer

SECRET = "test-secret-that-is-long-enough-for-hs256-0123456789"


# Every httpx and httpx2 client, ours or one an MCP client library makes inside, builds a TLS context from the
# CA bundle when it is created: about 40 ms, some 1,400 times a run, for connections that are all plain HTTP to
# 127.0.0.1. One context per set of arguments serves them all (a context is meant to be shared by connections).
_create_default_context = ssl.create_default_context
_shared_default_context = functools.cache(_create_default_context)


def _create_default_context_once(
    purpose: ssl.Purpose = ssl.Purpose.SERVER_AUTH,
    *,
    cafile: StrOrBytesPath | None = None,
    capath: StrOrBytesPath | None = None,
    cadata: str | Buffer | None = None,
) -> ssl.SSLContext:
    if cadata is not None:  # bytes-like data need not be hashable: not cached
        return _create_default_context(purpose, cafile=cafile, capath=capath, cadata=cadata)
    return _shared_default_context(
        purpose,
        cafile=None if cafile is None else os.fspath(cafile),
        capath=None if capath is None else os.fspath(capath),
    )


ssl.create_default_context = _create_default_context_once


def signer_of(keys: KeySet) -> SessionKey:
    """The key ``keys`` signs with: ``KeySet.signer`` is ``None`` only for a verify-only set, and these have one."""
    assert keys.signer is not None, "a verify-only KeySet has no signer"
    return keys.signer


@pytest.fixture(scope="module", autouse=True)
def _module_state_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The state directory (systemd's ``STATE_DIRECTORY``) of the gateways a module's own fixtures start, where each
    keeps its store by default: a directory of the module's, never the host's /var/lib/mcp-sessions."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STATE_DIRECTORY", str(tmp_path_factory.mktemp("state")))
        yield


@pytest.fixture(autouse=True)
def _state_directory(
    _module_state_directory: None, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state directory of the gateways a test starts: its own, so that tests run in parallel, or one after
    another, never share a store."""
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path_factory.mktemp("state")))


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    """A plain HTTP client for the test's servers on 127.0.0.1."""
    with httpx.Client(timeout=10) as client:
        yield client


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    """One real redis-server for the module (skipped without redis-server, failed under CI)."""
    with redis_server() as server:
        yield server


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterServers]:
    """One real 3-master Redis Cluster for the module."""
    with redis_cluster() as servers:
        yield servers


@pytest.fixture(scope="module")
def sentinels() -> Iterator[SentinelGroup]:
    """One real master, replica and three Sentinels for the module."""
    with sentinel_group() as group:
        yield group


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def serve(
    app: Any, *, timeout: float = WITHIN, root_path: str = "", port: int = 0, tls: tuple[str, str] | None = None
) -> contextlib.AbstractContextManager[str]:
    """``app`` on a real uvicorn on 127.0.0.1 in a thread, its lifespan run (the MCP SDK app needs it): the base URL
    (https given ``tls``, a certificate chain's file and its key's; on ``port`` where given).

    ``examples.demo.serve_in_thread`` at the root path: the server stops, bounded in time, when the block ends. Its
    start is waited for as long as any wait of the suite's (``timeout``), past an app's own bound (a gateway's start
    ends at 30 s, ``START_TIMEOUT``, and says why): a busy machine's slow start is no failure.
    """
    return serve_in_thread(app, timeout=timeout, path="", root_path=root_path, port=port, tls=tls)


@contextlib.contextmanager
def in_process(app: Any, **options: Any) -> Iterator[httpx.Client]:
    """``app`` called in process, with no socket: Starlette's ``TestClient``, as Starlette tests its middleware.

    The app's lifespan runs around the block (the MCP SDK app needs it); the client's base URL is
    ``http://127.0.0.1:8000`` (a loopback host, which the SDK's DNS-rebinding protection accepts), so tests send to
    paths: ``http.post("/mcp", ...)``. As with httpx, redirects are not followed unless asked; an exception the app
    raises reaches the test instead of becoming a 500 unless ``raise_server_exceptions=False``.
    """
    options = {"base_url": "http://127.0.0.1:8000", "follow_redirects": False, **options}
    with TestClient(app, **options) as client:
        # Starlette builds it on httpx2 when installed (as here): httpx's fork, the same API under another name.
        yield cast(httpx.Client, client)


@contextlib.asynccontextmanager
async def asgi_client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """``app`` in process through ``httpx.ASGITransport``, for async tests: ``in_process``'s counterpart.

    The app's lifespan runs around the block as a server runs it (ASGITransport does not); the base URL is
    ``http://127.0.0.1:8000``. ASGITransport hands over a response when the app has finished it: a stream that
    must be read while it is open needs a real server (``serve``).
    """
    async with (
        running(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url=LOCAL, timeout=10) as client,
    ):
        yield client


# The files that take longest, longest first: each file's tests' wall time summed, measured on 2 cores (make test's
# files in a `make test`, last beside other runs and scaled to an idle one's; the interop matrix's in a `make
# test-all`; the files of ten seconds or more). Under
# pytest-xdist (--dist loadfile) a worker takes the next file whenever it runs dry: the long files must start first,
# for the many short ones to fill in at the end. Everything else keeps its order. The paths are from the root: the
# conformance pack's tests (conformance/tests/) are ranked with the middleware's.
SLOW_FILES = [
    "tests/e2e/test_gateway_stdio_containment.py",
    "tests/e2e/test_gateway_auth.py",
    "tests/e2e/test_benchmarks.py",
    "tests/e2e/test_gateway_recipes.py",
    "tests/e2e/test_gateway_network.py",
    "tests/e2e/test_gateway_grants.py",
    "tests/e2e/test_gateway_stdio_bounds.py",
    "tests/e2e/test_gateway_stdio.py",
    "tests/e2e/test_gateway_stdio_seccomp.py",
    "tests/e2e/test_viewers.py",
    "tests/e2e/test_server_versions.py",
    "tests/e2e/test_gateway_exchange.py",
    "tests/asgi/test_fuzz.py",
    "tests/e2e/test_telemetry_shutdown.py",
    "tests/e2e/test_connect.py",
    "tests/e2e/test_gateway_conformance.py",
    "tests/e2e/test_gateway_stdio_clients.py",
    "tests/e2e/test_gateway_drain.py",
    "tests/e2e/test_gateway_masks.py",
    "tests/e2e/test_gateway_servers.py",
    "tests/e2e/test_gateway_stdio_lifetimes.py",
    "tests/stores/test_contract.py",
    "tests/stores/test_expiry_boundaries.py",
    "tests/e2e/test_gateway_rolling.py",
    "tests/unit/test_docs_complete.py",
    "tests/e2e/test_topologies.py",
    "tests/e2e/test_cli_create.py",
    "tests/e2e/test_listen_replicas.py",
    "tests/e2e/test_gateway_benchmark.py",
    "tests/e2e/test_dist.py",
    "tests/e2e/test_gateway_stdio_callers.py",
    "conformance/tests/test_conformance_broken.py",
    "tests/subscriptions/test_topologies.py",
    "tests/stores/test_redis.py",
]


# The interop matrix: what `make test-all` (and so .ci/run) runs beside `make test`'s suite, marked ``interop``
# here, by file or by test. Each entry guards other people's software with this package, not a behaviour of the
# package (which never leaves `make test`): older mcp and fastmcp SDKs in environments of their own, third-party
# servers (Python ones from PyPI, node ones where the server is the point) and other ASGI servers, the Phoenix and
# MLflow viewers, the official conformance suite, the benchmarks' smoke runs, and wheel and sdist builds.
INTEROP = [
    "tests/e2e/test_server_versions.py",  # mcp 1.9.4 ... 2.0.0 and fastmcp 2.9 ... 4.0 servers, in their venvs
    "conformance/tests/test_conformance_strangers.py::test_a_real_mcp1_server",  # mcp 1.x, in its venv
    "conformance/tests/test_conformance_thirdparty.py",  # fast-agent and ag2 servers, in their venvs
    "conformance/tests/test_conformance_strawman.py",  # fast-agent 0.5.3's server, in its venv
    "tests/e2e/test_gateway_stdio.py::test_mcp_server_time_from_pypi",  # mcp-server-time, in its venv
    # an mcp 1.x server behind --processes auto, in its venv (make test: the 2026-07-28 server's lifetimes)
    "tests/e2e/test_gateway_stdio_lifetimes.py::test_a_2025_server_keeps_a_process_per_conversation",
    "tests/e2e/test_gateway_stdio.py::test_server_everything_stdio",  # a node server behind --stdio
    "tests/e2e/test_gateway_stdio.py::test_the_typescript_sdk_client",  # the TypeScript SDK's client
    # issue 57's hundred stock clients of server-filesystem (make test: the same first calls of sixteen)
    "tests/e2e/test_gateway_stdio_clients.py::test_server_filesystem_fails_no_first_call_of_stock_clients[100]",
    "tests/e2e/test_asgi_servers.py",  # Hypercorn and Granian
    "tests/e2e/test_viewers.py",  # Phoenix and MLflow
    "tests/e2e/test_gateway_conformance.py",  # the official conformance suite (node 22)
    "tests/e2e/test_benchmarks.py",  # the benchmarks' smoke runs (supergateway's too)
    "tests/e2e/test_gateway_benchmark.py",
    "tests/e2e/test_dist.py",  # the wheel and the sdist built
    # docs/gateway.md's recipes as written, from a copy installed with pip into a fresh venv, with the Inspector
    # (what they do, test_gateway_auth.py's team recipe test and the front-and-replicas tests run in make test)
    "tests/e2e/test_gateway_recipes.py",
    # the front under opentelemetry-instrument, whose httpx instrumentation sends baggage too (plain: make test's)
    "tests/e2e/test_gateway_auth.py::test_a_front_and_two_stdio_replicas[instrumented]",
    "conformance/tests/test_conformance_dist.py::test_pip_install_conformance",  # the pack's, installed in a venv
    # the docs' server files under mypy --strict: a static check, as make test-all's ruff, mypy and docs build are
    "tests/e2e/test_docs.py::test_the_server_files_in_the_docs_type_check",
]


def pytest_configure(config: pytest.Config) -> None:
    """A clone under /tmp (or /var/tmp, /dev/shm, /run/lock) is refused in one line before any test runs: each of
    the gateway's contained processes has those directories of its own, empty, so the servers the tests run from
    the clone would not be there."""
    from mcp_sessions._gateway.sealed._sandbox import private_under

    if (private := private_under(str(config.rootpath.resolve()))) is not None:
        pytest.exit(
            f"this clone is under {private}, which each of the gateway's contained processes has of its own, "
            "empty, so the servers the tests run from it are not there: clone it elsewhere (/srv, /opt, a home)",
            returncode=4,
        )
    reserve()  # this run's --process-uids (tests/_uids.py)
    config.pluginmanager.register(Census(config), "census")  # its table at the end (tests/_census.py)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The suite's own process, from here on: what collecting made (the test modules, the SDK, about 180,000
    objects) lives for the run, frozen (the collector never scans it again), and the collector's youngest generation
    is ten times Python's default, so that its full passes over what the run keeps (650,000 objects by the end of
    tests/unit, 160 ms a pass) come a tenth as often. Those passes were a fifth of the process's CPU (9.6 of 51
    CPU-s over tests/unit and tests/asgi, ``gc.callbacks``). A test that needs garbage gone collects it itself."""
    gc.freeze()
    gc.set_threshold(7000, 10, 10)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Under CI a skipped test is a failed one: CI runs every real component, so a skip there hides a gap."""
    report = yield
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, which must run every test: {report.longrepr}"
    return report


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(tuple(INTEROP)):
            item.add_marker(pytest.mark.interop)
    rank = {path: index for index, path in enumerate(SLOW_FILES)}

    def slowness(item: pytest.Item) -> int:
        path = item.path.relative_to(config.rootpath).as_posix() if item.path.is_relative_to(config.rootpath) else ""
        return rank.get(path, len(rank))

    items.sort(key=slowness)
