"""A conversation as the viewers read it: named traces, kinds of calls, who made them, what went in and came out.

Through a real MCPServer, in process, with the OpenTelemetry SDK's in-memory exporter and the provider
given to the middleware. The attribute names are the ones each viewer documents: MLflow 3.17 names a trace
from its root span's ``mlflow.traceTag.mlflow.traceName`` (any ``mlflow.traceTag.<key>`` becomes the trace
tag ``<key>``); Langfuse's OpenTelemetry property mapping reads ``langfuse.trace.name``,
``langfuse.trace.tags``, ``user.id``, ``session.id``, ``input.value`` and ``output.value``; Phoenix reads the
root span's name, ``session.id``, ``user.id``, ``input.value`` and ``output.value``. tests/e2e/test_viewers.py
shows the same spans in real Phoenix and MLflow servers.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from examples.quickstart import build_app
from opentelemetry.sdk.trace import ReadableSpan
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.types import Scope

from _mcp import ModernClient, jwt_claims, session_meta, tool_text
from _otel import MIDDLEWARE_SCOPE, attrs, by_request_id, of_scope, recording_provider, traceparent
from _users import HeaderUser
from conftest import SECRET, in_process
from mcp_sessions import SessionsConfig
from mcp_sessions._tokens import IdDigests

NAMES = ("mlflow.traceTag.mlflow.traceName", "langfuse.trace.name")
TAGS = ("mlflow.traceTag.mcp_sessions.call.kind", "langfuse.trace.tags")
USER = re.compile(r"u-[A-Za-z0-9_-]{24}")
HANDLE = "bsk_" + "Q" * 34 + "E"  # the shape of a handle (handles/_format.py): a bearer value


class Traced:
    """A quickstart server behind the middleware (and the server's own authentication), and the spans it made."""

    def __init__(self, **options: Any) -> None:
        provider, self.exporter = recording_provider()
        app = build_app(
            json_response=True, environ={"MCP_SESSIONS_SECRET": SECRET}, tracer_provider=provider, **options
        )
        self.app = AuthenticationMiddleware(app, backend=HeaderUser())

    def spans(self) -> list[ReadableSpan]:
        """The middleware's spans (each ends before its response has gone: no wait is needed)."""
        return of_scope(self.exporter.get_finished_spans(), MIDDLEWARE_SCOPE)

    def span(self, request_id: str) -> dict[str, Any]:
        return attrs(by_request_id(self.spans(), MIDDLEWARE_SCOPE, request_id))


def conversation(client: ModernClient) -> str:
    """A short conversation, each request id naming what it is; the session token."""
    client.request("server/discover", id="discover")
    token: str = client.create_session({"label": "a trip to Lisbon"})["sessionId"]
    meta = session_meta(token)
    client.call_tool("count", session=meta, id="unlisted")  # before tools/list: the name comes with the answer
    client.request("tools/list", session=meta, id="list")
    _, answer = client.call_tool("set_mode", {"mode": "terse"}, session=meta, id="mode")
    assert tool_text(answer) == "terse"
    client.request("sessions/delete", session=meta, id="delete")
    return token


def test_each_trace_the_middleware_starts_is_named_and_tagged_for_every_viewer() -> None:
    traced = Traced()
    with in_process(traced.app) as http:
        conversation(ModernClient(http, ""))
    expected = {
        "discover": ("server/discover", "housekeeping"),
        "unlisted": ("tools/call count", "turn"),  # named by its answer: the trace's name follows
        "list": ("tools/list", "housekeeping"),
        "mode": ("tools/call set_mode", "turn"),
        "delete": ("sessions/delete", "session"),
    }
    for request_id, (name, kind) in expected.items():
        span = traced.span(request_id)
        assert span["mcp_sessions.call.kind"] == kind
        assert [span[key] for key in NAMES] == [name, name], request_id
        assert span["mlflow.traceTag.mcp_sessions.call.kind"] == kind
        assert span["langfuse.trace.tags"] == (kind,)
    [create] = [span for span in traced.spans() if span.name == "sessions/create"]
    assert attrs(create)["langfuse.trace.name"] == "sessions/create"


@pytest.mark.parametrize("carrier", ["header", "meta"])
def test_a_trace_a_client_started_keeps_the_name_the_client_gave_it(carrier: str) -> None:
    """The client's span is the root: the middleware's span tells what kind of call it is, and names nothing."""
    traced = Traced()
    context = traceparent(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)
    with in_process(traced.app) as http:
        client = ModernClient(http, "")
        if carrier == "header":
            client.request("tools/list", id="list", traceparent=context)
        else:
            client.request("tools/list", meta={"traceparent": context}, id="list")
    span = traced.span("list")
    assert span["mcp_sessions.call.kind"] == "housekeeping"
    assert not {*NAMES, *TAGS} & set(span)


@pytest.mark.parametrize(
    ("trace_user", "user", "expected"),
    [
        (None, "alice@example.com", None),
        ("digest", "alice@example.com", "digest"),
        ("name", "alice@example.com", "alice@example.com"),
        ("digest", None, None),  # nobody authenticated: no user
        ("name", "x" * 40, "[redacted]"),  # a name that could be a token is redacted as every such string is
    ],
)
def test_the_user_of_every_call_is_who_the_server_authenticated_when_asked(
    trace_user: str | None, user: str | None, expected: str | None
) -> None:
    traced = Traced(trace_user=trace_user)
    headers = {} if user is None else {"x-user": user}
    with in_process(traced.app, headers=headers) as http:
        conversation(ModernClient(http, ""))
    users = {attrs(span).get("user.id") for span in traced.spans()}
    if expected == "digest":
        assert user is not None
        digest = IdDigests(SessionsConfig(secret=SECRET).keys).user(user)
        assert USER.fullmatch(digest) and users == {digest}  # every call, the session's and the others
    else:
        assert users == {expected}


def test_the_authenticated_user_wins_over_the_one_a_host_asserts() -> None:
    """ChatGPT's ``openai/subject`` is the client's word; the principal is the server's."""
    traced = Traced(trace_user="name")
    host = {"openai/session": "chatgpt-conversation-1", "openai/subject": "user-anon-1"}
    with in_process(traced.app) as http:
        client = ModernClient(http, "")
        client.call_tool("whoami", meta=host, id="asserted")
        client.call_tool("whoami", meta=host, id="authenticated", X_User="alice@example.com")
    assert traced.span("asserted")["user.id"] == "user-anon-1"
    assert traced.span("authenticated")["user.id"] == "alice@example.com"


def test_a_failing_principal_hook_leaves_the_span_without_a_user() -> None:
    """The principal hook fails when telemetry asks it (first): the session is created all the same, unnamed."""
    asked: list[str] = []

    def principal(scope: Scope) -> str:
        asked.append(scope["path"])
        if len(asked) == 1:
            raise RuntimeError("the directory is down")
        return "alice"

    traced = Traced(trace_user="digest", principal=principal)
    with in_process(traced.app) as http:
        token = ModernClient(http, "").create_session()["sessionId"]
    assert jwt_claims(token)["sid"]
    assert len(asked) == 2  # telemetry's look, then the session's binding
    [create] = traced.spans()
    assert "user.id" not in attrs(create)


def test_with_capture_a_session_shows_its_label_first_and_how_it_ended_last() -> None:
    traced = Traced(capture_content=True)
    with in_process(traced.app) as http:
        client = ModernClient(http, "")
        token = conversation(client)
        careless = client.create_session({"label": f"my basket is {HANDLE}"})["sessionId"]
    sid = jwt_claims(token)["sid"]
    created = {attrs(span)["session.id"]: attrs(span) for span in traced.spans() if span.name == "sessions/create"}
    assert (created[sid]["input.value"], created[sid]["input.mime_type"]) == ("a trip to Lisbon", "text/plain")
    assert created[sid]["output.value"] == f"session {sid} created"
    assert created[jwt_claims(careless)["sid"]]["input.value"] == "my basket is [redacted]"
    ended = traced.span("delete")
    assert (ended["output.value"], ended["output.mime_type"]) == (f"session {sid} ended", "text/plain")
    assert "input.value" not in ended
    mode = traced.span("mode")
    assert (mode["output.value"], mode["output.mime_type"]) == ("terse", "text/plain")
    assert mode["gen_ai.tool.call.result"] == "terse"
    assert "input.value" not in traced.span("list") and "output.value" not in traced.span("list")
