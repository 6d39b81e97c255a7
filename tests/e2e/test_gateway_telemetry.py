"""The gateway command's telemetry: ``opentelemetry-instrument mcp-sessions gateway …``, as docs/gateway.md shows it.

The command runs as its own process with the standard ``OTEL_*`` variables, in front of a real upstream (an
``MCPServer`` on 127.0.0.1), and exports to a real OTLP/HTTP receiver (``tests/_otlp.py``): one SERVER span per
JSON-RPC message, and no token or transport session id (the gateway's or the upstream's) in any attribute.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from _mcp import SESSION_KEY, jwt_claims, modern_headers, modern_request, session_meta
from _otlp import KIND_CLIENT, KIND_SERVER, Exported, Receiver
from _waits import until
from conftest import serve
from e2e._gateway import MAIN, Recorder, created, gateway_process, legacy_initialize, result_of, upstream_server

SERVICE = "gateway-under-test"
MESSAGES = sorted(["sessions/create", "tools/call echo", "initialize", "notifications/initialized"])
FORWARDED = sorted(["tools/call echo", "initialize", "notifications/initialized"])
DOC = MAIN / "docs" / "gateway.md"


def command(name: str) -> str:
    """A console script of this environment (``opentelemetry-instrument``)."""
    script = Path(sys.executable).parent / name
    found = str(script) if script.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[gateway-otel]' (make test installs it)")
    return found


def documented_variables() -> dict[str, str]:
    """The ``OTEL_*`` variables of the telemetry recipe in docs/gateway.md, as it sets them."""
    text = DOC.read_text(encoding="utf-8")
    [recipe] = [block for block in re.findall(r"```sh\n(.*?)```", text, re.S) if "opentelemetry-instrument" in block]
    return dict(re.findall(r"^(OTEL_[A-Z_]+)=(\S+) \\$", recipe, re.M))


def instrumented_gateway(upstream: str, endpoint: str, disabled: str) -> Any:
    """``opentelemetry-instrument mcp-sessions gateway --upstream …`` in a process of its own."""
    environ = {
        **documented_variables(),
        "OTEL_SERVICE_NAME": SERVICE,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export within 0.1 s, not 5: the test waits less
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": disabled,
    }
    return gateway_process(
        [upstream], environ=environ, program=[command("opentelemetry-instrument"), command("mcp-sessions")]
    )


def exported(receiver: Receiver, names: list[str], clients: int) -> list[Exported]:
    """The receiver's spans once it holds the gateway's spans ``names`` and ``clients`` others (bounded wait)."""

    def held() -> list[Exported] | None:
        spans = list(receiver.spans)
        ours = sum(span.scope == "mcp_sessions" for span in spans)
        return spans if ours >= len(names) and len(spans) - ours >= clients else None

    return until(held, lambda: f"not all exported: {[(s.scope, s.name) for s in receiver.spans]}")


def secrets_in(spans: list[Exported], secrets: list[str]) -> list[tuple[str, str]]:
    """Every (span, attribute) whose value holds one of ``secrets``, resources included."""
    found = []
    for span in spans:
        for where, attributes in (("span", span.attributes), ("resource", span.resource)):
            for key, value in attributes.items():
                if any(secret in str(value) for secret in secrets):
                    found.append((f"{where} of {span.name}", key))
    return found


@pytest.mark.parametrize("disabled", ["", "httpx"], ids=["httpx-instrumented", "httpx-instrumentation-disabled"])
def test_opentelemetry_instrument_exports_the_gateways_spans(
    http: httpx.Client, receiver: tuple[Receiver, str], disabled: str
) -> None:
    received, traces = receiver
    recorder = Recorder(upstream_server("upstream").streamable_http_app())
    collector = traces.removesuffix("/v1/traces")  # the exporter's base URL: it adds /v1/traces itself
    with serve(recorder) as upstream, instrumented_gateway(upstream + "/mcp", collector, disabled) as gateway:
        url = gateway.url()
        token = created(http, url)
        arguments = {"name": "echo", "arguments": {"message": "hi"}}
        call = modern_request("tools/call", arguments, id=2, session=session_meta(token))
        answered = result_of(http.post(url, json=call, headers=modern_headers(call)), 2)["result"]
        assert answered["content"][0]["text"] == "hi"
        state = answered.get("_meta", {}).get(SESSION_KEY, {}).get("state")
        legacy = legacy_initialize(http, url)  # a 2025-era transport session: initialize, initialized
        transport = legacy["Mcp-Session-Id"]
        # With httpx instrumented, a CLIENT span per message forwarded: all but sessions/create, which the
        # gateway answers (its probe of the upstream runs under an unsampled parent: recorded by no one).
        spans = exported(received, MESSAGES, 0 if disabled else len(FORWARDED))
    sid = jwt_claims(token)["sid"]

    ours = [span for span in spans if span.scope == "mcp_sessions"]
    assert sorted(span.name for span in ours) == MESSAGES  # one span per JSON-RPC message, no more
    assert all(span.kind == KIND_SERVER for span in ours)
    assert {span.service for span in spans} == {SERVICE}
    in_session = [span for span in ours if span.name in ("sessions/create", "tools/call echo")]
    assert all(span.attributes.get("session.id") == sid for span in in_session)
    assert all(span.attributes.get("gen_ai.conversation.id") == sid for span in in_session)
    others = [span for span in spans if span.scope != "mcp_sessions"]
    parents = {span.span_id: span.name for span in ours}
    if disabled:
        assert others == []
    else:  # the upstream requests, each under the gateway's span of its message
        assert {(span.scope, span.kind) for span in others} == {("opentelemetry.instrumentation.httpx", KIND_CLIENT)}
        assert sorted(parents[span.parent_id] for span in others) == FORWARDED
    secrets = [token, *transport.split("~"), transport] + ([state] if state else [])
    assert secrets_in(spans, secrets) == []
    # The probe before sessions/create reaches the upstream with no trace context, instrumented or not.
    [probe] = [seen for seen in recorder.seen if seen.methods() == ["mcp-sessions/probe"]]
    assert probe.header("traceparent") is None
    assert probe.header("tracestate") is None
