"""What a lone gateway's restart costs its clients: each call's latency while it restarts, beside the steady state's,
and the errors (issue 112, item 1).

One ``mcp-sessions gateway --stdio`` (reload_latency.py's echo server, of the standard library alone, its state
declared on disk: ``--conversation-state disk``, so that a restart costs a conversation no state; uncontained, as
bench_stdio.py's first table's: ``--process-containment none``) serves ``--conversations`` 2025 conversations, each
calling ``echo`` from a thread of its own, ``--pause`` seconds apart (a model's pause between two tool calls). Its
listening socket is held by this process, as systemd holds a ``.socket``
unit's, and passed to each gateway it starts (``LISTEN_FDS``, ``LISTEN_PID``); every gateway also serves
``--handover``. It is restarted ``--restarts`` times each way, the two ways alternated:

- ``handover``: the next gateway started with the same flags takes the socket from the running one, which drains
  once the next listens (the window: from the next's spawn to the old one's exit);
- ``SIGKILL and start``: the gateway SIGKILLed, the next started at once on the socket held, as systemd's
  ``Restart=always`` does (the window: from the killed gateway's end to the next's first ``/readyz`` 200).

Each call is timed, and counted in a restart's set where it overlaps its window, else in the steady state's; a call
in flight at a SIGKILL in a set of its own (its connection, the killed gateway's, is lost with it: one whose answer
had not come is an error, which no gateway can help). A call that raises (a connection refused or reset, a 5xx, a
JSON-RPC error) is an error, counted, and said. The report: each set's calls, errors, p50, p99 and most, in ms.

    python benchmarks/restart_latency.py                   # 5 restarts each way
    python benchmarks/restart_latency.py --restarts 20
    python benchmarks/restart_latency.py --quick           # one restart each way: the tests check it runs
    python benchmarks/restart_latency.py --json out.json   # also write the numbers
    python benchmarks/run_all.py --only restart --write docs/performance.md   # its parts of the page
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
from _harness import finish, load_average, section, verdict
from bench_stdio import SECRET, START_TIMEOUT, Conversation, percentile
from reload_latency import SERVER

HANDOVER = "during a handover"
KILLED = "after a SIGKILL, to ready"
CUT = "in flight at a SIGKILL"
STEADY = "steady"
LISTEN_FDS_START = 3  # sd_listen_fds(3)'s SD_LISTEN_FDS_START
Window = tuple[float, float, float]
"""A restart's: its start, the old gateway's end where it is killed (else its start), and the next one's readiness."""


class Gateways:
    """The gateways of one socket, ``held``, each started with ``argv`` and the socket passed as systemd passes it."""

    def __init__(self, argv: list[str], held: socket.socket, work: Path) -> None:
        self.argv, self.held, self.work = argv, held, work
        self.url = f"http://127.0.0.1:{held.getsockname()[1]}"
        self.running: list[subprocess.Popen[bytes]] = []

    def start(self, *, activated: bool) -> subprocess.Popen[bytes]:
        """The next gateway: on the socket held (``activated``), else taking it by ``--handover``."""
        fd = self.held.fileno()

        def as_systemd_passes_it() -> None:  # between the fork and the exec, in the child
            os.dup2(fd, LISTEN_FDS_START)
            os.environ.update(LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))

        with (self.work / f"gateway-{len(self.running)}.log").open("wb") as log:
            started = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(fd,) if activated else (),
                preexec_fn=as_systemd_passes_it if activated else None,
            )
        self.running.append(started)
        return started

    def ready(self) -> None:
        """Until the socket's ``/readyz`` says 200 (whichever gateway answers it), bounded."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self.running[-1].poll() is not None:
                raise RuntimeError(f"no gateway ready within {START_TIMEOUT:g} s: {self.said()}")
            time.sleep(0.01)

    def handed_over(self) -> Window:
        """A handover: its window."""
        old = self.running[-1]
        began = time.perf_counter()
        self.start(activated=False)
        if old.wait(timeout=START_TIMEOUT + 60) != 0:
            raise RuntimeError(f"the old gateway ended with {old.returncode}: {self.said()}")
        return began, began, time.perf_counter()

    def killed_and_started(self) -> Window:
        """A SIGKILL and a start: its window, the killed gateway's end (its connections closed) in it."""
        old = self.running[-1]
        began = time.perf_counter()
        old.kill()
        old.wait()
        ended = time.perf_counter()
        self.start(activated=True)
        self.ready()
        return began, ended, time.perf_counter()

    def said(self) -> str:
        return "".join(path.read_text()[-1000:] for path in sorted(self.work.glob("gateway-*.log")))

    def stop(self) -> None:
        for gateway in self.running:
            if gateway.poll() is None:
                gateway.kill()
                gateway.wait()


def run(restarts: int, conversations: int, pause: float, steady: float) -> dict[str, tuple[list[float], list[str]]]:
    """Each set's latencies (ms) and errors."""
    calls: list[tuple[float, float, str | None]] = []  # each call's start, end, and its error
    windows: dict[str, list[Window]] = {HANDOVER: [], KILLED: []}
    with tempfile.TemporaryDirectory(prefix="restart-latency-") as work, socket.create_server(("127.0.0.1", 0)) as held:
        server = Path(work, "echo.py")
        server.write_text(SERVER, encoding="utf-8")
        (Path(work) / "run").mkdir(mode=0o700)
        port = held.getsockname()[1]
        argv = [sys.executable, "-m", "mcp_sessions", "gateway", "--port", str(port), "--log-level", "warning"]
        argv += ["--stdio", f"{sys.executable} {server}", "--conversation-state", "disk", "--warm", "0"]
        argv += ["--process-containment", "none"]  # as bench_stdio.py's: what is measured is the socket's handover
        argv += ["--handover", str(Path(work, "run", "handover")), "--process-state", str(Path(work, "state"))]
        if os.geteuid() == 0:  # its processes as root: the benchmark's echo server, on loopback
            argv.append("--accept-root-processes")
        os.environ["MCP_SESSIONS_SECRET"] = SECRET
        gateways = Gateways(argv, held, Path(work))
        stop = threading.Event()

        def calling() -> None:
            with httpx.Client(timeout=START_TIMEOUT + 60) as http:
                conversation = Conversation(http, gateways.url + "/mcp")
                while not stop.is_set():
                    started = time.perf_counter()
                    failed = None
                    try:
                        conversation.call()
                    except (httpx.HTTPError, AssertionError, KeyError) as exc:
                        failed = f"{type(exc).__name__}: {exc}"[:200]
                    calls.append((started, time.perf_counter(), failed))
                    stop.wait(pause)

        try:
            gateways.start(activated=True)
            gateways.ready()
            callers = [threading.Thread(target=calling) for _ in range(conversations)]
            for caller in callers:
                caller.start()
            try:
                for _ in range(restarts):
                    for name, restart in ((HANDOVER, gateways.handed_over), (KILLED, gateways.killed_and_started)):
                        stop.wait(steady)
                        windows[name].append(restart())
                stop.wait(steady)
            finally:
                stop.set()
                for caller in callers:
                    caller.join()
        finally:
            gateways.stop()
    sets: dict[str, tuple[list[float], list[str]]] = {name: ([], []) for name in (STEADY, HANDOVER, CUT, KILLED)}
    for began, ended, failed in calls:
        name = set_of(began, ended, windows)
        sets[name][0].append((ended - began) * 1000)
        sets[name][1].extend([failed] if failed else [])
    return sets


def set_of(began: float, ended: float, windows: dict[str, list[Window]]) -> str:
    """The set of a call from ``began`` to ``ended``: the restart whose window it overlaps, else the steady state."""
    for name, each in windows.items():
        for start, old_ended, ready in each:
            if name == KILLED and began < old_ended and ended > start:
                return CUT  # sent to the killed gateway: its connection is lost with it
            if began < ready and ended > start:
                return name
    return STEADY


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--restarts", type=int, default=5, help="restarts each way")
    parser.add_argument("--conversations", type=int, default=6)
    parser.add_argument("--pause", type=float, default=0.3, help="seconds between a conversation's two calls")
    parser.add_argument("--steady", type=float, default=3.0, help="seconds of calls between two restarts")
    parser.add_argument("--quick", action="store_true", help="one restart each way, two conversations")
    parser.add_argument("--json", help="also write the results here")
    options = parser.parse_args()
    if options.quick:
        options.restarts, options.conversations, options.steady = 1, 2, 1.0
    began = (time.monotonic(), load_average())
    sets = run(options.restarts, options.conversations, options.pause, options.steady)
    steady = sets[STEADY][0]
    base = (statistics.median(steady), percentile(steady, 0.99)) if steady else (0.0, 0.0)
    rows = []
    for name, (values, errors) in sets.items():
        if values:
            p50, p99 = statistics.median(values), percentile(values, 0.99)
            added = "" if name in (STEADY, CUT) else f"{p50 - base[0]:+.1f} / {p99 - base[1]:+.1f}"
            rows.append([name, len(values), len(errors), f"{p50:.1f}", f"{p99:.1f}", f"{max(values):.1f}", added])
    said = [f"{name}: {n} x {error}" for name, (_, errors) in sets.items() for error, n in Counter(errors).items()]
    text = (
        f"A lone `mcp-sessions gateway --stdio` (an echo server of the standard library's, `--conversation-state "
        f"disk`) restarted {options.restarts} times each way, alternated, under {options.conversations} 2025 "
        f"conversations each calling every {options.pause:g} s: by `--handover` (the next gateway takes the "
        "socket; the old one drains once it listens), and by a SIGKILL and a start at once on the socket this "
        "process holds as systemd holds a `.socket` unit's (`LISTEN_FDS`). A call is a restart's where it overlaps "
        "one (a handover: from the next's spawn to the old one's exit; a SIGKILL: from the old one's end to the "
        "next's first `/readyz` 200), else steady; one in flight at a SIGKILL is lost with its connection, which no "
        "gateway can help, and is counted apart. After a SIGKILL a conversation's next call waits for the next "
        "gateway's start and its process's: what a restart costs." + (f" Errors: {'; '.join(said)}." if said else "")
    )
    header = ["calls", "count", "errors", "p50 ms", "p99 ms", "most ms", "added to steady p50 / p99 ms"]
    lost = [error for name, (_, errors) in sets.items() if name != CUT for error in errors]
    measured = "; ".join(f"{row[0]}: {row[2]} errors of {row[1]}, p50 {row[3]} ms, p99 {row[4]} ms" for row in rows)
    target = (
        "A lone gateway's restart (`--handover`; a SIGKILL and a start under socket activation) costs its clients "
        "latency only: no call that was not in flight at a SIGKILL fails"
    )
    why = f"{len(lost)} such call(s) failed" if lost else "no call failed but those in flight at a SIGKILL"
    finish(
        "restart_latency.py",
        options.json,
        options.quick,
        began,
        [section("The gateway: what a restart adds", text, header, rows)],
        [verdict(target, measured, not lost, why)],
        sets={name: {"ms": values, "errors": errors} for name, (values, errors) in sets.items()},
    )


if __name__ == "__main__":
    main()
