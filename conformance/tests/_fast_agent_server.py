"""fast-agent 0.5.3's strawman sessions server, run as its README runs it, by
conformance/tests/test_conformance_thirdparty.py in the fast-agent
venv (``make .venv-fast-agent/.installed .venv-fast-agent/sdist/.downloaded``).

``python _fast_agent_server.py EXAMPLE`` runs ``EXAMPLE`` (the sdist's
``examples/experimental/mcp_sessions/session_server.py``, copied out of it by the test) as
``EXAMPLE --transport streamable-http --host 127.0.0.1 --port 0``, and prints on one line the port the OS picked
once uvicorn listens: the example's own code, untouched, told only to listen where nobody else does.
Imports only what that environment has: uvicorn.
"""

from __future__ import annotations

import runpy
import socket
import sys

import uvicorn


def main(example: str) -> None:
    startup = uvicorn.Server.startup

    async def startup_then_print_port(self: uvicorn.Server, sockets: list[socket.socket] | None = None) -> None:
        await startup(self, sockets=sockets)
        print(self.servers[0].sockets[0].getsockname()[1], flush=True)

    uvicorn.Server.startup = startup_then_print_port  # type: ignore[method-assign]
    sys.argv = [example, "--transport", "streamable-http", "--host", "127.0.0.1", "--port", "0"]
    runpy.run_path(example, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1])
