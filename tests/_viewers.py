"""Arize Phoenix and MLflow run for real on 127.0.0.1: start, wait until ready, query their sessions, stop.

Each server is a child process in a session of its own (so that MLflow's workers stop with it), with its
data in a temporary directory, on a free port. Both take tens of seconds to start on a busy machine, so
:func:`start_viewers` starts them together and waits for both.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from _redis import free_port
from _waits import Deadline

START_SECONDS = 240.0  # Phoenix migrates a new database at start: slow on a loaded 2-core machine
PORT_RETRIES = 3  # starts on new ports when a free port was taken before a viewer bound it
BIN = Path(sys.executable).parent
# MLflow's web UI cannot run beside Phoenix (docs/observability.md): for pictures of it, an mlflow of its own.
MLFLOW = Path(os.environ.get("VIEWERS_MLFLOW") or BIN / "mlflow")
# Phoenix's OTLP/gRPC receiver binds every interface whatever PHOENIX_HOST says: this launcher binds it to 127.0.0.1.
PHOENIX_LAUNCHER = Path(__file__).resolve().parents[1] / "scripts" / "phoenix_local.py"
_LOOPBACK = frozenset({"127.0.0.1", "::1", "::ffff:127.0.0.1"})


@dataclass
class Viewer:
    """One viewer process: its base URL, its log, and how to tell it is ready."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    health: str

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n{self.tail()}")
        try:
            return httpx.get(self.url + self.health, timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def port_taken(self) -> bool:
        """It exited because its port was bound by another process between :func:`free_port` and its start."""
        return self.process.poll() is not None and "address already in use" in self.tail().lower()

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Terminate the viewer and every process it started (its own process group), bounded in time."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)  # its data is thrown away: no need to wait for a clean stop
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)


def listening_addresses(session: int) -> set[tuple[str, int]]:
    """The (address, port) of every TCP socket listened on by the processes of ``session`` (a viewer and every
    process it started: each viewer leads a session of its own), from /proc."""
    inodes: set[str] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, PermissionError):
            fields = stat.read_text().rpartition(")")[2].split()  # state, ppid, pgrp, session, ...
            if int(fields[3]) != session:
                continue
            for fd in (stat.parent / "fd").iterdir():
                with contextlib.suppress(FileNotFoundError, OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    found: set[tuple[str, int]] = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            # /proc writes the address as 32-bit words in host (little-endian) order.
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.add((socket.inet_ntop(family, raw), int(port, 16)))
    return found


def beyond_loopback(viewer: Viewer) -> set[tuple[str, int]]:
    """What ``viewer`` (and every process it started) listens on beyond the loopback interface."""
    listening = listening_addresses(viewer.process.pid)
    assert listening, f"{viewer.name} listens on nothing?"  # the check itself works: the viewer's own port is there
    return {(address, port) for address, port in listening if address not in _LOOPBACK}


def _spawn(name: str, argv: list[str], workdir: Path, port: int, health: str, env: dict[str, str]) -> Viewer:
    """``argv`` in a session of its own, its OTEL_, PHOENIX_ and MLFLOW_ variables only those of ``env``."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_", "MLFLOW_"))}
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, cwd=workdir, env={**inherited, **env}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Viewer(name, f"http://127.0.0.1:{port}", process, log, health)


def start_phoenix(workdir: Path) -> Viewer:
    """``phoenix serve`` on a free port, its database in ``workdir``, nothing fetched from the internet."""
    port = free_port()
    env = {
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_WORKING_DIR": str(workdir / "phoenix"),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PHOENIX_AGENTS_DISABLE_BASH": "true",  # its assistant's server-side shell, on by default
    }
    return _spawn("phoenix", [str(BIN / "python"), str(PHOENIX_LAUNCHER)], workdir, port, "/healthz", env)


def start_mlflow(workdir: Path) -> Viewer:
    """``mlflow server`` with one worker on a free port, its SQLite store and artifacts in ``workdir``."""
    port = free_port()
    argv = [
        str(MLFLOW),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{workdir / 'mlflow.db'}",
        "--default-artifact-root",
        str(workdir / "mlflow-artifacts"),
    ]
    # No job runner: it starts two more processes (a huey consumer with ten workers) that nothing here uses.
    return _spawn("mlflow", argv, workdir, port, "/health", {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})


@contextlib.contextmanager
def start_viewers(workdir: Path) -> Iterator[tuple[Viewer, Viewer]]:
    """Phoenix and MLflow, started together; both are stopped when the block ends, whatever happened."""
    starters = (start_phoenix, start_mlflow)
    started: list[Viewer] = []
    retries = PORT_RETRIES
    try:
        for start in starters:
            started.append(start(workdir))
        waiting = list(range(len(started)))

        def unready() -> str:
            return "not ready:\n" + "\n".join(f"--- {started[i].name}\n{started[i].tail()}" for i in waiting)

        deadline = Deadline(unready, START_SECONDS)
        while waiting:
            for index in list(waiting):
                if started[index].port_taken() and retries:
                    # The free port was taken by another test's server before the viewer bound it: new ports.
                    retries -= 1
                    started[index] = starters[index](workdir)
                elif started[index].ready():
                    waiting.remove(index)
            if waiting:
                deadline.check()
                time.sleep(0.5)
        yield started[0], started[1]
    finally:
        for viewer in started:
            viewer.stop()


# -- what each viewer shows -----------------------------------------------------------------------


def _phoenix_rest(phoenix: Viewer, project: str, what: str) -> list[dict[str, Any]]:
    """Phoenix's REST ``/v1/projects/{project}/{what}``: ``sessions`` or ``spans``."""
    response = httpx.get(f"{phoenix.url}/v1/projects/{project}/{what}", params={"limit": 1000}, timeout=10)
    if response.status_code == 404:  # no span of the project has arrived yet
        return []
    response.raise_for_status()
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def phoenix_sessions(phoenix: Viewer, project: str) -> dict[str, int]:
    """Phoenix's sessions of ``project``: the number of traces of each session id."""
    return {session["session_id"]: len(session["traces"]) for session in _phoenix_rest(phoenix, project, "sessions")}


def phoenix_spans(phoenix: Viewer, project: str) -> list[dict[str, Any]]:
    """Every span Phoenix stores for ``project``, attributes and all."""
    return _phoenix_rest(phoenix, project, "spans")


# What Phoenix's Sessions tab lists of each session, through the GraphQL API its web UI reads.
_PHOENIX_SESSION_ROWS = """
query ($project: ID!) {
  node(id: $project) {
    ... on Project {
      sessions(first: 100) {
        edges { node { sessionId numTraces userId firstInput { value } lastOutput { value } } }
      }
    }
  }
}
"""
# The root spans of a project (its traces, as the Traces tab lists them) that a filter condition keeps.
_PHOENIX_FILTERED_SPANS = """
query ($project: ID!, $condition: String) {
  node(id: $project) {
    ... on Project { spans(first: 1000, filterCondition: $condition) { edges { node { name parentId } } } }
  }
}
"""


def _phoenix_graphql(phoenix: Viewer, project: str, query: str, **variables: Any) -> dict[str, Any]:
    """``query`` about ``project``, named by its GraphQL id (its sessions give it, once one has arrived)."""
    project_id = _phoenix_rest(phoenix, project, "sessions")[0]["project_id"]
    body = {"query": query, "variables": {"project": project_id, **variables}}
    response = httpx.post(f"{phoenix.url}/graphql", json=body, timeout=10)
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    assert "errors" not in answer, answer["errors"]
    node: dict[str, Any] = answer["data"]["node"]
    return node


def phoenix_session_rows(phoenix: Viewer, project: str) -> dict[str, dict[str, Any]]:
    """Each row of Phoenix's Sessions tab, by session id: its user, first input, last output and trace count."""
    rows = {}
    for edge in _phoenix_graphql(phoenix, project, _PHOENIX_SESSION_ROWS)["sessions"]["edges"]:
        session = edge["node"]
        rows[session["sessionId"]] = {
            "traces": session["numTraces"],
            "user": session["userId"],
            "first input": (session["firstInput"] or {}).get("value"),
            "last output": (session["lastOutput"] or {}).get("value"),
        }
    return rows


def phoenix_trace_names(phoenix: Viewer, project: str, condition: str | None = None) -> list[str]:
    """The names of the project's traces (their root spans) that Phoenix's span filter ``condition`` keeps."""
    edges = _phoenix_graphql(phoenix, project, _PHOENIX_FILTERED_SPANS, condition=condition)["spans"]["edges"]
    return sorted(edge["node"]["name"] for edge in edges if edge["node"]["parentId"] is None)


def mlflow_search(mlflow: Viewer, experiment_id: str, filter_string: str | None = None) -> list[dict[str, Any]]:
    """The trace infos of the experiment that MLflow's trace search ``filter_string`` keeps (its UI's search box)."""
    location = {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": experiment_id}}
    body: dict[str, Any] = {"locations": [location], "max_results": 500}
    if filter_string is not None:
        body["filter"] = filter_string
    response = httpx.post(f"{mlflow.url}/api/3.0/mlflow/traces/search", json=body, timeout=10)
    response.raise_for_status()
    traces: list[dict[str, Any]] = response.json().get("traces", [])
    return traces


def mlflow_experiment(mlflow: Viewer, name: str) -> str:
    response = httpx.post(f"{mlflow.url}/api/2.0/mlflow/experiments/create", json={"name": name}, timeout=10)
    response.raise_for_status()
    experiment_id: str = response.json()["experiment_id"]
    return experiment_id


def mlflow_sessions(mlflow: Viewer, experiment_id: str) -> dict[str | None, int]:
    """MLflow's traces of the experiment counted by their ``mlflow.trace.session`` metadata (None: no session)."""
    traces = mlflow_search(mlflow, experiment_id)
    return dict(Counter(trace.get("trace_metadata", {}).get("mlflow.trace.session") for trace in traces))


def mlflow_traces(mlflow: Viewer, experiment_id: str) -> list[dict[str, Any]]:
    """Every trace of the experiment as MLflow serves it: its info (with the request and response previews)
    from the trace search, and its spans from ``traces/get``."""
    traces = []
    for info in mlflow_search(mlflow, experiment_id):
        got = httpx.get(f"{mlflow.url}/api/3.0/mlflow/traces/get", params={"trace_id": info["trace_id"]}, timeout=10)
        got.raise_for_status()
        traces.append({"info": info, **got.json()["trace"]})
    return traces


def otlp_value(value: dict[str, Any]) -> Any:
    """An OTLP ``AnyValue`` as MLflow's ``traces/get`` serves it (``{"string_value": …}``, ``kvlist_value``, …),
    as the Python value it stands for."""
    [(kind, inner)] = value.items()
    if kind == "kvlist_value":
        return {item["key"]: otlp_value(item["value"]) for item in inner.get("values", [])}
    if kind == "array_value":
        return [otlp_value(item) for item in inner.get("values", [])]
    return inner


def mlflow_root(trace: dict[str, Any]) -> dict[str, Any]:
    """The root span of a trace from :func:`mlflow_traces` (the one without a parent), its attributes by name."""
    [root] = [span for span in trace["spans"] if not span.get("parent_span_id")]
    return {**root, "attributes": {item["key"]: otlp_value(item["value"]) for item in root.get("attributes", [])}}
