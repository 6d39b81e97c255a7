"""What the gateway adds to a request, against the upstream directly and against the other ways to proxy one.

Each compared setup is a uvicorn process of its own on 127.0.0.1, all pinned to one CPU (the client to
another when there are two), the same hash seed and memory layout (as ``bench_uvicorn.py``):

- ``upstream directly``: the ``mcp`` SDK's ``MCPServer`` (JSON responses), the base;
- ``pass-through control``: the same app behind a do-nothing ASGI wrapper, in its own process: its
  added latency is the noise between two processes (it reads about 1.00);
- ``bare httpx proxy``: 40 lines of Starlette-free ASGI, one pooled ``httpx.AsyncClient``, bodies
  streamed both ways, nothing else (no header hygiene, no failure answers);
- ``fastmcp create_proxy``: fastmcp's proxy server in front of the upstream;
- ``gateway, no session`` and ``gateway, with session``: ``mcp-sessions gateway``'s app, served in process
  by this script's uvicorn as the other setups are;
- ``gateway, session and token``: the same, verifying each request's bearer token (RS256, its key from a
  JWKS this script serves on loopback, fetched once at the gateway's start) and ending the request's
  stream at the token's expiry: what ``--auth-jwks`` adds to every request;
- ``mcp-sessions gateway command, ...``: the gateway as users run it, its console script
  (``mcp-sessions gateway --upstream URL --port PORT --log-level warning``), no session and with one.

Then the command's start: how long from its spawn to its first answer (a ``tools/call`` through it), wall
clock and the process's CPU, a new process each time.

The proxies all forward to one more upstream process of their own. One client (``httpx``, keep-alive)
sends 2026-07-28 ``tools/call`` requests one at a time, a request to each setup per round, in a new
shuffled order each round, so that the machine's drift hits every setup alike. Each setup's latency
is read at p50 and p99; its added latency is that minus the upstream's own at the same percentile.
A proxy's CPU per request is its process's own (``/proc/<pid>/task/*/schedstat``), the upstream's
work being in another process.

    python benchmarks/bench_gateway.py                   # full run
    python benchmarks/bench_gateway.py --quick           # a few rounds: the tests check it runs
    python benchmarks/bench_gateway.py --json out.json   # also write the results for run_all.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import http.server
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, NoReturn

import httpx
import jwt
from _harness import (
    NAME_HEADERS,
    SAME_LAYOUT,
    SECRET,
    PassThrough,
    Servers,
    build_mcp_app,
    call_headers,
    client_headers,
    cpu_seconds,
    finish,
    free_port,
    load_average,
    new_session,
    pick_cpus,
    section,
    serve,
    servers,
    tools_call,
    until_ready,
    verdict,
)
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from starlette.types import Receive, Scope, Send

# name -> (what its process serves, whether it forwards to the proxies' upstream, whether requests carry a session)
SETUPS: dict[str, tuple[str, bool, bool]] = {
    "upstream directly": ("upstream", False, False),
    "pass-through control": ("pass-through", False, False),
    "bare httpx proxy": ("bare-proxy", True, False),
    "fastmcp create_proxy": ("create-proxy", True, False),
    "gateway, no session": ("gateway", True, False),
    "gateway, with session": ("gateway", True, True),
    "gateway, session and token": ("gateway-token", True, True),
    "mcp-sessions gateway command, no session": ("gateway-command", True, False),
    "mcp-sessions gateway command, with session": ("gateway-command", True, True),
}
COMMAND = "mcp-sessions gateway command, with session"
ISSUER, AUDIENCE = "https://issuer.bench.example", "https://gateway.bench.example/mcp"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
BASE = "upstream directly"
GATEWAY_MULTIPLE = 1.5  # the gateway with a session adds at most this multiple of what the bare proxy adds (p50)


class BareProxy:
    """The least a streaming proxy does: the request as it came (its Host aside), the response as it comes."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/").rsplit("/mcp", 1)[0]
        self.client = httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_keepalive_connections=64))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = [(name, value) for name, value in scope["headers"] if name != b"host"]

        async def body() -> AsyncIterator[bytes]:
            while True:
                message = await receive()
                yield message.get("body", b"")
                if not message.get("more_body", False):
                    return

        url = self.upstream + scope["path"]
        request = self.client.build_request(scope["method"], url, headers=headers, content=body())
        response = await self.client.send(request, stream=True)
        try:
            hop = {b"connection", b"keep-alive", b"transfer-encoding"}
            start = [(name.lower(), value) for name, value in response.headers.raw if name.lower() not in hop]
            await send({"type": "http.response.start", "status": response.status_code, "headers": start})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


def app_of(kind: str, upstream: str, jwks: str) -> Any:
    if kind == "upstream":
        return build_mcp_app()
    if kind == "pass-through":
        return PassThrough(build_mcp_app())
    if kind == "bare-proxy":
        return BareProxy(upstream)
    if kind == "create-proxy":
        from fastmcp.server import create_proxy

        return create_proxy(upstream).http_app(path="/mcp")
    from mcp_sessions import SessionsConfig, gateway_app
    from mcp_sessions._gateway.auth._users import GatewayAuth

    auth = GatewayAuth(jwks_url=jwks, issuer=ISSUER, audience=AUDIENCE) if kind == "gateway-token" else None
    return gateway_app([upstream], config=SessionsConfig(secret=SECRET), auth=auth)


def gateway_command(upstream: str, port: int) -> list[str]:
    """``mcp-sessions gateway`` as a user runs it, the console script of this interpreter's environment. Without
    the access log (a line per request), as no other setup writes one."""
    script = str(Path(sys.executable).with_name("mcp-sessions"))
    return [script, "gateway", "--upstream", upstream, "--port", str(port), "--log-level", "warning"]


def become_gateway(upstream: str) -> NoReturn:
    """A ``--serve gateway-command`` process becomes the command (the same process, for :func:`servers`), its port
    printed first as :func:`serve` prints it; it answers once it has started (:func:`until_ready` waits)."""
    port = free_port()
    print(port, flush=True)
    command = gateway_command(upstream, port)
    os.execve(command[0], command, dict(os.environ, MCP_SESSIONS_SECRET=SECRET))


def first_answer(upstream: str) -> tuple[float, float]:
    """The gateway command spawned: the seconds until it has answered its first ``tools/call``, and the CPU seconds
    its process spent by then. Its port refuses connections until the app has started: asked again each 2 ms."""
    port = free_port()
    url, body = f"http://127.0.0.1:{port}/mcp", json.dumps(tools_call()).encode()
    environ = dict(os.environ, MCP_SESSIONS_SECRET=SECRET, PYTHONHASHSEED="0")
    began = time.perf_counter()
    process = subprocess.Popen([*SAME_LAYOUT, *gateway_command(upstream, port)], env=environ)
    try:
        with httpx.Client(timeout=60) as client:
            for _ in range(30_000):  # a minute at most
                try:
                    response = client.post(url, content=body, headers=client_headers(body, NAME_HEADERS))
                except httpx.TransportError:
                    if process.poll() is not None:
                        raise RuntimeError(f"the gateway exited ({process.returncode}) before answering") from None
                    time.sleep(0.002)
                    continue
                took = time.perf_counter() - began
                assert response.status_code == 200, response.content
                return took, cpu_seconds(process.pid)
        raise RuntimeError("the gateway did not answer within a minute")
    finally:
        process.terminate()
        process.wait(30)


@contextlib.contextmanager
def served_jwks() -> Iterator[str]:
    """The JWKS of :data:`KEY`, served on loopback by a thread of this process: its URL."""
    jwk = {**json.loads(RSAAlgorithm.to_jwk(KEY.public_key())), "kid": "bench", "alg": "RS256", "use": "sig"}
    body = json.dumps({"keys": [jwk]}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
        finally:
            server.shutdown()


def bearer() -> list[tuple[bytes, bytes]]:
    """The ``Authorization`` header of a token of :data:`KEY` for the gateway, valid for an hour."""
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "bench-user", "iat": now, "exp": now + 3600}
    token = jwt.encode(claims, KEY, algorithm="RS256", headers={"kid": "bench"})
    return [(b"authorization", f"Bearer {token}".encode())]


async def measure(started: Servers, rounds: int, warmup: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Each setup's latencies (seconds), one request at a time, the setups in a new shuffled order each
    round; and each setup's process CPU seconds per request."""
    clients = {name: httpx.AsyncClient(timeout=60) for name in SETUPS}
    latencies: dict[str, list[float]] = {name: [] for name in SETUPS}
    try:
        requests = {}
        for name, (kind, _, with_session) in SETUPS.items():
            url, extra = started[name][1], bearer() if kind == "gateway-token" else []
            await until_ready(clients[name], url, extra=extra)
            token = await new_session(clients[name], url, extra) if with_session else None
            body = tools_call(token)
            raw = json.dumps(body).encode()
            requests[name] = (url, raw, client_headers(raw, [*call_headers(token), *extra]))

        async def one(name: str) -> float:
            url, raw, headers = requests[name]
            began = time.perf_counter()
            response = await clients[name].post(url, content=raw, headers=headers)
            elapsed = time.perf_counter() - began
            assert response.status_code == 200 and b'"isError":false' in response.content, (name, response.content)
            return elapsed

        for _ in range(warmup):
            for name in SETUPS:
                await one(name)
        before = {name: cpu_seconds(started[name][0].pid) for name in SETUPS}
        order = list(SETUPS)
        for _ in range(rounds):
            random.shuffle(order)
            for name in order:
                latencies[name].append(await one(name))
        cpu = {name: (cpu_seconds(started[name][0].pid) - before[name]) / rounds for name in SETUPS}
    finally:
        for client in clients.values():
            await client.aclose()
    return latencies, cpu


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def summarize(latencies: dict[str, list[float]], cpu: dict[str, float]) -> dict[str, dict[str, Any]]:
    base_p50, base_p99 = percentile(latencies[BASE], 0.5), percentile(latencies[BASE], 0.99)
    rows = {}
    for name, values in latencies.items():
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        rows[name] = {
            "name": name,
            "p50_us": p50 * 1e6,
            "p99_us": p99 * 1e6,
            "added_p50_us": (p50 - base_p50) * 1e6,
            "added_p99_us": (p99 - base_p99) * 1e6,
            "p50_ratio": p50 / base_p50,
            "cpu_us": cpu[name] * 1e6,
        }
    return rows


def gateway_verdict(rows: dict[str, dict[str, Any]], name: str, said: str) -> dict[str, str]:
    """Whether the setup ``name`` (``said`` on the page) adds at most :data:`GATEWAY_MULTIPLE` what the bare proxy
    adds."""
    gateway, bare = rows[name], rows["bare httpx proxy"]
    multiple = gateway["added_p50_us"] / bare["added_p50_us"] if bare["added_p50_us"] > 0 else None
    return verdict(
        f"{said} adds ≤ {GATEWAY_MULTIPLE:g}x what a bare httpx proxy adds (p50)",
        f"{name} {gateway['added_p50_us']:+.0f} µs (p99 {gateway['added_p99_us']:+.0f}), bare httpx "
        f"proxy {bare['added_p50_us']:+.0f} µs (p99 {bare['added_p99_us']:+.0f}), fastmcp create_proxy "
        f"{rows['fastmcp create_proxy']['added_p50_us']:+.0f} µs, pass-through control "
        f"{rows['pass-through control']['added_p50_us']:+.0f} µs, over the upstream's own p50 of "
        f"{rows[BASE]['p50_us']:.0f} µs",
        None if multiple is None else multiple <= GATEWAY_MULTIPLE,
        "the bare proxy added nothing measurable" if multiple is None else f"{multiple:.2f}x",
    )


def start_section(starts: list[tuple[float, float]]) -> tuple[dict[str, Any], dict[str, str]]:
    """The gateway command's start to its first answer: its section and its verdict (reported, not judged)."""
    walls, cpus = sorted(wall * 1e3 for wall, _ in starts), sorted(cpu for _, cpu in starts)
    text = (
        "How long `mcp-sessions gateway --upstream URL` takes from its spawn to its first answer (a 2026-07-28 "
        "`tools/call` forwarded to the upstream; until the app has started its port refuses connections, asked "
        f"again each 2 ms), a new process each time, {len(starts)} times one after another; and the CPU its process "
        "spent by then (most of it Python's start and the imports)."
    )
    row = [
        "mcp-sessions gateway command",
        str(len(starts)),
        f"{percentile(walls, 0.5):.0f}",
        f"{walls[0]:.0f}",
        f"{walls[-1]:.0f}",
        f"{percentile(cpus, 0.5):.2f}",
    ]
    header = ["what", "starts", "p50 ms", "least ms", "most ms", "CPU s (p50)"]
    judged = verdict(
        "The gateway command's time from its spawn to its first answer",
        f"p50 {row[2]} ms wall, {row[5]} CPU-s, over {len(starts)} starts",
        None,
        "reported",
    )
    return section("The gateway: from its start to its first answer", text, header, [row]), judged


def main(args: argparse.Namespace) -> None:
    began = time.monotonic(), load_average()
    server_cpus, client_cpus = pick_cpus()
    if client_cpus is not None:
        os.sched_setaffinity(0, client_cpus)
    with servers({"upstream": [__file__, "--serve", "upstream"]}, server_cpus) as behind, served_jwks() as jwks:
        upstream = behind["upstream"][1]
        commands = {
            name: [__file__, "--serve", kind, "--upstream", upstream, "--jwks", jwks]
            for name, (kind, _, _) in SETUPS.items()
        }
        with servers(commands, server_cpus) as started:
            latencies, cpu = asyncio.run(measure(started, args.rounds, args.warmup))
        starts = [first_answer(upstream) for _ in range(args.starts)]
    rows = summarize(latencies, cpu)
    how = (
        "What `mcp-sessions gateway` adds to a 2026-07-28 `tools/call`, against the upstream directly, a bare httpx "
        "streaming proxy and fastmcp's `create_proxy` (and with a bearer token verified against a JWKS, as "
        "`--auth-jwks` does), measured by `bench_gateway.py`: each setup its own process (the in-process rows "
        "the gateway's app in this script's uvicorn, the command rows `mcp-sessions gateway` as a user starts it, "
        "`--log-level warning`: no access log, as no other setup logs a request), one request at a time, the "
        f"setups alternated request by request for {args.rounds} rounds, the "
        "proxies forwarding to an `MCPServer` of their own. \"Added\" is a setup's latency less the upstream's at "
        'the same percentile; "CPU" is the proxy process\'s own (for the upstreams, their whole request).'
    )
    header = ["setup", "p50 µs", "p99 µs", "added p50 µs", "added p99 µs", "p50 ratio", "CPU µs/request"]
    table = [
        [
            r["name"],
            f"{r['p50_us']:.0f}",
            f"{r['p99_us']:.0f}",
            f"{r['added_p50_us']:+.0f}",
            f"{r['added_p99_us']:+.0f}",
            f"{r['p50_ratio']:.2f}",
            f"{r['cpu_us']:.0f}",
        ]
        for r in rows.values()
    ]
    started, start_verdict = start_section(starts)
    verdicts = [
        gateway_verdict(rows, "gateway, with session", "The gateway with a session"),
        gateway_verdict(rows, COMMAND, "The gateway command (`mcp-sessions gateway`) with a session"),
        start_verdict,
    ]
    sections = [section("The gateway", how, header, table), started]
    finish("gateway", args.json, args.quick, began, sections, verdicts, rows=list(rows.values()), starts=starts)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400, help="measured requests per setup")
    parser.add_argument("--warmup", type=int, default=30, help="unmeasured rounds first")
    parser.add_argument("--starts", type=int, default=10, help="how many times the command is started")
    parser.add_argument("--quick", "--smoke", action="store_true", help="a few rounds only")
    parser.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--upstream", default="", help=argparse.SUPPRESS)
    parser.add_argument("--jwks", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve == "gateway-command":
        become_gateway(args.upstream)
    elif args.serve:
        serve(functools.partial(app_of, args.serve, args.upstream, args.jwks))
    else:
        if args.quick:
            args.rounds, args.warmup, args.starts = 5, 2, 1
        main(args)
