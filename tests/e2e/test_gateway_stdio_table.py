"""Who may reach which process of ``mcp-sessions gateway --stdio``, and what a process costs its caller: the gateway
(its own process where its signals are the subject) in front of the tests' stdio server (or a hostile one), two users
with tokens from a JWKS. Each test is a finding of issue 65 (its number in its docstring), and fails without its fix.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from _mcp import legacy_request, modern_headers, modern_request, session_meta
from _uids import uids
from _waits import WITHIN, Deadline, until
from conftest import SECRET
from e2e import _sealed
from e2e._gateway import (
    created,
    gateway_in_process,
    gateway_process,
    legacy_initialize,
    result_of,
    stopped_as_it_starts,
)
from e2e._issuer import ISSUER, jwks, signed
from e2e._stdio import COUNT, ENVIRON, SERVER, SERVER_PATH, stdio_gateway
from mcp_sessions import SessionsConfig
from mcp_sessions._gateway.auth._users import GatewayAuth
from mcp_sessions._gateway.stdio import _admission
from mcp_sessions._gateway.stdio._models import asking
from mcp_sessions._gateway.stdio._modes import default_max_processes
from mcp_sessions._gateway.stdio._table import Table
from mcp_sessions.profiles import SESSION_META_KEY, SESSION_NOT_FOUND
from mcp_sessions.subscriptions import SessionSubscriptionBus

pytestmark = pytest.mark.anyio

AUDIENCE = "https://gateway.example/mcp"  # the gateway's public URL, as its tokens name it
DOCS_URL = "http://127.0.0.1:8000/mcp"  # the docs' gateway's, in their scripts


@contextlib.contextmanager
def team(command: Sequence[str] = SERVER, **options: Any) -> Iterator[str]:
    """The gateway in front of ``command``, tokens verified against the JWKS (alice and bob two principals): its URL."""
    with (
        jwks() as keys,
        stdio_gateway(command, auth=GatewayAuth(jwks_url=keys, issuer=ISSUER, audience=AUDIENCE), **options) as url,
    ):
        yield url


def as_user(name: str) -> dict[str, str]:
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": name, "exp": int(time.time()) + 300}
    return {"Authorization": f"Bearer {signed(claims)}"}


def modern_call(
    http: httpx.Client, url: str, tool: str, headers: dict[str, str], session: str | None = None, **params: Any
) -> dict[str, Any]:
    """A 2026-07-28 ``tools/call`` of ``tool`` (``params`` beside its name; in ``session``): its result, or its
    error."""
    named = None if session is None else session_meta(session)
    body = modern_request("tools/call", {"name": tool, **params}, session=named)
    response = http.post(url, json=body, headers={**modern_headers(body), **headers})
    answer = result_of(response, 1)  # 2026-07-28 answers some errors with a 4xx status
    found: dict[str, Any] = answer.get("result") or answer["error"]
    return found


def test_a_2026_request_with_anothers_transport_session_id_reaches_its_own_process() -> None:
    """65.2: bob's 2026-07-28 request carrying alice's 2025 transport session id in ``Mcp-Session-Id`` reached her
    process; the header names a transport session on the 2025 path only, so it reaches a process of his own."""
    alice, bob = as_user("alice"), as_user("bob")
    with team() as url, httpx.Client(timeout=WITHIN) as http:
        hers = legacy_initialize(http, url, alice)
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}}
        answer = result_of(http.post(url, json=body, headers=hers), 1)
        her_process = json.loads(answer["result"]["content"][0]["text"])
        stolen = {**bob, "Mcp-Session-Id": hers["Mcp-Session-Id"]}
        seen = modern_call(http, url, "whoami", stolen, arguments={})

    assert "content" in seen, seen
    assert json.loads(seen["content"][0]["text"])["pid"] != her_process["pid"]


def test_a_request_state_is_its_callers_alone() -> None:
    """65.3: bob presenting alice's ``requestState`` answered her elicitation and got her call's result, and her own
    retry was then refused; now his is refused, and hers still good."""
    alice, bob = as_user("alice"), as_user("bob")
    with team() as url, httpx.Client(timeout=WITHIN) as http:
        asked = modern_call(http, url, "elicit", alice, arguments={"question": "?"})
        [key] = asked["inputRequests"]
        answer = {key: {"action": "accept", "content": {"answer": "yes"}}}
        retry = {"arguments": {"question": "?"}, "requestState": asked["requestState"], "inputResponses": answer}
        stolen = modern_call(http, url, "elicit", bob, **retry)
        hers = modern_call(http, url, "elicit", alice, **retry)

    assert stolen["code"] == -32602, stolen
    assert "requestState names no request waiting" in stolen["message"], stolen
    assert hers["content"][0]["text"] == "accept: yes", hers


def test_every_process_started_for_a_caller_spends_its_create_limit() -> None:
    """65.6: sessionless 2026-07-28 requests and 2025 transport sessions started processes without spending a slot
    of ``MCP_SESSIONS_CREATE_LIMIT``; now each start does, as ``sessions/create`` does."""
    config = SessionsConfig(secret=SECRET, create_limit=(3, 600))
    with stdio_gateway(config=config, sessionless="per-request") as url, httpx.Client(timeout=WITHIN) as http:
        first = [modern_call(http, url, "count", {}, arguments={}) for _ in range(2)]
        legacy = [legacy_initialize(http, url) for _ in range(2)]
        call = legacy_request("tools/call", {"name": "count", "arguments": {}})
        transports = [result_of(http.post(url, json=call, headers=headers), 1) for headers in legacy]
        refused_request = modern_call(http, url, "count", {}, arguments={})

    assert [found["content"][0]["text"] for found in first] == ["1", "1"]
    assert transports[0]["result"]["content"][0]["text"] == "1", transports
    for refused in (transports[1]["error"], refused_request):
        assert refused["code"] == -32011, refused
        assert "MCP_SESSIONS_CREATE_LIMIT" in refused["message"], refused
        assert refused["data"]["retryAfter"] >= 1


def test_a_server_that_never_lists_its_tools_neither_stops_the_gateway_listening_nor_its_sigterm() -> None:
    """65.8: a server that never answers ``tools/list`` kept the gateway from listening (it waited 300 s), and
    SIGTERM went unheard meanwhile; now it listens (``gateway_process`` waits 30 s for that), serves, and stops
    within the documented 10 s of SIGTERM."""
    silent = f"{sys.executable} -m e2e._hostile_stdio --no-list"
    with gateway_process([], "--stdio", silent, "--sessionless", "shared", environ=SERVER_PATH) as gateway:
        assert gateway.process is not None
        with httpx.Client(timeout=WITHIN) as http:
            seen = modern_call(http, gateway.url(), "seen", {}, arguments={})
        gateway.process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        gateway.process.wait(WITHIN)
        stopped_in = time.monotonic() - started

    assert "content" in seen, seen
    assert stopped_in < 10.0


async def test_2026_requests_with_one_id_in_one_session_are_not_the_id_guards_concern() -> None:
    """65.8: 55-57 of 60 concurrent 2026-07-28 requests with id 1 in one data-layer session got "a request with this
    id is in progress": the guard keyed on ``Mcp-Session-Id``, which a 2026-07-28 client fills with its session
    token. The guard is the 2025 transport session's: each of the 60 gets its answer."""
    with stdio_gateway([sys.executable, "-m", "e2e._hostile_stdio"]) as url:
        with httpx.Client(timeout=WITHIN) as client:
            token = created(client, url)
        answers: list[dict[str, Any]] = []

        async def slow(http: httpx.AsyncClient, tag: int) -> None:
            params = {"name": "slow", "arguments": {"tag": str(tag), "seconds": 0.5}}
            body = modern_request("tools/call", params, id=1, session=session_meta(token))
            response = await http.post(url, json=body, headers={**modern_headers(body), "Mcp-Session-Id": token})
            answers.append(result_of(response, 1))

        async with httpx.AsyncClient(timeout=WITHIN) as http, anyio.create_task_group() as tasks:
            for tag in range(60):
                tasks.start_soon(slow, http, tag)

    assert sorted(int(answer["result"]["content"][0]["text"]) for answer in answers if "result" in answer) == list(
        range(60)
    ), [answer for answer in answers if "error" in answer][:3]


async def test_the_operator_view_of_every_process() -> None:
    """Each live process, as an operator sees it: the shared one, one started ahead, a request's own (whose, by its
    client address here, a digest of its conversation), with its pid, age, idle time and requests served."""
    children = Table(
        SERVER,
        config=SessionsConfig(secret=SECRET),
        processes="per-conversation",
        idle=600.0,
        max_processes=4,
        per_caller=4,
        sessionless="per-request",
        warm=1,
        environ=ENVIRON,
        bus=SessionSubscriptionBus(),
    )
    async with children.running():
        scope = {"type": "http", "headers": [], "client": ("10.0.0.7", 1234)}
        asked = await asking(scope, children.config, children.process_env)
        conversation = await children.reach(children.conversation_for(asked, "tools/call"))
        with anyio.fail_after(WITHIN):
            await children.pool.warm[0].child.ready.wait()  # started ahead as the request took the one before it
        views = {view.kind: view for view in children.pool.views()}

    assert set(views) == {"shared", "warm", "request"}
    mine = views["request"]
    assert str(mine.principal) == "10.0.0.7"
    assert mine.conversation not in (None, conversation.key.id)
    assert mine.pid == conversation.child.pid
    assert mine.age >= mine.idle >= 0
    assert mine.requests == 0
    assert views["shared"].principal is None
    assert views["shared"].conversation is None
    assert views["warm"].principal is None
    assert views["warm"].requests == 0


# -- issue 66: lists cost nothing, and a caller at its limit is not locked out by its own idle conversations -------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_stock_clients_call_at_one_process_a_caller_gets_its_result(
    mode: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """66.1: the ``mcp`` SDK's ``call_tool`` sends ``tools/list`` without a session to check the tool's result; that
    list took a process of its own (and, at ``--max-processes-per-principal``, failed a call that had run). A list
    that names no conversation is the shared process's: one process started, for the call alone."""
    monkeypatch.setattr(logging.getLogger("mcp_sessions.gateway"), "disabled", False)  # a uvicorn may have disabled it
    with caplog.at_level(logging.INFO, "mcp_sessions.gateway"), stdio_gateway(max_processes_per_principal=1) as url:
        async with Client(url, mode=mode) as client:
            result = await client.call_tool("count", {})

    assert not result.is_error, result
    assert result.structured_content == {"result": 1}, result
    assert caplog.text.count("serves the conversation") == 1, caplog.text


def test_a_caller_at_its_limit_gets_its_oldest_idle_conversation_ended_to_make_room(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """66.2: a caller whose only slot held a conversation it lost could not start another until ``--process-idle``.
    Once idle ``EVICT_AFTER`` seconds, it is ended for the new one (logged), and answered "Session not found"
    (``-32043``) if it comes back; within that grace, the new one is refused."""
    monkeypatch.setattr(_admission, "EVICT_AFTER", 2.0)

    def create(http: httpx.Client, url: str) -> httpx.Response:
        body = modern_request("sessions/create")
        return http.post(url, json=body, headers=modern_headers(body))

    with stdio_gateway(max_processes_per_principal=1) as url, httpx.Client(timeout=WITHIN) as http:
        lost = created(http, url)
        assert modern_call(http, url, "count", {}, lost, arguments={})["content"][0]["text"] == "1"
        within_grace = create(http, url)
        until(lambda: create(http, url).status_code == 200, "a create let in, the lost one idle EVICT_AFTER s")
        back = modern_call(http, url, "count", {}, lost, arguments={})

    assert within_grace.status_code == 429
    assert result_of(within_grace, 1)["error"]["code"] == -32011
    assert back["code"] == -32043, back


def test_a_team_of_twenty_and_six_runs_of_a_script_are_served_under_a_4_gib_hosts_defaults() -> None:
    """Issue 101, item 3: 16 processes a gateway and 4 a user, an idle one ended only after 60 s, refused a team's
    new conversations within a minute, and the fifth run of the docs' ``call.py`` (which ended none). Under the
    defaults of a 4 GiB host (``--max-processes`` 22, its memory's), 20 users open two conversations each (a
    data-layer session and a 2025 transport session) and one of them six more, none ended: each is served, the
    first 22 at once, each later one once the conversation idle longest has been idle ``EVICT_AFTER`` seconds (that
    one ended for it, the first 24 in all); until then a new one is refused, naming the limit and its flag."""
    most = default_max_processes(4 << 30)
    auth = ("--auth-issuer", ISSUER, "--auth-audience", "{url}")
    with (
        jwks() as keys,
        gateway_in_process(  # its subject is the table's answers: the app's
            [],
            "--stdio",
            shlex.join(SERVER),
            "--warm",
            "2",
            "--max-processes",
            str(most),
            "--auth-jwks",
            keys,
            *auth,
            environ={"PYTHONPATH": SERVER_PATH["PYTHONPATH"]},
        ) as gateway,
        httpx.Client(timeout=WITHIN) as http,
    ):
        url = gateway.url()

        def bearer(user: str) -> dict[str, str]:
            claims = {"iss": ISSUER, "aud": url, "sub": user, "exp": int(time.time()) + 300}
            return {"Authorization": f"Bearer {signed(claims)}"}

        def transport_call(headers: dict[str, str]) -> dict[str, Any]:
            response = http.post(url, json=legacy_request("tools/call", COUNT), headers=headers)
            if response.status_code == 404:  # its transport session ended with its process
                return {"code": SESSION_NOT_FOUND}
            answer = result_of(response, 1)
            found: dict[str, Any] = answer.get("result") or answer["error"]
            return found

        def session_call(user: str, session: str) -> dict[str, Any]:
            return modern_call(http, url, "count", bearer(user), session, arguments={})

        refusals: list[str] = []

        def opened(user: str, kind: str) -> Any:
            """A new conversation of ``user``'s and its first call's answer; None if it is refused."""
            if kind == "transport":
                headers = legacy_initialize(http, url, bearer(user))
                answer = transport_call(headers)
                conversation: Any = headers
            else:
                body = modern_request("sessions/create")
                response = http.post(url, json=body, headers={**modern_headers(body), **bearer(user)})
                answer = result_of(response, 1)
                if "error" in answer:
                    refusals.append(answer["error"]["message"])
                    return None
                conversation = answer["result"]["session"]["sessionId"]
                answer = session_call(user, conversation)
            if "code" in answer:
                refusals.append(answer["message"])
                return None
            return kind, user, conversation, answer["content"][0]["text"]

        def told(user: str, kind: str) -> Any:
            """:func:`opened`, sent again a second after each refusal (its ``retryAfter``), as its client would."""
            deadline = Deadline(f"{user}'s new conversation served")
            while (answer := opened(user, kind)) is None:
                deadline.check()
                time.sleep(1)
            return answer

        team = [(f"user-{n}", kind) for n in range(20) for kind in ("session", "transport")]
        team[5:5] = [("user-0", "session")] * 6  # user-0 runs a script six times that ends none
        served = [opened(*each) for each in team[:most]]
        served += [told(*each) for each in team[most:]]
        seconds = [
            session_call(user, conversation) if kind == "session" else transport_call(conversation)
            for kind, user, conversation, _ in served
        ]

    assert [answer for *_, answer in served] == ["1"] * len(team), served
    assert refusals, "none refused before EVICT_AFTER"
    said = f"(the limit max_processes: --max-processes {most}, key max-processes = {most})"  # a file's key too
    assert all(said in refusal for refusal in refusals), refusals
    ended = len(team) - most
    assert [answer.get("code") for answer in seconds[:ended]] == [SESSION_NOT_FOUND] * ended, seconds
    assert [answer["content"][0]["text"] for answer in seconds[ended:]] == ["2"] * most, seconds


def test_the_docs_call_py_ends_its_conversation(tmp_path: Path) -> None:
    """Issue 101, item 3: the docs' ``call.py`` (gateway.md's team recipe) left its conversation behind, its session
    and its process, so that a few runs in a minute were refused "Too many server processes". Now it ends it as it
    ends (``delete_on_close``): run three times by one user allowed one process, each is served."""
    recipe = Path(__file__).parents[2].joinpath("docs", "gateway.md").read_text()
    script = recipe.split("cat > call.py <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    assert script.count(DOCS_URL) == 1
    (tmp_path / "alice.jwt").write_text(as_user("alice")["Authorization"].removeprefix("Bearer "))
    with team(max_processes_per_principal=1) as url:
        (tmp_path / "call.py").write_text(script.replace(DOCS_URL, url))
        runs = [
            subprocess.run(
                [sys.executable, "call.py", "alice", "count", "{}"], cwd=tmp_path, capture_output=True, check=False
            )
            for _ in range(3)
        ]

    assert [(run.returncode, run.stdout) for run in runs] == [(0, b'alice count "1"\n')] * 3, runs[-1].stderr


def test_a_transport_session_a_session_was_opened_in_is_not_ended_at_once_for_a_new_one() -> None:
    """A caller's new 2025 transport session at its limit ends her idle transport sessions at once (a client that
    never sends DELETE leaves them behind), but not one a data-layer session was opened in: that session lives in its
    process, which is spared as any conversation's is, until idle ``EVICT_AFTER`` seconds (test_connect's restarted
    shim found a new process so, once in three runs): the new one's first call is refused."""
    with stdio_gateway(max_processes_per_principal=1) as url, httpx.Client(timeout=WITHIN) as http:
        first = legacy_initialize(http, url)
        create = legacy_request("sessions/create", {})
        token = result_of(http.post(url, json=create, headers=first), 1)["result"]["session"]["sessionId"]

        def count() -> str:
            params = {"name": "count", "arguments": {}, "_meta": {SESSION_META_KEY: {"sessionId": token}}}
            answer = result_of(http.post(url, json=legacy_request("tools/call", params), headers=first), 1)
            return str(answer["result"]["content"][0]["text"])

        assert count() == "1"
        second = legacy_initialize(http, url)
        refused = result_of(http.post(url, json=legacy_request("tools/call", COUNT), headers=second), 1)
        assert count() == "2"  # the same process, its state kept

    assert refused["error"]["code"] == -32011, refused


def test_sigterm_while_the_first_process_never_answers_initialize_stops_the_gateway() -> None:
    """65.8, "in every state": uvicorn heard SIGTERM only once the app had started, so a server that never answers
    ``initialize`` held the gateway for the 30 s of its start; now the start is given up, its process stopped, and
    the gateway exits 0 within the 10 s of a stop."""
    silent = [sys.executable, "-c", "import time; time.sleep(600)"]
    status, left, stopped_in = stopped_as_it_starts("--port", "0", "--stdio", shlex.join(silent))
    assert (status, left) == (0, ""), left
    assert stopped_in < 10.0


# The gateway's command, its own trace installed first (an audit hook): its first import of the mcp SDK (mcp or
# mcp_types) waits, 20 s at most, for a process running the server (argv[1]) to be there, and says (in argv[2])
# whether one was.
TRACED = """
import os
import runpy
import sys
import time

SERVER, SAID = sys.argv[1:3]
del sys.argv[1:3]


def started():
    for pid in set(filter(str.isdigit, os.listdir("/proc"))) - {str(os.getpid())}:  # not this one's argv[1]
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if SERVER.encode() in cmdline.read().split(b"\\0"):
                    return True
        except OSError:
            pass
    return False


def sdk_after_the_server(event, args):
    if event != "import" or args[0].partition(".")[0] not in ("mcp", "mcp_types") or os.path.exists(SAID):
        return
    for _ in range(400):
        if started():
            break
        time.sleep(0.05)
    with open(SAID, "w") as said:
        said.write("started" if started() else "not started")


sys.addaudithook(sdk_after_the_server)
runpy.run_module("mcp_sessions", run_name="__main__", alter_sys=True)
"""


def test_the_first_process_starts_while_the_gateway_imports_the_mcp_sdk(tmp_path: Path) -> None:
    """Issue 112 (2): a ``--stdio`` gateway started its shared process only once it had imported the ``mcp`` SDK and
    its pydantic models (half a second of CPU), and the server's own start came after that; now the process starts
    as soon as its command and sandbox are known, beside the import, which it needs none of until it is asked
    ``initialize``. Seen in the gateway's own trace (an audit hook): its first import of the SDK waits for the
    server's process, which, started after that import, never came."""
    traced, server, said = tmp_path / "traced.py", tmp_path / "first.py", tmp_path / "said"
    traced.write_text(TRACED)
    server.write_text('import runpy\nrunpy.run_module("e2e._plain_stdio", run_name="__main__", alter_sys=True)\n')
    program = (sys.executable, str(traced), str(server), str(said))
    command = shlex.join([sys.executable, str(server)])
    with gateway_process([], "--stdio", command, environ=SERVER_PATH, program=program) as gateway:
        assert httpx.get(gateway.url("/readyz"), timeout=30).status_code == 200
    assert said.read_text() == "started"


def test_conversations_opened_at_once_past_the_uid_range_are_refused_naming_it(server: str) -> None:
    """Issue 112 (4): a team's new conversations past ``--process-uids`` (two uids: the shared process's and one
    more, where ``--max-processes`` is 5) got ``-32603`` "no free uid", as a server that failed, not a limit. Now
    each of those opened at once that finds no uid free, 2025 transport sessions and 2026 creates alike, gets the
    documented ``-32011`` with when to retry, naming the limit, its key and its value; one is served."""
    _sealed.needs("root")
    range_ = uids(428, 2)
    options = ("--process-uids", range_, "--max-processes", "5", "--processes", "per-conversation")
    with _sealed.gateway(server, *options) as gateway, httpx.Client(timeout=30) as http, ThreadPoolExecutor(8) as pool:
        url = gateway.url()

        def opened(era: str) -> dict[str, Any]:
            if era == "2026":
                body = modern_request("sessions/create")
                return result_of(http.post(url, json=body, headers=modern_headers(body)), 1)
            call = legacy_request("tools/call", {"name": "whoami", "arguments": {}}, id=3)
            return result_of(http.post(url, json=call, headers=legacy_initialize(http, url)), 3)

        answers = list(pool.map(opened, ["2025", "2026"] * 4))
    assert sum("result" in answer for answer in answers) == 1, answers
    said = f"Too many server processes: no free uid in --process-uids {range_} (key process-uids)"
    refusals = [answer["error"] for answer in answers if "error" in answer]
    assert all(error["code"] == -32011 and error["message"].startswith(said) for error in refusals), refusals
