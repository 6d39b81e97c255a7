"""ag2 1.2.1's ``MCPServer``, as its guide serves an agent, run by
conformance/tests/test_conformance_thirdparty.py in the ag2 venv
(``make .venv-ag2/.installed``). ``python _ag2_server.py`` serves one agent on 127.0.0.1, on a port the OS picks,
and prints that port on one line. The agent's model is ``ag2.testing.TestConfig``, ag2's scripted
model: no provider, no key. Imports only what that environment has: ag2 and uvicorn.
"""

from __future__ import annotations

import importlib
import socket

import uvicorn


def main() -> None:
    # Imported by name: mypy reads the tests in this checkout's environment, which has no ag2.
    ag2 = importlib.import_module("ag2")
    test_config = importlib.import_module("ag2.testing").TestConfig
    server = importlib.import_module("ag2.mcp").MCPServer
    agent = ag2.Agent("assistant", "Answer briefly.", config=test_config(*["Hello."] * 100))
    app = server(agent)  # the defaults: conversations on, the endpoint at /mcp/
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
