"""Arize Phoenix and MLflow, run for real, show one session per conversation, for every kind of client.

The quickstart server, behind the middleware, exports its spans over OTLP/HTTP to both viewers at once;
each test drives conversations with one kind of client and asks each viewer, through its API, which sessions
it made of them. Nothing is configured for MLflow beyond its endpoint and experiment header: it takes
``session.id`` from the spans. With ``capture_content``, a call's arguments and result are what each viewer
shows as its input and output, and no bearer value is in either (a token the client puts in a call's arguments
is redacted before any exporter: tests/e2e/test_content_capture.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from examples.quickstart import build_app
from mcp import Client
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from starlette.middleware.authentication import AuthenticationMiddleware

from _hosts import HOSTS
from _mcp import MCP_PATH, SESSION_KEY, LegacyClient, ModernClient, jwt_claims, session_meta, tool_text
from _users import HeaderUser
from _viewers import (
    Viewer,
    beyond_loopback,
    mlflow_experiment,
    mlflow_root,
    mlflow_search,
    mlflow_sessions,
    mlflow_traces,
    phoenix_session_rows,
    phoenix_sessions,
    phoenix_spans,
    phoenix_trace_names,
    start_viewers,
)
from _waits import until
from conftest import SECRET, in_process, serve
from mcp_sessions import SessionsConfig
from mcp_sessions._tokens import IdDigests
from mcp_sessions.telemetry import SessionSpanProcessor

ROOT = Path(__file__).resolve().parents[2]
ENVIRON = {"MCP_SESSIONS_SECRET": SECRET}
# A directory: the conversation test has scripts/viewer_pictures.py save there what each viewer's web UI shows of
# its conversations, as the pictures of docs/observability.md.
SCREENSHOTS = os.environ.get("VIEWERS_SCREENSHOTS")
CALLS = 3  # tool calls per conversation


@pytest.fixture(scope="session")
def viewers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Viewer, Viewer]]:
    with start_viewers(tmp_path_factory.mktemp("viewers")) as started:
        yield started


@dataclass
class Traced:
    """Where one test's spans go: a Phoenix project and an MLflow experiment of its own."""

    phoenix: Viewer
    mlflow: Viewer
    project: str
    experiment_id: str
    provider: TracerProvider

    def expect(self, sessions: dict[str, int], *, at_least: bool = False) -> None:
        """Both viewers list exactly the ids of ``sessions``, each with its number of traces (or more, ``at_least``),
        and the same numbers, once they have ingested them."""
        assert self.provider.force_flush(10_000), "the exporters did not flush"

        def listed(shown: dict[Any, int]) -> dict[Any, int] | None:
            shown = {k: v for k, v in shown.items() if k is not None}  # MLflow: traces of no session
            held = set(shown) == set(sessions) and all(
                shown[k] >= n if at_least else shown[k] == n for k, n in sessions.items()
            )
            return shown if held else None

        phoenix = partial(phoenix_sessions, self.phoenix, self.project)
        mlflow = partial(mlflow_sessions, self.mlflow, self.experiment_id)

        def agreed() -> dict[Any, int] | None:  # each has ingested as many (with at_least, both may still be counting)
            shown = listed(phoenix())
            return shown if shown is not None and shown == listed(mlflow()) else None

        until(agreed, lambda: f"Phoenix: still {phoenix()}, MLflow: {mlflow()}")


@pytest.fixture
def traced(viewers: tuple[Viewer, Viewer], request: pytest.FixtureRequest) -> Iterator[Traced]:
    phoenix, mlflow = viewers
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-") + f"-{uuid.uuid4().hex[:8]}"
    experiment_id = mlflow_experiment(mlflow, name)
    # openinference.project.name picks the Phoenix project; MLflow takes the experiment from the header.
    provider = TracerProvider(
        resource=Resource.create({"service.name": "quickstart", "openinference.project.name": name})
    )
    provider.add_span_processor(SessionSpanProcessor())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces")))
    mlflow_exporter = OTLPSpanExporter(
        endpoint=f"{mlflow.url}/v1/traces", headers={"x-mlflow-experiment-id": experiment_id}
    )
    provider.add_span_processor(BatchSpanProcessor(mlflow_exporter))
    yield Traced(phoenix, mlflow, name, experiment_id, provider)
    provider.shutdown()


def quickstart(traced: Traced, **options: Any) -> Any:
    return build_app(json_response=True, environ=ENVIRON, tracer_provider=traced.provider, **options)


# The hosts whose conversations the viewers are shown (how each names one: tests/_hosts.py).
VIEWED_HOSTS = ["chatgpt", "vscode", "codex-turn", "codex-thread-id", "baggage-header"]


@pytest.mark.parametrize("host", VIEWED_HOSTS)
def test_host_shaped_client(traced: Traced, host: str) -> None:
    """One 2025-era connection carrying two of the host's conversations (threads), each named by the host."""
    conversations = [f"{host}-conversation-{uuid.uuid4()}", f"{host}-conversation-{uuid.uuid4()}"]
    with in_process(quickstart(traced)) as http:
        client = LegacyClient(http, "")
        client.initialize()
        for _ in range(CALLS):
            for conversation in conversations:
                meta, headers = HOSTS[host][1](conversation)
                _, answer = client.call_tool("whoami", None, meta=meta, **headers)
                assert tool_text(answer) == "none", answer  # tracing only: no data by default
    traced.expect({conversation: CALLS for conversation in conversations})


@pytest.mark.anyio
async def test_stock_2025_client_with_adopted_transport_sessions(traced: Traced) -> None:
    """Two connections of the mcp SDK's own client, era 2025: no sessions/create, one session per connection."""
    sids = []
    with serve(quickstart(traced, adopt_transport_sessions=True)) as base:
        for _ in range(2):
            async with Client(base + MCP_PATH, mode="legacy") as client:
                for _ in range(CALLS - 1):
                    counted = await client.call_tool("count", {})
                    assert not counted.is_error, counted
                whoami = await client.call_tool("whoami", {})
                assert isinstance(whoami.structured_content, dict)
                sids.append(whoami.structured_content["result"])
    assert len(set(sids)) == 2
    assert "none" not in sids
    # The handshake's notifications and the closing DELETE may be traced in the session too: at least the calls.
    traced.expect(dict.fromkeys(sids, CALLS), at_least=True)


# Two users' conversations: each user, the label of their session.
LABELS = {"alice@example.com": "a trip to Lisbon", "bob@example.com": "a birthday cake"}
# What each trace of one conversation is named by every viewer, in order.
CONVERSATION = [
    "sessions/create",
    "tools/list",
    "tools/call count",
    "tools/call count",
    "tools/call set_mode",
    "sessions/delete",
]


def test_a_conversation_reads_like_a_conversation(traced: Traced) -> None:
    """What a person debugging a conversation sees in each viewer, with content capture and the user's digest on.

    Phoenix's Sessions tab: one row per conversation, its user the digest of who the server authenticated, its
    first input the label the session was created with, its last output how it ended. Each trace named by what
    it did, in Phoenix (its root span's name) and in MLflow (its "Trace name" column, empty without the
    ``mlflow.traceTag.mlflow.traceName`` the middleware sets). Each call's answer as text: the tool's words,
    not the MCP envelope. And the housekeeping (the discovery before any session, the listing inside one)
    left out by a filter on ``mcp_sessions.call.kind`` in each viewer's own filter language.
    """
    app = AuthenticationMiddleware(quickstart(traced, capture_content=True, trace_user="digest"), backend=HeaderUser())
    tokens, states = {}, {}
    with serve(app) as base:
        for user, label in LABELS.items():
            with httpx.Client(timeout=10, headers={"x-user": user}) as http:
                client = ModernClient(http, base)
                client.request("server/discover", id="discover")  # housekeeping: before any session
                token = tokens[user] = client.create_session({"label": label})["sessionId"]
                meta = session_meta(token)
                client.request("tools/list", session=meta, id="list")
                answers = [tool_text(client.call_tool("count", session=meta, id=f"count-{n}")[1]) for n in (1, 2)]
                assert answers == ["1", "2"]
                _, terse = client.call_tool("set_mode", {"mode": "terse"}, session=meta, id="mode")
                states[user] = terse["result"]["_meta"][SESSION_KEY]["state"]
                client.request("sessions/delete", session=meta, id="delete")
    sids = {user: jwt_claims(token)["sid"] for user, token in tokens.items()}
    traced.expect({sid: len(CONVERSATION) for sid in sids.values()})
    digests = IdDigests(SessionsConfig.from_env(environ=ENVIRON).keys)
    users = {sid: digests.user(user) for user, sid in sids.items()}  # a SimpleUser's principal: its username

    rows = phoenix_session_rows(traced.phoenix, traced.project)
    for user, sid in sids.items():
        assert rows[sid] == {
            "traces": len(CONVERSATION),
            "user": users[sid],
            "first input": LABELS[user],
            "last output": f"session {sid} ended",
        }
    assert phoenix_trace_names(traced.phoenix, traced.project) == sorted(["server/discover", *CONVERSATION] * 2)
    outputs = {
        (span["name"], span["attributes"].get("output.value"))
        for span in phoenix_spans(traced.phoenix, traced.project)
        if span["attributes"].get("mcp_sessions.call.kind") == "turn"
    }
    assert outputs == {("tools/call count", "1"), ("tools/call count", "2"), ("tools/call set_mode", "terse")}
    for span in phoenix_spans(traced.phoenix, traced.project):  # a call's arguments and answer: input, output
        if span["name"] == "tools/call set_mode":
            assert json.loads(span["attributes"]["input.value"]) == {"mode": "terse"}
            assert span["attributes"]["output.mime_type"] == "text/plain"
    turns = phoenix_trace_names(traced.phoenix, traced.project, "mcp_sessions.call.kind != 'housekeeping'")
    assert turns == sorted([name for name in CONVERSATION if name != "tools/list"] * 2)

    infos = mlflow_search(traced.mlflow, traced.experiment_id)
    named = sorted(info["tags"]["mlflow.traceName"] for info in infos)
    assert named == sorted(["server/discover", *CONVERSATION] * 2)  # every trace named, none "-"
    for info in infos:  # MLflow's user column
        metadata = info["trace_metadata"]
        if (session := metadata.get("mlflow.trace.session")) is None:  # a discovery, before any session
            assert metadata["mlflow.trace.user"] in users.values()
        else:
            assert metadata["mlflow.trace.user"] == users[session]
    counts = [info for info in infos if info["tags"]["mlflow.traceName"] == "tools/call count"]
    assert sorted(json.loads(info["response_preview"]) for info in counts) == ["1", "1", "2", "2"]  # Output column
    creates = [info for info in infos if info["tags"]["mlflow.traceName"] == "sessions/create"]
    assert sorted(json.loads(info["request_preview"]) for info in creates) == sorted(LABELS.values())  # Input
    for trace in mlflow_traces(traced.mlflow, traced.experiment_id):  # MLflow's Input and Output
        if mlflow_root(trace)["name"] == "tools/call set_mode":
            assert json.loads(trace["info"]["request_preview"]) == {"mode": "terse"}
            assert json.loads(trace["info"]["response_preview"]) == "terse"
            attributes = mlflow_root(trace)["attributes"]
            assert (attributes["mlflow.spanInputs"], attributes["mlflow.spanOutputs"]) == ({"mode": "terse"}, "terse")
    kept = mlflow_search(traced.mlflow, traced.experiment_id, "tag.`mcp_sessions.call.kind` != 'housekeeping'")
    assert sorted(info["tags"]["mlflow.traceName"] for info in kept) == turns

    stored = json.dumps(
        [phoenix_spans(traced.phoenix, traced.project), mlflow_traces(traced.mlflow, traced.experiment_id)]
    )
    for user, token in tokens.items():
        assert user not in stored  # the digest only, never the name
        for part in (token, *token.split("."), states[user], *states[user].split(".")):
            assert part not in stored, f"a bearer value in what a viewer stores: {part!r}"
    if SCREENSHOTS:  # VIEWERS_SCREENSHOTS=docs/images: the pictures of docs/observability.md
        script = str(ROOT / "scripts" / "viewer_pictures.py")
        urls = [traced.phoenix.url, traced.mlflow.url]
        command = [sys.executable, script, *urls, traced.project, traced.experiment_id, SCREENSHOTS]
        subprocess.run(command, check=True, timeout=300)


# Runs the docs' snippet as a program would (it sets the global TracerProvider), then two calls in a session.
DOCS_SNIPPET_RUNNER = """
import json, re, sys
import httpx
from _mcp import ModernClient, jwt_claims, session_meta
from examples.demo import serve_in_thread
from opentelemetry import trace

text = open("docs/observability.md").read()
[snippet] = [s for s in re.findall(r"```python\\n(.*?)```", text, re.S) if "OTLPSpanExporter(endpoint=" in s]
namespace = {"__name__": "docs_snippet"}
exec(snippet.replace("http://127.0.0.1:6006", sys.argv[1]), namespace)
with serve_in_thread(namespace["app"], path="") as base, httpx.Client(timeout=10) as http:
    client = ModernClient(http, base)
    session = client.create_session()
    for name in ("Ada", "Grace"):
        client.call_tool("hello", {"name": name}, session=session_meta(session))
trace.get_tracer_provider().shutdown()
print(jwt_claims(session["sessionId"])["sid"])
"""


def test_the_docs_snippet_lands_in_its_phoenix_project(viewers: tuple[Viewer, Viewer]) -> None:
    """docs/observability.md's set-up names the Phoenix project: the session is there, not in "default"."""
    phoenix, _ = viewers
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MCP_SESSIONS_"))}
    paths = [ROOT / "middleware", ROOT, ROOT / "tests"]
    env.update(MCP_SESSIONS_SECRET=SECRET, PYTHONPATH=os.pathsep.join(map(str, paths)))
    done = subprocess.run(
        [sys.executable, "-c", DOCS_SNIPPET_RUNNER, phoenix.url],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    sid = done.stdout.strip().splitlines()[-1]
    shown = until(lambda: s if sid in (s := phoenix_sessions(phoenix, "my-mcp-server")) else None, f"{sid} in Phoenix")
    assert shown[sid] == 3  # sessions/create and the two calls
    assert sid not in phoenix_sessions(phoenix, "default")


def test_the_viewers_listen_on_the_loopback_interface_only(viewers: tuple[Viewer, Viewer]) -> None:
    """Every socket either viewer (or a process it started) listens on is on 127.0.0.1 or ::1: Phoenix's
    OTLP/gRPC receiver too, which Phoenix itself binds to every interface (scripts/phoenix_local.py)."""
    for viewer in viewers:
        assert beyond_loopback(viewer) == set(), viewer.name
