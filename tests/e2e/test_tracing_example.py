"""examples/tracing.py exports, over real OTLP/HTTP, spans that a viewer can group by session.

The viewer is a tiny OTLP/HTTP receiver on 127.0.0.1 (``tests/_otlp.py``) that decodes what the
exporter POSTs to /v1/traces: no Phoenix, no network beyond loopback.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from examples import tracing
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from _otlp import STATUS_ERROR, Exported, Receiver
from conftest import SECRET, serve

ROOT = Path(__file__).resolve().parents[2]
# A whole compact JWS (a session or state token): three base64url segments.
WHOLE_TOKEN = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def _assert_no_token(spans: list[Exported]) -> None:
    for span in spans:
        for key, value in span.attributes.items():
            assert not WHOLE_TOKEN.search(f"{key}={value}"), f"a token in {span.name}: {key}"


def test_the_example_exports_spans_grouped_by_session(receiver: tuple[Receiver, str]) -> None:
    received, endpoint = receiver
    provider = tracing.make_tracer_provider(endpoint=endpoint)
    agent = tracing.make_tracer_provider(endpoint=endpoint, service_name=tracing.CLIENT_SERVICE_NAME)
    metrics = InMemoryMetricReader()
    app = tracing.build_app(
        tracer_provider=provider,
        meter_provider=tracing.make_meter_provider(readers=[metrics]),
        environ={"MCP_SESSIONS_SECRET": SECRET},
    )
    out = io.StringIO()
    with serve(app) as base:
        sids = tracing.run_conversations(f"{base}/mcp", out=out, agent_tracer=agent.get_tracer("test"))
    assert provider.force_flush() and agent.force_flush()
    provider.shutdown()
    agent.shutdown()

    assert received.posts >= 1
    assert not WHOLE_TOKEN.search(out.getvalue()), "the conversation printed a token"
    _assert_no_token(received.spans)
    server = [s for s in received.spans if s.scope == "mcp_sessions"]
    assert {s.service for s in server} == {tracing.SERVICE_NAME}

    # Every span the middleware made for a session's request carries its stable id, twice.
    for name, sid in sids.items():
        of_session = [s for s in server if s.attributes.get("session.id") == sid]
        assert "sessions/create" in [s.name for s in of_session], name
        assert all(s.attributes["gen_ai.conversation.id"] == sid for s in of_session)
    a_names = [s.name for s in server if s.attributes.get("session.id") == sids["A"]]
    # Two counts, and the one refused after sessions/delete (its token verified: it still names A).
    assert a_names.count("tools/call count") == 3
    assert {"tools/call countdown", "tools/call add_note", "sessions/delete"} <= set(a_names)
    assert "mcp.session.id" not in {key for s in server for key in s.attributes}  # 2026-07-28: never
    assert not {"input.value", "output.value"} & {key for s in server for key in s.attributes}  # no capture asked

    # The user's span in the tool: session.id from baggage, in the trace of the middleware's span. (Its parent
    # is the SDK's span, which goes to the global provider: not this one, unless the global is set to it.)
    notes = [s for s in received.spans if s.name == "notes.append"]
    assert len(notes) == 4
    add_note_traces = {s.trace_id: s.attributes["session.id"] for s in server if s.name == "tools/call add_note"}
    for span in notes:
        assert span.attributes["session.id"] in sids.values()
        assert add_note_traces[span.trace_id] == span.attributes["session.id"]

    # Errors are marked: the tool's refusal, and the -32043 after sessions/delete.
    refused = [s for s in server if s.name == "tools/call add_note" and s.status == STATUS_ERROR]
    assert len(refused) == 1 and refused[0].attributes["error.type"] == "tool_error"
    assert refused[0].attributes["session.id"] == sids["B"]
    gone = [s for s in server if s.attributes.get("rpc.response.status_code") == "-32043"]
    assert len(gone) == 1 and gone[0].status == STATUS_ERROR
    assert gone[0].attributes["session.id"] == sids["A"]

    # Conversation B's agent sent _meta.traceparent: its CLIENT span is the parent of the middleware's span.
    b_spans = [s for s in server if s.attributes.get("session.id") == sids["B"]]
    spans = received.by_id()
    for span in b_spans:
        parent = spans[span.parent_id]
        assert parent.service == tracing.CLIENT_SERVICE_NAME and parent.name.startswith("agent: ")

    data = metrics.get_metrics_data()
    assert data is not None
    recorded = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"mcp.server.operation.duration", "mcp_sessions.sessions.created", "mcp.server.session.duration"} <= recorded


def test_the_command_in_the_docs(receiver: tuple[Receiver, str]) -> None:
    """`python examples/tracing.py --conversation`: with the global provider set, the SDK's span nests too; with
    ``MCP_SESSIONS_CAPTURE_CONTENT=1`` in its environment, its spans hold each call's input and output."""
    received, endpoint = receiver
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MCP_SESSIONS_"))}
    env["MCP_SESSIONS_CAPTURE_CONTENT"] = "1"
    done = subprocess.run(
        [sys.executable, "examples/tracing.py", "--conversation", "--otlp-endpoint", endpoint],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Sessions: A = " in done.stdout
    assert not WHOLE_TOKEN.search(done.stdout + done.stderr)
    _assert_no_token(received.spans)
    # The spans were flushed before the process exited.
    notes = [s for s in received.spans if s.name == "notes.append"]
    assert len(notes) == 4
    for span in notes:
        chain = [(a.scope, a.name) for a in received.ancestors(span)]
        # user span -> the SDK's span -> the middleware's span, one trace
        assert chain[:2] == [("mcp-python-sdk", "tools/call add_note"), ("mcp_sessions", "tools/call add_note")]
        assert all(a.trace_id == span.trace_id for a in received.ancestors(span))
    sdk = [s for s in received.spans if s.scope == "mcp-python-sdk"]
    assert sdk and all("session.id" in s.attributes for s in sdk)  # from SessionSpanProcessor
    server = [s for s in received.spans if s.scope == "mcp_sessions"]
    captured = {(s.name, s.attributes.get("input.value"), s.attributes.get("output.value")) for s in server}
    # What a person reads: the label a session was created with, each tool's arguments and its answer as text.
    assert {
        ("tools/call add_note", '{"text":"buy milk"}', "1"),
        ("tools/call set_mode", '{"mode":"focus"}', "focus"),
    } <= captured
    creates = {(inputs, output) for name, inputs, output in captured if name == "sessions/create"}
    sid = re.compile(r"session [A-Za-z0-9_-]{24} created")
    assert {label for label, _ in creates} == {"conversation A", "conversation B"}
    assert all(sid.fullmatch(str(output)) for _, output in creates)
