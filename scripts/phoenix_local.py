"""Run Arize Phoenix (``phoenix serve``) with every listener on 127.0.0.1.

``PHOENIX_HOST`` places Phoenix's web UI and OTLP/HTTP endpoint, but its
OTLP/gRPC receiver (``PHOENIX_GRPC_PORT``, 4317 by default) always binds every
interface (``[::]``), and Phoenix has no setting for that address. This
launcher binds it to the loopback interface instead, then runs
``phoenix serve`` as the ``phoenix`` command would. Run it with the Python of
the environment Phoenix is installed in:

    PHOENIX_HOST=127.0.0.1 .phoenix/bin/python scripts/phoenix_local.py

``tests/_viewers.py`` starts Phoenix this way, and ``tests/e2e/test_viewers.py``
checks that nothing it starts listens beyond the loopback interface.
"""

from __future__ import annotations

import runpy
import sys
from typing import Any

from grpc.aio import _server  # Phoenix's gRPC receiver is a grpc.aio server

_add_insecure_port = _server.Server.add_insecure_port
_add_secure_port = _server.Server.add_secure_port


def _loopback(address: str) -> str:
    """``[::]:PORT`` (every interface) as ``127.0.0.1:PORT``; any other address as it is."""
    host, _, port = address.rpartition(":")
    return f"127.0.0.1:{port}" if host in ("[::]", "0.0.0.0", "") else address


def _insecure(self: Any, address: str) -> int:
    return _add_insecure_port(self, _loopback(address))


def _secure(self: Any, address: str, credentials: Any) -> int:
    return _add_secure_port(self, _loopback(address), credentials)


_server.Server.add_insecure_port = _insecure  # type: ignore[method-assign]
_server.Server.add_secure_port = _secure  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.argv = ["phoenix", "serve", *sys.argv[1:]]
    runpy.run_module("phoenix.server.main", run_name="__main__", alter_sys=True)
