"""What ``--process-env-mask`` costs a process's HTTPS request against a direct connection, in one run.

One ``mcp-sessions gateway --stdio`` command, its process a uid of its own under bubblewrap and ``egress``, with
``--process-env-mask API_TOKEN=ADDRESS:PORT``. An HTTPS server of the benchmark's own on this host's address (its own
certificate authority, the gateway's ``SSL_CERT_FILE``) listens on two ports: the masked one, which the process
reaches through the gateway's proxy alone (its TLS terminated there, the placeholder swapped, TLS again to the
server), and another, granted by ``--process-allow-net`` and reached directly (by the kernel alone). The process's
``urllib`` (a new connection per request, as ``urllib`` makes them) alternates the two, request by request, in a new
shuffled order each round, and times each itself:

- a small request: what the proxy adds to one HTTPS request (two TLS handshakes instead of one, the head parsed and
  rewritten);
- a download of 10 MB, read whole.

Run as root (the uids, the namespaces and the rules need it), on an idle machine:

    python benchmarks/bench_masks.py                  # full run
    python benchmarks/bench_masks.py --quick          # a few rounds
    python benchmarks/bench_masks.py --json out.json  # also write the numbers
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import shutil
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from _harness import finish, load_average, section
from bench_egress import called, gateway, host_address, started

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the stand-in server's authority, the tests'
from _authorities import stand_in_server

SIZE = 10 << 20
TOKEN = "ghp_" + "B3nchT0kenValue" * 2 + "01234567"
SERVER = r"""
import json, os, random, ssl, sys, time, urllib.request
def fetch(masked, direct, path, rounds):
    openers = {"proxy": urllib.request.build_opener(),
               "direct": urllib.request.build_opener(urllib.request.ProxyHandler({}))}
    urls = {"proxy": masked + path, "direct": direct + path}
    seen = {"proxy": [], "direct": []}
    for _ in range(rounds):
        for way in random.sample(list(urls), 2):
            asked = urllib.request.Request(urls[way], headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]})
            start = time.perf_counter()
            with openers[way].open(asked, timeout=120) as answer:
                size = len(answer.read())
            seen[way].append((time.perf_counter() - start) * 1000)
            assert size == int(answer.headers["Content-Length"])
    return json.dumps(seen)
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    params = message.get("params") or {}
    if message["method"] == "initialize":
        result = {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "bench", "version": "1"}}
    else:
        arguments = params.get("arguments", {})
        text = fetch(**arguments) if params.get("name") == "fetch" else arguments.get("text", "")
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
"""


@contextmanager
def serving(address: str, chain: str, key: str) -> Iterator[tuple[int, int]]:
    """Two HTTPS servers on ``address`` (``/small``: 2 bytes; ``/big``: ``SIZE``): their ports."""
    bodies = {"/small": b"ok", "/big": bytes(SIZE)}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = bodies.get(self.path, b"")
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain, key)
    servers = [http.server.ThreadingHTTPServer((address, 0), Handler) for _ in range(2)]
    for server in servers:
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield servers[0].server_address[1], servers[1].server_address[1]
    finally:
        for server in servers:
            server.shutdown()


def run(small: int, big: int) -> dict[str, dict[str, list[float]]]:
    address = host_address()
    work = Path(tempfile.mkdtemp(prefix="mcp-sessions-bench-masks-", dir="/var/lib"))
    try:
        work.chmod(0o755)
        server = work / "server.py"
        server.write_text(SERVER)
        server.chmod(0o644)
        roots, chain, key = stand_in_server(work, [address])
        os.environ["SSL_CERT_FILE"] = roots  # the gateway's: the proxy verifies the server against it
        with serving(address, chain, key) as (masked, direct), httpx.Client(timeout=600) as http:
            options = (
                *("--process-network", "egress", "--process-allow-net", f"{address}:{direct}"),
                *("--process-env", "API_TOKEN=header:X-Token", "--process-env-mask", f"API_TOKEN={address}:{masked}"),
            )
            with gateway(server, "60800-60829", *options) as url:
                http.headers["X-Token"] = TOKEN
                session = started(http, url)[0]
                seen: dict[str, dict[str, list[float]]] = {}
                for path, rounds in (("/small", small), ("/big", big)):
                    arguments = {"masked": f"https://{address}:{masked}", "direct": f"https://{address}:{direct}"}
                    text = called(http, url, session, "fetch", {**arguments, "path": path, "rounds": rounds})[0]  # type: ignore[dict-item]
                    seen[path] = json.loads(text)
                return seen
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=200, help="small HTTPS requests each way")
    parser.add_argument("--big", type=int, default=10, help="10 MB downloads each way")
    parser.add_argument("--quick", action="store_true", help="a few of each")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_masks runs as root: a uid per process, namespaces and nftables rules")
    began = (time.monotonic(), load_average())
    small, big = (10, 2) if args.quick else (args.small, args.big)
    seen = run(small, big)
    what = {"/small": "an HTTPS request (a new connection)", "/big": "10 MB over HTTPS, read whole"}
    rows = []
    for path, ways in seen.items():
        p50 = {way: statistics.median(times) for way, times in ways.items()}
        p99 = {
            way: statistics.quantiles(times, n=100)[98] if len(times) > 1 else p50[way] for way, times in ways.items()
        }
        direct, proxy = p50["direct"], p50["proxy"]
        rows.append(
            [
                what[path],
                len(ways["direct"]),
                f"{direct:.2f}",
                f"{proxy:.2f}",
                f"{proxy - direct:+.2f}",
                f"{proxy / direct:.2f}x",
                f"{p99['direct']:.2f} / {p99['proxy']:.2f}",
            ]
        )
    text = (
        "What `--process-env-mask` costs an HTTPS request of a stdio server's process (a uid of its own, bubblewrap, "
        "`egress`) against a direct connection, alternated request by request in one process, timed by its own "
        "`urllib` (a new connection each request): through the gateway's proxy, the process's TLS is terminated "
        "there (a certificate of the gateway's authority), the placeholder swapped in the head, and TLS made again to "
        "the server (verified against the gateway's roots); directly, the kernel alone forwards the connection. The "
        "server is the benchmark's own, on this host's address."
    )
    header = ["what", "count", "direct p50 ms", "proxy p50 ms", "added ms", "proxy / direct", "p99 ms (direct / proxy)"]
    finish(
        "bench_masks.py",
        args.json,
        args.quick,
        began,
        [section("stdio servers: what a masked credential costs", text, header, rows)],
        [],
        seen=seen,
    )


if __name__ == "__main__":
    main()
