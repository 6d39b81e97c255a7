"""``mcp-sessions keygen`` and ``mcp-sessions inspect``: keys a server accepts, tokens explained, secrets kept."""

from __future__ import annotations

import io
import json
import re
import shlex
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import jwt
import pytest
from starlette.responses import PlainTextResponse

from mcp_sessions import KeySet, MCPSessionMiddleware, SessionKey
from mcp_sessions._cli import main
from mcp_sessions._version import __version__

ROOT = Path(__file__).resolve().parents[2]
SECRET = "a-test-secret-that-is-long-enough-0123456789"


def run(*argv: str, stdin: str = "", environ: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdin=io.StringIO(stdin), stdout=out, stderr=err, environ=environ or {})
    return code, out.getvalue(), err.getvalue()


def env_value(line: str) -> tuple[str, str]:
    """NAME and value of an env line, read the way a shell reads it."""
    [assignment] = shlex.split(line)
    name, _, value = assignment.partition("=")
    return name, value


async def ok_app(scope: Any, receive: Any, send: Any) -> None:
    await PlainTextResponse("ok")(scope, receive, send)


# -- keygen ------------------------------------------------------------------------------------------------


def test_keygen_default_is_an_hs256_secret_the_middleware_accepts() -> None:
    code, out, err = run("keygen")

    name, secret = env_value(out)
    assert (code, name, err) == (0, "MCP_SESSIONS_SECRET", "")
    assert len(secret) >= 43
    keys = MCPSessionMiddleware.from_env(ok_app, environ={name: secret}).keys
    token, claims = keys.mint_session_token(ttl=60)
    assert keys.verify_session_token(token) == claims
    assert run("keygen")[1] != out  # a new secret every time


@pytest.mark.parametrize(
    ("argv", "algorithm", "kid"),
    [
        (["--kid", "2026-11"], "HS256", "2026-11"),
        (["--alg", "ES256", "--kid", "es-1"], "ES256", "es-1"),
        (["--alg", "Ed25519"], "EdDSA", None),
        (["--alg", "eddsa", "--kid", "ed"], "EdDSA", "ed"),
    ],
)
def test_keygen_env_line_is_a_key_set_the_middleware_accepts(argv: list[str], algorithm: str, kid: str | None) -> None:
    code, out, _ = run("keygen", *argv)

    name, value = env_value(out)
    assert (code, name) == (0, "MCP_SESSIONS_KEYS")
    keys = MCPSessionMiddleware.from_env(ok_app, environ={name: value}).keys
    [key] = keys.keys
    assert key.algorithm == algorithm
    assert key.can_sign
    assert key.kid == kid if kid else key.kid.startswith(("hs-", "es-", "ed-"))
    token, claims = keys.mint_session_token(ttl=60)
    assert keys.verify_session_token(token) == claims


def test_keygen_writes_private_keys_owner_only_and_a_public_jwks_for_verifiers(tmp_path: Path) -> None:
    private, public = tmp_path / "signer.jwks", tmp_path / "verifier.jwks"
    code, out, err = run(
        "keygen",
        "--alg",
        "ES256",
        "--kid",
        "k1",
        "--format",
        "jwks",
        "--out",
        str(private),
        "--public-out",
        str(public),
    )

    assert (code, out) == (0, "")  # nothing secret on the terminal
    assert "k1" in err
    assert str(private) in err
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    [signing] = json.loads(private.read_text())["keys"]
    [verifying] = json.loads(public.read_text())["keys"]
    assert {"kty", "kid", "alg", "use", "d"} <= signing.keys()
    assert "d" not in verifying
    assert verifying["kid"] == "k1"

    signer = KeySet.from_config(f"@{private}")
    token, _ = signer.mint_session_token(ttl=60)
    code, report, _ = run("inspect", "--keys", f"@{public}", stdin=token)
    assert code == 0
    assert "VALID" in report
    assert "INVALID" not in report


def test_keygen_never_overwrites_unless_forced_and_then_tightens_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "key.env"
    target.write_text("old")
    target.chmod(0o644)

    code, _, err = run("keygen", "--out", str(target))
    assert code == 2
    assert "exists" in err
    assert target.read_text() == "old"

    code, _, _ = run("keygen", "--out", str(target), "--force")
    assert code == 0
    assert target.read_text().startswith("MCP_SESSIONS_SECRET=")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_keygen_refuses_a_public_file_it_must_not_or_cannot_write(tmp_path: Path) -> None:
    public = tmp_path / "verifier.jwks"
    public.write_text("old")
    argv = ["keygen", "--alg", "EdDSA", "--out", str(tmp_path / "signer.jwks")]

    code, _, err = run(*argv, "--public-out", str(public))
    assert code == 2
    assert "exists" in err
    assert "--force" in err
    assert public.read_text() == "old"

    code, _, err = run(*argv, "--public-out", str(tmp_path / "missing" / "verifier.jwks"))
    assert code == 2
    assert "cannot write" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--alg", "RS256"], "unknown --alg"),
        (["--public-out", "x.jwks"], "no public part"),
    ],
)
def test_keygen_usage_errors(argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run("keygen", *argv)
    assert (code, out) == (2, "")
    assert message in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["gateway", "--stdi", "x"], "mcp-sessions gateway: unrecognized arguments: --stdi x "),
        (["gateway", "--stdoi", "x"], "mcp-sessions gateway: unrecognized arguments: --stdoi x "),
        (["gateway", "--upstream", "http://127.0.0.1:9/mcp", "--bogus"], "mcp-sessions gateway: unrecognized "),
        (["gateway", "--process-memory"], "mcp-sessions gateway: argument --process-memory: expected one argument "),
        (["keygen", "--al", "ES256"], "mcp-sessions keygen: unrecognized arguments: --al ES256 "),
        (["nosuch"], "mcp-sessions: argument COMMAND: invalid choice: 'nosuch' "),
    ],
)
def test_a_usage_error_is_one_line_naming_the_command_and_a_flag_only_by_its_whole_name(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        main(argv, environ={})
    out, err = capsys.readouterr()
    assert (ended.value.code, out) == (2, "")
    assert err.startswith(said)
    assert err.count("\n") == 1
    assert err.rstrip().endswith("--help shows them)") or err.rstrip().endswith("--help shows how it is used)")


def test_gateway_without_a_server_says_which_flags_name_one() -> None:
    code, out, err = run("gateway")
    assert (code, out, err) == (
        2,
        "",
        "mcp-sessions gateway: one of --upstream URL, --stdio COMMAND or --config FILE is required\n",
    )


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["--version"], environ={})
    assert (ended.value.code, capsys.readouterr().out) == (0, f"mcp-sessions {__version__}\n")


# -- inspect --------------------------------------------------------------------------------------------------


@pytest.fixture
def keys() -> KeySet:
    return KeySet([SessionKey.from_secret(SECRET, kid="k1")])


def test_inspect_decodes_without_keys_and_never_prints_the_token(keys: KeySet) -> None:
    token, claims = keys.mint_session_token(ttl=3600)
    for argv in (["inspect"], ["inspect", "-"], ["inspect", token]):
        code, out, err = run(*argv, stdin=token)
        assert code == 0
        assert token not in out + err
        assert f'sid: "{claims.session_id}"' in out
        assert 'typ: "mcp-session+jwt"' in out
        assert "kind: session id" in out
        assert "verification: not checked" in out
        assert "in 59 min" in out or "in 1 h" in out


def test_inspect_verifies_with_keys_from_the_environment(keys: KeySet) -> None:
    token, _ = keys.mint_session_token(ttl=3600)
    code, out, _ = run("inspect", stdin=token, environ={"MCP_SESSIONS_KEYS": f"k1:{SECRET}"})
    assert code == 0
    assert "verification: VALID: signed by key 'k1'" in out

    code, out, _ = run("inspect", "--json", stdin=token, environ={"MCP_SESSIONS_KEYS": f"k1:{SECRET}"})
    report = json.loads(out)
    assert (report["valid"], report["reason"], report["kind"]) == (True, None, "session id")
    assert report["header"]["kid"] == "k1"


def test_inspect_state_tokens(keys: KeySet) -> None:
    _, claims = keys.mint_session_token(ttl=60)
    state = keys.sign_state(claims.session_id, {"mode": "terse"})
    code, out, _ = run("inspect", "--secret", SECRET, stdin=state)

    assert code == 1  # --secret derives its own kid, not k1
    code, out, _ = run("inspect", "--keys", f"k1:{SECRET}", stdin=state)
    assert code == 0
    assert "kind: session state" in out
    assert '"mode": "terse"' in out
    assert f"bound to sid '{claims.session_id}'" in out


def forge(keys: KeySet, changes: dict[str, Any], *, typ: str = "mcp-session+jwt", kid: str = "k1") -> str:
    now = int(time.time())
    payload = {"iss": "mcp-sessions", "aud": "mcp-sessions", "sid": "abcdefghijklmnopqrstuvwx", "iat": now}
    payload["exp"] = now + 600
    payload.update(changes)
    payload = {k: v for k, v in payload.items() if v is not None}
    return jwt.encode(payload, SECRET.encode(), algorithm="HS256", headers={"kid": kid, "typ": typ})


INVALID = [
    pytest.param(
        {"iat": 1_000_000, "exp": 1_000_600}, {}, "expired", "it expired at 1970-01-12T13:56:40Z", id="expired"
    ),
    pytest.param({}, {"kid": "k9"}, "unknown key id", "its kid 'k9' is none of the keys given ('k1')", id="kid"),
    pytest.param({"aud": "elsewhere"}, {}, "wrong audience", "its aud 'elsewhere' is not 'mcp-sessions'", id="aud"),
    pytest.param({"iss": "evil"}, {}, "wrong issuer", "its iss 'evil' is not 'mcp-sessions'", id="iss"),
    pytest.param({}, {"typ": "JWT"}, "wrong token type", "its typ is 'JWT', not 'mcp-session+jwt'", id="typ"),
    pytest.param({"iat": 4_000_000_000, "exp": 4_000_000_600}, {}, "not yet valid", "check both clocks", id="future"),
    pytest.param({"sid": "x"}, {}, "malformed sid claim", "16 to 128 base64url", id="sid"),
    pytest.param({"sid": None}, {}, "missing claim sid", "'sid' is required", id="missing"),
]


@pytest.mark.parametrize(("claims", "header", "reason", "why"), INVALID)
def test_inspect_explains_why_a_token_is_invalid(
    keys: KeySet, claims: dict[str, Any], header: dict[str, str], reason: str, why: str
) -> None:
    token = forge(keys, claims, **header)
    code, out, err = run("inspect", "--keys", f"k1:{SECRET}", stdin=token)

    assert code == 1
    assert f"verification: INVALID ({reason}): " in out
    assert why in out
    assert "-32043" in out
    assert token not in out + err


def test_inspect_explains_a_signature_from_another_key_with_the_same_kid(keys: KeySet) -> None:
    token, _ = keys.mint_session_token(ttl=60)
    code, out, _ = run("inspect", "--keys", "k1:" + "b" * 40, stdin=token)
    assert code == 1
    assert "INVALID (bad signature): the signature does not match key 'k1'" in out


def test_inspect_explains_an_algorithm_the_key_does_not_allow(tmp_path: Path) -> None:
    code, out, _ = run("keygen", "--alg", "ES256", "--kid", "k1", "--format", "jwks")
    jwks = tmp_path / "keys.jwks"
    jwks.write_text(out)
    # An HS256 token naming the ES256 key's kid: the classic algorithm-confusion forgery.
    token = jwt.encode(
        {"sid": "abcdefghijklmnopqrstuvwx"}, SECRET.encode(), headers={"kid": "k1", "typ": "mcp-session+jwt"}
    )
    code, out, _ = run("inspect", "--keys", f"@{jwks}", stdin=token)
    assert code == 1
    assert "says alg 'HS256', but key 'k1' is pinned to ES256" in out


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("not-a-token", "expected 3 dot-separated parts"),
        ("a.b.c", "not base64url-encoded JSON"),
        ("W10.W10.x", "objects"),
    ],
)
def test_inspect_refuses_what_is_not_a_jws(token: str, message: str) -> None:
    code, out, _ = run("inspect", stdin=token)
    assert code == 1
    assert message in out


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (["inspect"], {}, "no token given"),
        (["inspect", "--keys", "k1:short"], {}, "at least 32 bytes"),
        (["inspect"], {"MCP_SESSIONS_KEYS": "{not json"}, "not valid JSON"),
    ],
)
def test_inspect_usage_errors(argv: list[str], environ: dict[str, str], message: str, keys: KeySet) -> None:
    token = "" if argv == ["inspect"] and not environ else keys.mint_session_token(ttl=60)[0]
    code, out, err = run(*argv, stdin=token, environ=environ)
    assert (code, out) == (2, "")
    assert message in err
    assert "short" not in err.replace("--keys", "")  # key material is never quoted back


def test_a_key_set_of_public_keys_only_can_verify(tmp_path: Path) -> None:
    private, public = tmp_path / "signer.jwks", tmp_path / "verifier.jwks"
    assert run("keygen", "--alg", "EdDSA", "--kid", "k1", "--out", str(private), "--public-out", str(public))[0] == 0
    token, claims = KeySet.from_config(private.read_text().partition("=")[2].strip("'\n")).mint_session_token(ttl=60)

    verifier = KeySet.from_config(f"@{public}")
    assert verifier.verify_session_token(token) == claims


# -- the command ------------------------------------------------------------------------------------------------


def test_the_console_script_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["mcp-sessions"] == "mcp_sessions._cli:main"


def test_it_runs_as_a_module() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mcp_sessions", "keygen", "--alg", "EdDSA"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('MCP_SESSIONS_KEYS=\'{"keys":[{"kty":"OKP"')


def test_the_help_and_the_docs_name_every_command() -> None:
    helped = subprocess.run([sys.executable, "-m", "mcp_sessions", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0, helped.stderr
    listed = helped.stdout.split("COMMAND\n", 1)[1]
    named = set(re.findall(r"^    (\w+)", listed, re.MULTILINE))
    assert named == {"keygen", "inspect", "create", "delete", "gateway", "connect", "sessions", "grants", "conformance"}
    assert "Keys and tokens" not in helped.stdout
    section = (ROOT / "docs" / "client.md").read_text().split("## The `mcp-sessions` command", 1)[1]
    assert all(f"`{command}`" in section.split("\n\n**")[0] for command in named)


def test_a_command_is_imported_only_when_it_runs() -> None:
    code = (
        "import sys; from mcp_sessions._cli import main; main(['inspect', 'x.y.z']); "
        "print(sorted(m for m in sys.modules if m.startswith('mcp_sessions._cli.')))"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert ran.stdout.splitlines()[-1] == "['mcp_sessions._cli._inspect']", ran.stderr


@pytest.mark.parametrize("wire", ["strawman", "sep1364-alt1", "sep1364-alt2"])
def test_the_gateway_refuses_to_start_with_a_removed_wire(wire: str) -> None:
    stderr = io.StringIO()
    environ = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_PROFILES": f"draft,{wire}"}
    code = main(["gateway", "--upstream", "http://127.0.0.1:9/mcp"], stderr=stderr, environ=environ)

    assert code == 2
    assert f"the session wire profile '{wire}' was removed" in stderr.getvalue()
    assert "docs/profiles.md" in stderr.getvalue()
